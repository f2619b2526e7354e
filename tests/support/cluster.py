"""A simulated cluster under one ServingStack, reconcile after reconcile over real gRPC: the function's last
output fed back as observed, the status it wrote sent back on the XR, and Crossplane's garbage collection.

What is simulated, and where Crossplane does it:
- a Usage selector resolves to the first match and stops (crossplane
  internal/controller/protection/usage/selector.go, resolveSelector);
- garbage collection deletes every observed resource no longer desired in one
  pass and strips the Usage's composite label, so a Usage leaving in that pass
  does not wait for its user (internal/controller/apiextensions/composite/
  composition_functions.go, GarbageCollectComposedResources; internal/
  controller/protection/usage/reconciler.go); deleting a resource while a
  Usage of it exists is refused with 409 Conflict (internal/webhook/
  protection/usage/handler.go);
- the desired XR status is applied and sent back as the observed composite
  on the next reconcile (composition_functions.go), a Fatal result leaving
  both as they were.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from crossplane.function import resource

from function.offline import RenderError, RenderResult, run_pipeline
from tests.support.crossplane import desired, grpc_runner
from tests.support.xr import observed_as

USAGE = "protection.crossplane.io/v1beta1/Usage"


def api_kind(body: dict[str, Any]) -> str:
    return f"{body['apiVersion']}/{body['kind']}"


def resolve(selector: dict[str, Any], api: str, kind: str, resources: dict[str, dict[str, Any]]) -> list[str]:
    """Keys of the resources a Usage's resourceRef or resourceSelector names (all XRs' resources are ours here)."""
    candidates = {k: r for k, r in resources.items() if api_kind(r) == f"{api}/{kind}"}
    if "resourceRef" in selector:
        return [k for k, r in candidates.items() if r["metadata"].get("name") == selector["resourceRef"]["name"]]
    labels = selector["resourceSelector"]["matchLabels"]
    return [
        k
        for k, r in candidates.items()
        if all(r["metadata"].get("labels", {}).get(name) == value for name, value in labels.items())
    ]


def usages(resources: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: r["spec"] for k, r in resources.items() if api_kind(r) == USAGE}


def garbage_collect(
    observed: dict[str, dict[str, Any]], wanted: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """One reconcile on the cluster: create what is wanted, delete the rest in one pass.

    Returns what is there afterwards and what went wrong: a deletion the Usage
    webhook refuses (a Usage of the resource still exists, in whatever order
    the pass runs), or a Usage leaving while its user is still there.
    """
    leaving = {k: r for k, r in observed.items() if k not in wanted}
    problems = []
    for key, spec in usages(observed).items():
        of = resolve(spec["of"], spec["of"]["apiVersion"], spec["of"]["kind"], observed)
        by = resolve(spec["by"], spec["by"]["apiVersion"], spec["by"]["kind"], observed)
        for used in of:
            if used in leaving and api_kind(leaving[used]) != USAGE:
                problems.append(f"409: deleting {used} while {key} holds it")
        if key in leaving and [u for u in by if u not in leaving]:
            problems.append(f"{key} left while its user {by} stays")
    after = {k: r for k, r in observed.items() if k in wanted}
    after.update({k: r for k, r in wanted.items() if k not in after})
    return after, problems


class Cluster:
    """One ServingStack's composed resources as the cluster holds them, and the XR as Crossplane stores it."""

    def __init__(self, target: str, xr: dict[str, Any]) -> None:
        self.target = target
        self.xr = copy.deepcopy(xr)
        self.observed: dict[str, dict[str, Any]] = {}
        self.problems: list[str] = []  # what the Usage webhook refused, or a Usage leaving before its user

    def reconcile(self, *configs: dict[str, Any]) -> RenderResult:
        """One reconcile: the function's output created (Ready), the rest deleted in one pass; raises RenderError
        on a Fatal result, leaving the cluster and the XR as they were."""
        result = asyncio.run(
            run_pipeline(
                grpc_runner(self.target), xr=self.xr, observed=list(self.observed.values()), required=list(configs)
            )
        )
        wanted = {key: observed_as(key, body) for key, body in desired(result).items()}
        self.observed, problems = garbage_collect(self.observed, wanted)
        self.problems += problems
        self.xr["status"] = resource.struct_to_dict(result.desired.composite.resource)["status"]
        return result

    def refused(self, *configs: dict[str, Any]) -> str:
        """The Fatal message a reconcile with ``configs`` gives; the cluster and the XR are left as they were."""
        before = copy.deepcopy((self.observed, self.xr))
        try:
            self.reconcile(*configs)
        except RenderError as err:
            assert (self.observed, self.xr) == before
            return str(err)
        raise AssertionError("the reconcile was not refused")

    def converge(self, *configs: dict[str, Any]) -> list[list[str]]:
        """Reconcile until nothing changes; what left the cluster at each step."""
        departures: list[list[str]] = []
        for _ in range(10):
            before = set(self.observed)
            self.reconcile(*configs)
            left = sorted(before - set(self.observed))
            if not left and set(self.observed) == before:
                return departures
            if left:
                departures.append(left)
        raise AssertionError("did not converge in 10 reconciles")
