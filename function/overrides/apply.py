"""Planning: the generated stack plus the applied documents -> what compose renders.

A plan depends only on the stack and the applied documents' content, so it is
computed once per (stack, documents) and cached: every reconcile of every
cluster sharing those documents reuses the same Component objects. Components
no document touches stay the generated objects themselves, whose protobuf the
renderer holds ready.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from function import stack as stack_module
from function.bodies import component_body
from function.cache import MIB, PYTHON_FACTOR, BoundedCache
from function.errors import InputError
from function.paths import get_path, set_path
from function.stack import ChartRef, Component, Stack
from function.tree import copy_along, copy_tree
from function.values import deep_merge, drop_nulls

from . import images
from .document import (
    Collected,
    ComponentOverride,
    Document,
    DriverOverride,
    Fingerprint,
    PodDisruptionBudget,
    RegistryPolicy,
)
from .drivers import driver_component
from .planned import MANAGED, REMOVED, UNMANAGED, Plan, Planned, State
from .registry import INPUT_POLICY, Mirrors, Policy, Rule, Rules, bare, rewrite_chart_repository
from .strict import enforce

SHORTCUT_PATHS = {
    "replicas": "replicas",
    "resources": "resources",
    "image": "images",
    "podDisruptionBudget": "pod_disruption_budgets",
}


@dataclass
class _Acc:
    """What the documents say about one component, accumulated in application order."""

    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    state: State = MANAGED
    state_by: str = ""
    version: str | None = None
    version_by: str = ""
    changed: dict[str, None] = field(default_factory=dict)  # ordered set of document names
    provenance: dict[str, str] = field(default_factory=dict)

    def touch(self, document: str, path: str | None = None) -> None:
        self.changed[document] = None
        if path is not None:
            self.provenance[path] = document


def leaves(node: Any, path: str) -> Iterable[str]:
    """Leaf paths of a values patch (a non-empty map is not a leaf; a list is)."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{path}.{key}")
    else:
        yield path


def _check_fields(comp: Component, over: ComponentOverride, where: str) -> None:
    if not comp.is_release:
        given = [f for f in ("version", "values", *over.shortcuts()) if getattr(over, f) is not None]
        if given:
            raise InputError(
                f"{where}.{given[0]}: {comp.key} is a raw manifest (Object), not a Helm release; "
                "the fields it takes are state and manifest"
            )
        return
    if over.manifest is not None:
        raise InputError(
            f"{where}.manifest: {comp.key} is a Helm release (chart {comp.chart.name if comp.chart else '?'}), "
            "not a raw manifest; change it through values or the shortcuts"
        )
    offered = [s for s, attr in SHORTCUT_PATHS.items() if getattr(comp, attr)]
    for shortcut in over.shortcuts():
        if not getattr(comp, SHORTCUT_PATHS[shortcut]):
            choices = ", ".join(offered) if offered else "none"
            raise InputError(
                f"{where}.{shortcut}: the stack declares no value path for {shortcut} on {comp.key} "
                f"(chart {comp.chart.name if comp.chart else '?'}); shortcuts {comp.key} takes: {choices}; "
                "or set the chart's own keys under values"
            )


def _put(patch: dict[str, Any], path: str, value: Any) -> None:
    current = get_path(patch, path)
    set_path(
        patch, path, deep_merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
    )


def _pdb_patch(patch: dict[str, Any], comp: Component, pdb: PodDisruptionBudget, where: str) -> None:
    budgets = comp.pod_disruption_budgets
    for field_name, attr, value in (
        ("minAvailable", "min_available", pdb.minAvailable),
        ("maxUnavailable", "max_unavailable", pdb.maxUnavailable),
    ):
        if value is not None and any(getattr(b, attr) is None for b in budgets):
            takes = sorted(
                {
                    f
                    for b in budgets
                    for f, a in (("minAvailable", b.min_available), ("maxUnavailable", b.max_unavailable))
                    if a
                }
            )
            raise InputError(
                f"{where}.podDisruptionBudget.{field_name}: not every PodDisruptionBudget of {comp.key} takes "
                f"{field_name}; they take: {', '.join(takes) or 'no budget'}"
            )
    if not pdb.enabled and not any(b.enabled for b in budgets):
        raise InputError(f"{where}.podDisruptionBudget.enabled: {comp.key}'s budgets have no on/off switch")
    budget_given = pdb.minAvailable is not None or pdb.maxUnavailable is not None
    for b in budgets:
        if b.enabled:
            set_path(patch, b.enabled, pdb.enabled)
        if pdb.enabled and budget_given:
            # The given field, and null for the other: charts copy their whole
            # budget map into the PDB, and a chart default (minAvailable: 1)
            # beside the user's maxUnavailable makes the API server reject it.
            for path, value in ((b.min_available, pdb.minAvailable), (b.max_unavailable, pdb.maxUnavailable)):
                if path:
                    set_path(patch, path, value)


