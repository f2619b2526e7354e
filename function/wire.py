"""The response's desired resources in protobuf wire format, assembled from parts encoded once.

A composed resource's body is the same on every reconcile of every cluster
but for a few leaves (its ProviderConfig's name, the XR's gateway fields). A
:class:`Template` holds a body's deterministic encoding with those leaves as
holes: everything around them is encoded once (by protobuf itself), and a
request fills the holes and recomputes only the length prefixes of the maps
enclosing them. :class:`Resources` collects the filled bodies as
``State.resources`` map entries, and :func:`serialize` splices them into the
rest of the response.

The bytes are exactly what ``SerializeToString(deterministic=True)`` gives
for the same message (tests/test_wire.py compares both over every stack,
override scenario and observed state). That serializer (upb) writes fields in
number order and map entries in the order of :func:`sort_key`, always writing
a map entry's key and value, even empty ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function.tree import to_struct

# Tags (field number << 3 | wire type) of the fields written here.
_LEN = 2  # wire type: length-delimited
_MAP_ENTRY = b"\x0a"  # Struct.fields (1); also a map entry's key (1), Resource.resource (1)
_ENTRY_VALUE = b"\x12"  # a map entry's value (2); also State.resources (2), RunFunctionResponse.desired (2)
_STRUCT_VALUE = b"\x2a"  # Value.struct_value (5)
_STRING_VALUE = b"\x1a"  # Value.string_value (3)
_READY = b"\x18"  # Resource.ready (3), a varint
_META = 0x0A  # RunFunctionResponse.meta (1)
_DESIRED = 0x12  # RunFunctionResponse.desired (2)

_LOW7 = 0x7F
_MORE = 0x80
# Varints of every length below this are kept: body and entry lengths (< 2 MiB) are looked up, not computed.
_KEPT_VARINTS = 1 << 14


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n > _LOW7:
        out.append((n & _LOW7) | _MORE)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINTS = [_encode_varint(n) for n in range(_KEPT_VARINTS)]


def varint(n: int) -> bytes:
    """``n`` (not negative) as a protobuf varint."""
    return _VARINTS[n] if n < _KEPT_VARINTS else _encode_varint(n)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        result |= (byte & _LOW7) << shift
        pos += 1
        if not byte & _MORE:
            return result, pos
        shift += 7


def sort_key(key: str) -> bytes:
    """Where upb's deterministic serializer puts a map entry: by the key's UTF-8 bytes, a key before its prefixes.

    (upb sorts by the common bytes, then the longer key first: ``namespace``
    comes before ``name``; 0xFF never occurs in UTF-8, so it sorts last.)
    """
    return key.encode() + b"\xff"


def string_value(text: str) -> bytes:
    """A ``Value`` holding ``text``, encoded."""
    data = text.encode()
    return _STRING_VALUE + varint(len(data)) + data


_PROBE = "v"
_PROBE_PREFIX = b"\x0a\x01" + _PROBE.encode() + _ENTRY_VALUE


def value(plain: Any) -> bytes:
    """A ``Value`` holding ``plain``, encoded as ``struct[key] = plain`` sets it (protobuf's own conversion)."""
    holder = struct_pb2.Struct()
    holder[_PROBE] = plain
    data: bytes = holder.SerializeToString(deterministic=True)
    _, pos = _read_varint(data, 1)  # the entry's length
    assert data.startswith(_PROBE_PREFIX, pos), "one entry keyed _PROBE"
    _, start = _read_varint(data, pos + len(_PROBE_PREFIX))
    return data[start:]


def _entry_key(key: str) -> bytes:
    data = key.encode()
    return _MAP_ENTRY + varint(len(data)) + data


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _struct(fields: Mapping[str, bytes]) -> bytes:
    """A Struct of encoded ``Value``s, encoded."""
    return b"".join(
        _field(_MAP_ENTRY, _entry_key(key) + _field(_ENTRY_VALUE, fields[key])) for key in sorted(fields, key=sort_key)
    )


def struct_value(fields: Mapping[str, bytes]) -> bytes:
    """A ``Value`` holding a map of encoded ``Value``s."""
    return _field(_STRUCT_VALUE, _struct(fields))


def serialized_struct_value(serialized: bytes) -> bytes:
    """A ``Value`` holding the Struct serialized as ``serialized``, encoded."""
    return _field(_STRUCT_VALUE, serialized)


@dataclass(frozen=True)
class _Hole:
    """A leaf filled per request: the map entry ``key`` with the value ``fill`` names."""

    key: bytes  # the entry's encoded key field, and the tag of its value (what precedes the value's length)
    fill: str


@dataclass(frozen=True)
class _Open:
    """A map holding holes: the map entry ``key`` whose value is a Struct encoded by ``template``."""

    key: bytes  # as _Hole's
    template: Template


class Template:
    """A Struct's deterministic encoding with holes at some leaves, filled by name per request.

    What surrounds a hole (the length prefixes of the maps enclosing it)
    depends only on the length of what fills it; a template keeps the parts
    of its last :meth:`entry` laid out for the lengths it was filled with
    (one slot, not a cache: a fleet's ProviderConfig names differ, their
    lengths seldom), so a request with fills of the same lengths only puts
    its own bytes between parts encoded before.
    """

    __slots__ = ("_fills", "_last", "_own", "_parts", "size")

    def __init__(self, tree: Mapping[str, Any], holes: Mapping[tuple[str, ...], str] | None = None) -> None:
        """``tree`` (a plain map) encoded, but for the leaves at the paths of ``holes``, each filled by its name.

        A hole's path need not exist in ``tree``; the maps on its way are
        created, and a value that is not a map on its way is replaced by one,
        as ``Struct.get_or_create_struct`` does.
        """
        holes = holes or {}
        opened: dict[str, dict[tuple[str, ...], str] | str] = {}
        for path, fill in holes.items():
            head, rest = path[0], path[1:]
            below = opened.get(head)
            if isinstance(below, str) or (below is not None and not rest):
                raise ValueError(f"hole {'.'.join(path)} overlaps another hole")
            if rest:
                opened.setdefault(head, {})[rest] = fill  # type: ignore[index]
            else:
                opened[head] = fill
        parts: list[bytes | _Hole | _Open] = []
        static: dict[str, Any] = {}  # a run of entries without holes, encoded together

        def flush() -> None:
            if static:
                parts.append(to_struct(static).SerializeToString(deterministic=True))
                static.clear()

        for key in sorted(tree.keys() | opened.keys(), key=sort_key):
            below = opened.get(key)
            if below is None:
                static[key] = tree[key]
                continue
            flush()
            if isinstance(below, str):
                parts.append(_Hole(_entry_key(key) + _ENTRY_VALUE, below))
            else:
                child = tree.get(key)
                child_template = Template(child if isinstance(child, dict) else {}, below)
                parts.append(_Open(_entry_key(key) + _ENTRY_VALUE, child_template))
        flush()
        self._parts = tuple(parts)
        self._fills = tuple(sorted(set(holes.values())))
        self._own: Mapping[str, bytes] = {}
        self._last: _Entry | None = None
        # What it holds, for the caches keeping templates: its parts, and their last layout's prefixes.
        self.size: int = 2 * sum(len(p) if isinstance(p, bytes) else len(p.key) for p in parts) + sum(
            p.template.size for p in parts if isinstance(p, _Open)
        )

    def filled(self, own: Mapping[str, bytes]) -> Template:
        """This template with the holes ``own`` names filled once and for all; the others are filled per request.

        The parts are this template's, shared: a body that differs from
        another only inside one subtree (a rebuilt component's values) is
        that subtree encoded, put into the other's parts.
        """
        out = Template.__new__(Template)
        out._parts = self._parts
        out._own = {**self._own, **own}
        out._fills = tuple(name for name in self._fills if name not in own)
        out._last = None
        out.size = self.size + sum(map(len, own.values()))
        return out

    def _lengths(self, fills: Mapping[str, bytes]) -> dict[str, int]:
        lengths = {name: len(fill) for name, fill in self._own.items()}
        lengths.update({name: len(fills[name]) for name in self._fills})
        return lengths

    def _lay_out(self, lengths: Mapping[str, int], own: Mapping[str, bytes], out: list[bytes | str]) -> int:
        """Append the encoding's parts to ``out``, each hole's fill in place if ``own`` has it (filled once
        and for all), else its name; return its length.

        ``lengths``: the length of each fill by name.
        """
        total = 0
        for part in self._parts:  # by exact type (a part is one of three classes): faster than isinstance
            if type(part) is bytes:
                out.append(part)
                total += len(part)
            elif type(part) is _Hole:
                size = lengths[part.fill]
                inner = part.key + varint(size)
                head = _MAP_ENTRY + varint(len(inner) + size) + inner
                out.append(head)
                out.append(own.get(part.fill) or part.fill)  # an own fill is never empty: a Value has a tag
                total += len(head) + size
            else:
                assert type(part) is _Open
                at = len(out)
                out.append(b"")  # where its head goes, once the map's size is known
                size = part.template._lay_out(lengths, own, out)
                struct = _STRUCT_VALUE + varint(size)
                inner = part.key + varint(len(struct) + size) + struct
                head = _MAP_ENTRY + varint(len(inner) + size) + inner
                out[at] = head
                total += len(head) + size
        return total

    def entry(self, key: str, fills: Mapping[str, bytes], *, ready: bool) -> _Entry:
        """The ``State.resources`` map entry desiring ``key`` with this body filled by ``fills``, laid out."""
        names = self._fills
        # Most bodies have one hole, usages none: spare them the general case.
        if not names:
            lengths: tuple[int, ...] | int = 0
        elif len(names) == 1:
            lengths = len(fills[names[0]])
        else:
            lengths = tuple([len(fills[name]) for name in names])
        last = self._last
        if last is None or last[0] != key or last[1] is not ready or last[2] != lengths:
            last = self._last = self._entry(key, fills, ready, lengths)
        return last

    def _entry(self, key: str, fills: Mapping[str, bytes], ready: bool, lengths: tuple[int, ...] | int) -> _Entry:
        body: list[bytes | str] = []
        size = self._lay_out(self._lengths(fills), self._own, body)
        body_head = _MAP_ENTRY + varint(size)
        resource = len(body_head) + size + (len(_READY_TRUE) if ready else 0)
        inner = _entry_key(key) + _ENTRY_VALUE + varint(resource)
        if ready:
            body.append(_READY_TRUE)
        # Runs of encoded parts joined: a request copies a few parts per entry, not one per map level.
        merged: list[bytes] = []
        holes: list[tuple[int, str]] = []
        run = [_ENTRY_VALUE + varint(len(inner) + resource) + inner + body_head]
        for part in body:
            if isinstance(part, str):
                merged.append(b"".join(run))
                holes.append((len(merged), part))
                merged.append(b"")
                run = []
            else:
                run.append(part)
        merged.append(b"".join(run))
        return key, ready, lengths, tuple(merged), tuple(holes), resource, sort_key(key)

    def encode(self, fills: Mapping[str, bytes]) -> bytes:
        """The Struct filled with ``fills``, encoded (what :meth:`entry` puts into a map entry)."""
        parts: list[bytes | str] = []
        self._lay_out(self._lengths(fills), self._own, parts)
        return b"".join(fills[p] if isinstance(p, str) else p for p in parts)


_READY_TRUE = _READY + varint(fnv1.READY_TRUE)


# A map entry laid out for (key, ready, fill lengths): those three, its encoded parts, where fills go (by
# name), the Resource's size, where it sorts. A plain tuple, made for every new template and kept with it:
# holding only text, bytes and numbers, it is untracked by the cyclic collector once the collector has seen
# it (a named tuple, like any object, it walks for as long as it lives).
_Entry = tuple[str, bool, tuple[int, ...] | int, tuple[bytes, ...], tuple[tuple[int, str], ...], int, bytes]


class Resources:
    """Desired composed resources, each kept as its encoded ``State.resources`` map entry; and, when set,
    the desired composite resource as its encoded ``State.composite`` field."""

    def __init__(self) -> None:
        # key -> (where it sorts, its parts, the Resource's size)
        self._entries: dict[str, tuple[bytes, Sequence[bytes], int]] = {}
        self.composite = b""

    def set_composite(self, fields: Mapping[str, bytes], ready: int) -> None:
        """Desire the composite resource with these top-level fields (encoded ``Value``s) and readiness."""
        resource = _field(_MAP_ENTRY, _struct(fields)) + (_READY + varint(ready) if ready else b"")
        self.composite = _field(_MAP_ENTRY, resource)

    def add(self, key: str, body: Template, fills: Mapping[str, bytes], *, ready: bool) -> None:
        """Desire ``key`` with ``body`` filled by ``fills``, ready or not."""
        _key, _ready, _lengths, parts, holes, size, order = body.entry(key, fills, ready=ready)
        if holes:
            filled = list(parts)
            for i, name in holes:
                filled[i] = fills[name]
            self._entries[key] = (order, filled, size)
        else:
            self._entries[key] = (order, parts, size)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def sizes(self) -> dict[str, int]:
        """Each resource's encoded size, by key."""
        return {key: size for key, (_, _, size) in self._entries.items()}

    def parts(self) -> list[bytes]:
        """The map entries' parts, in the deterministic serializer's order."""
        out: list[bytes] = []
        for _, parts, _ in sorted(self._entries.values(), key=_order):
            out.extend(parts)
        return out

    def resource(self, key: str) -> fnv1.Resource:
        """One resource as a message."""
        entry = fnv1.State.FromString(b"".join(self._entries[key][1]))
        resource: fnv1.Resource = entry.resources[key]
        return resource

    def move_into(self, target: fnv1.State) -> None:
        """Write everything desired into ``target`` as rendering into it writes it, and forget it.

        A resource already there (another pipeline step's) takes our body,
        and our readiness where we have one.
        """
        for key in self._entries:
            ours = self.resource(key)
            target.resources[key].resource.CopyFrom(ours.resource)
            if ours.ready:
                target.resources[key].ready = ours.ready
        self._entries.clear()
        if self.composite:
            target.MergeFromString(self.composite)
            self.composite = b""


def _order(entry: tuple[bytes, Sequence[bytes], int]) -> bytes:
    return entry[0]


def serialize(rsp: fnv1.RunFunctionResponse, desired: Resources) -> bytes:
    """``rsp`` with the ``desired`` state encoded beside it, as ``SerializeToString(deterministic=True)`` writes it.

    ``rsp`` must desire no composed resource when ``desired`` does (they could
    not be interleaved in order; :meth:`Resources.move_into` moves ours there
    first), nor a composite when ``desired`` does.
    """
    data: bytes = rsp.SerializeToString(deterministic=True)
    if not len(desired) and not desired.composite:
        return data
    assert not (len(desired) and rsp.desired.resources), "composed resources both in the message and encoded"
    assert not (desired.composite and rsp.desired.HasField("composite")), "two composite resources"
    pos = 0
    if data[:1] == bytes((_META,)):
        length, start = _read_varint(data, 1)
        pos = start + length
    theirs = b""  # what the message desires: composite (1) or composed resources (2), not both with ours
    rest = pos
    if data[pos : pos + 1] == bytes((_DESIRED,)):
        length, start = _read_varint(data, pos + 1)
        theirs, rest = data[start : start + length], start + length
    # State's fields in number order: the composite (1), then the composed resources (2).
    parts = [desired.composite, theirs, *desired.parts()]
    size = sum(map(len, parts))
    return b"".join((data[:pos], bytes((_DESIRED,)), varint(size), *parts, data[rest:]))
