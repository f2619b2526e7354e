"""The ServingStack composite resource, as users write it.

``extra="forbid"`` everywhere: a misspelt field is an error that names it,
never a silently ignored setting.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from function.strictmodel import StrictModel

API_GROUP = "infrastructure.modelplane.ai"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "ServingStack"

# The only secret type the function itself reads; every other entry is a
# provider identity passed through to both ProviderConfigs.
KUBECONFIG = "Kubeconfig"

# provider-helm's and provider-kubernetes' closed enum of identity types: a
# type outside it would be rejected by the API server after half the stack
# was already applied, so it is refused up front.
IDENTITY_TYPES = (
    "GoogleApplicationCredentials",
    "AzureServicePrincipalCredentials",
    "AzureWorkloadIdentityCredentials",
    "UpboundTokens",
    "AWSWebIdentityCredentials",
    "NebiusServiceAccountCredentials",
)


class Cloud(StrEnum):
    EKS = "EKS"
    GKE = "GKE"
    AKS = "AKS"
    NEBIUS = "Nebius"
    VULTR = "Vultr"
    EXISTING = "Existing"


class Accelerator(StrEnum):
    NVIDIA = "NVIDIA"
    AMD = "AMD"


class StackKind(StrEnum):
    """Which serving stack the cluster runs, as Modelplane PR #406 spells it (``spec.stack``).

    Standard gangs run as LeaderWorkerSets; Dynamo replaces LeaderWorkerSet by
    NVIDIA Grove, the KAI Scheduler and a ModelExpress server. Fixed for a
    cluster's life: switching would uninstall one gang backend under the
    workloads running on it.
    """

    STANDARD = "Standard"
    DYNAMO = "Dynamo"


class SecretEntry(StrictModel):
    type: str
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)
    namespace: str | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value != KUBECONFIG and value not in IDENTITY_TYPES:
            choices = ", ".join((KUBECONFIG, *IDENTITY_TYPES))
            raise ValueError(f"unknown secret type {value!r}; valid types: {choices}")
        return value


class Listener(StrictModel):
    name: str = Field(min_length=1)
    protocol: str = "HTTP"
    port: int = Field(ge=1, le=65535)
    hostname: str | None = None


class GatewaySpec(StrictModel):
    className: str = Field(default="envoy", min_length=1)  # noqa: N815 - Kubernetes field name
    listeners: list[Listener] = Field(
        default_factory=lambda: [Listener(name="http", protocol="HTTP", port=80)], min_length=1
    )


class LegacyVersions(StrictModel):
    """v0.3.1's ``spec.versions``: one chart pin per component. Deprecated; see ``function.legacy``."""

    gatewayApi: str | None = None  # noqa: N815 - Kubernetes field names
    certManager: str | None = None  # noqa: N815
    envoyGateway: str | None = None  # noqa: N815
    prometheus: str | None = None
    leaderWorkerSet: str | None = None  # noqa: N815
    nodeFeatureDiscovery: str | None = None  # noqa: N815
    nvidiaDraDriver: str | None = None  # noqa: N815


class LegacyStandardPins(StrictModel):
    """PR #406's ``spec.standard``: the LeaderWorkerSet chart pin. Deprecated; see ``function.legacy``."""

    leaderWorkerSet: str | None = None  # noqa: N815 - Kubernetes field name


class LegacyDynamoPins(StrictModel):
    """PR #406's ``spec.dynamo``: Grove and KAI chart pins, the ModelExpress image tag. Deprecated (function.legacy)."""

    grove: str | None = None
    kaiScheduler: str | None = None  # noqa: N815 - Kubernetes field names
    modelExpress: str | None = None  # noqa: N815


class ServingStackSpec(StrictModel):
    # None only on a ServingStack written for v0.3.1: function.legacy infers
    # it or refuses, before anything reads it.
    cloud: Cloud | None = None
    accelerator: Accelerator = Accelerator.NVIDIA
    stack: StackKind = StackKind.STANDARD
    secrets: list[SecretEntry] = Field(default_factory=list)
    gateway: GatewaySpec = Field(default_factory=GatewaySpec)
    # Deprecated v0.3.1 fields, still accepted so the ServingStacks v0.3.1's
    # InferenceCluster writes keep reconciling (function.legacy).
    nvidiaDriverRoot: str | None = None  # noqa: N815
    versions: LegacyVersions | None = None
    # Deprecated PR #406 pins, likewise (its XRD defaulted and stored them).
    standard: LegacyStandardPins | None = None
    dynamo: LegacyDynamoPins | None = None

    # Crossplane v2 keeps its own machinery (compositionRef, resourceRefs …)
    # under spec.crossplane; it is not ours to judge.
    crossplane: dict[str, object] | None = None

    @model_validator(mode="after")
    def _one_identity(self) -> ServingStackSpec:
        identities = [s.type for s in self.secrets if s.type != KUBECONFIG]
        if len(identities) > 1:
            raise ValueError(f"at most one identity secret may be given, got {', '.join(identities)}")
        return self

    def kubeconfig(self) -> SecretEntry | None:
        return next((s for s in self.secrets if s.type == KUBECONFIG), None)

    def identity(self) -> SecretEntry | None:
        return next((s for s in self.secrets if s.type != KUBECONFIG), None)


class Metadata(BaseModel):
    # Metadata is Kubernetes-owned (uid, generation, managedFields …): keep what we use.
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1)
    namespace: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class ServingStack(BaseModel):
    # status is the function's own output and observed state is not validated.
    model_config = ConfigDict(extra="ignore", frozen=True)

    apiVersion: str  # noqa: N815
    kind: str
    metadata: Metadata
    spec: ServingStackSpec
