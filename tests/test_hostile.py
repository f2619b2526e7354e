"""Hostile input: every request ends in a render or a bounded Fatal naming the object and the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.errors import MAX_MESSAGE_CHARS
from function.inputs import GRPC_MAX_RECEIVE_BYTES, MAX_DEPTH, MAX_OBJECT_BYTES, MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES
from function.overrides.collect import CONTEXT_KEY, DEFAULT_REQUIREMENT
from tests.support.repo import EXAMPLE, load_docs
from tests.support.requests import assert_readable, call, fatal, request, run, struct
from tests.support.xr import make_xr, provider_configs

BANK = load_docs(EXAMPLE / "environmentconfigs" / "regulated-bank.yaml")[0]
NAN, INF = float("nan"), float("inf")
INPUT = {"apiVersion": "servingstack.fn.modelplane.ai/v1beta1", "kind": "Input"}


def _xr(**change: Any) -> dict[str, Any]:
    xr = make_xr("EKS")
    for path, value in change.items():
        *parents, leaf = path.split("__")
        node = xr
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return xr


def _bank(**data: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BANK)
    doc["data"].update(data)
    return doc


def _nested(levels: int) -> Any:
    """``levels`` maps, one inside the other."""
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": value}
    return value


XR = "ServingStack team-ml/prod-eu-1"
NON_FINITE: list[tuple[str, Callable[[], fnv1.RunFunctionRequest], str]] = [
    (
        "xr spec",
        lambda: request(_xr(spec__gateway__className=NAN)),
        "ServingStack team-ml/prod-eu-1: spec.gateway.className",
    ),
    ("xr label", lambda: request(_xr(metadata__labels__a=INF)), "ServingStack team-ml/prod-eu-1: metadata.labels.a"),
    ("xr unknown spec field", lambda: request(_xr(spec__extra=-INF)), "ServingStack team-ml/prod-eu-1: spec.extra"),
    (
        "override document",
        lambda: request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [_bank(servingStack={"priority": NAN})]}),
        "EnvironmentConfig regulated-bank: data.servingStack.priority",
    ),
    (
        "override values",
        lambda: request(
            make_xr("EKS"),
            required={
                DEFAULT_REQUIREMENT: [_bank(servingStack={"components": {"cert-manager": {"values": {"a": [1, INF]}}}})]
            },
        ),
        "EnvironmentConfig regulated-bank: data.servingStack.components.cert-manager.values.a[1]",
    ),
    (
        "context document",
        lambda: request(make_xr("EKS"), context={CONTEXT_KEY: {"servingStack": {"priority": INF}}}),
        f"context {CONTEXT_KEY}: servingStack.priority",
    ),
    ("input", lambda: request(make_xr("EKS"), input={**INPUT, "metadata": {"x": NAN}}), "function Input"),
]


@pytest.mark.parametrize(("build", "names"), [c[1:] for c in NON_FINITE], ids=[c[0] for c in NON_FINITE])
def test_nan_and_infinity_are_a_fatal_naming_object_and_field(
    build: Callable[[], fnv1.RunFunctionRequest], names: str
) -> None:
    message = assert_readable(run(build()))
    assert message is not None and message.startswith(names), message
    assert "not a number JSON or Kubernetes can hold" in message


@pytest.mark.parametrize(
    "req",
    [
        # Not ours to judge: another function's data, the context's other keys, observed state.
        request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [_bank(other={"x": NAN})]}),
        request(make_xr("EKS"), context={CONTEXT_KEY: {"other": INF}, "another/key": NAN}),
        request(_xr(status={"x": NAN})),
        request(_xr(metadata__managedFields=[{"fieldsV1": {"f:x": INF}}])),
    ],
    ids=["environmentconfig other data", "context other keys", "xr status", "xr managedFields"],
)
def test_nan_where_the_function_does_not_read_renders(req: fnv1.RunFunctionRequest) -> None:
    rsp = run(req)
    assert fatal(rsp) is None
    assert "cert-manager" in rsp.desired.resources


@pytest.mark.parametrize(
    ("xr", "names"),
    [
        (_xr(metadata__namespace=5), "metadata.namespace: Input should be a valid string"),
        (_xr(metadata__name=5), "metadata.name: Input should be a valid string"),
        (_xr(metadata__labels={"a": 1}), "metadata.labels.a: Input should be a valid string"),
        (_xr(metadata__labels=["a"]), "metadata.labels: Input should be a valid dictionary"),
        (_xr(metadata="x"), "metadata: Input should be a valid dictionary"),
        (_xr(spec=[1]), "spec: Input should be a valid dictionary"),
        (_xr(apiVersion=None), "apiVersion: Input should be a valid string"),
    ],
)
def test_wrong_types_in_metadata_are_a_fatal_naming_the_field(xr: dict[str, Any], names: str) -> None:
    message = assert_readable(run(request(xr)))
    assert message is not None and names in message, message


MALFORMED_CONDITIONS = [
    [{"type": "Ready"}],
    [{}],
    "x",
    [5],
    {"type": "Ready"},
    [{"type": 5, "status": "True"}],
    [{"type": "Ready", "status": True}],
    [{"type": "Ready", "status": "False", "lastTransitionTime": 1}],
]


@pytest.mark.parametrize("conditions", MALFORMED_CONDITIONS)
def test_malformed_observed_conditions_render_as_not_ready(conditions: Any) -> None:
    xr = make_xr("EKS")
    observed = {
        o["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: o for o in provider_configs(xr)
    }
    observed["cert-manager"] = {"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release",
                                "status": {"conditions": conditions}}  # fmt: skip
    observed["gateway"] = {"status": {"atProvider": {"manifest": {"status": {"addresses": [{"value": {"x": 1}}]}}}}}
    rsp = run(request(xr, observed=observed))
    assert fatal(rsp) is None
    assert rsp.desired.resources["cert-manager"].ready == fnv1.READY_UNSPECIFIED
    assert "gateway" not in rsp.desired.composite.resource["status"]  # a non-string address is not believed


def test_a_ready_condition_with_an_unparseable_time_is_ready() -> None:
    # Only type and status decide; the time is the provider's business.
    xr = make_xr("EKS")
    observed = {
        o["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: o for o in provider_configs(xr)
    }
    observed["cert-manager"] = {
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "x"}]}
    }
    rsp = run(request(xr, observed=observed))
    assert rsp.desired.resources["cert-manager"].ready == fnv1.READY_TRUE


def test_a_megabyte_bad_field_gives_a_bounded_fatal_with_an_excerpt() -> None:
    big = "x" * 1_100_000
    for req in (
        request(_xr(spec__cloud=big)),
        request(_xr(spec__gateway__listeners=[{"name": big, "port": 1}, {"name": "a", "port": big}])),
        request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [_bank(servingStack={big: 1})]}),
        request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [_bank(servingStack={"components": {big: {}}})]}),
    ):
        message = assert_readable(run(req))
        assert message is not None and len(message) <= MAX_MESSAGE_CHARS + 64
        assert "more characters" in message


def test_an_object_above_the_size_limit_is_refused_naming_it() -> None:
    big = "x" * (MAX_OBJECT_BYTES + 1)
    message = assert_readable(run(request(_xr(metadata__annotations={"a": big}))))
    assert message is not None
    assert message.startswith("the ServingStack (observed composite resource): ")
    assert f"above the limit of {MAX_OBJECT_BYTES} bytes" in message
    doc = _bank(blob=big)
    message = assert_readable(run(request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [doc]})))
    assert message is not None and message.startswith(f"required resource {DEFAULT_REQUIREMENT}[0]: ")


def test_the_input_and_the_context_above_the_size_limit_are_refused_naming_them() -> None:
    # Sizes are read from the request's serialization (function.inputs.check_request): each object by its own.
    big = {"blob": "x" * (MAX_OBJECT_BYTES + 1)}
    for req, obj in (
        (request(make_xr("EKS"), input=big), "the function Input"),
        (request(make_xr("EKS"), context=big), "the pipeline context"),
    ):
        message = assert_readable(run(req))
        size = struct(big).ByteSize()  # what protobuf measures for the object itself
        assert message is not None and message.startswith(f"{obj}: {size} bytes, above the limit")


def test_a_request_above_the_size_limit_is_refused_before_any_work() -> None:
    xr = make_xr("EKS")
    chunk = "x" * (2 * 1024 * 1024)
    observed = {f"noise-{i}": {"status": {"blob": chunk}} for i in range(MAX_REQUEST_BYTES // len(chunk) + 1)}
    message = assert_readable(run(request(xr, observed=observed)))
    assert message is not None and message.startswith("the RunFunctionRequest: ")


def _deep_requests(levels: int) -> dict[str, fnv1.RunFunctionRequest]:
    # levels counts the maps of the whole object (the object itself is one).
    xr = make_xr("EKS")
    xr["metadata"]["labels"] = _nested(levels - 2)
    return {
        "xr": request(xr),
        "observed": request(make_xr("EKS"), observed={"noise": {"status": _nested(levels - 1)}}),
        "environmentconfig": request(
            make_xr("EKS"), required={DEFAULT_REQUIREMENT: [_bank(servingStack={"x": _nested(levels - 3)})]}
        ),
        "context": request(make_xr("EKS"), context={CONTEXT_KEY: {"servingStack": _nested(levels - 2)}}),
        "input": request(make_xr("EKS"), input={**INPUT, "metadata": _nested(levels - 1)}),
    }


def test_objects_at_the_depth_limit_pass_the_wire_and_the_function(server: str) -> None:
    for case, req in _deep_requests(MAX_DEPTH).items():
        for rsp in (run(req), call(server, req)):
            message = assert_readable(rsp)
            # Within the limit: whatever is refused is refused for what it says, not its depth.
            assert message is None or "nested deeper" not in message, (case, message)


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, MAX_DEPTH + 2, 200])
def test_objects_beyond_the_depth_limit_are_a_fatal_over_grpc_naming_object_and_field(server: str, levels: int) -> None:
    # As the server's decoder names them, and as the function does where the decoder let them through.
    env, bank = f"context {CONTEXT_KEY}", "EnvironmentConfig regulated-bank"
    expected = {
        "xr": (
            "the ServingStack (observed composite resource): metadata.labels.k",
            f"{XR}: metadata.labels.k",
        ),
        "observed": ("observed composed resource noise: status.k",),
        "environmentconfig": (
            f"required resource {DEFAULT_REQUIREMENT}[0]: data.servingStack.x.k",
            f"{bank}: data.servingStack.x.k",
        ),
        "context": (f"the pipeline context: {CONTEXT_KEY}.servingStack.k", f"{env}: servingStack.k"),
        "input": ("the function Input: metadata.k", f"function Input {INPUT['apiVersion']}: metadata.k"),
    }
    for case, req in _deep_requests(levels).items():
        rsp = call(server, req)
        message = assert_readable(rsp)
        if message is None:  # decoded whole (only just past the limit) and not read by the function
            assert levels == MAX_DEPTH + 1 and case == "observed"
            continue
        assert "nested deeper than 32 levels" in message, (case, message)
        assert message.startswith(expected[case]), (case, message)
        assert rsp.meta.tag == "hostile"
    # The same objects in process: refused where the function reads them.
    for case in ("xr", "environmentconfig", "context", "input"):
        message = assert_readable(run(_deep_requests(levels)[case]))
        assert message is not None and "nested deeper than 32 levels" in message, (case, message)


def test_above_the_grpc_receive_limit_grpc_refuses_and_the_server_keeps_serving(server: str) -> None:
    req = request(make_xr("EKS"), observed={"noise": {"blob": "x" * (GRPC_MAX_RECEIVE_BYTES + 1)}})
    with pytest.raises(grpc.RpcError) as err:
        call(server, req)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert fatal(call(server, request(make_xr("EKS")))) is None


def test_a_response_above_what_crossplane_accepts_is_a_fatal(server: str) -> None:
    # Two documents of 2.5 MB each, within every input limit, render a response above 4 MiB.
    blob = "x" * 2_500_000
    docs = []
    for name, component in (("big-a", "cert-manager"), ("big-b", "prometheus")):
        doc = copy.deepcopy(BANK)
        doc["metadata"]["name"] = name
        doc["data"]["servingStack"] = {"components": {component: {"values": {"blob": blob}}}}
        docs.append(doc)
    req = request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: docs})
    for rsp in (run(req), call(server, req)):
        message = assert_readable(rsp)
        assert message is not None and message.startswith("the rendered response: "), message
        assert f"above the {MAX_RESPONSE_BYTES} bytes Crossplane accepts" in message
        assert "cert-manager (25" in message and "prometheus (25" in message


def test_bytes_that_are_no_request_are_a_fatal_over_grpc(server: str) -> None:
    with grpc.insecure_channel(server) as channel:
        call_raw = channel.unary_unary(
            "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction",
            request_serializer=None,
            response_deserializer=fnv1.RunFunctionResponse.FromString,
        )
        rsp = call_raw(b"\x0a\xff\xff\xff\xff\x0f garbage", timeout=60)
    message = assert_readable(rsp)
    assert message is not None and message.startswith("the RunFunctionRequest: not a valid protobuf message"), message


@pytest.mark.parametrize("conditions", MALFORMED_CONDITIONS)
def test_malformed_conditions_on_the_xr_itself_render(conditions: Any) -> None:
    # The Warnings condition is compared with the observed XR's (function.events).
    rsp = run(request(_xr(status={"conditions": conditions})))
    assert fatal(rsp) is None
    assert "cert-manager" in rsp.desired.resources


def test_a_bad_remembered_document_is_a_fatal_naming_it() -> None:
    remembered = [{"name": "gone", "servingStack": {"priority": NAN}}]
    xr = _xr(status={"stack": {"environmentConfigs": ["gone"], "documents": remembered}})
    message = assert_readable(run(request(xr)))
    assert message is not None and "status.stack.documents[0]" in message, message
