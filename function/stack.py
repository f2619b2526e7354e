"""The generated stacks: their schema, and loading them.

The dataclasses below are the one definition of a stack's shape. The generator
builds them from ``stacks/`` and writes them (:func:`to_data`) as plain literals
into ``function/generated/<stack id>.py``; the runtime reads those literals back
through the same classes (:func:`from_data`), once per process, and answers
which stack serves a cloud/accelerator pair.

Why frozen stdlib dataclasses validated by pydantic rather than pydantic
models: the render path reads these objects on every request and the override
layer makes changed copies (``dataclasses.replace``) when it plans; plain
dataclasses keep both at the cost of an attribute read and a constructor call,
with no validation on each copy, while pydantic validates them, with
``extra="forbid"``, from generated data and, for the image, chart, budget and
driver shapes, from ``stacks/*.yaml`` where people write them. Field names are
snake_case here and camelCase in the data.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from function.__version__ import __version__
from function.errors import InputError, describe
from function.model import Accelerator, Cloud, ServingStack, StackKind
from function.xr import name_of

# Unknown fields are refused (a typo in stacks/*.yaml, or generated data from
# another generator version), and fields go by their camelCase data name only.
# defer_build: the validators are built when the first stack loads, not on import.
_SCHEMA = ConfigDict(
    extra="forbid", alias_generator=to_camel, validate_by_name=False, validate_by_alias=True, defer_build=True
)

# The DRA driver's component, and the value of its chart (stacks/charts.yaml
# nvidia-dra-driver-gpu driverRoot) where each stack file states its driver
# root, the one place it does. "/" is the chart's default (nvidia-dra-driver-gpu
# 25.12.0 values.yaml), v0.3.1's XRD default, and the root of a stack without
# the DRA driver.
DRA_DRIVER = "dra-driver"
DRIVER_ROOT_VALUE, DEFAULT_DRIVER_ROOT = "nvidiaDriverRoot", "/"


@dataclass(frozen=True)
class ImageRef:
    """Where a chart (or manifest) takes one container image, and its default.

    The shapes charts use: one full ``host/path:tag`` string (``ref``), a full
    ``host/path`` repository, or a registry prefix plus a repository name.
    """

    __pydantic_config__ = _SCHEMA

    name: str
    ref: str | None = None
    registry: str | None = None
    repository: str | None = None
    tag: str | None = None
    default: dict[str, str | None] = field(default_factory=dict)  # None: key exists, default not verified
    # What a controller uses when the value is empty (set in code, not in the
    # chart): same keys as ``default``; the comment beside it names the source.
    builtin: dict[str, str] = field(default_factory=dict)

    def paths(self) -> tuple[str, ...]:
        """The value paths it is read from and written to: those of ref, registry, repository and tag it has."""
        return tuple(p for p in (self.ref, self.registry, self.repository, self.tag) if p)


@dataclass(frozen=True)
class PdbPaths:
    """Value paths of a chart's PodDisruptionBudget switch and budget."""

    __pydantic_config__ = _SCHEMA

    enabled: str | None = None
    min_available: str | None = None
    max_unavailable: str | None = None
    # The budget paths whose key the chart's own values hold (the generator reads them in
    # facts/charts/): a null written there deletes the chart's default, a null written
    # anywhere else stays in the values (helm coalesceValues) and reaches the template.
    defaulted: tuple[str, ...] = ()

    def paths(self) -> tuple[str, ...]:
        """The value paths it declares."""
        return tuple(p for p in (self.enabled, self.min_available, self.max_unavailable) if p)


@dataclass(frozen=True)
class ChartRef:
    __pydantic_config__ = _SCHEMA

    name: str
    repository: str
    version: str
    # Secret (username/password) for the chart repository; set by the override layer.
    pull_secret_ref: str = ""


@dataclass(frozen=True)
class Component:
    """One composed resource of a stack: a Helm Release or a raw manifest Object.

    Fields in reading order (the generated modules keep it): what it is, where
    it comes from, what it installs, then where the chart takes what the
    override layer sets.
    """

    __pydantic_config__ = _SCHEMA

    key: str
    kind: Literal["Release", "Object"]
    origin: str  # "aicr:<component>" or "platform", for status and explain
    # A Release's chart, release name and namespace.
    chart: ChartRef | None = None
    release_name: str = ""
    namespace: str = ""
    # Either kind.
    depends_on: tuple[str, ...] = ()
    # Its finalizers are processed by controllers it depends on: every
    # dependency must outlive it (a Usage orders the deletion).
    finalized_by_dependencies: bool = False
    # An Object's readiness, XR fields and manifest.
    readiness: dict[str, str] = field(default_factory=dict)
    # Manifest fields filled from the XR at render time: manifest path -> parameter name.
    xr_fields: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    # A Release's values, then the value paths where its chart takes images,
    # replicas, resources, budgets and pull secrets (on an Object, images and
    # the pull secret paths are manifest paths).
    values: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageRef, ...] = ()
    replicas: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    pod_disruption_budgets: tuple[PdbPaths, ...] = ()
    pull_secret_ref_list_paths: tuple[str, ...] = ()  # paths taking a list of {name: …}
    pull_secret_name_list_paths: tuple[str, ...] = ()  # paths taking a list of plain names
    pull_secret_name_paths: tuple[str, ...] = ()  # paths taking one name
    pull_secret_ref_paths: tuple[str, ...] = ()  # paths taking one {name: …}

    @property
    def is_release(self) -> bool:
        return self.kind == "Release"