def _values_patch(comp: Component, over: ComponentOverride, document: str, where: str) -> dict[str, Any]:
    """The document's values plus its shortcuts, as one patch (shortcuts win)."""
    patch: dict[str, Any] = copy_tree(over.values) if over.values else {}
    if over.replicas is not None:
        for path in comp.replicas:
            set_path(patch, path, over.replicas)
    if over.resources is not None:
        wanted = over.resources.model_dump(exclude_none=True)
        for path in comp.resources:
            _put(patch, path, wanted)
    if over.image is not None:
        by_name = {img.name: img for img in comp.images}
        chosen = {comp.images[0].name: over.image} if isinstance(over.image, str) else over.image
        for name, ref in chosen.items():
            img = by_name.get(name)
            if img is None:
                raise InputError(
                    f"{where}.image.{name}: {comp.key} has no image {name}; its images: {', '.join(by_name)}"
                )
            images.set_image(patch, img, ref, document, f"{where}.image")
    if over.podDisruptionBudget is not None:
        _pdb_patch(patch, comp, over.podDisruptionBudget, where)
    return patch


@dataclass
class _Registry:
    images: dict[str, Rule] = field(default_factory=dict)
    charts: dict[str, Rule] = field(default_factory=dict)
    pull_secrets: tuple[str, ...] = ()
    pull_secrets_by: str = ""
    chart_secret: str = ""
    chart_secret_by: str = ""
    policies: list[Policy] = field(default_factory=list)
    written: list[tuple[str, Rule]] = field(default_factory=list)

    def add(self, d: Document) -> None:
        reg = d.doc.registry
        written = [("images", Rule(r.source, r.to, d.name)) for r in reg.images or ()]
        written += [("charts", Rule(r.source, r.to, d.name)) for r in reg.charts or ()]
        self.written += written
        # Rules merge by source: a later document replaces one source's target
        # and keeps the others' rules.
        for kind, rule in written:
            (self.images if kind == "images" else self.charts)[rule.source] = rule
        if reg.imagePullSecrets is not None:
            self.pull_secrets, self.pull_secrets_by = tuple(reg.imagePullSecrets), d.name
        if reg.chartPullSecretRef is not None:
            self.chart_secret, self.chart_secret_by = reg.chartPullSecretRef.name, d.name
        # strict is sticky: a later document (another team's) cannot switch
        # off the policy an earlier one imposed, nor widen it: every policy
        # must hold, and each allows what its own document says.
        if reg.strict:
            allowed = reg.allowedRegistries or [bare(rule.to) for _kind, rule in written]
            self.policies.append(Policy(d.name, f"{d.where}.registry", tuple(allowed)))

    def impose(self, policy: RegistryPolicy | None) -> None:
        """The function Input's policy: it holds whatever the documents say."""
        if policy is not None and policy.strict:
            self.policies.insert(0, Policy(INPUT_POLICY, f"{INPUT_POLICY}: spec.registry", policy.allowedRegistries))

    def mirrors(self) -> Mirrors:
        return Mirrors(
            images=Rules.of(self.images.values()),
            charts=Rules.of(self.charts.values()),
            image_pull_secrets=self.pull_secrets,
            image_pull_secrets_by=self.pull_secrets_by,
            chart_pull_secret=self.chart_secret,
            chart_pull_secret_by=self.chart_secret_by,
            policies=tuple(self.policies),
            written_rules=tuple(self.written),
        )


def _layered(
    base: dict[str, Any], layers: Sequence[tuple[str, dict[str, Any]]], field_name: str, acc: _Acc
) -> dict[str, Any]:
    """``base`` with each document's patch deep-merged in order, every leaf credited to its document."""
    for document, patch in layers:
        base = deep_merge(base, patch)
        for path in leaves(patch, field_name):
            acc.touch(document, path)
    return base


