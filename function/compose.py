"""Render a plan (planning's output, function.overrides) into desired resources: bodies, Usages, ProviderConfigs.

Everything that does not depend on the request is converted to protobuf once
per process: RunFunction runs on every reconcile of every cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

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
from function.cache import MIB, PROTOBUF_FACTOR, BoundedCache
from function.inputs import ready
from function.model import SecretEntry, ServingStack
from function.overrides.planned import REMOVED, UNMANAGED, Planned
from function.stack import Component, Stack
from function.tree import to_struct

USAGE_API = "protection.crossplane.io/v1beta1"
# Names the EnvironmentConfigs that changed a resource, for auditors.
OVERRIDDEN_BY = "servingstack.modelplane.ai/overridden-by"

HELM_PC = "provider-config-helm"
KUBERNETES_PC = "provider-config-kubernetes"


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


def _usage(used: Component, user: Component) -> dict[str, Any]:
    of_api, of_kind = api_kind(used)
    by_api, by_kind = api_kind(user)
    return {
        "apiVersion": USAGE_API,
        "kind": "Usage",
        "spec": {
            # Re-issue the blocked deletion once the user is gone, so teardown
            # finishes without a second reconcile.
            "replayDeletion": True,
            "of": {
                "apiVersion": of_api,
                "kind": of_kind,
                "resourceSelector": _selector(RESOURCE_LABEL, used.key),
            },
            "by": {
                "apiVersion": by_api,
                "kind": by_kind,
                "resourceSelector": _selector(RESOURCE_LABEL, user.key),
            },
        },
    }


# One per (API, kind, consumer); consumers include per-pool drivers, named by
# user input, so this grows with input unless bounded.
_PC_USAGES: BoundedCache[tuple[str, str, str], struct_pb2.Struct] = BoundedCache(
    "provider config usages", max_entries=4096, max_bytes=4 * MIB
)


def _provider_config_usage(api: str, by_kind: str, consumer: str) -> struct_pb2.Struct:
    cached = _PC_USAGES.get((api, by_kind, consumer))
    if cached is None:
        cached = _build_provider_config_usage(api, by_kind, consumer)
        _PC_USAGES.put((api, by_kind, consumer), cached, cached.ByteSize() * PROTOBUF_FACTOR)
    return cached


def _build_provider_config_usage(api: str, by_kind: str, consumer: str) -> struct_pb2.Struct:
    # A ProviderConfig must outlive every resource that reaches the cluster
    # through it, or their deletion can never be processed. One Usage per
    # consumer: a Usage's selector resolves to its first match and stops
    # (crossplane internal/controller/protection/usage/selector.go,
    # resolveSelector), so one Usage with a shared selector protects one.
    return _to_struct(
        {
            "apiVersion": USAGE_API,
            "kind": "Usage",
            "spec": {
                "replayDeletion": True,
                "of": {"apiVersion": api, "kind": "ProviderConfig", "resourceRef": {"name": ""}},
                "by": {
                    "apiVersion": api,
                    "kind": by_kind,
                    "resourceSelector": _selector(USAGE_CONSUMER_LABEL, consumer),
                },
            },
        }
    )


def usage_key(of_key: str, by_key: str) -> str:
    return f"usage-{of_key}-by-{by_key}"


def provider_config_usage_key(consumer: str) -> str:
    return f"usage-pc-{consumer}"


def _to_struct(body: dict[str, Any]) -> struct_pb2.Struct:
    return to_struct(body)


# Overridden component bodies, keyed by identity: a planned component is a
# cached plan's own object, held in the entry so its id stays unique while
# cached. The plan cache holds 128 plans; a mirrored plan changes all ~26.
_DERIVED: BoundedCache[int, tuple[Component, struct_pb2.Struct]] = BoundedCache(
    "overridden bodies", max_entries=4096, max_bytes=32 * MIB
)
# Usage bodies, one per (stack, used, user): per-pool drivers add pairs from
# user input (the driver's name), so this grows with input unless bounded.
_USAGES: BoundedCache[tuple[str, str], struct_pb2.Struct] = BoundedCache("usages", max_entries=4096, max_bytes=4 * MIB)


class StackRenderer:
    """Renders one stack; holds its request-independent protobuf once."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self._own = {c.key: c for c in stack.components}
        self._static = {c.key: _to_struct(component_body(c)) for c in stack.components}

    def _struct(self, component: Component) -> struct_pb2.Struct:
        cached = self._static.get(component.key)
        if cached is not None and self._own.get(component.key) is component:
            return cached
        # A component the override layer changed: its plans are cached, so the
        # same object comes back on every reconcile; convert it once.
        hit = _DERIVED.get(id(component))
        if hit is not None and hit[0] is component:
            return hit[1]
        struct = _to_struct(component_body(component))
        _DERIVED.put(id(component), (component, struct), struct.ByteSize() * PROTOBUF_FACTOR)
        return struct

    def _write_body(self, target: struct_pb2.Struct, planned: Planned, xr_params: Mapping[str, Any]) -> None:
        component = planned.component
        target.CopyFrom(self._struct(component))
        if component.xr_fields:
            manifest = _struct_at(target, "spec", "forProvider", "manifest")
            for path, param in component.xr_fields.items():
                _set_struct_path(manifest, path, xr_params[param])

    def render(
        self,
        xr: ServingStack,
        observed: Observed,
        plan: Sequence[Planned],
        into: MutableMapping[str, fnv1.Resource],
    ) -> list[str]:
        """Write the desired composed resources for one XR into ``into``, keyed by composed resource name.

        Written straight into a response's desired resources: every copy of a
        large Struct costs on the hot path. Returns the keys of the components
        the stack needs that are not composed yet (waiting for the
        ProviderConfigs), so the XR can say it is not ready.
        """
        pc_name = provider_config_name(xr)
        kubeconfig = xr.spec.kubeconfig()
        assert kubeconfig is not None, "checked before rendering"
        for key, api in ((HELM_PC, HELM_API), (KUBERNETES_PC, KUBERNETES_API)):
            into[key].resource.CopyFrom(
                _provider_config(api, pc_name, xr.metadata.namespace, kubeconfig, xr.spec.identity())
            )
            into[key].ready = fnv1.READY_TRUE  # nothing to wait for
        # A remote resource is composed only once its ProviderConfigs exist,
        # so the first reconcile does not fail on a missing ProviderConfig.
        pcs_observed = observed.has(HELM_PC) and observed.has(KUBERNETES_PC)
        xr_params = gateway_params(xr)
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
            desired = into[key]
            body = desired.resource
            self._write_body(body, planned, xr_params)
            _struct_at(body, "spec", "providerConfigRef").fields["name"].string_value = pc_name
            if planned.state == UNMANAGED:
                # Keep the Helm release on the cluster; only stop managing it.
                body["spec"]["managementPolicies"] = ["Observe"]
            if planned.changed_by:
                body["metadata"].get_or_create_struct("annotations")[OVERRIDDEN_BY] = ",".join(planned.changed_by)
            if observed.ready(key):
                desired.ready = fnv1.READY_TRUE
            rendered[key] = planned.component
        self._render_usages(into, plan, rendered, observed, pc_name)
        return pending

    def _render_usages(
        self,
        out: MutableMapping[str, fnv1.Resource],
        plan: Sequence[Planned],
        rendered: Mapping[str, Component],
        observed: Observed,
        pc_name: str,
    ) -> None:
        # Usages have no readiness of their own to wait for.
        consumers = {key: api_kind(comp) for key, comp in rendered.items()}
        # A consumer on its way out (no longer desired, still observed) keeps
        # its ProviderConfig until it is gone: its uninstall needs it. Only
        # one carrying our consumer label: another pipeline step's resources
        # are not ours to protect, and a selector must resolve.
        for key, obs in observed.resources.items():
            remote = _remote_api_kind(obs.resource)
            if key not in rendered and remote is not None and _consumer_label(obs.resource) == label_value(key):
                consumers[key] = remote
        for key, (api, kind) in consumers.items():
            target = out[provider_config_usage_key(key)]
            _write_ready(target, _provider_config_usage(api, kind, key))
            _struct_at(target.resource, "spec", "of", "resourceRef").fields["name"].string_value = pc_name
        for planned in plan:
            user = planned.component
            # The Usage stays while its user is on the cluster, even once the
            # user is no longer desired: it leaves only after the user is gone,
            # and the used component only after the Usage (see _leaving).
            if not user.finalized_by_dependencies or not (user.key in rendered or observed.has(user.key)):
                continue
            for dep in user.depends_on:
                used = rendered.get(dep)
                if used is not None:
                    _write_ready(out[usage_key(dep, user.key)], self._usage(used, user))

    def _usage(self, used: Component, user: Component) -> struct_pb2.Struct:
        key = (self.stack.id, usage_key(used.key, user.key))
        cached = _USAGES.get(key)
        if cached is None:
            cached = _to_struct(_usage(used, user))
            _USAGES.put(key, cached, cached.ByteSize() * PROTOBUF_FACTOR)
        return cached


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


