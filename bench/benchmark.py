"""Benchmark: prints figures, asserts nothing. Compare ratios within one run.

Per stack: resources rendered, response bytes, RunFunction latency in process
and over gRPC (median, p99), with and without the regulated-bank overrides, and
with them in steady state (the XR carrying the status, and so the document
memory, the last response wrote);
then import time and RSS of the server module, and the generator's time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import stack
from function.fn import FunctionRunner
from function.render_loop import grpc_runner, run_pipeline
from tests.serve import serving

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example"
BANK = EXAMPLE / "environmentconfigs" / "regulated-bank.yaml"


def _docs(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def _xr(cloud: str, accelerator: str) -> dict[str, Any]:
    xr = _docs(EXAMPLE / "xr.yaml")[0]
    xr["spec"]["cloud"] = cloud
    xr["spec"]["accelerator"] = accelerator
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


def _import_cost() -> tuple[float, float]:
    code = (
        "import time, resource; t = time.perf_counter(); import function.fn, function.main; "
        "from function import stack; from function.model import Cloud, Accelerator; "
        "[stack.load(Cloud(c), Accelerator(a)) for c, a in stack.available()]; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
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


async def main(n: int, grpc_n: int) -> None:
    logging.configure(logging.Level.DISABLED)
    bank = _docs(BANK) if BANK.exists() else []
    print(
        f"{'stack':<16}{'overrides':<10}{'resources':>10}{'bytes':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'grpc p50':>10}{'grpc p99':>10}"
    )
    with serving(["function.main", "--insecure"]) as (address, _):
        for cloud, accelerator in stack.available():
            for label, required in (("none", []), ("bank", bank), ("bank+mem", bank)):
                if label != "none" and not bank:
                    continue
                req = await _final_request(_xr(cloud, accelerator), required)
                if label == "bank+mem":
                    await _with_last_status(req)
                p50, p99, count, size = await _time_in_process(req, n)
                g50, g99 = await _time_grpc(address, req, grpc_n)
                print(
                    f"{cloud + '/' + accelerator:<16}{label:<10}{count:>10}{size:>9}{p50:>9.3f}{p99:>9.3f}"
                    f"{g50:>10.3f}{g99:>10.3f}"
                )
    seconds, rss = _import_cost()
    print(f"import + load all stacks: {seconds:.3f} s, max RSS {rss:.0f} MB (median of 5 processes)")
    print(f"generator, all stacks: {_generator_time():.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=2000, help="in-process RunFunction calls per case")
    parser.add_argument("--grpc-n", type=int, default=300, help="gRPC calls per case")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.grpc_n))
