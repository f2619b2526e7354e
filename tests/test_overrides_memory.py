"""A document that goes missing deletes nothing and takes nothing over, over real gRPC.

Each test starts from a steady state: the previous response is fed back as
Crossplane would observe it (the XR with the status the function wrote, every
composed resource it desired, Ready), then a document disappears.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from crossplane.function import resource

from function.offline import RenderError, RenderResult, run_pipeline
from function.overrides.memory import RETIRE_ANNOTATION
from function.render_output import render_documents
from tests.support import k8s_schema
from tests.support.crossplane import desired, grpc_runner, render
from tests.support.overrides import ec, fatal, overridden, stack_status
from tests.support.repo import EXAMPLE, load_docs
from tests.support.serve import Invoke
from tests.support.xr import make_xr, provider_configs

EXAMPLES = {d["metadata"]["name"]: d for d in load_docs(EXAMPLE / "environmentconfigs")}
WARNING, NORMAL = 2, 3


def lab_xr(labels: dict[str, str] | None = None) -> dict[str, Any]:
    xr = make_xr("Existing")
    xr["metadata"]["name"] = "lab-gpu-1"
    xr["metadata"]["labels"] = labels or {"modelplane.ai/environment": "prod"}
    return xr


class Cluster:
    """One ServingStack reconciled over gRPC, its last output fed back as observed."""

    def __init__(self, target: str, xr: dict[str, Any]) -> None:
        self.target = target
        self.xr = xr
        self.observed = provider_configs(xr)

    def reconcile(self, *configs: dict[str, Any]) -> RenderResult:
        result = asyncio.run(
            run_pipeline(grpc_runner(self.target), xr=self.xr, observed=self.observed, required=list(configs))
        )
        # What Crossplane stores and sends back: the status the function wrote
        # on the XR, and every composed resource it desired (created, Ready).
        self.xr = copy.deepcopy(self.xr)
        self.xr["status"] = resource.struct_to_dict(result.desired.composite.resource)["status"]
        self.observed = [_observed(d) for d in render_documents(result)[1:]]
        return result

    def steady(self, *configs: dict[str, Any]) -> RenderResult:
        """Reconcile until the output stops changing (ProviderConfigs first, then the rest)."""
        first = self.reconcile(*configs)
        second = self.reconcile(*configs)
        assert set(desired(second)) >= set(desired(first))
        third = self.reconcile(*configs)
        assert desired(third) == desired(second)
        return third


def _observed(doc: dict[str, Any]) -> dict[str, Any]:
    obs = copy.deepcopy(doc)
    obs["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]}
    return obs


def warnings(result: RenderResult) -> list[str]:
    return [r.message for r in result.results if r.severity == WARNING]


def notes(result: RenderResult) -> list[str]:
    return [r.message for r in result.results if r.severity == NORMAL]


def without(name: str) -> list[dict[str, Any]]:
    return [d for n, d in EXAMPLES.items() if n != name]


def test_gpu_pools_missing_keeps_the_drivers_their_usages_and_the_operator_settings(
    server: str, xr_index: k8s_schema.CRDIndex
) -> None:
    cluster = Cluster(server, lab_xr())
    before = desired(cluster.steady(*EXAMPLES.values()))
    assert {"driver-h100", "driver-b300", "usage-gpu-operator-by-driver-h100"} <= set(before)
    after = cluster.reconcile(*without("gpu-pools"))
    # Nothing leaves the desired state, so Crossplane deletes nothing.
    assert desired(after) == before
    [warning] = [w for w in warnings(after) if "gpu-pools" in w]
    assert warning.startswith("EnvironmentConfig gpu-pools applied at the last reconcile but it was not delivered")
    assert "keeping what it decided" in warning and RETIRE_ANNOTATION in warning
    status = stack_status(after)
    assert "gpu-pools" in status["environmentConfigs"]
    memory = next(d for d in status["documents"] if d["name"] == "gpu-pools")
    assert memory["remembered"] is True and memory["servingStack"] == EXAMPLES["gpu-pools"]["data"]["servingStack"]
    # The memory survives Crossplane: the XRD declares every field of it.
    status = render_documents(after)[0]["status"]
    status.pop("conditions")
    assert xr_index.validate({**cluster.xr, "status": status}) == []
    # Still kept a reconcile later: the memory carries itself forward.
    assert desired(cluster.reconcile(*without("gpu-pools"))) == before


def test_byo_cluster_missing_does_not_install_the_clusters_own_cert_manager(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    before = desired(cluster.steady(*EXAMPLES.values()))
    assert "cert-manager" not in before and "prometheus" not in before
    after = cluster.reconcile(*without("byo-cluster"))
    got = desired(after)
    assert "cert-manager" not in got and "prometheus" not in got  # mp-cert-manager is not installed
    assert got == before
    assert any(w.startswith("EnvironmentConfig byo-cluster applied at the last reconcile") for w in warnings(after))


def test_an_unmanaged_component_stays_observe_only(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    installed = desired(cluster.steady(EXAMPLES["regulated-bank"]))
    assert "managementPolicies" not in installed["cert-manager"]["spec"]
    unmanaged = desired(cluster.reconcile(EXAMPLES["regulated-bank"], EXAMPLES["byo-cluster"]))
    assert unmanaged["cert-manager"]["spec"]["managementPolicies"] == ["Observe"]
    after = desired(cluster.reconcile(EXAMPLES["regulated-bank"]))
    assert after["cert-manager"]["spec"]["managementPolicies"] == ["Observe"]
    assert after == unmanaged


def test_a_version_hold_and_a_removal_are_kept(server: str) -> None:
    doc = {"priority": 60, "components": {"ai-gateway": {"state": "Removed"}}}
    cluster = Cluster(server, lab_xr())
    before = desired(cluster.steady(EXAMPLES["prod-hold"], ec("no-ai-gateway", doc)))
    assert before["cert-manager"]["spec"]["forProvider"]["chart"]["version"] == "v1.17.1"
    assert "ai-gateway" not in before
    after = desired(cluster.reconcile())
    assert after == before


def test_a_document_whose_match_no_longer_selects_the_xr_is_kept_and_says_why(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    before = desired(cluster.steady(EXAMPLES["prod-hold"]))
    cluster.xr["metadata"]["labels"] = {"modelplane.ai/environment": "prd"}  # a typo
    after = cluster.reconcile(EXAMPLES["prod-hold"])
    assert desired(after) == before
    [warning] = warnings(after)
    assert "its match (labels: {'modelplane.ai/environment': 'prod'}) no longer selects this ServingStack" in warning


def test_a_tombstone_retires_a_document_on_purpose(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    cluster.steady(*EXAMPLES.values())
    tombstone = ec("gpu-pools", {"retired": True})
    after = cluster.reconcile(*without("gpu-pools"), tombstone)
    got = desired(after)
    assert not [k for k in got if k.startswith(("driver-", "usage-gpu-operator-by-driver"))]  # deleted now
    assert "nvidiaDriverCRD" not in got["gpu-operator"]["spec"]["forProvider"]["values"]["driver"]
    assert "gpu-pools" not in stack_status(after)["environmentConfigs"]
    assert any(n.startswith("EnvironmentConfig gpu-pools retired by a tombstone document") for n in notes(after))
    assert not [w for w in warnings(after) if "gpu-pools" in w]
    # The ProviderConfig Usages of the drivers being deleted stay until they are gone.
    protecting = sorted(k for k in got if k.startswith("usage-pc-driver-"))
    assert protecting == ["usage-pc-driver-b300", "usage-pc-driver-h100"]
    # Forgotten: once the tombstone is deleted too, nothing comes back and nothing warns.
    later = cluster.reconcile(*without("gpu-pools"))
    assert desired(later) == {k: v for k, v in got.items() if k not in protecting}
    assert not [w for w in warnings(later) if "gpu-pools" in w]


def test_the_retire_annotation_retires_a_document_for_one_serving_stack(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    cluster.steady(*EXAMPLES.values())
    cluster.xr["metadata"]["annotations"] = {RETIRE_ANNOTATION: "prod-hold, byo-cluster"}
    after = cluster.reconcile(EXAMPLES["regulated-bank"], EXAMPLES["gpu-pools"])
    got = desired(after)
    assert "cert-manager" in got  # byo-cluster retired: now the function installs cert-manager
    assert got["cert-manager"]["spec"]["forProvider"]["chart"]["version"] != "v1.17.1"  # the hold is gone
    assert "driver-h100" in got  # gpu-pools still applies
    assert stack_status(after)["environmentConfigs"] == ["regulated-bank", "gpu-pools"]


def test_a_retire_annotation_naming_a_document_in_force_warns() -> None:
    xr = lab_xr()
    xr["metadata"]["annotations"] = {RETIRE_ANNOTATION: "prod-hold"}
    result = overridden(xr, EXAMPLES["prod-hold"])
    assert any(
        w.startswith(f"annotation {RETIRE_ANNOTATION} names EnvironmentConfig prod-hold") for w in warnings(result)
    )


def test_a_missing_document_without_remembered_content_is_fatal(server: str) -> None:
    # A status written before the function remembered documents (or pruned by an
    # old XRD): the name is known, what it said is not. Refuse rather than guess.
    cluster = Cluster(server, lab_xr())
    cluster.steady(EXAMPLES["prod-hold"])
    del cluster.xr["status"]["stack"]["documents"]
    with pytest.raises(RenderError, match=r"EnvironmentConfig prod-hold applied at the last reconcile .* refusing"):
        cluster.reconcile()


def test_a_document_that_comes_back_applies_as_delivered(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    cluster.steady(EXAMPLES["prod-hold"])
    cluster.reconcile()
    changed = copy.deepcopy(EXAMPLES["prod-hold"])
    changed["data"]["servingStack"]["components"]["cert-manager"]["version"] = "v1.16.5"
    back = cluster.reconcile(changed)
    assert desired(back)["cert-manager"]["spec"]["forProvider"]["chart"]["version"] == "v1.16.5"
    assert not warnings(back)
    assert "remembered" not in stack_status(back)["documents"][0]


def test_a_pipeline_context_document_that_goes_missing_is_kept_too() -> None:
    xr = lab_xr()
    env = {"apiextensions.crossplane.io/environment": {"servingStack": {"components": {"prometheus": {"replicas": 2}}}}}
    first = render(xr, context=env)
    xr["status"] = resource.struct_to_dict(first.desired.composite.resource)["status"]
    after = render(xr)
    assert desired(after)["prometheus"] == desired(first)["prometheus"]
    [warning] = warnings(after)
    assert warning.startswith(
        "context:apiextensions.crossplane.io/environment applied at the last reconcile but it was not delivered"
    )


def test_a_malformed_memory_is_fatal_naming_the_field() -> None:
    xr = lab_xr()
    xr["status"] = {"stack": {"documents": [{"name": "x", "servingStack": {"priorty": 1}}]}}
    message = fatal(xr)
    assert (
        "EnvironmentConfig x (absent; as remembered in status.stack.documents): servingStack.priorty: unknown"
        in message
    )
    xr["status"] = {"stack": {"documents": [{"servingStack": {}}]}}
    assert "ServingStack status.stack.documents[0]: needs a name and a servingStack document" in fatal(xr)


def test_explain_says_which_documents_are_remembered(tmp_path: Path, invoke: Invoke) -> None:
    xr = lab_xr()
    first = overridden(xr, EXAMPLES["prod-hold"])
    xr["status"] = resource.struct_to_dict(first.desired.composite.resource)["status"]
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    run = invoke("explain", str(path), "--only-changed")
    assert run.exit_code == 0, run.stderr
    out = run.stdout
    assert "EnvironmentConfigs applied, in order: prod-hold (remembered: absent now)" in out
    assert "warning: EnvironmentConfig prod-hold applied at the last reconcile but it was not delivered" in out
    assert "chart.version  v1.17.1  [prod-hold]" in out


def test_on_the_dynamo_stack_grove_and_kai_staged_ahead_stay_when_their_document_goes(server: str) -> None:
    # The dev cluster took Grove and KAI ahead of the generated versions; the
    # document going missing must not downgrade them under running gangs.
    staged = load_docs(EXAMPLE / "dynamo" / "dynamo-dev-next.yaml")[0]
    xr = load_docs(EXAMPLE / "dynamo" / "xr-dynamo-dev.yaml")[0]
    cluster = Cluster(server, xr)
    before = desired(cluster.steady(staged))
    versions = {k: before[k]["spec"]["forProvider"]["chart"]["version"] for k in ("grove", "kai-scheduler")}
    assert versions == {"grove": "v0.1.0-alpha.7", "kai-scheduler": "v0.17.0"}
    result = cluster.reconcile()
    assert desired(result) == before
    assert any("dynamo-dev-next" in w for w in warnings(result)), warnings(result)
