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

import dataclasses
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import Any

from function.bodies import chart_block, component_body
from function.cache import BoundedCache
from function.errors import InputError
from function.stack import ChartRef, Component, ImageRef, Stack

from .images import HUB_HOSTS, REFERENCE, ImageSeen, image_name, is_host, pod_containers, qualify, split_reference
from .registry import CATCH_ALL, Mirrors, bare, under

# Public registries a chart default may point at even where the stack data
# does not mention them (chart defaults are not all in the stack).
WELL_KNOWN_HOSTS = (
    *HUB_HOSTS,
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


def _declared_hosts(c: Component) -> Iterator[str]:
    """The hosts of a component's chart repository and declared images."""
    if c.chart is not None:
        yield _host(c.chart.repository)
    yield from _image_hosts(_payload(c), c.images)


@cache
def stack_hosts(stack: Stack) -> frozenset[str]:
    """Every registry and chart repository host the generated stack pulls from."""
    hosts = set(WELL_KNOWN_HOSTS)
    for c in stack.components:
        hosts.update(_declared_hosts(c))
        for container, _path, _pod in pod_containers(c.manifest):
            hosts.add(_host(qualify(split_reference(container["image"])[0])))
    hosts.update(_image_hosts(stack.driver.resource, stack.driver.images))
    return frozenset(h for h in hosts if h)


def _added_hosts(stack: Stack, components: Iterable[Component]) -> frozenset[str]:
    """The hosts the components documents added pull from: a string naming one is searched for as one naming a
    host of the stack is."""
    own = stack_keys(stack)
    return frozenset(h for c in components if c.key not in own for h in _declared_hosts(c) if h)


@cache
def stack_keys(stack: Stack) -> frozenset[str]:
    """The keys of the generated stack's components."""
    return frozenset(c.key for c in stack.components)


def _strings(node: Any, path: str, key: str = "") -> Iterator[tuple[str, str, str]]:
    """(path, nearest map key, text) of every string in a body that could name a registry, in document order.

    What a Fatal lists: walked only for a body holding a refused reference.
    """
    is_map = isinstance(node, dict)
    for k, value in node.items() if is_map else enumerate(node):
        near, at = (str(k), f"{path}.{k}" if path else str(k)) if is_map else (key, f"{path}[{k}]")
        if isinstance(value, str):
            if _may_hold_a_host(value):
                yield at, near, value
        elif isinstance(value, (dict, list)):  # numbers, booleans and null hold no reference
            yield from _strings(value, at, near)


# One token of a string that could be a registry reference, whatever the
# policy: (the token as written, its first segment lowercased, whether it
# counts on any host: not a URL, and under an image-ish key or shaped like
# ``host/path:tag``; its first segment as written, which alone decides an
# allow-list of bare hosts). Any token counts on a host the stack or a rule names.
Held = tuple[str, str, bool, str]


# What ``_held`` found for a (nearest key, string) during one check: a string repeats across the bodies of a plan.
Memo = dict[tuple[str, str], tuple[Held, ...]]
# What ``_held_under`` finds under each generated map, by the map's id: (the map, what it holds).
Shared = dict[int, tuple[dict[str, Any], tuple[Held, ...]]]
# What ``_held_under`` found under each map and list one check met more than once, by the container's id: (the
# container, the nearest map key a list was walked under or None where no key changes it [a map's strings have their
# own keys; a container holding nothing holds nothing under any key], what it holds). A plan may put one container at
# many paths of many bodies (its pull-secret lists): walked twice, then taken from here. Met once: None (its id alone,
# which a later container may take: only an entry holding the container counts). An entry holds its container, so
# the id stays the container's while the check runs.
Seen = dict[int, tuple[Any, str | None, tuple[Held, ...]] | None]


def _held_under(
    node: dict[str, Any] | list[Any], key: str, out: list[Held], shared: Shared, memo: Memo, seen: Seen
) -> None:
    """What ``_held`` finds in each string ``_strings`` finds under ``node``, without paths: the walk every new body
    takes.

    A reference counts only when its first segment is a host (``is_host``: a
    dot, a colon or localhost), so a string with none of them holds none: most
    strings of a body are passed over without tokenizing them
    (``_may_hold_a_host``, inlined). A map found in ``shared`` is not walked
    again, nor a list ``seen`` holds (looked up before the call).
    """
    # Exact types first (nearly every node of a body); a subclass takes the same way through isinstance. A list's
    # items are taken under its nearest map key (``key``); a map's keys are strings but in odd input.
    for k, value in node.items() if isinstance(node, dict) else zip(repeat(key), node):
        kind = type(value)
        if kind is str or (kind is not dict and kind is not list and isinstance(value, str)):
            if "." in value or ":" in value or (("h" in value or "H" in value) and "localhost" in value.lower()):
                out.extend(_held(k if type(k) is str else str(k), value, memo))
        elif kind is dict or (kind is not list and isinstance(value, dict)):
            hit = shared.get(id(value))
            if hit is not None and hit[0] is value:
                out.extend(hit[1])
            else:
                _held_under(value, "", out, shared, memo, seen)
        elif kind is list or isinstance(value, list):  # numbers, booleans and null hold no reference
            i = id(value)
            if i not in seen:  # met for the first time
                seen[i] = None
                _held_under(value, k if type(k) is str else str(k), out, shared, memo, seen)
            else:
                _again(value, k if type(k) is str else str(k), out, shared, memo, seen)


def _again(node: list[Any], key: str, out: list[Held], shared: Shared, memo: Memo, seen: Seen) -> None:
    """What ``node``, met before in this check, holds: kept the second time, taken from ``seen`` after."""
    met = seen[id(node)]
    if met is not None and met[0] is node and (met[1] is None or met[1] == key):
        out.extend(met[2])
        return
    start = len(out)
    _held_under(node, key, out, shared, memo, seen)
    held = tuple(out[start:])
    seen[id(node)] = (node, key if held else None, held)


def _held_in(node: dict[str, Any], shared: Shared, memo: Memo, seen: Seen) -> list[Held]:
    """``_held_under`` a body or a payload, itself perhaps shared."""
    hit = shared.get(id(node))
    if hit is not None and hit[0] is node:
        return list(hit[1])
    out: list[Held] = []
    _held_under(node, "", out, shared, memo, seen)
    return out


def _maps(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
    if isinstance(node, dict | list):
        for value in node.values() if isinstance(node, dict) else node:
            yield from _maps(value)


@dataclass(frozen=True)
class _Generated:
    """What the check reads of a generated stack whatever the policy, made once (``prepare``)."""

    # What ``_held_under`` finds under each map of the components' values and
    # manifests. A rebuilt component shares every map its build did not write
    # with the generated one (``tree.copy_maps``), so its walk skips those.
    # Generated maps are never written and live as long as the process (held
    # here too), so their ids stay theirs.
    maps: Shared
    # What the rest of each component's body holds, but its chart (``_head``).
    heads: dict[tuple[Any, ...], tuple[Held, ...]]
    # What each component's body holds, by the component's id (the stack holds them: their ids stay theirs).
    bodies: dict[int, tuple[Component, Found]]


@cache  # one per generated stack
def _read_generated(stack: Stack) -> _Generated:
    """What each map, each body around its values or manifest, and each body of the generated stack holds."""
    found = _Generated({}, {}, {})
    memo: Memo = {}
    for component in stack.components:
        for node in _maps(_payload(component)):
            found.maps[id(node)] = (node, tuple(_held_in(node, {}, memo, {})))
        found.heads[_head_key(component)] = tuple(_rest(component, memo))
    for component in stack.components:
        found.bodies[id(component)] = (component, _walked(component, found, memo, {})[0])
    return found


def _payload(component: Component) -> dict[str, Any]:
    """A Release's values or an Object's manifest: nearly all of its body."""
    return component.values if component.is_release else component.manifest


def _may_hold_a_host(text: str) -> bool:
    # Only "h" and "H" lowercase to a text holding an "h": most strings without a dot or a colon skip lower().
    return "." in text or ":" in text or (("h" in text or "H" in text) and "localhost" in text.lower())


def _tokens(key: str, text: str) -> tuple[Held, ...]:
    lowered = key.lower()  # under an image-ish key (a key holding one of these) wherever it sits
    imageish = "image" in lowered or "repository" in lowered or "registry" in lowered
    out: list[Held] = []
    for token in _TOKEN.findall(text):
        name = bare(token)
        written = name.split("/", 1)[0]
        first = written.lower()
        if is_host(first):
            shaped = imageish or bool(REFERENCE.match(name) and "/" in name and split_reference(name)[1])
            out.append((token, first, shaped and "://" not in token, written))  # a URL on an unknown host is no image
    return tuple(out)


def _held(key: str, text: str, memo: Memo) -> tuple[Held, ...]:
    asked = (key, text)
    hit = memo.get(asked)
    if hit is None:
        hit = memo[asked] = _tokens(key, text)
    return hit


def _references(key: str, text: str, hosts: frozenset[str]) -> list[str]:
    """The registry references in one string of the output, as written."""
    return [token for token, host, shaped, _ in _held(key, text, {}) if shaped or host in hosts]


class _Allowed:
    """``mirrors.allowed`` asked once per reference, or per host where every allowed prefix is a bare host.

    (``registry.under`` holds a reference under a prefix without a slash
    exactly when its first segment is that prefix, so its host decides.)
    """

    def __init__(self, mirrors: Mirrors) -> None:
        self._mirrors = mirrors
        self.by_host = all("/" not in prefix for p in mirrors.policies for prefix in p.allowed)
        self._seen: dict[str, bool] = {}

    def __call__(self, ref: str) -> bool:
        return self.host(bare(ref).split("/", 1)[0]) if self.by_host else self.host(ref)

    def image(self, ref: str, prefix: bool) -> bool:
        """``self(_image_ref(ref, prefix))``: by its host alone where that decides and ``_image_host`` reads it."""
        if self.by_host and not prefix:
            host = _image_host(ref)
            if host is not None:
                return self.host(host)
        return self(_image_ref(ref, prefix))

    def host(self, key: str) -> bool:
        """The verdict on a reference's first segment (``by_host``), or on the reference itself."""
        hit = self._seen.get(key)
        if hit is None:
            hit = self._seen[key] = self._mirrors.allowed(key)
        return hit


@dataclass(frozen=True, slots=True)  # one kept per body: no instance dict
class _Candidates:
    """What one body holds that could be a reference, whatever the policy: each token once, with its first segment
    as written (all an allow-list of bare hosts decides by)."""

    anywhere: dict[str, str]  # counts on any host
    by_host: dict[str, dict[str, str]]  # the others, by host: they count where a host list names it

    def refused(self, hosts: frozenset[str], allowed: _Allowed) -> bool:
        pick = dict.values if allowed.by_host else dict.keys  # ``allowed.host`` asks a first segment or a token
        for token in pick(self.anywhere):
            if not allowed.host(token):
                return True
        for host in self.by_host.keys() & hosts:  # a CRD's strings name dozens of API groups
            for token in pick(self.by_host[host]):
                if not allowed.host(token):
                    return True
        return False


def _candidates(held: Sequence[Held]) -> tuple[_Candidates, int]:
    """What ``held`` holds, and its size in bytes, roughly, as a cache weighs it (each token and segment a string,
    in a dict)."""
    anywhere: dict[str, str] = {}
    by_host: dict[str, dict[str, str]] = {}
    chars = 0
    for token, host, shaped, written in held:
        chars += len(token)
        if shaped:
            anywhere[token] = written
        else:
            by_host.setdefault(host, {})[token] = written
    return _Candidates(anywhere, by_host), 256 * (len(by_host) + 2) + 192 * len(held) + 2 * chars


# What a body holds that could be a reference, as ``_refused`` asks it: its
# tokens as found where they are few (``FEW``), else sorted (``_candidates``).
Found = _Candidates | tuple[Held, ...]
# Up to this many tokens, asking each in every check that meets the body costs
# less than sorting them once: a rebuilt body holds ~10, a CRD's hundreds.
FEW = 32


def _found(held: list[Held]) -> tuple[Found, int]:
    """What ``held`` holds, and its size in bytes, roughly, as a cache weighs it."""
    if len(held) > FEW:
        return _candidates(held)
    return tuple(held), 96 + 192 * len(held) + 3 * sum([len(token) for token, _, _, _ in held])


def _refused(found: Found, hosts: frozenset[str], allowed: _Allowed) -> bool:
    """Whether a policy refuses a reference of a body: one counting anywhere, or on one of ``hosts``."""
    if not isinstance(found, tuple):
        return found.refused(hosts, allowed)
    by_host = allowed.by_host
    for token, host, shaped, written in found:  # a loop: any() would make a generator
        if (shaped or host in hosts) and not allowed.host(written if by_host else token):
            return True
    return False


def _image_ref(ref: str, prefix: bool) -> str:
    """An image reference as policies ask it: a registry prefix as written, an image's name qualified."""
    return ref if prefix else qualify(split_reference(ref)[0])


def _image_host(ref: str) -> str | None:
    """The first segment of ``_image_ref`` of an image ``ref`` written ``host/path[:tag][@digest]`` (its host as
    written), without splitting and qualifying it; None for any other shape.

    Such a reference's name (``split_reference``) is the host, a slash and at
    least the character after it, which is neither a tag's colon nor a
    digest's at; ``qualify`` keeps it as it is, but where the host is one of
    Docker Hub's names.
    """
    first, _, rest = ref.partition("/")
    # (images.is_host, inlined: a call per image)
    shaped = rest and rest[0] not in ":@" and "@" not in first and "://" not in ref
    if shaped and ("." in first or ":" in first or first == "localhost") and first not in HUB_HOSTS:
        return first
    return None


def _bounded(items: list[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; ... and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _check_rules(
    mirrors: Mirrors,
    allowed: _Allowed,
    where: dict[str, str],
    known: Sequence[ImageSeen],
    components: Sequence[Component],
) -> None:
    """Every rule of every document, as written, against every policy."""
    problems: list[str] = []
    in_use: list[tuple[str, str]] | None = None  # (component, reference): made for the first rule refused
    for kind, rule in mirrors.written_rules:
        onto_itself = rule.source != CATCH_ALL and under(bare(rule.to), bare(rule.source))
        if not onto_itself and allowed(rule.to):
            continue
        at = f"{where.get(rule.document, rule.document)}: registry.{kind} rule {{from: {rule.source}, to: {rule.to}}}"
        if onto_itself:
            problems.append(f"{at} maps {rule.source} onto itself, so its references stay where they are")
            continue
        policy = next((p for p in mirrors.policies if not p.allows(rule.to)), None)
        if policy is not None:
            if in_use is None:
                in_use = [(f.component, f.ref) for f in known if f.ref]
                in_use += [(c.key, r) for c in components if (r := _repository(c)) is not None]
            refs = sorted({f"{component}: {ref}" for component, ref in in_use if under(bare(ref), bare(rule.to))})
            problems.append(
                f"{at} maps to {bare(rule.to)}, outside the registries {policy.by} allows "
                f"({', '.join(policy.allowed)}); references it sends there: "
                + (", ".join(refs[:SHOWN]) if refs else "none in this stack yet")
            )
    if problems:
        raise InputError(f"registry.strict (set by {', '.join(mirrors.strict_by)}): " + _bounded(problems))


# What each body holds that could be a reference, by the component it was
# made from. Components are immutable, and a plan computed for a changed
# document or policy shares every component it does not rebuild with the last
# plan (the same objects, built once per layers and mirrors; the generated
# ones are read in ``_read_generated``): their bodies are not walked again,
# whatever the hosts and allow-lists are now. An entry refers to its component
# weakly: it does not keep a dropped plan's values alive (they can be
# megabytes), and once the component is gone its id, free for another object,
# finds nothing.
_SCANS: BoundedCache[int, tuple[weakref.ref[Component], Found]] = BoundedCache("strict scans")


def _candidates_of(component: Component, generated: _Generated, memo: Memo, seen: Seen) -> Found:
    mine = generated.bodies.get(id(component))
    if mine is not None and mine[0] is component:
        return mine[1]
    hit = _SCANS.get(id(component))
    if hit is not None and hit[0]() is component:
        return hit[1]
    found, size = _walked(component, generated, memo, seen)
    return _SCANS.put(id(component), (weakref.ref(component), found), size)[1]


def _walked(component: Component, generated: _Generated, memo: Memo, seen: Seen) -> tuple[Found, int]:
    held = _head(component, generated.heads, memo)
    held += _held_in(_payload(component), generated.maps, memo, seen)
    return _found(held)


# A chart block without a string that could name a registry: the rest of a body around it is its chart's alone.
_NO_CHART = ChartRef(name="", repository="", version="")


def _head_key(component: Component) -> tuple[Any, ...]:
    """What ``component_body`` makes a body of besides its values, manifest and chart: a build changes only those."""
    return (component.kind, component.key, component.release_name, component.namespace, *component.readiness.items())


def _rest(component: Component, memo: Memo) -> list[Held]:
    """What ``component_body(component)`` holds besides its values or manifest and its chart."""
    chart = None if component.chart is None else _NO_CHART
    body = component_body(dataclasses.replace(component, values={}, manifest={}, chart=chart))
    return _held_in(body, {}, memo, {})


def _head(component: Component, heads: dict[tuple[Any, ...], tuple[Held, ...]], memo: Memo) -> list[Held]:
    """What ``component_body(component)`` holds besides its values or manifest: as its generated component's does
    (or walked, for a component not generated), and its chart's."""
    rest = heads.get(_head_key(component))
    held = _rest(component, memo) if rest is None else list(rest)
    if component.is_release and component.chart is not None:
        _held_under(chart_block(component.chart), "", held, {}, memo, {})
    return held


def prepare(stack: Stack) -> None:
    """Read what the check reads of a generated stack whatever the policy: its hosts, and what each
    generated component's body holds that could be a reference (``_read_generated``).

    Done at start-up: a restarted server's first strict plan then walks only the bodies it rebuilds.
    """
    stack_hosts(stack)
    _read_generated(stack)


def _scan(
    body: dict[str, Any], hosts: frozenset[str], allowed: Callable[[str], bool], already: frozenset[str]
) -> list[tuple[str, str]]:
    """(where, reference) of each reference in ``body`` the policies refuse and ``already`` does not cover."""
    reported, out = set(already), []
    for path, field, text in _strings(body, ""):
        for ref in _references(field, text, hosts):
            if allowed(ref) or any(ref in r or r in ref for r in reported):
                continue  # allowed, or already listed as the reference it is part of
            out.append((path, ref))
            reported.add(ref)
    return out


def _repository(component: Component) -> str | None:
    """Its body's ``spec.forProvider.chart.repository``: a Release's chart."""
    return component.chart.repository if component.is_release and component.chart is not None else None


def enforce(
    stack: Stack,
    mirrors: Mirrors,
    components: Iterable[Component],
    known: Iterable[ImageSeen],
    where: dict[str, str],
    documents: int,
) -> None:
    """Raise a Fatal naming every rule and reference a strict policy refuses in ``components`` (the managed ones).

    A body is made and walked only for a component not seen before, or one holding a refused reference.
    """
    components, known = list(components), list(known)
    allowed = _Allowed(mirrors)
    _check_rules(mirrors, allowed, where, known, components)

    out: dict[str, None] = {}
    rejected: list[str] = []
    reported: dict[str, set[str]] = {}

    def refuse(component: str, at: str, ref: str) -> None:
        out[f"{component} {at}: {ref if len(ref) <= 200 else ref[:200] + '...'}"] = None
        rejected.append(ref)
        reported.setdefault(component, set()).add(ref)

    for owner, at, ref, _source, prefix in known:  # unpacked: a field by name is an attribute lookup each
        if ref is None:
            out[f"{owner} {at}: no value and no recorded default, so its registry is unknown"] = None
        elif ref and not allowed.image(ref, prefix):
            refuse(owner, at, ref)
    rules = [rule for _kind, rule in mirrors.written_rules]
    sources = {_host(r.to) for r in rules} | {_host(r.source) for r in rules if r.source != CATCH_ALL}
    hosts = stack_hosts(stack) | sources | _added_hosts(stack, components)
    generated, memo, seen = _read_generated(stack), Memo(), Seen()
    for component in components:
        repository = _repository(component)
        if repository is not None and not allowed(repository):
            refuse(component.key, "chart", repository)
        if _refused(_candidates_of(component, generated, memo, seen), hosts, allowed):
            already = frozenset(reported.get(component.key, ()))
            for path, ref in _scan(component_body(component), hosts, allowed, already):
                refuse(component.key, path, ref)
    if out:
        head = next((p for p in mirrors.policies if any(not p.allows(r) for r in rejected)), mirrors.policies[0])
        lead = "no override document applies to this ServingStack; " if documents == 0 else ""
        allow = "; ".join(f"{p.by}: {', '.join(p.allowed) or 'none'}" for p in mirrors.policies)
        raise InputError(
            f"{head.where}.strict: {lead}{len(out)} image or chart references are outside the allowed registries "
            f'({allow}); mirror them with registry rules into those registries (or a "*" catch-all): '
            + _bounded(sorted(out))
        )
