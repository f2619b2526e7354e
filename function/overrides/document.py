"""The override document (``data.servingStack`` of an EnvironmentConfig), as typed models.

``extra="forbid"`` everywhere: a misspelt field is a Fatal that names it, never a
setting silently ignored on a regulated cluster. Numbers arrive as floats when
the document came through a protobuf Struct, so integers accept integral floats
but nothing else (no ``"2"`` for a replica count, no ``"yes"`` for a flag).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)

from function.model import Cloud, ServingStack

STATES = ("Managed", "Unmanaged", "Removed")
State = Literal["Managed", "Unmanaged", "Removed"]

# A Kubernetes object name segment (RFC 1123 label): driver names become part of
# a composed resource key and of the driver resource's metadata.name.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def _integral(value: Any) -> Any:
    # Struct stores every number as a double: 2 comes back as 2.0.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[StrictInt, BeforeValidator(_integral)]
Quantity = Annotated[StrictInt | str, BeforeValidator(_integral)]
NonEmpty = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Match(_Strict):
    """Which ServingStacks a document applies to; every given criterion must hold."""

    clouds: list[Cloud] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)  # the XR's own labels
    names: list[NonEmpty] = Field(default_factory=list)  # the XR's metadata.name

    def matches(self, xr: ServingStack) -> bool:
        if self.clouds and xr.spec.cloud not in self.clouds:
            return False
        if self.names and xr.metadata.name not in self.names:
            return False
        return all(xr.metadata.labels.get(k) == v for k, v in self.labels.items())


def _is_host(segment: str) -> bool:
    # How Docker tells a registry host from a Docker Hub namespace.
    return "." in segment or ":" in segment or segment == "localhost"


class ImageRule(_Strict):
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
            if not _is_host(value.split("/", 1)[0]):
                raise ValueError(
                    f"{name}: {value!r} does not start with a registry host (Docker Hub images are docker.io/...)"
                )
        return self


CHART_SCHEMES = ("https://", "oci://")


class ChartRule(_Strict):
    """Rewrite Helm chart repositories starting with ``from`` (https:// or oci://)."""

    source: NonEmpty = Field(alias="from")
    to: NonEmpty

    @model_validator(mode="after")
    def _schemes(self) -> ChartRule:
        for name, value in (("from", self.source), ("to", self.to)):
            if name == "from" and value == "*":
                continue
            if not value.startswith(CHART_SCHEMES) or len(value.split("://", 1)[1].strip("/")) == 0:
                raise ValueError(f"{name}: {value!r}: a chart repository is an https:// or oci:// URL")
        return self


class SecretRef(_Strict):
    name: NonEmpty


def _registry(value: str) -> str:
    # An allowed registry: a host, optionally with a path; no scheme, no tag.
    if "://" in value or not _is_host(value.split("/", 1)[0]) or ":" in value.split("/", 1)[-1]:
        raise ValueError(f"{value!r} is not a registry (host or host/path, e.g. mirror.example.com/hub)")
    return value.rstrip("/")


AllowedRegistry = Annotated[str, Field(min_length=1), AfterValidator(_registry)]


class Registry(_Strict):
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


class ResourceRequirements(_Strict):
    """A container's ``resources`` (the shortcut merges it at the component's declared paths)."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class PodDisruptionBudget(_Strict):
    enabled: StrictBool = True
    minAvailable: Quantity | None = None  # noqa: N815
    maxUnavailable: Quantity | None = None  # noqa: N815

    @model_validator(mode="after")
    def _one_budget(self) -> PodDisruptionBudget:
        if self.minAvailable is not None and self.maxUnavailable is not None:
            raise ValueError("give minAvailable or maxUnavailable, not both")
        return self


class ComponentOverride(_Strict):
    state: State | None = None
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

    def shortcuts(self) -> tuple[str, ...]:
        """The value shortcuts this override uses (each needs declared value paths)."""
        given = ("replicas", "resources", "image", "podDisruptionBudget")
        return tuple(s for s in given if getattr(self, s) is not None)


class DriverOverride(_Strict):
    """A GPU driver for one node pool (GPU-Operator-managed stacks only)."""

    name: Annotated[str, Field(pattern=DNS_LABEL)]
    nodeSelector: dict[str, str] = Field(min_length=1)  # noqa: N815
    version: NonEmpty
    # The repository (no tag) the operator builds the driver image into and
    # pulls it from, on stacks whose operator builds drivers (AMD); unset, the
    # stack's default repository applies.
    image: NonEmpty | None = None


class OverrideDocument(_Strict):
    priority: Int = 0
    match: Match = Field(default_factory=Match)
    registry: Registry = Field(default_factory=Registry)
    components: dict[str, ComponentOverride] = Field(default_factory=dict)
    drivers: list[DriverOverride] = Field(default_factory=list)

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


class RegistryPolicy(_Strict):
    """``spec.registry`` of the function Input: a registry policy the Composition imposes.

    It holds whatever the EnvironmentConfigs say or fail to say: with no
    document at all, every upstream reference is a Fatal.
    """

    strict: StrictBool  # false switches the policy off, visibly
    allowedRegistries: tuple[AllowedRegistry, ...] = Field(min_length=1)  # noqa: N815
