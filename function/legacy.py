"""ServingStacks written for Modelplane v0.3.1: no ``spec.cloud``, maybe its deprecated fields.

The InferenceCluster composition of v0.3.1 writes ServingStacks without a
cloud (its compose-inference-cluster function sets only ``secrets`` and, on
GKE, ``nvidiaDriverRoot``), and v0.3.1's XRD defaulted ``nvidiaDriverRoot``
to ``/`` and every ``spec.versions`` pin, so stored objects carry them. Until
the parent sets ``spec.cloud``, the cloud is inferred where the old fields
leave no doubt, with a Warning saying what to set; otherwise it is a Fatal.
Modelplane PR #406 (the Dynamo stack) moved the LeaderWorkerSet pin to
``spec.standard`` and added ``spec.dynamo``'s; they go the way of
``spec.versions``: a stored default is accepted, any other pin is a Fatal.
"""

from __future__ import annotations

from function.errors import InputError
from function.model import KUBECONFIG, Cloud, ServingStack, ServingStackSpec

# Where GKE's COS node image installs the NVIDIA driver; v0.3.1's
# compose-inference-cluster sets exactly this root on GKE clusters and
# nowhere else (_GKE_NVIDIA_DRIVER_ROOT).
GKE_DRIVER_ROOT = "/home/kubernetes/bin/nvidia"

# The cloud an identity secret belongs to. Kubeconfig-only ServingStacks
# (v0.3.1's EKS, AKS, Vultr and Existing) say nothing about their cloud.
IDENTITY_CLOUDS = {
    "AWSWebIdentityCredentials": Cloud.EKS,
    "GoogleApplicationCredentials": Cloud.GKE,
    "NebiusServiceAccountCredentials": Cloud.NEBIUS,
}

# v0.3.1's XRD defaults for spec.versions (modelplane v0.3.1
# apis/servingstacks/definition.yaml; recorded in facts/v0.3.1.yaml), and the
# component each pin moved to. A stored default is not the user's choice; a
# pin that differs is, and is not silently dropped.
V031_VERSION_DEFAULTS = {
    "gatewayApi": "v1.5.1",
    "certManager": "v1.17.1",
    "envoyGateway": "v1.8.1",
    "prometheus": "72.6.2",
    "leaderWorkerSet": "v0.8.0",
    "nodeFeatureDiscovery": "0.18.3",
    "nvidiaDraDriver": "0.4.0",
}
VERSION_COMPONENTS = {
    "certManager": "cert-manager",
    "envoyGateway": "envoy-gateway",
    "prometheus": "prometheus",
    "leaderWorkerSet": "leader-worker-set",
    "nodeFeatureDiscovery": "node-feature-discovery",
    "nvidiaDraDriver": "dra-driver",
}


# Modelplane PR #406's XRD defaults for its per-stack pins (apis/servingstacks/
# definition.yaml@a3a11bc5 L178-207; recorded in facts/pr406-dynamo.yaml), and
# where each pin is held now. Its compose-inference-cluster never sets them,
# so a stored value is the default unless a person wrote another.
# (group, field) -> (PR #406's default, the override that holds it now)
PR406_PINS = {
    ("standard", "leaderWorkerSet"): ("v0.8.0", "servingStack.components.leader-worker-set.version"),
    ("dynamo", "grove"): ("v0.1.0-alpha.6", "servingStack.components.grove.version"),
    ("dynamo", "kaiScheduler"): ("v0.16.8", "servingStack.components.kai-scheduler.version"),
    # An image tag, not a chart: the Deployment's container image, by a manifest patch.
    ("dynamo", "modelExpress"): ("0.4.1", "servingStack.components.modelexpress-server.manifest (the container image)"),
}


def _evidence(spec: ServingStackSpec) -> tuple[set[Cloud], str]:
    """The clouds the v0.3.1 fields point at (one when they agree), and those fields in words."""
    identity = spec.identity()
    words = [f"a {identity.type} secret" if identity else f"only a {KUBECONFIG} secret"]
    clouds = {IDENTITY_CLOUDS[identity.type]} if identity and identity.type in IDENTITY_CLOUDS else set()
    root = spec.nvidiaDriverRoot
    if root is not None:
        words.append(f"spec.nvidiaDriverRoot {root}")
    if root == GKE_DRIVER_ROOT:
        clouds.add(Cloud.GKE)
    elif root is not None and Cloud.GKE in clouds:
        # Google credentials with the driver elsewhere: v0.3.1 wrote that for
        # an Existing cluster with a Google identity, which need not be GKE,
        # and GKE's stack would move the DRA driver's root under it.
        clouds.clear()
    return clouds, " and ".join(words)


def resolve(xr: ServingStack, name: str) -> ServingStack:
    """``xr`` with ``spec.cloud`` set; a Fatal where it is missing and cannot be told, or a v0.3.1 pin would be lost."""
    _check_versions(xr.spec, name)
    _check_stack_pins(xr.spec, name)
    if xr.spec.cloud is not None:
        return xr
    clouds, words = _evidence(xr.spec)
    choices = ", ".join(c.value for c in Cloud)
    if len(clouds) != 1:
        raise InputError(
            f"{name}: spec.cloud: required; the fields a v0.3.1 ServingStack has ({words}) do not tell "
            f"the cloud: set spec.cloud to one of {choices}"
        )
    return xr.model_copy(update={"spec": xr.spec.model_copy(update={"cloud": clouds.pop()})})


def notes(xr: ServingStack, cloud_given: bool, stack_id: str, driver_root: str, name: str) -> list[str]:
    """Warnings for a ServingStack that still uses v0.3.1's fields; the stack's id and where it finds the driver."""
    out = []
    if not cloud_given:
        _, words = _evidence(xr.spec)
        out.append(
            f"{name}: spec.cloud is not set (a ServingStack written for v0.3.1): {xr.spec.cloud} inferred "
            f"from {words}; set spec.cloud: {xr.spec.cloud}"
        )
    root = xr.spec.nvidiaDriverRoot
    if root is not None and root != driver_root:
        out.append(
            f"{name}: spec.nvidiaDriverRoot {root} is deprecated and not read: stack {stack_id} finds the "
            f"driver at {driver_root}; remove the field"
        )
    return out


def _check_versions(spec: ServingStackSpec, name: str) -> None:
    if spec.versions is None:
        return
    for field, default in V031_VERSION_DEFAULTS.items():
        pin = getattr(spec.versions, field)
        if pin is None or pin == default:
            continue
        key = VERSION_COMPONENTS.get(field)
        carry = (
            f"hold it with an EnvironmentConfig (servingStack.components.{key}.version) or remove the pin"
            if key
            else "the Gateway API CRDs now come with envoy-gateway's chart: remove the pin"
        )
        raise InputError(
            f"{name}: spec.versions.{field}: {pin} differs from v0.3.1's default {default}, and spec.versions "
            f"is deprecated and no longer read; {carry}"
        )


def _check_stack_pins(spec: ServingStackSpec, name: str) -> None:
    for (group, field), (default, hold) in PR406_PINS.items():
        pins = getattr(spec, group)
        pin = getattr(pins, field) if pins is not None else None
        if pin is None or pin == default:
            continue
        raise InputError(
            f"{name}: spec.{group}.{field}: {pin} differs from Modelplane PR #406's default {default}, and "
            f"spec.{group} is deprecated and no longer read; hold it with an EnvironmentConfig "
            f"({hold}) or remove the pin"
        )
