"""What the function composes for a ServingStack, as Crossplane sees it: stable keys, ProviderConfigs and their
Usages, the Gateway, readiness and the XR status."""

from __future__ import annotations

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.__version__ import __version__
from tests.support.crossplane import desired, render, run_once
from tests.support.overrides import PAIRS
from tests.support.xr import make_xr, observed_as, provider_configs


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_stack_renders_platform_components_with_stable_keys(cloud: str, accelerator: str) -> None:
    got = desired(render(make_xr(cloud, accelerator)))
    # Keys the platform already runs: renaming any would uninstall it on a live cluster.
    for key in (
        "provider-config-helm",
        "provider-config-kubernetes",
        "cert-manager",
        "prometheus",
        "envoy-gateway",
        "ai-gateway-crds",
        "ai-gateway",
        "leader-worker-set",
        "node-feature-discovery",
        "gateway-namespace",
        "gateway-proxy",
        "gateway-class",
        "gateway",
        "gaie-crd-inferencepools.inference.networking.k8s.io",
        "usage-pc-cert-manager",
        "usage-pc-gateway",
        "usage-gateway-class-by-gateway",
        "usage-envoy-gateway-by-gateway-class",
    ):
        assert key in got, key
    if accelerator == "NVIDIA":
        assert {"gpu-operator", "dra-driver", "dra-driver-critical-pods-quota"} <= set(got)
    else:
        assert "dra-driver" not in got
        assert {"amd-gpu-operator"} <= set(got)


def test_first_reconcile_composes_only_provider_configs() -> None:
    got = desired(render(make_xr("GKE"), observed=[]))
    assert set(got) == {"provider-config-helm", "provider-config-kubernetes"}


def test_a_resource_observed_before_stays_composed_without_provider_configs() -> None:
    xr = make_xr("GKE")
    with_pcs = desired(render(xr))
    got = desired(render(xr, observed=[observed_as("cert-manager", with_pcs["cert-manager"])]))
    assert "cert-manager" in got
    assert "prometheus" not in got


def test_provider_configs_take_kubeconfig_and_identity() -> None:
    xr = make_xr("Nebius")
    xr["spec"]["secrets"] = [
        {"type": "Kubeconfig", "name": "kc", "key": "kubeconfig"},
        {"type": "NebiusServiceAccountCredentials", "name": "sa", "key": "credentials.json", "namespace": "other"},
    ]
    allowing = {
        "apiVersion": "servingstack.fn.modelplane.ai/v1beta1",
        "kind": "Input",
        "spec": {"secrets": {"allowedNamespaces": ["other"]}},
    }
    got = desired(render(xr, input=allowing))
    for key in ("provider-config-helm", "provider-config-kubernetes"):
        spec = got[key]["spec"]
        assert spec["credentials"] == {
            "source": "Secret",
            "secretRef": {"name": "kc", "namespace": "team-ml", "key": "kubeconfig"},
        }
        assert spec["identity"] == {
            "type": "NebiusServiceAccountCredentials",
            "source": "Secret",
            "secretRef": {"name": "sa", "namespace": "other", "key": "credentials.json"},
        }


def test_gateway_takes_class_and_listeners_from_the_xr() -> None:
    xr = make_xr(
        "GKE", gateway={"className": "inference", "listeners": [{"name": "https", "protocol": "HTTPS", "port": 443}]}
    )
    got = desired(render(xr))
    gateway = got["gateway"]["spec"]
    assert gateway["forProvider"]["manifest"]["spec"]["gatewayClassName"] == "inference"
    assert gateway["forProvider"]["manifest"]["spec"]["listeners"] == [
        {"name": "https", "protocol": "HTTPS", "port": 443, "allowedRoutes": {"namespaces": {"from": "All"}}}
    ]
    assert gateway["readiness"]["policy"] == "DeriveFromCelQuery"
    assert got["gateway-class"]["spec"]["forProvider"]["manifest"]["metadata"]["name"] == "inference"


def test_default_listener_is_http_on_80() -> None:
    xr = make_xr("GKE")
    del xr["spec"]["gateway"]
    listeners = desired(render(xr))["gateway"]["spec"]["forProvider"]["manifest"]["spec"]["listeners"]
    assert listeners == [
        {"name": "http", "protocol": "HTTP", "port": 80, "allowedRoutes": {"namespaces": {"from": "All"}}}
    ]


def test_usages_keep_controllers_alive_until_what_they_finalize_is_gone() -> None:
    got = desired(render(make_xr("GKE")))
    usage = got["usage-envoy-gateway-by-gateway-class"]["spec"]
    assert usage["replayDeletion"] is True
    assert usage["of"] == {
        "apiVersion": "helm.m.crossplane.io/v1beta1",
        "kind": "Release",
        "resourceSelector": {"matchControllerRef": True, "matchLabels": {"modelplane.ai/resource": "envoy-gateway"}},
    }
    assert usage["by"]["resourceSelector"]["matchLabels"] == {"modelplane.ai/resource": "gateway-class"}
    of = got["usage-gateway-class-by-gateway"]["spec"]["of"]
    assert of["resourceSelector"]["matchLabels"] == {"modelplane.ai/resource": "gateway-class"}
    assert got["usage-pc-cert-manager"]["spec"]["of"]["resourceRef"] == {"name": "prod-eu-1-cluster-b51a9"}


def test_readiness_follows_observed_ready_condition() -> None:
    xr = make_xr("GKE")
    bodies = desired(render(xr))
    observed = [
        *provider_configs(xr),
        observed_as("cert-manager", bodies["cert-manager"], ready=True),
        observed_as("prometheus", bodies["prometheus"], ready=False),
    ]
    rsp = run_once(xr, observed)
    assert rsp.desired.resources["cert-manager"].ready == fnv1.READY_TRUE
    assert rsp.desired.resources["prometheus"].ready == fnv1.READY_UNSPECIFIED
    assert rsp.desired.resources["provider-config-helm"].ready == fnv1.READY_TRUE
    assert rsp.desired.resources["usage-pc-cert-manager"].ready == fnv1.READY_TRUE


def test_gateway_address_and_stack_status() -> None:
    xr = make_xr("GKE")
    bodies = desired(render(xr))
    gateway = observed_as(
        "gateway",
        bodies["gateway"],
        status={"atProvider": {"manifest": {"status": {"addresses": [{"type": "IPAddress", "value": "34.1.2.3"}]}}}},
    )
    rsp = run_once(xr, [*provider_configs(xr), gateway])
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["gateway"] == {"address": "34.1.2.3"}
    assert status["stack"]["id"] == "gke-nvidia"
    assert status["stack"]["function"] == __version__
    assert status["stack"]["generator"] == __version__  # --check keeps the generated stacks at this version
    assert status["stack"]["aicr"] == "v0.11.1"
    assert status["stack"]["aicrCommit"] == "bc05c6be7859cee7ce6680b93333ed03ba795f88"
    components = {c["name"]: c for c in status["stack"]["components"]}
    assert components["gpu-operator"]["version"] == "v25.10.1"
    assert components["gpu-operator"]["source"] == "aicr:gpu-operator"
    assert components["gateway"]["state"] == "Managed"
