"""Planning: the generated stack, adjusted per cluster by EnvironmentConfigs, as a plan the renderer renders.

``collect`` obtains the documents (required resources, the pipeline context),
``plan`` applies them to the generated stack (with none, it is the stack as
generated), ``summary`` says what happened in one line;
``function.overrides.explain`` says where every field came from.
"""

from __future__ import annotations

from collections.abc import Sequence

from function.errors import first_few
from function.stack import Stack

from .apply import plan, prepare
from .collect import DEFAULT_LABEL, DEFAULT_LABEL_VALUE, collect
from .document import Collected, Document
from .planned import MANAGED, REMOVED, UNMANAGED, Plan, Planned

__all__ = ["Collected", "Document", "Plan", "Planned", "collect", "plan", "prepare", "summary"]


def summary(stack: Stack, found: Collected, plan: Sequence[Planned], added: Sequence[str] = ()) -> str:
    """One line for a Normal result: what the applied documents did, or that none applies; ``added``: the keys of
    the components they added."""
    if not found.applied:
        # Said every time, so `kubectl describe` shows a stack rendered as generated.
        excluded = f"; their match excludes it: {first_few(list(found.unmatched), ', ')}" if found.unmatched else ""
        return (
            f"No override document applies to this ServingStack: stack {stack.id} renders as generated "
            f"(EnvironmentConfigs labelled {DEFAULT_LABEL}={DEFAULT_LABEL_VALUE}, or as the function Input names"
            f"{excluded})"
        )
    changed = [p.component.key for p in plan if p.changed_by and p.state == MANAGED and p.component.key not in added]
    unmanaged = [p.component.key for p in plan if p.state == UNMANAGED]
    removed = [p.component.key for p in plan if p.state == REMOVED]
    remembered = [d.name for d in found.documents if d.remembered]
    parts = [f"EnvironmentConfigs applied in order: {', '.join(found.applied)}"]
    if remembered:
        parts.append(f"kept from the last reconcile: {', '.join(remembered)}")
    parts.append(f"{len(changed)} of {len(plan)} components changed" + (f" ({', '.join(changed)})" if changed else ""))
    if added:
        parts.append(f"added: {', '.join(added)}")
    if unmanaged:
        parts.append(f"Unmanaged: {', '.join(unmanaged)}")
    if removed:
        parts.append(f"Removed: {', '.join(removed)}")
    return "; ".join(parts)
