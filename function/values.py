"""Helm values merging."""

from __future__ import annotations

from typing import Any

from function.tree import copy_tree


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's rule: maps merge, everything else (lists included) replaces.

    An explicit ``None`` is kept rather than dropped: passed to Helm it deletes
    the chart's own default for that key, which is what the author asked for.
    Neither input is modified.
    """
    merged = dict(base)
    for key, value in over.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy_tree(value)
    return merged


def drop_nulls(node: Any) -> Any:
    """``node`` without the map keys whose value is ``None``, at any depth."""
    if isinstance(node, dict):
        return {k: drop_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [drop_nulls(v) for v in node]
    return node
