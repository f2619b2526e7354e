"""The tests' gRPC runner talks to a served function as ``crossplane render``'s Development runtime does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from crossplane.function.runtime import BetaFunctionRunner

from function.offline import RenderError, RenderResult, run_pipeline
from function.render_output import dump_yaml, render_documents
from tests.support.crossplane import grpc_runner
from tests.support.serve import serving
from tests.support.tiny_function import EXPECTED_YAML, REQUIRED, XR, TinyFunction

# --------------------------------------------------------------------------- #
# Over real gRPC
# --------------------------------------------------------------------------- #


@pytest.fixture
def served_function() -> Iterator[str]:
    with serving(["tests.support.tiny_function"]) as (target, _):
        yield target


def test_over_real_grpc(served_function: str) -> None:
    run = grpc_runner(served_function, timeout=20)
    result = asyncio.run(
        run_pipeline(run, xr=XR, step="tiny", input={"mode": "require", "namespace": "team-a"}, required=REQUIRED)
    )
    assert result.calls == 2
    docs = render_documents(result, include_results=True, include_context=True)
    assert dump_yaml(docs) == EXPECTED_YAML

    with pytest.raises(RenderError, match="returned a fatal result: the cluster is on fire"):
        asyncio.run(run_pipeline(run, xr=XR, step="tiny", input={"mode": "fatal"}))
    with pytest.raises(RenderError, match="didn't stabilize"):
        asyncio.run(run_pipeline(run, xr=XR, step="tiny", input={"mode": "unstable"}))


def test_grpc_runner_falls_back_to_v1beta1() -> None:
    """A server that only speaks v1beta1 answers v1 with UNIMPLEMENTED; the runner retries on v1beta1."""

    async def scenario() -> RenderResult:
        server = grpc.aio.server()
        add_beta: Any = grpcv1beta1.add_FunctionRunnerServiceServicer_to_server  # untyped generated code
        add_beta(BetaFunctionRunner(TinyFunction()), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            return await run_pipeline(
                grpc_runner(f"127.0.0.1:{port}", timeout=20),
                xr=XR,
                step="tiny",
                input={"mode": "require", "namespace": "team-a"},
                required=REQUIRED,
            )
        finally:
            await server.stop(None)

    result = asyncio.run(scenario())
    assert result.calls == 2
    assert dump_yaml(render_documents(result, include_results=True, include_context=True)) == EXPECTED_YAML
