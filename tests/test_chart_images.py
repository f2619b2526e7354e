"""Every image a stack can run, checked against the pinned chart sources (their inventories in facts/charts/).

Completeness: every image value of every chart a stack installs (its enabled
dependencies included) is declared in stacks/charts.yaml, or listed there as
never deployed by our configuration, with the switch that keeps it off.

The acceptance test of the bank's strict mirror (every image Helm renders is in
the mirror) is tests/test_helm.py, with real Helm; here, what the stack writes
for images controllers pick themselves (the data-plane proxy, AMD operands).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import yaml

from function import helm, stack
from function.model import Accelerator, Cloud
from function.overrides.images import qualify, split_reference
from function.paths import get_path
from generator.stackfile import ChartFacts, Charts, NotDeployed, read
from tests.support.crossplane import desired
from tests.support.overrides import BANK_HOST, PAIRS, bank, ec, overridden
from tests.support.repo import REPO
from tests.support.xr import make_xr

FACTS = REPO / "facts" / "charts"
CHARTS_HELM = helm.Charts(REPO / "facts" / "helm")
CHARTS = read(REPO / "stacks" / "charts.yaml", Charts).charts


@functools.cache
def inventory(chart: str, version: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((FACTS / f"{chart}-{version}.yaml").read_text())
    return data


def installed() -> list[tuple[str, str]]:
    """Every (chart, version) a generated stack installs."""
    charts = set()
    for loaded in stack.every():
        charts |= {(c.chart.name, c.chart.version) for c in loaded.components if c.chart is not None}
    return sorted(charts)


def _entry_paths(entry: dict[str, Any]) -> set[str]:
    """The value paths an inventory image entry holds: itself (one string) or its parts (a map)."""
    if entry["shape"] == "ref":
        return {entry["path"]}
    return {f"{entry['path']}.{part}" for part in entry["default"]}


def _declared_paths(facts: ChartFacts) -> set[str]:
    return {p for img in facts.images for p in (img.ref, img.registry, img.repository, img.tag) if p}


def _waiver(facts: ChartFacts, path: str) -> NotDeployed | None:
    return next((w for w in facts.notDeployed if path == w.path or re.match(re.escape(w.path) + r"[.\[]", path)), None)


def _effective(chart: str, version: str, rendered: dict[str, Any]) -> dict[str, Any]:
    """The values Helm renders with: real Helm coalescing the packaged chart's defaults with ours."""
    return CHARTS_HELM.chart(chart, version).merge_values(rendered)


@pytest.mark.parametrize(("chart", "version"), installed())
def test_every_image_value_of_the_chart_is_declared_or_never_deployed(chart: str, version: str) -> None:
    assert (FACTS / f"{chart}-{version}.yaml").is_file(), "run ./dev refresh: no inventory for this chart"
    facts = CHARTS[chart]
    declared = _declared_paths(facts)
    inv = inventory(chart, version)
    missing = [e["path"] for e in inv["images"] if not _entry_paths(e) & declared and _waiver(facts, e["path"]) is None]
    assert missing == [], f"{chart} {version}: image values neither declared nor listed as not deployed"
    # A dependency whose sources were not pinned cannot be inventoried: it must be switched off.
    unread = [d.get("alias", d["name"]) for d in inv["dependencies"] if d["sources"] == "not in the chart sources"]
    assert [d for d in unread if _waiver(facts, d) is None] == []
    # Every waiver names something the chart has.
    names = {e["path"] for e in inv["images"]} | set(unread)
    for waiver in facts.notDeployed:
        assert any(n == waiver.path or re.match(re.escape(waiver.path) + r"[.\[]", n) for n in names), waiver


@pytest.mark.parametrize(("chart", "version"), installed())
def test_every_pull_secret_value_the_templates_read_is_written_or_explained(chart: str, version: str) -> None:
    facts = CHARTS[chart]
    written = {
        *facts.pullSecretRefListPaths,
        *facts.pullSecretNameListPaths,
        *facts.pullSecretNamePaths,
        *facts.pullSecretRefPaths,
    }
    explained = {o.path for o in facts.otherPullSecrets}
    read_by_templates = {
        p for p in inventory(chart, version)["templateValues"] if re.search(r"pullsecret|registrysecret", p, re.I)
    }
    missing = sorted(p for p in read_by_templates - written - explained if _waiver(facts, p) is None)
    assert missing == []
    # What is written or explained is read by the chart (a stale path would write into nothing).
    # The AMD DeviceConfig's imageRegistrySecrets are read through `with` blocks, not as .Values paths.
    assert sorted(explained - read_by_templates) == []
    unread = {p for p in written - read_by_templates if not p.startswith("deviceConfig.spec.")}
    assert sorted(unread) == []


@pytest.mark.parametrize(("chart", "version"), installed())
def test_declared_image_defaults_are_the_chart_defaults(chart: str, version: str) -> None:
    values = inventory(chart, version)["values"]
    missing = object()
    for img in CHARTS[chart].images:
        for key, default in img.default.items():
            path = getattr(img, key)
            assert path is not None, (img.name, key)
            got = get_path(values, path, missing)
            # A key the chart leaves out of its values (cert-manager's image.tag) is an empty default.
            assert (default or "") == ("" if got is missing or got is None else got), (chart, img.name, path)
        for key, builtin in img.builtin.items():
            # A built-in only stands in for a value the chart leaves empty.
            assert not get_path(values, getattr(img, key)), (chart, img.name, key, builtin)


