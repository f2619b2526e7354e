"""Drive the function as Crossplane does: in process through the offline loop, or over gRPC.

:func:`grpc_runner` dials a function served on loopback the way
``crossplane render``'s Development runtime does (insecure gRPC, waiting for
the server, falling back to the v1beta1 service when v1 answers
UNIMPLEMENTED); the product itself only ever runs the function in process
(:mod:`function.offline`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1

from function.fn import FunctionRunner
from function.offline import RenderResult, RunFn, run_pipeline
from tests.support.xr import provider_configs

# The generated stubs are untyped; call them through Any.
_StubV1: Any = grpcv1.FunctionRunnerServiceStub
_StubV1beta1: Any = grpcv1beta1.FunctionRunnerServiceStub

# render's default function timeout: a call that takes longer is a failure, not a hang.
_DEFAULT_TIMEOUT_SECONDS = 60.0


def grpc_runner(target: str, *, timeout: float | None = _DEFAULT_TIMEOUT_SECONDS) -> RunFn:
    """Call a function served at ``target`` over insecure gRPC, like render's Development runtime.

    Calls wait for the server to become ready (up to ``timeout`` seconds), and
    fall back to the v1beta1 service when v1 answers UNIMPLEMENTED, as render
    does. Each call opens and closes its own channel.
    """

    async def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        async with grpc.aio.insecure_channel(target) as channel:
            try:
                rsp: fnv1.RunFunctionResponse = await _StubV1(channel).RunFunction(
                    req, timeout=timeout, wait_for_ready=True
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
            else:
                return rsp
            beta_req = fnv1beta1.RunFunctionRequest.FromString(req.SerializeToString())
            beta_rsp = await _StubV1beta1(channel).RunFunction(beta_req, timeout=timeout, wait_for_ready=True)
            out: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(beta_rsp.SerializeToString())
            return out

    return run


def render(
    xr: dict[str, Any],
    observed: list[dict[str, Any]] | None = None,
    required: list[dict[str, Any]] | None = None,
    input: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> RenderResult:
    """Render in process through the same requirements loop crossplane render runs.

    ``observed`` defaults to the two ProviderConfigs, as on a cluster where they exist.
    """
    return asyncio.run(
        run_pipeline(
            FunctionRunner().RunFunction,
            xr=xr,
            observed=provider_configs(xr) if observed is None else observed,
            required=required or [],
            input=input,
            context=context,
        )
    )


def desired(result: RenderResult) -> dict[str, dict[str, Any]]:
    """The desired composed resources of a render, by composed resource name."""
    return {k: resource.struct_to_dict(v.resource) for k, v in result.desired.resources.items()}


def run_once(xr: dict[str, Any], observed: list[dict[str, Any]] | None = None) -> fnv1.RunFunctionResponse:
    """One RunFunction call with every requirement answered as empty."""
    req = fnv1.RunFunctionRequest(observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(xr))))
    for obs in provider_configs(xr) if observed is None else observed:
        key = obs["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        req.observed.resources[key].resource.update(obs)
    first = asyncio.run(FunctionRunner().RunFunction(req))
    for name in first.requirements.resources:
        req.required_resources[name].CopyFrom(fnv1.Resources())
    return asyncio.run(FunctionRunner().RunFunction(req))
