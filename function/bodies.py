"""A stack component as the resource that installs it: a provider-helm Release or a provider-kubernetes Object.

The request-independent part of every composed body: the renderer converts
it to protobuf once, and the strict registry check scans it for images.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from function.stack import ChartRef, Component

HELM_API = "helm.m.crossplane.io/v1beta1"
KUBERNETES_API = "kubernetes.m.crossplane.io/v1alpha1"

# Label every composed resource carries, so Usages can select a sibling by key.
RESOURCE_LABEL = "modelplane.ai/resource"
# Label pinning a ProviderConfig Usage's `by` selector to one consumer, with the
# Usage key `usage-pc-<key>`: both as v0.3.1's compose-usages step wrote them,
# so clusters upgraded from it keep their Usages (UPSTREAM.md).
USAGE_CONSUMER_LABEL = "modelplane.ai/usage-consumer"
# A label value is at most 63 characters (Kubernetes validation
# IsValidLabelValue); a driver pool name alone may take 63.
LABEL_VALUE_MAX = 63
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
EXTERNAL_NAME = "crossplane.io/external-name"


def label_value(key: str) -> str:
    """``key`` as a valid label value: itself when it fits, else a prefix plus a digest of the whole.

    The digest keeps two long keys with a common prefix apart, so a Usage
    selector still resolves to the one resource it means.
    """
    if len(key) <= LABEL_VALUE_MAX and _LABEL_VALUE.match(key):
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    prefix = re.sub(r"[^-A-Za-z0-9_.]", "-", key)[: LABEL_VALUE_MAX - len(digest) - 1].strip("-_.")
    return f"{prefix}-{digest}" if prefix else digest


def _labels(key: str) -> dict[str, Any]:
    value = label_value(key)
    return {"labels": {RESOURCE_LABEL: value, USAGE_CONSUMER_LABEL: value}}


def chart_block(chart: ChartRef) -> dict[str, Any]:
    """A Release's ``spec.forProvider.chart``."""
    return {
        "name": chart.name,
        "repository": chart.repository,
        "version": chart.version,
        **({"pullSecretRef": {"name": chart.pull_secret_ref}} if chart.pull_secret_ref else {}),
    }


def component_body(component: Component) -> dict[str, Any]:
    """The resource installing ``component``: a Release of its chart or an Object of its manifest."""
    api, kind = api_kind(component)
    metadata = _labels(component.key)
    spec: dict[str, Any] = {"providerConfigRef": {"kind": "ProviderConfig", "name": ""}}
    if component.is_release:
        assert component.chart is not None
        # Stable, short Helm release name that cannot collide with a
        # release the cluster already runs (and matches today's releases).
        metadata = {"annotations": {EXTERNAL_NAME: component.release_name}, **metadata}
        spec["forProvider"] = {
            "chart": chart_block(component.chart),
            "namespace": component.namespace,
            "values": component.values,
        }
    else:
        spec["forProvider"] = {"manifest": component.manifest}
        if component.readiness:
            spec["readiness"] = dict(component.readiness)
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


def api_kind(component: Component) -> tuple[str, str]:
    """The (apiVersion, kind) of the resource installing ``component``."""
    return (HELM_API, "Release") if component.is_release else (KUBERNETES_API, "Object")
