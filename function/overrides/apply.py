"""Planning: the generated stack plus the applied documents -> what compose renders.

A plan depends only on the stack and the applied documents' content, so it is
computed once per (stack, documents) and cached: every reconcile of every
cluster sharing those documents reuses the same Component objects. Components
no document touches stay the generated objects themselves, whose protobuf the
renderer holds ready.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from function import stack as stack_module
from function.cache import PYTHON_FACTOR, BoundedCache
from function.errors import InputError
from function.paths import get_path, set_path
from function.stack import Component, Stack
from function.tree import copy_maps, holders
from function.values import deep_merge

from . import added, images, strict
from .build import Acc, built, layers_key, leaves, mirrors_key, sizes
from .document import (
    Collected,
    ComponentOverride,
    Document,
    DriverOverride,
    Fingerprint,
    PodDisruptionBudget,
    RegistryPolicy,
    RememberedAddition,
)
from .drivers import driver_component
from .planned import MANAGED, REMOVED, UNMANAGED, Added, Plan, Planned, State
from .registry import INPUT_POLICY, Mirrors, Policy, Rule, Rules, bare

SHORTCUT_PATHS = {
    "replicas": "replicas",
    "resources": "resources",
    "image": "images",
    "podDisruptionBudget": "pod_disruption_budgets",
}


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
    for shortcut in over.shortcuts():
        if not getattr(comp, SHORTCUT_PATHS[shortcut]):
            offered = [s for s, attr in SHORTCUT_PATHS.items() if getattr(comp, attr)]
            choices = ", ".join(offered) if offered else "none"
            raise InputError(
                f"{where}.{shortcut}: the stack declares no value path for {shortcut} on {comp.key} "
                f"(chart {comp.chart.name if comp.chart else '?'}); shortcuts {comp.key} takes: {choices}; "
                "or set the chart's own keys under values"
            )


def _pdb_patch(patch: dict[str, Any], comp: Component, pdb: PodDisruptionBudget, where: str) -> None:
    budgets = comp.pod_disruption_budgets
    fields = {"minAvailable": "min_available", "maxUnavailable": "max_unavailable"}  # override's -> budget's
    for field_name, attr in fields.items():
        if getattr(pdb, field_name) is not None and any(getattr(b, attr) is None for b in budgets):
            takes = sorted({f for b in budgets for f, a in fields.items() if getattr(b, a)})
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
            # The given field, and null for the other where the chart has a default
            # there: charts copy their whole budget map into the PDB, and a chart
            # default (minAvailable: 1) beside the user's maxUnavailable makes the API
            # server reject it. Nowhere else: Helm keeps a null the chart's values do
            # not hold, and a template testing hasKey (cert-manager's) renders it.
            for path, value in ((b.min_available, pdb.minAvailable), (b.max_unavailable, pdb.maxUnavailable)):
                if path and (value is not None or path in b.defaulted):
                    set_path(patch, path, value)


def _shortcut_paths(comp: Component, over: ComponentOverride) -> Iterator[str]:
    """The value paths the shortcuts ``over`` gives may write on ``comp``: what each declares (SHORTCUT_PATHS)."""
    for shortcut in over.shortcuts():
        for declared in getattr(comp, SHORTCUT_PATHS[shortcut]):
            yield from (declared,) if isinstance(declared, str) else declared.paths()


def _values_patch(comp: Component, over: ComponentOverride, document: str, where: str) -> dict[str, Any]:
    """The document's values plus its shortcuts, as one patch (shortcuts win).

    The document's values are shared by every request that parsed it: the
    patch copies only the maps on the paths its shortcuts write (layering
    copies what it takes from a patch, see deep_merge; nothing else writes
    into one).
    """
    values = over.values or {}
    if not over.shortcuts():
        return values
    patch = copy_maps(values, holders(_shortcut_paths(comp, over)))
    if over.replicas is not None:
        for path in comp.replicas:
            set_path(patch, path, over.replicas)
    if over.resources is not None:
        wanted = over.resources.model_dump(exclude_none=True)
        for path in comp.resources:
            current = get_path(patch, path)
            set_path(patch, path, deep_merge(current, wanted) if isinstance(current, dict) else wanted)
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


def _check_removed(
    states: dict[str, State], comps: Sequence[Component], accs: dict[str, Acc], where: dict[str, str]
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


class _Planner:
    """One computation of a plan: read the documents, then build each component."""

    def __init__(
        self,
        stack: Stack,
        documents: Sequence[Document],
        policy: RegistryPolicy | None = None,
        remembered: Sequence[RememberedAddition] = (),
        retired: frozenset[str] = frozenset(),
    ) -> None:
        self.stack = stack
        self.by_key = {c.key: c for c in stack.components}
        self.accs = {c.key: Acc() for c in stack.components}
        self.where = {d.name: d.where for d in documents}
        self.order = {d.name: i for i, d in enumerate(documents)}
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.added = added.definitions(documents, remembered)
        self._define(remembered, retired)
        self.registry = _Registry()
        if policy is not None and policy.strict:  # the function Input's: it holds whatever the documents say
            self.registry.policies.append(
                Policy(INPUT_POLICY, f"{INPUT_POLICY}: spec.registry", policy.allowedRegistries)
            )
        self.drivers: dict[str, tuple[DriverOverride, str]] = {}
        self.found: list[images.ImageSeen] = []
        self.held = 0  # what the plan holds of the documents, serialized (see plan())
        self.driver_provenance: dict[str, dict[str, str]] = {}
        for d in documents:
            self._read(d)

    def _define(self, remembered: Sequence[RememberedAddition], retired: frozenset[str]) -> None:
        """Each added component as its defining entry (or the memory) gives it, credited to its document."""
        before = {r.key for r in remembered}
        for key, defn in self.added.items():
            comp = self.by_key[key] = added.component(defn)
            acc = self.accs[key] = Acc()
            acc.touch(defn.document, "state")
            acc.touch(defn.document, "chart" if comp.is_release else "manifest")
            if comp.is_release:
                acc.touch(defn.document, "values")
            if defn.remembered is None:
                continue
            self.where.setdefault(defn.document, defn.where)
            new = [k for k, d in self.added.items() if d.document == defn.document and k not in before]
            acc.state, warning = added.remembered_state(defn, retired, new)
            acc.state_by = defn.document
            if warning is not None:
                self.warnings.append(warning)
            elif defn.remembered.state != REMOVED:
                self.notes.append(
                    f"components.{key}: added by {defn.document}, which is retired: {key} leaves the cluster "
                    "(after what depends on it)"
                )

    def _read(self, d: Document) -> None:
        for key, over in d.doc.components.items():
            at = f"{d.where}.components.{key}"
            added.collision(key, over, at)
            comp = self.by_key.get(key)
            if comp is None:
                self._absent(d, key, at, over)
                continue
            acc = self.accs[key]
            defn = self.added.get(key)
            if defn is not None and defn.remembered is None and defn.document == d.name:
                if over.state is not None:  # the defining entry: the rest is the component itself
                    acc.state, acc.state_by = over.state, d.name
                continue
            if defn is not None and over.addition_fields():
                raise InputError(
                    f"{at}.{over.addition_fields()[0]}: {key} is added by {defn.document} ({defn.where}); one "
                    "document adds a component, others change its state, values or manifest"
                )
            _check_fields(comp, over, at)
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

    def _absent(self, d: Document, key: str, at: str, over: ComponentOverride) -> None:
        """A component this stack lacks: skipped when the document also selects stacks that have it."""
        if over.model_fields_set == {"state"} and over.state == REMOVED and key not in added.generated_keys():
            # An added component removed and gone: nothing defines it any more.
            self.notes.append(f"{at}.state: Removed, and no component {key} is here: nothing to remove")
            return
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

    def _version(self, comp: Component, acc: Acc, version: str, document: str, at: str) -> None:
        assert comp.chart is not None, "checked: only Releases take a version"
        if version == comp.chart.version:
            if acc.version is None:
                self.warnings.append(
                    f"{at}.version: {version} is the generated version already; the pin is redundant "
                    f"and would hold {comp.key} back from future releases: remove it"
                )
            acc.version = None  # back to the generated version, whatever an earlier document pinned
        else:
            acc.version = version
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
        by_mirrors = mirrors_key(mirrors)  # see built
        self.held += len(by_mirrors)
        drivers = self._driver_components(mirrors)
        states = {k: a.state for k, a in self.accs.items()} | {c.key: MANAGED for c, _ in drivers}
        comps = [*self.stack.components, *(self.by_key[key] for key in self.added)]
        added.check(self.by_key, self.added, self.stack.id)
        _check_removed(states, [*comps, *(c for c, _ in drivers)], self.accs, self.where)
        operator_layers = self._operator_layers(states)
        planned: list[Planned] = []
        provenance: dict[str, dict[str, str]] = {}
        for comp in comps:
            acc = self.accs[comp.key]
            # A Removed component stays composed as it was until its dependents
            # are gone (compose orders the removal): keep its overrides, e.g.
            # the mirror it installs from, rather than the generated body.
            if acc.state in (MANAGED, REMOVED):
                layers = acc.patches
                if comp.is_release and comp.key == self.stack.driver.operator:
                    layers = operator_layers + layers
                layered = layers_key(layers)
                self.held += len(layered)
                new, seen = built(self.stack, comp, acc, layers, mirrors, by_mirrors, layered)
                self.found.extend(seen)
                changed = tuple(sorted(acc.changed, key=lambda name: self.order.get(name, -1)))
                if new is comp and acc.state == MANAGED and not changed:
                    planned.append(_unchanged(self.stack)[comp.key])
                else:
                    planned.append(Planned(new, acc.state, changed))
            else:
                # Not ours to change any more: the generated body (Observe-only
                # when it was installed), changed only by the document that said so.
                planned.append(Planned(comp, acc.state, (acc.state_by,)))
                acc.provenance = {"state": acc.state_by}
            if acc.provenance:
                provenance[comp.key] = acc.provenance  # this planner's own: nothing writes it any more
        planned += [Planned(c, MANAGED, (document,)) for c, document in drivers]
        provenance.update(self.driver_provenance)
        if mirrors.strict:
            self._images_declared(mirrors, states)
            managed = [p.component for p in planned if p.state == MANAGED]
            strict.enforce(self.stack, mirrors, managed, self.found, self.where, len(self.order))
        additions = tuple(
            Added(key, defn.document, states[key], defn.entry, self.by_key[key].chart)
            for key, defn in self.added.items()
        )
        return Plan(
            tuple(planned), tuple(self.warnings), tuple(self.notes), provenance, tuple(self.found), mirrors, additions
        )

    def _images_declared(self, mirrors: Mirrors, states: dict[str, State]) -> None:
        """Under strict, an added chart must say which images it runs: the function knows nothing of its chart."""
        for key, defn in self.added.items():
            if defn.over.chart is not None and defn.over.images is None and states[key] == MANAGED:
                raise InputError(
                    f"{defn.where}.images: registry.strict (set by {', '.join(mirrors.strict_by)}): the images "
                    f"chart {defn.over.chart.name} runs are unknown here (an added chart has no chart inventory, "
                    "so its defaults cannot be read); declare each image the chart runs under images, with its "
                    "value written out in values (images: [] if it runs none of its own), so rules rewrite them "
                    "and strict checks them"
                )


# Distinct (stack, document set, policy) triples in use at once: a few per fleet.
_CACHE: BoundedCache[tuple[Stack, Fingerprint, RegistryPolicy | None], Plan] = BoundedCache("plans")


@cache  # one per generated stack
def _unchanged(stack: Stack) -> dict[str, Planned]:
    """Each generated component as planned where no document changes it: one object for every plan to share,
    not one more per plan for the cyclic collector to walk while the plan is cached."""
    return {c.key: Planned(c) for c in stack.components}


@cache  # one per generated stack
def _generated(stack: Stack) -> Plan:
    """The plan no document changes: the generated components themselves, and their images."""
    return _Planner(stack, ()).plan()


def prepare(stack: Stack) -> Plan:
    """Read, at start-up, what planning reads of a generated stack whatever the documents; its plan without any.

    Its plan builds every component once, reading what building reads of
    the stack (``build._unlayered``: the components' images, their sizes);
    the strict check reads its hosts and the generated bodies. A server
    restarted for a fleet then computes its first plans as fast as later
    ones.
    """
    strict.prepare(stack)
    return _generated(stack)


def plan(stack: Stack, found: Collected) -> Plan:
    """The stack as the documents that apply to one XR leave it, computed once per (stack, documents, policy).

    With no document and no policy, the generated stack exactly (the same
    objects, whose protobuf the renderer holds ready).
    """
    if not found.documents and found.policy is None and not found.additions:
        return _generated(stack)
    key = (stack, found.fingerprint, found.policy)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    planner = _Planner(stack, found.documents, found.policy, found.additions, found.retired)
    computed = planner.plan()
    # A plan holds copies of the generated values it changed and what the
    # documents merge into them and set: weighed as both, at their serialized
    # size (the documents' layers and registry settings as the keys its
    # builds were looked up by, made anyway: see built).
    weight = (sum(sizes(stack).values()) + planner.held) * PYTHON_FACTOR
    return _CACHE.put(key, computed, weight)
