"""Render a plan (planning's output, function.overrides) into desired resources: bodies, Usages, ProviderConfigs.

Everything that does not depend on the request is encoded once per process
(:mod:`function.wire`): RunFunction runs on every reconcile of every cluster,
and a request only fills in what is its own (the ProviderConfig's name and
secrets, the gateway fields) around bytes encoded before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
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
    chart_block,
    component_body,
    label_value,
)
from function.cache import PYTHON_FACTOR, BoundedCache
from function.inputs import ready
from function.model import IDENTITY_TYPES, Listener, ServingStack
from function.overrides.planned import MANAGED, REMOVED, UNMANAGED, Planned
from function.stack import Component, Stack
from function.tree import to_struct
from function.wire import Resources, Template, string_value, value

USAGE_API = "protection.crossplane.io/v1beta1"
# Names the EnvironmentConfigs that changed a resource, for auditors.
OVERRIDDEN_BY = "servingstack.modelplane.ai/overridden-by"

# What a request fills into every body: the ProviderConfig's name; the
# gateway parameters fill in under their own names (gateway_params).
PC_NAME_FILL = "providerConfigRef.name"
# A ProviderConfig's secrets fill in as <KUBECONFIG_FILL or IDENTITY_FILL>.<field>.
KUBECONFIG_FILL = "kubeconfig"
IDENTITY_FILL = "identity"
_SECRET_FIELDS = ("name", "namespace", "key")
_PC_NAME = ("spec", "providerConfigRef", "name")
_FOR_PROVIDER = ("spec", "forProvider")
_MANIFEST = (*_FOR_PROVIDER, "manifest")

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


def _provider_config_usage(api: str, by_kind: str, consumer: str) -> Template:
    # A ProviderConfig must outlive every resource that reaches the cluster
    # through it, or their deletion can never be processed. One Usage per
    # consumer: a Usage's selector resolves to its first match and stops
    # (crossplane internal/controller/protection/usage/selector.go,
    # resolveSelector), so one Usage with a shared selector protects one.
    return Template(
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
        },
        {("spec", "of", "resourceRef", "name"): PC_NAME_FILL},
    )


def usage_key(of_key: str, by_key: str) -> str:
    return f"usage-{of_key}-by-{by_key}"


def provider_config_usage_key(consumer: str) -> str:
    return f"usage-pc-{consumer}"


def whole_body(planned: Planned) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """A planned component's whole body, and the holes each request fills in it (see render)."""
    component = planned.component
    out = component_body(component)
    if planned.state == UNMANAGED:
        # Keep the Helm release on the cluster; only stop managing it.
        out["spec"]["managementPolicies"] = ["Observe"]
    if planned.changed_by:
        out["metadata"].setdefault("annotations", {}).update(_overridden_by(planned))
    holes = {_PC_NAME: PC_NAME_FILL, **{(*_MANIFEST, *p.split(".")): f for p, f in component.xr_fields.items()}}
    return out, holes


def _overridden_by(planned: Planned) -> dict[str, str]:
    """The annotation naming the documents that changed a planned component, if any did."""
    return {OVERRIDDEN_BY: ",".join(planned.changed_by)} if planned.changed_by else {}


def body_template(planned: Planned) -> Template:
    """A planned component's body, encoded around its holes: a skeleton kept, what varies put in."""
    if planned.component.xr_fields:
        return Template(*whole_body(planned))  # requests fill fields inside the manifest: encoded whole, around them
    skeleton, parts = _skeleton_of(planned)
    # Converted together; a Value holding a map encodes as serialized_struct_value of the map's encoding.
    converted = to_struct(parts).fields
    return skeleton.filled({fill: converted[fill].SerializeToString(deterministic=True) for fill in parts})


