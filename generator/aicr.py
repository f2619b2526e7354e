"""Build-time resolver for NVIDIA AI Cluster Runtime (AICR) v0.11.1 recipes.

It reproduces ``aicr recipe`` followed by the values and manifest part of ``aicr bundle``
(Helm deployer, no ``--set``, no node-scheduling flags), as specified in
``aicr/RESOLUTION.md`` of the reference sources (section numbers below refer to it).
``./dev refresh`` runs it on an AICR checkout to write the AICR lock (:mod:`generator.lock`).

Load the data directory once with :func:`load`, then call :func:`resolve` per query.
The recipe data it works on is :mod:`generator.aicr_recipes`; AICR's YAML is read
by :mod:`generator.aicr_yaml`; manifests render through :mod:`generator.gotemplate`.
Every result is a deep copy: resolving one query never changes what another sees
(AICR's own Go resolver aliases loaded data between queries, §13 A4).
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from function.values import deep_merge
from generator import gotemplate
from generator.aicr_recipes import (
    ALIASES,
    CRITERIA_VALUES,
    STRING_FIELDS,
    Component,
    Manifest,
    Overlay,
    Query,
    Reader,
    Recipe,
    Ref,
    RegistryEntry,
    chart_version,
    parse_overlay,
)
from generator.aicr_yaml import AicrError, load_yaml

__all__ = ["RecipeData", "deep_merge", "load", "resolve"]


# ============================================================================ loading (§3)


class RecipeData:
    """A loaded recipes directory: overlays, registry and raw component files. Treat as read-only."""

    def __init__(
        self,
        root: Path,
        base: Overlay,
        overlays: dict[str, Overlay],
        registry: dict[str, RegistryEntry],
        files: dict[str, str],
    ) -> None:
        self.root = root
        self.base = base
        self.overlays = overlays
        self.registry = registry
        self.files = files  # components/**: relative path -> text
        self._parsed: dict[tuple[str, str], list[Any]] = {}  # (multi, text) -> YAML documents

    def parsed(self, text: str, where: str, *, multi: bool) -> list[Any]:
        """Parse once per distinct text; callers must deep-copy what they keep."""
        key = (str(multi), text)
        if key not in self._parsed:
            self._parsed[key] = load_yaml(text, where, multi=multi)
        return self._parsed[key]

    def values_file(self, rel: str) -> dict[str, Any]:
        if rel not in self.files:
            raise AicrError(f"values file {rel} not found in {self.root}")
        doc = self.parsed(self.files[rel], rel, multi=False)[0]
        return copy.deepcopy(Reader(doc, rel).data)


def load(data_dir: Path) -> RecipeData:
    """Load ``overlays/*.yaml``, ``registry.yaml`` and ``components/*/{,manifests/}*.yaml`` (§3)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise AicrError(f"AICR recipes directory {root} not found")

    files: dict[str, str] = {}
    for pattern in ("components/*/*.yaml", "components/*/manifests/*.yaml"):
        for p in sorted(root.glob(pattern)):
            files[p.relative_to(root).as_posix()] = p.read_text(encoding="utf-8")

    base: Overlay | None = None
    overlays: dict[str, Overlay] = {}
    for p in sorted(root.glob("overlays/*.yaml")):  # lexical, like Go's WalkDir
        rel = p.relative_to(root).as_posix()
        if p.name in ("registry.yaml", "data-v1.yaml"):
            continue
        overlay = parse_overlay(load_yaml(p.read_text(encoding="utf-8"), rel)[0], rel)
        if overlay is None:
            continue
        if p.name == "base.yaml":
            base = overlay
        else:
            overlays[overlay.name] = overlay  # a duplicate name: the file walked last wins
    if base is None:
        raise AicrError(f"{root}/overlays/base.yaml: no base recipe")
    try:
        _topo_order({r.name: r for r in base.refs})
    except AicrError as exc:
        raise AicrError(f"{base.file}: {exc}") from exc

    reg_path = root / "registry.yaml"
    if not reg_path.is_file():
        raise AicrError(f"{reg_path} not found")
    reg = Reader(load_yaml(reg_path.read_text(encoding="utf-8"), "registry.yaml")[0], "registry.yaml")
    registry: dict[str, RegistryEntry] = {}
    for i, raw in enumerate(reg.items("components")):
        c = Reader(raw, f"registry.yaml.components[{i}]")
        helm, kust = c.sub("helm"), c.sub("kustomize")
        entry = RegistryEntry(
            name=c.text("name"),
            helm={k: helm.text(k) for k in ("defaultRepository", "defaultChart", "defaultVersion", "defaultNamespace")},
            kustomize={k: kust.text(k) for k in ("defaultSource", "defaultPath", "defaultTag")},
        )
        if not entry.name:
            raise AicrError(f"registry.yaml.components[{i}].name is required")
        if any(entry.helm.values()) and any(entry.kustomize.values()):
            raise AicrError(f"registry.yaml: component {entry.name} has both helm and kustomize settings")
        registry[entry.name] = entry
    return RecipeData(root, base, overlays, registry, files)