@dataclass(frozen=True)
class DriverSource:
    """Who installs the GPU driver on this stack's nodes, and how the operator takes per-pool drivers.

    The stack files write it as it is generated (``driver:`` in ``stacks/*.yaml``).
    """

    __pydantic_config__ = _SCHEMA

    source: Literal["node-image", "gpu-operator"]
    operator: str = ""  # key of the component that reconciles (and finalizes) driver resources
    # Template of a per-pool driver custom resource (NVIDIADriver / DeviceConfig).
    resource: dict[str, Any] = field(default_factory=dict)
    version_path: str = ""
    node_selector_path: str = ""
    # Operator values that make it reconcile per-pool resources instead of its own default driver.
    operator_values: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageRef, ...] = ()
    pull_secret_name_list_paths: tuple[str, ...] = ()  # paths taking a list of plain names
    pull_secret_ref_paths: tuple[str, ...] = ()  # paths taking one {name: …}
    # Where a pool's driver image repository goes, for operators that build the
    # driver image and push it there: set, every per-pool driver must name one.
    image_path: str = ""


def _renders(component: Component) -> Component:
    # A Release renders from its chart, an Object from its manifest: either missing renders nothing.
    if component.is_release != (component.chart is not None) or (not component.is_release and not component.manifest):
        raise ValueError(f"component {component.key}: a Release needs a chart, an Object a manifest and no chart")
    return component


def _complete(driver: DriverSource) -> DriverSource:
    # Without them the override layer could not write a pool's version and nodes, nor order its deletion.
    if driver.resource and not (driver.operator and driver.version_path and driver.node_selector_path):
        raise ValueError("a driver resource needs its operator, versionPath and nodeSelectorPath")
    return driver


# What is checked across fields, when data is validated (the generated modules,
# stacks/*.yaml) and not on each copy the override layer makes.
CheckedDriver = Annotated[DriverSource, AfterValidator(_complete)]
CheckedComponent = Annotated[Component, AfterValidator(_renders)]


@dataclass(frozen=True)
class AicrProvenance:
    """The AICR release a stack was resolved from, the query it asked and the overlays that applied."""

    __pydantic_config__ = _SCHEMA

    version: str
    commit: str
    query: dict[str, str]
    applied_overlays: tuple[str, ...]  # "base" first, in merge order


@dataclass(frozen=True)
class Provenance:
    __pydantic_config__ = _SCHEMA

    generator: str
    aicr: AicrProvenance


@dataclass(frozen=True, eq=False)  # identity-hashed: cached renderers are keyed by it
class Stack:
    __pydantic_config__ = _SCHEMA

    id: str
    cloud: str
    accelerator: str
    provenance: Provenance
    driver: CheckedDriver
    components: tuple[CheckedComponent, ...]
    # spec.stack it serves; Standard, the default, is left out of the data (the
    # Standard modules read as before the Dynamo stacks came).
    kind: Literal["Standard", "Dynamo"] = "Standard"

    @property
    def driver_root(self) -> str:
        """Where the stack's DRA driver finds the NVIDIA driver on its nodes."""
        dra = next((c for c in self.components if c.key == DRA_DRIVER), None)
        root = dra.values.get(DRIVER_ROOT_VALUE) if dra is not None else None
        return root if isinstance(root, str) else DEFAULT_DRIVER_ROOT


class StackDataError(Exception):
    """Generated stack data that does not fit the schema: a generator bug or a hand-edited module."""


_STACK_SCHEMA = TypeAdapter(Stack)
_COMPONENT_SCHEMA = TypeAdapter(Component)  # the generator writes components one by one


def from_data(data: Any, where: str) -> Stack:
    """A stack from its generated data, validated against the schema; ``where`` names it in errors."""
    try:
        return _STACK_SCHEMA.validate_python(data)
    except ValidationError as err:
        raise StackDataError(describe(err, where)) from None