def _release(
    comp: Component,
    acc: _Acc,
    layers: Sequence[tuple[str, dict[str, Any]]],
    mirrors: Mirrors,
    found: list[images.ImageSeen],
) -> Component:
    values = _layered(comp.values, layers, "values", acc)
    if (mirrors.images and comp.images) or mirrors.image_pull_secrets:
        # deep_merge shares subtrees with the generated values: copy the maps
        # on the way to what the rewriting below may write, and only those.
        values = copy_along(values, _written_paths(comp))
    for img in comp.images:
        changes, seen = images.rewrite_values(values, img, mirrors.images, comp.key, f"image {img.name}")
        found.append(seen)
        for change in changes:
            acc.touch(change.document, f"values.{change.path}")
    if mirrors.image_pull_secrets:
        _pull_secrets(values, comp, mirrors, acc)
    chart = _chart(comp, acc, mirrors)
    if values is comp.values and chart is comp.chart:
        return comp
    return dataclasses.replace(comp, values=values, chart=chart)


def _written_paths(comp: Component) -> Iterator[str]:
    """The value paths image rewriting and pull secrets write into on ``comp``."""
    for img in comp.images:
        yield from (p for p in (img.ref, img.registry, img.repository, img.tag) if p)
    yield from comp.pull_secret_ref_list_paths
    yield from comp.pull_secret_name_list_paths
    yield from comp.pull_secret_name_paths
    yield from comp.pull_secret_ref_paths


def _pull_secrets(values: dict[str, Any], comp: Component, mirrors: Mirrors, acc: _Acc) -> None:
    for path in images.write_pull_secrets(
        values,
        mirrors.image_pull_secrets,
        ref_list_paths=comp.pull_secret_ref_list_paths,
        name_list_paths=comp.pull_secret_name_list_paths,
        name_paths=comp.pull_secret_name_paths,
        ref_paths=comp.pull_secret_ref_paths,
    ):
        acc.touch(mirrors.image_pull_secrets_by, f"values.{path}")


def _chart(comp: Component, acc: _Acc, mirrors: Mirrors) -> ChartRef | None:
    chart = comp.chart
    if chart is None:
        return None
    if acc.version is not None:
        chart = dataclasses.replace(chart, version=acc.version)
    rewrite = rewrite_chart_repository(mirrors.charts, chart.repository) if mirrors.charts else None
    if rewrite is not None:
        chart = dataclasses.replace(chart, repository=rewrite.value)
        acc.touch(rewrite.rule.document, "chart.repository")
    # Mirror credentials go only to a chart pulled from a mirror, never upstream.
    if mirrors.chart_pull_secret and mirrors.charts.mirrored(chart.repository.rstrip("/")):
        chart = dataclasses.replace(chart, pull_secret_ref=mirrors.chart_pull_secret)
        acc.touch(mirrors.chart_pull_secret_by, "chart.pullSecretRef.name")
    return chart


def _manifest(
    comp: Component,
    acc: _Acc,
    layers: Sequence[tuple[str, dict[str, Any]]],
    mirrors: Mirrors,
    found: list[images.ImageSeen],
) -> Component:
    manifest = _layered(comp.manifest, layers, "manifest", acc)
    if layers:
        # Unlike Helm values, a manifest is applied as written: null means
        # "not there", so deleted keys go rather than travel as nulls.
        manifest = drop_nulls(manifest)
    # Copy the manifest only when there is something to write into it.
    containers = list(images.pod_containers(manifest))
    rewriting = bool(mirrors.images or mirrors.image_pull_secrets) and bool(comp.images or containers)
    if rewriting:
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
    if secrets and comp.pull_secret_ref_list_paths:
        paths = images.write_pull_secrets(manifest, secrets, ref_list_paths=comp.pull_secret_ref_list_paths)
        changes += [images.Change(path, None, mirrors.image_pull_secrets_by) for path in paths]
    for change in changes:
        acc.touch(change.document, f"manifest.{change.path}")
    return dataclasses.replace(comp, manifest=manifest) if changes or layers else comp


