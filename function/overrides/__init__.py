"""The override layer: EnvironmentConfigs that adjust the generated stack per cluster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose import Observed, Planned, renderer
from function.model import ServingStack
from function.stack import Stack


@dataclass(frozen=True)
class Found:
    """The override documents that apply to one XR, in application order."""

    applied: tuple[str, ...] = field(default_factory=tuple)


def collect(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, xr: ServingStack) -> Found | None:
    return Found()


def plan(stack: Stack, xr: ServingStack, found: Found, observed: Observed) -> tuple[Sequence[Planned], list[str]]:
    return renderer(stack).plan, []


def summary(found: Found, plan: Sequence[Planned]) -> str:
    return ""