def to_data(value: Stack | Component) -> dict[str, Any]:
    """What the generator writes: camelCase names, lists for tuples, defaults and None left out."""
    schema: TypeAdapter[Any] = _STACK_SCHEMA if isinstance(value, Stack) else _COMPONENT_SCHEMA
    data: dict[str, Any] = schema.dump_python(
        value, mode="json", by_alias=True, exclude_defaults=True, exclude_none=True
    )
    return data


def module_name(cloud: str, accelerator: str, kind: str = StackKind.STANDARD) -> str:
    """The generated module serving a cloud/accelerator/stack kind, e.g. ``eks_nvidia``, ``eks_nvidia_dynamo``."""
    base = f"{cloud.lower()}_{accelerator.lower()}"
    return base if kind == StackKind.STANDARD else f"{base}_{kind.lower()}"


@cache
def available() -> tuple[tuple[str, str, str], ...]:
    """Every (cloud, accelerator, stack kind) that has a generated stack."""
    return tuple(importlib.import_module("function.generated").STACKS)


def versions() -> dict[str, str]:
    """This function's version, and the generator version and AICR release the stacks were generated with."""
    index = importlib.import_module("function.generated")
    return {
        "function": __version__,
        "generator": index.GENERATOR,
        "aicr": index.AICR_VERSION,
        "aicrCommit": index.AICR_COMMIT,
    }


def load(cloud: Cloud, accelerator: Accelerator, kind: StackKind = StackKind.STANDARD) -> Stack | None:
    """The stack for a cloud, accelerator and kind, parsed once per process; None when none is generated."""
    return _loaded(cloud, accelerator, kind)  # one cache key per stack, however the kind was given


@cache
def _loaded(cloud: Cloud, accelerator: Accelerator, kind: StackKind) -> Stack | None:
    return read_stack(cloud, accelerator, kind)


def read_stack(cloud: Cloud, accelerator: Accelerator, kind: StackKind = StackKind.STANDARD) -> Stack | None:
    """The stack parsed from its generated module anew (``load`` keeps it); None when none is generated."""
    if (cloud.value, accelerator.value, kind.value) not in available():
        return None
    name = module_name(cloud.value, accelerator.value, kind.value)
    return from_data(importlib.import_module(f"function.generated.{name}").STACK, f"function/generated/{name}.py")


def select_stack(xr: ServingStack) -> Stack:
    """The stack for the XR's cloud, accelerator and spec.stack; InputError naming the stacks that exist."""
    assert xr.spec.cloud is not None, "set or inferred by parse_xr"
    chosen = load(xr.spec.cloud, xr.spec.accelerator, xr.spec.stack)
    if chosen is not None:
        return chosen
    if load(xr.spec.cloud, xr.spec.accelerator) is None:
        raise InputError(
            f"{name_of(xr)}: spec.accelerator: no {xr.spec.accelerator.value} stack for cloud "
            f"{xr.spec.cloud.value}; stacks exist for {existing()}"
        )
    raise InputError(
        f"{name_of(xr)}: spec.stack: no {xr.spec.stack.value} stack for {xr.spec.cloud.value}/"
        f"{xr.spec.accelerator.value}; stacks exist for {existing()}"
    )


def refuse_switch(chosen: Stack, observed: Collection[str], name: str) -> None:
    """InputError when the observed resources hold components only another kind of this cluster's stack has.

    spec.stack is immutable in the XRD; this guards what the API server
    cannot see (an XRD without the rule, a ServingStack recreated over a
    running cluster): rendering the other kind would uninstall one gang
    backend and install another under the workloads running on the first.
    """
    own = {c.key for c in chosen.components}
    for kind in StackKind:
        other = load(Cloud(chosen.cloud), Accelerator(chosen.accelerator), kind)
        if other is None or other is chosen:
            continue
        theirs = sorted(c.key for c in other.components if c.key not in own and c.key in observed)
        if theirs:
            raise InputError(
                f"{name}: spec.stack: {chosen.kind}, but the cluster runs the {kind.value} stack ({', '.join(theirs)} "
                f"observed); spec.stack cannot change on a live cluster: set it back to {kind.value}, or "
                "recreate the cluster to change its serving stack"
            )


def existing() -> str:
    """The generated stacks' cloud/accelerator pairs, with kinds beyond Standard, for a message refusing another."""
    kinds: dict[str, list[str]] = {}
    for c, a, k in available():
        kinds.setdefault(f"{c}/{a}", []).append(k)
    return ", ".join(  # the kinds in StackKind's order: Standard first
        pair + ("" if ks == [StackKind.STANDARD] else f" ({', '.join(k for k in StackKind if k in ks)})")
        for pair, ks in kinds.items()
    )


@cache
def every() -> tuple[Stack, ...]:
    """Every generated stack, in the generated index's order."""
    loaded = (load(Cloud(c), Accelerator(a), StackKind(k)) for c, a, k in available())
    return tuple(s for s in loaded if s is not None)
