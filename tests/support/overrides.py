"""What the override tests share: EnvironmentConfigs carrying override documents, renders through them,
and the bank's strict mirror setting."""

from __future__ import annotations

from typing import Any

import pytest
from crossplane.function import resource

from function import stack
from function.offline import RenderError, RenderResult
from function.overrides.collect import DEFAULT_LABEL
from tests.support.crossplane import render
from tests.support.repo import REPO

INPUT_CRD = REPO / "package" / "input" / "servingstack.fn.modelplane.ai_inputs.yaml"
BANK_HOST = "mirror.bank.internal"
# The Standard stacks' (cloud, accelerator) pairs; STACKS: every stack's (cloud, accelerator, kind).
STACKS = stack.available()
PAIRS = tuple((cloud, accelerator) for cloud, accelerator, kind in STACKS if kind == "Standard")
ENV_API = "apiextensions.crossplane.io/v1beta1"


def ec(name: str, doc: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An EnvironmentConfig carrying an override document (default label unless told)."""
    return {
        "apiVersion": ENV_API,
        "kind": "EnvironmentConfig",
        "metadata": {"name": name, "labels": {DEFAULT_LABEL: "true"} if labels is None else labels},
        "data": {"servingStack": doc},
    }


def overridden(
    xr: dict[str, Any], *configs: dict[str, Any], observed: list[dict[str, Any]] | None = None, **kw: Any
) -> RenderResult:
    return render(xr, observed=observed, required=list(configs), **kw)


def mirror_all(strict: bool = True) -> dict[str, Any]:
    return {
        "registry": {
            "charts": [{"from": "*", "to": "oci://mirror.example.com/charts"}],
            "images": [{"from": "*", "to": "mirror.example.com/hub"}],
            "strict": strict,
        }
    }


def stack_status(result: RenderResult) -> dict[str, Any]:
    status: dict[str, Any] = resource.struct_to_dict(result.desired.composite.resource)["status"]["stack"]
    return status


def messages(result: RenderResult) -> list[str]:
    return [r.message for r in result.results]


def fatal(xr: dict[str, Any], *configs: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(RenderError) as err:
        overridden(xr, *configs, **kw)
    return str(err.value)


def bank(**registry: Any) -> dict[str, Any]:
    """The bank's mirror document: every chart and image into mirror.bank.internal, strict."""
    return {
        "priority": 10,
        "registry": {
            "charts": [{"from": "*", "to": f"oci://{BANK_HOST}/charts"}],
            "images": [{"from": "nvcr.io", "to": f"{BANK_HOST}/nvcr"}, {"from": "*", "to": f"{BANK_HOST}/hub"}],
            "imagePullSecrets": ["bank-pull"],
            "strict": True,
            **registry,
        },
    }


def policy_input(strict: bool = True, allowed: tuple[str, ...] = (BANK_HOST,)) -> dict[str, Any]:
    return {
        "apiVersion": "servingstack.fn.modelplane.ai/v1beta1",
        "kind": "Input",
        "spec": {"registry": {"strict": strict, "allowedRegistries": list(allowed)}},
    }
