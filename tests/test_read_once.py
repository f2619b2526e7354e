"""What every request repeats is read once: the XR's spec, the function Input, the document memory, the
documents. A kept reading answers only the very content it was read from, and input refused is refused
again, alike, whatever was kept before: each case is answered by a warm server and by one whose caches
are empty, byte for byte.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.internal import encoder
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from function import inputs
from function.cache import caches
from function.errors import InputError
from function.fn import FunctionRunner
from function.overrides import memory
from function.overrides.collect import DEFAULT_REQUIREMENT
from function.xr import observed_xr
from tests.support.overrides import ec
from tests.support.requests import fatal, request
from tests.support.xr import make_xr

INPUT = {"apiVersion": "servingstack.fn.modelplane.ai/v1beta1", "kind": "Input"}
HOLD = {"components": {"node-feature-discovery": {"version": "0.18.3"}}}


def respond(req: fnv1.RunFunctionRequest, *, cold: bool = False) -> bytes:
    """The response of a fresh runner (no response memo), with every cache emptied first when ``cold``."""
    if cold:
        for cache in caches():
            cache.clear()
    return FunctionRunner().respond(req)


def parse(data: bytes) -> fnv1.RunFunctionResponse:
    rsp: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(data)
    return rsp


def warm_and_cold(*requests: fnv1.RunFunctionRequest) -> list[fnv1.RunFunctionResponse]:
    """Each request answered after all of them were (caches warm, twice), and from empty caches: the same."""
    warm = [respond(r) for r in requests]
    assert [respond(r) for r in requests] == warm
    for req, expected in zip(requests, warm, strict=True):
        assert respond(req, cold=True) == expected
    return [parse(d) for d in warm]


def remembering(xr: dict[str, Any], entries: list[Any], names: list[str]) -> dict[str, Any]:
    """``xr`` with a document memory (status.stack.documents) and the names applied last time."""
    out = copy.deepcopy(xr)
    out["status"] = {"stack": {"environmentConfigs": names, "documents": entries}}
    return out


def test_a_spec_read_before_changes_no_message_about_another_xr() -> None:
    good = make_xr("EKS")
    renamed = copy.deepcopy(good)  # the same spec, another ServingStack with a label that is no string
    renamed["metadata"].update(name="other", labels={"team": 7})
    numbered = copy.deepcopy(good)
    numbered["metadata"]["name"] = 7
    no_kubeconfig = make_xr("EKS", secrets=[{"type": "AWSWebIdentityCredentials", "name": "a", "key": "k"}])
    legacy = make_xr(
        "EKS", secrets=[*good["spec"]["secrets"][:1], {"type": "AWSWebIdentityCredentials", "name": "a", "key": "k"}]
    )
    del legacy["spec"]["cloud"]  # v0.3.1: the cloud inferred, with a warning naming the XR
    legacy_other = copy.deepcopy(legacy)
    legacy_other["metadata"]["name"] = "other"
    requests = [request(x) for x in (good, renamed, numbered, no_kubeconfig, no_kubeconfig, legacy, legacy_other)]
    rsps = warm_and_cold(*requests)
    assert fatal(rsps[0]) is None
    assert (fatal(rsps[1]) or "").startswith("ServingStack team-ml/other: metadata.labels.team:")
    assert (fatal(rsps[2]) or "").startswith("ServingStack team-ml/7.0: metadata.name:")
    assert "spec.secrets: a secret of type Kubeconfig is required" in (fatal(rsps[3]) or "")
    assert fatal(rsps[4]) == fatal(rsps[3])  # refused again: a refused spec is never kept
    warnings = [[r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING] for rsp in rsps[5:]]
    assert "ServingStack team-ml/prod-eu-1: spec.cloud is not set" in warnings[0][0]
    assert "ServingStack team-ml/other: spec.cloud is not set" in warnings[1][0]


def test_a_malformed_memory_is_refused_alike_while_a_good_one_is_kept() -> None:
    xr = make_xr("EKS")
    good = remembering(xr, [{"name": "hold", "servingStack": HOLD}], ["hold"])
    unknown = remembering(xr, [{"name": "hold", "servingStack": {**HOLD, "priorty": 1}}], ["hold"])
    nameless = remembering(xr, [{"servingStack": HOLD}], ["hold"])
    not_a_map = remembering(xr, ["hold"], ["hold"])
    forgotten = remembering(xr, [], ["hold"])  # applied last time, but its content is not remembered
    rsps = warm_and_cold(*(request(x) for x in (good, unknown, nameless, good, not_a_map, forgotten)))
    assert fatal(rsps[0]) is None and fatal(rsps[3]) is None
    assert "EnvironmentConfig hold applied at the last reconcile but it was not delivered" in rsps[0].results[0].message
    assert (fatal(rsps[1]) or "").startswith(
        "EnvironmentConfig hold (absent; as remembered in status.stack.documents): servingStack.priorty: unknown"
    )
    assert fatal(rsps[2]) == ("ServingStack status.stack.documents[0]: needs a name and a servingStack document")
    assert fatal(rsps[4]) == "ServingStack status.stack.documents[0]: must be a map"
    assert "status.stack.documents does not record what it said" in (fatal(rsps[5]) or "")


def test_a_remembered_document_is_not_taken_for_an_environment_config_of_the_same_bytes() -> None:
    # The memory entry's Struct, delivered as an EnvironmentConfig: it has no data.servingStack, whatever
    # the memory made of the same bytes before.
    entry = {"name": "hold", "servingStack": HOLD}
    remembered = request(remembering(make_xr("EKS"), [entry], ["hold"]))
    delivered = request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [entry]})
    rsps = warm_and_cold(remembered, delivered)
    assert fatal(rsps[0]) is None
    assert fatal(rsps[1]) == ("EnvironmentConfig ?: data.servingStack: missing (selected as an override document)")


def test_each_function_input_makes_its_own_requirements_and_a_bad_one_is_refused_alike() -> None:
    hold = ec("hold", HOLD)
    by_name = {**INPUT, "spec": {"names": [{"name": "hold"}]}}
    by_label = {**INPUT, "spec": {"selectors": [{"matchLabels": {"team": "ml"}}]}}
    misspelt = {**INPUT, "spec": {"name": [{"name": "hold"}]}}
    requests = [request(make_xr("EKS"), input=i, required={}) for i in (by_name, by_label, None, misspelt)]
    rsps = warm_and_cold(*requests, *requests)
    asked = [dict(rsp.requirements.resources) for rsp in rsps[:3]]
    assert [sorted(a) for a in asked] == [
        ["servingstack-overrides", "servingstack-overrides-name-hold"],
        ["servingstack-overrides-selector-0"],
        ["servingstack-overrides"],
    ]
    assert asked[0]["servingstack-overrides-name-hold"].match_name == "hold"
    assert dict(asked[1]["servingstack-overrides-selector-0"].match_labels.labels) == {"team": "ml"}
    assert (fatal(rsps[3]) or "").startswith("function Input servingstack.fn.modelplane.ai/v1beta1: spec.name:")
    answered = request(
        make_xr("EKS"), input=by_name, required={DEFAULT_REQUIREMENT: [], "servingstack-overrides-name-hold": [hold]}
    )
    [rendered] = warm_and_cold(answered)
    assert (
        fatal(rendered) is None
        and "hold" in rendered.desired.composite.resource["status"]["stack"]["environmentConfigs"]
    )


KEYS = st.sampled_from(["stack", "stacks", "stac", "gateway", "conditions", "", "zz"])
LEAVES = st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=3))
VALUES = st.recursive(
    LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=9
)
STACKS = st.fixed_dictionaries(
    {"stack": st.dictionaries(KEYS, VALUES, max_size=4)}, optional={"gateway": VALUES, "zz": VALUES, "stac": VALUES}
)
STATUSES = st.one_of(VALUES, st.dictionaries(KEYS, VALUES, max_size=5), STACKS)


@given(STATUSES, st.dictionaries(KEYS, VALUES, max_size=2))
def test_the_observed_status_stack_is_sliced_from_the_request_as_serializing_it_gives(
    status: Any, beside: dict[str, Any]
) -> None:
    # fn.run takes status.stack from the request's serialization rather than serializing it again.
    xr = {**make_xr("EKS"), **{k: v for k, v in beside.items() if k}, "status": status}
    req = request(xr)
    serialized = req.SerializeToString(deterministic=True)
    assert memory.observed_stack(req, serialized) == memory.observed_stack(req)


SPECS = st.one_of(
    VALUES,
    st.builds(lambda extra: {**make_xr("EKS")["spec"], **extra}, st.dictionaries(KEYS, VALUES, max_size=2)),
)


@given(SPECS, st.dictionaries(KEYS, VALUES, max_size=2))
def test_the_spec_is_read_alike_sliced_from_the_request_or_from_the_message(spec: Any, status: Any) -> None:
    # fn.run keys the specs it validated by their bytes sliced from the request's serialization.
    xr = {**make_xr("EKS"), "spec": spec, "status": status}
    req = request(xr)
    serialized = req.SerializeToString(deterministic=True)
    sliced = inputs.observed_map(serialized, "spec")
    resource = req.observed.composite.resource
    assert sliced == (resource["spec"].SerializeToString(deterministic=True) if isinstance(spec, dict) else None)

    def read(data: bytes | None) -> Any:
        for cache in caches():
            cache.clear()
        try:
            return observed_xr(resource, data)
        except InputError as err:
            return str(err)

    assert read(serialized) == read(None)


@given(st.integers(0, 2**64 - 1))
def test_varints_are_read_as_protobuf_writes_them(n: int) -> None:
    # inputs._varint reads one- and two-byte varints without its loop; every length goes either way.
    data = encoder._VarintBytes(n)
    assert inputs._varint(b"\x01" + data + b"\x02", 1) == (n, 1 + len(data))
    assert inputs._varint(data, 0) == (n, len(data))
    with pytest.raises(DecodeError):
        inputs._varint(data[:-1], 0)
