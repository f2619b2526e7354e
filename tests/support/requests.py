"""Raw RunFunctionRequests for hostile and fuzzed input, and what every outcome must look like.

Unlike the render loop (which converts through JSON and refuses NaN itself),
these put any Python value into the request's Structs exactly as given, the
way a misbehaving client or provider could.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2

from function.errors import MAX_MESSAGE_CHARS
from function.fn import FunctionRunner
from function.overrides.collect import DEFAULT_REQUIREMENT
from tests.support.xr import provider_configs

ANNOTATION = "crossplane.io/composition-resource-name"


def struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def request(
    xr: Mapping[str, Any],
    *,
    observed: Mapping[str, Mapping[str, Any]] | None = None,
    required: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    context: Mapping[str, Any] | None = None,
    input: Mapping[str, Any] | None = None,
) -> fnv1.RunFunctionRequest:
    """A request as Crossplane sends it once requirements settled.

    ``observed`` maps composed resource names to bodies (default: the two
    ProviderConfigs); ``required`` maps requirement names to resources
    (default: the function's own selector, answered with nothing).
    """
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "hostile"
    req.observed.composite.resource.CopyFrom(struct(xr))
    if observed is None:
        meta = xr.get("metadata")
        named = isinstance(meta, dict) and isinstance(meta.get("name"), str) and isinstance(meta.get("namespace"), str)
        configs = provider_configs(copy.deepcopy(dict(xr))) if named else []
        observed = {o["metadata"]["annotations"][ANNOTATION]: o for o in configs}
    for key, body in observed.items():
        req.observed.resources[key].resource.CopyFrom(struct(body))
    for name, items in ({DEFAULT_REQUIREMENT: []} if required is None else required).items():
        resources = req.required_resources[name]
        resources.SetInParent()
        for item in items:
            resources.items.add().resource.CopyFrom(struct(item))
    if context is not None:
        req.context.CopyFrom(struct(context))
    if input is not None:
        req.input.CopyFrom(struct(input))
    return req


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """RunFunction in process, as the gRPC server calls it."""
    return asyncio.run(FunctionRunner().RunFunction(req))


def call(target: str, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """RunFunction over gRPC (a fresh channel: these calls are few)."""
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", -1)]) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
        rsp: fnv1.RunFunctionResponse = stub.RunFunction(req, timeout=60)
        return rsp


def fatal(rsp: fnv1.RunFunctionResponse) -> str | None:
    """The Fatal message, or None when the call rendered (or asked for resources)."""
    return next((r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL), None)


def assert_readable(rsp: fnv1.RunFunctionResponse) -> str | None:
    """Every outcome is a render or a bounded Fatal naming an object and a field; returns the Fatal."""
    for result in rsp.results:  # warnings and summaries are bounded too
        assert len(result.message) <= MAX_MESSAGE_CHARS + 64, len(result.message)
    message = fatal(rsp)
    if message is None:
        return None
    assert not message.startswith("internal error"), message[:2000]
    assert len(message) <= MAX_MESSAGE_CHARS + 64, len(message)
    obj, _, rest = message.partition(": ")
    assert obj and rest, message[:2000]
    assert not rsp.desired.resources, "a Fatal renders nothing"
    return message
