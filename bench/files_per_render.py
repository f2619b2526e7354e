"""Files a reader of one render opens: the hand-written modules under ``function/`` whose code runs.

One RunFunction, in process, for the example ServingStack (``example/xr.yaml``
with ``example/observed/``), the way Crossplane sends it once its
requirements are answered: first with no override document, then with
``example/environmentconfigs/regulated-bank.yaml``. This checkout builds both
requests; each case runs in a fresh interpreter (given its request on stdin,
so it imports nothing but the function package measured) with every module
imported (imports are not part of a render) and is traced twice: the first
render, with nothing cached (the whole path), and a second one by a new
runner (no response memo; the stack, plan and body caches warm: a new
cluster on a running server). A file counts when a function of it runs
(``sys.setprofile``); the generated stacks are data, not read, and do not
count.

    .venv/bin/python -m bench.files_per_render
    PYTHONPATH=/path/to/other/checkout .venv/bin/python -m bench.files_per_render   # another version's figure
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

import function
from function.fn import FunctionRunner

# The function asks for EnvironmentConfigs under this requirement name (function/overrides/collect.py).
REQUIREMENT = "servingstack-overrides"
# Observed composed resources are keyed by this annotation, as Crossplane keys them.
RESOURCE_NAME = "crossplane.io/composition-resource-name"


def _requests(example: Path, load_docs: Callable[[Path], list[dict[str, Any]]]) -> dict[str, bytes]:
    """The two requests, serialized: built here, so the interpreter measuring another checkout reads no file."""
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(load_docs(example / "xr.yaml")[0]))
    for obj in load_docs(example / "observed"):
        req.observed.resources[obj["metadata"]["annotations"][RESOURCE_NAME]].resource.CopyFrom(
            resource.dict_to_struct(obj)
        )
    req.required_resources[REQUIREMENT].SetInParent()  # answered, with nothing
    plain = req.SerializeToString()
    for config in load_docs(example / "environmentconfigs" / "regulated-bank.yaml"):
        req.required_resources[REQUIREMENT].items.add().resource.CopyFrom(resource.dict_to_struct(config))
    return {"plain": plain, "documents": req.SerializeToString()}


def _case(data: bytes) -> tuple[str, list[str], list[str]]:
    """In this interpreter: the function package measured, and the files whose code a first and a second render run."""
    package = Path(function.__file__).resolve().parent
    req = fnv1.RunFunctionRequest.FromString(data)
    return str(package), _traced(FunctionRunner(), req, package), _traced(FunctionRunner(), req, package)


def _traced(runner: FunctionRunner, req: fnv1.RunFunctionRequest, package: Path) -> list[str]:
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            seen.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        rsp = fnv1.RunFunctionResponse.FromString(runner.respond(req))
    finally:
        sys.setprofile(None)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert not fatal and rsp.desired.resources, fatal or "nothing rendered"
    files = {Path(f).resolve() for f in seen if f.endswith(".py")}
    return sorted(
        str(f.relative_to(package.parent))
        for f in files
        if f.is_relative_to(package) and "generated" not in f.relative_to(package).parts
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # one case: the request on stdin, the answer as JSON on the last line (after logs)
        print(json.dumps(_case(sys.stdin.buffer.read())))
        return
    # This checkout's tests, imported here only: a child measuring another checkout must not import them.
    from tests.support.repo import EXAMPLE, REPO, load_docs  # noqa: PLC0415

    # Run as a file, not a module, so PYTHONPATH (else this checkout) decides which function package is measured.
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
    requests = _requests(EXAMPLE, load_docs)
    for label, case in (("no override document", "plain"), ("with regulated-bank.yaml", "documents")):
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child"],
            input=requests[case],
            check=True,
            capture_output=True,
            env=env,
        )
        package, first, second = json.loads(out.stdout.decode().splitlines()[-1])
        print(f"{label}: {len(first)} files on a first render, {len(second)} on a second (of {package})")
        for name in first:
            print(f"  {name}{'' if name in second else '  (first render only)'}")


if __name__ == "__main__":
    main()