def _check_removed(
    states: dict[str, State], comps: Sequence[Component], accs: dict[str, _Acc], where: dict[str, str]
) -> None:
    # A dependent that stays on the cluster (Managed, or Unmanaged: kept
    # as it is) still needs what it depends on; e.g. a GatewayClass removed
    # under an Unmanaged Gateway would wait forever on Envoy Gateway's
    # finalizer. Removed dependents leave first (compose orders it).
    for removed in (k for k, s in states.items() if s == REMOVED):
        users = sorted(
            f"{c.key} ({states.get(c.key, MANAGED)})"
            for c in comps
            if removed in c.depends_on and states.get(c.key, MANAGED) != REMOVED
        )
        if users:
            raise InputError(
                f"{where[accs[removed].state_by]}.components.{removed}.state: Removed is refused while components "
                f"that depend on {removed} stay on the cluster: {', '.join(users)}; set them Removed too "
                f"(they leave first, {removed} once they are gone) or keep {removed}"
            )


def _pools_take_drivers(stack: Stack) -> bool:
    """Whether per-pool driver resources mean anything on a stack: its GPU Operator manages the driver."""
    return stack.driver.source == "gpu-operator" and bool(stack.driver.resource)


# Built components by what builds them: a changed document recomputes only
# the components it changes; the others come back as the same objects, whose
# protobuf the renderer (and whose strict scan the strict check) already holds.
_BUILT: BoundedCache[
    tuple[int, str | None, str, str], tuple[Component, Component, _Acc, tuple[images.ImageSeen, ...]]
] = BoundedCache("built components", max_entries=4096, max_bytes=32 * MIB)


def _built(
    stack: Stack,
    comp: Component,
    acc: _Acc,
    layers: Sequence[tuple[str, dict[str, Any]]],
    mirrors: Mirrors,
    found: list[images.ImageSeen],
    mirrors_key: str,
) -> Component:
    """``_release`` or ``_manifest``, once per (generated component, version, layers, mirrors).

    ``mirrors_key`` is ``repr(mirrors)``, made once per plan: hashing the
    rules themselves on every lookup costs more than the lookup. What they
    note on ``acc`` and in ``found`` is recorded with the result and replayed
    on every hit.
    """
    # Insertion order kept: equal keys, equal results.
    layered = json.dumps(layers, separators=(",", ":")) if layers else ""
    if not layered and comp.key in _untouched_by_mirrors(stack):
        mirrors_key = ""  # nothing in it a mirror rewrites: built once for every registry setting
    key = (id(comp), acc.version, layered, mirrors_key)  # the entry holds comp, so its id stays its own
    hit = _BUILT.get(key)
    if hit is None or hit[0] is not comp:
        noted, seen = _Acc(version=acc.version), list[images.ImageSeen]()
        build = _release if comp.is_release else _manifest
        new = build(comp, noted, layers, mirrors, seen)
        weight = _weight(comp, new, len(layered), _sizes(stack)[comp.key])
        hit = _BUILT.put(key, (comp, new, noted, tuple(seen)), weight)
    _, new, noted, seen_before = hit
    acc.changed.update(noted.changed)
    acc.provenance.update(noted.provenance)
    found.extend(seen_before)
    return new


def _weight(comp: Component, new: Component, layered: int, generated: int) -> int:
    # A built component holds its layers and, when it differs from the
    # generated one, (at most) a copy of its body: the generated body's
    # ``generated`` bytes, plus what the layers add.
    if new is comp:
        return layered + 256
    return (generated + layered) * PYTHON_FACTOR


