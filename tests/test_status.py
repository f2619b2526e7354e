"""``status.stack`` encoded from parts is what converting the whole status gives, whatever the documents hold.

A document's encoding is taken from the request that carried it
(``Document.encoded``, :func:`function.overrides.document.body_value`)
rather than converted again from what was read of it: the two must be the
same bytes for every value a protobuf message can hold, including what the
reading drops or changes (unknown fields, Values with no kind set) and bytes
that look like those (strings and doubles holding ``0a 00`` or ``12 00``).
The whole status is checked against the conversion of :func:`status.stack_status`
with such documents delivered, in the context, and remembered.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from hypothesis import given
from hypothesis import strategies as st

from function import status, wire
from function.fn import FunctionRunner
from function.inputs import plain_value
from function.overrides import document
from function.overrides.collect import CONTEXT_KEY, DEFAULT_REQUIREMENT
from function.overrides.document import DOCUMENT_KEY, body_value, converted_value
from function.tree import to_struct
from tests.support.overrides import ec
from tests.support.requests import request
from tests.support.status import assert_converted_as_the_whole_status, recorded
from tests.support.xr import make_xr

# A field no Struct, Value or ListValue has: what a newer or hostile client may send (upb keeps it).
UNKNOWN = b"\x98\x06\x01"  # field 99, a varint
# Strings and doubles whose bytes hold what an unset Value encodes as (0a 00, 12 00).
LOOKALIKES = ["\n\x00", "\x12\x00", "a\n", "\x12"]
DOUBLES = [-0.0, 0.0, 1.0, 2.0, 1e300, 5e-324, struct_pb2.Value(number_value=0).number_value]
KEYS = st.text(max_size=4) | st.sampled_from(["", "é", "\n", "\x12", "servingStack"])


@st.composite
def _values(draw: st.DrawFn, depth: int = 0) -> struct_pb2.Value:
    """A Value as a message may hold it: any kind, unset ones, unknown fields at any level."""
    value = struct_pb2.Value()
    kinds = ["unset", "null", "number", "bool", "string"] + (["struct", "list"] if depth < 4 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "null":
        value.null_value = struct_pb2.NULL_VALUE
    elif kind == "number":
        value.number_value = draw(st.sampled_from(DOUBLES) | st.floats(allow_nan=False, allow_infinity=False))
    elif kind == "bool":
        value.bool_value = draw(st.booleans())
    elif kind == "string":
        value.string_value = draw(st.sampled_from(LOOKALIKES) | st.text(max_size=6))
    elif kind == "struct":
        value.struct_value.SetInParent()
        for key in draw(st.lists(KEYS, max_size=3, unique=True)):
            value.struct_value.fields[key].CopyFrom(draw(_values(depth + 1)))
        if draw(st.booleans()):
            value.struct_value.MergeFromString(UNKNOWN)
    elif kind == "list":
        value.list_value.SetInParent()
        for item in draw(st.lists(_values(depth + 1), max_size=3)):
            value.list_value.values.add().CopyFrom(item)
        if draw(st.booleans()):
            value.list_value.MergeFromString(UNKNOWN)
    if draw(st.booleans()):
        value.MergeFromString(UNKNOWN)
    return value


@given(_values())
def test_a_document_encodes_as_converting_what_was_read_of_it(value: struct_pb2.Value) -> None:
    body = plain_value(value, "test", "v")
    assert body_value(value, body) == converted_value(body)


def test_a_document_as_crossplane_sends_it_is_not_converted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"priority": 1, "components": {"a": {"values": {"x": [1.5, -0.0, "s", True, None, {}, []]}}}}
    value = to_struct({"d": doc}).fields["d"]
    expected = converted_value(plain_value(value, "test", "v"))

    def refused(_: Any) -> bytes:
        raise AssertionError("converted again")

    monkeypatch.setattr(document, "converted_value", refused)
    assert body_value(value, plain_value(value, "test", "v")) == expected


def test_what_the_plan_says_goes_between_the_said_fields_in_upb_order() -> None:
    assert sorted(status._NOW, key=wire.sort_key) == list(status._NOW)


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


def test_documents_a_request_carries_are_encoded_as_it_carries_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # Delivered, in the context: read once, and never converted back for status.stack.
    def refused(_: Any) -> bytes:
        raise AssertionError("converted again")

    monkeypatch.setattr(document, "converted_value", refused)
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