# ============================================================================ matching (§4, §5)


def _normalise(query: Query) -> Query:
    """Trim, lower-case, resolve aliases and validate the query values (§2.2)."""
    out: dict[str, Any] = {}
    for name, allowed in CRITERIA_VALUES.items():
        raw = getattr(query, name)
        if not isinstance(raw, str):
            raise AicrError(f"query {name}: expected a string, got {raw!r}")
        value = raw.strip().lower() or "any"
        value = ALIASES.get(name, {}).get(value, value)
        if value not in allowed:
            raise AicrError(f"query {name}={raw!r} is not one of: {', '.join(allowed)}")
        out[name] = value
    if not isinstance(query.nodes, int) or isinstance(query.nodes, bool) or query.nodes < 0:
        raise AicrError(f"query nodes={query.nodes!r} must be an integer >= 0")
    return replace(query, **out)


def _specificity(criteria: dict[str, Any]) -> int:
    """Fields that are set and not ``any`` (the intended count, §12.1.2 / §13 A1)."""
    count = sum(1 for name in CRITERIA_VALUES if criteria[name] not in ("", "any"))
    return count + (1 if criteria["nodes"] else 0)


def _matches(criteria: dict[str, Any], query: Query) -> bool:
    for name in CRITERIA_VALUES:
        want = criteria[name]
        if want in ("", "any"):
            continue  # a generic overlay field matches anything
        if getattr(query, name) != want:  # includes a generic query vs a specific overlay
            return False
    return bool(criteria["nodes"] in (0, query.nodes))


def _chain(data: RecipeData, overlay: Overlay) -> list[Overlay]:
    """``overlay`` and its ``spec.base`` ancestors, root first (the root base excluded)."""
    chain = [overlay]
    seen = {overlay.name}
    while chain[-1].base:
        parent = chain[-1].base
        if parent not in data.overlays:
            raise AicrError(f"{chain[-1].file}: spec.base: recipe {parent!r} not found")
        if parent in seen:
            raise AicrError(f"{chain[-1].file}: spec.base: inheritance cycle through {parent!r}")
        seen.add(parent)
        chain.append(data.overlays[parent])
    return chain[::-1]


# ============================================================================ merging (§5 step 5, §6)


def _merge_ref(into: Ref, later: Ref) -> None:
    """Level-A merge of two refs with the same name (§6)."""
    for attr in STRING_FIELDS:
        if value := getattr(later, attr):
            setattr(into, attr, value)  # non-empty wins; "" inherits
    if later.overrides:
        # One level only: a later top-level key replaces the earlier subtree whole (§7.3).
        into.overrides = {**into.overrides, **copy.deepcopy(later.overrides)}
    for attr in ("dependency_refs", "patches", "expected_resources"):
        if value := getattr(later, attr):
            setattr(into, attr, copy.deepcopy(value))  # replaced, never unioned (§13 A3)
    earlier = list(into.manifest_files)
    # Additive; de-duplicated against the earlier list only, as AICR does (§14).
    into.manifest_files = earlier + [m for m in later.manifest_files if m not in earlier]
    into.cleanup = into.cleanup or later.cleanup


