"""Shared helpers: build ServingStacks and render them the way crossplane render does."""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, settings

from function.fn import FunctionRunner
from function.render_loop import RenderResult, run_pipeline
from generator.refresh import DEFAULT_SHARED
from tests import k8s_schema
from tests.serve import REPO, serving

# Hypothesis profiles: "ci" (./dev test) runs the same cases every time; "long"
# (./dev fuzz) runs over 10,000 cases through tests/test_fuzz.py. Neither has
# a deadline: a loaded machine is not a failure.
for _profile, _examples in (("ci", 60), ("long", 2200)):
    settings.register_profile(
        _profile,
        max_examples=_examples,
        deadline=None,
        derandomize=_profile == "ci",
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)

EXAMPLE = REPO / "example"


def reference_source(relative: str) -> Path:
    """A path in the reference sources beside the clone (``../shared``), for parity tests only.

    A clone standing alone has none: the test is skipped, saying so.
    """
    path = DEFAULT_SHARED / relative
    if not path.exists():
        pytest.skip(f"parity test: {path} is absent (the reference sources are not beside this clone)")
    return path


def load_docs(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


EXAMPLE_XR = load_docs(EXAMPLE / "xr.yaml")[0]
XRD = load_docs(EXAMPLE / "xrd.yaml")[0]


def make_xr(cloud: str = "GKE", accelerator: str | None = None, **spec: Any) -> dict[str, Any]:
    xr = copy.deepcopy(EXAMPLE_XR)
    xr["spec"]["cloud"] = cloud
    if accelerator is not None:
        xr["spec"]["accelerator"] = accelerator
    xr["spec"].update(spec)
    return xr


def provider_configs(xr: dict[str, Any]) -> list[dict[str, Any]]:
    """The two ProviderConfigs as Crossplane observes them once created."""
    name = resource.child_name(xr["metadata"]["name"], "cluster")
    return [
        {
            "apiVersion": api,
            "kind": "ProviderConfig",
            "metadata": {
                "name": name,
                "namespace": xr["metadata"]["namespace"],
                "annotations": {"crossplane.io/composition-resource-name": key},
            },
        }
        for api, key in (
            ("helm.m.crossplane.io/v1beta1", "provider-config-helm"),
            ("kubernetes.m.crossplane.io/v1alpha1", "provider-config-kubernetes"),
        )
    ]


def observed_as(
    key: str, body: dict[str, Any], ready: bool = True, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A composed resource as Crossplane would observe it."""
    obs = copy.deepcopy(body)
    obs.setdefault("metadata", {}).setdefault("annotations", {})["crossplane.io/composition-resource-name"] = key
    obs["status"] = {
        **(status or {}),
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "Available"}],
    }
    return obs


def render(
    xr: dict[str, Any],
    observed: list[dict[str, Any]] | None = None,
    required: list[dict[str, Any]] | None = None,
    input: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> RenderResult:
    """Render in process through the same requirements loop crossplane render runs."""
    return asyncio.run(
        run_pipeline(
            FunctionRunner().RunFunction,
            xr=xr,
            observed=provider_configs(xr) if observed is None else observed,
            required=required or [],
            input=input,
            context=context,
        )
    )


def desired(result: RenderResult) -> dict[str, dict[str, Any]]:
    return {k: resource.struct_to_dict(v.resource) for k, v in result.desired.resources.items()}


def run_once(xr: dict[str, Any], observed: list[dict[str, Any]] | None = None) -> fnv1.RunFunctionResponse:
    """One RunFunction call with every requirement answered as empty."""
    req = fnv1.RunFunctionRequest(observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(xr))))
    for obs in provider_configs(xr) if observed is None else observed:
        key = obs["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        req.observed.resources[key].resource.update(obs)
    first = asyncio.run(FunctionRunner().RunFunction(req))
    for name in first.requirements.resources:
        req.required_resources[name].CopyFrom(fnv1.Resources())
    return asyncio.run(FunctionRunner().RunFunction(req))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The function's CLI in a subprocess, as a user runs it; a hang fails after a minute."""
    return subprocess.run(
        [sys.executable, "-m", "function.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A function server over insecure gRPC on loopback, one per test module."""
    with serving(["function.main", "--insecure"]) as (target, _):
        yield target


@pytest.fixture(scope="session")
def xr_index(tmp_path_factory: pytest.TempPathFactory) -> k8s_schema.CRDIndex:
    """The XRD as the CRD Crossplane derives from it (plus the fields Crossplane adds)."""
    version = copy.deepcopy(XRD["spec"]["versions"][0])
    schema = version["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["crossplane"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    schema["properties"].update(apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": XRD["metadata"]["name"]},
        "spec": {
            "group": XRD["spec"]["group"],
            "names": XRD["spec"]["names"],
            "scope": XRD["spec"]["scope"],
            "versions": [{**version, "storage": True}],
        },
    }
    path: Path = tmp_path_factory.mktemp("xrd") / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    return k8s_schema.CRDIndex([path])


@pytest.fixture(autouse=True)
def _quiet_logs() -> None:
    logging.configure(logging.Level.DISABLED)
