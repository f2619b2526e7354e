"""Build-time resolver for NVIDIA AI Cluster Runtime (AICR) v0.11.1 recipes.

It reproduces ``aicr recipe`` followed by the values and manifest part of ``aicr bundle``
(Helm deployer, no ``--set``, no node-scheduling flags), as specified in
``aicr/RESOLUTION.md`` of the reference sources (section numbers below refer to it).
``./dev refresh`` runs it on an AICR checkout to write the AICR lock (:mod:`generator.lock`).

Load the data directory once with :func:`load`, then call :func:`resolve` per query.
Every result is a deep copy: resolving one query never changes what another sees
(AICR's own Go resolver aliases loaded data between queries, §13 A4).
"""

from __future__ import annotations

import copy
import heapq
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from function.values import deep_merge

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

__all__ = [
    "AicrError",
    "Component",
    "Manifest",
    "Query",
    "Recipe",
    "RecipeData",
    "load",
    "load_yaml",
    "resolve",
]


class AicrError(Exception):
    """Any failure to load or resolve AICR recipe data; the message names the file and field."""


# ============================================================================ YAML (§12.2)


class _StrictLoader(_BaseLoader):
    """PyYAML safe loader that refuses what YAML 1.1 and Go's yaml.v3 read differently.

    AICR decodes with yaml.v3; PyYAML implements YAML 1.1. Rather than trust either, plain
    scalars that the two could disagree on are rejected with a "quote it" message (§12.2):
    yes/no/on/off, timestamps, octal-looking and sexagesimal numbers, numbers with ``_``,
    exponent floats. Duplicate mapping keys are rejected too (yaml.v3 refuses them).
    """


def _scalar_error(node: yaml.ScalarNode, what: str) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        None, None, f"ambiguous plain scalar {node.value!r} ({what}); quote it", node.start_mark
    )


def _construct_bool(_loader: _StrictLoader, node: yaml.ScalarNode) -> bool:
    if node.value not in ("true", "True", "TRUE", "false", "False", "FALSE"):
        raise _scalar_error(node, "YAML 1.1 boolean, a string in Go")
    return str(node.value).lower() == "true"


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    text = node.value.lstrip("+-")
    if ":" in text or "_" in text or (len(text) > 1 and text[0] == "0" and text[1] not in "xXbB"):
        raise _scalar_error(node, "sexagesimal, octal or underscored integer")
    return int(loader.construct_yaml_int(node))


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    if ":" in node.value or "_" in node.value or "e" in node.value.lower().replace("inf", ""):
        raise _scalar_error(node, "sexagesimal, underscored or exponent float")
    return float(loader.construct_yaml_float(node))


