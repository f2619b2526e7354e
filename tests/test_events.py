"""Results become Events on every reconcile: over real gRPC, each reconcile sees the XR the last one left.

Crossplane stores the function's status and conditions on the XR and sends
it back as the observed composite (render_documents builds it the same way).
"""

from __future__ import annotations

import asyncio
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from hypothesis import given
from hypothesis import strategies as st

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


KEYS = st.text(max_size=3)
LEAVES = st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=3))
VALUES = st.recursive(
    LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=9
)
TREES = st.dictionaries(KEYS, VALUES, max_size=5)


def _reversed(value: Any) -> Any:
    """The same tree with every map's keys inserted in the opposite order."""
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    return [_reversed(v) for v in value] if isinstance(value, list) else value


def _struct(tree: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(tree)
    return out


def _serialized(struct: struct_pb2.Struct) -> bytes:
    data: bytes = struct.SerializeToString(deterministic=True)
    return data


@given(TREES, TREES)
def test_status_stacks_compare_as_protobuf_compares_them(a: dict[str, Any], b: dict[str, Any]) -> None:
    # A changed status.stack is told by its deterministic serialization (function.fn.run): equal
    # exactly when protobuf calls the messages equal, whatever order their maps were filled in,
    # NaN and -0.0 included.
    x, same, other = _struct(a), _struct(_reversed(a)), _struct(b)
    assert (_serialized(x) == _serialized(same)) == (x == same)
    assert (_serialized(x) == _serialized(other)) == (x == other)
    assert (_serialized(_struct({"n": 0.0})) == _serialized(_struct({"n": -0.0}))) == (
        _struct({"n": 0.0}) == _struct({"n": -0.0})
    )
