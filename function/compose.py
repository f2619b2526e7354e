"""Render a plan (planning's output, function.overrides) into desired resources: bodies, Usages, ProviderConfigs.

Every body is a plain tree: the maps made for the request (its top, its spec,
the ProviderConfig reference) around lasting parts, the plan's own copies of a
component's metadata, values or manifest and readiness, encoded once
(function.encode). A fork's transforms edit these very bodies; what they edit of
a lasting part is put back once the response is encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function.bodies import (
    HELM_API,
    KUBERNETES_API,
    RESOURCE_LABEL,
    USAGE_CONSUMER_LABEL,
    api_kind,
    component_body,
    label_value,
)
from function.cache import BoundedCache
from function.encode import Lasting, lasting, size
from function.inputs import ready
from function.model import SecretEntry, ServingStack
from function.overrides.planned import REMOVED, UNMANAGED, Planned
from function.stack import Component
from function.tree import copy_tree

USAGE_API = "protection.crossplane.io/v1beta1"
# Names the EnvironmentConfigs that changed a resource, for auditors.
OVERRIDDEN_BY = "servingstack.modelplane.ai/overridden-by"

HELM_PC = "provider-config-helm"
_APIS = (HELM_API, KUBERNETES_API)
KUBERNETES_PC = "provider-config-kubernetes"


class Composed(NamedTuple):
    """A desired composed resource: its body, and whether Crossplane may call it ready."""

    body: dict[str, Any]
    ready: bool


Desired = dict[str, Composed]
"""Desired composed resources by composed resource name."""


@dataclass
class Observed:
    """What the request says about composed resources that already exist."""

    resources: Mapping[str, fnv1.Resource]

    def has(self, key: str) -> bool:
        return key in self.resources

    def ready(self, key: str) -> bool:
        return key in self.resources and ready(self.resources[key])


def provider_config_name(xr: ServingStack) -> str:
    # The name clusters run today (UPSTREAM.md); changing it orphans releases.
    return resource.child_name(xr.metadata.name, "cluster")


def _selector(label: str, key: str) -> dict[str, Any]:
    # This XR's resource carrying the key's label (a sibling XR's has the same label).
    return {"matchControllerRef": True, "matchLabels": {label: label_value(key)}}


def _usage_part(key: tuple[str, ...], make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The lasting part of a Usage kept under ``key``, made by ``make`` the first time."""
    part = _USAGE_SPECS.get(key)
    if part is None:
        part = lasting(make())
        _USAGE_SPECS.put(key, part, _PART_SIZE + size(part))
    return part.node


def _usage(used: Component, user: Component) -> dict[str, Any]:
    """The Usage holding ``used`` while ``user`` exists; nothing in it depends on the XR."""

    def make() -> dict[str, Any]:
        of_api, of_kind = api_kind(used)
        by_api, by_kind = api_kind(user)
        return {
            # Re-issue the blocked deletion once the user is gone, so teardown
            # finishes without a second reconcile.
            "replayDeletion": True,
            "of": {"apiVersion": of_api, "kind": of_kind, "resourceSelector": _selector(RESOURCE_LABEL, used.key)},
            "by": {"apiVersion": by_api, "kind": by_kind, "resourceSelector": _selector(RESOURCE_LABEL, user.key)},
        }

    spec = _usage_part((used.key, user.key, used.kind, user.kind), make)
    return {"apiVersion": USAGE_API, "kind": "Usage", "spec": spec}


def _provider_config_usage(api: str, by_kind: str, consumer: str, of: dict[str, Any]) -> dict[str, Any]:
    # A ProviderConfig must outlive every resource that reaches the cluster
    # through it, or their deletion can never be processed. One Usage per
    # consumer: a Usage's selector resolves to its first match and stops
    # (crossplane internal/controller/protection/usage/selector.go,
    # resolveSelector), so one Usage with a shared selector protects one.
    # ``of``: this XR's ProviderConfig of ``api``, one object for all its Usages.
    by = _usage_part(
        (api, by_kind, consumer),
        lambda: {"apiVersion": api, "kind": by_kind, "resourceSelector": _selector(USAGE_CONSUMER_LABEL, consumer)},
    )
    return {"apiVersion": USAGE_API, "kind": "Usage", "spec": {"replayDeletion": True, "of": of, "by": by}}


def usage_key(of_key: str, by_key: str) -> str:
    return f"usage-{of_key}-by-{by_key}"


def provider_config_usage_key(consumer: str) -> str:
    return f"usage-pc-{consumer}"


class _Parts(NamedTuple):
    """What a planned component's body holds whatever the XR, each part lasting (function.encode)."""

    component: Component  # held, so its id stays its own while this is kept
    metadata: Lasting
    for_provider: Lasting | None  # None: the manifest takes XR fields, filled per request
    readiness: Lasting | None


