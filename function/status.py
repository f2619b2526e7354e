"""``status.stack``: what was rendered and why, for operators and auditors."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2

from function.__version__ import __version__
from function.cache import MIB, PROTOBUF_FACTOR, PYTHON_FACTOR, BoundedCache
from function.overrides import Collected, Planned, memory
from function.overrides.document import Fingerprint
from function.stack import Component, Stack
from function.tree import fill, to_struct
from function.wire import serialized_struct_value


def stack_status(stack: Stack, plan: Sequence[Planned], found: Collected, rendered: Collection[str]) -> dict[str, Any]:
    components = [{**_said(p.component), **_now(p, rendered)} for p in plan]
    return {**_head(stack, found), "components": components}


def _said(c: Component) -> dict[str, Any]:
    """What ``status.stack.components`` says of a component whatever the documents did (but hold its version)."""
    entry: dict[str, Any] = {"name": c.key, "kind": c.kind, "source": c.origin}
    if c.chart is not None:
        entry["chart"] = c.chart.name
        entry["version"] = c.chart.version
    return entry


def _now(planned: Planned, rendered: Collection[str]) -> dict[str, Any]:
    """The rest: what the documents and the observed state made of it."""
    # rendered: gated (ProviderConfigs not observed yet) or deliberately not installed.
    entry: dict[str, Any] = {"state": planned.state, "rendered": planned.component.key in rendered}
    if planned.changed_by:
        entry["overriddenBy"] = list(planned.changed_by)
    return entry


def _head(stack: Stack, found: Collected) -> dict[str, Any]:
    """Everything ``status.stack`` says but the components."""
    return {
        "id": stack.id,
        "function": __version__,
        "generator": stack.provenance.generator,
        "aicr": stack.provenance.aicr.version,
        "aicrCommit": stack.provenance.aicr.commit,
        "environmentConfigs": list(found.applied),
        # The memory a document that goes missing is kept from (overrides.memory).
        "documents": memory.entries(found),
    }


@dataclass(frozen=True)
class StackStatus:
    """``status.stack`` converted: a Struct, serialized deterministically (what the observed one is compared
    with), and a ``Value`` encoded."""

    struct: struct_pb2.Struct
    serialized: bytes
    value: bytes


# (stack, applied documents, rendered keys) -> status.stack: the status is a
# function of these alone, and converting it is the costliest step left on
# the hot path. Distinct combinations in use at once: a few per fleet.
_CACHE: BoundedCache[tuple[Stack, Fingerprint, frozenset[str]], StackStatus] = BoundedCache(
    "status.stack", max_entries=512, max_bytes=8 * MIB
)


def converted_stack_status(
    stack: Stack, plan: Sequence[Planned], found: Collected, rendered: Collection[str]
) -> StackStatus:
    """``status.stack``, converted once per distinct (stack, documents, rendered keys)."""
    key = (stack, found.fingerprint, frozenset(rendered))
    cached = _CACHE.get(key)
    if cached is None:
        struct = to_struct(_head(stack, found))
        items = struct.fields["components"].list_value
        items.SetInParent()
        for planned in plan:
            item = items.values.add()
            item.MergeFromString(_said_value(planned.component))
            fill(item.struct_value, _now(planned, rendered))
        serialized = struct.SerializeToString(deterministic=True)
        cached = StackStatus(struct, serialized, serialized_struct_value(serialized))
        _CACHE.put(key, cached, len(serialized) * (PROTOBUF_FACTOR + 2))  # the Struct, its two encodings
    return cached


# What status.stack says of a component whatever the documents did, as an
# encoded Value, by what it says: encoded for every stack's components at
# start-up (prepare), so a new plan converts only what its documents made of
# each. Another entry only for a held chart version; ~100 bytes each.
_SAID: BoundedCache[tuple[str, str, str, str | None, str | None], bytes] = BoundedCache(
    "status.stack component entries", max_entries=4096, max_bytes=1 * MIB
)


def _said_value(c: Component) -> bytes:
    chart = c.chart
    key = (c.key, c.kind, c.origin, chart.name if chart else None, chart.version if chart else None)
    encoded = _SAID.get(key)
    if encoded is None:
        encoded = to_struct({"said": _said(c)}).fields["said"].SerializeToString()
        _SAID.put(key, encoded, len(encoded) * (1 + PYTHON_FACTOR))  # and the key's strings
    return encoded


def prepare(stack: Stack) -> None:
    """Encode, at start-up, what ``status.stack`` says of each of the stack's components whatever the documents."""
    for component in stack.components:
        _said_value(component)
