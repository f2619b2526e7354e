"""Every composed Release, on every stack and scenario, installs as real Helm installs it.

Real Helm is helm-python-sdk (Helm v4's Go SDK, the Helm provider-helm builds
with), loading the pinned charts as their releases publish them
(``facts/helm/``, written by ``./dev refresh``). For each Release Helm must
accept the values (``values.schema.json`` included) and render; every
PodDisruptionBudget it renders must carry one budget field (the API server
refuses both, ``pkg/apis/policy/validation``); and under the bank's strict
mirror every image in what Helm renders, and in the raw Objects, must come
from the mirror: containers and init containers at any depth, and the image
fields of operator resources (ClusterPolicy, NVIDIADriver, DeviceConfig,
EnvoyProxy), found by reading the objects, not by the stack's declared paths.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from function import stack
from function.helm import Charts, Rendered, helm_version, release_chart, render_release
from function.model import Accelerator, Cloud
from generator import chart_packages
from tests.support.crossplane import desired
from tests.support.overrides import BANK_HOST, PAIRS, bank, ec, overridden, policy_input
from tests.support.parity import chart_repositories, reference_source
from tests.support.repo import REPO
from tests.support.xr import make_xr
from upgrading import refresh as upgrading_refresh

HELM = REPO / "facts" / "helm"
CHARTS = Charts(HELM)
EXAMPLES = REPO / "example" / "expected"
#: Example Releases pinned to a chart version the repository does not keep packaged: prod-hold holds
#: cert-manager at v1.17.1, what v0.3.1 clusters run; the reference sources hold only the pinned charts.
NOT_PACKAGED = {("cert-manager", "v1.17.1")}


def releases(resources: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in resources.items() if v["kind"] == "Release" and "managementPolicies" not in v["spec"]}


def installed(resources: dict[str, dict[str, Any]]) -> dict[str, list[Rendered]]:
    """Every Release rendered by real Helm, by key (a refusal fails the test with Helm's message)."""
    return {key: render_release(body, CHARTS) for key, body in sorted(releases(resources).items())}


# --- what an object holds ---------------------------------------------------------------------------------

#: Keys whose string value is an image reference wherever they appear (``image``, ``initContainerImage``,
#: ``driverImage``...), and keys that name the registry an operator builds or pulls into.
_IMAGE_KEY = re.compile(r"(?i)^(.*image|baseImageRegistry)$")
#: A ConfigMap value that is a YAML document of its own (Envoy Gateway's envoy-gateway.yaml, KAI's configs).
_YAML_DOC = re.compile(r"^\s*[A-Za-z]+:")


def _walk(node: Any, key: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("enabled") is False:
            # An operand its operator resource switches off is never deployed (ClusterPolicy
            # <operand>.enabled: gpu-operator controllers/state_manager.go skips it); its image is unused.
            return
        # An operand split into repository (the registry path) and image (ClusterPolicy, NVIDIADriver).
        repo, image = node.get("repository"), node.get("image")
        if isinstance(repo, str) and isinstance(image, str) and repo and image and "/" not in image:
            yield f"{repo}/{image}"
        for k, v in node.items():
            if k == "image" and isinstance(repo, str) and repo and isinstance(v, str) and "/" not in v:
                continue
            if k == "env" and isinstance(v, list):
                yield from (e["value"] for e in v if _image_env(e))
            yield from _walk(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, key)
    elif isinstance(node, str) and node and _IMAGE_KEY.match(key):
        yield node


def _image_env(entry: Any) -> bool:
    """An env var handing a controller an image to run (KMM's RELATED_IMAGE_*, not its *_PULL_SECRET)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("value"), str) or not entry["value"]:
        return False
    name = str(entry.get("name", "")).upper()
    return "IMAGE" in name and not name.endswith(("SECRET", "POLICY"))


def images(obj: dict[str, Any]) -> list[str]:
    """Every image reference an object names, ConfigMap data documents included."""
    found = list(_walk({k: v for k, v in obj.items() if k != "metadata"}))
    if obj.get("kind") == "ConfigMap":
        for text in (obj.get("data") or {}).values():
            if isinstance(text, str) and _YAML_DOC.match(text):
                try:
                    found += _walk(yaml.safe_load(text))
                except yaml.YAMLError:
                    continue
    return found


def in_mirror(ref: str) -> bool:
    return ref.startswith(BANK_HOST + "/")


def pdb_budgets(objects: list[Rendered]) -> dict[str, list[str]]:
    return {
        f"{r.template} {r.identity[2]}": sorted(k for k in ("minAvailable", "maxUnavailable") if k in r.object["spec"])
        for r in objects
        if r.object.get("kind") == "PodDisruptionBudget"
    }


# --- scenarios --------------------------------------------------------------------------------------------


@functools.cache
def loaded(cloud: str, accelerator: str) -> stack.Stack:
    got = stack.load(Cloud(cloud), Accelerator(accelerator))
    assert got is not None
    return got


def shortcuts_document(cloud: str, accelerator: str, budget: str) -> dict[str, Any]:
    """Every shortcut on every component that declares it: replicas, resources, a budget of one kind."""
    components: dict[str, Any] = {}
    for comp in loaded(cloud, accelerator).components:
        entry: dict[str, Any] = {}
        if comp.replicas:
            entry["replicas"] = 2
        if comp.resources:
            entry["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
        if comp.pod_disruption_budgets:
            entry["podDisruptionBudget"] = {budget: 1}
        if entry:
            components[comp.key] = entry
    return {"components": components}


def bank_document(cloud: str, accelerator: str) -> dict[str, Any]:
    """The bank's strict mirror, with per-pool drivers where the stack's GPU Operator manages the driver."""
    doc = bank()
    if loaded(cloud, accelerator).driver.source == "gpu-operator":
        version = "6.4" if accelerator == "AMD" else "580.105.08"
        doc["drivers"] = [{"name": "pool-a", "nodeSelector": {"modelplane.ai/pool": "a"}, "version": version}]
    return doc


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_every_release_installs_plain(cloud: str, accelerator: str) -> None:
    got = installed(desired(overridden(make_xr(cloud, accelerator))))
    assert got and all(got.values())
    for key, objects in got.items():
        budgets = pdb_budgets(objects).values()
        assert all(b in (["maxUnavailable"], ["minAvailable"]) for b in budgets), key


@pytest.mark.parametrize("budget", ["minAvailable", "maxUnavailable"])
@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_every_shortcut_on_every_component_installs_with_one_budget_field(
    cloud: str, accelerator: str, budget: str
) -> None:
    document = shortcuts_document(cloud, accelerator, budget)
    got = installed(desired(overridden(make_xr(cloud, accelerator), ec("shortcuts", document))))
    budgeted = [k for k, v in document["components"].items() if "podDisruptionBudget" in v and k in got]
    for key in budgeted:
        budgets = pdb_budgets(got[key])
        assert budgets, f"{key}: a budget was asked for and Helm rendered no PodDisruptionBudget"
        assert all(b == [budget] for b in budgets.values()), (key, budgets)


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_under_the_strict_bank_mirror_every_image_helm_renders_is_in_the_mirror(cloud: str, accelerator: str) -> None:
    resources = desired(
        overridden(make_xr(cloud, accelerator), ec("bank", bank_document(cloud, accelerator)), input=policy_input())
    )
    checked: list[str] = []
    outside: list[str] = []
    for key, objects in installed(resources).items():
        for rendered in objects:
            for ref in images(rendered.object):
                checked.append(ref)
                if not in_mirror(ref):
                    outside.append(f"{key} {rendered.template} {'/'.join(rendered.identity)}: {ref}")
    for key, body in resources.items():
        if body["kind"] == "Object":
            manifest = body["spec"]["forProvider"]["manifest"]
            for ref in images(manifest):
                checked.append(ref)
                if not in_mirror(ref):
                    outside.append(f"{key} {manifest['kind']}: {ref}")
    assert outside == []
    assert len(checked) >= 20


def _example_releases() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if path.name == "cases.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Release" and "managementPolicies" not in doc["spec"]:
                yield path.stem, doc["metadata"]["annotations"]["crossplane.io/composition-resource-name"], doc


def test_every_release_of_every_example_installs(example_charts: Charts) -> None:
    rendered = 0
    not_packaged: set[str] = set()
    for case, key, body in _example_releases():
        if release_chart(body) in NOT_PACKAGED:
            not_packaged.add(f"{case} {key}")
            continue
        # A chart a document adds (example/substitution/) is one of example/charts/, packaged by Helm.
        name, version = release_chart(body)
        added = (example_charts.directory / f"{name}-{version}.tgz").is_file()
        objects = render_release(body, example_charts if added else CHARTS)
        assert objects, (case, key)
        rendered += 1
    assert rendered >= 60
    assert not_packaged == {"prod-eu-1+prod-hold cert-manager", "prod-eu-1+all cert-manager"}


def test_a_release_held_at_v031s_version_installs_from_v031s_chart(tmp_path: Path) -> None:
    """The examples' hold (cert-manager at v1.17.1): its chart is not kept, so it is packaged from its
    repository as upgrading.refresh packages v0.3.1's charts, where the git snapshots are at hand."""
    v031 = yaml.safe_load((REPO / "facts" / "v0.3.1.yaml").read_text())
    held = [c for c in v031["components"].values() if (c.get("chart"), c.get("version")) in NOT_PACKAGED]
    sources = chart_repositories(sorted({c["source"]["repository"] for c in held}))
    upgrading_refresh.charts(v031, sources, tmp_path)
    charts = Charts(tmp_path)
    checked = 0
    for case, key, body in _example_releases():
        if release_chart(body) in NOT_PACKAGED:
            assert render_release(body, charts), (case, key)
            checked += 1
    assert checked == 2


def test_the_helm_the_tests_render_with_is_the_one_the_newest_provider_helm_builds_with() -> None:
    builds = yaml.safe_load((REPO / "facts" / "control-plane.yaml").read_text())["provider-helm"]["helm"]
    newest = max(builds, key=lambda tag: tuple(int(p) for p in tag.removeprefix("v").split(".")))
    assert helm_version() == builds[newest]


def test_the_packaged_charts_are_every_chart_a_stack_installs() -> None:
    wanted = {
        (c.chart.name, c.chart.version)
        for pair in stack.available()
        for c in loaded(*pair).components
        if c.chart is not None
    }
    for name, version in sorted(wanted):
        assert CHARTS.path(name, version).is_file()


def test_the_packaged_charts_match_their_sources() -> None:
    # Parity: skipped on a clone with no reference sources beside it.
    expected = chart_packages.packages(reference_source("charts"))
    kept = {p.name: p.read_bytes() for p in HELM.iterdir() if p.is_file()}
    stale = sorted(n for n in expected.keys() | kept.keys() if expected.get(n) != kept.get(n))
    assert stale == [], f"facts/helm is stale for {stale}: run ./dev refresh"


def test_packaging_the_same_sources_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    chart = tmp_path / "demo-1.0.0"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.0.0\n")
    (chart / "values.yaml").write_text("replicas: 1\n")
    (chart / "templates" / "cm.yaml").write_text("kind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\n")
    first = chart_packages.packages(tmp_path)
    (chart / "values.yaml").touch()
    assert chart_packages.packages(tmp_path) == first
    assert set(first) == {"demo-1.0.0.tgz", chart_packages.SOURCES}
