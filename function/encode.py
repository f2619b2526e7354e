"""Plain trees (what rendering makes) encoded as protobuf ``Struct`` messages, each big subtree once.

A stack's bodies are the same on every reconcile of every cluster but for a
few small leaves (the ProviderConfig's name, its secrets, the gateway's
fields). Rather than converting every body node by node on every request
(``tree.to_struct``: ~2 ms for a full stack), :func:`struct_bytes` encodes a
tree itself and keeps the encoding of each large subtree below a body's top
by its content: the next request, a fork's transformed copy or another
cluster's body with the same values finds it. The content key is the
subtree's ``marshal`` serialization at version 2, which CPython writes in C,
which is lossless (equal keys, equal trees, ``True``, ``1`` and ``1.0`` apart)
and which, unlike later versions, writes no back-references or interning
flags: a tree's key does not depend on how its strings are shared.

The bytes are valid ``Struct`` encodings; :func:`function.fn.run` parses them
into the response, and protobuf serializes the whole response, so the bytes
sent are protobuf's own deterministic serialization.
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

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

# Subtrees looked up by content: maps and lists from this depth (a body's
# top and spec hold the per-request leaves; below them, values, manifests,
# labels and selectors are shared) and of at least this many marshal bytes
# (smaller ones encode faster than a key is made and looked up).
_MEMO_DEPTH = 2
_MEMO_BYTES = 256
_MARSHAL_VERSION = 2  # no references or interning flags (see above)

# Encoded subtrees by content: the generated and rebuilt values of the plans
# in use and the bodies of added components; a few MB for a fleet's stacks.
_ENCODED: BoundedCache[bytes, bytes] = BoundedCache("encoded subtrees")


def varint(n: int) -> bytes:
    """``n`` (not negative) as a protobuf varint."""
    if n <= _LOW7:
        return bytes((n,))
    out = bytearray()
    while n > _LOW7:
        out.append((n & _LOW7) | _MORE)
        n >>= 7
    out.append(n)
    return bytes(out)


def sort_key(key: str) -> bytes:
    """Where protobuf's deterministic serializer puts a map entry: by the key's UTF-8 bytes, a key before its
    prefixes (0xFF never occurs in UTF-8)."""
    return key.encode() + b"\xff"


def struct_bytes(tree: dict[str, Any]) -> bytes:
    """``tree`` (string keys; JSON values) as an encoded ``Struct``, what ``tree.to_struct`` converts it to."""
    return _struct(tree, 0)


def _struct(tree: dict[str, Any], depth: int) -> bytes:
    out = []
    for key in sorted(tree, key=sort_key) if len(tree) > 1 else tree:
        name = key.encode()
        value = _value(tree[key], depth + 1)
        entry = _ENTRY + varint(len(name)) + name + _ENTRY_VALUE + varint(len(value)) + value
        out.append(_ENTRY + varint(len(entry)) + entry)
    return b"".join(out)


def _value(node: Any, depth: int) -> bytes:
    """``node`` as an encoded ``Value``."""
    kind = type(node)
    if kind is str:
        data: bytes = node.encode()
        return _STRING + varint(len(data)) + data
    if kind is dict or kind is list:
        return _kept(node, depth) if depth >= _MEMO_DEPTH else _container(node, depth)
    if kind is bool:
        return _TRUE if node else _FALSE
    if kind is int or kind is float:
        return _NUMBER + _DOUBLE.pack(node)
    return _NULL if node is None else _other(node, depth)


def _container(node: dict[str, Any] | list[Any] | tuple[Any, ...], depth: int) -> bytes:
    if isinstance(node, dict):
        body = _struct(node, depth)
        return _STRUCT + varint(len(body)) + body
    items = [_value(item, depth + 1) for item in node]
    body = b"".join([_ENTRY + varint(len(item)) + item for item in items])
    return _LIST + varint(len(body)) + body


def _kept(node: dict[str, Any] | list[Any], depth: int) -> bytes:
    """A map or list below a body's top: from its encoding by content when big enough to be worth keeping."""
    try:
        key = marshal.dumps(node, _MARSHAL_VERSION)
    except ValueError:  # something marshal does not write (a str enum, a dict subclass): encoded as is
        return _container(node, depth)
    if len(key) < _MEMO_BYTES:
        return _container(node, depth)
    hit = _ENCODED.get(key)
    if hit is None:
        hit = _ENCODED.put(key, _container(node, depth), 2 * len(key))  # the encoding is about the key's size
    return hit


def _other(node: Any, depth: int) -> bytes:
    """What :func:`_value` does for subclasses (a str enum, a dict subclass) and tuples."""
    if isinstance(node, str):
        return _value(str(node), depth)
    if isinstance(node, dict | list | tuple):
        return _container(node, depth)
    if isinstance(node, bool):  # before int: a bool is an int
        return _TRUE if node else _FALSE
    if isinstance(node, int | float):
        return _NUMBER + _DOUBLE.pack(float(node))
    raise TypeError(f"not a JSON value: {type(node).__name__}")