@dataclass
class _Accumulator:
    constraints: dict[str, dict[str, Any]]
    refs: dict[str, Ref]
    validation: dict[str, Any] | None

    def merge(self, overlay: Overlay) -> None:
        for c in overlay.constraints:
            self.constraints[c["name"]] = copy.deepcopy(c)  # last writer wins, not strictest (§13 A7)
        for ref in overlay.refs:
            if ref.name in self.refs:
                _merge_ref(self.refs[ref.name], ref)
            else:
                self.refs[ref.name] = copy.deepcopy(ref)  # inserted exactly as written
        if overlay.validation is not None:
            if self.validation is None:
                self.validation = copy.deepcopy(overlay.validation)
            else:  # per phase, each phase replaced whole
                self.validation.update(copy.deepcopy(overlay.validation))


def _topo_order(refs: dict[str, Ref]) -> list[str]:
    """Check dependencyRefs (§5 step 6) and return Kahn's order, alphabetical tie-break (step 7)."""
    dependents: dict[str, list[str]] = {name: [] for name in refs}
    for name in sorted(refs):
        for dep in refs[name].dependency_refs:
            if dep not in refs:
                raise AicrError(f"component {name!r} depends on {dep!r}, which is not in the recipe")
            dependents[dep].append(name)
    # A duplicate dependency counts (and is decremented) twice, as in AICR.
    in_degree = {name: len(ref.dependency_refs) for name, ref in refs.items()}
    ready = sorted(name for name, degree in in_degree.items() if degree == 0)
    order: list[str] = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for dependent in dependents[name]:
            in_degree[dependent] -= 1
            if in_degree[dependent] == 0:
                heapq.heappush(ready, dependent)
    if len(order) != len(refs):
        stuck = sorted(set(refs) - set(order))
        raise AicrError(f"dependency cycle among components: {', '.join(stuck)}")
    return order


def _apply_registry(ref: Ref, entry: RegistryEntry | None) -> None:
    """Fill empty fields only from the registry (§5 step 8); the ref always wins (§13 A10)."""
    if entry is None:
        return
    if not ref.type:
        ref.type = "Kustomize" if entry.kustomize["defaultSource"] else "Helm"
    if ref.type == "Helm":
        defaults = {
            "source": entry.helm["defaultRepository"],
            "version": entry.helm["defaultVersion"],
            "namespace": entry.helm["defaultNamespace"],
            # "nvidia/gpu-operator" -> "gpu-operator": the prefix is a repo alias (§2.6)
            "chart": entry.helm["defaultChart"].rsplit("/", 1)[-1],
        }
    elif ref.type == "Kustomize":
        k = entry.kustomize
        defaults = {"source": k["defaultSource"], "tag": k["defaultTag"], "path": k["defaultPath"]}
    else:
        return
    for attr, value in defaults.items():
        if not getattr(ref, attr) and value:
            setattr(ref, attr, value)


# ============================================================================ bundle time (§7, §8)


def _values(data: RecipeData, ref: Ref) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if ref.values_file:
        own = f"components/{ref.name}/values.yaml"
        if ref.values_file != own and own in data.files:
            # A variant file stacks on the component's values.yaml only, never on an
            # earlier variant: valuesFile is a single replaceable string (§7, §13 A9).
            values = data.values_file(own)
        values = deep_merge(values, data.values_file(ref.values_file))
    # Without a valuesFile, values.yaml is NOT loaded: overrides alone (§7 step 5).
    return deep_merge(values, ref.overrides)


