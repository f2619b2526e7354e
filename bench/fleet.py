"""Fleet: N distinct ServingStacks reconciled by the real server, as Crossplane's poll sends them (issue 21).

The other figures of ``./dev bench`` are per request; a control plane runs a
fleet. Crossplane reconciles every XR once per poll interval (a minute by
default) and sends the function that XR's request each time: the XR carrying
the status the last response wrote, requirements settled. The function's
response memo answers a repeated request without rendering, but it is bounded
(``function.cache``): with more clusters than it holds, polls render again.
What a fleet costs is what this measures, through the server process only (a
separate ``python -m function.main`` on loopback), so it holds whatever the
function's internals become.

The N XRs are spread over every (stack, override scenario) pair that renders:
each stack of ``function.stack.available()`` (Standard and Dynamo) with no
documents and with each of ``example/environmentconfigs``. Each XR differs
from every other (its own name and a label no document matches on), so no
cluster is answered from another's memo entry. Requests are derived from the
pairs' final requests when sent, and each XR's last status is kept serialized
and interned (XRs of one pair are told the same status): 10,000 XRs cost the
client a few megabytes and a fraction of a second to build.

Pass 1 is the fleet's first reconcile (every XR a new cluster, the plans
already cached by a warm-up over the pairs); each later pass reconciles every
XR again with its last status, a ``--fleet-new-share`` of the XRs having been
replaced by new clusters (a cluster deleted, another created: a first
reconcile). Per pass: the server's CPU seconds per reconcile (utime + stime
of the process, ``/proc/<pid>/stat``), the share of one core that implies at
one reconcile per XR per poll interval, its RSS after, latency and errors
(gRPC errors and Fatal results). Bounded: loopback only, at most
``--fleet-passes`` passes over N XRs, stopping at ``--fleet-seconds``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from bench.benchmark import _docs, _final_request, _percentiles, _xr
from bench.load import _cpu_seconds
from function import stack
from function.offline import RenderError
from tests.support.repo import EXAMPLE
from tests.support.serve import serving

SCENARIOS = {"none": [], **{p.stem: _docs(p) for p in sorted((EXAMPLE / "environmentconfigs").glob("*.yaml"))}}

# Issue 21's targets for a fleet of 10,000: at one reconcile per XR per poll
# interval, at most a quarter of one core; the server's RSS within what its
# caches may hold (the response memo alone 64 MiB by default), and under
# 160 MB in the soak. Printed beside the figures, never asserted.
POLL_SECONDS = 60.0  # Crossplane's default --poll-interval
CORE_SHARE_TARGET = 0.25
RSS_TARGET_MB = 160.0
TARGET_FLEET = 10_000

# What one run may ask for: it stops by itself.
MAX_FLEET = 100_000
MAX_PASSES = 10
MAX_CALLERS = 64
MAX_SECONDS = 7200.0

FLEET_LABEL = "bench.example/fleet-xr"  # no document matches on it: a label makes the XR distinct, not its plan

_Stub: Any = grpcv1.FunctionRunnerServiceStub  # untyped generated stub


def rss_mb(pid: int) -> float:
    """The resident set of a process now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def mix() -> tuple[list[tuple[str, fnv1.RunFunctionRequest]], list[str]]:
    """The final request of every (stack, scenario) that renders; and the pairs that are refused (by design)."""
    pairs, refused = [], []
    for cloud, accelerator, kind in stack.available():
        label = stack.module_name(cloud, accelerator, kind)
        for name, docs in SCENARIOS.items():
            try:
                pairs.append((f"{label}+{name}", await _final_request(_xr(cloud, accelerator, kind), docs)))
            except RenderError:
                refused.append(f"{label}+{name}")
    return pairs, refused


