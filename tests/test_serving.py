"""Serving as the ecosystem expects, read from the logs of a real served process.

The ``serving on ADDRESS (TLS|insecure)`` line, the per-request line under
``--debug``, every Fatal at info with the XR's name, the SDK's gRPC message
size options, and ``--reuse-port`` for several processes behind one address.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import server, stack
from function.offline import run_pipeline
from function.tree import to_struct
from tests.support.crossplane import grpc_runner
from tests.support.repo import EXAMPLE, load_docs
from tests.support.serve import cli, free_port, serving
from tests.support.xr import make_xr, provider_configs

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _lines(log: Path, want: str, timeout: float = 10.0) -> list[str]:
    """The log's lines (colour codes removed) once one contains ``want``."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [ANSI.sub("", line) for line in log.read_text().splitlines()]
        if any(want in line for line in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def _json(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def _render(target: str, xr: dict[str, Any], **kwargs: Any) -> Any:
    return asyncio.run(run_pipeline(grpc_runner(target, timeout=20), xr=xr, **kwargs))


def test_serving_line_and_fatals_at_info(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with serving(["function.main", "--insecure"], log=log) as (target, _):
        lines = _json(_lines(log, "serving on"))
        assert [e["msg"] for e in lines if e["msg"].startswith("serving on")] == [f"serving on {target} (insecure)"]
        assert lines[-1]["level"] == "info"

        bad = make_xr("Moon")
        with pytest.raises(Exception, match="fatal result"):
            _render(target, bad)
        fatals = [e for e in _json(_lines(log, "Fatal result")) if e["msg"] == "Fatal result"]
        assert len(fatals) == 1
        assert fatals[0]["level"] == "info"
        assert fatals[0]["xr"] == "team-ml/prod-eu-1"
        assert "spec.cloud" in fatals[0]["message"]
        # At info, a request that composes logs nothing.
        before = len(log.read_text().splitlines())
        _render(target, make_xr("GKE"), observed=provider_configs(make_xr("GKE")))
        assert len(log.read_text().splitlines()) == before


def test_debug_logs_one_line_per_request(tmp_path: Path) -> None:
    log = tmp_path / "log"
    xr = make_xr("GKE")
    with serving(["function.main", "--insecure", "--debug"], log=log) as (target, _):
        _render(target, xr, observed=provider_configs(xr), required=load_docs(EXAMPLE / "environmentconfigs"))
        lines = [line for line in _lines(log, "result=Normal") if "RunFunction" in line]
    # The requirements loop: the first call asks for the EnvironmentConfigs, the second composes.
    assert len(lines) == 2, lines
    assert "result=Requirements" in lines[0]
    composed = lines[1]
    assert "xr=team-ml/prod-eu-1" in composed
    assert "stack_id=gke-nvidia" in composed
    assert "documents=['regulated-bank', 'prod-hold']" in composed
    assert "result=Normal" in composed
    assert re.search(r"duration_ms=[0-9.]+", composed)
    assert "serving on" in log.read_text()


def _big_request_xr() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    xr = make_xr("GKE")
    filler = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big", "annotations": {"crossplane.io/composition-resource-name": "big"}},
        "data": {"blob": "x" * (2 * 1024 * 1024)},  # 2 MB of observed state
    }
    return xr, [*provider_configs(xr), filler]


def test_max_message_sizes_are_the_sdk_options(tmp_path: Path) -> None:
    xr, observed = _big_request_xr()
    with (
        serving(["function.main", "--insecure", "--max-recv-message-size", "1"], log=tmp_path / "a") as (
            target,
            _,
        ),
        pytest.raises(Exception, match=r"RESOURCE_EXHAUSTED|larger than max"),
    ):
        _render(target, xr, observed=observed)
    # The SDK's environment variable works the same; 4 MB (the default) takes it.
    with serving(["function.main", "--insecure"], log=tmp_path / "b", env={"MAX_GRPC_MESSAGE_SIZE": "4"}) as (
        target,
        _,
    ):
        result = _render(target, xr, observed=observed)
        assert "gpu-operator" in result.desired.resources
    # A send limit below the response size fails the call, not the server.
    # (The response carries the context on: 2 MB of it.)
    big_context = {"example.org/blob": "x" * (2 * 1024 * 1024)}
    with serving(
        ["function.main", "--insecure", "--max-send-message-size", "1", "--max-recv-message-size", "4"],
        log=tmp_path / "c",
    ) as (target, proc):
        with pytest.raises(Exception, match=r"RESOURCE_EXHAUSTED|larger than max"):
            _render(target, make_xr("GKE"), context=big_context)
        assert proc.poll() is None
        assert _render(target, make_xr("GKE")).calls == 2


def test_reuse_port_is_an_explicit_opt_in(tmp_path: Path) -> None:
    port = free_port()
    with serving(["function.main", "--insecure", "--reuse-port", "--debug"], log=tmp_path / "a", port=port) as (
        target,
        _,
    ):
        # Without the flag the busy port is refused ...
        refused = cli("--insecure", "--address", target)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1].startswith(f"function: cannot serve on {target}")
        # ... with it a second process shares the address, and both answer: the
        # kernel spreads new connections over them (each call opens its own).
        with serving(["function.main", "--insecure", "--reuse-port", "--debug"], log=tmp_path / "b", port=port):
            _lines(tmp_path / "b", "serving on", timeout=60)
            for _ in range(10):
                assert _render(target, make_xr("GKE")).calls == 2
    answered = [sum("RunFunction" in line for line in _lines(tmp_path / n, "")) for n in ("a", "b")]
    assert sum(answered) == 20
    assert all(answered), answered  # all 20 on one process: odds 2**-19
    for name in ("a", "b"):
        assert f"serving on {target} (insecure)" in (tmp_path / name).read_text()


def test_requests_never_lose_the_server(tmp_path: Path) -> None:
    """A request the servicer cannot parse as an XR is a Fatal in the log, and the server keeps serving."""
    with serving(["function.main", "--insecure"], log=tmp_path / "log") as (target, proc):
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.CopyFrom(to_struct({"metadata": {"name": "odd"}, "spec": 3}))

        async def call() -> fnv1.RunFunctionResponse:
            async with grpc.aio.insecure_channel(target) as channel:
                rsp: fnv1.RunFunctionResponse = await grpc_runner(target)(req)
                del channel
                return rsp

        rsp = asyncio.run(call())
        assert rsp.results[0].severity == fnv1.SEVERITY_FATAL
        assert proc.poll() is None
        fatals = [e for e in _json(_lines(tmp_path / "log", "Fatal result")) if e["msg"] == "Fatal result"]
        assert fatals[0]["xr"] == "odd"


def test_non_positive_message_sizes_fail_in_one_line() -> None:
    for flag in ("--max-recv-message-size", "--max-send-message-size"):
        out = cli("--insecure", flag, "0", "--address", f"127.0.0.1:{free_port()}")
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == [
            "function: --max-recv-message-size and --max-send-message-size are in MB and must be positive"
        ]


def test_serving_starts_with_the_loaded_stacks_frozen_and_young_objects_collected_less_often(
    invoke: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the collector is set to when the server starts: the stacks loaded before are never walked again."""
    seen: dict[str, Any] = {}

    def record(_runner: Any, listen: server.Listen) -> None:
        seen.update(threshold=gc.get_threshold(), frozen=gc.get_freeze_count(), address=listen.address)

    before = gc.get_threshold()
    monkeypatch.setattr(server, "serve", record)
    try:
        result = invoke("--insecure", "--address", "127.0.0.1:0")
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert result.exit_code == 0, result.output
    assert seen["address"] == "127.0.0.1:0"
    assert seen["threshold"] == (server.GC_YOUNG_THRESHOLD, *before[1:])
    # Every generated stack's components are among the frozen objects.
    assert seen["frozen"] > sum(len(s.components) for s in stack.every())
