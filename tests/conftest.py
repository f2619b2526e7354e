"""Fixtures shared by every test module; the helpers they import live in tests/support/."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from crossplane.function import logging
from hypothesis import settings

from function.helm import Charts
from function.main import cli
from tests.support import k8s_schema
from tests.support.profiles import PROFILE
from tests.support.repo import REPO
from tests.support.serve import Invoke, serving
from tests.support.xr import XRD

settings.load_profile(PROFILE)


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """The function server (``function --insecure``) over gRPC on loopback: one process for the whole run.

    Started the first time a test asks for it. A test that needs other flags or
    environment starts its own with ``tests.support.serve.serving``.
    """
    with serving(["function.main", "--insecure"]) as (target, _):
        yield target


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """The ``function`` command in process through click's CliRunner, from the repository root.

    Tests about the real process (serving, exit codes of the console script)
    use ``tests.support.serve.cli`` instead.
    """
    monkeypatch.chdir(REPO)  # the tests name example files from the repository root
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args))

    return run


@pytest.fixture(scope="session")
def xr_index(tmp_path_factory: pytest.TempPathFactory) -> k8s_schema.CRDIndex:
    """The XRD as the CRD Crossplane derives from it (plus the fields Crossplane adds)."""
    version = copy.deepcopy(XRD["spec"]["versions"][0])
    schema = version["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["crossplane"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    schema["properties"].update(apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": XRD["metadata"]["name"]},
        "spec": {
            "group": XRD["spec"]["group"],
            "names": XRD["spec"]["names"],
            "scope": XRD["spec"]["scope"],
            "versions": [{**version, "storage": True}],
        },
    }
    path: Path = tmp_path_factory.mktemp("xrd") / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    return k8s_schema.CRDIndex([path])


@pytest.fixture(scope="session")
def example_charts(tmp_path_factory: pytest.TempPathFactory) -> Charts:
    """The charts of ``example/charts/`` (the substitution examples add them), packaged by real Helm as
    ``helm package`` publishes them: a chart directory ``render_release`` reads, as ``facts/helm/``."""
    import helm_python  # noqa: PLC0415 - real Helm, a dev dependency: imported by the tests that render

    packaged = tmp_path_factory.mktemp("example-charts")
    for chart in sorted((REPO / "example" / "charts").iterdir()):
        helm_python.package(chart, destination=packaged)
    return Charts(packaged)


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    logging.configure(logging.Level.DISABLED)
