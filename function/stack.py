"""The generated stacks, as the runtime sees them.

A generated module (``function/generated/<stack id>.py``) holds one plain ``STACK``
literal written by the generator; this module turns it into typed, frozen
objects once per process and answers which stack serves a cloud/accelerator
pair.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from function.__version__ import __version__
from function.errors import InputError
from function.model import Accelerator, Cloud, ServingStack
from function.xr import xr_name


@dataclass(frozen=True)
class ImageRef:
    """Where a chart (or manifest) takes one container image, and its default.

    The shapes charts use: one full ``host/path:tag`` string (``ref``), a full
    ``host/path`` repository, or a registry prefix plus a repository name.
    """

    name: str
    ref: str | None = None
    registry: str | None = None
    repository: str | None = None
    tag: str | None = None
    default: dict[str, str | None] = field(default_factory=dict)
    # What the controller uses when the value is empty (set in code, not in the chart).
    builtin: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PdbPaths:
    """Value paths of a chart's PodDisruptionBudget switch and budget."""

    enabled: str | None = None
    min_available: str | None = None
    max_unavailable: str | None = None


@dataclass(frozen=True)
class ChartRef:
    name: str
    repository: str
    version: str
    # Secret (username/password) for the chart repository; set by the override layer.
    pull_secret_ref: str = ""


@dataclass(frozen=True)
class Component:
    """One composed resource of a stack: a Helm Release or a raw manifest Object."""

    key: str
    kind: str  # "Release" or "Object"
    origin: str  # "aicr:<component>" or "platform", for status and explain
    depends_on: tuple[str, ...] = ()
    # Its finalizers are processed by controllers it depends on: every
    # dependency must outlive it (a Usage orders the deletion).
    finalized_by_dependencies: bool = False
    # Release only
    chart: ChartRef | None = None
    release_name: str = ""
    namespace: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageRef, ...] = ()
    replicas: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    pod_disruption_budgets: tuple[PdbPaths, ...] = ()
    pull_secret_ref_list_paths: tuple[str, ...] = ()  # paths taking a list of {name: …}
    pull_secret_name_list_paths: tuple[str, ...] = ()  # paths taking a list of plain names
    pull_secret_name_paths: tuple[str, ...] = ()  # paths taking one name
    pull_secret_ref_paths: tuple[str, ...] = ()  # paths taking one {name: …}
    # Object only (images and the pull secret paths above are manifest paths there)
    manifest: dict[str, Any] = field(default_factory=dict)
    readiness: dict[str, str] = field(default_factory=dict)
    # Manifest fields filled from the XR at render time: manifest path -> parameter name.
    xr_fields: dict[str, str] = field(default_factory=dict)

    @property
    def is_release(self) -> bool:
        return self.kind == "Release"


@dataclass(frozen=True)
class DriverSource:
    """Who installs the GPU driver on this stack's nodes, and where it lands."""

    source: str  # "node-image" or "gpu-operator"
    root: str
    operator: str = ""  # key of the component that reconciles driver resources
    # Template of a per-pool driver custom resource (NVIDIADriver / DeviceConfig).
    resource: dict[str, Any] = field(default_factory=dict)
    version_path: str = ""
    node_selector_path: str = ""
    # Operator values that make it reconcile per-pool resources instead of its own driver.
    operator_values: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageRef, ...] = ()
    pull_secret_name_list_paths: tuple[str, ...] = ()  # paths taking a list of plain names
    pull_secret_ref_paths: tuple[str, ...] = ()  # paths taking one {name: …}
    # Where a pool's driver image repository goes; set: every pool must name one.
    image_path: str = ""


@dataclass(frozen=True, eq=False)  # identity-hashed: cached renderers are keyed by it
class Stack:
    id: str
    cloud: str
    accelerator: str
    provenance: dict[str, Any]
    driver: DriverSource
    components: tuple[Component, ...]


def _image(raw: dict[str, Any]) -> ImageRef:
    return ImageRef(
        name=raw["name"],
        ref=raw.get("ref"),
        registry=raw.get("registry"),
        repository=raw.get("repository"),
        tag=raw.get("tag"),
        default=dict(raw.get("default", {})),
        builtin=dict(raw.get("builtin", {})),
    )