class _Planner:
    """One computation of a plan: read the documents, then build each component."""

    def __init__(self, stack: Stack, documents: Sequence[Document], policy: RegistryPolicy | None = None) -> None:
        self.stack = stack
        self.by_key = {c.key: c for c in stack.components}
        self.accs = {c.key: _Acc() for c in stack.components}
        self.where = {d.name: d.where for d in documents}
        self.order = {d.name: i for i, d in enumerate(documents)}
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.registry = _Registry()
        self.registry.impose(policy)
        self.drivers: dict[str, tuple[DriverOverride, str]] = {}
        self.found: list[images.ImageSeen] = []
        self.driver_provenance: dict[str, dict[str, str]] = {}
        for d in documents:
            self._read(d)

    def _read(self, d: Document) -> None:
        for key, over in d.doc.components.items():
            at = f"{d.where}.components.{key}"
            comp = self.by_key.get(key)
            if comp is None:
                self._absent(d, key, at)
                continue
            _check_fields(comp, over, at)
            acc = self.accs[key]
            if over.state is not None:
                acc.state, acc.state_by = over.state, d.name
                acc.touch(d.name, "state")
            if over.version is not None:
                self._version(comp, acc, over.version, d.name, at)
            patch = _values_patch(comp, over, d.name, at) if comp.is_release else over.manifest
            if patch:
                acc.patches.append((d.name, patch))
        self.registry.add(d)
        if d.doc.drivers and not _pools_take_drivers(self.stack):
            names = ", ".join(drv.name for drv in d.doc.drivers)
            meant = [
                s.id
                for s in stack_module.every()
                if _pools_take_drivers(s) and d.doc.match.admits(s.cloud, s.accelerator)
            ]
            if meant:
                # As for components: a fleet-wide document stops no stack.
                self.notes.append(
                    f"{d.where}.drivers: skipped ({names}): on stack {self.stack.id} the node image supplies the GPU "
                    f"driver; the document also selects stacks whose GPU Operator manages it ({', '.join(meant)})"
                )
                return
            raise InputError(
                f"{d.where}.drivers[{d.doc.drivers[0].name}]: on stack {self.stack.id} the node image supplies the "
                f"GPU driver (driver source {self.stack.driver.source}); per-pool drivers need a stack whose "
                f"GPU Operator manages the driver (cloud Existing), and this document's match "
                f"({d.doc.match.describe()}) selects none"
            )
        for drv in d.doc.drivers:
            if drv.image is not None and not self.stack.driver.image_path:
                raise InputError(
                    f"{d.where}.drivers[{drv.name}].image: stack {self.stack.id} takes no driver image "
                    "repository; its operator pulls released driver images by version"
                )
            self.drivers[drv.name] = (drv, d.name)

    def _absent(self, d: Document, key: str, at: str) -> None:
        """A component this stack lacks: skipped when the document also selects stacks that have it."""
        others = [s for s in stack_module.every() if key in {c.key for c in s.components}]
        meant = [s.id for s in others if d.doc.match.admits(s.cloud, s.accelerator)]
        if meant:
            # A fleet-wide document (e.g. values for both GPU operators) must
            # not stop the stacks that lack one of them.
            self.notes.append(
                f"{at}: skipped: stack {self.stack.id} has no {key}; the document also selects stacks that do "
                f"({', '.join(meant)})"
            )
            return
        elsewhere = (
            f"; {key} is a component of {', '.join(s.id for s in others)}, which this document's match "
            f"({d.doc.match.describe()}) does not select"
            if others
            else ""
        )
        raise InputError(
            f"{at}: unknown component; the components of stack {self.stack.id}: {', '.join(self.by_key)}{elsewhere}"
        )

    def _version(self, comp: Component, acc: _Acc, version: str, document: str, at: str) -> None:
        assert comp.chart is not None, "checked: only Releases take a version"
        if version == comp.chart.version:
            if acc.version is None:
                self.warnings.append(
                    f"{at}.version: {version} is the generated version already; the pin is redundant "
                    f"and would hold {comp.key} back from future releases: remove it"
                )
            acc.version = None  # back to the generated version, whatever an earlier document pinned
        else:
            acc.version, acc.version_by = version, document
        acc.touch(document, "chart.version")

    def _driver_components(self, mirrors: Mirrors) -> list[tuple[Component, str]]:
        out = []
        for drv, document in self.drivers.values():
            comp, seen, provenance = driver_component(self.stack, drv, document, mirrors)
            self.driver_provenance[comp.key] = provenance
            if comp.key in self.by_key:
                raise InputError(
                    f"{self.where[document]}.drivers[{drv.name}]: its key {comp.key} is a component of the stack"
                )
            out.append((comp, document))
            self.found.extend(seen)
        return out

    def _operator_layers(self, states: dict[str, State]) -> list[tuple[str, dict[str, Any]]]:
        if not self.drivers:
            return []
        driver = self.stack.driver
        if states.get(driver.operator) == UNMANAGED:
            self.warnings.append(
                f"drivers: {driver.operator} is Unmanaged, so its values for per-pool drivers "
                f"({', '.join(leaves(driver.operator_values, 'values'))}) are not applied; "
                "the cluster's own operator must be set up to reconcile them"
            )
        for _drv, document in self.drivers.values():
            self.accs[driver.operator].touch(document)
        last = list(self.drivers.values())[-1][1]
        return [(last, driver.operator_values)] if driver.operator_values else []

    def plan(self) -> Plan:
        mirrors = self.registry.mirrors()
        mirrors_key = repr(mirrors)  # see _built
        drivers = self._driver_components(mirrors)
        states = {k: a.state for k, a in self.accs.items()} | {c.key: MANAGED for c, _ in drivers}
        _check_removed(states, [*self.stack.components, *(c for c, _ in drivers)], self.accs, self.where)
        operator_layers = self._operator_layers(states)
        planned: list[Planned] = []
        provenance: dict[str, dict[str, str]] = {}
        for comp in self.stack.components:
            acc = self.accs[comp.key]
            # A Removed component stays composed as it was until its dependents
            # are gone (compose orders the removal): keep its overrides, e.g.
            # the mirror it installs from, rather than the generated body.
            if acc.state in (MANAGED, REMOVED):
                layers = (operator_layers if comp.key == self.stack.driver.operator else []) + acc.patches
                new = _built(
                    self.stack, comp, acc, layers if comp.is_release else acc.patches, mirrors, self.found, mirrors_key
                )
                planned.append(Planned(new, acc.state, tuple(sorted(acc.changed, key=self.order.__getitem__))))
            else:
                # Not ours to change any more: the generated body (Observe-only
                # when it was installed), changed only by the document that said so.
                planned.append(Planned(comp, acc.state, (acc.state_by,)))
                acc.provenance = {"state": acc.state_by}
            if acc.provenance:
                provenance[comp.key] = dict(acc.provenance)
        planned += [Planned(c, MANAGED, (document,)) for c, document in drivers]
        provenance.update(self.driver_provenance)
        if mirrors.strict:
            _strict(self.stack, mirrors, planned, self.found, self.where, len(self.order))
        return Plan(tuple(planned), tuple(self.warnings), tuple(self.notes), provenance, tuple(self.found), mirrors)


