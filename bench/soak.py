"""Soak: N concurrent callers against the real server on loopback, over every stack and override scenario.

(``bench/load.py`` compares one server process with two on one request; this
script holds one server under a mix of requests for several rounds and
watches its latency, errors and memory.)

Each round sends a fixed number of requests from a mix of every stack
(cloud/accelerator) with every example override scenario that applies to it,
in one of three kinds:

* ``warm``: the requests Crossplane repeats on every reconcile (memoized);
* ``new-xr``: each request from a cluster not seen before (a fresh label),
  so the response is computed while the plan is cached;
* ``cold``: each request carrying a document changed since the last one, so
  the plan is computed too;
* ``distinct``: a fleet of ``--distinct`` distinct ServingStacks (10,000 by
  default; ``bench/fleet.py``), each round reconciling every one of them once
  with the status the last response wrote it (the first round: new
  clusters). A round is ``--distinct`` calls, not ``--requests``: what the
  server holds after a poll over a whole fleet.

Per round it prints throughput, p50/p99 latency, errors (gRPC errors and
Fatal results) and the server's RSS before and after. Bounded: loopback only,
``--rounds x --requests`` calls in all. Usage::

    ./dev soak [--callers 1 32] [--rounds 3] [--requests 2000] [--kinds warm new-xr cold distinct]
               [--distinct 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Callable

import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from bench.benchmark import changed_document, new_cluster
from bench.fleet import MAX_FLEET, Fleet, call_fleet
from bench.fleet import mix as _mix
from bench.fleet import rss_mb as _rss_mb
from tests.support.serve import serving

KINDS = ["warm", "new-xr", "cold", "distinct"]


def _requests(
    mix: list[tuple[str, fnv1.RunFunctionRequest]], kind: str, count: int, serial: itertools.count[int]
) -> list[fnv1.RunFunctionRequest]:
    vary: dict[str, Callable[[fnv1.RunFunctionRequest, int], fnv1.RunFunctionRequest]] = {
        "warm": lambda req, _: req,
        "new-xr": new_cluster,
        "cold": changed_document,
    }
    cycle = itertools.cycle(req for _, req in mix)
    return [vary[kind](next(cycle), next(serial)) for _ in range(count)]


async def _round(target: str, callers: int, requests: list[fnv1.RunFunctionRequest]) -> tuple[list[float], int]:
    queue = list(reversed(requests))
    latencies: list[float] = []
    errors = 0

    async def caller() -> None:
        nonlocal errors
        # One connection per caller, kept open, as Crossplane keeps one per function.
        async with grpc.aio.insecure_channel(target) as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
            while queue:
                req = queue.pop()
                start = time.perf_counter()
                try:
                    rsp = await stub.RunFunction(req, timeout=120)
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - start)
                errors += any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results)

    await asyncio.gather(*(caller() for _ in range(callers)))
    return latencies, errors


async def _distinct_round(target: str, callers: int, fleet: Fleet) -> tuple[list[float], int]:
    """Every XR of ``fleet`` reconciled once, ``callers`` at a time, one connection each."""
    async with contextlib.AsyncExitStack() as channels:
        stubs = [
            grpcv1.FunctionRunnerServiceStub(  # type: ignore[no-untyped-call]
                await channels.enter_async_context(
                    grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
                )
            )
            for _ in range(callers)
        ]
        calls, _ = await call_fleet(stubs, fleet, range(len(fleet)))
    return calls.new + calls.steady, calls.errors


async def main(callers: list[int], rounds: int, count: int, kinds: list[str], distinct: int) -> None:
    logging.configure(logging.Level.DISABLED)
    mix, refused = await _mix()
    print(f"mix: {len(mix)} (stack, scenario) pairs; refused by design and left out: {', '.join(refused) or 'none'}")
    serial = itertools.count()
    with serving(["function.main", "--insecure"]) as (target, proc):
        await _round(target, 1, [req for _, req in mix])  # every stack loaded, every plan once
        print(f"{'kind':<8}{'callers':>8}{'round':>6}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}"
              f"{'RSS before':>12}{'RSS after':>11}")  # fmt: skip
        for kind, n in itertools.product(kinds, callers):
            # A fleet of its own per run (XRs no other run sent): its round 1 is new clusters.
            fleet = (
                Fleet([req for _, req in mix], distinct, first=next(serial) * MAX_FLEET) if kind == "distinct" else None
            )
            for r in range(rounds):
                before = _rss_mb(proc.pid)
                start = time.perf_counter()
                if fleet is not None:
                    sent = len(fleet)
                    latencies, errors = await _distinct_round(target, n, fleet)
                else:
                    requests = _requests(mix, kind, count, serial)
                    sent = len(requests)
                    latencies, errors = await _round(target, n, requests)
                elapsed = time.perf_counter() - start
                ordered = sorted(latencies)
                p50 = statistics.median(ordered) * 1e3 if ordered else 0.0
                p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3 if ordered else 0.0
                print(
                    f"{kind:<8}{n:>8}{r + 1:>6}{sent / elapsed:>9.0f}{p50:>9.2f}{p99:>9.2f}{errors:>7}"
                    f"{before:>10.0f}MB{_rss_mb(proc.pid):>9.0f}MB"
                )


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--callers", type=int, nargs="+", default=[1, 32], help="concurrent callers (each a run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--kinds", nargs="+", default=KINDS[:3], choices=KINDS)
    parser.add_argument("--distinct", type=int, default=10_000, help="ServingStacks in the distinct kind's fleet")
    args = parser.parse_args()
    if not 1 <= args.distinct <= MAX_FLEET:
        parser.error(f"--distinct: 1-{MAX_FLEET} ServingStacks")
    return args


if __name__ == "__main__":
    args = _args()
    asyncio.run(main(args.callers, args.rounds, args.requests, args.kinds, args.distinct))
