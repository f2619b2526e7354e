"""``registry.strict``: find every image or chart reference still pointing upstream.

Two nets, so a reference is caught whether or not the stack declared where it is:

* every reference the layer knows the position of (declared image value paths,
  pod containers in manifests, driver resources, chart repositories) must be
  under a mirror;
* every string of the output is searched for the host of a registry the stack
  pulls from (or a rule names as a source, or a well-known public registry).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any

from function.paths import get_path
from function.stack import ImageRef, Stack

from .images import Found, image_name, pod_containers, qualify, split_reference
from .registry import CATCH_ALL, Mirrors

# Public registries a chart default may point at even where the stack data
# does not mention them (chart defaults are not all in the stack).
WELL_KNOWN_HOSTS = (
    "docker.io",
    "index.docker.io",
    "registry-1.docker.io",
    "quay.io",
    "ghcr.io",
    "gcr.io",
    "k8s.gcr.io",
    "registry.k8s.io",
    "nvcr.io",
    "public.ecr.aws",
    "mcr.microsoft.com",
    "registry.gitlab.com",
)


def _host(ref: str) -> str:
    ref = ref.split("://", 1)[-1]
    return ref.split("/", 1)[0].lower()


def _image_hosts(values: dict[str, Any], images: Iterable[ImageRef]) -> Iterator[str]:
    for img in images:
        named = image_name(values, img)
        if named is not None and named[0]:
            yield _host(qualify(named[0]))


@cache
def stack_hosts(stack: Stack) -> frozenset[str]:
    """Every registry and chart repository host the generated stack pulls from."""
    hosts = set(WELL_KNOWN_HOSTS)
    for c in stack.components:
        if c.chart is not None:
            hosts.add(_host(c.chart.repository))
        hosts.update(_image_hosts(c.values, c.images))
        for container, _path, _pod in pod_containers(c.manifest):
            hosts.add(_host(qualify(split_reference(container["image"])[0])))
    hosts.update(_image_hosts(stack.driver.resource, stack.driver.images))
    return frozenset(h for h in hosts if h)


def _pattern(hosts: Iterable[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(h) for h in sorted(hosts, key=lambda h: (-len(h), h)))
    # A host starts a string, follows a scheme's "//", or follows a character
    # that cannot be part of a reference; a host inside a mirror path
    # (mirror.example.com/quay.io/...) follows a single "/" and is not upstream.
    return re.compile(rf"(?:(?<=://)|(?<![\w./:@-]))(?:{alternatives})(?![\w.-])", re.IGNORECASE)


def _strings(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _strings(item, f"{path}[{i}]")


def findings(
    stack: Stack,
    mirrors: Mirrors,
    bodies: Iterable[tuple[str, dict[str, Any]]],
    known: Iterable[Found],
) -> tuple[list[str], list[str]]:
    """What still points upstream, and what is not known here; ``<component> <where>: <ref>`` lines, sorted."""
    sources = {_host(r.source) for r in (*mirrors.images.rules, *mirrors.charts.rules) if r.source != CATCH_ALL}
    pattern = _pattern(stack_hosts(stack) | sources)
    out: set[str] = set()
    unknown: set[str] = set()
    reported: dict[str, list[str]] = {}
    for found in known:
        if found.ref is None:
            unknown.add(f"{found.component} {found.where}")
        elif found.ref and not mirrors.images.mirrored(split_reference(found.ref)[0]):
            out.add(f"{found.component} {found.where}: {found.ref}")
            reported.setdefault(found.component, []).append(found.ref)
    for key, body in bodies:
        repository = get_path(body, "spec.forProvider.chart.repository")
        if isinstance(repository, str) and not mirrors.charts.mirrored(repository.rstrip("/")):
            out.add(f"{key} chart: {repository}")
            reported.setdefault(key, []).append(repository)
        for path, text in _strings(body, ""):
            if not pattern.search(text) or any(text in ref for ref in reported.get(key, ())):
                continue  # already listed as the reference it is part of
            out.add(f"{key} {path}: {text if len(text) <= 200 else text[:200] + '...'}")
    return sorted(out), sorted(unknown)
