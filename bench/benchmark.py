"""Benchmark: prints figures, asserts nothing. Compare ratios within one run.

Per stack: resources rendered, response bytes, RunFunction latency in process
and over gRPC (median, p99), with and without the regulated-bank overrides, and
with them in steady state (the XR carrying the status, and so the document
memory, the last response wrote); then the full EKS + regulated-bank render
against the floor (the same response bytes from a trivial servicer on the same
SDK) and the cold path (a plan computed for a changed document) against a
cached render, each interleaved in one run, and the first plan of freshly
restarted servers; then a fork's transform path against the plain one (in
process, interleaved); then import time and RSS of the server module, and the
generator's time.

``--fleet N`` prints instead what a fleet of N distinct ServingStacks costs
the server process (bench/fleet.py); ``--paths-only`` only the transform
paths.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function import stack
from function.fn import FunctionRunner
from function.model import ServingStack
from function.offline import run_pipeline
from function.overrides.collect import CONTEXT_KEY
from function.overrides.document import DOCUMENT_KEY
from function.transforms import Transform
from tests.support.crossplane import grpc_runner
from tests.support.repo import REPO
from tests.support.serve import serving

EXAMPLE = REPO / "example"
BANK = EXAMPLE / "environmentconfigs" / "regulated-bank.yaml"


def _docs(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def _xr(cloud: str, accelerator: str, kind: str = "Standard") -> dict[str, Any]:
    xr = _docs(EXAMPLE / "xr.yaml")[0]
    xr["spec"]["cloud"] = cloud
    xr["spec"]["accelerator"] = accelerator
    xr["spec"]["stack"] = kind
    # The bank document matches by label; keep the example's labels.
    return xr


async def _final_request(xr: dict[str, Any], required: list[dict[str, Any]]) -> fnv1.RunFunctionRequest:
    """The request Crossplane sends once requirements settled: what every reconcile costs."""
    result = await run_pipeline(
        FunctionRunner().RunFunction, xr=xr, observed=_docs(EXAMPLE / "observed"), required=required
    )
    return result.requests[-1]


async def _with_last_status(req: fnv1.RunFunctionRequest) -> None:
    """A steady-state reconcile: the XR carries the status (and document memory) the last response wrote."""
    rsp = await FunctionRunner().RunFunction(req)
    req.observed.composite.resource.get_or_create_struct("status").CopyFrom(rsp.desired.composite.resource["status"])


def new_cluster(req: fnv1.RunFunctionRequest, serial: int) -> fnv1.RunFunctionRequest:
    """``req`` from a cluster not seen before: a label no document matches on, so the plan stays cached."""
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    out.observed.composite.resource["metadata"].get_or_create_struct("labels")["bench.example/cluster"] = str(serial)
    return out


def changed_document(req: fnv1.RunFunctionRequest, serial: int, *, mirrors: bool = False) -> fnv1.RunFunctionRequest:
    """``req`` after its override documents changed, so the plan is computed again.

    The change is the values of the first component a document gives values
    (else its priority): one component is rebuilt. With ``mirrors``, every
    image and chart mirror target moves instead, which rebuilds every
    component and the body around its values, as a restarted server must. A
    request without documents gets one in the context.
    """
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    changed = False
    for resources in out.required_resources.values():
        for item in resources.items:
            data = item.resource.fields.get("data")
            if data is None or DOCUMENT_KEY not in data.struct_value.fields:
                continue
            doc = item.resource["data"][DOCUMENT_KEY]
            changed = True
            if mirrors:  # every target moves: every component is rewritten, and its chart's repository
                registry = doc.get_or_create_struct("registry")
                for kind, catch_all in (
                    ("images", "mirror.bench.example/x"),
                    ("charts", "oci://mirror.bench.example/c"),
                ):
                    rules = registry.get_or_create_list(kind)
                    if not len(rules):
                        rules.append({"from": "*", "to": catch_all})
                    for rule in rules:
                        rule["to"] = f"{rule['to']}-{serial}"
                continue
            components = doc.fields.get("components")
            with_values = [
                c for c in (components.struct_value.fields.values() if components is not None else ())
                if "values" in c.struct_value.fields
            ]  # fmt: skip
            if with_values:
                with_values[0].struct_value["values"]["bench-revision"] = serial
            else:
                doc["priority"] = 1000 + serial
    if not changed:
        out.context.get_or_create_struct(CONTEXT_KEY)[DOCUMENT_KEY] = {"priority": 1000 + serial}
    return out


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3


async def _time_in_process(req: fnv1.RunFunctionRequest, n: int) -> tuple[float, float, int, int]:
    runner = FunctionRunner()
    rsp = await runner.RunFunction(req)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await runner.RunFunction(req)
        samples.append(time.perf_counter() - start)
    return (*_percentiles(samples), len(rsp.desired.resources), rsp.ByteSize())


async def _time_grpc(address: str, req: fnv1.RunFunctionRequest, n: int) -> tuple[float, float]:
    run = grpc_runner(address)
    await run(req)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await run(req)
        samples.append(time.perf_counter() - start)
    return _percentiles(samples)


# What issue 10 asks of the figures below: a render whose response is not kept
# within 1.25x the floor; a plan computed after a restart within 3x a render
# whose plan is cached.
MISS_TARGET = 1.25
COLD_TARGET = 3.0


async def _after_restarts(req: fnv1.RunFunctionRequest, restarts: int) -> tuple[list[float], list[float]]:
    """The first plan of a freshly started server, once per restart: ``req`` (every component built) over gRPC;
    and the median of the plan-cached renders (new clusters) that server answers next.

    Each server has warmed up as it does before serving (stacks loaded and
    prepared) and answered one request of another stack, so the connection
    is open; then ``req`` is its first request needing this stack's plan.
    A process is slower for its first requests whatever they are (its
    plan-cached renders too): the second figure is the same server's.
    """
    other = await _final_request(_xr("GKE", "NVIDIA"), [])
    first, cached = [], []
    for _ in range(restarts):
        with serving(["function.main", "--insecure"]) as (address, _):
            async with grpc.aio.insecure_channel(address) as channel:
                stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
                await stub.RunFunction(other)
                start = time.perf_counter()
                await stub.RunFunction(req)
                first.append(time.perf_counter() - start)
                renders = []
                for i in range(5):
                    start = time.perf_counter()
                    await stub.RunFunction(new_cluster(req, i))
                    renders.append(time.perf_counter() - start)
                cached.append(statistics.median(renders))
    return first, cached


async def _against_the_floor(n: int, restarts: int = 5) -> dict[str, float]:
    """The full EKS + regulated-bank render over gRPC against the floor, interleaved so load hits both alike.

    The floor (bench/floor.py) answers every call with our own response's
    bytes through the SDK's ``runtime.serve``. Both are called over one kept
    connection each, as Crossplane keeps one per function.
    """
    req = await _final_request(_xr("EKS", "NVIDIA"), _docs(BANK))
    await _with_last_status(req)  # as Crossplane sends it in steady state
    cases = {
        "floor": [req] * n,
        "ours, steady state": [req] * n,  # what every reconcile sends
        "ours, new cluster": [new_cluster(req, i) for i in range(n)],  # response computed, plan cached
        "ours, changed document": [changed_document(req, i) for i in range(n)],  # plan computed (cold)
        "ours, changed mirrors": [changed_document(req, i, mirrors=True) for i in range(n)],  # nothing cached
    }
    with (
        serving(["function.main", "--insecure"]) as (ours, _),
        tempfile.NamedTemporaryFile(suffix=".pb") as canned,
    ):
        async with grpc.aio.insecure_channel(ours) as channel:
            ours_stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
            canned.write((await ours_stub.RunFunction(req)).SerializeToString())
            canned.flush()
            with serving(["bench.floor", "--response", canned.name]) as (floor, _):
                async with grpc.aio.insecure_channel(floor) as floor_channel:
                    floor_stub = grpcv1.FunctionRunnerServiceStub(floor_channel)  # type: ignore[no-untyped-call]
                    stubs = {name: floor_stub if name == "floor" else ours_stub for name in cases}
                    samples: dict[str, list[float]] = {name: [] for name in cases}
                    for stub in (floor_stub, ours_stub):
                        for _ in range(50):  # warm both: connections, caches
                            await stub.RunFunction(req)
                    names = list(cases)
                    for i in range(n):
                        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate who goes first
                            start = time.perf_counter()
                            await stubs[name].RunFunction(cases[name][i])
                            samples[name].append(time.perf_counter() - start)
    first, cached_after = await _after_restarts(req, restarts)
    medians = {name: _percentiles(s) for name, s in samples.items()}
    print(f"\nEKS/NVIDIA + regulated-bank over gRPC, {n} calls each, interleaved (one run):")
    for name, (p50, p99) in medians.items():
        print(f"  {name:<24} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  p50/floor {p50 / medians['floor'][0]:5.2f}")
    steady, new, cold, rebuilt = (
        medians[k][0]
        for k in ("ours, steady state", "ours, new cluster", "ours, changed document", "ours, changed mirrors")
    )
    floor_p50 = medians["floor"][0]
    print(f"  ours/floor (steady state, response memo hit): {steady / floor_p50:.2f}")
    print(f"  memo-miss render (new cluster) / floor: {new / floor_p50:.2f} (target <= {MISS_TARGET})")
    print(
        f"  cold path (plan miss) / cached render: {cold / steady:.2f} (steady state), {cold / new:.2f} (new cluster)"
    )
    # After a restart every component is rebuilt; the plan-cached render is the new cluster's.
    print(
        f"  cold full rebuild (changed mirrors) / plan-cached render (new cluster): {rebuilt / new:.2f}"
        f" (target <= {COLD_TARGET})"
    )
    restarted, fresh = statistics.median(first) * 1e3, statistics.median(cached_after) * 1e3
    print(
        f"  first plan after a restart (every component built; a fresh server each time, median of {restarts}): "
        f"{restarted:.3f} ms; / plan-cached render above: {restarted / new:.2f}; / the same servers' plan-cached "
        f"renders right after it ({fresh:.3f} ms): {restarted / fresh:.2f}"
    )
    return {
        "floor": floor_p50,
        "miss": new,
        "miss/floor": new / floor_p50,
        "rebuild/cached": rebuilt / new,
        "restart/cached": restarted / new,
    }


async def _floor_runs(n: int, runs: int) -> None:
    """The floor comparison ``runs`` times in one session (each with fresh servers), then each run's ratios."""
    results = [await _against_the_floor(n) for _ in range(runs)]
    if runs > 1:
        print(
            f"\n{runs} runs: floor p50 ms, memo-miss p50 ms, memo-miss/floor, full rebuild/plan-cached, "
            "first plan after a restart/plan-cached"
        )
        for i, r in enumerate(results, 1):
            print(
                f"  run {i}: {r['floor']:.3f}  {r['miss']:.3f}  {r['miss/floor']:.2f}  {r['rebuild/cached']:.2f}"
                f"  {r['restart/cached']:.2f}"
            )


