"""The generated modules' text: shared component blocks, one module per stack, the index.

Each distinct component is written once, in ``components.py``; a stack module lists
the blocks it takes by name. A chart bump then changes one block, and each header
digests only what its own module states, so it moves only when that changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from function.__version__ import __version__
from generator import lock

COMPONENTS_MODULE = "components"
# A reader looks for what a block is first, then where it comes from, then what it installs.
FIELD_ORDER = (
    "key",
    "kind",
    "origin",
    "chart",
    "releaseName",
    "namespace",
    "dependsOn",
    "finalizedByDependencies",
    "readiness",
    "xrFields",
    "manifest",
    "values",
    "images",
    "replicas",
    "resources",
    "podDisruptionBudgets",
    "imagePullSecrets",
    "imagePullSecretNames",
    "imagePullSecretName",
    "imagePullSecretRef",
)


@dataclass(frozen=True)
class Block:
    """One distinct component, the stacks that take it, and the why-comments of its sources."""

    name: str
    data: dict[str, Any]
    stacks: tuple[str, ...]
    comments: tuple[str, ...]


@dataclass(frozen=True)
class StackModule:
    """One stack: its own fields, and per component the block it takes and the stack file's comments."""

    stack: dict[str, Any]
    refs: tuple[tuple[str, tuple[str, ...]], ...]
    comments: tuple[str, ...]


def readable(component: dict[str, Any]) -> dict[str, Any]:
    """The component with its fields in reading order and empty ones left out (the runtime defaults them)."""
    unknown = set(component) - set(FIELD_ORDER)
    if unknown:
        raise ValueError(f"component {component['key']}: no reading order for {sorted(unknown)}")
    return {f: component[f] for f in FIELD_ORDER if f in component and component[f] not in ("", [], {}, False)}


