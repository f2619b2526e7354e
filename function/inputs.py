"""What the function accepts from the wire: documented limits, and Structs read into plain data.

Every object the function reads from a request (the XR, the function Input,
the context's document, EnvironmentConfigs) goes through :func:`plain`, which
names the object and the field of anything JSON cannot hold (NaN, ±Infinity)
or anything nested deeper than :data:`MAX_DEPTH`. :func:`check_request`
refuses a request beyond the size limits before any work is done.
:func:`decode_request` is the gRPC server's request decoder: a request the
protobuf decoder refuses (nesting beyond its recursion limit) becomes a
readable Fatal naming the object and the field instead of a gRPC error.

The limits (the README's "Limits") are below, each with why it is what it is.
Every Fatal message is at most ``MAX_MESSAGE_CHARS`` characters; values are
quoted as excerpts of at most ``EXCERPT_CHARS``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from function.cache import MIB
from function.encode import varint
from function.errors import InputError, excerpt

# Above MAX_REQUEST_BYTES, a Fatal. The server accepts messages up to GRPC_MAX_RECEIVE_BYTES (the
# default of --max-recv-message-size; the send limit follows it, as in the SDK) so that such a request
# reaches the function and gets the Fatal; above that, gRPC itself answers RESOURCE_EXHAUSTED and
# Crossplane reports that error on the XR.
MAX_REQUEST_BYTES = 32 * MIB  # ~20 objects at etcd's limit, far above any real reconcile
GRPC_MAX_RECEIVE_BYTES = 64 * MIB
MAX_OBJECT_BYTES = 3 * MIB  # twice etcd's default 1.5 MiB request limit: no object a cluster can store is refused
# Crossplane dials functions with grpc-go's default call options (internal/xfn/function_runner.go), whose
# receive limit is 4 MiB: a larger response would be an error on Crossplane's side, so it gets a Fatal.
MAX_RESPONSE_BYTES = 4 * MIB
# The Python protobuf decoder (upb) stops at 100 nested messages, about 32 levels of maps and lists of a
# resource inside a request, so deeper objects could not arrive whole anyway.
MAX_DEPTH = 32


def _path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels of maps and lists"


class _BadValueError(Exception):
    """A bad value deep inside: the path is collected on the way out, so good input builds none."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.path: list[str] = []  # innermost first


def plain(struct: struct_pb2.Struct, obj: str, path: str = "", depth: int = 1) -> dict[str, Any]:
    """``struct`` as plain data (what ``MessageToDict`` gives), refusing NaN, ±Infinity and deep nesting."""
    try:
        return _struct(struct, depth)
    except _BadValueError as bad:
        raise _error(obj, path, bad) from None


def plain_value(value: struct_pb2.Value, obj: str, path: str, depth: int = 1) -> Any:
    """One ``Value`` as plain data; ``depth`` is that of the map holding it."""
    try:
        return _value(value, depth)
    except _BadValueError as bad:
        raise _error(obj, path, bad) from None


def _error(obj: str, path: str, bad: _BadValueError) -> InputError:
    for part in reversed(bad.path):
        path = path + part if part.startswith("[") else _path(path, part)
    return InputError(f"{obj}: {excerpt(path)}: {bad.problem}")


# Called unbound: no bound method is made per value (every value read is a Value).
_which = struct_pb2.Value.WhichOneof


