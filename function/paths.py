"""Dot paths into nested maps (Helm's ``a.b.c`` notation).

A part ``key[field=value]`` steps into the element of the list at ``key``
whose ``field`` is ``value``: a chart that takes an image from an env list
(Grove's ``deployment.env[name=GROVE_INIT_CONTAINER_IMAGE].value``). A write
where there is none appends ``{field: value}`` to the list (made if missing),
as setting an env var by name would; the list's other elements stay.
"""

from __future__ import annotations

from typing import Any, NamedTuple


def get_path(data: Any, path: str, default: Any = None) -> Any:
    node = data
    for part in path.split("."):
        if "[" in part:
            node = element(node, part)
            if node is None:
                return default
        elif not isinstance(node, dict) or part not in node:
            return default
        else:
            node = node[part]
    return node


def selector(part: str) -> tuple[str, str, str]:
    """A ``key[field=value]`` part's key, field and value."""
    key, _, selector = part.partition("[")
    field, _, value = selector.removesuffix("]").partition("=")
    return key, field, value


def element(node: Any, part: str) -> dict[str, Any] | None:
    """The list element a ``key[field=value]`` part names in ``node``; None where there is none."""
    key, field, value = selector(part)
    items = node.get(key) if isinstance(node, dict) else None
    if not isinstance(items, list):
        return None
    return next((i for i in items if isinstance(i, dict) and i.get(field) == value), None)


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at ``path``, creating (or replacing non-map) intermediates."""
    node, key = holder(data, path)
    node[key] = value


def holder(data: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The map ``path``'s last key is set in, made as :func:`set_path` makes it, and that key.

    ``holder[key]`` then reads what :func:`get_path` reads (None when absent),
    for a read-then-write without a second walk.
    """
    parts = path.split(".")
    key = parts.pop()  # (a third faster than unpacking with a star)
    return opened(data, parts), key


class Target(NamedTuple):
    """A dot path split once, for the writes that go there again and again (a rebuild's image paths)."""

    path: str
    parents: tuple[str, ...]  # the keys of the maps on the way
    key: str  # the last key


def target(path: str) -> Target:
    *parents, key = path.split(".")
    return Target(path, tuple(parents), key)


def opened(data: dict[str, Any], parents: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The map at ``parents`` (a :class:`Target`'s), each missing (or not a map) on the way made an empty map,
    as :func:`set_path` makes them: ``opened(data, parents)[key] = value`` sets the value there."""
    node = data
    for part in parents:
        if "[" in part:
            found = element(node, part)
            if found is None:
                key, field, value = selector(part)
                items = node.get(key)
                if not isinstance(items, list):
                    items = node[key] = []
                found = {field: value}
                items.append(found)
            node = found
        else:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
    return node
