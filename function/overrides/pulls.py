"""What a ServingStack will pull once the override layer applied: every image and chart.

For the ``images`` command: a bank mirrors exactly this list. Each entry keeps
the reference the cluster pulls (after the mirror rules) and the one it came
from (before them), so a mirroring tool can copy one to the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from function.errors import InputError
from function.stack import Stack

from .apply import plan
from .document import Collected
from .images import qualify, split_reference
from .planned import MANAGED
from .registry import CATCH_ALL, Rule, bare

IMAGE = "image"
CHART = "chart"
REGISTRY = "registry"  # a registry prefix a chart puts before image names it picks (e.g. by node OS)


@dataclass(frozen=True)
class Pull:
    kind: str  # IMAGE, CHART or REGISTRY
    ref: str  # as the cluster pulls it; a chart: "<repository> <name> <version>"
    source: str  # before any mirror rule, in the same shape
    component: str
    moved_by: Rule | None = None  # the mirror rule that took it from source to ref


def pulls(stack: Stack, found: Collected) -> list[Pull]:
    """Every image, registry prefix and chart the stack's managed components pull."""
    result = plan(stack, found)
    out = []
    for f in result.images:
        if not f.ref:
            continue
        source = f.source or f.ref
        name = source if f.prefix else qualify(split_reference(source)[0])
        rule = None if source == f.ref else result.mirrors.images.match(name)
        # Unmoved, the reference as the kubelet resolves it (Docker Hub made explicit).
        out.append(Pull(REGISTRY if f.prefix else IMAGE, f.ref if rule else source, source, f.component, rule))
    # Each chart before any mirror rule: as generated, or as the document adding it gives it.
    upstream_charts = {c.key: c.chart for c in stack.components if c.chart is not None}
    upstream_charts.update((a.key, a.chart) for a in result.added if a.chart is not None)
    for p in result.planned:
        chart = p.component.chart
        if p.state != MANAGED or chart is None:
            continue
        upstream = upstream_charts.get(p.component.key, chart)
        tail = f"{chart.name} {chart.version}"
        out.append(Pull(CHART, f"{chart.repository} {tail}", f"{upstream.repository} {tail}", p.component.key))
    return out


def as_lines(items: Iterable[Pull]) -> str:
    """One line per distinct reference: ``image <ref>``, ``chart <repository> <name> <version>``, ``registry <x>``."""
    return "".join(f"{kind} {ref}\n" for kind, ref in sorted({(p.kind, p.ref) for p in items}))


def as_pairs(items: Iterable[Pull]) -> str:
    """``<kind> <source> <target>`` for every reference a mirror rule moved (what to copy where)."""
    moved = sorted({(p.kind, p.source, p.ref) for p in items if p.source != p.ref})
    return "".join(f"{kind} {source} -> {target}\n" for kind, source, target in moved)


def _destination(rule: Rule) -> str:
    # skopeo sync (unscoped) writes <dest>/<path after the source host>, which
    # is what a "*" or a host-only rule does; a rule from a deeper path drops
    # part of the path, which skopeo cannot.
    if rule.source != CATCH_ALL and "/" in bare(rule.source):
        raise InputError(
            f"rule {{from: {rule.source}, to: {rule.to}}} ({rule.document}) drops part of the image path, which "
            "skopeo sync cannot reproduce; use --format pairs"
        )
    return bare(rule.to)


def as_skopeo(items: Iterable[Pull]) -> str:
    """skopeo sync YAML (``--src yaml``): one document per destination, each naming its ``--dest``."""
    groups: dict[str, dict[str, dict[str, set[str]]]] = {}
    for p in items:
        if p.kind != IMAGE:
            continue
        name, suffix = split_reference(p.source)
        dest = _destination(p.moved_by) if p.moved_by is not None else ""
        host, _, path = qualify(name).partition("/")
        tags = groups.setdefault(dest, {}).setdefault(host, {}).setdefault(path, set())
        tag = suffix.lstrip(":").split("@", 1)
        if tag[0]:
            tags.add(tag[0])
        elif len(tag) > 1:
            tags.add(tag[1])  # a digest alone
    docs = []
    for dest in sorted(groups):
        head = (
            f"# skopeo sync --src yaml --dest docker <this file> {dest}\n"
            if dest
            else "# No registry rule moves these: the cluster pulls them from where they are.\n"
        )
        body: dict[str, Any] = {
            host: {"images": {path: sorted(tags) for path, tags in sorted(paths.items())}}
            for host, paths in sorted(groups[dest].items())
        }
        docs.append(head + yaml.safe_dump(body, sort_keys=False, default_flow_style=False))
    return "---\n".join(docs)
