"""The override layer over real gRPC and against the CRDs, with the shipped examples."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from function.offline import RenderResult, run_pipeline
from function.render_output import render_documents
from tests.support import k8s_schema
from tests.support.crossplane import desired, grpc_runner, render
from tests.support.overrides import INPUT_CRD, PAIRS, ec, overridden, stack_status
from tests.support.repo import EXAMPLE, load_docs
from tests.support.xr import make_xr, provider_configs

EXAMPLES = load_docs(EXAMPLE / "environmentconfigs")
BANK = next(d for d in EXAMPLES if d["metadata"]["name"] == "regulated-bank")


def over_grpc(target: str, xr: dict[str, Any], required: list[dict[str, Any]], **kw: Any) -> RenderResult:
    return asyncio.run(run_pipeline(grpc_runner(target), xr=xr, observed=provider_configs(xr), required=required, **kw))


def lab_xr(accelerator: str = "NVIDIA") -> dict[str, Any]:
    xr = make_xr("Existing", accelerator)
    # The example's per-pool drivers match the NVIDIA and the AMD lab by name.
    xr["metadata"]["name"] = "lab-gpu-1" if accelerator == "NVIDIA" else "lab-mi300-1"
    xr["metadata"]["labels"] = {"modelplane.ai/environment": "dev"}
    return xr


def crd_problems(result: RenderResult) -> dict[str, list[str]]:
    docs = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d for d in render_documents(result)[1:]
    }
    return {key: errs for key, d in docs.items() if (errs := k8s_schema.validate(d))}


def test_requirements_loop_over_grpc_with_environment_configs_as_required_resources(server: str) -> None:
    xr = make_xr("GKE")
    configs = [*EXAMPLES, ec("unrelated", {"components": {"cert-manager": {"replicas": 9}}}, labels={"x": "y"})]
    result = over_grpc(server, xr, configs)
    assert result.calls == 2  # ask, then render with the same requirements
    assert stack_status(result)["environmentConfigs"] == ["regulated-bank", "prod-hold"]
    got = desired(result)
    assert got["cert-manager"]["spec"]["forProvider"]["chart"]["version"] == "v1.17.1"
    assert got["cert-manager"]["spec"]["forProvider"]["values"].get("replicaCount") != 9
    in_process = overridden(xr, *configs)
    assert result.desired.SerializeToString(deterministic=True) == in_process.desired.SerializeToString(
        deterministic=True
    )


def test_a_missing_required_environment_config_is_fatal_over_grpc(server: str) -> None:
    xr = make_xr("GKE")
    spec = {"names": [{"name": "regulated-bank"}]}
    step = {"apiVersion": "servingstack.fn.modelplane.ai/v1beta1", "kind": "Input", "spec": spec}
    with pytest.raises(Exception, match="EnvironmentConfig regulated-bank not found"):
        over_grpc(server, xr, [], input=step)


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_bank_scenario_passes_strict_and_validates_against_the_crds(cloud: str, accelerator: str) -> None:
    result = overridden(make_xr(cloud, accelerator), BANK)
    assert not any(r.severity == 1 for r in result.results)
    got = desired(result)
    assert got["envoy-gateway"]["spec"]["forProvider"]["values"]["podDisruptionBudget"] == {"minAvailable": 1}
    assert crd_problems(result) == {}


@pytest.mark.parametrize("accelerator", ["NVIDIA", "AMD"])
def test_examples_on_a_byo_lab_cluster_validate_against_the_crds(accelerator: str) -> None:
    result = overridden(lab_xr(accelerator), *EXAMPLES)
    applied = stack_status(result)["environmentConfigs"]
    pools = "gpu-pools" if accelerator == "NVIDIA" else "gpu-pools-amd"
    assert applied == ["regulated-bank", "byo-cluster", pools]
    got = desired(result)
    assert "cert-manager" not in got and "prometheus" not in got  # BYO: never installed by us
    driver = got["driver-b300" if accelerator == "NVIDIA" else "driver-mi355x"]["spec"]["forProvider"]["manifest"]
    assert driver["kind"] == ("NVIDIADriver" if accelerator == "NVIDIA" else "DeviceConfig")
    if accelerator == "NVIDIA":
        assert driver["spec"]["repository"] == "artifactory.bank.example/nvcr/nvidia"
    else:  # an AMD driver version, never an NVIDIA one
        assert driver["spec"]["driver"]["version"] == "7.0"
    assert k8s_schema.covered(driver)
    assert crd_problems(result) == {}


def test_example_input_crd_accepts_the_inputs_the_function_accepts() -> None:
    index = k8s_schema.CRDIndex([INPUT_CRD])
    good: dict[str, Any] = {
        "apiVersion": "servingstack.fn.modelplane.ai/v1beta1",
        "kind": "Input",
        "metadata": {"name": "x"},
        "spec": {"selectors": [{"matchLabels": {"a": "b"}, "policy": "Required"}], "names": [{"name": "bank"}]},
    }
    assert index.validate(good) == []
    bad = copy.deepcopy(good)
    bad["spec"]["names"][0]["policy"] = "Maybe"
    assert index.validate(bad)
    # And the function reads what the CRD describes.
    good["spec"]["selectors"][0]["policy"] = "Optional"
    result = overridden(make_xr("GKE"), ec("bank", {}, labels={}), input=good)
    assert stack_status(result)["environmentConfigs"] == ["bank"]


def test_without_overrides_the_rendered_output_is_unchanged_by_the_layer() -> None:
    xr = make_xr("GKE")
    assert desired(render(xr)) == desired(overridden(xr))