def _struct(struct: struct_pb2.Struct, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise _BadValueError(_TOO_DEEP)
    out = {}
    fields = struct.fields
    key = ""
    # Every value's kind is read once, and the two kinds most values have
    # (strings, maps) are read here, not in a call per value: documents are
    # mostly maps of strings, and a changed one is converted on a plan miss.
    try:
        # In key order: protobuf keeps no order in a map, and the order the Python
        # runtime iterates one in differs between processes (its hash tables are
        # seeded per process), so anything listed in map order would differ too.
        # A map of one key (many are) has one order: read as it is, not sorted.
        for key in sorted(fields) if len(fields) > 1 else fields:
            value = fields[key]
            kind = _which(value, "kind")
            if kind == "string_value":
                out[key] = value.string_value
            elif kind == "struct_value":
                out[key] = _struct(value.struct_value, depth + 1)
            else:
                out[key] = _other(value, kind, depth)
    except _BadValueError as bad:
        bad.path.append(key)
        raise
    return out


def _value(value: struct_pb2.Value, depth: int) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return _struct(value.struct_value, depth + 1)
    return _other(value, kind, depth)


def _other(value: struct_pb2.Value, kind: str | None, depth: int) -> Any:
    """A value of ``kind``, neither a string nor a map; ``depth`` is that of the map or list holding it."""
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise _BadValueError(f"{number} is not a number JSON or Kubernetes can hold")
        return number
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return _list(value.list_value.values, depth + 1)
    return None


def _list(values: Iterable[struct_pb2.Value], depth: int) -> list[Any]:
    if depth > MAX_DEPTH:
        raise _BadValueError(_TOO_DEEP)
    out: list[Any] = []
    append = out.append
    try:
        for item in values:
            kind = _which(item, "kind")
            if kind == "string_value":
                append(item.string_value)
            elif kind == "struct_value":
                append(_struct(item.struct_value, depth + 1))
            else:
                append(_other(item, kind, depth))
    except _BadValueError as bad:
        bad.path.append(f"[{len(out)}]")
        raise
    return out


def condition(obj: struct_pb2.Struct, kind: str) -> tuple[str, str]:
    """(status, message) of an object's condition of type ``kind``; ("Unknown", "") when absent or malformed.

    Conditions are whatever a provider (or anyone editing a status) wrote: a
    missing type, a list of strings, an unparseable lastTransitionTime must
    not fail the render, where the SDK's ``resource.get_condition`` raises.
    """
    status = obj.fields.get("status")
    if status is None or status.WhichOneof("kind") != "struct_value":
        return "Unknown", ""
    conditions = status.struct_value.fields.get("conditions")
    if conditions is None or conditions.WhichOneof("kind") != "list_value":
        return "Unknown", ""
    for item in conditions.list_value.values:
        if item.WhichOneof("kind") != "struct_value":
            continue
        fields = item.struct_value.fields
        if _string(fields.get("type")) == kind:
            return _string(fields.get("status")) or "Unknown", _string(fields.get("message"))
    return "Unknown", ""


def _string(value: struct_pb2.Value | None) -> str:
    return value.string_value if value is not None and value.WhichOneof("kind") == "string_value" else ""


def ready(observed: fnv1.Resource) -> bool:
    """Whether an observed resource's Ready condition is True; a malformed status is not ready."""
    return condition(observed.resource, "Ready")[0] == "True"


# How the request's objects are named in messages: its observed XR, and the fields held whole (by number).
_OBSERVED_XR = "the ServingStack (observed composite resource)"
_WHOLE = {4: "the function Input", 5: "the pipeline context"}


def _check_size(size: int, obj: str, limit: int = MAX_OBJECT_BYTES) -> None:
    if size > limit:
        raise InputError(f"{obj}: {size} bytes, above the limit of {limit} bytes the function accepts")


def check_request(req: fnv1.RunFunctionRequest, serialized: bytes | None = None) -> None:
    """Refuse a request beyond the documented size limits, before any work.

    The sizes are read from the request's serialization (``serialized``, when
    the caller has it): protobuf measures a message by serializing it.
    """
    data = req.SerializeToString() if serialized is None else serialized
    _check_size(len(data), "the RunFunctionRequest", MAX_REQUEST_BYTES)
    if len(data) <= MAX_OBJECT_BYTES:
        return  # no object is larger than the request that carries it
    for number, start, end in _spans(data, 0, len(data)):
        if number == 2:  # observed: its composite (1), a Resource whose resource (1) is the XR
            # Fields are written in number order: the composite comes before the composed resources.
            resource = next(_payloads(data, start, end, 1), None)
            xr = next(_payloads(data, *resource, 1), None) if resource is not None else None
            if xr is not None:
                _check_size(xr[1] - xr[0], _OBSERVED_XR)
        elif number in _WHOLE:
            _check_size(end - start, _WHOLE[number])
        elif number == 8:  # required_resources: a map entry of a name (1) and Resources (2) of items (1)
            name = next((data[k[0] : k[1]] for k in _payloads(data, start, end, 1)), b"").decode("utf-8", "replace")
            for value in _payloads(data, start, end, 2):
                for i, item in enumerate(_payloads(data, *value, 1)):
                    for resource in _payloads(data, *item, 1):
                        _check_size(resource[1] - resource[0], f"required resource {excerpt(name)}[{i}]")


# --------------------------------------------------------------------------- #
# Requests the protobuf decoder refuses
# --------------------------------------------------------------------------- #

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    # One or two bytes (below 16 KiB): every tag read here and most lengths, spared the loop.
    if pos + 1 < len(data):
        first = data[pos]
        if first < 0x80:
            return first, pos + 1
        second = data[pos + 1]
        if second < 0x80:
            return first & 0x7F | second << 7, pos + 2
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError("truncated varint")
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return result, pos
        shift += 7


def _field_at(data: bytes, pos: int, end: int) -> tuple[int, int, int, int]:
    """The field at ``pos``: (number, wire type, start, stop); ``data[start:stop]`` is a length-delimited
    field's payload, and ``stop`` is where the next field starts."""
    tag, pos = _varint(data, pos)
    wire = tag & 7
    if wire == _LENGTH:
        length, pos = _varint(data, pos)
        if pos + length > end:
            raise DecodeError("truncated field")
        return tag >> 3, wire, pos, pos + length
    if wire == _VARINT:
        _, pos = _varint(data, pos)
    elif wire in (_FIXED64, _FIXED32):
        pos += 8 if wire == _FIXED64 else 4
    else:
        raise DecodeError(f"wire type {wire}")
    return tag >> 3, wire, pos, pos


def _spans(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in ``data[pos:end]``; other wire types skipped."""
    while pos < end:
        number, wire, start, pos = _field_at(data, pos, end)
        if wire == _LENGTH:
            yield number, start, pos


def _payloads(data: bytes, pos: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each length-delimited field ``number`` in ``data[pos:end]``."""
    for found, start, stop in _spans(data, pos, end):
        if found == number:
            yield start, stop


def _fields(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, payload) of each length-delimited field; other wire types skipped."""
    for number, start, end in _spans(data, 0, len(data)):
        yield number, data[start:end]


def _entry(data: bytes) -> tuple[str, bytes]:
    """A map entry's string key (1) and its value's payload (2), the last of each."""
    fields = dict(_fields(data))
    return fields.get(1, b"").decode("utf-8", "replace"), fields.get(2, b"")


def _deepest_struct(data: bytes, path: str, depth: int) -> str | None:
    """The path where a serialized Struct first nests deeper than MAX_DEPTH, if it does."""
    entries = (_entry(payload) for number, payload in _fields(data) if number == 1)
    found = (_deepest_value(value, _path(path, key), depth) for key, value in entries)
    return next((f for f in found if f is not None), None)


def _deepest_value(data: bytes, path: str, depth: int) -> str | None:
    for number, payload in _fields(data):
        if number in (5, 6) and depth + 1 > MAX_DEPTH:  # struct_value, list_value
            return path
        if number == 5:
            return _deepest_struct(payload, path, depth + 1)
        if number == 6:
            for i, (_, item) in enumerate(_fields(payload)):
                found = _deepest_value(item, f"{path}[{i}]", depth + 1)
                if found is not None:
                    return found
    return None


def _resource_struct(data: bytes) -> bytes:
    """The Struct payload of a serialized ``Resource`` (field 1)."""
    return next((payload for number, payload in _fields(data) if number == 1), b"")


def _state(data: bytes, which: str, composite: str) -> Iterator[tuple[str, bytes]]:
    """The objects of a serialized ``State``: its composite resource (field 1) and composed ones (field 2)."""
    for number, part in _fields(data):
        if number == 1:
            yield composite, _resource_struct(part)
        elif number == 2:
            key, value = _entry(part)
            yield f"{which} composed resource {excerpt(key)}", _resource_struct(value)


def _objects(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Each object a serialized request carries, named, as its serialized Struct."""
    for number, payload in _fields(data):
        if number == 2:
            yield from _state(payload, "observed", _OBSERVED_XR)
        elif number == 3:
            yield from _state(payload, "desired", "the desired composite resource")
        elif number in _WHOLE:
            yield _WHOLE[number], payload
        elif number in (6, 8):  # extra_resources (deprecated), required_resources
            key, value = _entry(payload)
            for i, (_, item) in enumerate(_fields(value)):
                yield f"required resource {excerpt(key)}[{i}]", _resource_struct(item)


def undecodable(data: bytes, err: Exception) -> str:
    """Why the protobuf decoder refused a request, naming the object and field where it can."""
    with contextlib.suppress(DecodeError, RecursionError):
        for obj, struct in _objects(data):
            found = _deepest_struct(struct, "", 1)
            if found is not None:
                return f"{obj}: {excerpt(found)}: {_TOO_DEEP}"
    return f"the RunFunctionRequest: not a valid protobuf message ({excerpt(str(err))})"


@dataclass(frozen=True)
class Refused:
    """A request the decoder refused: what is known of it (its meta), and why."""

    req: fnv1.RunFunctionRequest
    reason: str


def decode_request(data: bytes) -> fnv1.RunFunctionRequest | Refused:
    """The gRPC server's request decoder: a refused request becomes a :class:`Refused`, not a failed call."""
    try:
        decoded: fnv1.RunFunctionRequest = fnv1.RunFunctionRequest.FromString(data)
    except DecodeError as err:
        req = fnv1.RunFunctionRequest()
        with contextlib.suppress(DecodeError):
            for number, payload in _fields(data):
                if number == 1:
                    req.meta.MergeFromString(payload)
        return Refused(req, undecodable(data, err))
    return decoded


# --------------------------------------------------------------------------- #
# Parts of a request serialized deterministically
# --------------------------------------------------------------------------- #


def _first(data: bytes, pos: int, end: int, number: int) -> tuple[int, int] | None:
    """The span of the first length-delimited field ``number`` (below 16: a one-byte tag) in ``data[pos:end]``."""
    wanted = number << 3 | _LENGTH
    while pos < end:
        if data[pos] != wanted:
            _, _, _, pos = _field_at(data, pos, end)
            continue
        length, start = _varint(data, pos + 1)
        if start + length > end:
            raise DecodeError("truncated field")
        return start, start + length
    return None


def _map_value(data: bytes, pos: int, end: int, key: bytes) -> tuple[int, int] | None:
    """The span of the ``Value`` under ``key`` in a serialized Struct's map entries (field 1: key 1, value 2).

    The serializer writes an entry's key first (upb, deterministic or not; see
    function.wire): an entry under ``key`` starts with that key's field, whole.
    """
    name = b"\x0a" + varint(len(key)) + key  # the entry's key field (1)
    while pos < end:
        entry = _first(data, pos, end, 1)
        if entry is None:
            return None
        start, stop = entry
        if data.startswith(name, start, stop):
            return _first(data, start + len(name), stop, 2)
        pos = stop
    return None


def observed_map(data: bytes, *keys: str) -> bytes | None:
    """The observed composite's map at ``keys`` (``"spec"``; ``"status", "stack"``) as ``data``, a request
    serialized deterministically, holds it: the very bytes that map serialized alone deterministically
    gives (a field's payload is its message's own encoding). None where a step is not a map.

    Slicing costs a walk over a few fields; serializing the map again would cost its whole size.
    """
    span = _first(data, 0, len(data), 2)  # RunFunctionRequest.observed
    span = _first(data, *span, 1) if span is not None else None  # State.composite
    span = _first(data, *span, 1) if span is not None else None  # Resource.resource: the XR, a Struct
    for key in keys:  # each key's Value, holding a map (Value.struct_value)
        span = _map_value(data, *span, key.encode()) if span is not None else None
        span = _first(data, *span, 5) if span is not None else None
    return data[span[0] : span[1]] if span is not None else None