# Bodies' fixed parts by planned component (its id, and the documents that
# changed it, named in an annotation); Usages' by keys and kinds. A handful
# per component of the plans in use: the encodings they share are the bulk.
_PARTS: BoundedCache[tuple[int, tuple[str, ...]], _Parts] = BoundedCache("body parts")
_USAGE_SPECS: BoundedCache[tuple[str, ...], Lasting] = BoundedCache("usage parts")
_PART_SIZE = 512  # an entry's own objects, beside its parts' (function.encode.size)


def _parts(planned: Planned) -> _Parts:
    component = planned.component
    key = (id(component), planned.changed_by)
    hit = _PARTS.get(key)
    if hit is not None and hit.component is component:
        return hit
    made = component_body(component)
    metadata, spec = made["metadata"], made["spec"]
    if planned.changed_by:
        metadata.setdefault("annotations", {})[OVERRIDDEN_BY] = ",".join(planned.changed_by)
    readiness = spec.get("readiness")
    parts = _Parts(
        component,
        lasting(metadata),
        None if component.xr_fields else lasting(spec["forProvider"]),
        None if readiness is None else lasting(readiness),
    )
    return _PARTS.put(key, parts, _PART_SIZE + sum(size(p) for p in parts[1:] if p is not None))


def body(planned: Planned, pc_ref: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """A planned component's body for one XR: ``pc_ref`` its ProviderConfig reference, the gateway ``params``
    filled in where its manifest takes XR fields. Only its top, its spec and what an XR field goes through are
    made for the request; the rest is lasting (function.encode)."""
    component = planned.component
    parts = _parts(planned)
    api, kind = api_kind(component)
    spec: dict[str, Any] = {
        "providerConfigRef": pc_ref,
        "forProvider": parts.for_provider.node if parts.for_provider is not None else _filled(component, params),
    }
    if parts.readiness is not None:
        spec["readiness"] = parts.readiness.node
    if planned.state == UNMANAGED:
        # Keep the Helm release on the cluster; only stop managing it.
        spec["managementPolicies"] = ["Observe"]
    return {"apiVersion": api, "kind": kind, "metadata": parts.metadata.node, "spec": spec}


def _filled(component: Component, params: Mapping[str, Any]) -> dict[str, Any]:
    """``spec.forProvider`` of an Object whose manifest takes XR fields: made for the request, all of it (a
    transform may edit it in place; the plan's manifest stays as built). A gateway's few maps."""
    manifest = copy_tree(component.manifest)
    for path, param in component.xr_fields.items():
        *parents, leaf = path.split(".")
        holder = manifest
        for part in parents:
            holder = holder.setdefault(part, {})
        holder[leaf] = params[param]
    return {"manifest": manifest}


def render(xr: ServingStack, observed: Observed, plan: Sequence[Planned]) -> tuple[Desired, list[str]]:
    """The desired composed resources for one XR, by composed resource name; and the keys of the components
    the stack needs that are not composed yet (waiting for the ProviderConfigs), so the XR can say it is
    not ready."""
    pc_name = provider_config_name(xr)
    pc_ref = {"kind": "ProviderConfig", "name": pc_name}  # one object in every body: encoded once
    params = gateway_params(xr)
    desired: Desired = {
        # Ready at once: nothing to wait for.
        HELM_PC: Composed(_provider_config(HELM_API, xr, pc_name), True),
        KUBERNETES_PC: Composed(_provider_config(KUBERNETES_API, xr, pc_name), True),
    }
    # A remote resource is composed only once its ProviderConfigs exist,
    # so the first reconcile does not fail on a missing ProviderConfig.
    pcs_observed = observed.has(HELM_PC) and observed.has(KUBERNETES_PC)
    leaving = _leaving(plan, observed)
    rendered: dict[str, Component] = {}
    pending: list[str] = []
    for planned in plan:
        key = planned.component.key
        if planned.state == REMOVED and key not in leaving:
            continue
        if planned.state == UNMANAGED and not observed.has(key):
            continue  # never installed by us: the cluster's own copy is left alone
        if not (pcs_observed or observed.has(key)):
            pending.append(key)
            continue
        desired[key] = Composed(body(planned, pc_ref, params), observed.ready(key))
        rendered[key] = planned.component
    _usages(desired, plan, rendered, observed, pc_name)
    return desired, pending


def _usages(
    desired: Desired, plan: Sequence[Planned], rendered: Mapping[str, Component], observed: Observed, pc_name: str
) -> None:
    # This XR's ProviderConfig of each API, as every ProviderConfig Usage names it: one object each.
    of = {api: {"apiVersion": api, "kind": "ProviderConfig", "resourceRef": {"name": pc_name}} for api in _APIS}
    # Usages have no readiness of their own to wait for.
    for key, component in rendered.items():
        api, kind = api_kind(component)
        desired[provider_config_usage_key(key)] = Composed(_provider_config_usage(api, kind, key, of[api]), True)
    # A consumer on its way out (no longer desired, still observed) keeps
    # its ProviderConfig until it is gone: its uninstall needs it. Only
    # one carrying our consumer label: another pipeline step's resources
    # are not ours to protect, and a selector must resolve.
    for key, obs in observed.resources.items():
        if key in rendered:
            continue
        remote = _remote_api_kind(obs.resource)
        if remote is not None and _consumer_label(obs.resource) == label_value(key):
            desired[provider_config_usage_key(key)] = Composed(
                _provider_config_usage(*remote, key, of[remote[0]]), True
            )
    # The Usage stays while its user is on the cluster, even once the user
    # is no longer desired: it leaves only after the user is gone, and the
    # used component only after the Usage (see _leaving).
    components = {p.component.key: p.component for p in plan}
    for user in components.values():
        if user.finalized_by_dependencies and (user.key in rendered or observed.has(user.key)):
            for dep in user.depends_on:
                if dep in rendered:
                    desired[usage_key(dep, user.key)] = Composed(_usage(components[dep], user), True)


def _leaving(plan: Sequence[Planned], observed: Observed) -> set[str]:
    """Removed components that stay composed until what depends on them is gone.

    Removal goes in dependency order, one step per reconcile: first the
    dependents leave, then the Usages that held the component for them, then
    the component. Deleting a used resource together with its Usage would hit
    the Usage admission webhook (409 Conflict while a Usage of the resource
    exists, crossplane internal/webhook/protection/usage/handler.go), because
    garbage collection deletes every undesired resource in one pass and
    strips the Usage's composite label so it does not wait for its user
    (crossplane internal/controller/apiextensions/composite/
    composition_functions.go, GarbageCollectComposedResources;
    internal/controller/protection/usage/reconciler.go).
    """
    removed = {p.component.key for p in plan if p.state == REMOVED and observed.has(p.component.key)}
    if not removed:
        return set()
    return {
        dep
        for p in plan
        for dep in p.component.depends_on
        if dep in removed and (observed.has(p.component.key) or observed.has(usage_key(dep, p.component.key)))
    }


def _remote_api_kind(body: struct_pb2.Struct) -> tuple[str, str] | None:
    """(apiVersion, kind) of an observed Release or Object; None for anything else."""
    api, kind = body.fields.get("apiVersion"), body.fields.get("kind")
    pair = (api.string_value if api else "", kind.string_value if kind else "")
    return pair if pair in ((HELM_API, "Release"), (KUBERNETES_API, "Object")) else None


def _consumer_label(body: struct_pb2.Struct) -> str:
    meta = body.fields.get("metadata")
    labels = meta.struct_value.fields.get("labels") if meta else None
    value = labels.struct_value.fields.get(USAGE_CONSUMER_LABEL) if labels else None
    return value.string_value if value else ""


def _provider_config(api: str, xr: ServingStack, name: str) -> dict[str, Any]:
    """The XR's ProviderConfig of ``api``: the kubeconfig it reads, and the cloud identity where the XR gives one.

    Their namespaces are within the XR's reach: function.tenancy checked them before rendering.
    """
    kubeconfig = xr.spec.kubeconfig()
    assert kubeconfig is not None, "checked before rendering"
    spec: dict[str, Any] = {"credentials": {"source": "Secret", "secretRef": _secret_ref(kubeconfig, xr)}}
    identity = xr.spec.identity()
    if identity is not None:
        # The kubeconfig gives endpoint and CA; the cloud identity
        # authenticates, so no long-lived token sits in the kubeconfig.
        spec["identity"] = {"type": identity.type, "source": "Secret", "secretRef": _secret_ref(identity, xr)}
    return {"apiVersion": api, "kind": "ProviderConfig", "metadata": {"name": name}, "spec": spec}


def _secret_ref(secret: SecretEntry, xr: ServingStack) -> dict[str, str]:
    return {"name": secret.name, "namespace": secret.namespace or xr.metadata.namespace, "key": secret.key}


def gateway_params(xr: ServingStack) -> dict[str, Any]:
    """The XR-derived parameters generated manifests may reference by name."""
    gateway = xr.spec.gateway
    return {
        "gateway.className": gateway.className,
        "gateway.listeners": [
            {
                **listener.model_dump(exclude_none=True),
                # Model HTTPRoutes live in their own namespaces.
                "allowedRoutes": {"namespaces": {"from": "All"}},
            }
            for listener in gateway.listeners
        ],
    }
