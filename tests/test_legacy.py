"""ServingStacks written by v0.3.1's InferenceCluster keep reconciling, over real gRPC.

The shapes are v0.3.1's (facts/v0.3.1.yaml): compose-inference-cluster sets
``secrets`` (Kubeconfig, plus the cloud identity on GKE and Nebius) and, on
GKE only, ``nvidiaDriverRoot``; the v0.3.1 XRD defaulted ``nvidiaDriverRoot``
to ``/`` and every ``spec.versions`` pin, so stored objects carry them.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from crossplane.function import resource

from function import legacy
from function.model import ServingStack
from function.offline import RenderError, RenderResult, run_pipeline
from tests.support.crossplane import desired, grpc_runner
from tests.support.legacy import EKS, GKE, KUBECONFIG_ONLY, NEBIUS, V031, v031_xr
from tests.support.xr import provider_configs


def over_grpc(target: str, xr: dict[str, Any]) -> RenderResult:
    return asyncio.run(run_pipeline(grpc_runner(target), xr=xr, observed=provider_configs(xr)))


def warnings(result: RenderResult) -> list[str]:
    return [r.message for r in result.results if r.severity == 2]  # SEVERITY_WARNING


def stack_id(result: RenderResult) -> str:
    return str(resource.struct_to_dict(result.desired.composite.resource)["status"]["stack"]["id"])


@pytest.mark.parametrize(("xr", "cloud", "stack"), [(GKE, "GKE", "gke-nvidia"), (EKS, "EKS", "eks-nvidia")])
def test_the_cloud_is_inferred_where_unambiguous_with_a_warning_saying_what_to_set(
    server: str, xr: dict[str, Any], cloud: str, stack: str
) -> None:
    result = over_grpc(server, xr)
    assert stack_id(result) == stack
    [warning] = warnings(result)
    assert warning.startswith("ServingStack modelplane-system/c-serving-stack-1a2b3: spec.cloud is not set")
    assert warning.endswith(f"set spec.cloud: {cloud}")
    got = desired(result)
    # The same stack a ServingStack naming its cloud gets.
    named = copy.deepcopy(xr)
    named["spec"]["cloud"] = cloud
    assert desired(over_grpc(server, named)) == got
    assert got["dra-driver"]["spec"]["forProvider"]["values"]["nvidiaDriverRoot"] == xr["spec"]["nvidiaDriverRoot"]


def test_a_nebius_identity_means_nebius() -> None:
    xr = legacy.resolve(_parse(NEBIUS), "x")
    assert xr.spec.cloud == "Nebius"


def _parse(raw: dict[str, Any]) -> Any:
    return ServingStack.model_validate(raw)


@pytest.mark.parametrize(
    ("xr", "words"),
    [
        (KUBECONFIG_ONLY, "only a Kubeconfig secret and spec.nvidiaDriverRoot /"),
        # v0.3.1's Existing cluster with a Google identity: not necessarily GKE,
        # and GKE's stack would move its DRA driver root.
        (
            v031_xr({"type": "GoogleApplicationCredentials", "name": "g", "key": "k"}),
            "a GoogleApplicationCredentials secret and spec.nvidiaDriverRoot /",
        ),
    ],
)
def test_an_ambiguous_v031_serving_stack_is_fatal_asking_for_spec_cloud(
    server: str, xr: dict[str, Any], words: str
) -> None:
    with pytest.raises(RenderError) as err:
        over_grpc(server, xr)
    message = str(err.value)
    assert "ServingStack modelplane-system/c-serving-stack-1a2b3: spec.cloud: required;" in message
    assert f"({words})" in message
    assert "set spec.cloud to one of EKS, GKE, AKS, Nebius, Vultr, Existing" in message


def test_the_kubeconfig_only_shape_renders_once_the_parent_sets_the_cloud(server: str) -> None:
    xr = copy.deepcopy(KUBECONFIG_ONLY)
    xr["spec"]["cloud"] = "AKS"
    result = over_grpc(server, xr)
    assert stack_id(result) == "aks-nvidia"
    assert warnings(result) == []  # the stored default root is AKS's too


def test_a_deprecated_driver_root_the_stack_does_not_use_is_a_warning(server: str) -> None:
    xr = copy.deepcopy(KUBECONFIG_ONLY)
    xr["spec"]["cloud"] = "Existing"
    [warning] = warnings(over_grpc(server, xr))
    assert "spec.nvidiaDriverRoot / is deprecated and not read: stack existing-nvidia finds the driver at" in warning


def test_a_version_pin_that_differs_from_v031s_default_is_fatal_not_dropped(server: str) -> None:
    xr = copy.deepcopy(GKE)
    xr["spec"]["versions"]["prometheus"] = "75.0.0"
    with pytest.raises(RenderError) as err:
        over_grpc(server, xr)
    message = str(err.value)
    assert "spec.versions.prometheus: 75.0.0 differs from v0.3.1's default 72.6.2" in message
    assert "servingStack.components.prometheus.version" in message


def test_the_version_defaults_the_function_knows_are_v031s() -> None:
    assert V031["servingStack"]["versionDefaults"] == legacy.V031_VERSION_DEFAULTS


def test_misspelt_legacy_fields_are_still_fatal(server: str) -> None:
    xr = copy.deepcopy(GKE)
    xr["spec"]["versions"]["prometheu"] = "1"
    with pytest.raises(RenderError) as err:
        over_grpc(server, xr)
    assert "spec.versions.prometheu: unknown field" in str(err.value)
