"""Reading a Struct into plain data (function.inputs.plain/plain_value) gives exactly what the
straightforward reading gives: the same data in the same key order, or the same Fatal text.

The reference below is the conversion as it was before it was made faster (one call per value,
its kind dispatched there): the fast one reads each value's kind once and handles strings and
maps inline. Values are generated with what only a protobuf message can hold (NaN, ±Infinity,
a value with no kind set, -0.0) and nested past the depth limit.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import struct_pb2
from hypothesis import given
from hypothesis import strategies as st

from function.errors import InputError
from function.inputs import MAX_DEPTH, _BadValueError, _error, plain, plain_value

_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels of maps and lists"


def _reference_struct(struct: struct_pb2.Struct, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise _BadValueError(_TOO_DEEP)
    out = {}
    for key in sorted(struct.fields):
        try:
            out[key] = _reference_value(struct.fields[key], depth)
        except _BadValueError as bad:
            bad.path.append(key)
            raise
    return out


def _reference_value(value: struct_pb2.Value, depth: int) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return _reference_struct(value.struct_value, depth + 1)
    if kind == "number_value":
        if not math.isfinite(value.number_value):
            raise _BadValueError(f"{value.number_value} is not a number JSON or Kubernetes can hold")
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        if depth + 1 > MAX_DEPTH:
            raise _BadValueError(_TOO_DEEP)
        out = []
        for i, item in enumerate(value.list_value.values):
            try:
                out.append(_reference_value(item, depth + 1))
            except _BadValueError as bad:
                bad.path.append(f"[{i}]")
                raise
        return out
    return None  # null_value, or no kind set


UNSET = object()  # a Value with no kind set: what a decoded message may carry, never plain data
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),  # NaN and ±Infinity included: refused wherever they are
    st.integers(-(2**53), 2**53).map(float),
    st.sampled_from([-0.0, 0.0]),
    st.text(max_size=8),
    st.just(UNSET),
)
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=25,
)


def _deep(tree: Any, levels: list[bool]) -> Any:
    """``tree`` inside a chain of maps (True) and lists (False), outermost first."""
    for is_map in reversed(levels):
        tree = {"k": tree} if is_map else [tree]
    return tree


DEEP_TREES = st.builds(_deep, TREES, st.lists(st.booleans(), max_size=MAX_DEPTH + 4))


def _set(target: struct_pb2.Value, node: Any) -> None:
    if node is UNSET:
        return
    if isinstance(node, str):
        target.string_value = node
    elif isinstance(node, bool):
        target.bool_value = node
    elif isinstance(node, float):
        target.number_value = node
    elif node is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(node, dict):
        target.struct_value.SetInParent()
        for key, item in node.items():
            _set(target.struct_value.fields[key], item)
    else:
        target.list_value.SetInParent()
        for item in node:
            _set(target.list_value.values.add(), item)


def _value_of(tree: Any) -> struct_pb2.Value:
    value = struct_pb2.Value()
    _set(value, tree)
    return value


def _read(convert: Any, *args: Any) -> tuple[str, str]:
    """The data read, as its repr (key order and -0.0 included), or the Fatal's text."""
    try:
        return "data", repr(convert(*args))
    except InputError as err:
        return "fatal", str(err)


def _reference_plain_value(value: struct_pb2.Value, obj: str, path: str, depth: int) -> Any:
    try:
        return _reference_value(value, depth)
    except _BadValueError as bad:
        raise _error(obj, path, bad) from None


def _reference_plain(struct: struct_pb2.Struct, obj: str, path: str, depth: int) -> Any:
    try:
        return _reference_struct(struct, depth)
    except _BadValueError as bad:
        raise _error(obj, path, bad) from None


@given(DEEP_TREES, st.integers(1, 3))
def test_a_value_reads_as_the_reference_reads_it(tree: Any, depth: int) -> None:
    value = _value_of(tree)
    expected = _read(_reference_plain_value, value, "EnvironmentConfig x", "data.servingStack", depth)
    assert _read(plain_value, value, "EnvironmentConfig x", "data.servingStack", depth) == expected


@given(st.dictionaries(st.text(max_size=5), DEEP_TREES, max_size=4), st.integers(1, 3))
def test_a_struct_reads_as_the_reference_reads_it(tree: dict[str, Any], depth: int) -> None:
    struct = _value_of(tree).struct_value
    assert _read(plain, struct, "the function Input", "spec", depth) == _read(
        _reference_plain, struct, "the function Input", "spec", depth
    )


def test_the_generated_values_reach_every_outcome() -> None:
    """The properties above are not vacuous: a deep chain, a NaN in a list, and good data all occur."""
    deep = _read(plain_value, _value_of(_deep("x", [True, False] * (MAX_DEPTH // 2 + 1))), "o", "p", 1)
    assert deep[0] == "fatal" and deep[1].endswith(_TOO_DEEP)
    nan = _read(plain_value, _value_of({"a": [1.0, {"b": [float("nan")]}]}), "o", "p", 1)
    assert nan == ("fatal", "o: p.a[1].b[0]: nan is not a number JSON or Kubernetes can hold")
    good = _read(plain_value, _value_of({"b": [UNSET, -0.0, True], "a": {}}), "o", "p", 1)
    assert good == ("data", "{'a': {}, 'b': [None, -0.0, True]}")
