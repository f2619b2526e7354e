"""Plain trees (what rendering makes) encoded as protobuf ``Struct`` messages, the lasting parts once.

A composed body is a few small maps made for the request (its top, its
``spec``, the ProviderConfig reference) around large parts that last: a
component's values or manifest, its metadata and chart, the plan's own copies
(:func:`lasting` makes them). :func:`struct_bytes` encodes a tree, taking each
lasting part's encoding whole, so a request costs the maps made for it. A
fork's transforms edit the same bodies (:func:`editable`): a part still
serializing as it did (``marshal``, in C and lossless: ``True``, ``1`` and
``1.0`` apart) keeps its encoding; one a transform edited is encoded as it is,
then put back as it was (:func:`settle`, :func:`restore`).

The bytes are what ``tree.to_struct(tree).SerializeToString(deterministic=True)``
gives (tests/test_encode.py): map entries in upb's order (:func:`sort_key`),
each entry's key and value always written, numbers as doubles.
"""

from __future__ import annotations

import json
import marshal
import struct
import weakref
import zlib
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any, NamedTuple

from function.tree import copy_tree

_LOW7, _MORE = 0x7F, 0x80
# Tags: (field number << 3) | wire type (2: length-delimited, 0: varint, 1: 64-bit).
_ENTRY = b"\x0a"  # Struct.fields (1) map entry; a map entry's key (1); ListValue.values (1)
_ENTRY_VALUE = b"\x12"  # a map entry's value (2)
_NULL = b"\x08\x00"  # Value.null_value (1) = NULL_VALUE
_NUMBER = b"\x11"  # Value.number_value (2), a double
_STRING = b"\x1a"  # Value.string_value (3)
_TRUE, _FALSE = b"\x20\x01", b"\x20\x00"  # Value.bool_value (4)
_STRUCT = b"\x2a"  # Value.struct_value (5)
_LIST = b"\x32"  # Value.list_value (6)
_DOUBLE = struct.Struct("<d")
_MARSHAL_VERSION = 2  # no back-references: a tree's serialization does not depend on how its parts are shared


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > _LOW7:
        out.append((n & _LOW7) | _MORE)
        n >>= 7
    out.append(n)
    return bytes(out)


# Every length below 16 KiB looked up rather than computed: nearly every length a body holds.
_VARINT_TABLE = 1 << 14
_VARINTS = [_varint(n) for n in range(_VARINT_TABLE)]


