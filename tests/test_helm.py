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

from function import manifests, stack
from function.helm import Charts, Rendered, helm_version, release_chart, render_release
from function.model import Accelerator, Cloud, StackKind
from generator import chart_packages
from tests.support.crossplane import desired
from tests.support.overrides import BANK_HOST, STACKS, bank, ec, overridden, policy_input
from tests.support.parity import chart_repositories, reference_source
from tests.support.repo import REPO
from tests.support.xr import make_xr
from upgrading import refresh as upgrading_refresh

HELM = REPO / "facts" / "helm"
CHARTS = Charts(HELM)
EXAMPLES = REPO / "example" / "expected"
#: Example Releases pinned to a chart version the repository does not keep packaged: prod-hold holds
#: cert-manager at v1.17.1, what v0.3.1 clusters run; dynamo-dev-next stages Grove and KAI ahead
#: (facts/staged-charts.yaml). The reference sources hold only the pinned charts.
STAGED = yaml.safe_load((REPO / "facts" / "staged-charts.yaml").read_text())
NOT_PACKAGED = {("cert-manager", "v1.17.1")} | {(c["chart"], c["version"]) for c in STAGED["components"].values()}


def releases(resources: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in resources.items() if v["kind"] == "Release" and "managementPolicies" not in v["spec"]}


def installed(resources: dict[str, dict[str, Any]]) -> dict[str, list[Rendered]]:
    """Every Release rendered by real Helm, by key (a refusal fails the test with Helm's message)."""
    return {key: render_release(body, CHARTS) for key, body in sorted(releases(resources).items())}


# --- what an object holds ---------------------------------------------------------------------------------

#: A ConfigMap value that is a YAML document of its own (KAI's kai-config Config).
_YAML_DOC = re.compile(r"^\s*[A-Za-z]+:")