def _stack_releases() -> list[tuple[str, str, str, str, dict[str, Any]]]:
    out = []
    for loaded in stack.every():
        out += [
            (loaded.id, c.key, c.chart.name, c.chart.version, c.values)
            for c in loaded.components
            if c.chart is not None
        ]
    return out


@pytest.mark.parametrize(("stack_id", "key", "chart", "version", "values"), _stack_releases())
def test_what_is_never_deployed_is_switched_off_in_every_stack(
    stack_id: str, key: str, chart: str, version: str, values: dict[str, Any]
) -> None:
    effective = _effective(chart, version, values)
    for waiver in CHARTS[chart].notDeployed:
        assert not get_path(effective, waiver.disabledBy), (stack_id, key, waiver.path, waiver.disabledBy)


# --------------------------------------------------------------------------- #
# Acceptance: bank mirror + strict on every stack
# --------------------------------------------------------------------------- #


def _in_mirror(ref: str) -> bool:
    return qualify(split_reference(ref)[0]).startswith(BANK_HOST + "/")


def _bank_document(cloud: str, accelerator: str) -> dict[str, Any]:
    loaded = stack.load(Cloud(cloud), Accelerator(accelerator))
    assert loaded is not None
    doc = bank()
    if loaded.driver.source == "gpu-operator" and loaded.driver.resource:
        doc["drivers"] = [{"name": "pool-a", "nodeSelector": {"pool": "a"}, "version": "1.0"}]
    return doc


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_the_gateway_class_proxy_image_is_the_mirrored_one(cloud: str, accelerator: str) -> None:
    got = desired(overridden(make_xr(cloud, accelerator), ec("bank", bank())))
    manifests = [b["spec"]["forProvider"]["manifest"] for b in got.values() if b["kind"] == "Object"]
    [gateway_class] = [m for m in manifests if m["kind"] == "GatewayClass"]
    ref = gateway_class["spec"]["parametersRef"]
    [proxy] = [
        m
        for m in manifests
        if m["kind"] == ref["kind"] and m["metadata"] == {"name": ref["name"], "namespace": ref["namespace"]}
    ]
    # StrategicMerge keeps Envoy Gateway's default EnvoyProxy (where the chart's proxy settings go).
    assert proxy["spec"]["mergeType"] == "StrategicMerge"
    deployment = proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]
    assert deployment["container"]["image"] == f"{BANK_HOST}/hub/envoyproxy/envoy:distroless-v1.38.1"
    assert deployment["pod"]["imagePullSecrets"] == [{"name": "bank-pull"}]


def test_per_pool_device_configs_set_every_operand_image_the_chart_knows() -> None:
    """Each image of the chart's default DeviceConfig is a DeviceConfig field; a per-pool one sets them all."""
    got = desired(overridden(make_xr("Existing", "AMD"), ec("bank", _bank_document("Existing", "AMD"))))
    spec = got["driver-pool-a"]["spec"]["forProvider"]["manifest"]["spec"]
    facts = inventory("gpu-operator-charts", "v1.4.0")
    fields = [
        e["path"].removeprefix("deviceConfig.spec.") for e in facts["images"] if e["path"].startswith("deviceConfig.")
    ]
    assert len(fields) >= 9
    for field in fields:
        assert _in_mirror(get_path(spec, field) or ""), field
    # The in-cluster driver build's base image registry (CRD default docker.io).
    assert spec["driver"]["imageBuild"]["baseImageRegistry"] == f"{BANK_HOST}/hub"


def figures() -> str:
    """The completeness figures, for the issue's closing note (``python -m tests.test_chart_images``)."""
    charts = installed()
    lines: list[str] = []
    total = declared = 0
    for chart, version in charts:
        facts, inv = CHARTS[chart], inventory(chart, version)
        for entry in inv["images"]:
            total += 1
            if _entry_paths(entry) & _declared_paths(facts):
                declared += 1
            else:
                waiver = _waiver(facts, entry["path"])
                lines.append(f"  not deployed: {chart} {entry['path']}: {waiver.reason if waiver else '?'}")
        for dep in inv["dependencies"]:
            if dep["sources"] == "not in the chart sources":
                waiver = _waiver(facts, dep.get("alias", dep["name"]))
                lines.append(f"  dependency switched off: {chart} {dep['name']}: {waiver.reason if waiver else '?'}")
    head = [
        f"charts: {len(charts)} ({', '.join(f'{c} {v}' for c, v in charts)})",
        f"image values in their sources: {total}; declared in stacks/charts.yaml: {declared}; "
        f"not deployed (waived): {total - declared}",
    ]
    return "\n".join(head + lines)


def test_the_figures_give_a_reason_for_everything_not_deployed() -> None:
    text = figures()
    assert ": ?" not in text and text.count("not deployed:") + text.count("switched off:") >= 1


if __name__ == "__main__":
    print(figures())
