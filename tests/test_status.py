"""``status.stack`` is what protobuf's conversion of the whole status gives, whatever the documents hold.

Documents are remembered in it as they were read: what the reading drops or
changes (unknown fields, Values with no kind set) is not written back. The
whole status is checked against the conversion of :func:`status.stack_status`
with such documents delivered, in the context, and remembered.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function.fn import FunctionRunner
from function.overrides.collect import CONTEXT_KEY, DEFAULT_REQUIREMENT
from function.overrides.document import DOCUMENT_KEY
from tests.support.overrides import ec
from tests.support.requests import request
from tests.support.status import assert_converted_as_the_whole_status, recorded
from tests.support.xr import make_xr

# A field no Struct, Value or ListValue has: what a newer or hostile client may send (upb keeps it).
UNKNOWN = b"\x98\x06\x01"  # field 99, a varint


def _hostile(value: struct_pb2.Value) -> None:
    """Hostile values put into a document's component values: every kind of difference the reading makes."""
    values = value.struct_value.fields["components"].struct_value.fields["envoy-gateway"].struct_value
    hostile = values.fields["values"].struct_value.fields["hostile"]
    hostile.struct_value.fields["unset"].SetInParent()  # a Value with no kind
    hostile.struct_value.fields["negative zero"].number_value = -0.0
    hostile.struct_value.fields["lookalike"].string_value = "\n\x00\x12\x00"
    items = hostile.struct_value.fields["list"].list_value
    items.values.add()  # an item with no kind
    items.values.add().number_value = 2.0
    items.MergeFromString(UNKNOWN)
    hostile.struct_value.MergeFromString(UNKNOWN)
    hostile.MergeFromString(UNKNOWN)
    value.struct_value.MergeFromString(UNKNOWN)


BANK_DOC: dict[str, Any] = {
    "priority": 5,
    "registry": {"images": [{"from": "*", "to": "mirror.example.com/hub"}]},
    "components": {"envoy-gateway": {"values": {"deployment": {"replicas": 2}}}},
}


def _respond(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    rsp: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(FunctionRunner().respond(req))
    return rsp


def test_status_with_hostile_documents_converts_as_the_whole_status_does(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = recorded(monkeypatch)
    xr = make_xr("EKS", "NVIDIA")
    req = request(
        xr,
        required={DEFAULT_REQUIREMENT: [ec("bank", BANK_DOC)]},
        context={CONTEXT_KEY: {DOCUMENT_KEY: {**copy.deepcopy(BANK_DOC), "priority": 7}}},
    )
    _hostile(
        req.required_resources[DEFAULT_REQUIREMENT].items[0].resource.fields["data"].struct_value.fields[DOCUMENT_KEY]
    )
    _hostile(req.context.fields[CONTEXT_KEY].struct_value.fields[DOCUMENT_KEY])
    first = _respond(req)
    assert not [r for r in first.results if r.severity == fnv1.SEVERITY_FATAL], first.results
    # The next reconcile: the EnvironmentConfig is gone, its document applies from the memory the first
    # response wrote, which a hostile client edits too.
    again = fnv1.RunFunctionRequest()
    again.CopyFrom(req)
    again.required_resources[DEFAULT_REQUIREMENT].ClearField("items")
    observed_status = again.observed.composite.resource.get_or_create_struct("status")
    observed_status.CopyFrom(first.desired.composite.resource["status"])
    remembered = observed_status.fields["stack"].struct_value.fields["documents"].list_value.values
    bank = next(d for d in remembered if d.struct_value.fields["name"].string_value == "bank")
    bank.struct_value.fields[DOCUMENT_KEY].struct_value.fields["components"].struct_value.fields[
        "envoy-gateway"
    ].struct_value.fields["values"].struct_value.fields["hostile"].struct_value.fields["unset"].Clear()
    bank.struct_value.MergeFromString(UNKNOWN)
    second = _respond(again)
    assert any("as remembered" in r.message for r in second.results), second.results
    assert len(calls) == 2
    assert_converted_as_the_whole_status(calls)
    # The hostile values are in the status as the reading sees them: an unset Value is a null.
    documents = calls[1][0][2].documents
    assert {d.name for d in documents} == {"bank", f"context:{CONTEXT_KEY}"}
    assert all(d.body["components"]["envoy-gateway"]["values"]["hostile"]["unset"] is None for d in documents)


def test_documents_a_request_carries_are_remembered_in_order() -> None:
    # Delivered, and in the context.
    doc = {**copy.deepcopy(BANK_DOC), "priority": 11}  # content no earlier test parsed
    req = request(
        make_xr("EKS", "NVIDIA"),
        required={DEFAULT_REQUIREMENT: [ec("bank", doc)]},
        context={CONTEXT_KEY: {DOCUMENT_KEY: {**doc, "priority": 12}}},
    )
    rsp = _respond(req)
    assert [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL] == []
    written = rsp.desired.composite.resource["status"]["stack"]["documents"]
    assert [d["name"] for d in written] == ["bank", f"context:{CONTEXT_KEY}"]
