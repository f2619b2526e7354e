"""``status.stack``: what was rendered and why, for operators and auditors."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from function.compose import Planned
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