def _render_manifests(data: RecipeData, ref: Ref, chart: str, values: dict[str, Any]) -> list[Manifest]:
    template_data = gotemplate.GoStruct(
        Values={ref.name: values},
        Release=gotemplate.GoStruct(Namespace=ref.namespace, Service="Helm"),
        Chart=gotemplate.GoStruct(Name=chart, Version=chart_version(ref.version)),
    )
    manifests: list[Manifest] = []
    basenames: dict[str, str] = {}
    for rel in ref.manifest_files:
        if rel not in data.files:
            raise AicrError(f"component {ref.name}: manifest file {rel} not found in {data.root}")
        base = rel.rsplit("/", 1)[-1]
        if base in basenames:  # the bundle writes <component>/manifests/<basename> (§13 A13)
            raise AicrError(f"component {ref.name}: manifests {basenames[base]} and {rel} share a file name")
        basenames[base] = rel
        text = gotemplate.render(data.files[rel], template_data, name=rel)
        docs = data.parsed(text, f"{rel} (rendered for {ref.name})", multi=True)
        objects = [copy.deepcopy(doc) for doc in docs if doc is not None]
        for i, obj in enumerate(objects):
            if not isinstance(obj, dict):
                raise AicrError(f"{rel} (rendered for {ref.name}): document {i} is not a mapping")
        if objects:  # a template that renders to nothing is dropped (§8.5 step 3)
            manifests.append(Manifest(rel, objects, text))
    return manifests


# ============================================================================ resolve


def resolve(data: RecipeData, query: Query, *, strict: bool = True) -> Recipe:
    """Resolve ``query`` against ``data`` (§5), then compute values and manifests (§7, §8).

    With ``strict`` (the default), a query naming a service or platform that no overlay
    matches is an error instead of AICR's silent fallback to a generic recipe: e.g. GKE
    without ``os=cos`` (§13 A12), or ``platform=dynamo`` without ``os`` on EKS (§4).
    """
    q = _normalise(query)
    if not any(getattr(q, name) != "any" for name in CRITERIA_VALUES) and not q.nodes:
        raise AicrError("query has no criteria; AICR refuses a query of specificity 0")

    # Steps 1-2: match, then sort by specificity with the name as tie-break (§13 A2).
    matched = [o for o in data.overlays.values() if o.criteria is not None and _matches(o.criteria, q)]
    matched.sort(key=lambda o: (_specificity(o.criteria or {}), o.name))
    if strict:
        for name in ("service", "platform"):
            want = getattr(q, name)
            if want != "any" and not any((o.criteria or {})[name] == want for o in matched):
                asked = ", ".join(f"{n}={getattr(q, n)}" for n in CRITERIA_VALUES if getattr(q, n) != "any")
                raise AicrError(
                    f"no AICR overlay for {name}={want} matches the query ({asked}); AICR would silently "
                    "fall back to a generic recipe (RESOLUTION.md §4, §13 A12: e.g. GKE needs os=cos, "
                    "the dynamo/kubeflow leaves need os, accelerator and intent)"
                )

    # Steps 3-5: start from a copy of the base, merge each match's chain once, in order.
    base = data.base
    acc = _Accumulator(
        constraints={c["name"]: copy.deepcopy(c) for c in base.constraints},
        refs={r.name: copy.deepcopy(r) for r in base.refs},
        validation=copy.deepcopy(base.validation),
    )
    applied = ["base"]
    processed: set[str] = set()
    for overlay in matched:
        for member in _chain(data, overlay):  # chain members merge even if their criteria don't match
            if member.name not in processed:
                processed.add(member.name)
                acc.merge(member)
                applied.append(member.name)

    order = _topo_order(acc.refs)  # steps 6-7
    components: dict[str, Component] = {}
    for name in sorted(acc.refs):
        ref = acc.refs[name]
        _apply_registry(ref, data.registry.get(name))  # step 8, after the sort
        values = _values(data, ref)
        enabled = ref.overrides.get("enabled") is not False  # only a boolean false disables (§8.1)
        chart = ref.chart or ref.name
        components[name] = Component(
            name=name,
            type=ref.type,
            chart=chart,
            source=ref.source,
            version=ref.version,
            namespace=ref.namespace,
            values=values,
            manifests=_render_manifests(data, ref, chart, values) if enabled else [],
            dependency_refs=list(ref.dependency_refs),
            enabled=enabled,
            values_file=ref.values_file,
            tag=ref.tag,
            path=ref.path,
        )
    return Recipe(
        query=q,
        applied_overlays=applied,
        constraints=[acc.constraints[n] for n in sorted(acc.constraints)],
        components=components,
        deployment_order=order,
        validation=acc.validation or {},
    )
