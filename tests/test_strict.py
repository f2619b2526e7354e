"""Strict as an allow-list, and the registry policy of the function Input, on the real generated stacks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from function.offline import RenderResult, run_pipeline
from function.paths import get_path
from tests.support import k8s_schema
from tests.support.crossplane import desired, grpc_runner
from tests.support.overrides import BANK_HOST, INPUT_CRD, PAIRS, bank, ec, fatal, overridden, policy_input
from tests.support.xr import make_xr, provider_configs

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


# --------------------------------------------------------------------------- #
# The allow-list
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_the_bank_mirror_passes_strict_and_the_input_policy_on_every_stack(cloud: str, accelerator: str) -> None:
    got = desired(overridden(make_xr(cloud, accelerator), ec("bank", bank()), input=policy_input()))
    for key, body in got.items():
        chart = get_path(body, "spec.forProvider.chart.repository")
        if chart is not None:
            assert chart.startswith(f"oci://{BANK_HOST}/charts"), key


def test_a_self_mapping_rule_in_any_document_is_fatal() -> None:
    team = ec("team", {"priority": 99, "registry": {"images": [{"from": "nvcr.io", "to": "nvcr.io"}]}})
    message = fatal(make_xr("GKE"), ec("bank", bank()), team)
    assert "EnvironmentConfig team: data.servingStack: registry.images rule {from: nvcr.io, to: nvcr.io}" in message
    assert "maps nvcr.io onto itself" in message
    # In the strict document itself too: its own targets would otherwise allow nvcr.io.
    own = bank(images=[{"from": "nvcr.io", "to": "nvcr.io/nvidia"}, {"from": "*", "to": f"{BANK_HOST}/hub"}])
    assert "maps nvcr.io onto itself" in fatal(make_xr("GKE"), ec("bank", own))


def test_a_repointed_catch_all_is_fatal_naming_document_rule_and_references() -> None:
    attacker = {
        "priority": 99,
        "registry": {
            "images": [{"from": "*", "to": "registry.attacker.example"}],
            "charts": [{"from": "*", "to": "oci://registry.attacker.example/charts"}],
        },
    }
    message = fatal(make_xr("GKE"), ec("bank", bank()), ec("attacker", attacker))
    assert (
        "EnvironmentConfig attacker: data.servingStack: registry.images rule {from: *, to: registry.attacker.example} "
        "maps to registry.attacker.example, outside the registries bank allows" in message
    )
    assert "cert-manager: registry.attacker.example/jetstack/cert-manager-controller" in message
    assert "registry.charts rule {from: *, to: oci://registry.attacker.example/charts}" in message
    assert (
        "prometheus: oci://registry.attacker.example/charts/prometheus-community.github.io/helm-charts" not in message
    )
    assert "cert-manager: oci://registry.attacker.example/charts" in message


def test_a_rule_outside_the_allow_list_is_fatal_even_before_a_reference_uses_it() -> None:
    dormant = ec("team", {"priority": 99, "registry": {"images": [{"from": "example.org", "to": "elsewhere.example"}]}})
    message = fatal(make_xr("GKE"), ec("bank", bank(allowedRegistries=[BANK_HOST])), dormant)
    assert "{from: example.org, to: elsewhere.example} maps to elsewhere.example" in message
    assert "references it sends there: none in this stack yet" in message


def test_allowed_registries_replace_the_rule_targets_and_a_later_document_cannot_widen_them() -> None:
    # The bank allows only its hub path: its own chart rule points elsewhere.
    message = fatal(make_xr("GKE"), ec("bank", bank(allowedRegistries=[f"{BANK_HOST}/hub", f"{BANK_HOST}/nvcr"])))
    assert f"{{from: *, to: oci://{BANK_HOST}/charts}} maps to {BANK_HOST}/charts, outside" in message
    # A team turning strict on with its own allow-list adds a policy; it does not replace the bank's.
    team = {
        "priority": 99,
        "registry": {
            "images": [{"from": "*", "to": "team.example/hub"}],
            "strict": True,
            "allowedRegistries": ["team.example"],
        },
    }
    message = fatal(make_xr("GKE"), ec("bank", bank()), ec("team", team))
    assert "to: team.example/hub} maps to team.example/hub, outside the registries bank allows" in message


@pytest.mark.parametrize(
    ("values", "where"),
    [
        # A full reference with a tag, at a path nobody declared, inside a flag.
        (
            {"extraArgs": [f"--acme-http01-solver-image={ECR}/solver:v1"]},
            f"cert-manager spec.forProvider.values.extraArgs[0]: {ECR}/solver:v1",
        ),
        # No tag, but held under an image-ish key.
        ({"sidecar": {"image": {"repository": f"{ECR}/sidecar"}}}, f"values.sidecar.image.repository: {ECR}/sidecar"),
        ({"sidecar": {"registry": ECR}}, f"values.sidecar.registry: {ECR}"),
    ],
)
def test_undeclared_paths_on_unknown_hosts_are_caught(values: dict[str, Any], where: str) -> None:
    team = ec("team", {"priority": 99, "components": {"cert-manager": {"values": values}}})
    message = fatal(make_xr("GKE"), ec("bank", bank()), team)
    assert where in message


def test_a_string_one_allow_list_lets_through_is_refused_under_another() -> None:
    """What strict found in each string is kept whatever the allow-list, and judged again for a narrower one."""
    team = ec(
        "team", {"priority": 99, "components": {"cert-manager": {"values": {"extraArgs": [f"--image={ECR}/x:v1"]}}}}
    )
    overridden(make_xr("GKE"), ec("bank", bank(allowedRegistries=[BANK_HOST, ECR])), team)
    message = fatal(make_xr("GKE"), ec("bank", bank(allowedRegistries=[BANK_HOST])), team)
    assert f"cert-manager spec.forProvider.values.extraArgs[0]: {ECR}/x:v1" in message


def test_an_image_on_an_unknown_host_is_caught_where_no_rule_moves_it() -> None:
    team = ec("team", {"priority": 99, "components": {"leader-worker-set": {"image": f"{ECR}/lws:v0.8.0"}}})
    per_host = bank(
        images=[
            {"from": h, "to": f"{BANK_HOST}/{h}"}
            for h in ("nvcr.io", "quay.io", "docker.io", "registry.k8s.io", "ghcr.io")
        ]
    )
    message = fatal(make_xr("GKE"), ec("bank", per_host), team)
    assert f"leader-worker-set image manager: {ECR}/lws:v0.8.0" in message
    # A catch-all moves it into the mirror like any other image.
    got = desired(overridden(make_xr("GKE"), ec("bank", bank()), team))
    lws = got["leader-worker-set"]["spec"]["forProvider"]["values"]["image"]["manager"]
    assert lws == {"repository": f"{BANK_HOST}/hub/lws", "tag": "v0.8.0"}


def test_strings_that_only_look_like_paths_are_not_references() -> None:
    # Label keys, resource names and API groups carry a dot and a slash but no tag.
    values = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "affinity": {"topologyKey": "kubernetes.io/hostname"},
        "note": "see https://example.org/docs",
    }
    team = ec("team", {"priority": 99, "components": {"cert-manager": {"values": values}}})
    overridden(make_xr("GKE"), ec("bank", bank()), team)


@pytest.mark.parametrize(
    ("registry", "error"),
    [
        ({"allowedRegistries": [BANK_HOST]}, "takes effect with strict: true only"),
        ({"strict": True, "allowedRegistries": [f"oci://{BANK_HOST}"]}, "is not a registry"),
        ({"strict": True, "allowedRegistries": []}, "allowedRegistries"),
    ],
)
def test_allowed_registries_are_validated(registry: dict[str, Any], error: str) -> None:
    assert error in fatal(make_xr("GKE"), ec("bank", {"registry": registry}))


# --------------------------------------------------------------------------- #
# Controller built-ins and pull secrets reach the output under the mirror
# --------------------------------------------------------------------------- #


def test_the_data_plane_proxy_and_rate_limiter_are_mirrored_with_pull_secrets() -> None:
    got = desired(overridden(make_xr("GKE"), ec("bank", bank())))
    proxy = got["gateway-proxy"]["spec"]["forProvider"]["manifest"]["spec"]
    assert proxy["mergeType"] == "StrategicMerge"  # keeps Envoy Gateway's default EnvoyProxy
    deployment = proxy["provider"]["kubernetes"]["envoyDeployment"]
    assert deployment["container"]["image"] == f"{BANK_HOST}/hub/envoyproxy/envoy:distroless-v1.38.1"
    assert deployment["pod"]["imagePullSecrets"] == [{"name": "bank-pull"}]
    images = got["envoy-gateway"]["spec"]["forProvider"]["values"]["global"]["images"]
    assert images["envoyProxy"]["image"] == f"{BANK_HOST}/hub/envoyproxy/envoy:distroless-v1.38.1"
    assert images["ratelimit"]["image"] == f"{BANK_HOST}/hub/envoyproxy/ratelimit:ff287602"


def test_gpu_operator_dcgm_pull_secrets() -> None:
    values = desired(overridden(make_xr("EKS"), ec("bank", bank())))["gpu-operator"]["spec"]["forProvider"]["values"]
    assert values["dcgm"]["imagePullSecrets"] == ["bank-pull"]
    assert values["dcgmExporter"]["imagePullSecrets"] == ["bank-pull"]


def test_amd_device_configs_name_every_operand_image_and_take_the_pull_secret() -> None:
    doc = {**bank(), "drivers": [{"name": "mi300", "nodeSelector": {"pool": "mi300"}, "version": "6.4"}]}
    got = desired(overridden(make_xr("Existing", "AMD"), ec("bank", doc)))
    spec = got["driver-mi300"]["spec"]["forProvider"]["manifest"]["spec"]
    hub = f"{BANK_HOST}/hub"
    assert spec["commonConfig"]["initContainerImage"] == f"{hub}/library/busybox:1.36"
    assert spec["commonConfig"]["utilsContainer"]["image"] == f"{hub}/rocm/gpu-operator-utils:v1.4.0"
    assert spec["driver"]["image"] == f"{hub}/kube-amd-gpu/amdgpu_kmod"
    assert spec["driver"]["imageBuild"]["baseImageRegistry"] == hub
    for operand in ("driver", "devicePlugin", "metricsExporter", "testRunner", "configManager"):
        assert spec[operand]["imageRegistrySecret"] == {"name": "bank-pull"}, operand
    assert spec["commonConfig"]["utilsContainer"]["imageRegistrySecret"] == {"name": "bank-pull"}
    default = got["amd-gpu-operator"]["spec"]["forProvider"]["values"]["deviceConfig"]["spec"]
    assert default["commonConfig"]["initContainerImage"] == f"{hub}/library/busybox:1.36"
    assert default["driver"]["imageBuild"]["baseImageRegistry"] == hub
    for operand in ("driver", "devicePlugin", "metricsExporter", "testRunner", "configManager"):
        assert default[operand]["imageRegistrySecret"] == {"name": "bank-pull"}, operand
    kmm = got["amd-gpu-operator"]["spec"]["forProvider"]["values"]["kmm"]["controller"]["manager"]["env"]
    assert kmm["relatedImageWorkerPullSecret"] == "bank-pull"


# --------------------------------------------------------------------------- #
# The function Input's policy
# --------------------------------------------------------------------------- #


def test_the_input_policy_with_no_document_is_fatal_listing_every_reference() -> None:
    message = fatal(make_xr("GKE"), input=policy_input())
    assert message.count("function Input: spec.registry.strict: no override document applies") == 1
    for expected in (
        "cert-manager chart: https://charts.jetstack.io",
        "cert-manager image controller: quay.io/jetstack/cert-manager-controller",
        "gateway-proxy manifest image envoy-proxy: docker.io/envoyproxy/envoy:distroless-v1.38.1",
    ):
        assert expected in message


@pytest.mark.parametrize(
    "config",
    [
        ec("bank", bank(), labels={"servingstack.modelplane.ai/overides": "true"}),  # label typo
        ec("bank", {**bank(), "match": {"clouds": ["EKS"]}}),  # excludes the XR
    ],
)
def test_the_input_policy_holds_when_the_document_is_mislabelled_or_excluded(config: dict[str, Any]) -> None:
    assert "function Input: spec.registry.strict: no override document applies" in fatal(
        make_xr("GKE"), config, input=policy_input()
    )


def test_the_input_policy_with_a_partial_document_lists_what_is_missing() -> None:
    partial = {"registry": {"images": [{"from": "nvcr.io", "to": f"{BANK_HOST}/nvcr"}]}}
    message = fatal(make_xr("GKE"), ec("partial", partial), input=policy_input())
    assert "function Input: spec.registry.strict: " in message
    assert "quay.io/jetstack/cert-manager-controller" in message
    assert "nvcr.io/nvidia/gpu-operator" not in message  # mirrored into the allowed registry


def test_the_input_policy_refuses_a_document_mirroring_elsewhere() -> None:
    other = {
        "registry": {
            "images": [{"from": "*", "to": "mirror.example.com/hub"}],
            "charts": [{"from": "*", "to": "oci://mirror.example.com/charts"}],
        }
    }
    message = fatal(make_xr("GKE"), ec("other", other), input=policy_input())
    assert (
        "to: mirror.example.com/hub} maps to mirror.example.com/hub, outside the registries function Input" in message
    )


def test_an_input_policy_switched_off_imposes_nothing() -> None:
    overridden(make_xr("GKE"), input=policy_input(strict=False))


def _over_grpc(target: str, xr: dict[str, Any], required: list[dict[str, Any]], **kw: Any) -> RenderResult:
    return asyncio.run(run_pipeline(grpc_runner(target), xr=xr, observed=provider_configs(xr), required=required, **kw))


def test_the_input_policy_over_grpc(server: str) -> None:
    xr = make_xr("Existing", "AMD")
    with pytest.raises(Exception, match="no override document applies"):
        _over_grpc(server, xr, [], input=policy_input())
    doc = {**bank(), "drivers": [{"name": "mi300", "nodeSelector": {"pool": "mi300"}, "version": "6.4"}]}
    got = desired(_over_grpc(server, xr, [ec("bank", doc)], input=policy_input()))
    assert got["driver-mi300"]["spec"]["forProvider"]["manifest"]["spec"]["driver"]["image"].startswith(BANK_HOST)


def test_the_input_crd_takes_the_contract_field_names_and_the_function_reads_them() -> None:
    index = k8s_schema.CRDIndex([INPUT_CRD])
    good = {**policy_input(), "metadata": {"name": "policy"}}
    assert index.validate(good) == []
    for broken in ({"strict": True}, {"strict": True, "allowedRegistries": []}, {"allowedRegistries": [BANK_HOST]}):
        assert index.validate({**good, "spec": {"registry": broken}}), broken
    # What the CRD admits, the function enforces.
    assert "function Input: spec.registry.strict" in fatal(make_xr("GKE"), input=good)


def test_a_patch_removing_the_proxy_image_cannot_hand_it_back_to_the_controller_default() -> None:
    unset = {"spec": {"provider": {"kubernetes": {"envoyDeployment": {"container": {"image": None}}}}}}
    team = ec("team", {"priority": 99, "components": {"gateway-proxy": {"manifest": unset}}})
    got = desired(overridden(make_xr("GKE"), ec("bank", bank()), team))
    container = got["gateway-proxy"]["spec"]["forProvider"]["manifest"]["spec"]["provider"]["kubernetes"]
    assert container["envoyDeployment"]["container"]["image"] == f"{BANK_HOST}/hub/envoyproxy/envoy:distroless-v1.38.1"
