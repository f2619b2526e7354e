"""One component as the documents' layers and the registry settings leave it, built once per what builds it.

A component's build depends only on the generated component, the chart
version pinned, the values (or manifest) patches layered on it and the
registry settings; it is kept by those, so a changed document rebuilds only
the components it changes, and the others come back as the same objects,
whose protobuf the renderer (and whose strict scan the strict check) already
holds. A rebuilt component copies only the maps on the paths it writes
(:func:`function.tree.copy_maps`): the rest stays the generated objects.
A generated component's images, which do not depend on the registry
settings, are read once per stack, so new mirrors only rewrite them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple, TypeVar

from function.cache import PYTHON_FACTOR, BoundedCache
from function.stack import ChartRef, Component, Stack
from function.tree import copy_maps, copy_tree, holders
from function.values import deep_merge, drop_nulls

from . import images
from .planned import MANAGED, State
from .registry import Mirrors, Rules, chart_repository


@dataclass(slots=True)  # (a plan makes two per component: its own, and its build's)
class Acc:
    """What the documents say about one component, accumulated in application order."""

    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    state: State = MANAGED
    state_by: str = ""
    version: str | None = None
    changed: dict[str, None] = field(default_factory=dict)  # ordered set of document names
    provenance: dict[str, str] = field(default_factory=dict)

    def touch(self, document: str, path: str | None = None) -> None:
        self.changed[document] = None
        if path is not None:
            self.provenance[path] = document


def leaves(node: Any, path: str) -> list[str]:
    """Leaf paths of a values patch (a non-empty map is not a leaf; a list is)."""
    if not (isinstance(node, dict) and node):
        return [path]
    out: list[str] = []
    _leaves_into(node, path, out)
    return out


def _leaves_into(node: dict[str, Any], path: str, out: list[str]) -> None:
    # Appended to one list, not yielded up through each level of the tree.
    for key, value in node.items():
        here = f"{path}.{key}"
        if isinstance(value, dict) and value:
            _leaves_into(value, here, out)
        else:
            out.append(here)


def _layered(
    base: dict[str, Any], layers: Sequence[tuple[str, dict[str, Any]]], field_name: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """``base`` with each document's patch deep-merged in order, and the document to credit for each leaf
    path (the last to set it, in the order of first setting: as :meth:`Acc.touch` leaves them, in turn)."""
    credit: dict[str, str] = {}
    for document, patch in layers:
        base = deep_merge(base, patch)
        for path in leaves(patch, field_name):
            credit[path] = document
    return base, credit


class _Layered(NamedTuple):
    """A component under its documents' layers, before any registry setting: where its builds start."""

    comp: Component
    body: dict[str, Any]  # its values, or its manifest
    credit: dict[str, str]  # leaf path the layers set -> the document credited (see _layered)
    documents: tuple[str, ...]  # the layers' documents, in order: each sets some leaf
    # A Release's declared images as read in ``body`` (see images.Reading);
    # None for an Object, or when writing one image can change what a later
    # one reads: then each is read as the rewriting reaches it.
    readings: tuple[images.Reading, ...] | None
    holders: tuple[tuple[str, ...], ...]  # the maps image rewriting and pull secrets write into (copy_maps)
    wheres: tuple[str, ...]  # how found images name each declared image ("image <name>")
    secret_credits: tuple[str, ...]  # the provenance paths of what pull secrets write (see _pull_secrets)
    chart_repository: tuple[str, int]  # a Release's chart repository as rules take it (registry.chart_repository)


def _under_layers(stack: Stack, comp: Component, layers: Sequence[tuple[str, dict[str, Any]]]) -> _Layered:
    """``comp`` under ``layers``: without any, the generated component's, read once per stack (a component a
    document added is read here)."""
    generated = _unlayered(stack).get(comp.key)
    if generated is None or generated.comp is not comp:
        generated = _read(comp)
    if not layers:
        return generated
    documents = tuple(dict.fromkeys(document for document, _ in layers))
    if comp.is_release:
        body, credit = _layered(comp.values, layers, "values")
        readings = None if generated.readings is None else tuple(images.read_image(body, i) for i in comp.images)
    else:
        body, credit = _layered(comp.manifest, layers, "manifest")
        # Unlike Helm values, a manifest is applied as written: null means
        # "not there", so deleted keys go rather than travel as nulls. (A
        # fresh tree: _manifest writes into it without copying it again.)
        body, readings = drop_nulls(body), None
    return generated._replace(body=body, credit=credit, documents=documents, readings=readings)


