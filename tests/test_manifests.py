"""`function manifests` and `function images --charts`: what the stack installs, as real Helm renders it."""

from __future__ import annotations

from typing import Any

import yaml
from click.testing import Result

from function import manifests
from function.helm import Charts, render_release
from tests.support.crossplane import desired
from tests.support.overrides import overridden
from tests.support.repo import REPO
from tests.support.xr import make_xr, observed_as, provider_configs

Invoke = Any
BANK = "example/environmentconfigs/regulated-bank.yaml"
BANK_MIRROR = "artifactory.bank.example/"


def _objects(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    # go-yaml quotes a plain "=" the way Kubernetes reads it; PyYAML's base loader takes it as a string too.
    return [d for d in yaml.load_all(result.output, Loader=yaml.BaseLoader) if d]


def test_manifests_prints_every_object_the_releases_and_objects_install(invoke: Invoke) -> None:
    result = invoke("manifests", "example/xr.yaml", "--charts", "facts/helm")
    printed = _objects(result)
    # Cross-check with the composed resources rendered here: every Release through Helm, every Object as is.
    xr = yaml.safe_load((REPO / "example" / "xr.yaml").read_text())
    composed = desired(overridden(xr, observed=provider_configs(xr)))
    charts = Charts(REPO / "facts" / "helm")
    releases = [b for b in composed.values() if b["kind"] == "Release"]
    expected = sum(len(render_release(b, charts)) for b in releases)
    expected += sum(1 for b in composed.values() if b["kind"] == "Object")
    assert len(printed) == expected > 200
    # Each object says where it comes from, one comment line before it.
    assert result.output.count("\n# ") + result.output.startswith("# ") == len(printed)
    kinds = {d["kind"] for d in printed}
    assert {"Deployment", "CustomResourceDefinition", "ClusterPolicy", "Gateway", "GatewayClass"} <= kinds
    assert not {"ProviderConfig", "Usage", "Release", "Object"} & kinds
    # Helm puts a namespaced object written without a namespace into the release's.
    deployments = [d for d in printed if d["kind"] == "Deployment"]
    assert deployments and all(d["metadata"].get("namespace") for d in deployments)
    assert any(not d["metadata"].get("namespace") for d in printed if d["kind"] == "ClusterRole")


def test_manifests_are_the_same_objects_from_the_same_sources_on_every_run(invoke: Invoke) -> None:
    # Byte for byte but for what a chart generates at render time (the AI Gateway's webhook certificate: genCA).
    def identities(output: str) -> list[str]:
        return [line for line in output.splitlines() if line.startswith(("# ", "kind: ", "  name: ", "  namespace: "))]

    first = invoke("manifests", "example/xr.yaml", "-e", BANK, "--charts", "facts/helm").output
    assert identities(first) == identities(
        invoke("manifests", "example/xr.yaml", "-e", BANK, "--charts", "facts/helm").output
    )
    assert len(identities(first)) > 600


def test_an_unmanaged_component_is_named_not_printed() -> None:
    xr = make_xr("GKE")
    composed = desired(overridden(xr, observed=provider_configs(xr)))
    release = composed["cert-manager"]
    release["spec"]["managementPolicies"] = ["Observe"]  # what Unmanaged leaves of a Release it installed
    found = manifests.installed({"cert-manager": release}, Charts(REPO / "facts" / "helm"))
    assert found.objects == []
    assert found.not_installed == ["cert-manager: Release observed only (managementPolicies ['Observe'])"]


def test_a_chart_missing_from_the_directory_is_one_line(invoke: Invoke, tmp_path: Any) -> None:
    result = invoke("manifests", "example/xr.yaml", "--charts", str(tmp_path))
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0
    assert "chart ai-gateway-helm v0.7.0 is not in" in result.output
    assert "Traceback" not in result.output


def test_images_from_helm_are_all_in_the_bank_mirror_and_see_what_declared_paths_cannot(invoke: Invoke) -> None:
    with_helm = invoke("images", "--xr", "example/xr.yaml", "-e", BANK, "--charts", "facts/helm")
    declared = invoke("images", "--xr", "example/xr.yaml", "-e", BANK)
    assert with_helm.exit_code == declared.exit_code == 0, with_helm.output
    helm_images = {line for line in with_helm.output.splitlines() if line.startswith("image ")}
    assert len(helm_images) >= 25
    assert all(line.removeprefix("image ").startswith(BANK_MIRROR) for line in helm_images)
    # The charts are listed as without --charts.
    charts = {line for line in declared.output.splitlines() if line.startswith("chart ")}
    assert charts and charts <= set(with_helm.output.splitlines())
    # What only rendering knows: the kubectl tag the chart takes from the cluster's Kubernetes version.
    only_helm = helm_images - set(declared.output.splitlines())
    assert any("/kubectl:v" in line for line in only_helm), only_helm


def test_the_image_reading_finds_what_each_shape_holds() -> None:
    objects = [
        {"kind": "Pod", "spec": {"initContainers": [{"image": "r.io/a:1"}], "containers": [{"image": "r.io/b:2"}]}},
        {
            "kind": "ClusterPolicy",
            "spec": {
                "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "580"},
                "vgpuManager": {"enabled": False, "repository": "", "image": "vgpu-manager"},
            },
        },
        {
            "kind": "Deployment",
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "image": "r.io/c:3",
                                "args": ["--acme-http01-solver-image=quay.io/j/solver:v1", "--url=https://x.io/y:1"],
                                "env": [
                                    {"name": "RELATED_IMAGE_WORKER", "value": "r.io/w:4"},
                                    {"name": "RELATED_IMAGE_PULL_SECRET", "value": "secret"},
                                ],
                            }
                        ]
                    }
                }
            },
        },
        {"kind": "ConfigMap", "data": {"config.yaml": "rateLimitDeployment:\n  container:\n    image: r.io/rl:5\n"}},
        {"kind": "DeviceConfig", "spec": {"commonConfig": {"initContainerImage": "busybox:1.36"}}},
    ]
    found = sorted(i for obj in objects for i in manifests.images(obj))
    assert found == sorted(
        [
            "r.io/a:1",
            "r.io/b:2",
            "nvcr.io/nvidia/driver:580",
            "r.io/c:3",
            "quay.io/j/solver:v1",
            "r.io/w:4",
            "r.io/rl:5",
            "busybox:1.36",
        ]
    )


def test_every_container_image_helm_renders_is_found() -> None:
    # An independent, plain reading: every containers[].image at any depth is among what images() finds.
    def containers(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [c["image"] for c in node.get("containers") or [] if isinstance(c, dict) and "image" in c]
            return own + [i for v in node.values() for i in containers(v)]
        if isinstance(node, list):
            return [i for v in node for i in containers(v)]
        return []

    xr = make_xr("EKS")
    composed = desired(overridden(xr, observed=[observed_as(k, b) for k, b in _configs(xr).items()]))
    found = manifests.installed(composed, Charts(REPO / "facts" / "helm"))
    seen = {i for obj in found.objects for i in manifests.images(obj.object)}
    plain = {i for obj in found.objects for i in containers(obj.object)}
    assert plain and plain <= seen


def _configs(xr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: c for c in provider_configs(xr)}