def _strict(
    stack: Stack,
    mirrors: Mirrors,
    planned: Sequence[Planned],
    found: Sequence[images.ImageSeen],
    where: dict[str, str],
    documents: int,
) -> None:
    bodies = [(p.component.key, component_body(p.component), p.component) for p in planned if p.state == MANAGED]
    enforce(stack, mirrors, bodies, found, where, documents)


# Distinct (stack, document set, policy) triples in use at once: a few per fleet.
_CACHE: BoundedCache[tuple[Stack, Fingerprint, RegistryPolicy | None], Plan] = BoundedCache(
    "plans", max_entries=128, max_bytes=32 * MIB
)


@cache  # one per generated stack
def _generated(stack: Stack) -> Plan:
    """The plan no document changes: the generated components themselves, and their images."""
    return _Planner(stack, ()).plan()


@cache  # one per generated stack
def _sizes(stack: Stack) -> dict[str, int]:
    """What each component's values or manifest weighs serialized, by key."""
    return {c.key: len(json.dumps(c.values or c.manifest, separators=(",", ":"))) for c in stack.components}


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
        and not c.pull_secret_ref_list_paths
        and not any(images.pod_containers(c.manifest))
    )


def _generated_bytes(stack: Stack) -> int:
    """What the stack's values and manifests weigh serialized: a plan holds copies of those it changed."""
    return sum(_sizes(stack).values())


def plan(stack: Stack, found: Collected) -> Plan:
    """The stack as the documents that apply to one XR leave it, computed once per (stack, documents, policy).

    With no document and no policy, the generated stack exactly (the same
    objects, whose protobuf the renderer holds ready).
    """
    if not found.documents and found.policy is None:
        return _generated(stack)
    key = (stack, found.fingerprint, found.policy)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    # A plan holds the documents' content and copies of the generated values
    # it changed: weighed as both, at their serialized size.
    documents = sum(len(json.dumps(d.body, separators=(",", ":"))) for d in found.documents)
    weight = (_generated_bytes(stack) + documents) * PYTHON_FACTOR
    return _CACHE.put(key, _Planner(stack, found.documents, found.policy).plan(), weight)