def varint(n: int) -> bytes:
    """``n`` (not negative) as a protobuf varint."""
    return _VARINTS[n] if n < _VARINT_TABLE else _varint(n)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` in ``data``, and where what follows it starts."""
    value, shift = 0, 0
    while True:
        byte = data[pos]
        value |= (byte & _LOW7) << shift
        pos += 1
        if not byte & _MORE:
            return value, pos
        shift += 7


def sort_key(key: str) -> bytes:
    """Where upb's deterministic serializer puts a map entry: by the key's UTF-8 bytes, a key before its
    prefixes (upb compares the common bytes, then puts the longer key first; 0xFF never occurs in UTF-8)."""
    return key.encode() + b"\xff"


class Lasting:
    """A lasting part (a plain map, :func:`lasting`), its encoding as a ``Value`` and its ``marshal``
    serialization, what it must still be. Whoever holds the part for later requests holds this: the part is
    known as lasting (:data:`_LASTING`) exactly as long as it."""

    __slots__ = ("__weakref__", "blob", "node", "value")

    def __init__(self, node: dict[str, Any], value: bytes, blob: bytes) -> None:
        self.node = node
        self.value = value
        self.blob = blob


# The lasting parts alive, by the id of their map: a weak reference to the record, whose entry goes when the
# record does (before its map can), so an id here is always its map's own.
_LASTING: dict[int, weakref.ref[Lasting]] = {}


def _lasting_part(node: object) -> Lasting | None:
    """The record of ``node`` if it is a lasting part's map."""
    ref = _LASTING.get(id(node))
    part = None if ref is None else ref()
    return part if part is not None and part.node is node else None


# Lasting encodings at least this long are kept by reference in a kept response (:func:`keep`); shorter ones
# cost less copied than a reference.
_SHARED_BYTES = 64
_OWN_LEVEL = 1  # zlib's fastest: a response's own bytes (names, the maps made for it) repeat a few strings
_REFERENCE_BYTES = 8  # a reference in the layout tuple
_LENGTH_BYTES = 36  # an own piece's length in the layout: a reference to an int object


class Kept(NamedTuple):
    """A response kept for sending again: the encodings it shares with other responses by reference, what is
    its own compressed. A full stack's ~70 KB are mostly encodings every cluster of its stack shares."""

    layout: tuple[bytes | int, ...]  # in order: a shared encoding, or the length of an own piece
    own: bytes  # the own pieces, one after the other, compressed

    def pieces(self) -> list[bytes]:
        """What concatenates to the response's bytes."""
        own = zlib.decompress(self.own)
        out: list[bytes] = []
        pos = 0
        for piece in self.layout:
            if type(piece) is int:
                out.append(own[pos : pos + piece])
                pos += piece
            else:
                out.append(piece)  # type: ignore[arg-type]  # a shared encoding
        return out

    def weight(self) -> int:
        """About what it takes in memory, beside the encodings it shares."""
        return len(self.own) + sum(_LENGTH_BYTES if type(p) is int else _REFERENCE_BYTES for p in self.layout)


def keep(data: bytes, shared: Sequence[bytes], start: int = 0) -> Kept:
    """``data`` from ``start``, which holds the encodings in ``shared`` in that order, kept as a :class:`Kept`."""
    layout: list[bytes | int] = []
    own: list[bytes] = []
    pos = start
    for part in shared:
        at = _find(data, part, pos)
        if at < 0:
            continue
        if at > pos:
            own.append(data[pos:at])
            layout.append(at - pos)
        layout.append(part)
        pos = at + len(part)
    if pos < len(data):
        own.append(data[pos:])
        layout.append(len(data) - pos)
    return Kept(tuple(layout), zlib.compress(b"".join(own), _OWN_LEVEL))


def _find(data: bytes, part: bytes, pos: int) -> int:
    """Where ``part`` first occurs in ``data`` from ``pos``, or -1. Found by its first bytes, then compared
    whole: ``bytes.find`` prepares a long needle in time linear in its length, and parts are long."""
    head = part[:_FIND_HEAD]
    at = data.find(head, pos)
    while at >= 0 and not data.startswith(part, at):
        at = data.find(head, at + 1)
    return at


_FIND_HEAD = 24  # long enough that a false start is rare, short enough to prepare at once


def lasting(node: dict[str, Any]) -> Lasting:
    """A lasting part made of ``node`` (a JSON map): a copy only rendering's bodies hold, of plain maps, lists
    and scalars (a str enum becomes its string), encoded now and taken whole from then on. Nothing else reaches
    into it, so a part a transform edited is put back as it was (:func:`restore`). Its holder keeps the
    returned record, and puts ``.node`` in bodies."""
    try:
        blob = marshal.dumps(node, _MARSHAL_VERSION)
    except ValueError:  # a str enum, a dict subclass: made plain first
        blob = marshal.dumps(json.loads(json.dumps(node)), _MARSHAL_VERSION)
    owned: dict[str, Any] = marshal.loads(blob)
    part = Lasting(owned, _value(owned, Encoding()), blob)
    key = id(owned)
    _LASTING[key] = weakref.ref(part, lambda _: _LASTING.pop(key, None))
    return part


def size(part: Lasting) -> int:
    """About what a part takes in memory: the part, its blob and its encoding are about the same size each."""
    return 3 * len(part.value)


def struct_bytes(tree: dict[str, Any], enc: Encoding | None = None) -> bytes:
    """``tree`` (string keys, JSON values) as an encoded ``Struct``; ``enc``: shared by the trees of one
    response."""
    return _fields(tree, Encoding() if enc is None else enc)


def editable(tree: dict[str, Any] | list[Any], enc: Encoding) -> Any:
    """``tree`` (a body: maps made for the request around lasting parts), to be edited in place by transforms.

    The maps made for the request are handed over as they are, once each: one met again at another path
    (the ProviderConfig reference every body holds) is copied there, so that editing one body edits only it.
    Each lasting part is handed over as it is (copied where met again), and ``enc`` notes it. After the
    transforms, :func:`settle` tells the parts left as they were, whose encodings stand, from those edited,
    which are encoded as they are now and then put back by :func:`restore`: a no-op transform costs a
    ``marshal`` serialization of the parts, not a copy of them.
    """
    part = _lasting_part(tree)
    if part is not None:
        if id(tree) in enc.reached:
            return marshal.loads(part.blob)
        enc.reached[id(tree)] = part
        return tree
    if id(tree) in enc.met:
        return copy_tree(tree)
    enc.met.add(id(tree))
    for key, value in tree.items() if type(tree) is dict else enumerate(tree):
        if type(value) in _CONTAINERS:
            handed = editable(value, enc)
            if handed is not value:
                tree[key] = handed  # type: ignore[index]  # a list's index, a map's key
                enc.copies.append((tree, key, handed, value))
    return tree


# What :func:`editable` walks; everything else in a body is immutable (or a transform's).
_CONTAINERS = frozenset((dict, list))


def settle(enc: Encoding) -> None:
    """After transforms: the lasting parts :func:`editable` handed over that still serialize as they were
    stand (their encodings are taken); the others are noted, to be put back by :func:`restore`. A copy
    still equal to the map it was made of gives way to it again, encoded once."""
    changed = [part for part in enc.reached.values() if not _same(part.node, part.blob)]
    enc.changed = changed
    enc.trusted = enc.reached.keys() - {id(part.node) for part in changed}
    for holder, key, copied, original in enc.copies:
        try:
            if holder[key] is copied and _same(copied, _marshal(original)):
                holder[key] = original
        except (LookupError, ValueError, TypeError):  # the transforms reshaped the holder or the original
            continue


def _marshal(node: Any) -> bytes:
    return marshal.dumps(node, _MARSHAL_VERSION)


def _same(node: Any, blob: bytes) -> bool:
    """Whether ``node`` serializes as ``blob``: holds exactly what it held (``True``, ``1`` and ``1.0`` apart)."""
    try:
        return _marshal(node) == blob
    except ValueError:  # something marshal does not write, which only a transform can have put: changed
        return False


def restore(enc: Encoding) -> None:
    """Every lasting part the transforms edited, put back as it was, in place: its holders keep the object.
    Rendering calls it once the response is encoded, or once a transform failed."""
    if enc.trusted is None:
        if not enc.reached:
            return
        settle(enc)
    for part in enc.changed:
        part.node.clear()
        part.node.update(marshal.loads(part.blob))
    enc.changed = []


class Encoding:
    """What encoding one response keeps: the encodings of the maps and lists met so far, by id, while they all
    live (one object at several paths, as a request's ProviderConfig reference in every body, is encoded once);
    the large lasting encodings the response holds, in order (what :func:`keep` keeps by reference); and, once
    transforms ran, the lasting parts handed to them, which of them stand, and which they changed."""

    __slots__ = ("changed", "copies", "met", "reached", "seen", "shared", "trusted")

    def __init__(self) -> None:
        self.seen: dict[int, bytes] = {}
        self.shared: list[bytes] = []
        self.reached: dict[int, Lasting] = {}
        self.trusted: Set[int] | None = None  # None: no transform ran, every lasting part stands
        self.changed: list[Lasting] = []
        self.met: set[int] = set()  # the maps made for the request handed to transforms, by id
        # Where a map met again was copied: (its holder, the key there, the copy, the map).
        self.copies: list[tuple[Any, Any, Any, Any]] = []


def _fields(tree: dict[str, Any], enc: Encoding) -> bytes:
    out: list[bytes] = []
    for key in upb_order(tree):
        value = _value(tree[key], enc)
        head = _HEADS.get(key) or _head(key)
        length = len(value)
        tail = _VARINTS[length] if length < _VARINT_TABLE else _varint(length)
        size = len(head) + len(tail) + length
        out += (_ENTRY, _VARINTS[size] if size < _VARINT_TABLE else _varint(size), head, tail, value)
    return b"".join(out)


# Map keys' sorted orders by their order in the map, and each key's entry head
# (the key, then the value's tag): rendering makes maps of a few dozen shapes
# and keys, which would otherwise be sorted and encoded anew in every body.
# Bounded, since a fork or a document can write any keys.
_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}
_HEADS: dict[str, bytes] = {}
_KEPT_KEYS = 4096


def upb_order(tree: Mapping[str, Any]) -> Iterable[str]:
    """``tree``'s keys in upb's order (:func:`sort_key`), each key tuple sorted once."""
    if len(tree) < 2:  # noqa: PLR2004 - nothing to sort
        return tree
    keys = tuple(tree)
    order = _ORDERS.get(keys)
    if order is None:
        for key in keys:
            _check_key(key)
        order = tuple(sorted(keys, key=sort_key))
        if len(_ORDERS) < _KEPT_KEYS:
            _ORDERS[keys] = order
    return order


def _check_key(key: object) -> None:
    if type(key) is not str and not isinstance(key, str):  # only a transform can put one
        raise TypeError(f"a map key that is not a string: {type(key).__name__}")


def _head(key: str) -> bytes:
    _check_key(key)
    name = key.encode()
    head = _ENTRY + varint(len(name)) + name + _ENTRY_VALUE
    if len(_HEADS) < _KEPT_KEYS:
        _HEADS[key] = head
    return head


def _value(node: Any, enc: Encoding) -> bytes:
    """``node`` as an encoded ``Value``."""
    kind = type(node)
    if kind is str:
        data: bytes = node.encode()
        return _STRING + varint(len(data)) + data
    if kind is dict or kind is list:
        return _known(node, enc) or _new(node, enc)
    if kind is bool:
        return _TRUE if node else _FALSE
    if kind is int or kind is float:
        return _NUMBER + _DOUBLE.pack(node)
    return _NULL if node is None else _other(node, enc)


def _known(node: dict[str, Any] | list[Any], enc: Encoding) -> bytes | None:
    """The encoding of ``node`` if met before in this response, or lasting (and, after transforms, left as it
    was)."""
    hit = enc.seen.get(id(node))
    if hit is not None:
        return hit
    part = _lasting_part(node)
    if part is None or (enc.trusted is not None and id(node) not in enc.trusted):
        return None
    value = part.value
    if len(value) >= _SHARED_BYTES:
        enc.shared.append(value)
    return value


def _new(node: dict[str, Any] | list[Any], enc: Encoding) -> bytes:
    enc.seen[id(node)] = encoded = _container(node, enc)
    return encoded


def _container(node: dict[str, Any] | list[Any] | tuple[Any, ...], enc: Encoding) -> bytes:
    if isinstance(node, dict):
        body = _fields(node, enc)
        return _STRUCT + varint(len(body)) + body
    items = [_value(item, enc) for item in node]
    body = b"".join([_ENTRY + varint(len(item)) + item for item in items])
    return _LIST + varint(len(body)) + body


def _other(node: Any, enc: Encoding) -> bytes:
    """What :func:`_value` does for subclasses (a str enum, a dict subclass) and tuples."""
    if isinstance(node, str):
        return _value(str(node), enc)
    if isinstance(node, dict | list | tuple):
        return _container(node, enc)
    if isinstance(node, bool):  # before int: a bool is an int
        return _TRUE if node else _FALSE
    if isinstance(node, int | float):
        return _NUMBER + _DOUBLE.pack(float(node))
    raise TypeError(f"not a JSON value: {type(node).__name__}")
