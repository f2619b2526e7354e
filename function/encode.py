"""Plain trees (what rendering makes) encoded as protobuf ``Struct`` messages, the lasting parts once.

A composed body is a few small maps made for the request (its top, its
``spec``, the ProviderConfig reference) around large parts that last: a
component's values or manifest, its metadata and chart, which the plan holds
and no one mutates (:func:`lasting` names them). :func:`struct_bytes` encodes
a tree, taking each lasting part's encoding by identity, so a request costs
the maps made for it. A fork's transforms edit a private copy of the bodies
(:func:`private_copy`), whose lasting parts are copied from their ``marshal``
serialization (written in C, lossless: ``True``, ``1`` and ``1.0`` apart);
a copy that still serializes as its part did takes the part's encoding.

The bytes are what ``tree.to_struct(tree).SerializeToString(deterministic=True)``
gives (tests/test_encode.py): map entries in upb's order (:func:`sort_key`),
each entry's key and value always written, numbers as doubles.
"""

from __future__ import annotations

import marshal
import struct
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, cast

from function.cache import BoundedCache

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


class _Lasting:
    """A lasting part and its encoding as a ``Value``; its marshal serialization once a copy is compared."""

    __slots__ = ("blob", "node", "value")

    def __init__(self, node: Any, value: bytes) -> None:
        self.node = node
        self.value = value
        self.blob: bytes | None = None


# Lasting parts by id (the entry holds the part, so the id stays its own):
# every component's metadata, chart and values or manifest of the plans in
# use, and Usages' fixed halves.
_LASTING: BoundedCache[int, _Lasting] = BoundedCache("lasting parts")


# Lasting encodings at least this long are kept by reference in a kept response (:func:`rope`); shorter ones
# cost less copied than a reference and a piece between them.
_SHARED_BYTES = 64


def rope(data: bytes, shared: Sequence[bytes]) -> tuple[bytes, ...]:
    """``data`` as pieces that concatenate to it: the encodings in ``shared`` (in the order ``data`` holds them)
    by reference, what lies between them copied. A response kept this way costs what is its own (its
    ProviderConfig's name, its status, the maps made for it), not what it shares with every other cluster."""
    pieces: list[bytes] = []
    pos = 0
    for part in shared:
        at = data.find(part, pos)
        if at < 0:
            continue
        if at > pos:
            pieces.append(data[pos:at])
        pieces.append(part)
        pos = at + len(part)
    if pos < len(data):
        pieces.append(data[pos:])
    return tuple(pieces)


def lasting(node: Any) -> Any:
    """``node``, a map or list nothing will mutate, encoded now and taken by identity from then on."""
    hit = _LASTING.get(id(node))
    if hit is None or hit.node is not node:
        value = _value(node, Encoding())
        _LASTING.put(id(node), _Lasting(node, value), 2 * len(value))  # the part itself is about as big
    return node


def struct_bytes(tree: dict[str, Any], enc: Encoding | None = None) -> bytes:
    """``tree`` (string keys, JSON values) as an encoded ``Struct``; ``enc``: shared by the trees of one
    response (and the :func:`private_copy` they were made by)."""
    return _fields(tree, Encoding() if enc is None else enc)


def private_copy(tree: Any, enc: Encoding) -> Any:
    """A deep copy of ``tree`` (a body: maps made for the request around lasting parts), for a transform to edit.

    A lasting part is copied from its ``marshal`` serialization, in C; encoding the copy with ``enc`` then
    takes the part's encoding while the copy still serializes as the part did.
    """
    found = _LASTING.get(id(tree))
    if found is not None and found.node is tree:
        if found.blob is None:
            found.blob = marshal.dumps(tree, _MARSHAL_VERSION)
        copy = marshal.loads(found.blob)
        enc.seen[id(copy)] = _Copy(copy, found)
        return copy
    if type(tree) is dict:
        return {key: private_copy(v, enc) if type(v) in _CONTAINERS else v for key, v in tree.items()}
    return [private_copy(v, enc) if type(v) in _CONTAINERS else v for v in tree]


_CONTAINERS = frozenset((dict, list))


class _Copy(NamedTuple):
    """A private copy of a lasting part (held, so its id stays its own), and the part."""

    copy: Any
    part: _Lasting


class Encoding:
    """What encoding one response keeps: the encodings of the maps and lists met so far, by id, while they all
    live (one object at several paths, as a request's ProviderConfig reference in every body, is encoded once),
    the private copies of lasting parts made for transforms, and the large lasting encodings the response holds,
    in order (what :func:`rope` keeps by reference)."""

    __slots__ = ("seen", "shared")

    def __init__(self) -> None:
        self.seen: dict[int, bytes | _Copy] = {}
        self.shared: list[bytes] = []


def _fields(tree: dict[str, Any], enc: Encoding) -> bytes:
    out: list[bytes] = []
    for key in _order(tree):
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


def _order(tree: dict[str, Any]) -> Iterable[str]:
    """``tree``'s keys in upb's order."""
    if len(tree) < 2:  # noqa: PLR2004 - nothing to sort
        return tree
    keys = tuple(tree)
    order = _ORDERS.get(keys)
    if order is None:
        for key in keys:
            if type(key) is not str and not isinstance(key, str):  # only a transform can put one
                raise TypeError(f"a map key that is not a string: {type(key).__name__}")
        order = tuple(sorted(keys, key=sort_key))
        if len(_ORDERS) < _KEPT_KEYS:
            _ORDERS[keys] = order
    return order


def _head(key: str) -> bytes:
    if type(key) is not str and not isinstance(key, str):  # only a transform can put one
        raise TypeError(f"a map key that is not a string: {type(key).__name__}")
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
    """The encoding of ``node`` if met before in this response, lasting, or an unchanged copy of a lasting
    part."""
    hit = enc.seen.get(id(node))
    if type(hit) is bytes:
        return hit
    if hit is not None:  # a private copy of a lasting part: its encoding while the transforms left it as it was
        copied = cast(_Copy, hit)
        if copied.copy is node:
            try:
                same = marshal.dumps(node, _MARSHAL_VERSION) == copied.part.blob
            except ValueError:  # something marshal does not write (a str enum, a dict subclass): changed
                same = False
            if same:
                if len(copied.part.value) >= _SHARED_BYTES:
                    enc.shared.append(copied.part.value)
                return copied.part.value
        return None
    found = _LASTING.get(id(node))
    if found is None or found.node is not node:
        return None
    if len(found.value) >= _SHARED_BYTES:
        enc.shared.append(found.value)
    return found.value


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
