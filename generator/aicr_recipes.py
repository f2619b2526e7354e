"""AICR recipe data (RESOLUTION.md §2): the overlays, component refs and registry as parsed, and the resolved types.

:mod:`generator.aicr` loads a recipes directory into these and resolves queries on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from generator.aicr_yaml import AicrError

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
        return chart_version(self.version)


def chart_version(version: str) -> str:
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

CRITERIA_VALUES: dict[str, tuple[str, ...]] = {
    "service": ("any", "eks", "gke", "aks", "oke", "kind"),
    "accelerator": ("any", "h100", "gb200", "b200", "a100", "l40"),
    "os": ("any", "ubuntu", "rhel", "cos", "amazonlinux"),
    "intent": ("any", "training", "inference"),
    "platform": ("any", "dynamo", "kubeflow"),
}
ALIASES: dict[str, dict[str, str]] = {
    "service": {"self-managed": "any", "self": "any", "vanilla": "any"},
    "os": {"al2": "amazonlinux", "al2023": "amazonlinux"},
}
# Ref fields where a later non-empty string wins (§6)
STRING_FIELDS = (
    *("namespace", "chart", "type", "source", "version"),
    *("tag", "values_file", "path", "health_check_asserts"),
)
_PHASES = ("readiness", "deployment", "performance", "conformance")
_CONSTRAINT_KEYS = ("name", "value", "severity", "remediation", "unit")


@dataclass
class Ref:
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
class Overlay:
    name: str
    file: str
    base: str  # parent recipe name; "" means the root base
    criteria: dict[str, Any] | None  # None: never matches directly (§4)
    constraints: list[dict[str, Any]]
    refs: list[Ref]
    validation: dict[str, Any] | None


@dataclass
class RegistryEntry:
    name: str
    helm: dict[str, str]
    kustomize: dict[str, str]


def _yaml_key(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(part.capitalize() for part in rest)


class Reader:
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
        return Reader(self.data.get(key), f"{self.where}.{key}").data

    def sub(self, key: str) -> Reader:
        return Reader(self.data.get(key), f"{self.where}.{key}")


def _parse_ref(raw: Any, where: str) -> Ref:
    r = Reader(raw, where)
    name = r.text("name")
    if not name:
        raise AicrError(f"{where}.name: a componentRef needs a name")
    cleanup = r.data.get("cleanup", False)
    if not isinstance(cleanup, bool):
        raise AicrError(f"{where}.cleanup: expected a boolean, got {cleanup!r}")
    ref = Ref(
        name=name,
        overrides=r.mapping("overrides"),
        dependency_refs=r.texts("dependencyRefs"),
        manifest_files=r.texts("manifestFiles"),
        patches=r.texts("patches"),
        expected_resources=r.items("expectedResources"),
        cleanup=cleanup,
    )
    for attr in STRING_FIELDS:
        setattr(ref, attr, r.text(_yaml_key(attr)))
    return ref


def _parse_constraints(items: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        r = Reader(raw, f"{where}[{i}]")
        if not r.text("name"):
            raise AicrError(f"{where}[{i}].name: a constraint needs a name")
        out.append({key: r.text(key) for key in _CONSTRAINT_KEYS if r.text(key)})
    return out


def parse_overlay(doc: Any, rel: str) -> Overlay | None:
    r = Reader(doc, rel)
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
        criteria = {key: c.text(key) for key in CRITERIA_VALUES}
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
    return Overlay(name, rel, "" if base == "base" else base, criteria, constraints, refs, validation)
