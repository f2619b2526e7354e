"""The same request gives the same response: within one process, and across two server processes
(byte for byte, and as a message)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.fn import FunctionRunner
from function.offline import run_pipeline
from tests.support.crossplane import run_once
from tests.support.overrides import ec
from tests.support.repo import EXAMPLE, load_docs
from tests.support.serve import serving
from tests.support.xr import make_xr, provider_configs

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
NVIDIA_ONLY = {
    key: {"state": "Removed"}
    for key in ("gpu-operator", "gpu-operator-configmap-dcgm-exporter", "dra-driver", "dra-driver-critical-pods-quota")
}


def _final_request(xr: dict[str, Any], required: list[dict[str, Any]]) -> fnv1.RunFunctionRequest:
    result = asyncio.run(
        run_pipeline(FunctionRunner().RunFunction, xr=xr, observed=provider_configs(xr), required=required)
    )
    return result.requests[-1]


def _requests() -> dict[str, fnv1.RunFunctionRequest]:
    docs = {p.stem: load_docs(p) for p in (EXAMPLE / "environmentconfigs").glob("*.yaml")}
    bad = make_xr("EKS")
    bad["spec"]["secrets"] = []
    fatal = fnv1.RunFunctionRequest()
    fatal.observed.composite.resource.update(bad)
    return {
        "eks+bank": _final_request(make_xr("EKS"), docs["regulated-bank"]),
        "existing+gpu-pools": _final_request(make_xr("Existing"), docs["gpu-pools"]),
        "vultr-amd": _final_request(make_xr("Vultr", "AMD"), []),
        # Components this stack lacks are skipped with a note each, listed in the document's order: a
        # protobuf map's, which the Python runtime iterates differently in each process.
        "vultr-amd+skipped": _final_request(make_xr("Vultr", "AMD"), [ec("nvidia-only", {"components": NVIDIA_ONLY})]),
        "fatal": fatal,
    }


@pytest.fixture(scope="module")
def two_servers() -> Iterator[tuple[str, str]]:
    # Different hash seeds: any output that followed Python's set or hash order would differ.
    with (
        serving(["function.main", "--insecure"], env={"PYTHONHASHSEED": "1"}) as (a, _),
        serving(["function.main", "--insecure"], env={"PYTHONHASHSEED": "2"}) as (b, _),
    ):
        yield a, b


def _raw_call(target: str, req: fnv1.RunFunctionRequest) -> bytes:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        data: bytes = call(req.SerializeToString(), timeout=60)
        return data


@pytest.mark.parametrize("case", ["eks+bank", "existing+gpu-pools", "vultr-amd", "vultr-amd+skipped", "fatal"])
def test_two_processes_answer_the_same_bytes_and_message(two_servers: tuple[str, str], case: str) -> None:
    req = _requests()[case]
    first, second = (_raw_call(target, req) for target in two_servers)
    assert first == second  # deterministic serialization: map entries sorted by key
    assert fnv1.RunFunctionResponse.FromString(first) == fnv1.RunFunctionResponse.FromString(second)
    # And what the function computes in process is what the servers sent.
    assert FunctionRunner().respond(req) == first


def test_map_order_is_not_part_of_the_message() -> None:
    # What a client re-serializing without deterministic=True may see: other
    # bytes for the same message. Compare parsed messages, not bytes.
    rsp = fnv1.RunFunctionResponse.FromString(FunctionRunner().respond(_requests()["eks+bank"]))
    shuffled = fnv1.RunFunctionResponse()
    shuffled.CopyFrom(rsp)
    shuffled.desired.ClearField("resources")
    for key in sorted(rsp.desired.resources, reverse=True):
        shuffled.desired.resources[key].CopyFrom(rsp.desired.resources[key])
    assert shuffled == rsp
    assert shuffled.SerializeToString(deterministic=True) == rsp.SerializeToString(deterministic=True)


def test_same_request_same_bytes() -> None:
    xr = make_xr("EKS")
    a = run_once(xr).SerializeToString(deterministic=True)
    b = run_once(xr).SerializeToString(deterministic=True)
    assert a == b
