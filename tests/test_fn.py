"""Rendering of every generated stack, as Crossplane sees it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import stack
from function.__version__ import __version__
from function.fn import FunctionRunner
from function.offline import RenderError
from tests.support.crossplane import desired, render, run_once
from tests.support.xr import make_xr, observed_as, provider_configs

PAIRS = stack.available()
NVIDIA_CLOUDS = [c for c, a in PAIRS if a == "NVIDIA"]


def test_every_cloud_of_the_spec_has_an_nvidia_stack() -> None:
    assert sorted(NVIDIA_CLOUDS) == sorted(["EKS", "GKE", "AKS", "Nebius", "Vultr", "Existing"])
    assert ("Vultr", "AMD") in PAIRS
    assert ("Existing", "AMD") in PAIRS


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


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_releases_keep_the_helm_release_names_clusters_run(cloud: str, accelerator: str) -> None:
    got = desired(render(make_xr(cloud, accelerator)))
    releases = {k: v for k, v in got.items() if v["kind"] == "Release"}
    assert releases
    for key, release in releases.items():
        external = release["metadata"]["annotations"]["crossplane.io/external-name"]
        chart = release["spec"]["forProvider"]["chart"]["name"]
        expected = "mp-dra-driver-nvidia-gpu" if key == "dra-driver" else f"mp-{chart}"
        assert external == expected
        assert release["metadata"]["labels"] == {"modelplane.ai/resource": key, "modelplane.ai/usage-consumer": key}
        assert release["spec"]["providerConfigRef"] == {"kind": "ProviderConfig", "name": "prod-eu-1-cluster-b51a9"}


def test_prometheus_keeps_the_address_the_platform_uses() -> None:
    values = desired(render(make_xr("GKE")))["prometheus"]["spec"]["forProvider"]["values"]
    assert values["fullnameOverride"] == "prometheus"
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["podMonitorSelectorNilUsesHelmValues"] is False
    assert spec["additionalScrapeConfigs"][0]["job_name"] == "envoy-gateway-proxy"
    # AICR's GKE overlay value survives underneath the platform layer ...
    assert spec["storageSpec"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "standard-rwo"
    # ... including the explicit null that deletes the chart's emptyDir default.
    assert "emptyDir" in spec["storageSpec"]
    assert spec["storageSpec"]["emptyDir"] is None


@pytest.mark.parametrize(
    ("cloud", "root"),
    [("GKE", "/home/kubernetes/bin/nvidia"), ("EKS", "/"), ("AKS", "/"), ("Existing", "/run/nvidia/driver")],
)
def test_dra_driver_finds_the_driver_where_the_stack_puts_it(cloud: str, root: str) -> None:
    release = desired(render(make_xr(cloud)))["dra-driver"]
    assert release["spec"]["forProvider"]["values"]["nvidiaDriverRoot"] == root
    # ... and its kubelet plugin runs on the tainted GPU nodes.
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in release["spec"]["forProvider"][
        "values"
    ]["kubeletPlugin"]["tolerations"]
    assert release["spec"]["forProvider"]["namespace"] == "dra-driver-nvidia-gpu"


@pytest.mark.parametrize("cloud", ["EKS", "GKE", "AKS", "Nebius", "Vultr"])
def test_gpu_operator_leaves_node_image_drivers_alone(cloud: str) -> None:
    values = desired(render(make_xr(cloud)))["gpu-operator"]["spec"]["forProvider"]["values"]
    assert values["driver"]["enabled"] is False
    assert values["nfd"]["enabled"] is False  # the platform's own NFD release serves


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
    got = desired(render(xr))
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


def test_same_request_same_bytes() -> None:
    xr = make_xr("EKS")
    a = run_once(xr).SerializeToString(deterministic=True)
    b = run_once(xr).SerializeToString(deterministic=True)
    assert a == b


def _fatal(xr: dict[str, Any]) -> str:
    with pytest.raises(RenderError) as err:
        render(xr)
    return str(err.value)


def test_unknown_cloud_is_fatal_and_names_the_field() -> None:
    message = _fatal(make_xr("DigitalOcean"))
    assert "ServingStack team-ml/prod-eu-1: spec.cloud" in message
    assert "'DigitalOcean'" in message


def test_amd_on_a_cloud_without_an_amd_stack_names_the_pairs_that_exist() -> None:
    message = _fatal(make_xr("EKS", "AMD"))
    assert "spec.accelerator: no AMD stack for cloud EKS" in message
    assert "Vultr/AMD" in message and "Existing/AMD" in message


def test_missing_kubeconfig_is_fatal() -> None:
    xr = make_xr("GKE", secrets=[{"type": "GoogleApplicationCredentials", "name": "g", "key": "k"}])
    assert "spec.secrets: a secret of type Kubeconfig is required" in _fatal(xr)


def test_wrong_types_and_unknown_fields_are_fatal() -> None:
    xr = make_xr("GKE", gateway={"listeners": [{"name": "http", "port": "eighty"}]})
    assert "spec.gateway.listeners[0].port" in _fatal(xr)
    xr = make_xr("GKE", version="1.2")
    assert "spec.version: unknown field" in _fatal(xr)


def test_bad_input_produces_no_desired_resources() -> None:
    req = fnv1.RunFunctionRequest(
        observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(make_xr("Nowhere"))))
    )
    rsp = asyncio.run(FunctionRunner().RunFunction(req))
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert len(rsp.desired.resources) == 0
