"""Each optimisation the function keeps, switched off and on in one interleaved run (issue 21, item 2).

An optimisation stays only where it moves a figure users feel by 10% or
more. For every mechanism this times, in process through the served runner
(``FunctionRunner.respond``, what the gRPC handler calls), the EKS +
regulated-bank render in three cases, with the mechanism off and on in turn
so load hits both alike:

- **steady state**: the request every reconcile sends (the XR carrying its
  last status), the same bytes each time;
- **new cluster**: a ServingStack never seen (its own name, no status yet),
  the plan cached;
- **changed document**: the documents changed (one component's values),
  so the plan is computed again;
- **changed mirrors**: every mirror target changed, so every component is
  built again.

A cache is off when it finds nothing and keeps nothing (its ``get`` and
``put`` replaced on the instance for the duration); the lasting encodings are
off when the encoder knows no part as lasting and encodes every map; the
collector settings are off at CPython's defaults. Every mechanism starts from
empty caches, warmed alike. Then what each cache holds once the run is over:
its share of the one memory budget. Prints figures, asserts nothing.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from bench.benchmark import BANK, _docs, _final_request, _percentiles, _with_last_status, _xr, changed_document
from function import cache, encode, server
from function.fn import FunctionRunner

_PAYS = 1.10  # the guide's rule: an optimisation stays where it moves a figure by 10% or more
_Switch = Callable[[], AbstractContextManager[None]]


@contextmanager
def _cache_off(name: str) -> Iterator[None]:
    """Every cache named ``name`` (the runner's response memo is one per runner) finds and keeps nothing."""
    found = [c for c in cache.caches() if c.name == name]
    for c in found:
        c.get = lambda *_: None  # type: ignore[method-assign]
        c.put = lambda *args: args[1]  # type: ignore[method-assign]  # (key, value, size): the value, not kept
    try:
        yield
    finally:
        for c in found:
            del c.get, c.put


@contextmanager
def _lasting_off() -> Iterator[None]:
    """The encoder takes no part's kept encoding: every map of a body is encoded each time."""
    known = encode._lasting_part
    encode._lasting_part = lambda _node: None  # type: ignore[assignment]
    try:
        yield
    finally:
        encode._lasting_part = known


@contextmanager
def _key_orders_off() -> Iterator[None]:
    """The encoder sorts every map's keys and encodes every key anew (its order and head memos empty)."""
    orders, heads, kept = dict(encode._ORDERS), dict(encode._HEADS), encode._KEPT_KEYS
    encode._ORDERS.clear()
    encode._HEADS.clear()
    encode._KEPT_KEYS = 0
    try:
        yield
    finally:
        encode._ORDERS.update(orders)
        encode._HEADS.update(heads)
        encode._KEPT_KEYS = kept


@contextmanager
def _collector_defaults() -> Iterator[None]:
    """CPython's collector as it starts: nothing frozen, young objects collected at 700. (Back on, what was
    frozen is frozen again, without the collection ``settle_heap`` starts with: it would run between calls.)"""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, *thresholds[1:])
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(*thresholds)


def mechanisms() -> dict[str, _Switch]:
    """Every mechanism by name, with what switches it off."""
    switches: dict[str, _Switch] = {
        f"cache: {name}": functools.partial(_cache_off, name) for name in sorted({c.name for c in cache.caches()})
    }
    switches["lasting encodings (encode.Lasting)"] = _lasting_off
    switches["key orders and heads (encode)"] = _key_orders_off
    switches["collector settings (server.settle_heap)"] = _collector_defaults
    return switches


async def _requests() -> tuple[fnv1.RunFunctionRequest, fnv1.RunFunctionRequest]:
    """EKS + regulated-bank's final request without a status (a new cluster's), and with its last status and
    the references to its composed resources Crossplane keeps in ``spec.crossplane.resourceRefs``."""
    first = await _final_request(_xr("EKS", "NVIDIA"), _docs(BANK))
    steady = fnv1.RunFunctionRequest()
    steady.CopyFrom(first)
    await _with_last_status(steady)
    rsp = await FunctionRunner().RunFunction(steady)
    xr = steady.observed.composite.resource
    name = xr["metadata"]["name"]
    refs = [
        {"apiVersion": r.resource["apiVersion"], "kind": r.resource["kind"], "name": f"{name}-{key}"}
        for key, r in sorted(rsp.desired.resources.items())
    ]
    xr["spec"].get_or_create_struct("crossplane")["resourceRefs"] = refs
    return first, steady


def _named(req: fnv1.RunFunctionRequest, serial: int) -> fnv1.RunFunctionRequest:
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    out.observed.composite.resource["metadata"]["name"] = f"mechanism-{serial:06d}"
    return out


def _time(runner: FunctionRunner, req: fnv1.RunFunctionRequest) -> float:
    start = time.perf_counter()
    runner.respond(req)
    return time.perf_counter() - start


def _ratio(off: float, on: float) -> str:
    ratio = off / on
    return f"{ratio:5.2f}x{'*' if ratio >= _PAYS else ' '}"


def run(n: int) -> None:
    """Print, per mechanism and case, the median with it off and on, their ratio, and the ratio of the 99th
    percentiles (what the collector settings move)."""
    logging.configure(logging.Level.DISABLED)
    first, steady = asyncio.run(_requests())
    runner = FunctionRunner()
    server.settle_heap()
    serial = 0

    def case(name: str) -> fnv1.RunFunctionRequest:
        nonlocal serial
        serial += 1
        if name == "steady state":
            return steady
        if name == "new cluster":
            return _named(first, serial)
        return changed_document(steady, serial, mirrors=name == "changed mirrors")

    cases = ("steady state", "new cluster", "changed document", "changed mirrors")
    print(f"EKS/NVIDIA + regulated-bank, in process, {n} calls per case and state, interleaved (p50 ms off / on):")
    print(f"  {'mechanism':<44}" + "".join(f"{c:>38}" for c in cases))
    for label, off in mechanisms().items():
        for memo in cache.caches():  # each from the same start: the budget filled by one is not the next one's
            memo.clear()
        for name in cases:  # warm: the plans, parts and memo entry every case shares
            for _ in range(10):
                runner.respond(case(name))
        samples: dict[tuple[str, bool], list[float]] = {(c, on): [] for c in cases for on in (False, True)}
        for i in range(n):
            for c in cases:
                for on in (i % 2 == 0, i % 2 == 1):  # who goes first alternates
                    req = case(c)  # its own: what one state computed must not be cached for the other
                    if on:
                        samples[c, on].append(_time(runner, req))
                    else:
                        with off():
                            samples[c, on].append(_time(runner, req))
        row = ""
        for c in cases:
            (off_p50, off_p99), (on_p50, on_p99) = (_percentiles(samples[c, on]) for on in (False, True))
            row += f"{off_p50:>9.3f} /{on_p50:>6.3f} {_ratio(off_p50, on_p50)} p99 {_ratio(off_p99, on_p99)}"
        print(f"  {label:<44}{row}")
    print(f"  (ratios off/on; *: at least {_PAYS:.2f}x, a figure the mechanism moves by 10% or more)")
    print(f"\nWhat each cache holds now, of the budget's {cache.budget() / cache.MIB:.0f} MiB:")
    for memo in cache.caches():
        print(f"  {memo.name:<24} {len(memo):>6} entries {memo.bytes / cache.MIB:8.2f} MiB")
