"""Load test: one server process against two behind one address, on loopback.

Sends the request Crossplane sends on every reconcile (the example XR with the
bank's overrides, requirements settled) from ``--clients`` concurrent callers,
each on its own connection, as Crossplane's replicas and its round_robin over
the function's endpoints do. Three set-ups, each for at most ``--requests``
calls or ``--seconds`` seconds, whichever ends first:

* ``1 process``: one server;
* ``2 processes, SO_REUSEPORT``: two servers started with ``--reuse-port`` on
  one address; the kernel spreads the connections;
* ``2 processes, 2 ports``: two servers on two ports, the clients alternating
  between them (client-side round robin, what Crossplane does over a headless
  Service's endpoints).

Prints throughput and latency (median, p99) per set-up and the ratios to one
process, measured in this run. Loopback only; every server is stopped at the end.
Figures depend on the machine's free cores: on a shared 2-core machine the
client competes with the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from bench.benchmark import BANK, _docs, _final_request, _percentiles, _xr
from tests.support.serve import free_port, serving

_Stub: Any = grpcv1.FunctionRunnerServiceStub  # untyped generated stub


def _cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of processes so far (Linux /proc; all their threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return total / ticks


@contextlib.contextmanager
def _servers(ports: Sequence[int], reuse_port: bool) -> Iterator[tuple[list[str], list[int]]]:
    args = ["function.main", "--insecure", *(["--reuse-port"] if reuse_port else [])]
    with tempfile.TemporaryDirectory() as logs, contextlib.ExitStack() as stack:
        targets, pids = [], []
        for i, port in enumerate(ports):
            target, proc = stack.enter_context(serving(args, timeout=120, log=Path(logs) / f"{i}.log", port=port))
            pids.append(proc.pid)
            # The first server already accepts on a shared port: wait for this one's own line.
            log = Path(logs) / f"{i}.log"
            deadline = time.monotonic() + 120
            while "serving on" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            targets.append(target)
        yield targets, pids


async def _load(
    targets: Sequence[str], req: fnv1.RunFunctionRequest, clients: int, requests: int, seconds: float
) -> tuple[int, float, list[float]]:
    """Run the load; (calls answered, wall seconds, latencies)."""
    # A channel of its own per client: gRPC would otherwise share one
    # connection between channels to the same target.
    channels = [
        grpc.aio.insecure_channel(targets[i % len(targets)], options=[("grpc.use_local_subchannel_pool", 1)])
        for i in range(clients)
    ]
    latencies: list[float] = []
    remaining = requests
    start = time.perf_counter()
    deadline = start + seconds

    async def client(channel: grpc.aio.Channel) -> None:
        nonlocal remaining
        stub = _Stub(channel)
        await stub.RunFunction(req, timeout=60, wait_for_ready=True)  # connect and warm up, untimed
        while remaining > 0 and time.perf_counter() < deadline:
            remaining -= 1
            t = time.perf_counter()
            rsp: fnv1.RunFunctionResponse = await stub.RunFunction(req, timeout=60)
            latencies.append(time.perf_counter() - t)
            assert rsp.desired.resources, "the load request must compose"

    try:
        await asyncio.gather(*(client(c) for c in channels))
    finally:
        for c in channels:
            await c.close()
    return len(latencies), time.perf_counter() - start, latencies


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8, help="concurrent callers, one connection each")
    parser.add_argument("--requests", type=int, default=1500, help="at most this many calls per set-up")
    parser.add_argument("--seconds", type=float, default=20.0, help="at most this long per set-up")
    args = parser.parse_args(argv)
    if not (1 <= args.clients <= 64 and 1 <= args.requests <= 100_000 and 0 < args.seconds <= 300):
        parser.error("bounds: 1-64 clients, 1-100000 requests, up to 300 seconds per set-up")

    logging.configure(logging.Level.DISABLED)
    req = asyncio.run(_final_request(_xr("GKE", "NVIDIA"), _docs(BANK)))
    port = free_port()
    setups = (
        ("1 process", [port], False),
        ("2 processes, SO_REUSEPORT", [port, port], True),
        ("2 processes, 2 ports", [port, free_port()], False),
    )
    print(f"request: {req.ByteSize()} bytes; {args.clients} clients; <= {args.requests} calls or {args.seconds:g} s")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the run")
    print(f"{'set-up':<28}{'calls':>7}{'calls/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'server CPU ms/call':>20}{'client':>8}")
    base = 0.0
    for name, ports, reuse in setups:
        with _servers(ports, reuse) as (targets, pids):
            server_cpu, client_cpu = _cpu_seconds(pids), time.process_time()
            # Two ports: the clients alternate between the two servers.
            calls, wall, latencies = asyncio.run(_load(targets, req, args.clients, args.requests, args.seconds))
            server_cpu, client_cpu = _cpu_seconds(pids) - server_cpu, time.process_time() - client_cpu
        rate = calls / wall
        base = base or rate
        p50, p99 = _percentiles(latencies)
        per_call = 1e3 / max(calls, 1)
        print(
            f"{name:<28}{calls:>7}{rate:>10.1f}{p50:>9.1f}{p99:>9.1f}{server_cpu * per_call:>20.2f}"
            f"{client_cpu * per_call:>8.2f}   x{rate / base:.2f} throughput"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
