"""Results become Events on every reconcile: over real gRPC, each reconcile sees the XR the last one left.

Crossplane stores the function's status and conditions on the XR and sends
it back as the observed composite (render_documents builds it the same way).
"""

from __future__ import annotations

import asyncio
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.events import MESSAGE_MAX, WARNINGS_CONDITION, warnings_message
from function.offline import RenderResult, run_pipeline
from function.render_output import render_documents
from tests.support.crossplane import grpc_runner
from tests.support.overrides import ec
from tests.support.xr import make_xr, provider_configs


def reconcile(target: str, xr: dict[str, Any], configs: list[dict[str, Any]]) -> tuple[RenderResult, dict[str, Any]]:
    """One reconcile, and the XR as Crossplane stores it afterwards."""
    result = asyncio.run(run_pipeline(grpc_runner(target), xr=xr, observed=provider_configs(xr), required=configs))
    return result, {**xr, "status": render_documents(result)[0]["status"]}


def results(result: RenderResult, severity: int) -> list[str]:
    return [r.message for r in result.results if r.severity == severity]


def condition(xr: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in xr["status"]["conditions"] if c["type"] == WARNINGS_CONDITION)
    return found


PIN = ec("hold", {"components": {"leader-worker-set": {"version": "v0.8.0"}}})  # the generated version: redundant
OTHER_PIN = ec("hold", {"components": {"node-feature-discovery": {"version": "0.18.3"}}})
QUIET = ec("hold", {"components": {"leader-worker-set": {"replicas": 2}}})


def test_warnings_are_emitted_when_they_change_and_stay_visible_as_a_condition(server: str) -> None:
    xr = make_xr("EKS")
    first, xr = reconcile(server, xr, [PIN])
    [warning] = results(first, fnv1.SEVERITY_WARNING)
    assert "leader-worker-set.version: v0.8.0 is the generated version already" in warning
    assert condition(xr)["status"] == "True" and condition(xr)["message"] == warning

    # The same warning on the next reconciles: no Event, the condition keeps it.
    for _ in range(2):
        again, xr = reconcile(server, xr, [PIN])
        assert results(again, fnv1.SEVERITY_WARNING) == []
        assert condition(xr)["message"] == warning

    # Another warning: emitted once.
    changed, xr = reconcile(server, xr, [OTHER_PIN])
    [other] = results(changed, fnv1.SEVERITY_WARNING)
    assert "node-feature-discovery.version" in other
    assert results(reconcile(server, xr, [OTHER_PIN])[0], fnv1.SEVERITY_WARNING) == []

    # Gone: the condition says so.
    _, xr = reconcile(server, xr, [QUIET])
    assert condition(xr)["status"] == "False" and condition(xr)["reason"] == "NoWarnings"


def test_the_normal_summary_is_emitted_when_what_was_applied_changes(server: str) -> None:
    xr = make_xr("EKS")
    first, xr = reconcile(server, xr, [QUIET])
    [summary] = results(first, fnv1.SEVERITY_NORMAL)
    assert summary.startswith("EnvironmentConfigs applied in order: hold")
    again, xr = reconcile(server, xr, [QUIET])
    assert results(again, fnv1.SEVERITY_NORMAL) == []  # status.stack records the same
    more = ec("mirror", {"components": {"cert-manager": {"replicas": 2}}})
    changed, xr = reconcile(server, xr, [QUIET, more])
    [summary] = results(changed, fnv1.SEVERITY_NORMAL)
    assert summary.startswith("EnvironmentConfigs applied in order: hold, mirror; 2 of ")
    assert summary.endswith("components changed (cert-manager, leader-worker-set)")


def test_a_control_plane_that_keeps_no_condition_still_gets_every_warning(server: str) -> None:
    """Without the condition in the observed XR there is nothing to compare with: emit."""
    xr = make_xr("EKS")
    for _ in range(2):
        result, _ = reconcile(server, xr, [PIN])
        assert len(results(result, fnv1.SEVERITY_WARNING)) == 1


def test_the_condition_message_is_bounded() -> None:
    many = [f"warning {i}: " + "x" * 200 for i in range(100)]
    message = warnings_message(many)
    assert len(message) <= MESSAGE_MAX
    assert message.endswith("(100 warnings in all)")
