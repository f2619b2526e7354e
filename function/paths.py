"""Dot paths into nested maps (Helm's ``a.b.c`` notation)."""

from __future__ import annotations

from typing import Any


def get_path(data: Any, path: str, default: Any = None) -> Any:
    node = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at ``path``, creating (or replacing non-map) intermediates."""
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
