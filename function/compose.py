"""Turn a stack (plus what the override layer planned) into desired resources.

Everything that does not depend on the request is converted to protobuf once
per process: RunFunction runs on every reconcile of every cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function.model import ServingStack
from function.paths import set_path
from function.stack import Component, Stack

HELM_API = "helm.m.crossplane.io/v1beta1"
KUBERNETES_API = "kubernetes.m.crossplane.io/v1alpha1"
USAGE_API = "protection.crossplane.io/v1beta1"

# Label every composed resource carries, so Usages can select a sibling by key.
RESOURCE_LABEL = "modelplane.ai/resource"
EXTERNAL_NAME = "crossplane.io/external-name"
# Names the EnvironmentConfigs that changed a resource, for auditors.
OVERRIDDEN_BY = "servingstack.modelplane.ai/overridden-by"

HELM_PC = "provider-config-helm"
KUBERNETES_PC = "provider-config-kubernetes"

MANAGED = "Managed"
UNMANAGED = "Unmanaged"
REMOVED = "Removed"


@dataclass(frozen=True)
class Planned:
    """A component as the override layer left it for this request."""

    component: Component
    state: str = MANAGED
    changed_by: tuple[str, ...] = ()


@dataclass
class Observed:
    """What the request says about composed resources that already exist."""

    resources: Mapping[str, fnv1.Resource]

    def has(self, key: str) -> bool:
        return key in self.resources

    def ready(self, key: str) -> bool:
        return key in self.resources and resource.get_condition(self.resources[key], "Ready").status == "True"


@dataclass
class Composed:
    """The request-specific result: desired resources and what went into them."""

    resources: dict[str, fnv1.Resource] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)


def provider_config_name(xr: ServingStack) -> str:
    # The name clusters run today (UPSTREAM.md); changing it orphans releases.
    return resource.child_name(xr.metadata.name, "cluster")


def _labels(key: str) -> dict[str, Any]:
    return {"labels": {RESOURCE_LABEL: key}}


def release_body(component: Component) -> dict[str, Any]:
    assert component.chart is not None
    return {
        "apiVersion": HELM_API,
        "kind": "Release",
        "metadata": {
            # Stable, short Helm release name that cannot collide with a
            # release the cluster already runs (and matches today's releases).
            "annotations": {EXTERNAL_NAME: component.release_name},
            **_labels(component.key),
        },
        "spec": {
            "providerConfigRef": {"kind": "ProviderConfig", "name": ""},
            "forProvider": {
                "chart": {
                    "name": component.chart.name,
                    "repository": component.chart.repository,
                    "version": component.chart.version,
                },
                "namespace": component.namespace,
                "values": component.values,
            },
        },
    }


def object_body(component: Component, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "providerConfigRef": {"kind": "ProviderConfig", "name": ""},
        "forProvider": {"manifest": manifest if manifest is not None else component.manifest},
    }
    if component.readiness:
        spec["readiness"] = dict(component.readiness)
    return {"apiVersion": KUBERNETES_API, "kind": "Object", "metadata": _labels(component.key), "spec": spec}


def component_body(component: Component) -> dict[str, Any]:
    return release_body(component) if component.is_release else object_body(component)


def _usage(used: Component, user: Component) -> dict[str, Any]:
    of_api, of_kind = _api_kind(used)
    by_api, by_kind = _api_kind(user)
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
                "resourceSelector": {"matchControllerRef": True, "matchLabels": {RESOURCE_LABEL: used.key}},
            },
            "by": {
                "apiVersion": by_api,
                "kind": by_kind,
                "resourceSelector": {"matchControllerRef": True, "matchLabels": {RESOURCE_LABEL: user.key}},
            },
        },
    }


def _provider_config_usage(api: str, by_kind: str) -> dict[str, Any]:
    # A ProviderConfig must outlive every resource that reaches the cluster
    # through it, or their deletion can never be processed.
    return {
        "apiVersion": USAGE_API,
        "kind": "Usage",
        "spec": {
            "replayDeletion": True,
            "of": {"apiVersion": api, "kind": "ProviderConfig", "resourceRef": {"name": ""}},
            "by": {"apiVersion": api, "kind": by_kind, "resourceSelector": {"matchControllerRef": True}},
        },
    }


def _api_kind(component: Component) -> tuple[str, str]:
    return (HELM_API, "Release") if component.is_release else (KUBERNETES_API, "Object")


def usage_key(of_key: str, by_key: str) -> str:
    return f"usage-{of_key}-by-{by_key}"


def _to_struct(body: dict[str, Any]) -> struct_pb2.Struct:
    return resource.dict_to_struct(body)


class StackRenderer:
    """Renders one stack; holds its request-independent protobuf once."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.plan = tuple(Planned(c) for c in stack.components)
        self._own = {c.key: c for c in stack.components}
        self._static: dict[str, struct_pb2.Struct] = {
            c.key: _to_struct(component_body(c)) for c in stack.components if not c.xr_fields
        }
        self._helm_pc_usage = _to_struct(_provider_config_usage(HELM_API, "Release"))
        self._kubernetes_pc_usage = _to_struct(_provider_config_usage(KUBERNETES_API, "Object"))
        self._usages: dict[str, struct_pb2.Struct] = {}

    def _body(self, planned: Planned, xr_params: Mapping[str, Any]) -> struct_pb2.Struct:
        component = planned.component
        cached = self._static.get(component.key)
        if cached is not None and self._own.get(component.key) is component:
            body = struct_pb2.Struct()
            body.CopyFrom(cached)
            return body
        raw = component_body(component)
        if component.xr_fields:
            manifest = raw["spec"]["forProvider"]["manifest"]
            for path, param in component.xr_fields.items():
                set_path(manifest, path, xr_params[param])
        return _to_struct(raw)

    def render(
        self,
        xr: ServingStack,
        observed: Observed,
        plan: Sequence[Planned] | None = None,
    ) -> dict[str, fnv1.Resource]:
        """Desired composed resources for one XR, keyed by composed resource name."""
        plan = self.plan if plan is None else plan
        pc_name = provider_config_name(xr)
        out: dict[str, fnv1.Resource] = {
            HELM_PC: _ready(_to_struct(_provider_config(xr, HELM_API, pc_name))),
            KUBERNETES_PC: _ready(_to_struct(_provider_config(xr, KUBERNETES_API, pc_name))),
        }
        # A remote resource is composed only once its ProviderConfigs exist,
        # so the first reconcile does not fail on a missing ProviderConfig.
        pcs_observed = observed.has(HELM_PC) and observed.has(KUBERNETES_PC)
        xr_params = gateway_params(xr)
        rendered: dict[str, Component] = {}
        for planned in plan:
            key = planned.component.key
            if planned.state == REMOVED:
                continue
            if planned.state == UNMANAGED and not observed.has(key):
                continue  # never installed by us: the cluster's own copy is left alone
            if not (pcs_observed or observed.has(key)):
                continue
            body = self._body(planned, xr_params)
            body["spec"]["providerConfigRef"]["name"] = pc_name
            if planned.state == UNMANAGED:
                # Keep the Helm release on the cluster; only stop managing it.
                body["spec"]["managementPolicies"] = ["Observe"]
            if planned.changed_by:
                body["metadata"]["annotations"] = {
                    **(dict(body["metadata"]["annotations"]) if "annotations" in body["metadata"] else {}),
                    OVERRIDDEN_BY: ",".join(planned.changed_by),
                }
            desired = fnv1.Resource(resource=body)
            if observed.ready(key):
                desired.ready = fnv1.READY_TRUE
            out[key] = desired
            rendered[key] = planned.component
        self._render_usages(out, rendered, pc_name)
        return out

    def _render_usages(self, out: dict[str, fnv1.Resource], rendered: Mapping[str, Component], pc_name: str) -> None:
        if any(c.is_release for c in rendered.values()):
            usage = _ready(_copy(self._helm_pc_usage))
            usage.resource["spec"]["of"]["resourceRef"]["name"] = pc_name
            out["usage-helm-pc"] = usage
        if any(not c.is_release for c in rendered.values()):
            usage = _ready(_copy(self._kubernetes_pc_usage))
            usage.resource["spec"]["of"]["resourceRef"]["name"] = pc_name
            out["usage-k8s-pc"] = usage
        for user in rendered.values():
            if not user.finalized_by_dependencies:
                continue
            for dep in user.depends_on:
                used = rendered.get(dep)
                if used is not None:
                    out[usage_key(dep, user.key)] = _ready(_copy(self._usage(used, user)))

    def _usage(self, used: Component, user: Component) -> struct_pb2.Struct:
        key = usage_key(used.key, user.key)
        if key not in self._usages:
            self._usages[key] = _to_struct(_usage(used, user))
        return self._usages[key]


