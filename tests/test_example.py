"""The shipped example works the way `crossplane render` runs it, and the XRD matches the model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from function.model import ServingStackSpec
from function.offline import run_composition, run_pipeline
from function.render_output import render_documents
from tests.support import k8s_schema
from tests.support.crossplane import grpc_runner
from tests.support.legacy import SHAPES
from tests.support.repo import EXAMPLE, load_docs
from tests.support.xr import XRD


@pytest.mark.parametrize("name", ["xr.yaml", "xr-existing.yaml", "dynamo/xr-dynamo.yaml", "dynamo/xr-dynamo-dev.yaml"])
def test_example_xr_is_valid_for_the_xrd(xr_index: k8s_schema.CRDIndex, name: str) -> None:
    assert xr_index.validate(load_docs(EXAMPLE / name)[0]) == []


@pytest.mark.parametrize(
    "name",
    [
        "context/composition.yaml",
        "context/functions.yaml",
        "context/environmentconfig.yaml",
        "scale-out/function.yaml",
    ],
)
def test_example_objects_are_valid_for_their_crds(name: str) -> None:
    for doc in load_docs(EXAMPLE / name):
        assert k8s_schema.covered(doc), f"no CRD for {doc['kind']}"
        assert k8s_schema.validate(doc) == []


def test_context_example_is_what_function_environment_configs_builds() -> None:
    """Its fn.go merges the selected configs' data at the top level and adds apiVersion/kind."""
    [config] = load_docs(EXAMPLE / "context" / "environmentconfig.yaml")
    [environment] = load_docs(EXAMPLE / "context" / "environment.yaml")
    assert environment == {"apiVersion": "internal.crossplane.io/v1alpha1", "kind": "Environment", **config["data"]}
    [composition] = load_docs(EXAMPLE / "context" / "composition.yaml")
    [select, compose] = composition["spec"]["pipeline"]
    assert select["input"]["spec"]["environmentConfigs"] == [
        {"type": "Reference", "ref": {"name": config["metadata"]["name"]}}
    ]
    assert compose["input"]["spec"]["selectors"] == []  # the document arrives once, through the context


def test_xrd_rejects_what_the_model_rejects(xr_index: k8s_schema.CRDIndex) -> None:
    xr = load_docs(EXAMPLE / "xr.yaml")[0]
    xr["spec"]["cloud"] = "Mars"
    assert any("spec.cloud" in e for e in xr_index.validate(xr))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_serving_stacks_written_for_v031_stay_valid_for_the_xrd(xr_index: k8s_schema.CRDIndex, shape: str) -> None:
    """The parent's server-side apply (no spec.cloud; nvidiaDriverRoot; stored versions) still passes."""
    assert xr_index.validate(SHAPES[shape]) == []


def test_xrd_and_model_declare_the_same_spec_fields() -> None:
    xrd_fields = set(XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    model_fields = set(ServingStackSpec.model_fields) - {"crossplane"}
    assert xrd_fields == model_fields


def test_example_function_package_reference_is_valid() -> None:
    [function] = load_docs(EXAMPLE / "functions.yaml")
    assert k8s_schema.covered(function)
    assert k8s_schema.validate(function) == []


def test_example_composition_renders_through_the_served_function(server: str) -> None:
    [composition] = load_docs(EXAMPLE / "composition.yaml")
    [function] = load_docs(EXAMPLE / "functions.yaml")
    xr: dict[str, Any] = load_docs(EXAMPLE / "xr.yaml")[0]
    result = asyncio.run(
        run_composition(
            {function["metadata"]["name"]: grpc_runner(server)},
            composition,
            xr=xr,
            observed=load_docs(EXAMPLE / "observed"),
        )
    )
    docs = render_documents(result)
    names = [d["metadata"]["annotations"]["crossplane.io/composition-resource-name"] for d in docs[1:]]
    assert "gateway" in names and "gpu-operator" in names and "prometheus" in names
    assert docs[0]["status"]["stack"]["id"] == "gke-nvidia"


def test_status_the_function_writes_fits_the_xrd(server: str, xr_index: k8s_schema.CRDIndex) -> None:
    """Crossplane prunes status fields the XRD does not declare: every one we write must be declared."""
    xr = load_docs(EXAMPLE / "xr.yaml")[0]
    result = asyncio.run(
        run_pipeline(
            grpc_runner(server),
            xr=xr,
            observed=load_docs(EXAMPLE / "observed"),
            required=load_docs(EXAMPLE / "environmentconfigs"),
        )
    )
    status = render_documents(result)[0]["status"]
    assert status["stack"]["environmentConfigs"]  # overrides applied: overriddenBy entries present too
    status.pop("conditions")  # Crossplane's own, declared by the XRD machinery
    assert xr_index.validate({**xr, "status": status}) == []