class Fleet:
    """N distinct ServingStacks made from a few base requests, and the status each was last answered with.

    Slot ``i`` holds one XR at a time, made from base ``i % len(bases)`` (so
    the pairs share the fleet evenly); :meth:`replace` puts a new cluster in
    a slot. Requests are built when sent, so the client holds no 10,000
    requests, only one interned status per distinct status told.
    """

    def __init__(self, bases: Sequence[fnv1.RunFunctionRequest], size: int, first: int = 0) -> None:
        """``size`` XRs numbered from ``first``: fleets against one server take disjoint numbers to stay distinct."""
        self._bases = [b.SerializeToString() for b in bases]
        self._serials = list(range(first, first + size))  # slot -> the XR it holds (a serial number, never reused)
        self._born = itertools.count(first + size)
        self._status: dict[int, bytes] = {}  # slot -> the serialized status its XR was last told
        self._interned: dict[bytes, bytes] = {}

    def __len__(self) -> int:
        return len(self._serials)

    @property
    def statuses(self) -> int:
        """Distinct statuses told so far (the interned ones)."""
        return len(self._interned)

    def is_new(self, slot: int) -> bool:
        """Whether the slot's XR has not been answered yet: its next request is its first reconcile."""
        return slot not in self._status

    def replace(self, slot: int) -> None:
        """The slot's cluster deleted and a new one created: a new name, no status."""
        self._serials[slot] = next(self._born)
        self._status.pop(slot, None)

    def request(self, slot: int) -> fnv1.RunFunctionRequest:
        """What Crossplane sends for the slot's XR now: its own name and label, the status it was last told."""
        req: fnv1.RunFunctionRequest = fnv1.RunFunctionRequest.FromString(self._bases[slot % len(self._bases)])
        xr = req.observed.composite.resource
        serial = self._serials[slot]
        xr["metadata"]["name"] = f"fleet-{serial:06d}"
        xr["metadata"].get_or_create_struct("labels")[FLEET_LABEL] = str(serial)
        told = self._status.get(slot)
        if told is not None:
            status = xr.get_or_create_struct("status")
            status.Clear()
            status.MergeFromString(told)
        return req

    def answered(self, slot: int, rsp: fnv1.RunFunctionResponse) -> None:
        """Keep the status ``rsp`` wrote, as the XR carries it on its next reconcile (a Fatal writes none)."""
        status = rsp.desired.composite.resource.fields.get("status")
        if status is None:
            self._status.setdefault(slot, b"")  # answered: no longer a first reconcile; Crossplane keeps the old
            return
        data = status.struct_value.SerializeToString(deterministic=True)
        self._status[slot] = self._interned.setdefault(data, data)


@dataclasses.dataclass
class Calls:
    """What a run of calls came back with."""

    new: list[float] = dataclasses.field(default_factory=list)  # latencies of first reconciles
    steady: list[float] = dataclasses.field(default_factory=list)  # latencies of repeated reconciles
    grpc_errors: int = 0
    fatal: int = 0

    @property
    def count(self) -> int:
        return len(self.new) + len(self.steady) + self.grpc_errors

    @property
    def errors(self) -> int:
        return self.grpc_errors + self.fatal


async def call_fleet(
    stubs: Sequence[Any], fleet: Fleet, slots: Iterable[int], deadline: float = float("inf")
) -> tuple[Calls, bool]:
    """Reconcile ``slots`` of ``fleet``, one caller per stub, until done or ``deadline`` (perf_counter).

    Returns the calls' figures and whether every slot was reconciled.
    """
    calls = Calls()
    pending: Iterator[int] = iter(slots)
    finished = True

    async def caller(stub: Any) -> None:
        nonlocal finished
        for slot in pending:  # shared: each slot goes to one caller
            if time.perf_counter() > deadline:
                finished = False
                return
            new = fleet.is_new(slot)
            req = fleet.request(slot)
            start = time.perf_counter()
            try:
                rsp: fnv1.RunFunctionResponse = await stub.RunFunction(req, timeout=120)
            except grpc.aio.AioRpcError:
                calls.grpc_errors += 1
                continue
            (calls.new if new else calls.steady).append(time.perf_counter() - start)
            calls.fatal += any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results)
            fleet.answered(slot, rsp)

    await asyncio.gather(*(caller(s) for s in stubs))
    return calls, finished


def _p50_p99(samples: list[float]) -> tuple[float, float]:
    """Median and 99th percentile in ms; NaN for no samples (a pass may have no new cluster)."""
    return _percentiles(samples) if samples else (float("nan"), float("nan"))


@dataclasses.dataclass
class Pass:
    """One pass over the fleet: its calls and what the server spent on them."""

    name: str
    calls: Calls
    finished: bool
    wall: float
    cpu: float  # server CPU seconds
    rss: float  # server RSS after, MB

    def cpu_per_call(self) -> float:
        return self.cpu / max(self.calls.count, 1)

    def core_share(self, size: int) -> float:
        """The share of one core the fleet takes at one reconcile per XR per poll interval, at this pass's cost."""
        return size / POLL_SECONDS * self.cpu_per_call()


def _print_pass(p: Pass, size: int) -> None:
    p50, p99 = _p50_p99(p.calls.new + p.calls.steady)
    share = p.core_share(size)
    print(
        f"{p.name:<22}{p.calls.count:>7}{len(p.calls.new):>7}{p.wall:>8.1f}{p.cpu_per_call() * 1e3:>9.3f}"
        f"{share * 100:>8.1f}%{share / CORE_SHARE_TARGET:>7.2f}{p.rss:>8.0f}{p.rss / RSS_TARGET_MB:>7.2f}"
        f"{p50:>8.2f}{p99:>8.2f}{_p50_p99(p.calls.new)[0]:>8.2f}{_p50_p99(p.calls.steady)[0]:>8.2f}"
        f"{p.calls.errors:>7}{'' if p.finished else '  (stopped at --fleet-seconds)'}"
    )