def _registries(node: Any) -> Iterator[str]:
    """The registries an operator builds or pulls driver images into (DeviceConfig ``baseImageRegistry``)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "baseImageRegistry" and isinstance(v, str) and v:
                yield v
            yield from _registries(v)
    elif isinstance(node, list):
        for item in node:
            yield from _registries(item)


def images(obj: dict[str, Any]) -> list[str]:
    """Every image an object runs or hands a controller (``function images --charts`` reads the same),
    and the registries an operator builds into."""
    return [*manifests.images(obj), *_registries(obj.get("spec"))]


def in_mirror(ref: str) -> bool:
    return ref.startswith(BANK_HOST + "/")


def pdb_budgets(objects: list[Rendered]) -> dict[str, list[str]]:
    return {
        f"{r.template} {r.identity[2]}": sorted(k for k in ("minAvailable", "maxUnavailable") if k in r.object["spec"])
        for r in objects
        if r.object.get("kind") == "PodDisruptionBudget"
    }


def operator_budgets(objects: list[Rendered]) -> dict[str, list[str]]:
    """The budgets of PodDisruptionBudgets an operator builds from a resource the chart hands it in a
    ConfigMap (KAI: the kai-config Config its post-install hook applies, whose admission
    podDisruptionBudget the operator turns into the PDB; templates/_helpers.tpl kai-scheduler.kai-config)."""
    found: dict[str, list[str]] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "podDisruptionBudget" and isinstance(v, dict):
                    found[where] = sorted(f for f in ("minAvailable", "maxUnavailable") if f in v)
                else:
                    walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for r in objects:
        if r.object.get("kind") == "ConfigMap":
            for name, text in (r.object.get("data") or {}).items():
                if isinstance(text, str) and _YAML_DOC.match(text):
                    for doc in yaml.safe_load_all(text):
                        walk(doc, f"{r.template} {name}")
    return found


# --- scenarios --------------------------------------------------------------------------------------------


@functools.cache
def loaded(cloud: str, accelerator: str, kind: str) -> stack.Stack:
    got = stack.load(Cloud(cloud), Accelerator(accelerator), StackKind(kind))
    assert got is not None
    return got


def shortcuts_document(cloud: str, accelerator: str, kind: str, budget: str) -> dict[str, Any]:
    """Every shortcut on every component that declares it: replicas, resources, a budget of one kind."""
    components: dict[str, Any] = {}
    for comp in loaded(cloud, accelerator, kind).components:
        entry: dict[str, Any] = {}
        if comp.replicas:
            entry["replicas"] = 2
        if comp.resources:
            entry["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
        field = "min_available" if budget == "minAvailable" else "max_unavailable"
        # (A budget kind a chart lacks is a Fatal: KAI's admission PDB takes maxUnavailable only.)
        if comp.pod_disruption_budgets and all(getattr(p, field) for p in comp.pod_disruption_budgets):
            entry["podDisruptionBudget"] = {budget: 1}
        if entry:
            components[comp.key] = entry
    return {"components": components}


def bank_document(cloud: str, accelerator: str, kind: str) -> dict[str, Any]:
    """The bank's strict mirror, with per-pool drivers where the stack's GPU Operator manages the driver."""
    doc = bank()
    if loaded(cloud, accelerator, kind).driver.source == "gpu-operator":
        version = "6.4" if accelerator == "AMD" else "580.105.08"
        doc["drivers"] = [{"name": "pool-a", "nodeSelector": {"modelplane.ai/pool": "a"}, "version": version}]
    return doc


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), STACKS)
def test_every_release_installs_plain(cloud: str, accelerator: str, kind: str) -> None:
    got = installed(desired(overridden(make_xr(cloud, accelerator, stack=kind))))
    assert got and all(got.values())
    for key, objects in got.items():
        budgets = pdb_budgets(objects).values()
        assert all(b in (["maxUnavailable"], ["minAvailable"]) for b in budgets), key


@pytest.mark.parametrize("budget", ["minAvailable", "maxUnavailable"])
@pytest.mark.parametrize(("cloud", "accelerator", "kind"), STACKS)
def test_every_shortcut_on_every_component_installs_with_one_budget_field(
    cloud: str, accelerator: str, kind: str, budget: str
) -> None:
    document = shortcuts_document(cloud, accelerator, kind, budget)
    got = installed(desired(overridden(make_xr(cloud, accelerator, stack=kind), ec("shortcuts", document))))
    budgeted = [k for k, v in document["components"].items() if "podDisruptionBudget" in v and k in got]
    for key in budgeted:
        budgets = pdb_budgets(got[key]) or operator_budgets(got[key])
        assert budgets, f"{key}: a budget was asked for and Helm rendered no PodDisruptionBudget"
        assert all(b == [budget] for b in budgets.values()), (key, budgets)


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), STACKS)
def test_under_the_strict_bank_mirror_every_image_helm_renders_is_in_the_mirror(
    cloud: str, accelerator: str, kind: str
) -> None:
    resources = desired(
        overridden(
            make_xr(cloud, accelerator, stack=kind),
            ec("bank", bank_document(cloud, accelerator, kind)),
            input=policy_input(),
        )
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
    assert not_packaged == {
        "prod-eu-1+prod-hold cert-manager",
        "prod-eu-1+all cert-manager",
        "dev-us-1+dynamo-dev-next grove",
        "dev-us-1+dynamo-dev-next kai-scheduler",
    }


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
        if release_chart(body) in {(c["chart"], c["version"]) for c in held}:
            assert render_release(body, charts), (case, key)
            checked += 1
    assert checked == 2


def test_grove_and_kai_staged_ahead_on_dev_install_from_their_released_charts(tmp_path: Path) -> None:
    """example/dynamo/dynamo-dev-next.yaml moves Grove and KAI together: both install under real Helm
    from their charts packaged as their releases package them, where the git snapshots are at hand."""
    sources = chart_repositories(sorted({c["source"]["repository"] for c in STAGED["components"].values()}))
    upgrading_refresh.charts(STAGED, sources, tmp_path)
    charts = Charts(tmp_path)
    staged = {(c["chart"], c["version"]) for c in STAGED["components"].values()}
    rendered: dict[str, list[Rendered]] = {}
    for case, key, body in _example_releases():
        if release_chart(body) in staged:
            assert case == "dev-us-1+dynamo-dev-next", case
            rendered[key] = render_release(body, charts)
    assert set(rendered) == {"grove", "kai-scheduler"}
    kinds = {r.object["kind"] for r in rendered["grove"]}
    assert {"CustomResourceDefinition", "Deployment"} <= kinds  # the CRDs its release copies into crds/
    refs = [ref for r in rendered["grove"] + rendered["kai-scheduler"] for ref in images(r.object)]
    assert "ghcr.io/ai-dynamo/grove/grove-operator:v0.1.0-alpha.7" in refs
    assert any(ref.startswith("ghcr.io/kai-scheduler/kai-scheduler/") and ref.endswith(":v0.17.0") for ref in refs)


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
