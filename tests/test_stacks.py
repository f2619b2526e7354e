"""What the generated stacks install, checked on the Releases the function renders.

Each test renders a real stack through the same loop `crossplane render` runs
and reads the Helm values a Release hands to Helm, with `null` meaning what
Helm makes of it: the key is gone.
"""

from __future__ import annotations

from typing import Any

import pytest

from function.generated import STACKS
from function.values import drop_nulls
from tests.support.crossplane import desired, render
from tests.support.overrides import PAIRS, ec, fatal, mirror_all
from tests.support.xr import make_xr

NVIDIA_CLOUDS = sorted(c for c, a, k in STACKS if a == "NVIDIA" and k == "Standard")


def _releases(cloud: str, accelerator: str = "NVIDIA") -> dict[str, dict[str, Any]]:
    out = desired(render(make_xr(cloud, accelerator)))
    return {k: r["spec"]["forProvider"] for k, r in out.items() if r["kind"] == "Release"}


def _values(cloud: str, key: str, accelerator: str = "NVIDIA") -> dict[str, Any]:
    values: dict[str, Any] = drop_nulls(_releases(cloud, accelerator)[key]["values"])
    return values


# StorageClasses each cloud's clusters have without add-ons the stack or the
# cluster composition would have to install: GKE ships the Compute Engine PD
# CSI driver and `standard-rwo`; AKS the Azure Disk CSI driver and
# `managed-csi`. EKS ships none: its `gp2` class provisions through the EBS CSI
# driver, an add-on no composition installs.
BUILT_IN_STORAGE_CLASSES = {"GKE": {"standard-rwo"}, "AKS": {"managed-csi"}}


@pytest.mark.parametrize("cloud", NVIDIA_CLOUDS)
def test_prometheus_claims_only_storage_the_cloud_provides(cloud: str) -> None:
    spec = _values(cloud, "prometheus")["prometheus"]["prometheusSpec"]
    claim = spec.get("storageSpec", {}).get("volumeClaimTemplate")
    if claim is not None:
        assert claim["spec"]["storageClassName"] in BUILT_IN_STORAGE_CLASSES.get(cloud, set())


def test_eks_prometheus_keeps_the_emptydir_v031_clusters_run() -> None:
    # No storageSpec: the chart renders no `storage` and the operator gives
    # Prometheus an emptyDir (kube-prometheus-stack templates/prometheus/prometheus.yaml).
    spec = _values("EKS", "prometheus")["prometheus"]["prometheusSpec"]
    assert "storageSpec" not in spec


@pytest.mark.parametrize("cloud", NVIDIA_CLOUDS)
def test_gpus_have_one_allocator_the_dra_driver(cloud: str) -> None:
    dra = _values(cloud, "dra-driver")
    assert dra["gpuResourcesEnabledOverride"] is True
    assert dra["resources"]["gpus"]["enabled"] is True
    assert _values(cloud, "gpu-operator")["devicePlugin"]["enabled"] is False


def test_crd_upgrade_job_runs_with_the_prometheus_release() -> None:
    for cloud in NVIDIA_CLOUDS:
        job = _values(cloud, "prometheus")["crds"]["upgradeJob"]
        assert job == {"enabled": True, "forceConflicts": True}


def test_crd_upgrade_job_pulls_from_the_mirror() -> None:
    # The hook Job's images (charts/crds/templates/upgrade/job.yaml compose
    # <registry>/<repository>:<tag>) follow the mirror, and strict finds nothing upstream.
    result = render(make_xr("EKS"), required=[ec("mirror", mirror_all(strict=True))])
    values = desired(result)["prometheus"]["spec"]["forProvider"]["values"]
    image = values["crds"]["upgradeJob"]["image"]
    assert (image["busybox"]["registry"], image["busybox"]["repository"]) == (
        "mirror.example.com/hub/library",
        "busybox",
    )  # docker.io/library/busybox
    assert (image["kubectl"]["registry"], image["kubectl"]["repository"]) == ("mirror.example.com/hub", "kubectl")


AMD_POOL = {"name": "mi300", "nodeSelector": {"modelplane.ai/pool": "mi300"}, "version": "6.4"}


@pytest.mark.parametrize("cloud", sorted(c for c, a, _ in STACKS if a == "AMD"))
def test_amd_default_device_config_never_builds_a_driver(cloud: str) -> None:
    # Enabled, the operator would build amdgpu into the chart's placeholder
    # repository docker.io/myUserName/driverImage (gpu-operator-charts v1.4.0 values.yaml).
    spec = _values(cloud, "amd-gpu-operator", "AMD")["deviceConfig"]["spec"]
    assert spec["driver"]["enable"] is False


def test_amd_pools_replace_the_default_device_config() -> None:
    pool = {**AMD_POOL, "image": "registry.example.com/amd/amdgpu"}
    out = desired(render(make_xr("Existing", "AMD"), required=[ec("pools", {"drivers": [pool]})]))
    # The chart's default DeviceConfig selects every AMD node: with pools it is not rendered.
    assert out["amd-gpu-operator"]["spec"]["forProvider"]["values"]["crds"]["defaultCR"] == {
        "install": False,
        "upgrade": False,
    }
    driver = out["driver-mi300"]["spec"]["forProvider"]["manifest"]["spec"]["driver"]
    assert (driver["enable"], driver["version"], driver["image"]) == (True, "6.4", "registry.example.com/amd/amdgpu")


@pytest.mark.parametrize(
    ("repository", "strict"),
    # Strict allows only the mirror's registries: a pool repository must be one of them.
    [("registry.example.com/amd/amdgpu", False), ("mirror.example.com/hub/amd/amdgpu", True)],
)
def test_an_amd_pools_repository_is_kept_behind_a_mirror(repository: str, strict: bool) -> None:
    # The operator pushes its builds there: a registry rule must not move it.
    doc = {**mirror_all(strict=strict), "drivers": [{**AMD_POOL, "image": repository}]}
    out = desired(render(make_xr("Existing", "AMD"), required=[ec("pools", doc)]))
    spec = out["driver-mi300"]["spec"]["forProvider"]["manifest"]["spec"]
    assert spec["driver"]["image"] == repository
    assert spec["devicePlugin"]["devicePluginImage"].startswith("mirror.example.com/hub/")


def test_an_amd_pool_without_a_repository_builds_into_the_operators_default() -> None:
    out = desired(render(make_xr("Existing", "AMD"), required=[ec("pools", {"drivers": [AMD_POOL]})]))
    driver = out["driver-mi300"]["spec"]["forProvider"]["manifest"]["spec"]["driver"]
    # The operator's vanilla-Kubernetes default (DeviceConfig CRD v1.4.0 spec.driver.image).
    assert (driver["enable"], driver["image"]) == (True, "image-registry:5000/kube-amd-gpu/amdgpu_kmod")


def test_an_nvidia_pool_takes_no_driver_repository() -> None:
    pool = {"name": "h100", "nodeSelector": {"a": "b"}, "version": "570.195.03", "image": "r.example.com/x"}
    message = fatal(make_xr("Existing"), ec("pools", {"drivers": [pool]}))
    assert "drivers[h100].image: stack existing-nvidia takes no driver image repository" in message


def test_every_cloud_of_the_spec_has_an_nvidia_stack() -> None:
    assert sorted(NVIDIA_CLOUDS) == sorted(["EKS", "GKE", "AKS", "Nebius", "Vultr", "Existing"])
    assert ("Vultr", "AMD") in PAIRS
    assert ("Existing", "AMD") in PAIRS


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
