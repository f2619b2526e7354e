"""No silent no-ops: what the function says when a document it was told about does not apply."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.crossplane import desired
from tests.support.overrides import PAIRS, ec, fatal, messages, overridden, stack_status
from tests.support.xr import make_xr

WARNING, NORMAL = 2, 3


def step(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "servingstack.fn.modelplane.ai/v1beta1", "kind": "Input", "spec": spec}


def severity(result: Any, level: int) -> list[str]:
    return [r.message for r in result.results if r.severity == level]


def test_a_required_name_whose_match_excludes_the_xr_is_fatal_naming_it() -> None:
    bank = ec("bank", {"match": {"clouds": ["EKS"]}, "registry": {"images": [{"from": "*", "to": "m.example/x"}]}})
    message = fatal(make_xr("GKE"), bank, input=step({"names": [{"name": "bank"}]}))
    assert "function Input: EnvironmentConfig bank is Required" in message
    assert "bank's match (clouds: ['EKS']) excludes it" in message and "ServingStack team-ml/prod-eu-1" in message


def test_a_required_name_with_the_document_under_a_misspelt_key_is_fatal_naming_the_key() -> None:
    broken = ec("bank", {})
    broken["data"] = {"servingstack": {"registry": {}}}
    message = fatal(make_xr("GKE"), broken, input=step({"names": [{"name": "bank"}]}))
    assert "EnvironmentConfig bank: data.servingstack: the override document goes under data.servingStack" in message


def test_a_misspelt_key_is_fatal_even_from_an_optional_custom_selector() -> None:
    broken = ec("bank", {}, labels={"team": "platform"})
    broken["data"] = {"ServingStack": {}}
    message = fatal(make_xr("GKE"), broken, input=step({"selectors": [{"matchLabels": {"team": "platform"}}]}))
    assert "EnvironmentConfig bank: data.ServingStack:" in message


def test_a_required_selector_warns_about_configs_without_a_document_and_fails_when_none_applies() -> None:
    selector = step({"selectors": [{"matchLabels": {"team": "platform"}, "policy": "Required"}]})
    other = ec("for-another-function", {}, labels={"team": "platform"})
    other["data"] = {"region": "eu"}
    bank = ec("bank", {"priority": 1}, labels={"team": "platform"})
    ok = overridden(make_xr("GKE"), other, bank, input=selector)
    assert stack_status(ok)["environmentConfigs"] == ["bank"]
    [warning] = severity(ok, WARNING)
    assert warning.endswith(
        "selects EnvironmentConfigs with no data.servingStack, which are ignored: for-another-function"
    )
    excluded = ec("bank", {"match": {"namespaces": ["other-team"]}}, labels={"team": "platform"})
    message = fatal(make_xr("GKE"), other, excluded, input=selector)
    assert "the selector {'team': 'platform'} is Required, but no override document it selects applies" in message
    assert "EnvironmentConfig for-another-function has no data.servingStack" in message
    assert "bank's match (namespaces: ['other-team']) excludes it" in message
    many = [ec(f"other-{i}", {"match": {"clouds": ["EKS"]}}, labels={"team": "platform"}) for i in range(12)]
    message = fatal(make_xr("GKE"), *many, input=selector)
    assert message.count("excludes it") == 5 and "; and 7 more; refusing to render" in message


def test_rendering_with_no_document_says_so_in_a_normal_result() -> None:
    result = overridden(make_xr("AKS"), ec("eks-only", {"match": {"clouds": ["EKS"]}}))
    assert stack_status(result)["environmentConfigs"] == []
    assert severity(result, NORMAL) == [
        "No override document applies to this ServingStack: stack aks-nvidia renders as generated "
        "(EnvironmentConfigs labelled servingstack.modelplane.ai/overrides=true, or as the function Input names; "
        "their match excludes it: eks-only)"
    ]


@pytest.mark.parametrize(("cloud", "accelerator"), PAIRS)
def test_match_selects_by_accelerator_and_namespace(cloud: str, accelerator: str) -> None:
    docs = [
        ec("amd", {"match": {"accelerators": ["AMD"]}}),
        ec("nvidia", {"match": {"accelerators": ["NVIDIA"]}}),
        ec("team-ml", {"match": {"namespaces": ["team-ml"]}}),
        ec("team-other", {"match": {"namespaces": ["team-other"]}}),
    ]
    applied = stack_status(overridden(make_xr(cloud, accelerator), *docs))["environmentConfigs"]
    assert applied == [accelerator.lower(), "team-ml"]


def test_a_fleet_document_naming_the_other_accelerators_operator_does_not_stop_nvidia_stacks() -> None:
    fleet = ec(
        "fleet",
        {
            "components": {
                "gpu-operator": {"values": {"operator": {"logging": {"level": "debug"}}}},
                "amd-gpu-operator": {"values": {"controllerManager": {"manager": {"env": {"x": "y"}}}}},
            }
        },
    )
    for cloud, accelerator in PAIRS:
        result = overridden(make_xr(cloud, accelerator), fleet)
        assert stack_status(result)["environmentConfigs"] == ["fleet"]
        if accelerator == "NVIDIA":
            got = desired(result)["gpu-operator"]["spec"]["forProvider"]["values"]
            assert got["operator"]["logging"] == {"level": "debug"}
            [note] = [m for m in severity(result, NORMAL) if "skipped" in m]
            assert note.startswith(
                f"EnvironmentConfig fleet: data.servingStack.components.amd-gpu-operator: skipped: stack "
                f"{cloud.lower()}-nvidia has no amd-gpu-operator; the document also selects stacks that do "
                "(existing-amd"
            )


def test_a_component_of_the_other_accelerator_is_fatal_when_the_document_is_meant_for_this_one() -> None:
    meant = ec("nv", {"match": {"accelerators": ["NVIDIA"]}, "components": {"amd-gpu-operator": {"state": "Removed"}}})
    message = fatal(make_xr("EKS"), meant)
    assert "EnvironmentConfig nv: data.servingStack.components.amd-gpu-operator: unknown component" in message
    assert "amd-gpu-operator is a component of existing-amd, vultr-amd, which this document's match" in message
    assert "(accelerators: ['NVIDIA']) does not select" in message


def test_a_component_no_stack_has_stays_fatal() -> None:
    message = fatal(make_xr("EKS"), ec("typo", {"components": {"cert-manger": {"replicas": 2}}}))
    assert "EnvironmentConfig typo: data.servingStack.components.cert-manger: unknown component" in message
    assert "is a component of" not in message


def test_a_retired_document_carries_nothing_else() -> None:
    message = fatal(make_xr("EKS"), ec("old", {"retired": True, "priority": 3}))
    assert (
        "EnvironmentConfig old: data.servingStack: a retired document (retired: true) carries nothing else" in message
    )
    assert "remove priority" in message
    # On a ServingStack that never applied it, a tombstone does nothing at all.
    result = overridden(make_xr("EKS"), ec("old", {"retired": True}))
    assert stack_status(result)["environmentConfigs"] == [] and len(messages(result)) == 1
