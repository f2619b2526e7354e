"""ServingStacks as v0.3.1's InferenceCluster writes them, one per identity shape."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from function import legacy
from tests.support.repo import REPO

V031 = yaml.safe_load((REPO / "facts" / "v0.3.1.yaml").read_text())
KUBECONFIG = {"type": "Kubeconfig", "name": "c-kubeconfig", "key": "kubeconfig"}


def v031_xr(*identity: dict[str, Any], driver_root: str | None = None) -> dict[str, Any]:
    """A ServingStack as v0.3.1's InferenceCluster writes it and its XRD's defaults leave it."""
    xrd = V031["servingStack"]
    spec: dict[str, Any] = {
        "secrets": [KUBECONFIG, *identity],
        "nvidiaDriverRoot": driver_root or xrd["nvidiaDriverRootDefault"],
        "versions": copy.deepcopy(xrd["versionDefaults"]),
        "gateway": {"className": "envoy", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }
    return {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": "c-serving-stack-1a2b3", "namespace": V031["secrets"]["namespace"]},
        "spec": spec,
    }


GKE = v031_xr(
    {"type": "GoogleApplicationCredentials", "name": "c-gcp", "key": "credentials.json"},
    driver_root=legacy.GKE_DRIVER_ROOT,
)
EKS = v031_xr({"type": "AWSWebIdentityCredentials", "name": "c-aws", "key": "token"})
# The Nebius ClusterProviderConfig's credentials Secret, in its own namespace.
NEBIUS = v031_xr(dict(V031["secrets"]["nebiusIdentity"]))
KUBECONFIG_ONLY = v031_xr()  # v0.3.1's EKS, AKS, Vultr and Existing clusters
SHAPES = {"GKE": GKE, "EKS": EKS, "Nebius": NEBIUS, "kubeconfig-only": KUBECONFIG_ONLY}
