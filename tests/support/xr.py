"""ServingStacks and the objects Crossplane observes beside them, built from the example."""

from __future__ import annotations

import copy
from typing import Any

from crossplane.function import resource

from tests.support.repo import EXAMPLE, load_docs

EXAMPLE_XR = load_docs(EXAMPLE / "xr.yaml")[0]
XRD = load_docs(EXAMPLE / "xrd.yaml")[0]


def make_xr(cloud: str = "GKE", accelerator: str | None = None, **spec: Any) -> dict[str, Any]:
    """The example ServingStack on ``cloud`` (and ``accelerator``), ``spec`` fields replaced."""
    xr = copy.deepcopy(EXAMPLE_XR)
    xr["spec"]["cloud"] = cloud
    if accelerator is not None:
        xr["spec"]["accelerator"] = accelerator
    xr["spec"].update(spec)
    return xr


def provider_configs(xr: dict[str, Any]) -> list[dict[str, Any]]:
    """The two ProviderConfigs as Crossplane observes them once created."""
    name = resource.child_name(xr["metadata"]["name"], "cluster")
    return [
        {
            "apiVersion": api,
            "kind": "ProviderConfig",
            "metadata": {
                "name": name,
                "namespace": xr["metadata"]["namespace"],
                "annotations": {"crossplane.io/composition-resource-name": key},
            },
        }
        for api, key in (
            ("helm.m.crossplane.io/v1beta1", "provider-config-helm"),
            ("kubernetes.m.crossplane.io/v1alpha1", "provider-config-kubernetes"),
        )
    ]


def observed_as(
    key: str, body: dict[str, Any], ready: bool = True, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A composed resource as Crossplane would observe it."""
    obs = copy.deepcopy(body)
    obs.setdefault("metadata", {}).setdefault("annotations", {})["crossplane.io/composition-resource-name"] = key
    obs["status"] = {
        **(status or {}),
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "Available"}],
    }
    return obs
