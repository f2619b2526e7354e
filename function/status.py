"""``status.stack``: what was rendered and why, for operators and auditors."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2

from function.__version__ import __version__
from function.cache import MIB, PROTOBUF_FACTOR, BoundedCache
from function.overrides import Collected, Planned, memory
from function.overrides.document import Fingerprint
from function.stack import Stack
from function.tree import to_struct
from function.wire import encoded_struct_value


def stack_status(stack: Stack, plan: Sequence[Planned], found: Collected, rendered: Collection[str]) -> dict[str, Any]:
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
        "function": __version__,
        "generator": stack.provenance.generator,
        "aicr": stack.provenance.aicr.version,
        "aicrCommit": stack.provenance.aicr.commit,
        "components": components,
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
        struct = to_struct(stack_status(stack, plan, found, rendered))
        cached = StackStatus(struct, struct.SerializeToString(deterministic=True), encoded_struct_value(struct))
        _CACHE.put(key, cached, struct.ByteSize() * PROTOBUF_FACTOR + len(cached.serialized) + len(cached.value))
    return cached
