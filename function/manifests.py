"""Every Kubernetes object the stack installs on one cluster, as real Helm renders it (``function manifests``).

The function runs on the ServingStack as ``function render`` runs it, then
once more with its two ProviderConfigs observed (what it composes on the
cluster once they exist: every component is gated on them). Of what it
composes, each Release is expanded by real Helm (:mod:`function.helm`, the
``helm`` extra) from a chart directory, and each Object contributes its
manifest, per-pool driver resources included. ProviderConfigs and Usages
live on the control plane and install nothing on the cluster; a component
the documents leave ``Unmanaged`` (``managementPolicies: [Observe]``) is
observed, not installed, and is named as such.

A namespaced object written without a namespace is installed by Helm in the
release's namespace. Which kinds are cluster-scoped: the built-in ones below,
and every CustomResourceDefinition of the output with ``spec.scope: Cluster``;
a kind neither knows is left as written, and said so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import resource

from function.bodies import EXTERNAL_NAME, HELM_API, KUBERNETES_API
from function.fn import FunctionRunner
from function.helm import Charts, HelmError, release_chart, render_release
from function.offline import ANNOTATION_COMPOSITION_RESOURCE_NAME, render
from function.overrides.collect import INPUT_API_VERSION
from function.render_output import dump_yaml

#: Built-in cluster-scoped kinds (each API type's REST strategy answers NamespaceScoped() false:
#: kubernetes pkg/registry/**/strategy.go; ``kubectl api-resources --namespaced=false``), by kind.
CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "ComponentStatus",
        "CustomResourceDefinition",
        "DeviceClass",
        "FlowSchema",
        "IngressClass",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)


@dataclass(frozen=True)
class Installed:
    """One object on the cluster, and where it comes from."""

    object: dict[str, Any]
    key: str  # the composed resource (component) it comes from
    source: str  # "Release <name> <chart> <version>, <template>" or "Object"
    scope_known: bool = True

    @property
    def identity(self) -> tuple[str, str, str, str]:
        meta = self.object.get("metadata") or {}
        return (
            str(self.object.get("apiVersion", "")),
            str(self.object.get("kind", "")),
            str(meta.get("namespace") or ""),
            str(meta.get("name", "")),
        )


@dataclass(frozen=True)
class Manifests:
    objects: list[Installed]
    not_installed: list[str]  # composed but not installed by the function: why, per key


def desired(
    xr: Mapping[str, Any], *, required: Sequence[Mapping[str, Any]] = (), input: Mapping[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """What the function composes for ``xr`` once its ProviderConfigs exist; RenderError on a Fatal."""
    runner = FunctionRunner()
    first = render(runner, xr, input_api_version=INPUT_API_VERSION, input=input, required=required)
    bodies = {key: resource.struct_to_dict(r.resource) for key, r in first.desired.resources.items()}
    configs = [
        _observed(k, b) for k, b in bodies.items() if b.get("kind") in ("ProviderConfig", "ClusterProviderConfig")
    ]
    final = render(runner, xr, input_api_version=INPUT_API_VERSION, input=input, required=required, observed=configs)
    return {key: resource.struct_to_dict(r.resource) for key, r in sorted(final.desired.resources.items())}


def _observed(key: str, body: dict[str, Any]) -> dict[str, Any]:
    meta = dict(body.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_COMPOSITION_RESOURCE_NAME: key}
    return {**body, "metadata": meta}


def installed(composed: Mapping[str, dict[str, Any]], charts: Charts) -> Manifests:
    """Every object the composed resources install on the cluster, Releases expanded by Helm (HelmError)."""
    raw: list[tuple[dict[str, Any], str, str, str]] = []  # object, key, source, release namespace
    skipped: list[str] = []
    for key, body in composed.items():
        api, kind = body.get("apiVersion"), body.get("kind")
        spec = body.get("spec") or {}
        if (api, kind) not in ((HELM_API, "Release"), (KUBERNETES_API, "Object")):
            continue  # ProviderConfigs and Usages: control-plane objects
        if "managementPolicies" in spec and "Create" not in spec["managementPolicies"]:
            skipped.append(f"{key}: {kind} observed only (managementPolicies {spec['managementPolicies']})")
            continue
        if kind == "Object":
            raw.append((dict(spec["forProvider"]["manifest"]), key, "Object", ""))
            continue
        name, version = release_chart(body)
        release = body["metadata"]["annotations"][EXTERNAL_NAME]
        namespace = str(spec["forProvider"].get("namespace") or "default")
        for rendered in render_release(body, charts):
            raw.append((rendered.object, key, f"Release {release} {name} {version}, {rendered.template}", namespace))
    crds = [obj.get("spec") or {} for obj, *_ in raw if obj.get("kind") == "CustomResourceDefinition"]
    cluster_kinds = CLUSTER_SCOPED | {str(s.get("names", {}).get("kind")) for s in crds if s.get("scope") == "Cluster"}
    scoped_kinds = cluster_kinds | {str(s.get("names", {}).get("kind")) for s in crds if s.get("scope") == "Namespaced"}
    out = []
    for written, key, source, namespace in raw:
        meta = written.get("metadata") or {}
        kind = str(written.get("kind", ""))
        known = kind in scoped_kinds or _built_in(str(written.get("apiVersion", "")))
        placed = written
        if namespace and not meta.get("namespace") and kind not in cluster_kinds and known:
            placed = {**written, "metadata": {**meta, "namespace": namespace}}
        out.append(Installed(placed, key, source, scope_known=known))
    return Manifests(out, skipped)


def _built_in(api_version: str) -> bool:
    """An API group Kubernetes serves itself: the core group, a dotless one (apps, batch, policy) or *.k8s.io
    (a CRD-served *.k8s.io group, the Gateway API's, is known by its CRD in the output first)."""
    group = api_version.rpartition("/")[0]
    return not group or "." not in group or group.endswith(".k8s.io")


def from_files(
    xr: Mapping[str, Any],
    charts: Path,
    *,
    required: Sequence[Mapping[str, Any]] = (),
    input: Mapping[str, Any] | None = None,
) -> Manifests:
    """:func:`installed` for one ServingStack read from files (``function manifests``)."""
    return installed(desired(xr, required=required, input=input), Charts(charts))


# --- images -------------------------------------------------------------------------------------------------


def image_lines(found: Manifests) -> str:
    """``function images --charts``: one ``image <ref>`` line per distinct image the installed objects name."""
    refs = sorted({ref for obj in found.objects for ref in images(obj.object)})
    return "".join(f"image {ref}\n" for ref in refs)


def as_yaml(found: Manifests) -> str:
    """The objects as a YAML stream, each under a comment saying where it comes from; then what is not installed."""
    parts = []
    for obj in found.objects:
        scope = "" if obj.scope_known else " (scope unknown: namespace as written)"
        parts.append(f"# {obj.key}: {obj.source}{scope}\n{dump_yaml([obj.object])}")
    return "".join(parts + [f"# not installed: {line}\n" for line in found.not_installed])


def images(obj: Mapping[str, Any]) -> Iterator[str]:
    """Every image an installed object runs or hands a controller to run.

    Containers, init and ephemeral containers at any depth (``image``); operator resources' image fields: a string
    under a key ending in ``image`` or ``Image`` (EnvoyProxy ``container.image``, DeviceConfig ``devicePluginImage``,
    ``initContainerImage``), an operand split into ``repository`` and ``image`` (ClusterPolicy, NVIDIADriver:
    ``{repository}/{image}:{version}``) or an ``image`` map of ``repository``, ``name`` and ``tag`` (KAI's Config);
    env vars whose name holds IMAGE (KMM's ``RELATED_IMAGE_*``), not their pull secrets or policies; container flags
    whose value is a full image reference; and ConfigMap data that is a controller's YAML configuration. An operand
    its resource switches off (``enabled: false``) is skipped: the operator deploys nothing of it.
    """
    yield from _walk({k: v for k, v in obj.items() if k != "metadata"}, "")
    if obj.get("kind") == "ConfigMap":
        # A controller's own configuration file (Envoy Gateway's envoy-gateway.yaml names its rate limiter).
        for text in (obj.get("data") or {}).values():
            try:
                config = yaml.safe_load(text) if isinstance(text, str) and _YAML_MAP.match(text) else None
            except yaml.YAMLError:
                continue
            yield from _walk(config, "")


def _walk(node: Any, key: str) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("enabled") is False:
            return
        name, repository, image = node.get("name"), node.get("repository"), node.get("image")
        if key == "image" and isinstance(name, str) and isinstance(repository, str) and name and repository:
            # KAI's Config: {repository}/{name}:{tag} (KAI-Scheduler pkg/apis/kai/v1/common/image.go Url).
            tag = node.get("tag")
            yield f"{repository}/{name}:{tag}" if isinstance(tag, str) and tag else f"{repository}/{name}"
            return
        split = isinstance(repository, str) and bool(repository) and isinstance(image, str) and "/" not in image
        if split and image:
            version = node.get("version")
            if isinstance(version, str) and version:
                image += f"@{version}" if version.startswith("sha256:") else f":{version}"
            yield f"{repository}/{image}"
        for k, v in node.items():
            if split and k == "image":
                continue
            if k == "env" and isinstance(v, list):
                yield from (e["value"] for e in v if _image_env(e))
            if k in ("args", "command") and isinstance(v, list):
                yield from (m.group(1) for a in v if isinstance(a, str) and (m := _ARG_IMAGE.match(a)))
            yield from _walk(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, key)
    elif isinstance(node, str) and node and key.lower().endswith("image"):
        yield node


#: A controller flag handing it an image: ``--<flag>=<host>/<path>:<tag>`` (or ``@sha256:``), the host a
#: registry (a dot or a port): cert-manager's --acme-http01-solver-image, prometheus-operator's
#: --prometheus-config-reloader and --thanos-default-base-image, the AI Gateway's --extProcImage.
_ARG_IMAGE = re.compile(
    r"^--[\w.-]+=((?:[a-z0-9-]+\.)+[a-z0-9-]+(?::\d+)?/[\w./-]+(?::[\w][\w.-]*|@sha256:[0-9a-f]{64}))$"
)


#: A ConfigMap value that reads as a YAML map (its first line a key).
_YAML_MAP = re.compile(r"^\s*[A-Za-z][\w-]*:")


def _image_env(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("value"), str) or not entry["value"]:
        return False
    name = str(entry.get("name", "")).upper()
    return "IMAGE" in name and not name.endswith(("SECRET", "SECRETS", "POLICY"))


__all__ = [
    "CLUSTER_SCOPED",
    "HelmError",
    "Installed",
    "Manifests",
    "as_yaml",
    "desired",
    "from_files",
    "image_lines",
    "images",
    "installed",
]
