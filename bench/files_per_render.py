"""Files a reader of one render opens: the hand-written modules under ``function/`` whose code runs.

One RunFunction, in process, for the example ServingStack (``example/xr.yaml``
with ``example/observed/``), the way Crossplane sends it once its
requirements are answered: first with no override document, then with
``example/environmentconfigs/regulated-bank.yaml``. Each case runs in a fresh
interpreter with every module imported (imports are not part of a render) and
is traced twice: the first render, with nothing cached (the whole path), and
a second one by a new runner (no response memo; the stack, plan and body
caches warm: a new cluster on a running server). A file counts when a
function of it runs (``sys.setprofile``); the generated stacks are data, not
read, and do not count.

    .venv/bin/python -m bench.files_per_render
    PYTHONPATH=/path/to/other/checkout .venv/bin/python -m bench.files_per_render   # another version's figure
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

import function
from function.fn import FunctionRunner
from tests.support.repo import EXAMPLE, REPO

BANK = EXAMPLE / "environmentconfigs" / "regulated-bank.yaml"
# The function asks for EnvironmentConfigs under this requirement name (function/overrides/collect.py).
REQUIREMENT = "servingstack-overrides"
# Observed composed resources are keyed by this annotation, as Crossplane keys them.
RESOURCE_NAME = "crossplane.io/composition-resource-name"


def _documents(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict)]


def _case(with_documents: bool) -> tuple[str, list[str], list[str]]:
    """In this interpreter: the function package measured, and the files whose code a first and a second render run."""
    package = Path(function.__file__).resolve().parent
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(_documents(EXAMPLE / "xr.yaml")[0]))
    for obj in _documents(EXAMPLE / "observed"):
        name = obj["metadata"]["annotations"][RESOURCE_NAME]
        req.observed.resources[name].resource.CopyFrom(resource.dict_to_struct(obj))
    answered = req.required_resources[REQUIREMENT]  # answered, possibly with nothing
    answered.SetInParent()
    for config in _documents(BANK) if with_documents else []:
        answered.items.add().resource.CopyFrom(resource.dict_to_struct(config))

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
    if sys.argv[1:] in (["plain"], ["documents"]):  # the child: one case, as JSON on the last line (after logs)
        print(json.dumps(_case(sys.argv[1] == "documents")))
        return
    # Run as a file, not a module, so PYTHONPATH (else this checkout) decides which function package is measured.
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
    for label, case in (("no override document", "plain"), (f"with {BANK.name}", "documents")):
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), case], check=True, capture_output=True, text=True, env=env
        )
        package, first, second = json.loads(out.stdout.splitlines()[-1])
        print(f"{label}: {len(first)} files on a first render, {len(second)} on a second (of {package})")
        for name in first:
            print(f"  {name}{'' if name in second else '  (first render only)'}")


if __name__ == "__main__":
    main()