def _skeleton_of(planned: Planned) -> tuple[Template, dict[str, dict[str, Any]]]:
    """The skeleton of a planned component's body, and what varies (_VARYING) by the fill it goes into.

    The skeleton kept (made with the stack's own bodies, at start-up), what
    varies is read off the component: its values or manifest, its chart
    block, its own annotations (as the skeleton's body had them: the key
    holds what they are made of) and the documents' (_overridden_by); the
    whole body is made only for a skeleton not kept yet.
    """
    component = planned.component
    field = "values" if component.is_release else "manifest"
    key = _skeleton_key(planned)
    hit = _SKELETONS.get(key)
    if hit is None:
        tree, _holes = whole_body(planned)
        apart = _apart(tree, field)
        skeleton = Template(tree, {_PC_NAME: PC_NAME_FILL, **{path: fill for fill, (path, _part) in apart.items()}})
        annotations: dict[str, Any] = component_body(component)["metadata"].get("annotations", {})
        hit = _SKELETONS.put(key, (skeleton, annotations), skeleton.size + sum(map(len, key)) + len(repr(annotations)))
    skeleton, annotations = hit
    parts: dict[str, dict[str, Any]] = {_CONTENT_FILL: getattr(component, field)}
    if component.chart is not None and component.is_release:  # a Release's chart (component_body)
        parts[_CHART_FILL] = chart_block(component.chart)
    annotations = {**annotations, **_overridden_by(planned)}
    if annotations:
        parts[_ANNOTATIONS_FILL] = annotations
    return skeleton, parts


def _skeleton_key(planned: Planned) -> tuple[str, ...]:
    """What the skeleton of a planned component's body, and its own annotations, are made of, as text: equal
    keys, equal skeletons and annotations.

    A body (whole_body) is component_body's (function/bodies.py) of the
    component's kind, key (its labels), namespace and readiness, and of
    the parts taken apart (_VARYING: values or manifest, chart, and the
    annotations, which hold the release name); whole_body adds the
    management policies of its state, and the annotations an Object has
    only once documents changed it. The readiness as text: its values keep
    their type (1 and True are equal keys of a map, not equal encodings).
    tests/test_wire.py changes each field of a component in turn: a
    skeleton and the parts read off the component change only with the key.
    """
    component = planned.component
    annotated = "annotated" if planned.changed_by else ""
    return (
        component.kind,
        component.key,
        component.namespace,
        repr(component.readiness),
        component.release_name,
        planned.state,
        annotated,
    )


# What varies between the bodies of one component, each encoded apart and put
# into a skeleton kept for all of them: its values or manifest (a rebuild
# changes them), its chart (a chart mirror or a version pin changes it) and
# its annotations (they name the documents that changed it). No request fill
# has these names: theirs name fields and parameters.
_CONTENT_FILL = "(values or manifest)"
_CHART_FILL = "(chart)"
_ANNOTATIONS_FILL = "(annotations)"
_VARYING = {
    _CONTENT_FILL: _FOR_PROVIDER,  # + the field: values or manifest
    _CHART_FILL: (*_FOR_PROVIDER, "chart"),
    _ANNOTATIONS_FILL: ("metadata", "annotations"),
}


def _apart(tree: dict[str, Any], field: str) -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """Take what varies out of ``tree`` (a body): (its path, the part) by the fill it goes into, for those it has."""
    out: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {}
    for fill, at in _VARYING.items():
        path = (*at, field) if fill == _CONTENT_FILL else at
        holder = tree
        for key in path[:-1]:
            holder = holder[key]
        if path[-1] in holder:
            out[fill] = (path, holder.pop(path[-1]))
    return out


# Bodies without what varies (_VARYING), and the annotations component_body
# gives them, by what they are made of (_skeleton_key). A rebuild (other mirrors, another values patch, other
# documents) changes a component's values, chart or annotations, not the rest
# of its body: the skeleton around them is encoded once, when the stack's own
# bodies are (StackRenderer), so a restarted server's first plan finds its
# components' skeletons made. Keyed by content, as a rebuilt body is a new
# object; a few hundred bytes each.
_SKELETONS: BoundedCache[tuple[str, ...], tuple[Template, dict[str, Any]]] = BoundedCache("body skeletons")


# Overridden component bodies, keyed by identity: a planned component is a
# cached plan's own object, held in the entry so its id stays unique while
# cached. A mirrored plan changes all ~26.
_DERIVED: BoundedCache[tuple[int, str, tuple[str, ...]], tuple[Component, Template]] = BoundedCache("overridden bodies")


@dataclass(frozen=True)
class _Prepared:
    """One plan's templates, looked up once per plan rather than once per resource per request."""

    plan: Sequence[Planned]  # held, so its id stays its own while this is kept
    bodies: dict[str, Template]  # by component key
    # By consumer (each planned component's key): its ProviderConfig Usage's key and body.
    pc_usages: dict[str, tuple[str, Template]]
    # By user (each planned component whose dependencies finalize it): (used, the Usage's key, its body) of each
    # of its dependencies the plan has.
    usages: dict[str, tuple[tuple[str, str, Template], ...]]


