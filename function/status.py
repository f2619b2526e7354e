"""``status.stack``: what was rendered and why, for operators and auditors."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from function.__version__ import __version__
from function.cache import BoundedCache
from function.encode import struct_bytes
from function.overrides import Collected, Planned, memory
from function.overrides.document import Fingerprint
from function.overrides.planned import Added
from function.stack import Stack


def stack_status(
    stack: Stack,
    plan: Sequence[Planned],
    found: Collected,
    rendered: Collection[str],
    added: Sequence[Added] = (),
) -> dict[str, Any]:
    """``status.stack``; ``added``: the added components to remember (:func:`function.overrides.memory.kept`)."""
    return {
        # The memory an added component is kept from when no document adds it any more (overrides.memory).
        **({"added": memory.added_entries(added)} if added else {}),
        "id": stack.id,
        "function": __version__,
        "generator": stack.provenance.generator,
        "aicr": stack.provenance.aicr.version,
        "aicrCommit": stack.provenance.aicr.commit,
        "environmentConfigs": list(found.applied),
        # The memory a document that goes missing is kept from (overrides.memory).
        "documents": memory.entries(found),
        "components": [_component(p, rendered) for p in plan],
    }


def _component(planned: Planned, rendered: Collection[str]) -> dict[str, Any]:
    """What ``status.stack.components`` says of one: the component, then what the documents and the observed
    state made of it."""
    c = planned.component
    entry: dict[str, Any] = {"name": c.key, "kind": c.kind, "source": c.origin}
    if c.chart is not None:
        entry["chart"] = c.chart.name
        entry["version"] = c.chart.version
    entry["state"] = planned.state
    # Not rendered: gated (ProviderConfigs not observed yet) or deliberately not installed.
    entry["rendered"] = c.key in rendered
    if planned.changed_by:
        entry["overriddenBy"] = list(planned.changed_by)
    return entry


@dataclass(frozen=True)
class StackStatus:
    """``status.stack`` serialized deterministically (what the observed one is compared with), and what the
    request log says of it (its id and environmentConfigs)."""

    serialized: bytes
    said: tuple[str, tuple[str, ...]]


# (stack, applied documents, rendered keys, remembered additions) -> status.stack: the status is a function of
# these alone. Distinct combinations in use at once: a few per fleet.
_CACHE: BoundedCache[tuple[Stack, Fingerprint, frozenset[str], frozenset[str]], StackStatus] = BoundedCache(
    "status.stack"
)


def converted_stack_status(
    stack: Stack,
    plan: Sequence[Planned],
    found: Collected,
    rendered: Collection[str],
    added: Sequence[Added] = (),
) -> StackStatus:
    """``status.stack`` (:func:`stack_status`), serialized once per distinct (stack, documents, rendered keys)."""
    # (the plan's additions are the fingerprint's: which of them are remembered is all ``added`` adds)
    key = (stack, found.fingerprint, frozenset(rendered), frozenset(a.key for a in added))
    cached = _CACHE.get(key)
    if cached is None:
        # As protobuf serializes the observed one (function.encode), so equal statuses compare equal.
        serialized = struct_bytes(stack_status(stack, plan, found, rendered, added))
        cached = StackStatus(serialized, (stack.id, tuple(found.applied)))
        _CACHE.put(key, cached, len(serialized))
    return cached