def noop(_xr: ServingStack, _resources: dict[str, dict[str, Any]]) -> None:
    """A transform that changes nothing: what remains is the cost of the transform path itself."""


def _fork_transforms() -> tuple[Transform, ...]:
    """example/fork's TRANSFORMS, loaded from its file: the fork imports its module top-level, as its repo would."""
    spec = importlib.util.spec_from_file_location("acme_fn", EXAMPLE / "fork" / "acme_fn.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.TRANSFORMS)


async def _transform_paths(n: int) -> None:
    """The full EKS + regulated-bank render of a new cluster (plan cached), with and without transforms.

    One runner per path, in process, interleaved call by call (who goes first
    rotates) so load on the machine hits every path alike. Each call is a
    cluster none of the runners has answered (a response memo miss), the same
    request to each runner. Transforms edit the bodies the plain runner
    encodes (``function.encode.editable``); the no-op transform shows what
    handing them over and checking them after costs, the fork's
    (example/fork/acme_fn.py) that and its rules.
    """
    req = await _final_request(_xr("EKS", "NVIDIA"), _docs(BANK))
    await _with_last_status(req)
    runners = {
        "plain": FunctionRunner(),
        "no-op transform": FunctionRunner(transforms=(noop,)),
        "fork (acme_fn)": FunctionRunner(transforms=_fork_transforms()),
    }
    names = list(runners)
    samples: dict[str, list[float]] = {name: [] for name in names}
    warm = 50
    for i in range(warm + n):
        call = new_cluster(req, i)
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            rsp = await runners[name].RunFunction(call)
            if i >= warm:
                samples[name].append(time.perf_counter() - start)
            if rsp.results and any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
                raise RuntimeError(f"{name}: {rsp.results[0].message}")
    print(f"\nEKS/NVIDIA + regulated-bank, new cluster (plan cached), in process, {n} calls each, interleaved:")
    plain = _percentiles(samples["plain"])[0]
    for name in names:
        p50, p99 = _percentiles(samples[name])
        print(f"  {name:<18} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  p50/plain {p50 / plain:5.2f}")


def _import_cost() -> tuple[float, float]:
    # The peak RSS of the process's own image (VmHWM): getrusage's ru_maxrss also
    # counts the image forked from this (large) benchmark process before exec.
    code = (
        "import time; t = time.perf_counter(); import function.fn, function.main; "
        "from function import stack; from function.model import Cloud, Accelerator; "
        "stack.every(); "
        "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]; "
        "print(time.perf_counter() - t, hwm)"
    )
    runs = []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
        seconds, rss_kb = out.stdout.split()
        runs.append((float(seconds), int(rss_kb) / 1024))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _generator_time() -> float:
    start = time.perf_counter()
    out = Path(os.environ.get("TMPDIR", "/tmp")) / "bench-generated"
    subprocess.run([sys.executable, "-m", "generator", "--out", str(out)], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


async def main(args: argparse.Namespace) -> None:
    """Every figure of the benchmark, or the part the flags ask for."""
    n, grpc_n, floor_n, paths_n, runs = args.n, args.grpc_n, args.floor_n, args.paths_n, args.runs
    floor_only, paths_only = args.floor_only, args.paths_only
    logging.configure(logging.Level.DISABLED)
    if floor_only or paths_only:
        if floor_only:
            await _floor_runs(floor_n, runs)
        if paths_only:
            await _transform_paths(paths_n)
        return
    bank = _docs(BANK) if BANK.exists() else []
    print(
        f"{'stack':<16}{'overrides':<10}{'resources':>10}{'bytes':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'grpc p50':>10}{'grpc p99':>10}"
    )
    with serving(["function.main", "--insecure"]) as (address, _):
        for cloud, accelerator, kind in stack.available():
            for label, required in (("none", []), ("bank", bank), ("bank+mem", bank)):
                if label != "none" and not bank:
                    continue
                req = await _final_request(_xr(cloud, accelerator, kind), required)
                if label == "bank+mem":
                    await _with_last_status(req)
                p50, p99, count, size = await _time_in_process(req, n)
                g50, g99 = await _time_grpc(address, req, grpc_n)
                print(
                    f"{stack.module_name(cloud, accelerator, kind):<16}{label:<10}{count:>10}{size:>9}"
                    f"{p50:>9.3f}{p99:>9.3f}{g50:>10.3f}{g99:>10.3f}"
                )
    await _floor_runs(floor_n, runs)
    await _transform_paths(paths_n)
    seconds, rss = _import_cost()
    print(f"import + load all stacks: {seconds:.3f} s, max RSS {rss:.0f} MB (median of 5 processes)")
    print(f"generator, all stacks: {_generator_time():.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=2000, help="in-process RunFunction calls per case")
    parser.add_argument("--grpc-n", type=int, default=300, help="gRPC calls per case")
    parser.add_argument("--floor-n", type=int, default=2000, help="gRPC calls per case against the floor")
    parser.add_argument("--floor-only", action="store_true", help="only the comparison with the floor")
    parser.add_argument("--runs", type=int, default=1, help="times to run the comparison with the floor")
    parser.add_argument("--paths-n", type=int, default=1000, help="calls per transform path (plain, no-op, fork)")
    parser.add_argument("--paths-only", action="store_true", help="only the transform paths against the plain one")
    parser.add_argument(
        "--mechanisms", type=int, metavar="N", help="only each optimisation off and on, N calls a case (mechanisms.py)"
    )
    fleet = parser.add_argument_group("fleet", "--fleet N: only the fleet of N distinct ServingStacks (bench/fleet.py)")
    fleet.add_argument("--fleet", type=int, metavar="N", help="distinct ServingStacks (XRs) in the fleet")
    fleet.add_argument("--fleet-passes", type=int, default=3, help="passes over the fleet; the first is new clusters")
    fleet.add_argument("--fleet-new-share", type=float, default=0.01, help="XRs replaced by new clusters per pass")
    fleet.add_argument("--fleet-callers", type=int, default=1, help="concurrent callers on the one connection")
    fleet.add_argument("--fleet-seconds", type=float, default=1800.0, help="stop the fleet after this long")
    args = parser.parse_args()
    if args.mechanisms is not None:
        from bench.mechanisms import run as run_mechanisms  # it imports this module's helpers

        run_mechanisms(args.mechanisms)
    elif args.fleet is None:
        asyncio.run(main(args))
    else:
        # Imported here: bench.fleet imports this module's helpers (as bench.benchmark).
        from bench.fleet import FleetConfig, run_fleet

        config = FleetConfig(
            args.fleet, args.fleet_passes, args.fleet_new_share, args.fleet_callers, args.fleet_seconds
        )
        if problem := config.out_of_bounds():
            parser.error(problem)
        logging.configure(logging.Level.DISABLED)
        asyncio.run(run_fleet(config))
