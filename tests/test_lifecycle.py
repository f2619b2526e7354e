"""Crossplane's semantics over real gRPC, reconcile after reconcile, the previous output fed back as observed.

What is simulated, and where Crossplane does it:
- the XR's Ready condition: ``render_documents`` derives it as the composite
  reconciler does (crossplane internal/controller/apiextensions/composite/
  reconciler.go: Available when no desired resource is unready, unless the
  function set the composite's readiness);
- Usage selectors, garbage collection and the Usage webhook as
  tests/support/cluster.py simulates them (its docstring names the sources).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from function import stack
from function.bodies import label_value
from function.compose import HELM_PC, KUBERNETES_PC
from function.offline import RenderError, RenderResult, run_pipeline
from function.render_output import render_documents
from tests.support.cluster import USAGE, api_kind, garbage_collect, resolve, usages
from tests.support.crossplane import desired, grpc_runner
from tests.support.overrides import ec
from tests.support.xr import make_xr, observed_as

# k8s.io/apimachinery/pkg/util/validation/validation.go, IsValidLabelValue:
# at most 63 characters, alphanumeric at both ends, - _ . inside.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def reconcile(
    target: str, xr: dict[str, Any], observed: dict[str, dict[str, Any]], configs: list[dict[str, Any]] | None = None
) -> RenderResult:
    return asyncio.run(
        run_pipeline(grpc_runner(target), xr=xr, observed=list(observed.values()), required=configs or [])
    )


def created(result: RenderResult, ready: Callable[[str], bool] = lambda _key: True) -> dict[str, dict[str, Any]]:
    """Every desired resource as Crossplane observes it on the next reconcile."""
    return {key: observed_as(key, body, ready=ready(key)) for key, body in desired(result).items()}


def xr_ready(result: RenderResult) -> dict[str, Any]:
    xr = render_documents(result)[0]
    condition: dict[str, Any] = next(c for c in xr["status"]["conditions"] if c["type"] == "Ready")
    return condition


def installed(target: str, xr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The whole stack as it runs once every reconcile went through."""
    observed: dict[str, dict[str, Any]] = {}
    for _ in range(3):
        observed = created(reconcile(target, xr, observed))
    return observed


# ---------------------------------------------------------------- 1. readiness


def test_the_xr_is_ready_only_once_every_component_is_up(server: str) -> None:
    xr = make_xr("EKS")
    # First reconcile: only the two ProviderConfigs, both ready at once;
    # without the function's word Crossplane would call the XR Available.
    first = reconcile(server, xr, {})
    assert set(desired(first)) == {HELM_PC, KUBERNETES_PC}
    assert all(r.ready == 1 for r in first.desired.resources.values())  # READY_TRUE
    assert xr_ready(first)["status"] == "False"

    # Second: everything composed, nothing installed yet; Crossplane's own
    # check names what it waits for.
    second = reconcile(server, xr, created(first))
    assert "gpu-operator" in desired(second)
    condition = xr_ready(second)
    assert condition["status"] == "False" and condition["message"].startswith("Unready resources:")

    # One Release still installing keeps the XR not ready ...
    almost = reconcile(server, xr, created(second, ready=lambda key: key != "prometheus"))
    condition = xr_ready(almost)
    assert condition["status"] == "False" and condition["message"] == "Unready resources: prometheus"

    # ... and the next reconcile after it came up, the XR is Ready.
    done = reconcile(server, xr, created(almost))
    assert xr_ready(done)["status"] == "True"
    assert desired(done) == desired(almost)


def test_a_component_gated_on_the_provider_configs_keeps_the_xr_not_ready(server: str) -> None:
    xr = make_xr("GKE")
    full = installed(server, xr)
    # The kubernetes ProviderConfig went missing (recreated this reconcile):
    # what was installed stays composed, nothing new is, and the XR says so.
    observed = {k: v for k, v in full.items() if k not in (KUBERNETES_PC, "gateway")}
    result = reconcile(server, xr, observed)
    assert "gateway" not in desired(result)
    assert xr_ready(result)["status"] == "False"


