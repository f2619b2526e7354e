"""Scale-out: the DeploymentRuntimeConfig example is valid, and the load script runs (bounded)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import yaml

from tests.support.k8s_schema import CRDIndex
from tests.support.repo import EXAMPLE, REPO, load_docs

EXTRA_CRDS = REPO / "facts" / "extra-crds"


def _index() -> CRDIndex:
    return CRDIndex(sorted(p for p in EXTRA_CRDS.glob("*.yaml") if p.name != "SOURCES.yaml"))


def test_runtime_config_example_is_valid_and_used() -> None:
    index = _index()
    [config] = load_docs(EXAMPLE / "scale-out" / "runtime-config.yaml")
    assert index.covered(config)
    assert index.validate(config) == []
    spec = config["spec"]["deploymentTemplate"]["spec"]
    assert spec["replicas"] > 1
    # Crossplane merges into the container of this name only (runtime.go ContainerName).
    assert [c["name"] for c in spec["template"]["spec"]["containers"]] == ["package-runtime"]
    [function] = load_docs(EXAMPLE / "scale-out" / "function.yaml")
    [published] = load_docs(EXAMPLE / "functions.yaml")
    assert function["metadata"]["name"] == published["metadata"]["name"]
    assert function["spec"]["package"] == published["spec"]["package"]
    assert function["spec"]["runtimeConfigRef"]["name"] == config["metadata"]["name"]
    spread = spec["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
    assert spread == {"pkg.crossplane.io/function": function["metadata"]["name"]}


def test_a_bad_runtime_config_is_caught() -> None:
    """The schema is really checked: a Deployment template without containers is refused."""
    index = _index()
    [config] = load_docs(EXAMPLE / "scale-out" / "runtime-config.yaml")
    del config["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    assert any("containers" in e for e in index.validate(config))


def test_load_script_runs_bounded() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.load", "--clients", "2", "--requests", "10", "--seconds", "5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = {line[:28].strip(): line[28:].split() for line in out.stdout.splitlines() if line[:1] in ("1", "2")}
    assert sorted(rows) == ["1 process", "2 processes, 2 ports", "2 processes, SO_REUSEPORT"], out.stdout
    assert all(0 < int(columns[0]) <= 10 for columns in rows.values()), out.stdout  # calls, within the bound


def test_extra_crds_are_the_recorded_upstream_copies() -> None:
    sources = yaml.safe_load((EXTRA_CRDS / "SOURCES.yaml").read_text())
    assert set(sources) == {p.name for p in EXTRA_CRDS.glob("*.yaml")} - {"SOURCES.yaml"}
    for name, origin in sources.items():
        assert hashlib.sha256((EXTRA_CRDS / name).read_bytes()).hexdigest() == origin["sha256"]
