"""``status.stack``: what was rendered and why, for operators and auditors."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import Any

from crossplane.function import resource
from google.protobuf import struct_pb2

from function.compose import Planned, renderer
from function.overrides import Found
from function.stack import Stack


def stack_status(stack: Stack, plan: Sequence[Planned], found: Found, rendered: Collection[str]) -> dict[str, Any]:
    components = []
    for planned in plan:
        c = planned.component
        entry: dict[str, Any] = {"name": c.key, "kind": c.kind, "state": planned.state, "source": c.origin}
        if c.chart is not None:
            entry["chart"] = c.chart.name
            entry["version"] = c.chart.version
        # Gated (ProviderConfigs not observed yet) or deliberately not installed.
        entry["rendered"] = c.key in rendered
        if planned.changed_by:
            entry["overriddenBy"] = list(planned.changed_by)
        components.append(entry)
    return {
        "id": stack.id,
        "generator": stack.provenance["generator"],
        "aicr": stack.provenance["aicr"]["version"],
        "components": components,
        "environmentConfigs": list(found.applied),
    }


@lru_cache(maxsize=256)
def _unchanged_stack_status(stack: Stack, rendered: frozenset[str]) -> struct_pb2.Struct:
    return resource.dict_to_struct(stack_status(stack, renderer(stack).plan, Found(), rendered))


def write_stack_status(
    status: struct_pb2.Struct, stack: Stack, plan: Sequence[Planned], found: Found, rendered: Collection[str]
) -> None:
    """Set ``status.stack``; the common case (no overrides) is converted once, not per reconcile."""
    if plan is renderer(stack).plan and not found.applied:
        status.get_or_create_struct("stack").CopyFrom(_unchanged_stack_status(stack, frozenset(rendered)))
    else:
        status["stack"] = stack_status(stack, plan, found, rendered)
