"""The AICR recipe resolver on the real recipes (RESOLUTION.md §9-§11).

Parity tests against the real v0.11.1 data (``aicr/recipes`` of the reference sources,
reached through ``tests/support/parity.py``) run where it exists and are skipped otherwise: the resolver only runs when
``./dev refresh`` writes the AICR lock. The merge rules and errors on synthetic data are in
``test_aicr_rules.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from generator import gotemplate
from generator.aicr import RecipeData, load, resolve
from generator.aicr_recipes import Component, Query, Recipe
from generator.aicr_yaml import AicrError
from tests.support.parity import reference_source

EKS = Query(service="eks", accelerator="h100", os="ubuntu", intent="inference")
EKS_DYNAMO = Query(service="eks", accelerator="h100", os="ubuntu", intent="inference", platform="dynamo")
GKE = Query(service="gke", accelerator="h100", os="cos", intent="inference")
AKS = Query(service="aks", accelerator="h100", os="ubuntu", intent="inference")
KIND = Query(service="kind", accelerator="h100", intent="inference")


@pytest.fixture(scope="module")
def data() -> RecipeData:
    return load(reference_source("aicr/recipes"))


@pytest.fixture(scope="module")
def eks(data: RecipeData) -> Recipe:
    return resolve(data, EKS)


def dig(values: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        values = values[key]
    return values


# ----------------------------------------------------------------------------- §10 worked example


def test_worked_example_overlays_order_and_constraints(eks: Recipe) -> None:
    assert eks.applied_overlays == [
        "base",
        "monitoring-hpa",
        "eks",
        "eks-inference",
        "h100-eks-inference",
        "h100-eks-ubuntu-inference",
    ]
    assert eks.deployment_order == [
        "aws-ebs-csi-driver",
        "aws-efa",
        "cert-manager",
        "kgateway-crds",
        "kgateway",
        "kube-prometheus-stack",
        "k8s-ephemeral-storage-metrics",
        "prometheus-adapter",
        "skyhook-operator",
        "skyhook-customizations",
        "gpu-operator",
        "kai-scheduler",
        "nvidia-dra-driver-gpu",
        "nvsentinel",
    ]
    assert list(eks.components) == sorted(eks.deployment_order)
    assert eks.constraints == [
        {"name": "K8s.server.version", "value": ">= 1.32.4"},
        {"name": "OS.release.ID", "value": "ubuntu"},
        {"name": "OS.release.VERSION_ID", "value": "24.04"},
        {"name": "OS.sysctl./proc/sys/kernel/osrelease", "value": ">= 6.8"},
    ]
    assert eks.validation == {
        "conformance": {
            "checks": [
                "platform-health",
                "gpu-operator-health",
                "dra-support",
                "accelerator-metrics",
                "ai-service-metrics",
            ]
        }
    }
    assert eks.query == EKS  # already normalised


# name: (chart, source, version, namespace, dependencyRefs), from the §10 table
WORKED_EXAMPLE = {
    "aws-ebs-csi-driver": (
        "aws-ebs-csi-driver",
        "https://kubernetes-sigs.github.io/aws-ebs-csi-driver",
        "2.55.0",
        "kube-system",
        [],
    ),
    "aws-efa": ("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.3", "kube-system", []),
    "cert-manager": ("cert-manager", "https://charts.jetstack.io", "v1.17.2", "cert-manager", []),
    "kgateway-crds": ("kgateway-crds", "oci://cr.kgateway.dev/kgateway-dev/charts", "v2.0.0", "kgateway-system", []),
    "kgateway": (
        "kgateway",
        "oci://cr.kgateway.dev/kgateway-dev/charts",
        "v2.0.0",
        "kgateway-system",
        ["kgateway-crds", "cert-manager"],
    ),
    "kube-prometheus-stack": (
        "kube-prometheus-stack",
        "https://prometheus-community.github.io/helm-charts",
        "82.8.0",
        "monitoring",
        [],
    ),
    "k8s-ephemeral-storage-metrics": (
        "k8s-ephemeral-storage-metrics",
        "https://jmcgrath207.github.io/k8s-ephemeral-storage-metrics/chart",
        "1.19.2",
        "monitoring",
        ["kube-prometheus-stack"],
    ),
    "prometheus-adapter": (
        "prometheus-adapter",
        "https://prometheus-community.github.io/helm-charts",
        "5.3.0",
        "monitoring",
        ["kube-prometheus-stack"],
    ),
    "skyhook-operator": ("skyhook-operator", "https://helm.ngc.nvidia.com/nvidia/skyhook", "v0.14.0", "skyhook", []),
    "skyhook-customizations": ("skyhook-customizations", "", "", "skyhook", ["skyhook-operator"]),
    "gpu-operator": (
        "gpu-operator",
        "https://helm.ngc.nvidia.com/nvidia",
        "v25.10.1",
        "gpu-operator",
        ["cert-manager", "kube-prometheus-stack", "skyhook-customizations"],
    ),
    "kai-scheduler": (
        "kai-scheduler",
        "oci://ghcr.io/nvidia/kai-scheduler",
        "v0.13.0",
        "kai-scheduler",
        ["gpu-operator"],
    ),
    "nvidia-dra-driver-gpu": (
        "nvidia-dra-driver-gpu",
        "https://helm.ngc.nvidia.com/nvidia",
        "25.12.0",
        "nvidia-dra-driver",
        ["gpu-operator"],
    ),
    "nvsentinel": ("nvsentinel", "oci://ghcr.io/nvidia", "v1.1.0", "nvsentinel", ["cert-manager", "gpu-operator"]),
}


@pytest.mark.parametrize("name", sorted(WORKED_EXAMPLE))
def test_worked_example_components(eks: Recipe, name: str) -> None:
    c = eks.components[name]
    assert (c.chart, c.source, c.version, c.namespace, c.dependency_refs) == WORKED_EXAMPLE[name]
    assert c.type == "Helm"
    assert c.enabled


def test_worked_example_top_level_value_keys(eks: Recipe) -> None:
    keys = {name: sorted(c.values) for name, c in eks.components.items()}
    assert keys["gpu-operator"] == [
        *("dcgm", "dcgmExporter", "devicePlugin", "driver", "fullnameOverride", "gdrcopy", "gfd"),
        *("migManager", "node-feature-discovery", "operator", "toolkit", "validator"),
    ]
    assert keys["nvidia-dra-driver-gpu"] == [
        *("controller", "fullnameOverride", "gpuResourcesEnabledOverride", "kubeletPlugin"),
        *("nvidiaDriverRoot", "resources"),
    ]
    assert keys["kgateway-crds"] == ["enabled"]
    # No valuesFile: overrides only, values.yaml is never looked for (§7 step 5).
    assert eks.components["skyhook-customizations"].values == {
        "accelerator": "h100",
        "intent": "inference",
        "service": "eks",
    }


def test_gpu_operator_chart_version_on_eks(eks: Recipe) -> None:
    gpu = eks.components["gpu-operator"]
    assert (gpu.chart, gpu.version, gpu.chart_version) == ("gpu-operator", "v25.10.1", "25.10.1")
    assert not gpu.oci and not gpu.manifest_only
    assert eks.components["skyhook-customizations"].manifest_only
    assert eks.components["nvsentinel"].oci  # base overrides the registry's NGC repo (§13 A10)


# ----------------------------------------------------------------------------- values (§7)


def test_eks_overlay_value_and_kept_null(data: RecipeData, eks: Recipe) -> None:
    storage = dig(eks.components["kube-prometheus-stack"].values, "prometheus.prometheusSpec.storageSpec")
    assert storage == {
        "emptyDir": None,  # explicit null kept so Helm deletes the chart default
        "volumeClaimTemplate": {
            "spec": {
                "storageClassName": "gp2",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "50Gi"}},
            }
        },
    }
    assert dig(eks.components["kube-prometheus-stack"].values, "prometheus.prometheusSpec.retention") == "15d"
    # kind does not set the PVC: the values.yaml emptyDir stays, with kind's sizeLimit.
    kind = resolve(data, KIND).components["kube-prometheus-stack"].values
    assert dig(kind, "prometheus.prometheusSpec.storageSpec") == {"emptyDir": {"medium": "", "sizeLimit": "5Gi"}}


def test_dra_driver_null_over_missing_key(eks: Recipe) -> None:
    controller = eks.components["nvidia-dra-driver-gpu"].values["controller"]
    assert controller == {"priorityClassName": "", "affinity": {"nodeAffinity": None}}
    assert "nodeAffinity" in controller["affinity"]


def test_gke_variant_values_file(data: RecipeData) -> None:
    gke = resolve(data, GKE)
    assert gke.applied_overlays == ["base", "monitoring-hpa", "gke-cos", "gke-cos-inference", "h100-gke-cos-inference"]
    assert gke.constraints == [{"name": "K8s.server.version", "value": ">= 1.32"}]
    gpu = gke.components["gpu-operator"]
    assert gpu.values_file == "components/gpu-operator/values-gke-cos.yaml"
    # values-gke-cos.yaml deep-merged over values.yaml: enabled flips, the rest of driver stays.
    assert gpu.values["driver"]["enabled"] is False
    assert gpu.values["driver"]["version"] == "580.105.08"
    assert gpu.values["cdi"] == {"enabled": True, "default": True}  # overrides {cdi.enabled} over the variant
    assert [e["value"] for e in gpu.values["devicePlugin"]["env"]] == ["x", "cdi-cri,cdi-annotations,volume-mounts"]
    assert len(gpu.values["toolkit"]["env"]) == 3  # lists are replaced, not concatenated
    assert [m.path.rsplit("/", 1)[-1] for m in gpu.manifests] == ["dcgm-exporter.yaml", "gke-resource-quota.yaml"]
    assert gke.components["skyhook-customizations"].values == {"accelerator": "h100", "intent": "inference"}
    assert "aws-efa" not in gke.components
    assert dig(gke.components["kube-prometheus-stack"].values, "prometheus.prometheusSpec.storageSpec")[
        "volumeClaimTemplate"
    ]["spec"]["storageClassName"] == ("standard-rwo")


def test_kind_values_and_dropped_manifest(data: RecipeData) -> None:
    kind = resolve(data, KIND)
    assert kind.applied_overlays == ["base", "monitoring-hpa", "kind", "kind-inference", "h100-kind-inference"]
    assert kind.constraints == [{"name": "K8s.server.version", "value": ">= 1.30"}]
    gpu = kind.components["gpu-operator"]
    assert gpu.values["devicePlugin"]["env"] == []  # an empty list replaces
    assert gpu.values["dcgmExporter"]["config"] == {"name": "", "create": False}
    assert gpu.manifests == []  # dcgm-exporter.yaml renders empty and is dropped (§8.5)
    assert kind.components["nvidia-dra-driver-gpu"].values["nvidiaDriverRoot"] == "/"


# ----------------------------------------------------------------------------- §11 other leaves

SHARED_VERSIONS = {
    "cert-manager": "v1.17.2",
    "kgateway-crds": "v2.0.0",
    "kgateway": "v2.0.0",
    "kube-prometheus-stack": "82.8.0",
    "k8s-ephemeral-storage-metrics": "1.19.2",
    "prometheus-adapter": "5.3.0",
    "skyhook-operator": "v0.14.0",
    "gpu-operator": "v25.10.1",
    "kai-scheduler": "v0.13.0",
    "nvidia-dra-driver-gpu": "25.12.0",
    "nvsentinel": "v1.1.0",
}


@pytest.mark.parametrize(
    ("query", "extra"),
    [
        (EKS, {"aws-ebs-csi-driver": "2.55.0", "aws-efa": "v0.5.3", "skyhook-customizations": ""}),
        (GKE, {"skyhook-customizations": ""}),
        (AKS, {"network-operator": "25.1.0"}),
        (KIND, {"network-operator": "25.1.0"}),
    ],
    ids=["eks", "gke", "aks", "kind"],
)
def test_inference_leaf_versions(data: RecipeData, query: Query, extra: dict[str, str]) -> None:
    recipe = resolve(data, query)
    assert {name: c.version for name, c in recipe.components.items()} == SHARED_VERSIONS | extra


def test_aks_order(data: RecipeData) -> None:
    aks = resolve(data, AKS)
    assert aks.deployment_order == [
        *("cert-manager", "kgateway-crds", "kgateway", "kube-prometheus-stack", "gpu-operator"),
        *("k8s-ephemeral-storage-metrics", "kai-scheduler", "network-operator", "nvidia-dra-driver-gpu"),
        *("nvsentinel", "prometheus-adapter", "skyhook-operator"),
    ]
    assert aks.constraints[0] == {"name": "K8s.server.version", "value": ">= 1.32.4"}  # last writer wins (§13 A7)
    assert aks.components["gpu-operator"].values["toolkit"]["enabled"] is False  # values-aks.yaml


DYNAMO_STORAGE = {"eks": "gp2", "gke": "standard-rwo", "aks": "managed-csi", "kind": "standard"}


@pytest.mark.parametrize("query", [EKS, GKE, AKS, KIND], ids=lambda q: q.service)
def test_dynamo_leaves_pin_090_over_registry(data: RecipeData, query: Query) -> None:
    recipe = resolve(data, Query(**{**query.__dict__, "platform": "dynamo"}))
    assert recipe.applied_overlays[-1].endswith("-inference-dynamo")
    for name in ("dynamo-crds", "dynamo-platform"):
        c = recipe.components[name]
        assert (c.version, c.source, c.namespace) == (
            "0.9.0",
            "https://helm.ngc.nvidia.com/nvidia/ai-dynamo",
            "dynamo-system",
        )
        assert data.registry[name].helm["defaultVersion"] == "0.9.1"  # the ref beats the registry default
    platform = recipe.components["dynamo-platform"].values
    assert dig(platform, "etcd.persistence.storageClass") == DYNAMO_STORAGE[query.service]
    assert dig(platform, "nats.config.jetstream.fileStore.pvc.storageClassName") == DYNAMO_STORAGE[query.service]
    assert {"name": "K8s.server.version", "value": ">= 1.34"} in recipe.constraints
    # The non-kind leaves also override gpuResourcesEnabledOverride: true, but values.yaml
    # already says true, so the merged value is the same everywhere.
    assert recipe.components["nvidia-dra-driver-gpu"].values["gpuResourcesEnabledOverride"] is True
    order = recipe.deployment_order
    assert order.index("kai-scheduler") < order.index("dynamo-platform")
    assert order.index("gpu-operator") < order.index("dynamo-platform")


def test_eks_dynamo_order(data: RecipeData) -> None:
    assert resolve(data, EKS_DYNAMO).deployment_order == [
        *("aws-ebs-csi-driver", "aws-efa", "cert-manager", "dynamo-crds", "kgateway-crds", "kgateway"),
        *("kube-prometheus-stack", "k8s-ephemeral-storage-metrics", "prometheus-adapter", "skyhook-operator"),
        *("skyhook-customizations", "gpu-operator", "kai-scheduler", "dynamo-platform", "nvidia-dra-driver-gpu"),
        "nvsentinel",
    ]


# ----------------------------------------------------------------------------- manifests (§8.5)


def only_manifest(component: Component, basename: str) -> list[dict[str, Any]]:
    found = [m for m in component.manifests if m.path.endswith("/" + basename)]
    assert len(found) == 1, [m.path for m in component.manifests]
    return found[0].objects


def test_dcgm_exporter_configmap(eks: Recipe) -> None:
    (cm,) = only_manifest(eks.components["gpu-operator"], "dcgm-exporter.yaml")
    assert (cm["kind"], cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        "ConfigMap",
        "dcgm-exporter",
        "gpu-operator",
    )
    assert cm["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": "gpu-operator-25.10.1",
    }
    assert "DCGM_FI_DEV_GPU_UTIL" in cm["data"]["dcgm-metrics.csv"]


def test_dcgm_exporter_name_comes_from_values(data: RecipeData, eks: Recipe) -> None:
    path = "components/gpu-operator/manifests/dcgm-exporter.yaml"
    values = copy.deepcopy(eks.components["gpu-operator"].values)
    values["dcgmExporter"]["config"]["name"] = "custom-metrics"
    root = gotemplate.GoStruct(
        Values={"gpu-operator": values},
        Release=gotemplate.GoStruct(Namespace="ns1", Service="Helm"),
        Chart=gotemplate.GoStruct(Name="gpu-operator", Version="1.0"),
    )
    text = gotemplate.render(data.files[path], root, name=path)
    assert "name: custom-metrics\n  namespace: ns1\n" in text
    values["dcgmExporter"]["config"]["name"] = ""  # `default` applies to "" as well as nil
    assert "name: dcgm-exporter\n" in gotemplate.render(data.files[path], root, name=path)


def test_kgateway_inference_gateway_renders(data: RecipeData, eks: Recipe) -> None:
    objects = only_manifest(eks.components["kgateway"], "inference-gateway.yaml")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("GatewayParameters", "system-proxy"),
        ("Gateway", "inference-gateway"),
    ]
    assert objects[0]["spec"]["kube"]["podTemplate"] == {"extraLabels": {"app.kubernetes.io/managed-by": "aicr"}}
    assert objects[1]["spec"]["listeners"][0]["port"] == 80
    # With scheduling values the toYaml | nindent blocks must round-trip to the same data.
    path = "components/kgateway/manifests/inference-gateway.yaml"
    selector = {"node-role/system": "true", "zone": "on", "n": "0755"}
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}]
    root = gotemplate.GoStruct(
        Values={"kgateway": {"nodeSelector": selector, "tolerations": tolerations}},
        Release=gotemplate.GoStruct(Namespace="kgateway-system", Service="Helm"),
        Chart=gotemplate.GoStruct(Name="kgateway", Version="2.0.0"),
    )
    docs = data.parsed(gotemplate.render(data.files[path], root, name=path), path, multi=True)
    template = next(d for d in docs if d)["spec"]["kube"]["podTemplate"]
    assert template["nodeSelector"] == selector
    assert template["tolerations"] == tolerations


def test_skyhook_tuning_manifest(eks: Recipe) -> None:
    (skyhook,) = only_manifest(eks.components["skyhook-customizations"], "tuning.yaml")
    assert skyhook["kind"] == "Skyhook"
    assert skyhook["metadata"]["namespace"] == "skyhook"
    assert skyhook["metadata"]["labels"]["helm.sh/chart"] == "skyhook-customizations-0.1.0"  # manifest-only (§13 A14)
    assert skyhook["spec"]["autoTaintNewNodes"] is True
    assert skyhook["spec"]["additionalTolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert "nodeSelectors" not in skyhook["spec"]
    assert skyhook["spec"]["packages"]["nvidia-tuned"]["configMap"] == {
        "intent": "inference",
        "accelerator": "h100",
        "service": "eks",
    }


# ----------------------------------------------------------------------------- determinism


def test_resolve_is_deterministic_and_isolated(data: RecipeData) -> None:
    first = resolve(data, EKS)
    assert resolve(data, EKS) == first
    # Mutating a result must not leak into later resolutions.
    before = copy.deepcopy(first)
    first.components["kube-prometheus-stack"].values["prometheus"]["prometheusSpec"]["retention"] = "1d"
    first.components["gpu-operator"].dependency_refs.append("bogus")
    first.components["gpu-operator"].manifests[0].objects[0]["metadata"]["name"] = "bogus"
    first.validation["conformance"]["checks"].clear()
    first.constraints[0]["value"] = "bogus"
    assert resolve(data, EKS) == before


def test_no_state_leaks_between_queries(data: RecipeData) -> None:
    # AICR's Go resolver gives the second query the dynamo leaf's validation here (§13 A4).
    dynamo = resolve(data, EKS_DYNAMO)
    assert sorted(dynamo.validation) == ["conformance", "deployment"]
    assert len(dynamo.validation["conformance"]["checks"]) == 11
    plain = resolve(data, EKS)
    assert sorted(plain.validation) == ["conformance"]
    assert len(plain.validation["conformance"]["checks"]) == 5
    assert "gpuResourcesEnabledOverride" in plain.components["nvidia-dra-driver-gpu"].values  # from values.yaml
    assert "dynamo-platform" not in plain.components
    assert resolve(data, EKS_DYNAMO) == dynamo
    # The dynamo leaf's phases were merged over eks's: mutating them must not reach the data.
    dynamo.validation["conformance"]["checks"].clear()
    dynamo.validation["deployment"]["checks"].clear()
    assert resolve(data, EKS_DYNAMO).validation["conformance"]["checks"][-1] == "secure-accelerator-access"


def test_variant_merge_does_not_touch_shared_values(data: RecipeData) -> None:
    # GKE deep-merges values-gke-cos.yaml over gpu-operator's values.yaml; EKS must still see
    # the file as shipped afterwards.
    assert resolve(data, GKE).components["gpu-operator"].values["driver"]["enabled"] is False
    eks_gpu = resolve(data, EKS).components["gpu-operator"].values
    assert eks_gpu["driver"]["enabled"] is True
    assert "cdi" not in eks_gpu


# ----------------------------------------------------------------------------- queries and errors


def test_query_normalisation(data: RecipeData) -> None:
    loud = resolve(data, Query(service=" EKS ", accelerator="H100", os="Ubuntu", intent="INFERENCE"))
    assert loud.query == EKS
    assert loud.applied_overlays == resolve(data, EKS).applied_overlays
    aliased = resolve(data, Query(service="self-managed", accelerator="h100", os="al2023"), strict=False)
    assert (aliased.query.service, aliased.query.os) == ("any", "amazonlinux")


def test_unknown_criteria_value(data: RecipeData) -> None:
    with pytest.raises(AicrError, match=r"accelerator='h999' is not one of: any, h100, gb200"):
        resolve(data, Query(service="eks", accelerator="h999"))
    with pytest.raises(AicrError, match=r"service='aws'"):
        resolve(data, Query(service="aws"))
    with pytest.raises(AicrError, match="no criteria"):
        resolve(data, Query(service="any"))


def test_gke_needs_cos(data: RecipeData) -> None:
    with pytest.raises(AicrError, match="service=gke"):
        resolve(data, Query(service="gke", accelerator="h100", intent="inference"))
    # AICR's own behaviour: base + monitoring-hpa only, silently (§4).
    fallback = resolve(data, Query(service="gke", accelerator="h100", intent="inference"), strict=False)
    assert fallback.applied_overlays == ["base", "monitoring-hpa"]
    assert len(fallback.components) == 9
    with pytest.raises(AicrError, match="platform=dynamo"):
        resolve(data, Query(service="eks", accelerator="h100", intent="inference", platform="dynamo"))