# ---------------------------------------------------------- 2. ProviderConfig Usages


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stack.available())
def test_every_remote_resource_holds_its_provider_config_with_its_own_usage(
    server: str, cloud: str, accelerator: str, kind: str
) -> None:
    xr = make_xr(cloud, accelerator, stack=kind)
    got = desired(reconcile(server, xr, created(reconcile(server, xr, {}))))
    remote = {k: r for k, r in got.items() if r["kind"] in ("Release", "Object")}
    assert len(remote) > 10
    holders: dict[str, list[str]] = {}
    for key, spec in usages(got).items():
        if spec["of"]["kind"] != "ProviderConfig":
            continue
        assert spec["replayDeletion"] is True
        [pc] = resolve(spec["of"], spec["of"]["apiVersion"], "ProviderConfig", got)
        by = resolve(spec["by"], spec["by"]["apiVersion"], spec["by"]["kind"], got)
        # The selector resolves to exactly one resource: Crossplane would take
        # the first of several and leave the others unprotected.
        assert len(by) == 1, (key, by)
        assert key == f"usage-pc-{by[0]}"  # v0.3.1's compose-usages keys
        assert spec["of"]["apiVersion"] == got[by[0]]["apiVersion"]
        holders.setdefault(pc, []).extend(by)
    assert sorted(holders[HELM_PC]) == sorted(k for k, r in remote.items() if r["kind"] == "Release")
    assert sorted(holders[KUBERNETES_PC]) == sorted(k for k, r in remote.items() if r["kind"] == "Object")


def test_a_consumer_on_its_way_out_keeps_its_provider_config(server: str) -> None:
    xr = make_xr("GKE")
    full = installed(server, xr)
    # leader-worker-set is Removed: no longer desired, but its uninstall needs
    # the ProviderConfig, so its Usage stays until the Release is gone.
    configs = [ec("rm", {"components": {"leader-worker-set": {"state": "Removed"}}})]
    leaving = desired(reconcile(server, xr, full, configs))
    assert "leader-worker-set" not in leaving
    assert "usage-pc-leader-worker-set" in leaving
    gone = {k: v for k, v in full.items() if k != "leader-worker-set"}
    assert "usage-pc-leader-worker-set" not in desired(reconcile(server, xr, gone, configs))


def test_another_steps_resources_get_no_provider_config_usage(server: str) -> None:
    """A later pipeline step's Object is observed too, but it is not ours and carries no consumer label."""
    xr = make_xr("GKE")
    full = installed(server, xr)
    theirs = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "x", "annotations": {"crossplane.io/composition-resource-name": "team-extra"}},
        "spec": {"forProvider": {"manifest": {}}},
    }
    assert "usage-pc-team-extra" not in desired(reconcile(server, xr, {**full, "team-extra": theirs}))


# ------------------------------------------------------------- 3. Removed order


def converge(
    target: str, xr: dict[str, Any], observed: dict[str, dict[str, Any]], configs: list[dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], list[list[str]], list[str]]:
    """Reconcile until nothing changes; return the end state, what left at each step, and every problem."""
    departures: list[list[str]] = []
    problems: list[str] = []
    for _ in range(10):
        wanted = created(reconcile(target, xr, observed, configs))
        after, found = garbage_collect(observed, wanted)
        problems += found
        left = sorted(set(observed) - set(after))
        if not left and set(after) == set(observed):
            return after, departures, problems
        departures.append(left)
        observed = after
    raise AssertionError("did not converge in 10 reconciles")


def test_the_simulated_cluster_catches_a_used_resource_leaving_with_its_usage(server: str) -> None:
    xr = make_xr("GKE")
    full = installed(server, xr)
    everything_at_once = {
        k: v for k, v in full.items() if k not in ("gateway", "gateway-class", "usage-gateway-class-by-gateway")
    }
    _, problems = garbage_collect(full, everything_at_once)
    assert "409: deleting gateway-class while usage-gateway-class-by-gateway holds it" in problems


def test_removed_components_leave_in_dependency_order_without_a_conflict(server: str) -> None:
    xr = make_xr("GKE")
    full = installed(server, xr)
    configs = [ec("rm", {"components": {"gateway": {"state": "Removed"}, "gateway-class": {"state": "Removed"}}})]
    end, departures, problems = converge(server, xr, full, configs)
    assert problems == []
    # The Gateway first (the class and the Usages holding the class, the
    # namespace and the ProviderConfig for it stay), then those Usages, then the class, then
    # the Usages that kept its controller, EnvoyProxy and ProviderConfig.
    assert departures == [
        ["gateway"],
        ["usage-gateway-class-by-gateway", "usage-gateway-namespace-by-gateway", "usage-pc-gateway"],
        ["gateway-class"],
        ["usage-envoy-gateway-by-gateway-class", "usage-gateway-proxy-by-gateway-class", "usage-pc-gateway-class"],
    ]
    assert set(full) - set(end) == {k for step in departures for k in step}