@dataclasses.dataclass(frozen=True)
class FleetConfig:
    """What ``--fleet`` runs: ``size`` XRs, ``passes`` over them, within ``seconds``."""

    size: int
    passes: int = 3
    new_share: float = 0.01  # XRs replaced by new clusters before each pass after the first
    callers: int = 1  # concurrent calls on the one connection
    seconds: float = 1800.0
    seed: int = 21  # of the poll order and of which XRs are replaced

    def out_of_bounds(self) -> str | None:
        """Why this run would not be bounded, if it would not be."""
        if not (
            1 <= self.size <= MAX_FLEET
            and 1 <= self.passes <= MAX_PASSES
            and 0 <= self.new_share <= 1
            and 1 <= self.callers <= MAX_CALLERS
            and 0 < self.seconds <= MAX_SECONDS
        ):
            return (
                f"fleet bounds: 1-{MAX_FLEET} XRs, 1-{MAX_PASSES} passes, a share in [0, 1], 1-{MAX_CALLERS} callers, "
                f"up to {MAX_SECONDS:g} s"
            )
        return None


async def run_fleet(config: FleetConfig) -> list[Pass]:
    """Reconcile ``config.size`` distinct ServingStacks, pass after pass, against one server process; print it."""
    size, passes, new_share, callers, seconds = (
        config.size,
        config.passes,
        config.new_share,
        config.callers,
        config.seconds,
    )
    start = time.perf_counter()
    pairs, refused = await mix()
    fleet = Fleet([req for _, req in pairs], size)
    rng = random.Random(config.seed)
    print(
        f"fleet of {size} distinct ServingStacks over {len(pairs)} (stack, scenario) pairs "
        f"(refused by design and left out: {', '.join(refused) or 'none'}); {callers} caller(s) on one connection; "
        f"after pass 1, {new_share:.1%} of the XRs replaced by new clusters each pass"
    )
    results: list[Pass] = []
    deadline = start + seconds
    with serving(["function.main", "--insecure"], timeout=120) as (target, proc):
        async with grpc.aio.insecure_channel(target) as channel:  # one connection, as Crossplane keeps per function
            stubs = [_Stub(channel)] * callers
            rss_started = rss_mb(proc.pid)
            for _, req in pairs:  # every stack loaded, every pair's plan computed once: pass 1 is new clusters
                await stubs[0].RunFunction(req, timeout=120)
            warm = rss_mb(proc.pid)
            print(f"server RSS: {rss_started:.0f} MB once serving, {warm:.0f} MB after a warm-up over the pairs")
            print(
                f"{'pass':<22}{'calls':>7}{'new':>7}{'wall s':>8}{'CPU ms':>9}{'core':>9}{'/tgt':>7}{'RSS MB':>8}"
                f"{'/tgt':>7}{'p50 ms':>8}{'p99 ms':>8}{'new p50':>8}{'old p50':>8}{'errors':>7}"
            )
            for number in range(1, passes + 1):
                if number > 1:
                    for slot in rng.sample(range(size), round(size * new_share)):
                        fleet.replace(slot)
                order = list(range(size))
                rng.shuffle(order)  # the poll reaches XRs in no particular order
                cpu, wall = _cpu_seconds([proc.pid]), time.perf_counter()
                calls, finished = await call_fleet(stubs, fleet, order, deadline)
                cpu, wall = _cpu_seconds([proc.pid]) - cpu, time.perf_counter() - wall
                name = "1 (new clusters)" if number == 1 else f"{number} (steady + new)"
                results.append(Pass(name, calls, finished, wall, cpu, rss_mb(proc.pid)))
                _print_pass(results[-1], size)
                if not finished:
                    break
    _print_targets(results, size, fleet, time.perf_counter() - start)
    return results


def _print_targets(results: list[Pass], size: int, fleet: Fleet, elapsed: float) -> None:
    print(
        "columns: server CPU ms per reconcile; core = share of one core at one reconcile per XR per "
        f"{POLL_SECONDS:g} s ({size / POLL_SECONDS:.1f} reconciles/s), /tgt its ratio to "
        f"{CORE_SHARE_TARGET:.0%}; server RSS after the pass, /tgt its ratio to {RSS_TARGET_MB:g} MB; "
        "new/old p50: first reconciles / repeated ones; errors: gRPC errors + Fatal results"
    )
    last = results[-1]
    print(
        f"targets (issue 21, at {TARGET_FLEET} XRs): <= {CORE_SHARE_TARGET:.0%} of one core -> last pass "
        f"{last.core_share(size):.1%} at {size} XRs (x{last.core_share(size) / CORE_SHARE_TARGET:.2f} the target); "
        f"at {TARGET_FLEET} XRs this pass's cost per reconcile would take "
        f"{last.core_share(TARGET_FLEET):.1%} (x{last.core_share(TARGET_FLEET) / CORE_SHARE_TARGET:.2f}); "
        f"RSS <= {RSS_TARGET_MB:g} MB (caches: the response memo 64 MiB by default) -> "
        f"{max(p.rss for p in results):.0f} MB at most (x{max(p.rss for p in results) / RSS_TARGET_MB:.2f})"
    )
    print(f"distinct statuses told: {fleet.statuses}; the whole run took {elapsed:.0f} s")