@cache  # one per generated stack
def _unlayered(stack: Stack) -> dict[str, _Layered]:
    """Each component as generated, by key, its images read: what a rebuild for new registry settings starts
    from when no document patches it, read once rather than once per setting.

    (One under a document's layers is read at each build: a layer set kept
    for later mirrors would mostly be one its document has since replaced,
    kept only to weigh on the heap the collector walks.)
    """
    return {c.key: _read(c) for c in stack.components}


def _read(c: Component) -> _Layered:
    """``c`` under no layer, its images read."""
    if not c.is_release:
        return _Layered(c, c.manifest, {}, (), None, (), (), (), ("", 0))
    readings = tuple(images.read_image(c.values, img) for img in c.images) if _reads_apart(c) else None
    wheres = tuple(f"image {img.name}" for img in c.images)
    credits = tuple(f"values.{path}" for path in _pull_secret_paths(c))
    repository = chart_repository(c.chart.repository) if c.chart is not None else ("", 0)
    written = [*(path for img in c.images for path in img.paths()), *_pull_secret_paths(c)]  # what rewriting writes
    return _Layered(c, c.values, {}, (), readings, holders(written), wheres, credits, repository)


def _reads_apart(comp: Component) -> bool:
    """Whether no declared image's write reaches a path a later image reads (then all can be read first)."""

    def meet(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    for i, img in enumerate(comp.images):
        written = [p for p in (img.ref, img.registry, img.repository) if p]
        for later in comp.images[i + 1 :]:
            if any(meet(w, r) for w in written for r in later.paths()):
                return False
    return True


def _credit(layered: _Layered, acc: Acc) -> None:
    """What the layers set, credited on ``acc`` (fresh: see built) as touching each leaf in turn would."""
    acc.changed.update(dict.fromkeys(layered.documents))
    acc.provenance.update(layered.credit)


def _release(layered: _Layered, acc: Acc, mirrors: Mirrors, found: list[images.ImageSeen]) -> Component:
    comp, values = layered.comp, layered.body
    _credit(layered, acc)
    if (mirrors.images and comp.images) or (mirrors.image_pull_secrets and layered.secret_credits):
        # deep_merge shares subtrees with the generated values: copy the maps
        # on the way to what the rewriting below may write, and only those
        # (none for a chart with no image and no pull-secret path: it stays the generated one).
        values = copy_maps(values, layered.holders)
    readings, rules, key = layered.readings, mirrors.images, comp.key
    changed, provenance = acc.changed, acc.provenance  # Acc.touch, inlined: a few writes per image
    # Read in turn, an image sees what an earlier one wrote at a path they share
    # (kai-scheduler's global.registry): its source is what the values said before.
    before = None if readings is not None or not rules else [images.read_image(values, i) for i in comp.images]
    for i, where in enumerate(layered.wheres):
        reading = images.read_image(values, comp.images[i]) if readings is None else readings[i]
        changes, seen = images.rewrite_image(values, reading, rules, key, where)
        found.append(seen if before is None else images.seen_from(seen, before[i]))
        for path, _value, document in changes:
            changed[document] = None
            provenance[f"values.{path}"] = document
    if mirrors.image_pull_secrets and layered.secret_credits:  # one per pull-secret path: none, nothing to write
        # Credited as touching each path would.
        _write_pull_secrets(values, comp, mirrors.image_pull_secrets)
        changed[mirrors.image_pull_secrets_by] = None
        provenance.update(dict.fromkeys(layered.secret_credits, mirrors.image_pull_secrets_by))
    chart = _chart(comp, acc, mirrors, layered.chart_repository)
    if values is comp.values and chart is comp.chart:
        return comp
    return replaced(comp, values=values, chart=chart)


def _pull_secret_paths(comp: Component) -> tuple[str, ...]:
    """The value paths pull secrets write into on ``comp``, in the order they are written."""
    return (
        *comp.pull_secret_ref_list_paths,
        *comp.pull_secret_name_list_paths,
        *comp.pull_secret_name_paths,
        *comp.pull_secret_ref_paths,
    )


def _write_pull_secrets(tree: dict[str, Any], comp: Component, secrets: tuple[str, ...]) -> list[str]:
    """Write ``secrets`` at ``comp``'s pull-secret paths in ``tree`` (its values or manifest); the paths written."""
    return images.write_pull_secrets(
        tree,
        secrets,
        ref_list_paths=comp.pull_secret_ref_list_paths,
        name_list_paths=comp.pull_secret_name_list_paths,
        name_paths=comp.pull_secret_name_paths,
        ref_paths=comp.pull_secret_ref_paths,
    )


def _chart(comp: Component, acc: Acc, mirrors: Mirrors, repository: tuple[str, int]) -> ChartRef | None:
    """``comp``'s chart, its repository (``repository``: as rules take it) mirrored, pinned and credentials given."""
    chart = comp.chart
    if chart is None:
        return None
    changed: dict[str, str] = {} if acc.version is None else {"version": acc.version}
    rewrite = mirrors.charts.rewrite(*repository) if mirrors.charts else None
    if rewrite is not None:
        changed["repository"] = rewrite.value
        acc.touch(rewrite.rule.document, "chart.repository")
    # Mirror credentials go only to a chart pulled from a mirror, never
    # upstream. (A rewritten repository is under its rule's target.)
    if mirrors.chart_pull_secret and (rewrite is not None or mirrors.charts.mirrored(repository[0])):
        changed["pull_secret_ref"] = mirrors.chart_pull_secret
        acc.touch(mirrors.chart_pull_secret_by, "chart.pullSecretRef.name")
    return replaced(chart, **changed) if changed else chart


def _manifest(layered: _Layered, acc: Acc, mirrors: Mirrors, found: list[images.ImageSeen]) -> Component:
    comp, manifest = layered.comp, layered.body
    _credit(layered, acc)
    # Copy the manifest only when there is something to write into it, and
    # only the generated one: one under layers is this build's own (drop_nulls).
    containers = list(images.pod_containers(manifest))
    rewriting = bool(mirrors.images or mirrors.image_pull_secrets) and bool(
        comp.images or containers or _pull_secret_paths(comp)
    )
    if rewriting and manifest is comp.manifest:
        manifest = copy_tree(manifest)
        containers = list(images.pod_containers(manifest))  # the copy's, to write into
    rules = mirrors.images if rewriting else Rules()
    secrets = mirrors.image_pull_secrets if rewriting else ()
    changes, seen = images.rewrite_manifest(containers, rules, secrets, mirrors.image_pull_secrets_by, comp.key)
    found.extend(seen)
    # Images a controller runs from fields of this object (not pod containers).
    for img in comp.images:
        written, one = images.rewrite_values(manifest, img, rules, comp.key, f"manifest image {img.name}")
        found.append(one)
        changes += written
    if secrets and _pull_secret_paths(comp):
        paths = _write_pull_secrets(manifest, comp, secrets)
        changes += [images.Change(path, None, mirrors.image_pull_secrets_by) for path in paths]
    for change in changes:
        acc.touch(change.document, f"manifest.{change.path}")
    return replaced(comp, manifest=manifest) if changes or layered.body is not comp.manifest else comp


_Frozen = TypeVar("_Frozen", Component, ChartRef)


def replaced(obj: _Frozen, **changes: Any) -> _Frozen:
    """``dataclasses.replace(obj, **changes)`` for a Component or ChartRef, without calling its ``__init__``.

    Those take every field as given (no ``__post_init__``, no derived field),
    so copying the attributes is the same object; ``replace`` reads each
    field, then sets each one again through ``object.__setattr__``: a rebuild
    for new mirrors makes two per component.
    """
    new = object.__new__(type(obj))
    vars(new).update(vars(obj), **changes)
    return new


# Built components by what builds them: a changed document recomputes only
# the components it changes; the others come back as the same objects, whose
# protobuf the renderer (and whose strict scan the strict check) already holds.
# An entry keeps what the build noted as its two maps, not their Acc: fewer
# objects for the collector to walk while it lives.
_BUILT: BoundedCache[
    tuple[int, str | None, str, str],
    tuple[Component, Component, dict[str, None], dict[str, str], tuple[images.ImageSeen, ...]],
] = BoundedCache("built components")


def built(
    stack: Stack,
    comp: Component,
    acc: Acc,
    layers: Sequence[tuple[str, dict[str, Any]]],
    mirrors: Mirrors,
    mirrors_key: str,
    layered: str,
) -> tuple[Component, tuple[images.ImageSeen, ...]]:
    """``_release`` or ``_manifest``, once per (generated component, version, layers, mirrors): the component
    and the images it pulls.

    ``mirrors_key`` is :func:`mirrors_key`, made once per plan: hashing the
    rules themselves on every lookup costs more than the lookup; ``layered``
    is :func:`layers_key` of ``layers``. What they note on ``acc`` is
    recorded with the result and replayed on every hit.
    """
    if not layered and comp.key in _untouched_by_mirrors(stack):
        mirrors_key = ""  # nothing in it a mirror rewrites: built once for every registry setting
    key = (id(comp), acc.version, layered, mirrors_key)  # the entry holds comp, so its id stays its own
    hit = _BUILT.get(key)
    if hit is None or hit[0] is not comp:
        noted = Acc(version=acc.version)
        seen: list[images.ImageSeen] = []  # (a literal: list[ImageSeen]() goes through typing's alias)
        build = _release if comp.is_release else _manifest
        new = build(_under_layers(stack, comp, layers), noted, mirrors, seen)
        generated = sizes(stack).get(comp.key) or _size(comp)  # (not there: a component a document added)
        # A built component holds its layers and, when it differs from the
        # generated one, (at most) a copy of its body: the generated body's
        # bytes, plus what the layers add.
        weight = len(layered) + 256 if new is comp else (generated + len(layered)) * PYTHON_FACTOR
        hit = _BUILT.put(key, (comp, new, noted.changed, noted.provenance, tuple(seen)), weight)
    _, new, changed, provenance, seen_before = hit
    acc.changed.update(changed)
    acc.provenance.update(provenance)
    return new, seen_before


def layers_key(layers: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """``layers`` as one string: equal exactly when their content and order are (see built)."""
    # Insertion order kept: equal keys, equal results. (repr, not JSON: the
    # layers are plain trees, whose repr tells apart what JSON does, faster.)
    return repr(layers) if layers else ""


def mirrors_key(mirrors: Mirrors) -> str:
    """What a build reads of ``mirrors``, as one string: every rule and pull secret, and the document behind
    each (the strict policies are checked on the plan, after building)."""
    return repr(
        (
            [(r.source, r.to, r.document) for r in mirrors.images.rules],
            [(r.source, r.to, r.document) for r in mirrors.charts.rules],
            mirrors.image_pull_secrets,
            mirrors.image_pull_secrets_by,
            mirrors.chart_pull_secret,
            mirrors.chart_pull_secret_by,
        )
    )


@cache  # one per generated stack
def sizes(stack: Stack) -> dict[str, int]:
    """What each component's values or manifest weighs serialized, by key."""
    return {c.key: _size(c) for c in stack.components}


def _size(c: Component) -> int:
    return len(json.dumps(c.values or c.manifest, separators=(",", ":")))


@cache  # one per generated stack
def _untouched_by_mirrors(stack: Stack) -> frozenset[str]:
    """The raw manifests no registry setting changes: no declared image, no pull-secret path, no pod container.

    (Walking the larger ones, CRDs, for pods on every plan costs more than the rest of their planning.)
    """
    return frozenset(
        c.key
        for c in stack.components
        if not c.is_release
        and not c.images
        and not _pull_secret_paths(c)
        and not any(images.pod_containers(c.manifest))
    )
