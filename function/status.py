"""``status.stack``: what was rendered and why, for operators and auditors."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from google.protobuf import struct_pb2

from function import wire
from function.__version__ import __version__
from function.cache import PROTOBUF_FACTOR, PYTHON_FACTOR, BoundedCache
from function.overrides import Collected, Planned, memory
from function.overrides.document import Fingerprint
from function.overrides.planned import Added, State
from function.stack import Component, Stack
from function.tree import to_struct
from function.wire import serialized_struct_value, sort_key, varint


def stack_status(
    stack: Stack,
    plan: Sequence[Planned],
    found: Collected,
    rendered: Collection[str],
    added: Sequence[Added] = (),
) -> dict[str, Any]:
    """``status.stack``; ``added``: the added components to remember (:func:`function.overrides.memory.kept`)."""
    components = [{**_said(p.component), **_now(p, rendered)} for p in plan]
    return {
        # The memory an added component is kept from when no document adds it any more (overrides.memory).
        **({"added": memory.added_entries(added)} if added else {}),
        **_stack_fields(stack),
        "environmentConfigs": list(found.applied),
        # The memory a document that goes missing is kept from (overrides.memory).
        "documents": memory.entries(found),
        "components": components,
    }


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


def _stack_fields(stack: Stack) -> dict[str, Any]:
    """What ``status.stack`` says of the stack itself."""
    return {
        "id": stack.id,
        "function": __version__,
        "generator": stack.provenance.generator,
        "aicr": stack.provenance.aicr.version,
        "aicrCommit": stack.provenance.aicr.commit,
    }


@dataclass(frozen=True)
class StackStatus:
    """``status.stack`` converted: serialized deterministically (what the observed one is compared with), a
    ``Value`` encoded, and what the request log says of it (its id and environmentConfigs); a Struct on demand."""

    serialized: bytes
    value: bytes
    said: tuple[str, tuple[str, ...]]

    @functools.cached_property
    def struct(self) -> struct_pb2.Struct:
        """As a message: parsed only where one is written into (an earlier step desired the composite)."""
        return struct_pb2.Struct.FromString(self.serialized)


# (stack, applied documents, rendered keys) -> status.stack: the status is a
# function of these alone, and converting it is the costliest step left on
# the hot path. Distinct combinations in use at once: a few per fleet.
_CACHE: BoundedCache[tuple[Stack, Fingerprint, frozenset[str], frozenset[str]], StackStatus] = BoundedCache(
    "status.stack"
)

# The fields of status.stack that depend on the plan: holes in each stack's encoded head.
_PER_PLAN: dict[tuple[str, ...], str] = {(key,): key for key in ("components", "documents", "environmentConfigs")}


def converted_stack_status(
    stack: Stack,
    plan: Sequence[Planned],
    found: Collected,
    rendered: Collection[str],
    added: Sequence[Added] = (),
) -> StackStatus:
    """``status.stack``, converted once per distinct (stack, documents, rendered keys).

    Encoded from parts, as protobuf's deterministic serializer writes the
    Struct :func:`stack_status` converts to (tests/test_wire.py holds them
    equal): the stack's head and what each component says whatever the
    documents are encoded beforehand, the documents are kept encoded as
    their request carried them (``Document.encoded``), and only what the
    plan made of each component is put between. ``added``: see :func:`stack_status`.
    """
    # (the plan's additions are the fingerprint's: which of them are remembered is all ``added`` adds)
    key = (stack, found.fingerprint, frozenset(rendered), frozenset(a.key for a in added))
    cached = _CACHE.get(key)
    if cached is None:
        # "added" sorts before every other field of status.stack (wire.sort_key): its entry comes first.
        head = _encoded("added", memory.added_entries(added)) if added else b""
        serialized = head + _head(stack).encode(
            {
                "components": _list_value(_components(plan, rendered)),
                "documents": _list_value(memory.encoded_entries(found)),
                "environmentConfigs": _list_value([wire.string_value(name) for name in found.applied]),
            }
        )
        cached = StackStatus(serialized, serialized_struct_value(serialized), (stack.id, tuple(found.applied)))
        _CACHE.put(key, cached, len(serialized) * (PROTOBUF_FACTOR + 2))  # the Struct, its two encodings
    return cached


# One per generated stack (no request adds one): made at start-up (prepare).
@functools.cache
def _head(stack: Stack) -> wire.Template:
    """``status.stack`` but its per-plan fields, encoded."""
    return wire.Template(_stack_fields(stack), _PER_PLAN)


_LIST_ITEM = b"\x0a"  # ListValue.values (1), length-delimited
_LIST_VALUE = b"\x32"  # Value.list_value (6), length-delimited


def _list_value(items: Sequence[bytes]) -> bytes:
    """A ``Value`` holding a list of encoded ``Value``s, encoded."""
    body = b"".join([_LIST_ITEM + varint(len(item)) + item for item in items])
    return _LIST_VALUE + varint(len(body)) + body


def _encoded(key: str, value: Any) -> bytes:
    """A map of one field, encoded: that field's map entry, as a Struct's encoding holds it."""
    data: bytes = to_struct({key: value}).SerializeToString(deterministic=True)
    return data


# What _now says of a component, in the order upb writes a Struct's entries
# (wire.sort_key; tests/test_status.py checks it), each between runs of what
# _said says; encoded once per value.
_NOW = ("overriddenBy", "rendered", "state")
_RENDERED = {rendered: _encoded("rendered", rendered) for rendered in (False, True)}
_STATES = {state: _encoded("state", state) for state in get_args(State)}


def _components(plan: Sequence[Planned], rendered: Collection[str]) -> list[bytes]:
    """``status.stack.components``, each an encoded ``Value``."""
    overridden: dict[tuple[str, ...], bytes] = {(): b""}  # no overriddenBy when no document changed it
    out = []
    for planned in plan:
        component = planned.component
        by = planned.changed_by
        said = _said_parts(component)
        written = overridden.get(by)
        if written is None:
            written = overridden[by] = _encoded("overriddenBy", list(by))
        now = _RENDERED[component.key in rendered], _STATES[planned.state]
        out.append(serialized_struct_value(b"".join((said[0], written, said[1], now[0], said[2], now[1], said[3]))))
    return out


# What status.stack says of a component whatever the documents did, encoded
# in the runs _now's fields go between, by what it says: encoded for every
# stack's components at start-up (prepare), so a new plan encodes only what
# its documents made of each. Another entry only for a held chart version;
# ~100 bytes each.
_SAID: BoundedCache[tuple[str, str, str, str | None, str | None], tuple[bytes, ...]] = BoundedCache(
    "status.stack component entries"
)


def _said_parts(c: Component) -> tuple[bytes, ...]:
    chart = c.chart
    key = (c.key, c.kind, c.origin, chart.name if chart else None, chart.version if chart else None)
    parts = _SAID.get(key)
    if parts is None:
        said = _said(c)
        runs: list[dict[str, Any]] = [{}]
        for field in sorted([*said, *_NOW], key=sort_key):
            if field in _NOW:
                runs.append({})
            else:
                runs[-1][field] = said[field]
        parts = tuple(to_struct(run).SerializeToString(deterministic=True) for run in runs)
        _SAID.put(key, parts, sum(map(len, parts)) * (1 + PYTHON_FACTOR))  # and the key's strings
    return parts


def prepare(stack: Stack) -> None:
    """Encode, at start-up, what ``status.stack`` says of the stack whatever the documents."""
    _head(stack)
    for component in stack.components:
        _said_parts(component)
