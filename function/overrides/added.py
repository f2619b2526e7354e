"""Components a document adds: which entry defines each, checked against the stacks, as a stack Component.

An entry under a key no generated stack has defines an added component when
it gives a ``chart`` (a Helm Release) or a ``manifest`` (a raw Object); the
first such entry in application order defines it, later documents change it
(state, values, manifest) as they change a generated component. A component
added at the last reconcile that no document defines now is kept from the XR's
memory (``status.stack.added``) and leaves only on an explicit statement: its
``state: Removed``, or its document retired (tombstone or annotation), and then
in dependency order like every removal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from function import stack as stack_module
from function.errors import InputError
from function.paths import get_path
from function.stack import ChartRef, Component, ImageRef
from function.values import drop_nulls

from .document import ADDED_FIELD, DNS_LABEL, RELEASE_NAME_MAX, ComponentOverride, Document, RememberedAddition
from .planned import REMOVED, State

# Composed resource names the function makes itself: its ProviderConfigs
# (function.compose HELM_PC, KUBERNETES_PC), the Usages (usage-<of>-by-<by>,
# usage-pc-<key>) and per-pool drivers (document.driver_key). An added key
# with one of these prefixes could take one of their names.
RESERVED_PREFIXES = ("provider-config-", "usage-", "driver-")
_DNS_LABEL = re.compile(DNS_LABEL)
# What an added raw manifest must name: the API server needs them to apply it.
_MANIFEST_NEEDS = ("apiVersion", "kind", "metadata.name")


@dataclass(frozen=True)
class Definition:
    """The entry that defines an added component: in a document in force, or remembered."""

    key: str
    document: str
    where: str  # "EnvironmentConfig x: data.servingStack.components.<key>", or where the memory holds it
    over: ComponentOverride
    entry: dict[str, Any]  # as written
    remembered: RememberedAddition | None = None  # defined by no document now: kept from status.stack.added


@cache
def generated_keys() -> dict[str, tuple[str, ...]]:
    """Every generated component key, with the stacks that have it."""
    out: dict[str, list[str]] = {}
    for s in stack_module.every():
        for c in s.components:
            out.setdefault(c.key, []).append(s.id)
    return {key: tuple(ids) for key, ids in out.items()}


def defines(key: str, over: ComponentOverride) -> bool:
    """Whether an entry under ``key`` adds a component: a chart or a manifest on a key no generated stack has."""
    return key not in generated_keys() and (over.chart is not None or over.manifest is not None)


def collision(key: str, over: ComponentOverride, at: str) -> None:
    """Refuse an addition under a generated key: a Fatal naming both."""
    stacks = generated_keys().get(key)
    given = over.addition_fields()
    if stacks is None or not given:
        return
    raise InputError(
        f"{at}.{given[0]}: adds a component under the key {key}, which is the generated component {key} of "
        f"stacks {', '.join(stacks)}; an added component takes a key no generated stack has (a generated "
        f"component is changed through state, version, values and the shortcuts)"
    )


def definitions(documents: Sequence[Document], remembered: Iterable[RememberedAddition]) -> dict[str, Definition]:
    """The added components by key, in key order: the first entry in application order that defines each, or,
    for one no document defines now, the memory of the last reconcile."""
    found: dict[str, Definition] = {}
    for d in documents:
        for key, over in d.doc.components.items():
            if key in found or not defines(key, over):
                continue
            at = f"{d.where}.components.{key}"
            found[key] = Definition(key, d.name, at, over, d.body.get("components", {}).get(key, {}))
    for r in remembered:
        if r.key not in found:
            where = f"{ADDED_FIELD} ({r.key}, added by {r.document})"
            found[r.key] = Definition(r.key, r.document, where, r.over, r.entry, r)
    return dict(sorted(found.items()))


def component(defn: Definition) -> Component:
    """The stack Component an added entry describes, before any layer or mirror."""
    key, over, at = defn.key, defn.over, defn.where
    if not _DNS_LABEL.match(key) or key.startswith(RESERVED_PREFIXES):
        raise InputError(
            f"{at}: {key!r}: an added component's key is a composed resource name: a DNS label (lower-case "
            f"letters, digits, '-', at most 63) not starting with {', '.join(RESERVED_PREFIXES)} (the function's own)"
        )
    common: dict[str, Any] = {
        "key": key,
        "origin": f"override:{defn.document}",
        "depends_on": tuple(over.dependsOn or ()),
        # What it depends on outlives it: a Usage of each dependency by it.
        "finalized_by_dependencies": bool(over.dependsOn),
        "images": tuple(
            ImageRef(name=i.name, ref=i.ref, registry=i.registry, repository=i.repository, tag=i.tag)
            for i in over.images or ()
        ),
    }
    secrets = over.pullSecretPaths
    if secrets is not None:
        common.update(
            pull_secret_ref_list_paths=tuple(secrets.refList),
            pull_secret_name_list_paths=tuple(secrets.nameList),
            pull_secret_name_paths=tuple(secrets.name),
            pull_secret_ref_paths=tuple(secrets.ref),
        )
    if over.chart is not None:
        chart = over.chart
        release = over.releaseName or f"mp-{chart.name}"
        if len(release) > RELEASE_NAME_MAX or not _DNS_LABEL.match(release):
            raise InputError(
                f"{at}.releaseName: the release name {release!r} (mp-<chart name> unless given) is not a Helm "
                f"release name (a DNS label of at most {RELEASE_NAME_MAX} characters); give releaseName"
            )
        return Component(
            kind="Release",
            chart=ChartRef(name=chart.name, repository=chart.repository, version=chart.version),
            release_name=release,
            namespace=over.namespace or "",
            values=over.values or {},
            **common,
        )
    manifest = drop_nulls(over.manifest or {})
    for path in _MANIFEST_NEEDS:
        node = get_path(manifest, path)
        if not (isinstance(node, str) and node):
            raise InputError(
                f"{at}.manifest.{path}: an added raw manifest is a whole object: it needs apiVersion, kind "
                "and metadata.name"
            )
    return Component(kind="Object", manifest=manifest, **common)


def check(components: Mapping[str, Component], added: Mapping[str, Definition], stack_id: str) -> None:
    """What an addition must hold against the whole plan: its dependencies exist, no cycle, no release name twice."""
    for key, defn in added.items():
        for dep in components[key].depends_on:
            if dep not in components:
                raise InputError(
                    f"{defn.where}.dependsOn: {dep}: no such component on stack {stack_id}; its components: "
                    f"{', '.join(components)}"
                )
    _acyclic(components, added)
    releases: dict[str, str] = {}
    for c in components.values():
        if not c.is_release:
            continue
        other = releases.setdefault(c.release_name, c.key)
        if other != c.key:
            first, second = (other, c.key) if c.key in added else (c.key, other)
            raise InputError(
                f"{added[second].where}: its Helm release name {c.release_name} is also {first}'s "
                f"(release names are unique on a cluster); give releaseName"
            )


def _acyclic(components: Mapping[str, Component], added: Mapping[str, Definition]) -> None:
    # Only additions can close a cycle: nothing generated depends on them.
    done: set[str] = set()

    def visit(key: str, path: tuple[str, ...]) -> None:
        if key in path:
            cycle = " -> ".join((*path[path.index(key) :], key))
            raise InputError(f"{added[path[0]].where}.dependsOn: a dependency cycle: {cycle}")
        if key in done or key not in added:
            return
        for dep in components[key].depends_on:
            visit(dep, (*path, key))
        done.add(key)

    for key in added:
        visit(key, ())


def remembered_state(defn: Definition, retired: frozenset[str], new: Sequence[str]) -> tuple[State, str | None]:
    """The state of an addition no document defines now, and the Warning to give (None: it leaves).

    ``new``: the keys its document adds now that it did not at the last reconcile (a rename's new key).
    """
    r = defn.remembered
    assert r is not None
    if r.state == REMOVED or r.document in retired:
        return REMOVED, None
    renamed = (
        f"; if {defn.key} was renamed to {' or '.join(new)}: a renamed key is the removal of the old key plus "
        "an addition of the new one (a second install beside the first)"
        if new
        else ""
    )
    return r.state, (
        f"components.{defn.key}: added by {r.document} at the last reconcile, and no document in force adds it "
        f"now; keeping it as remembered in {ADDED_FIELD} (nothing is removed): to remove it, set "
        f"components.{defn.key}.state: Removed in a document (it leaves after what depends on it), or retire "
        f"{r.document}{renamed}"
    )