def _struct_at(node: struct_pb2.Struct, *keys: str) -> struct_pb2.Struct:
    """The map at ``keys`` in one of our own bodies, as ``node[k1][k2]...`` reads it, without the SDK's
    per-step Python wrapper (the hot path writes a few fields into every body of every response)."""
    for key in keys:
        node = node.fields[key].struct_value
    return node


def _write_ready(target: fnv1.Resource, body: struct_pb2.Struct) -> None:
    target.resource.CopyFrom(body)
    target.ready = fnv1.READY_TRUE


def _set_struct_path(node: struct_pb2.Struct, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.get_or_create_struct(part)
    node[leaf] = value


# One pair of ProviderConfigs per cluster of the fleet.
_PROVIDER_CONFIGS: BoundedCache[tuple[str, str, str, SecretEntry, SecretEntry | None], struct_pb2.Struct] = (
    BoundedCache("provider configs", max_entries=4096, max_bytes=4 * MIB)
)


def _provider_config(
    api: str, name: str, xr_namespace: str, kubeconfig: SecretEntry, identity: SecretEntry | None
) -> struct_pb2.Struct:
    key = (api, name, xr_namespace, kubeconfig, identity)
    cached = _PROVIDER_CONFIGS.get(key)
    if cached is None:
        cached = _build_provider_config(*key)
        _PROVIDER_CONFIGS.put(key, cached, cached.ByteSize() * PROTOBUF_FACTOR)
    return cached


def _build_provider_config(
    api: str, name: str, xr_namespace: str, kubeconfig: SecretEntry, identity: SecretEntry | None
) -> struct_pb2.Struct:
    spec: dict[str, Any] = {
        "credentials": {
            "source": "Secret",
            "secretRef": {
                "name": kubeconfig.name,
                "namespace": kubeconfig.namespace or xr_namespace,
                "key": kubeconfig.key,
            },
        }
    }
    if identity is not None:
        # The kubeconfig gives endpoint and CA; the cloud identity
        # authenticates, so no long-lived token sits in the kubeconfig.
        spec["identity"] = {
            "type": identity.type,
            "source": "Secret",
            "secretRef": {
                "name": identity.name,
                "namespace": identity.namespace or xr_namespace,
                "key": identity.key,
            },
        }
    return _to_struct({"apiVersion": api, "kind": "ProviderConfig", "metadata": {"name": name}, "spec": spec})


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


@cache
def renderer(stack: Stack) -> StackRenderer:
    return StackRenderer(stack)