def _construct_timestamp(_loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
    raise _scalar_error(node, "timestamp")


_GO_NUMBER = re.compile(r"^[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)[eE][-+]?\d+$|^[-+]?0[oO][0-7_]+$")


def _construct_str(loader: _StrictLoader, node: yaml.ScalarNode) -> str:
    if node.style is None and _GO_NUMBER.match(node.value):
        raise _scalar_error(node, "a string in YAML 1.1, a number in Go")
    return str(loader.construct_yaml_str(node))


def _construct_map(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate mapping key {key_node.value!r}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_yaml_map(node)


for _tag, _fn in {
    "bool": _construct_bool,
    "int": _construct_int,
    "float": _construct_float,
    "timestamp": _construct_timestamp,
    "str": _construct_str,
    "map": _construct_map,
}.items():
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _fn)  # type: ignore[arg-type]


def load_yaml(text: str, where: str, *, multi: bool = False) -> list[Any]:
    """Parse ``text`` (all documents when ``multi``); ``where`` names the file in errors."""
    try:
        if multi:
            return list(yaml.load_all(text, Loader=_StrictLoader))
        return [yaml.load(text, Loader=_StrictLoader)]  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise AicrError(f"{where}: invalid YAML: {exc}") from exc


# ============================================================================ public types


@dataclass(frozen=True)
class Query:
    """The user's criteria (``aicr recipe --service … --nodes``); ``any`` leaves a field open."""

    service: str
    accelerator: str = "any"
    os: str = "any"
    intent: str = "any"
    platform: str = "any"
    nodes: int = 0


@dataclass
class Manifest:
    """One rendered ``manifestFiles`` entry."""

    path: str  # relative to the recipes dir, as written in the overlay
    objects: list[dict[str, Any]]  # the YAML documents of the rendered template, null ones dropped
    text: str = ""  # the rendered template text


@dataclass
class Component:
    """One resolved componentRef, with its bundle-time values and manifests (§7, §8)."""

    name: str  # also the Helm release name
    type: str  # Helm | Kustomize
    chart: str  # what helm receives (registry defaultChart's last segment, else the name)
    source: str  # Helm repo URL or oci:// prefix; empty for a manifest-only component
    version: str  # verbatim, a leading "v" kept (§12.1.5)
    namespace: str
    values: dict[str, Any]  # values.yaml + variant valuesFile + overrides, deep-merged; nulls kept
    manifests: list[Manifest]
    dependency_refs: list[str]
    enabled: bool  # False when overrides.enabled is boolean false (§8.1)
    values_file: str = ""
    tag: str = ""  # Kustomize only
    path: str = ""  # Kustomize only

    @property
    def manifest_only(self) -> bool:
        """No chart to install, only manifests (§12.1.6)."""
        return self.type != "Kustomize" and not self.source

    @property
    def oci(self) -> bool:
        return self.source.startswith("oci://")

    @property
    def chart_version(self) -> str:
        """``.Chart.Version`` in manifests (§8.4)."""
        return _chart_version(self.version)


def _chart_version(version: str) -> str:
    """One leading ``v`` removed, ``0.1.0`` when empty (§8.4, §13 A14)."""
    return version.removeprefix("v") if version else "0.1.0"


@dataclass
class Recipe:
    """The resolved recipe (AICR's RecipeResult) with every component's values and manifests."""

    query: Query  # normalised: trimmed, lower-cased, aliases resolved
    applied_overlays: list[str]  # "base" first, then every merged overlay in merge order
    constraints: list[dict[str, Any]]  # sorted by name
    components: dict[str, Component]  # by name, sorted by name; disabled ones included
    deployment_order: list[str]  # topological, alphabetical tie-break; disabled ones included
    validation: dict[str, Any] = field(default_factory=dict)  # merged validation phases

    @property
    def install_order(self) -> list[str]:
        """``deployment_order`` without disabled components: what the bundle installs (§8.1)."""
        return [name for name in self.deployment_order if self.components[name].enabled]


# ============================================================================ data model (§2)

_CRITERIA_VALUES: dict[str, tuple[str, ...]] = {
    "service": ("any", "eks", "gke", "aks", "oke", "kind"),
    "accelerator": ("any", "h100", "gb200", "b200", "a100", "l40"),
    "os": ("any", "ubuntu", "rhel", "cos", "amazonlinux"),
    "intent": ("any", "training", "inference"),
    "platform": ("any", "dynamo", "kubeflow"),
}
_ALIASES: dict[str, dict[str, str]] = {
    "service": {"self-managed": "any", "self": "any", "vanilla": "any"},
    "os": {"al2": "amazonlinux", "al2023": "amazonlinux"},
}
# _Ref fields where a later non-empty string wins (§6)
_STRING_FIELDS = (
    *("namespace", "chart", "type", "source", "version"),
    *("tag", "values_file", "path", "health_check_asserts"),
)
_PHASES = ("readiness", "deployment", "performance", "conformance")
_CONSTRAINT_KEYS = ("name", "value", "severity", "remediation", "unit")


@dataclass
class _Ref:
    """A ``componentRefs[]`` entry as written (field names follow the YAML keys, §2.4)."""

    name: str
    namespace: str = ""
    chart: str = ""
    type: str = ""
    source: str = ""
    version: str = ""
    tag: str = ""
    values_file: str = ""
    path: str = ""
    health_check_asserts: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    dependency_refs: list[str] = field(default_factory=list)
    manifest_files: list[str] = field(default_factory=list)
    patches: list[str] = field(default_factory=list)
    expected_resources: list[Any] = field(default_factory=list)
    cleanup: bool = False


@dataclass
class _Overlay:
    name: str
    file: str
    base: str  # parent recipe name; "" means the root base
    criteria: dict[str, Any] | None  # None: never matches directly (§4)
    constraints: list[dict[str, Any]]
    refs: list[_Ref]
    validation: dict[str, Any] | None


@dataclass
class _RegistryEntry:
    name: str
    helm: dict[str, str]
    kustomize: dict[str, str]


def _yaml_key(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(part.capitalize() for part in rest)


class _Reader:
    """Typed access to a decoded YAML mapping, with errors naming the file and field."""

    def __init__(self, data: Any, where: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise AicrError(f"{where}: expected a mapping, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise AicrError(f"{self.where}.{key}: expected a string, got {value!r} (quote it)")
        return value

    def texts(self, key: str) -> list[str]:
        items = self.items(key)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise AicrError(f"{self.where}.{key}[{i}]: expected a string, got {item!r}")
        return items

    def items(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise AicrError(f"{self.where}.{key}: expected a list, got {type(value).__name__}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        return _Reader(self.data.get(key), f"{self.where}.{key}").data

    def sub(self, key: str) -> _Reader:
        return _Reader(self.data.get(key), f"{self.where}.{key}")


def _parse_ref(raw: Any, where: str) -> _Ref:
    r = _Reader(raw, where)
    name = r.text("name")
    if not name:
        raise AicrError(f"{where}.name: a componentRef needs a name")
    cleanup = r.data.get("cleanup", False)
    if not isinstance(cleanup, bool):
        raise AicrError(f"{where}.cleanup: expected a boolean, got {cleanup!r}")
    ref = _Ref(
        name=name,
        overrides=r.mapping("overrides"),
        dependency_refs=r.texts("dependencyRefs"),
        manifest_files=r.texts("manifestFiles"),
        patches=r.texts("patches"),
        expected_resources=r.items("expectedResources"),
        cleanup=cleanup,
    )
    for attr in _STRING_FIELDS:
        setattr(ref, attr, r.text(_yaml_key(attr)))
    return ref


def _parse_constraints(items: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        r = _Reader(raw, f"{where}[{i}]")
        if not r.text("name"):
            raise AicrError(f"{where}[{i}].name: a constraint needs a name")
        out.append({key: r.text(key) for key in _CONSTRAINT_KEYS if r.text(key)})
    return out


def _parse_overlay(doc: Any, rel: str) -> _Overlay | None:
    r = _Reader(doc, rel)
    kind = r.text("kind")
    if kind and kind != "RecipeMetadata":
        return None  # e.g. ValidatorCatalog (§3)
    name = r.sub("metadata").text("name")
    if not name:
        raise AicrError(f"{rel}: metadata.name is required")
    spec = r.sub("spec")
    criteria: dict[str, Any] | None = None
    if spec.data.get("criteria") is not None:
        c = spec.sub("criteria")
        criteria = {key: c.text(key) for key in _CRITERIA_VALUES}
        nodes = c.data.get("nodes", 0) or 0
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0:
            raise AicrError(f"{rel}.spec.criteria.nodes: expected a non-negative integer, got {nodes!r}")
        criteria["nodes"] = nodes
    refs = [_parse_ref(raw, f"{rel}.spec.componentRefs[{i}]") for i, raw in enumerate(spec.items("componentRefs"))]
    constraints = _parse_constraints(spec.items("constraints"), f"{rel}.spec.constraints")
    for what, names in (("componentRef", [x.name for x in refs]), ("constraint", [c["name"] for c in constraints])):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise AicrError(f"{rel}: duplicate {what} name(s) {', '.join(dupes)}")
    validation = None
    if spec.data.get("validation") is not None:
        v = spec.sub("validation")
        # Only the four phases exist in Go's struct; a null phase counts as unset.
        validation = {p: v.mapping(p) for p in _PHASES if v.data.get(p) is not None}
    base = spec.text("base")
    return _Overlay(name, rel, "" if base == "base" else base, criteria, constraints, refs, validation)


# ============================================================================ loading (§3)


class RecipeData:
    """A loaded recipes directory: overlays, registry and raw component files. Treat as read-only."""

    def __init__(
        self,
        root: Path,
        base: _Overlay,
        overlays: dict[str, _Overlay],
        registry: dict[str, _RegistryEntry],
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
        return copy.deepcopy(_Reader(doc, rel).data)


def load(data_dir: Path) -> RecipeData:
    """Load ``overlays/*.yaml``, ``registry.yaml`` and ``components/*/{,manifests/}*.yaml`` (§3)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise AicrError(f"AICR recipes directory {root} not found")

    files: dict[str, str] = {}
    for pattern in ("components/*/*.yaml", "components/*/manifests/*.yaml"):
        for p in sorted(root.glob(pattern)):
            files[p.relative_to(root).as_posix()] = p.read_text(encoding="utf-8")

    base: _Overlay | None = None
    overlays: dict[str, _Overlay] = {}
    for p in sorted(root.glob("overlays/*.yaml")):  # lexical, like Go's WalkDir
        rel = p.relative_to(root).as_posix()
        if p.name in ("registry.yaml", "data-v1.yaml"):
            continue
        overlay = _parse_overlay(load_yaml(p.read_text(encoding="utf-8"), rel)[0], rel)
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
    reg = _Reader(load_yaml(reg_path.read_text(encoding="utf-8"), "registry.yaml")[0], "registry.yaml")
    registry: dict[str, _RegistryEntry] = {}
    for i, raw in enumerate(reg.items("components")):
        c = _Reader(raw, f"registry.yaml.components[{i}]")
        helm, kust = c.sub("helm"), c.sub("kustomize")
        entry = _RegistryEntry(
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
    for name, allowed in _CRITERIA_VALUES.items():
        raw = getattr(query, name)
        if not isinstance(raw, str):
            raise AicrError(f"query {name}: expected a string, got {raw!r}")
        value = raw.strip().lower() or "any"
        value = _ALIASES.get(name, {}).get(value, value)
        if value not in allowed:
            raise AicrError(f"query {name}={raw!r} is not one of: {', '.join(allowed)}")
        out[name] = value
    if not isinstance(query.nodes, int) or isinstance(query.nodes, bool) or query.nodes < 0:
        raise AicrError(f"query nodes={query.nodes!r} must be an integer >= 0")
    return replace(query, **out)


def _specificity(criteria: dict[str, Any]) -> int:
    """Fields that are set and not ``any`` (the intended count, §12.1.2 / §13 A1)."""
    count = sum(1 for name in _CRITERIA_VALUES if criteria[name] not in ("", "any"))
    return count + (1 if criteria["nodes"] else 0)


def _matches(criteria: dict[str, Any], query: Query) -> bool:
    for name in _CRITERIA_VALUES:
        want = criteria[name]
        if want in ("", "any"):
            continue  # a generic overlay field matches anything
        if getattr(query, name) != want:  # includes a generic query vs a specific overlay
            return False
    return bool(criteria["nodes"] in (0, query.nodes))


def _chain(data: RecipeData, overlay: _Overlay) -> list[_Overlay]:
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


def _merge_ref(into: _Ref, later: _Ref) -> None:
    """Level-A merge of two refs with the same name (§6)."""
    for attr in _STRING_FIELDS:
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
    refs: dict[str, _Ref]
    validation: dict[str, Any] | None

    def merge(self, overlay: _Overlay) -> None:
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


def _topo_order(refs: dict[str, _Ref]) -> list[str]:
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


def _apply_registry(ref: _Ref, entry: _RegistryEntry | None) -> None:
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


def _values(data: RecipeData, ref: _Ref) -> dict[str, Any]:
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


def _render_manifests(data: RecipeData, ref: _Ref, chart: str, values: dict[str, Any]) -> list[Manifest]:
    from generator import gotemplate  # imported here: gotemplate imports AicrError from this module

    template_data = gotemplate.GoStruct(
        Values={ref.name: values},
        Release=gotemplate.GoStruct(Namespace=ref.namespace, Service="Helm"),
        Chart=gotemplate.GoStruct(Name=chart, Version=_chart_version(ref.version)),
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
    if not any(getattr(q, name) != "any" for name in _CRITERIA_VALUES) and not q.nodes:
        raise AicrError("query has no criteria; AICR refuses a query of specificity 0")

    # Steps 1-2: match, then sort by specificity with the name as tie-break (§13 A2).
    matched = [o for o in data.overlays.values() if o.criteria is not None and _matches(o.criteria, q)]
    matched.sort(key=lambda o: (_specificity(o.criteria or {}), o.name))
    if strict:
        for name in ("service", "platform"):
            want = getattr(q, name)
            if want != "any" and not any((o.criteria or {})[name] == want for o in matched):
                asked = ", ".join(f"{n}={getattr(q, n)}" for n in _CRITERIA_VALUES if getattr(q, n) != "any")
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