def _component(raw: dict[str, Any]) -> Component:
    chart = raw.get("chart")
    return Component(
        key=raw["key"],
        kind=raw["kind"],
        origin=raw["origin"],
        depends_on=tuple(raw.get("dependsOn", ())),
        finalized_by_dependencies=raw.get("finalizedByDependencies", False),
        chart=ChartRef(**chart) if chart else None,
        release_name=raw.get("releaseName", ""),
        namespace=raw.get("namespace", ""),
        values=raw.get("values", {}),
        images=tuple(_image(i) for i in raw.get("images", ())),
        replicas=tuple(raw.get("replicas", ())),
        resources=tuple(raw.get("resources", ())),
        pod_disruption_budgets=tuple(
            PdbPaths(
                enabled=pdb.get("enabled"),
                min_available=pdb.get("minAvailable"),
                max_unavailable=pdb.get("maxUnavailable"),
            )
            for pdb in raw.get("podDisruptionBudgets", ())
        ),
        pull_secret_ref_list_paths=tuple(raw.get("imagePullSecrets", ())),
        pull_secret_name_list_paths=tuple(raw.get("imagePullSecretNames", ())),
        pull_secret_name_paths=tuple(raw.get("imagePullSecretName", ())),
        pull_secret_ref_paths=tuple(raw.get("imagePullSecretRef", ())),
        manifest=raw.get("manifest", {}),
        readiness=raw.get("readiness", {}),
        xr_fields=raw.get("xrFields", {}),
    )


def stack_from_data(raw: dict[str, Any]) -> Stack:
    driver = raw["driver"]
    return Stack(
        id=raw["id"],
        cloud=raw["cloud"],
        accelerator=raw["accelerator"],
        provenance=raw["provenance"],
        driver=DriverSource(
            source=driver["source"],
            root=driver["root"],
            operator=driver.get("operator", ""),
            resource=driver.get("resource", {}),
            version_path=driver.get("versionPath", ""),
            node_selector_path=driver.get("nodeSelectorPath", ""),
            operator_values=driver.get("operatorValues", {}),
            images=tuple(_image(i) for i in driver.get("images", ())),
            pull_secret_name_list_paths=tuple(driver.get("imagePullSecretNames", ())),
            pull_secret_ref_paths=tuple(driver.get("imagePullSecretRef", ())),
            image_path=driver.get("imagePath", ""),
        ),
        components=tuple(_component(c) for c in raw["components"]),
    )


def module_name(cloud: str, accelerator: str) -> str:
    """The generated module serving a cloud/accelerator pair, e.g. ``eks_nvidia``."""
    return f"{cloud.lower()}_{accelerator.lower()}"


@cache
def available() -> tuple[tuple[str, str], ...]:
    """Every (cloud, accelerator) pair that has a generated stack."""
    index = importlib.import_module("function.generated")
    pairs: tuple[tuple[str, str], ...] = tuple(index.STACKS)
    return pairs


def versions() -> dict[str, str]:
    """This function's version, and the generator version and AICR release the stacks were generated with."""
    index = importlib.import_module("function.generated")
    return {
        "function": __version__,
        "generator": index.GENERATOR,
        "aicr": index.AICR_VERSION,
        "aicrCommit": index.AICR_COMMIT,
    }


@cache
def load(cloud: Cloud, accelerator: Accelerator) -> Stack | None:
    """The stack for a pair, parsed once per process; None when none is generated."""
    if (cloud.value, accelerator.value) not in available():
        return None
    module = importlib.import_module(f"function.generated.{module_name(cloud.value, accelerator.value)}")
    return stack_from_data(module.STACK)


def select_stack(xr: ServingStack) -> Stack:
    """The stack for the XR's cloud and accelerator; InputError naming the stacks that exist."""
    assert xr.spec.cloud is not None, "set or inferred by parse_xr"
    chosen = load(xr.spec.cloud, xr.spec.accelerator)
    if chosen is None:
        pairs = ", ".join(f"{c}/{a}" for c, a in available())
        raise InputError(
            f"{xr_name(xr.model_dump())}: spec.accelerator: no {xr.spec.accelerator.value} stack for cloud "
            f"{xr.spec.cloud.value}; stacks exist for {pairs}"
        )
    return chosen


@cache
def every() -> tuple[Stack, ...]:
    """Every generated stack, in the generated index's order."""
    loaded = (load(Cloud(c), Accelerator(a)) for c, a in available())
    return tuple(s for s in loaded if s is not None)