def digest(value: Any) -> str:
    """sha256 over the canonical JSON of what a module states, with the generator version."""
    text = json.dumps([__version__, value], sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def python_literal(value: Any, indent: int = 0, ordered: bool = False) -> str:
    """A Python literal, one item per line and 4-space indents: diffs stay line-by-line readable.

    Mappings are sorted by key unless ``ordered`` (the top level of a block keeps its reading order).
    """
    pad, inner = " " * indent, " " * (indent + 4)
    if isinstance(value, dict) and value:
        pairs = value.items() if ordered else sorted(value.items())
        items = [f"{inner}{k!r}: {python_literal(v, indent + 4)}," for k, v in pairs]
        return "{\n" + "\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        items = [f"{inner}{python_literal(v, indent + 4)}," for v in value]
        return "[\n" + "\n".join(items) + f"\n{pad}]"
    return repr(value)


def _comment(lines: Iterable[str], pad: str = "") -> str:
    return "".join(f"{pad}#{' ' + line if line else ''}\n" for line in lines)


def _shared(variants: list[Any]) -> Any:
    """What every variant holds alike: maps recurse, anything else is kept only where all are equal."""
    if all(isinstance(v, dict) for v in variants):
        keys = [k for k in variants[0] if all(k in v for v in variants[1:])]
        common = {k: _shared([v[k] for v in variants]) for k in keys}
        return {k: v for k, v in common.items() if v is not _DIFFERS}
    return variants[0] if all(v == variants[0] for v in variants[1:]) else _DIFFERS


_DIFFERS = object()  # marks a leaf the variants disagree on


def _delta(variant: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    """The overlay that Helm's merge rule (function.values.deep_merge) lays on ``shared`` to give ``variant``."""
    out: dict[str, Any] = {}
    for key, value in variant.items():
        if key not in shared:
            out[key] = value
        elif isinstance(value, dict) and isinstance(shared[key], dict) and (inner := _delta(value, shared[key])):
            out[key] = inner
    return out


def _block(name: str, target: str, comments: Iterable[str], literal: str) -> str:
    return (
        "\n"
        + _comment([f"--- {name}: {c}" if i == 0 else c for i, c in enumerate(comments)])
        + f"{target} = {literal}\n"
    )


def components_text(blocks: list[Block]) -> str:
    by_key: dict[str, list[Block]] = {}
    for b in blocks:
        by_key.setdefault(b.data["key"], []).append(b)
    body = ""
    for key, group in sorted(by_key.items()):
        if len(group) == 1:
            b = group[0]
            body += _block(
                b.name,
                f"COMPONENTS[{b.name!r}]",
                [f"taken by {', '.join(b.stacks)}", *b.comments],
                python_literal(b.data, ordered=True),
            )
            continue
        shared = _shared([b.data for b in group])
        body += _block(
            key,
            f"SHARED[{key!r}]",
            ["what every variant below shares", *group[0].comments],
            python_literal(shared, ordered=True),
        )
        for b in group:
            overlay = python_literal(_delta(b.data, shared))
            body += _block(
                b.name,
                f"COMPONENTS[{b.name!r}]",
                [f"taken by {', '.join(b.stacks)}"],
                f"deep_merge(SHARED[{key!r}], {overlay})",
            )
    return (
        '"""Every distinct generated component, once; the stack modules take them by name.\n\n'
        "Generated by `python -m generator`; do not edit. Change stacks/ or facts/ (`./dev refresh`) and regenerate.\n"
        "A name is the component key, or <key>@<first stack taking it> where stacks take different variants:\n"
        "then SHARED[<key>] holds what the variants share and each variant is a values-file-like overlay on it,\n"
        "merged by Helm's rule (maps merge, everything else replaces).\n"
        f"Inputs: {digest([(b.name, b.data) for b in blocks])}\n"
        '"""\n\n'
        "from typing import Any\n\n"
        "from function.values import deep_merge\n\n"
        "SHARED: dict[str, dict[str, Any]] = {}\n"
        "COMPONENTS: dict[str, dict[str, Any]] = {}\n" + body
    )


def module_text(module: StackModule) -> str:
    stack = module.stack
    aicr_info = stack["provenance"]["aicr"]
    query = ", ".join(f"{k}={v}" for k, v in aicr_info["query"].items() if v != "any")
    own = {k: stack[k] for k in ("id", "cloud", "accelerator", "provenance", "driver")}
    head = python_literal(own, ordered=True)[: -len("\n}")]
    refs = "".join(_comment(why, " " * 8) + f"        C[{name!r}],\n" for name, why in module.refs)
    return (
        f'"""Serving stack {stack["id"]}: {stack["cloud"]} / {stack["accelerator"]}.\n\n'
        "Generated by `python -m generator`; do not edit. Change stacks/ or facts/ (`./dev refresh`) and regenerate.\n"
        f"AICR {aicr_info['version']} ({aicr_info['commit']}), query: {query}\n"
        f"Inputs: {digest([own, [name for name, _ in module.refs]])} (components: see {COMPONENTS_MODULE}.py)\n"
        '"""\n\n'
        "from typing import Any\n\n"
        f"from function.generated.{COMPONENTS_MODULE} import COMPONENTS as C\n\n"
        + _comment(module.comments)
        + f"STACK: dict[str, Any] = {head}\n"
        "    'components': [\n" + refs + "    ],\n}\n"
    )


def index_text(pairs: list[tuple[str, str]], locked: lock.Lock) -> str:
    return (
        '"""Generated stacks: every (cloud, accelerator) pair that has a module here.\n\n'
        'Generated by `python -m generator`; do not edit."""\n\n'
        f"STACKS: tuple[tuple[str, str], ...] = {tuple(sorted(pairs))!r}\n\n"
        "# What every stack here was generated by and from (`function --version` prints it).\n"
        f"GENERATOR: str = {__version__!r}\n"
        f"AICR_VERSION: str = {locked.aicr.version!r}\n"
        f"AICR_COMMIT: str = {locked.aicr.commit!r}\n"
    )


def name_blocks(taken: dict[str, list[tuple[str, dict[str, Any]]]]) -> dict[tuple[str, str], str]:
    """(stack id, component key) → block name: the key alone, or key@<first stack> when variants differ."""
    names: dict[tuple[str, str], str] = {}
    for key, uses in taken.items():
        variants: dict[str, list[str]] = {}
        for stack_id, data in uses:
            variants.setdefault(json.dumps(data, sort_keys=True), []).append(stack_id)
        for stacks in variants.values():
            name = key if len(variants) == 1 else f"{key}@{min(stacks)}"
            names.update({(s, key): name for s in stacks})
    return names
