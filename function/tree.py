"""Plain JSON-like trees (dicts, lists, strings, numbers, booleans, None): copied and converted.

``copy_tree`` runs on the cold path (a plan computed for new documents) over every value of a
stack, where ``copy.deepcopy`` is general and several times slower. ``to_struct`` builds the
requests of ``function render`` and is what the encoder's bytes are tested against
(function.encode), apart from it.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2

from function.paths import element, selector


def copy_tree(node: Any) -> Any:
    """A deep copy of a plain tree (its strings, numbers and None are immutable and shared)."""
    if isinstance(node, dict):
        return {key: copy_tree(value) for key, value in node.items()}
    if isinstance(node, list):
        return [copy_tree(item) for item in node]
    return node


def holders(paths: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    """The maps holding each dot path, as key sequences, each once (several paths often end in the same one)."""
    parents = dict.fromkeys(path.rpartition(".")[0] for path in paths if "." in path)
    return tuple(tuple(parent.split(".")) for parent in parents)


def copy_maps(tree: dict[str, Any], maps: Iterable[Sequence[str]]) -> dict[str, Any]:
    """``tree`` with a private copy of each of ``maps`` (key sequences: :func:`holders` of some dot paths)
    and of every map on the way to them, sharing the rest.

    What writes into the result only at those paths (creating or replacing
    what is below a copied map) leaves ``tree`` as it was: a rebuilt
    component copies the few maps its image and pull-secret paths go
    through, not its whole values, and what it did not change stays the
    very objects of the generated values.
    """
    root = dict(tree)
    copied = {id(root)}
    for parts in maps:
        node = root
        for part in parts:
            if "[" in part:  # a list element (function.paths): the list and the element copied
                key = selector(part)[0]
                if not isinstance(node.get(key), list):
                    break
                items = node[key] = [dict(i) if isinstance(i, dict) else i for i in node[key]]
                found = element(node, part)
                if found is None:
                    break
                copied.update(id(i) for i in items)
                node = found
            else:
                child = node.get(part)
                if not isinstance(child, dict):
                    break  # what is written below here is created fresh
                if id(child) not in copied:
                    child = node[part] = dict(child)
                    copied.add(id(child))
                node = child
    return root


def to_struct(tree: dict[str, Any]) -> struct_pb2.Struct:
    """``tree`` as a protobuf Struct, as ``json_format.ParseDict`` makes it."""
    out = struct_pb2.Struct()
    _fill(out, tree)
    return out


def _fill(target: struct_pb2.Struct, tree: dict[str, Any]) -> None:
    fields = target.fields
    for key, value in tree.items():
        _set(fields[key], value)


def _set(target: struct_pb2.Value, value: Any) -> None:
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, dict):
        struct = target.struct_value
        struct.SetInParent()  # an empty map is a map, not an unset value
        _fill(struct, value)
    elif isinstance(value, list | tuple):
        items = target.list_value
        items.SetInParent()
        add = items.values.add
        for item in value:
            _set(add(), item)
    elif isinstance(value, bool):  # before int: a bool is an int in Python
        target.bool_value = value
    elif isinstance(value, int | float):
        target.number_value = value
    elif value is None:
        target.null_value = struct_pb2.NULL_VALUE
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """``struct`` as a plain tree, whole numbers back to ints (the inverse of ``to_struct`` for what it makes)."""
    out: dict[str, Any] = whole_numbers(json_format.MessageToDict(struct))
    return out


def whole_numbers(node: Any) -> Any:
    """``node`` with every whole float an int, at any depth: a protobuf Struct stores every number as a double."""
    if isinstance(node, float):
        return int(node) if node.is_integer() else node  # nan and infinities are not whole
    if isinstance(node, dict):
        return {key: whole_numbers(value) for key, value in node.items()}
    if isinstance(node, list | tuple):
        return [whole_numbers(item) for item in node]
    return node


def to_jsonable(value: Any) -> Any:
    """A YAML-loaded value made JSON-shaped: string keys, timestamps as RFC 3339, bytes as base64."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dt.date):  # a datetime is a date too
        if isinstance(value, dt.datetime) and value.utcoffset() == dt.timedelta(0):
            return value.replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
