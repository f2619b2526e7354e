"""The override document (``data.servingStack`` of an EnvironmentConfig), as typed models.

``extra="forbid"`` everywhere: a misspelt field is a Fatal that names it, never a
setting silently ignored on a regulated cluster. Numbers arrive as floats when
the document came through a protobuf Struct, so integers accept integral floats
but nothing else (no ``"2"`` for a replica count, no ``"yes"`` for a flag).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)

from function.cache import PYTHON_FACTOR, BoundedCache
from function.errors import InputError, describe
from function.model import Accelerator, Cloud, ServingStack
from function.strictmodel import StrictModel
from function.tree import whole_numbers

from .images import is_host
from .planned import State

# Where an EnvironmentConfig carries its override document.
DOCUMENT_KEY = "servingStack"

# A Kubernetes object name segment (RFC 1123 label): driver names become part of
# a composed resource key and of the driver resource's metadata.name.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


Int = Annotated[StrictInt, BeforeValidator(whole_numbers)]
Quantity = Annotated[StrictInt | str, BeforeValidator(whole_numbers)]
NonEmpty = Annotated[str, Field(min_length=1)]


class Match(StrictModel):
    """Which ServingStacks a document applies to; every given criterion must hold."""

    clouds: list[Cloud] = Field(default_factory=list)
    accelerators: list[Accelerator] = Field(default_factory=list)
    namespaces: list[NonEmpty] = Field(default_factory=list)  # the XR's metadata.namespace
    labels: dict[str, str] = Field(default_factory=dict)  # the XR's own labels
    names: list[NonEmpty] = Field(default_factory=list)  # the XR's metadata.name

    def admits(self, cloud: str, accelerator: str) -> bool:
        """Whether the criteria that pick a stack (cloud, accelerator) let this one through."""
        if self.clouds and cloud not in self.clouds:
            return False
        return not self.accelerators or accelerator in self.accelerators

    def matches(self, xr: ServingStack) -> bool:
        # parse_xr has set or inferred spec.cloud (a v0.3.1 XR may omit it) before documents are matched.
        if not self.admits(xr.spec.cloud or "", xr.spec.accelerator):
            return False
        if self.namespaces and xr.metadata.namespace not in self.namespaces:
            return False
        if self.names and xr.metadata.name not in self.names:
            return False
        return all(xr.metadata.labels.get(k) == v for k, v in self.labels.items())

    def describe(self) -> str:
        """The given criteria, compactly, for messages."""
        given = self.model_dump(mode="json", exclude_defaults=True)
        return ", ".join(f"{k}: {v}" for k, v in given.items()) or "every ServingStack"


class ImageRule(StrictModel):
    """Rewrite image references starting with ``from`` (a registry host, optionally a path)."""

    source: NonEmpty = Field(alias="from")
    to: NonEmpty

    @model_validator(mode="after")
    def _hosts(self) -> ImageRule:
        for name, value in (("from", self.source), ("to", self.to)):
            if name == "from" and value == "*":
                continue
            if "://" in value:
                raise ValueError(f"{name}: {value!r}: an image registry has no scheme (e.g. mirror.example.com/hub)")
            if not is_host(value.split("/", 1)[0]):
                raise ValueError(
                    f"{name}: {value!r} does not start with a registry host (Docker Hub images are docker.io/...)"
                )
        return self


def _chart_repository(name: str, value: str) -> None:
    if not value.startswith(("https://", "oci://")) or not value.split("://", 1)[1].strip("/"):
        raise ValueError(f"{name}: {value!r}: a chart repository is an https:// or oci:// URL")


class ChartRule(StrictModel):
    """Rewrite Helm chart repositories starting with ``from`` (https:// or oci://)."""

    source: NonEmpty = Field(alias="from")
    to: NonEmpty

    @model_validator(mode="after")
    def _schemes(self) -> ChartRule:
        for name, value in (("from", self.source), ("to", self.to)):
            if name == "from" and value == "*":
                continue
            _chart_repository(name, value)
        return self


class SecretRef(StrictModel):
    name: NonEmpty


def _registry(value: str) -> str:
    # An allowed registry: a host, optionally with a path; no scheme, no tag.
    if "://" in value or not is_host(value.split("/", 1)[0]) or ":" in value.split("/", 1)[-1]:
        raise ValueError(f"{value!r} is not a registry (host or host/path, e.g. mirror.example.com/hub)")
    return value.rstrip("/")


AllowedRegistry = Annotated[str, Field(min_length=1), AfterValidator(_registry)]


class Registry(StrictModel):
    charts: list[ChartRule] | None = None
    chartPullSecretRef: SecretRef | None = None  # noqa: N815 - document field name
    images: list[ImageRule] | None = None
    imagePullSecrets: list[NonEmpty] | None = None  # noqa: N815
    strict: StrictBool | None = None
    # With strict: the only registries images and charts may come from (host or
    # host/path prefixes). Unset: the targets of this document's own rules.
    allowedRegistries: list[AllowedRegistry] | None = Field(default=None, min_length=1)  # noqa: N815

    @model_validator(mode="after")
    def _allow_list_needs_strict(self) -> Registry:
        if self.allowedRegistries is not None and not self.strict:
            raise ValueError("allowedRegistries: takes effect with strict: true only; set it")
        return self

    @model_validator(mode="after")
    def _unique_sources(self) -> Registry:
        for name, rules in (("charts", self.charts), ("images", self.images)):
            seen = [r.source for r in rules or ()]
            dupes = sorted({s for s in seen if seen.count(s) > 1})
            if dupes:
                raise ValueError(f"{name}: more than one rule from {', '.join(dupes)}")
        return self


class ResourceRequirements(StrictModel):
    """A container's ``resources`` (the shortcut merges it at the component's declared paths)."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class PodDisruptionBudget(StrictModel):
    enabled: StrictBool = True
    minAvailable: Quantity | None = None  # noqa: N815
    maxUnavailable: Quantity | None = None  # noqa: N815

    @model_validator(mode="after")
    def _one_budget(self) -> PodDisruptionBudget:
        if self.minAvailable is not None and self.maxUnavailable is not None:
            raise ValueError("give minAvailable or maxUnavailable, not both")
        return self


class AddedChart(StrictModel):
    """The Helm chart of a component a document adds."""

    name: NonEmpty
    repository: NonEmpty
    version: NonEmpty

    @model_validator(mode="after")
    def _scheme(self) -> AddedChart:
        _chart_repository("repository", self.repository)
        return self


class AddedImage(StrictModel):
    """Where an added component takes one image (as ``stacks/charts.yaml`` declares a chart's): a full
    reference (``ref``), or a ``repository`` (with an optional ``registry`` before it and ``tag`` beside it)."""

    name: NonEmpty
    ref: NonEmpty | None = None
    registry: NonEmpty | None = None
    repository: NonEmpty | None = None
    tag: NonEmpty | None = None

    @model_validator(mode="after")
    def _shape(self) -> AddedImage:
        if (self.ref is None) == (self.repository is None):
            raise ValueError("give the value path of the full reference (ref) or of the repository, one of them")
        if self.ref is not None and (self.registry or self.tag):
            raise ValueError("ref is the full reference: registry and tag go with repository only")
        return self


class PullSecretPaths(StrictModel):
    """Where an added component takes image pull secrets (``registry.imagePullSecrets`` are written there),
    by the shape each path takes."""

    refList: list[NonEmpty] = Field(default_factory=list)  # noqa: N815 - [{name: s}] (pod specs, most charts)
    nameList: list[NonEmpty] = Field(default_factory=list)  # noqa: N815 - [s]
    name: list[NonEmpty] = Field(default_factory=list)  # one name: the first secret
    ref: list[NonEmpty] = Field(default_factory=list)  # one {name: s}: the first secret


# A Helm release name is at most 53 characters (helm pkg/action: releaseNameMaxLen).
RELEASE_NAME_MAX = 53
# What only a document adding a component gives (not a change to one).
ADDITION_FIELDS = ("chart", "namespace", "releaseName", "dependsOn", "images", "pullSecretPaths")


class ComponentOverride(StrictModel):
    state: State | None = None
    # A component the document adds, under a key no generated stack has: a Helm
    # chart (chart, namespace, values), or a raw manifest (manifest). See ADDITION_FIELDS.
    chart: AddedChart | None = None
    namespace: Annotated[str, Field(pattern=DNS_LABEL)] | None = None
    releaseName: Annotated[str, Field(pattern=DNS_LABEL, max_length=RELEASE_NAME_MAX)] | None = None  # noqa: N815
    dependsOn: list[NonEmpty] | None = None  # noqa: N815
    images: list[AddedImage] | None = None
    pullSecretPaths: PullSecretPaths | None = None  # noqa: N815
    version: NonEmpty | None = None
    values: dict[str, Any] | None = None
    replicas: Annotated[Int, Field(ge=0)] | None = None
    resources: ResourceRequirements | None = None
    # One reference for a component with one image, or {image name: reference}.
    image: NonEmpty | dict[str, NonEmpty] | None = None
    podDisruptionBudget: PodDisruptionBudget | None = None  # noqa: N815
    # Deep merge onto a raw manifest (Object components): maps merge, lists
    # replace, null deletes the key.
    manifest: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _addition(self) -> ComponentOverride:
        if self.chart is not None:
            refused = [f for f in ("version", "manifest", *self.shortcuts()) if getattr(self, f) is not None]
            if refused:
                raise ValueError(
                    f"{refused[0]}: an added chart (chart) takes chart, namespace, releaseName, dependsOn, values, "
                    "images, pullSecretPaths and state; set its version in chart.version, its settings in values"
                )
            if self.namespace is None:
                raise ValueError("namespace: an added chart needs the namespace its release installs into")
        else:
            chart_only = [f for f in ("namespace", "releaseName") if getattr(self, f) is not None]
            if chart_only:
                raise ValueError(f"{chart_only[0]}: only an added chart (chart) takes it")
        if self.dependsOn is not None and len(set(self.dependsOn)) != len(self.dependsOn):
            raise ValueError("dependsOn: names a component more than once")
        return self

    def addition_fields(self) -> tuple[str, ...]:
        """The fields given that only a document adding a component gives."""
        return tuple(f for f in ADDITION_FIELDS if getattr(self, f) is not None)

    def shortcuts(self) -> tuple[str, ...]:
        """The value shortcuts this override uses (each needs declared value paths)."""
        given = ("replicas", "resources", "image", "podDisruptionBudget")
        return tuple(s for s in given if getattr(self, s) is not None)


class DriverOverride(StrictModel):
    """A GPU driver for one node pool (GPU-Operator-managed stacks only)."""

    name: Annotated[str, Field(pattern=DNS_LABEL)]
    nodeSelector: dict[str, str] = Field(min_length=1)  # noqa: N815
    version: NonEmpty
    # The repository (no tag) the operator builds the driver image into and
    # pulls it from, on stacks whose operator builds drivers (AMD); unset, the
    # stack's default repository applies.
    image: NonEmpty | None = None


class OverrideDocument(StrictModel):
    # A tombstone: the document is retired on purpose, and every ServingStack
    # that still remembers it (status.stack.documents) lets go of what it decided.
    retired: StrictBool = False
    priority: Int = 0
    match: Match = Field(default_factory=Match)
    registry: Registry = Field(default_factory=Registry)
    components: dict[str, ComponentOverride] = Field(default_factory=dict)
    drivers: list[DriverOverride] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tombstone_alone(self) -> OverrideDocument:
        others = sorted(self.model_fields_set - {"retired"})
        if self.retired and others:
            raise ValueError(f"a retired document (retired: true) carries nothing else; remove {', '.join(others)}")
        return self

    @model_validator(mode="after")
    def _unique_drivers(self) -> OverrideDocument:
        names = [d.name for d in self.drivers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"drivers: more than one driver named {', '.join(dupes)}")
        return self


def driver_key(name: str) -> str:
    """The composed resource key of a per-pool driver resource."""
    return f"driver-{name}"


class RegistryPolicy(StrictModel):
    """``spec.registry`` of the function Input: a registry policy the Composition imposes.

    It holds whatever the EnvironmentConfigs say or fail to say: with no
    document at all, every upstream reference is a Fatal.
    """

    strict: StrictBool  # false switches the policy off, visibly
    allowedRegistries: tuple[AllowedRegistry, ...] = Field(min_length=1)  # noqa: N815


def validate(body: Any, obj: str, prefix: str) -> OverrideDocument:
    if not isinstance(body, dict):
        raise InputError(f"{obj}: {prefix}: must be a map (got {type(body).__name__})")
    try:
        return OverrideDocument.model_validate(body)
    except ValidationError as err:
        raise InputError(describe(err, obj, prefix)) from None


@dataclass(frozen=True)
class Document:
    """One override document: where it came from (for messages) and what it says."""

    name: str  # the EnvironmentConfig's name, or CONTEXT_DOCUMENT
    where: str  # "EnvironmentConfig regulated-bank: data.servingStack"
    doc: OverrideDocument
    digest: bytes  # of its serialized content: plans are cached by it
    body: dict[str, Any] = field(default_factory=dict, compare=False)  # as written, for status.stack.documents
    remembered: bool = False  # absent now: applied from the XR's memory of the last reconcile


# (name, content digest, remembered) per document: what plans and statuses are cached by.
Fingerprint = tuple[tuple[str, bytes, bool], ...]

# Where the XR's status remembers the components documents added (function.overrides.memory).
ADDED_FIELD = "status.stack.added"


@dataclass(frozen=True)
class RememberedAddition:
    """A component a document added at the last reconcile, as ``status.stack.added`` remembers it."""

    key: str
    document: str  # the document whose entry defined it
    state: State  # as planned then
    over: ComponentOverride  # that entry, read
    entry: dict[str, Any]  # that entry, as written


@dataclass(frozen=True)
class Collected:
    """The override documents that apply to one XR, in application order, and what to tell the user."""

    applied: tuple[str, ...] = ()
    documents: tuple[Document, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # Normal results
    unmatched: tuple[str, ...] = ()  # delivered, but their match excludes the XR
    policy: RegistryPolicy | None = None  # the function Input's spec.registry
    # The components documents added at the last reconcile (ADDED_FIELD), and a digest of what it says.
    additions: tuple[RememberedAddition, ...] = ()
    additions_digest: bytes = b""
    retired: frozenset[str] = frozenset()  # documents let go of now (tombstone, annotation): their additions leave

    @property
    def fingerprint(self) -> Fingerprint:
        documents = tuple((d.name, d.digest, d.remembered) for d in self.documents)
        if not self.additions:
            return documents
        retired = tuple((f"retired:{name}", b"", True) for name in sorted(self.retired))
        return (*documents, (ADDED_FIELD, self.additions_digest, True), *retired)


# Parsed documents by serialized content: the same EnvironmentConfig arrives on
# every reconcile of every XR, and parsing it is most of the layer's cost.
# Keyed by where the bytes come from (an EnvironmentConfig, the context, the
# memory: each is read differently) and the bytes themselves, so only the same
# content hits, and the digest is computed once per parse, not per request.
_PARSED: BoundedCache[tuple[str, bytes], tuple[str, Document | None]] = BoundedCache("override documents")


def content_digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def parsed_once(
    source: str, data: bytes, parse: Callable[[bytes], tuple[str, Document | None]]
) -> tuple[str, Document | None]:
    """``parse(content_digest(data))``'s (name, document), computed once per ``source`` and serialized
    content ``data``."""
    key = (source, data)
    hit = _PARSED.get(key)
    if hit is not None:
        return hit
    # Bad input raises: never cached, reported every time. A document is kept
    # as its key, parsed and as written (Document.body): twice its size in Python objects.
    return _PARSED.put(key, parse(content_digest(data)), len(data) * (1 + 2 * PYTHON_FACTOR))