# One per plan in use: the plan cache's (function.overrides.apply) and the stacks' own.
# An entry keeps its plan and templates alive, also once their own caches let
# them go: weighed as both (a template weighs twice its encoding, see
# wire.Template.size; a plan's Python objects PYTHON_FACTOR times it).
_PREPARED: BoundedCache[int, _Prepared] = BoundedCache("prepared plans")


class StackRenderer:
    """Renders one stack; holds its request-independent encoding once."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self._own = {c.key: c for c in stack.components}
        self._static = {c.key: body_template(Planned(c)) for c in stack.components}
        # The Usage templates of a plan of exactly the stack's components, whatever the documents changed
        # in them: a Usage reads only keys, API kinds and dependencies, which no document changes.
        self._pc_usages, self._usages = self._usage_templates(self._own)

    def _template(self, planned: Planned) -> Template:
        component = planned.component
        if planned.state == MANAGED and not planned.changed_by and self._own.get(component.key) is component:
            return self._static[component.key]
        # A component the override layer planned: its plans are cached, so the
        # same object comes back on every reconcile; encode it once.
        key = (id(component), planned.state, planned.changed_by)
        hit = _DERIVED.get(key)
        if hit is not None and hit[0] is component:
            return hit[1]
        template = body_template(planned)
        _DERIVED.put(key, (component, template), template.size)
        return template

    def render(
        self,
        xr: ServingStack,
        observed: Observed,
        plan: Sequence[Planned],
        into: Resources,
    ) -> list[str]:
        """Add the desired composed resources for one XR to ``into``, keyed by composed resource name.

        Returns the keys of the components the stack needs that are not
        composed yet (waiting for the ProviderConfigs), so the XR can say it
        is not ready.
        """
        prepared = self._prepared(plan)
        fills = _Fills(xr)
        identity = xr.spec.identity()
        for key, api in ((HELM_PC, HELM_API), (KUBERNETES_PC, KUBERNETES_API)):
            pc = _PROVIDER_CONFIGS[api, identity.type if identity is not None else None]
            into.add(key, pc, fills, ready=True)  # nothing to wait for
        # A remote resource is composed only once its ProviderConfigs exist,
        # so the first reconcile does not fail on a missing ProviderConfig.
        pcs_observed = observed.has(HELM_PC) and observed.has(KUBERNETES_PC)
        leaving = _leaving(plan, observed)
        rendered: set[str] = set()
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
            into.add(key, prepared.bodies[key], fills, ready=observed.ready(key))
            rendered.add(key)
        self._render_usages(into, prepared, rendered, observed, fills)
        return pending

    def prepare(self, plan: Sequence[Planned]) -> None:
        """Look up ``plan``'s templates now (at start-up: the stack's generated plan), not at its first render;
        make the skeletons of its bodies once a document changed them (annotated with its name: see
        _VARYING)."""
        self._prepared(plan)
        for planned in plan:
            if not planned.component.xr_fields:
                _skeleton_of(Planned(planned.component, MANAGED, ("",)))

    def _prepared(self, plan: Sequence[Planned]) -> _Prepared:
        hit = _PREPARED.get(id(plan))
        if hit is not None and hit.plan is plan:
            return hit
        components = {p.component.key: p.component for p in plan}
        pc_usages, usages = (
            (self._pc_usages, self._usages)
            if components.keys() == self._own.keys()
            else self._usage_templates(components)  # per-pool drivers: components of this plan only
        )
        prepared = _Prepared(plan, {p.component.key: self._template(p) for p in plan}, pc_usages, usages)
        templates = sum(t.size for t in (*prepared.bodies.values(), *(t for _key, t in prepared.pc_usages.values())))
        return _PREPARED.put(id(plan), prepared, templates + templates // 2 * PYTHON_FACTOR)

    def _usage_templates(
        self, components: Mapping[str, Component]
    ) -> tuple[dict[str, tuple[str, Template]], dict[str, tuple[tuple[str, str, Template], ...]]]:
        """The ProviderConfig Usage of each of ``components`` by key, and the Usages between them by user (see
        _Prepared)."""
        pc_usages = {
            key: (provider_config_usage_key(key), _provider_config_usage(*api_kind(c), key))
            for key, c in components.items()
        }
        return pc_usages, {
            user.key: tuple(
                (dep, usage_key(dep, user.key), Template(_usage(components[dep], user)))
                for dep in user.depends_on
                if dep in components
            )
            for user in components.values()
            if user.finalized_by_dependencies
        }

    def _render_usages(
        self,
        out: Resources,
        prepared: _Prepared,
        rendered: Collection[str],
        observed: Observed,
        fills: Mapping[str, bytes],
    ) -> None:
        # Usages have no readiness of their own to wait for.
        for key in rendered:
            usage_name, usage = prepared.pc_usages[key]
            out.add(usage_name, usage, fills, ready=True)
        # A consumer on its way out (no longer desired, still observed) keeps
        # its ProviderConfig until it is gone: its uninstall needs it. Only
        # one carrying our consumer label: another pipeline step's resources
        # are not ours to protect, and a selector must resolve.
        for key, obs in observed.resources.items():
            if key in rendered:
                continue
            remote = _remote_api_kind(obs.resource)
            if remote is not None and _consumer_label(obs.resource) == label_value(key):
                out.add(provider_config_usage_key(key), _provider_config_usage(*remote, key), fills, ready=True)
        # The Usage stays while its user is on the cluster, even once the user
        # is no longer desired: it leaves only after the user is gone, and the
        # used component only after the Usage (see _leaving).
        for user, dependencies in prepared.usages.items():
            if user in rendered or observed.has(user):
                for dep, usage_name, usage in dependencies:
                    if dep in rendered:
                        out.add(usage_name, usage, fills, ready=True)


class _Fills(dict[str, bytes]):
    """What one XR fills into the bodies' holes, encoded: its ProviderConfig's name and secrets at once,
    the gateway parameters when a body asks for them."""

    def __init__(self, xr: ServingStack) -> None:
        super().__init__({PC_NAME_FILL: string_value(provider_config_name(xr))})
        kubeconfig = xr.spec.kubeconfig()
        assert kubeconfig is not None, "checked before rendering"
        # Their namespaces are within the XR's reach: function.tenancy checked them before rendering.
        for prefix, secret in ((KUBECONFIG_FILL, kubeconfig), (IDENTITY_FILL, xr.spec.identity())):
            if secret is not None:
                self[f"{prefix}.name"] = string_value(secret.name)
                self[f"{prefix}.namespace"] = string_value(secret.namespace or xr.metadata.namespace)
                self[f"{prefix}.key"] = string_value(secret.key)
        self.xr = xr

    def __missing__(self, name: str) -> bytes:
        gateway = self.xr.spec.gateway
        key = (gateway.className, tuple(gateway.listeners))
        params = _GATEWAY_FILLS.get(key)
        if params is None:
            params = {param: value(v) for param, v in gateway_params(self.xr).items()}
            _GATEWAY_FILLS.put(key, params, sum(map(len, params.values())))
        if name not in params:
            raise KeyError(name)
        self.update(params)
        return self[name]


# The gateway parameters encoded, per distinct gateway spec (most fleets have one).
_GATEWAY_FILLS: BoundedCache[tuple[str, tuple[Listener, ...]], dict[str, bytes]] = BoundedCache("gateway fills")


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


def _provider_config_template(api: str, identity_type: str | None) -> Template:
    """A ProviderConfig with holes for its name and the secrets it reads (see _Fills)."""
    spec: dict[str, Any] = {"credentials": {"source": "Secret"}}
    holes: dict[tuple[str, ...], str] = {("metadata", "name"): PC_NAME_FILL}
    holes.update({("spec", "credentials", "secretRef", f): f"{KUBECONFIG_FILL}.{f}" for f in _SECRET_FIELDS})
    if identity_type is not None:
        # The kubeconfig gives endpoint and CA; the cloud identity
        # authenticates, so no long-lived token sits in the kubeconfig.
        spec["identity"] = {"type": identity_type, "source": "Secret"}
        holes.update({("spec", "identity", "secretRef", f): f"{IDENTITY_FILL}.{f}" for f in _SECRET_FIELDS})
    return Template({"apiVersion": api, "kind": "ProviderConfig", "spec": spec}, holes)


# Every ProviderConfig the function writes: one per API and identity type.
_PROVIDER_CONFIGS = {
    (api, identity): _provider_config_template(api, identity)
    for api in (HELM_API, KUBERNETES_API)
    for identity in (None, *IDENTITY_TYPES)
}


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
