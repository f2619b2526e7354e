"""``registry.strict``: an allow-list of registries for every image and chart.

With strict on (a document's ``registry.strict``, or the function Input's
``spec.registry``), each policy in force names the registries it allows: its
``allowedRegistries``, else the targets of its own document's rules. Every
policy must hold:

* no rule of any document may map a source onto itself or to a registry a
  policy does not allow;
* every reference the layer knows the position of (declared image value paths,
  written out even where a chart default or a controller built-in applies; pod
  containers in manifests; driver resources; chart repositories) must be in
  allowed registries, and one whose registry is not known here fails too;
* every string of the output is searched for references nobody declared: one
  naming a registry the stack, a rule or a well-known public registry uses,
  and anything shaped like ``host/path:tag`` or held under an image-ish key
  (``image``, ``repository``, ``registry``) on any host at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any

from function.cache import MIB, BoundedCache
from function.errors import InputError
from function.paths import get_path
from function.stack import ImageRef, Stack

from .images import REFERENCE, ImageSeen, image_name, is_host, pod_containers, qualify, split_reference
from .registry import CATCH_ALL, Mirrors, Policy, Rule, bare, under

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

# Keys whose string values are image references or registries wherever they sit.
IMAGE_KEYS = ("image", "repository", "registry")
# What separates references inside a longer string (flags, embedded YAML/JSON).
_TOKEN = re.compile(r"[^\s\"'=,;()\[\]{}<>]+")
# A message lists this many findings, then counts the rest: Crossplane stores it in the XR's events.
SHOWN = 40


def _host(ref: str) -> str:
    return bare(ref).split("/", 1)[0].lower()


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
        hosts.update(_image_hosts(c.values if c.is_release else c.manifest, c.images))
        for container, _path, _pod in pod_containers(c.manifest):
            hosts.add(_host(qualify(split_reference(container["image"])[0])))
    hosts.update(_image_hosts(stack.driver.resource, stack.driver.images))
    return frozenset(h for h in hosts if h)


def _strings(
    node: Any, path: str, key: str = "", out: list[tuple[str, str, str]] | None = None
) -> list[tuple[str, str, str]]:
    """(path, nearest map key, text) of every string in a body that could name a registry, in document order.

    A reference counts only when its first segment is a host (``is_host``: a
    dot, a colon or localhost), so a string with none of them holds none: most
    strings of a body are passed over without tokenizing them. Collected into
    one list (not yielded through every level) and paths made only for what is
    kept or descended into: this walk covers every string of every rebuilt body.
    """
    found: list[tuple[str, str, str]] = [] if out is None else out
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, value in items:
        if isinstance(value, str):
            if _may_hold_a_host(value):
                found.append((_child(path, node, k), str(k) if isinstance(node, dict) else key, value))
        elif isinstance(value, dict | list):  # numbers, booleans and null hold no reference
            _strings(value, _child(path, node, k), str(k) if isinstance(node, dict) else key, found)
    return found


def _may_hold_a_host(text: str) -> bool:
    return "." in text or ":" in text or "localhost" in text.lower()


def _any_refused(
    node: dict[str, Any] | list[Any],
    key: str,
    hosts: frozenset[str],
    allowed: tuple[tuple[str, ...], ...],
    mirrors: Mirrors,
) -> bool:
    """Whether a string of ``node`` holds a reference the policies refuse: what ``_strings`` walks, without paths.

    Most bodies hold none, and making the path of every string costs most of the walk.
    """
    mapping = isinstance(node, dict)
    for k, value in node.items() if isinstance(node, dict) else enumerate(node):
        if isinstance(value, str):
            if _may_hold_a_host(value) and _refused(str(k) if mapping else key, value, hosts, allowed, mirrors):
                return True
        elif isinstance(value, dict | list) and _any_refused(
            value, str(k) if mapping else key, hosts, allowed, mirrors
        ):
            return True
    return False


def _child(path: str, node: dict[str, Any] | list[Any], k: Any) -> str:
    if isinstance(node, dict):
        return f"{path}.{k}" if path else str(k)
    return f"{path}[{k}]"


def _references(key: str, text: str, hosts: frozenset[str]) -> Iterator[str]:
    """The registry references in one string of the output, as written."""
    imageish = any(word in key.lower() for word in IMAGE_KEYS)
    for token in _TOKEN.findall(text):
        name = bare(token)
        first = name.split("/", 1)[0].lower()
        if not is_host(first):
            continue
        if first in hosts:
            yield token
        elif "://" in token:
            continue  # a URL on an unknown host is not an image (chart repositories are checked apart)
        elif imageish or (REFERENCE.match(name) and "/" in name and split_reference(name)[1]):
            yield token


def _image_ref(found: ImageSeen) -> str:
    assert found.ref
    return found.ref if found.prefix else qualify(split_reference(found.ref)[0])


def _rule_text(kind: str, rule: Rule) -> str:
    return f"registry.{kind} rule {{from: {rule.source}, to: {rule.to}}}"


def _outside(policies: Iterable[Policy], ref: str) -> Policy | None:
    return next((p for p in policies if not p.allows(ref)), None)


def _bounded(items: list[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; ... and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _check_rules(mirrors: Mirrors, where: dict[str, str], in_use: list[tuple[str, str]]) -> None:
    """Every rule of every document, as written, against every policy."""
    problems: list[str] = []
    for kind, rule in mirrors.written_rules:
        at = f"{where.get(rule.document, rule.document)}: {_rule_text(kind, rule)}"
        if rule.source != CATCH_ALL and under(bare(rule.to), bare(rule.source)):
            problems.append(f"{at} maps {rule.source} onto itself, so its references stay where they are")
            continue
        policy = _outside(mirrors.policies, rule.to)
        if policy is not None:
            refs = sorted({f"{component}: {ref}" for component, ref in in_use if under(bare(ref), bare(rule.to))})
            problems.append(
                f"{at} maps to {bare(rule.to)}, outside the registries {policy.by} allows "
                f"({', '.join(policy.allowed)}); references it sends there: "
                + (", ".join(refs[:SHOWN]) if refs else "none in this stack yet")
            )
    if problems:
        raise InputError(f"registry.strict (set by {', '.join(mirrors.strict_by)}): " + _bounded(problems))


# Scans by what decides them: the component the body was made from (the
# entry holds it, so its id stays its own), the hosts, the policies and what
# was already reported for it. Components are immutable, and a plan computed
# for a changed document shares every component it does not change with the
# last plan (the same objects: generated, or built once per layers and
# mirrors), so those are not scanned again; a scan costs far more than a lookup.
_SCANS: BoundedCache[
    tuple[int, frozenset[str], tuple[tuple[str, ...], ...], frozenset[str]], tuple[object, tuple[tuple[str, str], ...]]
] = BoundedCache("strict scans", max_entries=4096, max_bytes=4 * MIB)


# The references each (nearest key, string) holds that the policies refuse,
# by what decides them: the hosts and each policy's allowed registries. A
# rebuilt body is mostly the strings of the generated one (and of the last
# plan), so few strings are tokenized again.
_REFUSED: BoundedCache[tuple[str, str, frozenset[str], tuple[tuple[str, ...], ...]], tuple[str, ...]] = BoundedCache(
    "strict string scans", max_entries=65536, max_bytes=8 * MIB
)


def _refused(
    field: str, text: str, hosts: frozenset[str], allowed: tuple[tuple[str, ...], ...], mirrors: Mirrors
) -> tuple[str, ...]:
    key = (field, text, hosts, allowed)
    hit = _REFUSED.get(key)
    if hit is None:
        refused = tuple(ref for ref in _references(field, text, hosts) if not mirrors.allowed(ref))
        hit = _REFUSED.put(key, refused, 64 + len(field) + len(text) + sum(map(len, refused)))
    return hit


def _scan(
    body: dict[str, Any], owner: object, hosts: frozenset[str], mirrors: Mirrors, already: frozenset[str]
) -> tuple[tuple[str, str], ...]:
    """(where, reference) of each reference in ``body`` the policies refuse and ``already`` does not cover."""
    key = (id(owner), hosts, tuple(p.allowed for p in mirrors.policies), already)
    hit = _SCANS.get(key)
    if hit is not None and hit[0] is owner:
        return hit[1]
    if not _any_refused(body, "", hosts, key[2], mirrors):
        return _SCANS.put(key, (owner, ()), 256)[1]
    reported, out = set(already), []
    for path, field, text in _strings(body, ""):
        for ref in _refused(field, text, hosts, key[2], mirrors):
            if any(ref in r or r in ref for r in reported):
                continue  # already listed as the reference it is part of
            out.append((path, ref))
            reported.add(ref)
    return _SCANS.put(key, (owner, tuple(out)), 256 + sum(len(a) + len(b) for a, b in out))[1]


def enforce(
    stack: Stack,
    mirrors: Mirrors,
    bodies: Iterable[tuple[str, dict[str, Any], object]],
    known: Iterable[ImageSeen],
    where: dict[str, str],
    documents: int,
) -> None:
    """Raise a Fatal naming every rule and reference a strict policy refuses.

    ``bodies`` are (component key, body, the immutable object it was made from): scans are kept by it.
    """
    bodies = list(bodies)
    in_use: list[tuple[str, str]] = [(f.component, f.ref) for f in known if f.ref]
    for key, body, _ in bodies:
        repository = get_path(body, "spec.forProvider.chart.repository")
        if isinstance(repository, str):
            in_use.append((key, repository))
    _check_rules(mirrors, where, in_use)

    out: dict[str, None] = {}
    rejected: list[str] = []
    reported: dict[str, set[str]] = {}

    def refuse(component: str, at: str, ref: str) -> None:
        out[f"{component} {at}: {ref if len(ref) <= 200 else ref[:200] + '...'}"] = None
        rejected.append(ref)
        reported.setdefault(component, set()).add(ref)

    for found in known:
        if found.ref is None:
            out[f"{found.component} {found.where}: no value and no recorded default, so its registry is unknown"] = None
        elif found.ref and not mirrors.allowed(_image_ref(found)):
            refuse(found.component, found.where, found.ref)
    sources = {_host(r.to) for _kind, r in mirrors.written_rules} | {
        _host(r.source) for _kind, r in mirrors.written_rules if r.source != CATCH_ALL
    }
    hosts = stack_hosts(stack) | frozenset(sources)
    for key, body, owner in bodies:
        repository = get_path(body, "spec.forProvider.chart.repository")
        if isinstance(repository, str) and not mirrors.allowed(repository):
            refuse(key, "chart", repository)
        for path, ref in _scan(body, owner, hosts, mirrors, frozenset(reported.get(key, ()))):
            refuse(key, path, ref)
    if out:
        head = next((p for p in mirrors.policies if any(not p.allows(r) for r in rejected)), mirrors.policies[0])
        lead = "no override document applies to this ServingStack; " if documents == 0 else ""
        allow = "; ".join(f"{p.by}: {', '.join(p.allowed) or 'none'}" for p in mirrors.policies)
        raise InputError(
            f"{head.where}.strict: {lead}{len(out)} image or chart references are outside the allowed registries "
            f'({allow}); mirror them with registry rules into those registries (or a "*" catch-all): '
            + _bounded(sorted(out))
        )