def test_removing_the_whole_gateway_chain_converges_without_a_conflict(server: str) -> None:
    xr = make_xr("GKE")
    full = installed(server, xr)
    chain = ("envoy-gateway", "gateway-proxy", "gateway-class", "gateway")
    configs = [ec("rm", {"components": {k: {"state": "Removed"} for k in chain}})]
    end, departures, problems = converge(server, xr, full, configs)
    assert problems == []
    assert not set(chain) & set(end)
    order = {k: i for i, step in enumerate(departures) for k in step}
    assert order["gateway"] < order["gateway-class"] < order["envoy-gateway"]
    assert order["gateway-proxy"] < order["envoy-gateway"]


@pytest.mark.parametrize(
    ("components", "named"),
    [
        # The class would wait forever on Envoy Gateway's finalizer while the
        # Gateway that uses it stays.
        ({"gateway-class": "Removed", "gateway": "Unmanaged"}, "gateway (Unmanaged)"),
        (
            {"envoy-gateway": "Removed", "gateway-proxy": "Removed", "gateway-class": "Unmanaged"},
            "gateway-class (Unmanaged)",
        ),
    ],
)
def test_removed_under_a_dependent_that_stays_is_fatal_naming_both(
    server: str, components: dict[str, str], named: str
) -> None:
    xr = make_xr("GKE")
    removed = next(k for k, s in components.items() if s == "Removed" and k != "gateway")
    configs = [ec("rm", {"components": {k: {"state": s} for k, s in components.items()}})]
    with pytest.raises(RenderError) as err:
        reconcile(server, xr, installed(server, xr), configs)
    message = str(err.value)
    assert f"components.{removed}.state: Removed is refused" in message
    assert named in message


# --------------------------------------------------------------- 4. label values


def all_labels(resources: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for key, body in resources.items():
        for value in body.get("metadata", {}).get("labels", {}).values():
            yield key, value
        if api_kind(body) == USAGE:
            for side in ("of", "by"):
                for value in body["spec"][side].get("resourceSelector", {}).get("matchLabels", {}).values():
                    yield key, value


def test_every_label_fits_with_63_character_driver_pool_names(server: str) -> None:
    xr = make_xr("Existing")
    # Two pool names the DNS-label rule allows, alike in their first 60 characters.
    names = ["a" * 60 + "-h1", "a" * 60 + "-h2"]
    doc = {"drivers": [{"name": n, "nodeSelector": {"pool": n[-2:]}, "version": "580.105.08"} for n in names]}
    configs = [ec("pools", doc)]
    got = desired(reconcile(server, xr, created(reconcile(server, xr, {}, configs)), configs))
    assert {f"driver-{n}" for n in names} <= set(got)
    bad = [(k, v) for k, v in all_labels(got) if len(v) > 63 or not LABEL_VALUE.match(v)]
    assert bad == []
    labels = {got[f"driver-{n}"]["metadata"]["labels"]["modelplane.ai/resource"] for n in names}
    assert len(labels) == 2  # still told apart
    # Each Usage of and by a driver still resolves to that one driver.
    for n in names:
        for key in (f"usage-gpu-operator-by-driver-{n}", f"usage-pc-driver-{n}"):
            by = got[key]["spec"]["by"]
            assert resolve(by, by["apiVersion"], by["kind"], got) == [f"driver-{n}"]


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stack.available())
def test_every_label_of_every_stack_is_valid(server: str, cloud: str, accelerator: str, kind: str) -> None:
    xr = make_xr(cloud, accelerator, stack=kind)
    got = desired(reconcile(server, xr, created(reconcile(server, xr, {}))))
    assert [(k, v) for k, v in all_labels(got) if len(v) > 63 or not LABEL_VALUE.match(v)] == []


@pytest.mark.parametrize(
    "key",
    ["gateway", "a" * 63, "a" * 64, "driver-" + "b" * 63, "driver-" + "b" * 55 + "-" + "c" * 7, "x" * 200],
)
def test_label_values_fit_and_keep_keys_apart(key: str) -> None:
    value = label_value(key)
    assert len(value) <= 63 and LABEL_VALUE.match(value)
    assert value == key if len(key) <= 63 else value != key
    assert label_value(key) == value  # the same on every reconcile
    assert label_value(key + "2") != value
