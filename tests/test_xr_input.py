"""A ServingStack the function cannot render is a Fatal naming the object and the field, with nothing composed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.fn import FunctionRunner
from function.offline import RenderError
from tests.support.crossplane import render
from tests.support.xr import make_xr


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