def _copy(struct: struct_pb2.Struct) -> struct_pb2.Struct:
    copy = struct_pb2.Struct()
    copy.CopyFrom(struct)
    return copy


def _ready(struct: struct_pb2.Struct) -> fnv1.Resource:
    # ProviderConfigs and Usages have no readiness of their own to wait for.
    return fnv1.Resource(resource=struct, ready=fnv1.READY_TRUE)


def _provider_config(xr: ServingStack, api: str, name: str) -> dict[str, Any]:
    kubeconfig = xr.spec.kubeconfig()
    assert kubeconfig is not None, "checked before rendering"
    spec: dict[str, Any] = {
        "credentials": {
            "source": "Secret",
            "secretRef": {
                "name": kubeconfig.name,
                "namespace": kubeconfig.namespace or xr.metadata.namespace,
                "key": kubeconfig.key,
            },
        }
    }
    identity = xr.spec.identity()
    if identity is not None:
        # The kubeconfig gives endpoint and CA; the cloud identity
        # authenticates, so no long-lived token sits in the kubeconfig.
        spec["identity"] = {
            "type": identity.type,
            "source": "Secret",
            "secretRef": {
                "name": identity.name,
                "namespace": identity.namespace or xr.metadata.namespace,
                "key": identity.key,
            },
        }
    return {"apiVersion": api, "kind": "ProviderConfig", "metadata": {"name": name}, "spec": spec}


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
