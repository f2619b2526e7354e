"""The override layer end to end through the function, on the real generated stacks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from function import stack
from function.compose import OVERRIDDEN_BY
from function.overrides import Collected, plan
from function.overrides.collect import DEFAULT_LABEL
from function.overrides.planned import MANAGED
from tests.support.crossplane import desired, render
from tests.support.overrides import ENV_API, ec, fatal, messages, mirror_all, overridden, stack_status
from tests.support.xr import make_xr, observed_as, provider_configs


def test_no_environment_config_renders_exactly_the_generated_stack() -> None:
    xr = make_xr("EKS")
    plain = render(xr)
    unrelated = ec("other", {"components": {"cert-manager": {"replicas": 3}}}, labels={"team": "x"})
    with_unrelated = overridden(xr, unrelated)
    assert with_unrelated.desired.SerializeToString(deterministic=True) == plain.desired.SerializeToString(
        deterministic=True
    )
    # Said in a Normal result, so `kubectl describe` shows that no document is in force.
    [note] = messages(plain)
    assert note.startswith("No override document applies to this ServingStack: stack eks-nvidia renders as generated")


def test_the_function_asks_for_environment_configs_and_renders_once_they_arrive() -> None:
    xr = make_xr("GKE")
    result = overridden(xr, ec("replicas", {"components": {"cert-manager": {"replicas": 2}}}))
    # First call asks, second renders with the same requirements, and the loop stops.
    assert result.calls == 2
    [req] = result.requirements.values()
    [(name, selector)] = req.resources.items()
    assert name == "servingstack-overrides"
    assert selector.api_version == ENV_API and selector.kind == "EnvironmentConfig"
    assert dict(selector.match_labels.labels) == {DEFAULT_LABEL: "true"}
    got = desired(result)
    assert got["cert-manager"]["spec"]["forProvider"]["values"]["replicaCount"] == 2
    assert got["cert-manager"]["metadata"]["annotations"][OVERRIDDEN_BY] == "replicas"


def test_status_lists_the_applied_environment_configs_and_a_normal_result_summarises() -> None:
    xr = make_xr("GKE")
    result = overridden(
        xr,
        ec("b-second", {"priority": 5, "components": {"cert-manager": {"replicas": 2}}}),
        ec("a-first", {"priority": 1, "components": {"prometheus": {"state": "Unmanaged"}}}),
    )
    status = stack_status(result)
    assert status["environmentConfigs"] == ["a-first", "b-second"]
    by_name = {c["name"]: c for c in status["components"]}
    assert by_name["prometheus"]["state"] == "Unmanaged"
    assert by_name["cert-manager"]["overriddenBy"] == ["b-second"]
    [summary] = messages(result)
    assert summary.startswith("EnvironmentConfigs applied in order: a-first, b-second")
    assert "Unmanaged: prometheus" in summary


def test_unmanaged_transition_keeps_the_installed_release_observe_only_and_deletes_nothing() -> None:
    xr = make_xr("Existing")
    before = desired(render(xr))
    installed = [*provider_configs(xr), observed_as("cert-manager", before["cert-manager"])]
    after = desired(
        overridden(xr, ec("byo", {"components": {"cert-manager": {"state": "Unmanaged"}}}), observed=installed)
    )
    # Every resource is still desired: Crossplane deletes what is left out.
    assert set(after) == set(before)
    release = after["cert-manager"]
    assert release["spec"]["managementPolicies"] == ["Observe"]
    # The release it observes is the one installed: same chart, same values.
    assert release["spec"]["forProvider"] == before["cert-manager"]["spec"]["forProvider"]
    assert release["metadata"]["annotations"][OVERRIDDEN_BY] == "byo"


def test_unmanaged_component_never_installed_is_not_rendered() -> None:
    xr = make_xr("Existing")
    got = desired(
        overridden(
            xr,
            ec("byo", {"components": {"cert-manager": {"state": "Unmanaged"}, "prometheus": {"state": "Unmanaged"}}}),
        )
    )
    assert "cert-manager" not in got and "prometheus" not in got
    assert not [k for k in got if k.startswith("usage-") and ("cert-manager" in k or "prometheus" in k)]


def test_removed_is_not_rendered_and_refused_while_a_managed_component_depends_on_it() -> None:
    xr = make_xr("GKE")
    got = desired(overridden(xr, ec("rm", {"components": {"leader-worker-set": {"state": "Removed"}}})))
    assert "leader-worker-set" not in got
    message = fatal(xr, ec("rm", {"components": {"envoy-gateway": {"state": "Removed"}}}))
    assert "EnvironmentConfig rm: data.servingStack.components.envoy-gateway.state" in message
    assert "gateway-class" in message and "gateway-proxy" in message
    # Removing the dependents too is accepted (they leave first).
    chain = {k: {"state": "Removed"} for k in ("envoy-gateway", "gateway-proxy", "gateway-class", "gateway")}
    got = desired(overridden(xr, ec("rm", {"components": chain})))
    assert not set(chain) & set(got)


def test_version_pin_changes_the_chart_version_and_a_redundant_pin_is_a_warning() -> None:
    xr = make_xr("GKE")
    generated = desired(render(xr))["cert-manager"]["spec"]["forProvider"]["chart"]
    result = overridden(xr, ec("hold", {"components": {"cert-manager": {"version": "v1.17.1"}}}))
    chart = desired(result)["cert-manager"]["spec"]["forProvider"]["chart"]
    assert chart == {**generated, "version": "v1.17.1"}
    same = overridden(xr, ec("hold", {"components": {"cert-manager": {"version": generated["version"]}}}))
    warnings = [r.message for r in same.results if r.severity == 2]
    assert len(warnings) == 1 and "redundant" in warnings[0] and "hold" in warnings[0]
    assert desired(same)["cert-manager"]["spec"]["forProvider"]["chart"] == generated


def test_prod_hold_applies_to_prod_while_dev_moves_on() -> None:
    hold = ec(
        "prod-hold",
        {
            "match": {"labels": {"modelplane.ai/environment": "prod"}},
            "components": {"cert-manager": {"version": "v1.17.1"}},
        },
    )
    prod = make_xr("GKE")
    dev = copy.deepcopy(prod)
    dev["metadata"]["labels"] = {"modelplane.ai/environment": "dev"}
    assert desired(overridden(prod, hold))["cert-manager"]["spec"]["forProvider"]["chart"]["version"] == "v1.17.1"
    dev_result = overridden(dev, hold)
    assert desired(dev_result)["cert-manager"]["spec"]["forProvider"]["chart"]["version"] != "v1.17.1"
    assert stack_status(dev_result)["environmentConfigs"] == []


@pytest.mark.parametrize(
    ("match", "applies"),
    [
        ({}, True),
        ({"clouds": ["GKE"]}, True),
        ({"clouds": ["EKS", "AKS"]}, False),
        ({"names": ["prod-eu-1"]}, True),
        ({"names": ["other"]}, False),
        ({"labels": {"modelplane.ai/environment": "prod"}}, True),
        ({"labels": {"modelplane.ai/environment": "dev"}}, False),
        ({"clouds": ["GKE"], "labels": {"modelplane.ai/environment": "prod"}, "names": ["other"]}, False),
    ],
)
def test_match_rules(match: dict[str, Any], applies: bool) -> None:
    result = overridden(make_xr("GKE"), ec("m", {"match": match, "components": {"cert-manager": {"replicas": 3}}}))
    values = desired(result)["cert-manager"]["spec"]["forProvider"]["values"]
    assert (values.get("replicaCount") == 3) is applies


def test_documents_apply_in_priority_then_name_order_later_wins() -> None:
    xr = make_xr("GKE")
    docs = [
        ec("zz", {"priority": 1, "components": {"cert-manager": {"replicas": 1, "values": {"a": "zz", "b": "zz"}}}}),
        ec("aa", {"priority": 1, "components": {"cert-manager": {"replicas": 2, "values": {"a": "aa"}}}}),
        ec("late", {"priority": 9, "components": {"cert-manager": {"values": {"c": "late"}}}}),
    ]
    result = overridden(xr, *docs)
    values = desired(result)["cert-manager"]["spec"]["forProvider"]["values"]
    # aa (1, "aa") < zz (1, "zz") < late (9): zz wins over aa, late adds on top.
    assert (values["replicaCount"], values["a"], values["b"], values["c"]) == (1, "zz", "zz", "late")
    assert stack_status(result)["environmentConfigs"] == ["aa", "zz", "late"]
    annotation = desired(result)["cert-manager"]["metadata"]["annotations"][OVERRIDDEN_BY]
    assert annotation == "aa,zz,late"


def test_values_merge_the_helm_way() -> None:
    xr = make_xr("GKE")
    base = desired(render(xr))["node-feature-discovery"]["spec"]["forProvider"]["values"]
    assert base["worker"]["tolerations"]  # generated: the GPU taint toleration
    patch = {
        "worker": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"a": "b"}},
        "master": {"replicaCount": None},
    }
    got = desired(overridden(xr, ec("v", {"components": {"node-feature-discovery": {"values": patch}}})))
    values = got["node-feature-discovery"]["spec"]["forProvider"]["values"]
    assert values["worker"]["tolerations"] == [{"operator": "Exists"}]  # lists replace
    assert values["worker"]["nodeSelector"] == {"a": "b"}  # maps merge
    assert values["master"]["replicaCount"] is None  # null kept: Helm deletes the chart default
    assert {k: v for k, v in base.items() if k not in ("worker", "master")} == {
        k: v for k, v in values.items() if k not in ("worker", "master")
    }


def test_manifest_patches_harden_raw_objects_and_name_their_source() -> None:
    xr = make_xr("GKE")
    hardening = {
        "spec": {
            "provider": {
                "kubernetes": {
                    "envoyDeployment": {"replicas": 2, "pod": {"securityContext": {"runAsNonRoot": True}}},
                    "envoyPDB": {"minAvailable": 1},
                    "envoyService": {"externalTrafficPolicy": None},
                }
            }
        }
    }
    got = desired(overridden(xr, ec("harden", {"components": {"gateway-proxy": {"manifest": hardening}}})))
    proxy = got["gateway-proxy"]
    kubernetes = proxy["spec"]["forProvider"]["manifest"]["spec"]["provider"]["kubernetes"]
    assert kubernetes["envoyDeployment"] == {
        "container": {"image": "docker.io/envoyproxy/envoy:distroless-v1.38.1"},  # the generated stack's
        "replicas": 2,
        "pod": {"securityContext": {"runAsNonRoot": True}},
    }
    assert kubernetes["envoyPDB"] == {"minAvailable": 1}
    # null deletes the key outright: a manifest is applied as written, no nulls travel.
    assert kubernetes["envoyService"] == {}
    assert proxy["spec"]["forProvider"]["manifest"]["spec"]["provider"]["type"] == "Kubernetes"
    assert proxy["metadata"]["annotations"][OVERRIDDEN_BY] == "harden"


def test_shortcuts_write_at_the_paths_the_stack_declares() -> None:
    xr = make_xr("GKE")
    doc = {
        "components": {
            "envoy-gateway": {
                "replicas": 2,
                "resources": {"requests": {"cpu": "200m"}},
                "image": "mirror.example.com/envoyproxy/gateway:v1.8.1",
                "podDisruptionBudget": {"minAvailable": 1},
            },
            "cert-manager": {"podDisruptionBudget": {"minAvailable": 1}},
        }
    }
    got = desired(overridden(xr, ec("s", doc)))
    values = got["envoy-gateway"]["spec"]["forProvider"]["values"]
    assert values["deployment"]["replicas"] == 2
    assert values["deployment"]["envoyGateway"]["resources"]["requests"]["cpu"] == "200m"
    assert values["global"]["images"]["envoyGateway"]["image"] == "mirror.example.com/envoyproxy/gateway:v1.8.1"
    # No null for maxUnavailable: neither chart's values hold the key, and Helm would keep the null
    # (tests/test_helm.py renders every budget with real Helm).
    assert values["podDisruptionBudget"] == {"minAvailable": 1}
    cm = got["cert-manager"]["spec"]["forProvider"]["values"]
    for prefix in (cm, cm["webhook"], cm["cainjector"]):
        assert prefix["podDisruptionBudget"] == {"enabled": True, "minAvailable": 1}


def test_resources_shortcut_merges_with_generated_resources() -> None:
    xr = make_xr("GKE")
    base = desired(render(xr))["cert-manager"]["spec"]["forProvider"]["values"]["resources"]
    got = desired(
        overridden(xr, ec("r", {"components": {"cert-manager": {"resources": {"limits": {"memory": "1Gi"}}}}}))
    )
    values = got["cert-manager"]["spec"]["forProvider"]["values"]
    assert values["resources"] == {**base, "limits": {**base.get("limits", {}), "memory": "1Gi"}}
    assert values["startupapicheck"]["resources"]["limits"]["memory"] == "1Gi"


@pytest.mark.parametrize(
    ("component", "override", "expected"),
    [
        ("no-such-thing", {"replicas": 1}, "unknown component; the components of stack gke-nvidia: "),
        ("ai-gateway-crds", {"replicas": 1}, "declares no value path for replicas on ai-gateway-crds"),
        (
            "ai-gateway",
            {"podDisruptionBudget": {"minAvailable": 1}},
            "shortcuts ai-gateway takes: replicas, resources, image",
        ),
        (
            "gateway",
            {"values": {"a": 1}},
            "raw manifest (Object), not a Helm release; the fields it takes are state and manifest",
        ),
        ("envoy-gateway", {"manifest": {"a": 1}}, "is a Helm release (chart gateway-helm), not a raw manifest"),
        ("cert-manager", {"replicas": "two"}, "components.cert-manager.replicas: Input should be a valid integer"),
        ("cert-manager", {"state": "Gone"}, "Input should be 'Managed', 'Unmanaged' or 'Removed'"),
        ("cert-manager", {"replica": 2}, "components.cert-manager.replica: unknown field"),
        ("cert-manager", {"image": "Not A Ref"}, "is not an image reference"),
        ("cert-manager", {"image": {"nope": "a.io/b:c"}}, "has no image nope; its images: controller, webhook"),
    ],
)
def test_bad_documents_are_fatal_naming_the_config_the_field_and_the_choices(
    component: str, override: dict[str, Any], expected: str
) -> None:
    message = fatal(make_xr("GKE"), ec("bad-doc", {"components": {component: override}}))
    assert "EnvironmentConfig bad-doc: data.servingStack.components." in message
    assert expected in message


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"priority": "high"}, "data.servingStack.priority: Input should be a valid integer"),
        ({"match": {"clouds": ["Mars"]}}, "data.servingStack.match.clouds[0]: Input should be 'EKS', 'GKE'"),
        ({"registry": {"images": [{"from": "quay", "to": "m.example.com"}]}}, "does not start with a registry host"),
        ({"registry": {"charts": [{"from": "charts.jetstack.io", "to": "oci://m"}]}}, "https:// or oci:// URL"),
        ({"registry": {"strict": "yes"}}, "data.servingStack.registry.strict: Input should be a valid boolean"),
        ({"drivers": [{"name": "H100", "nodeSelector": {"a": "b"}, "version": "1"}]}, "drivers[0].name"),
        ({"extra": 1}, "data.servingStack.extra: unknown field"),
    ],
)
def test_malformed_documents_are_fatal(doc: dict[str, Any], expected: str) -> None:
    message = fatal(make_xr("GKE"), ec("bad-doc", doc))
    assert "EnvironmentConfig bad-doc" in message and expected in message


def test_drivers_render_per_pool_resources_on_a_gpu_operator_stack() -> None:
    xr = make_xr("Existing")
    doc = {
        "drivers": [
            {"name": "h100", "nodeSelector": {"modelplane.ai/pool": "h100"}, "version": "570.195.03"},
            {"name": "b300", "nodeSelector": {"modelplane.ai/pool": "b300"}, "version": "580.105.08"},
        ]
    }
    got = desired(overridden(xr, ec("pools", doc)))
    driver = got["driver-b300"]
    assert driver["kind"] == "Object"
    manifest = driver["spec"]["forProvider"]["manifest"]
    assert manifest["kind"] == "NVIDIADriver" and manifest["metadata"]["name"] == "b300"
    assert manifest["spec"]["version"] == "580.105.08"
    assert manifest["spec"]["nodeSelector"] == {"modelplane.ai/pool": "b300"}
    # The operator reconciles NVIDIADrivers instead of its own single driver...
    operator = got["gpu-operator"]
    assert operator["spec"]["forProvider"]["values"]["driver"]["nvidiaDriverCRD"] == {
        "enabled": True,
        "deployDefaultCR": False,
    }
    assert operator["metadata"]["annotations"][OVERRIDDEN_BY] == "pools"
    # ... and outlives them: it removes their finalizers.
    assert "usage-gpu-operator-by-driver-b300" in got and "usage-gpu-operator-by-driver-h100" in got


def test_drivers_pull_from_the_mirror_with_its_pull_secret() -> None:
    doc = {
        "registry": {"images": [{"from": "nvcr.io", "to": "mirror.example.com/nvcr"}], "imagePullSecrets": ["pull"]},
        "drivers": [{"name": "h100", "nodeSelector": {"modelplane.ai/pool": "h100"}, "version": "570.195.03"}],
    }
    spec = desired(overridden(make_xr("Existing"), ec("pools", doc)))["driver-h100"]["spec"]["forProvider"]
    assert spec["manifest"]["spec"]["repository"] == "mirror.example.com/nvcr/nvidia"
    assert spec["manifest"]["spec"]["imagePullSecrets"] == ["pull"]


def test_drivers_on_an_amd_stack_render_device_configs() -> None:
    got = desired(
        overridden(
            make_xr("Existing", "AMD"),
            ec(
                "pools",
                {
                    "drivers": [
                        {
                            "name": "mi300",
                            "nodeSelector": {"pool": "mi300"},
                            "version": "6.4",
                            "image": "registry.example.com/amd/amdgpu",
                        }
                    ]
                },
            ),
        )
    )
    manifest = got["driver-mi300"]["spec"]["forProvider"]["manifest"]
    assert manifest["kind"] == "DeviceConfig"
    assert manifest["spec"]["driver"]["version"] == "6.4" and manifest["spec"]["selector"] == {"pool": "mi300"}


@pytest.mark.parametrize("cloud", ["EKS", "GKE", "AKS", "Nebius", "Vultr"])
def test_drivers_on_a_node_image_stack_are_an_error_saying_so(cloud: str) -> None:
    pools = {"drivers": [{"name": "h100", "nodeSelector": {"a": "b"}, "version": "1"}]}
    message = fatal(make_xr(cloud), ec("pools", {"match": {"clouds": [cloud]}, **pools}))
    assert "EnvironmentConfig pools: data.servingStack.drivers[h100]" in message
    assert "the node image supplies the GPU driver" in message and f"(clouds: ['{cloud}']) selects none" in message
    # A fleet-wide document also selects Existing stacks: skipped here, with a note.
    result = overridden(make_xr(cloud), ec("pools", pools))
    assert not [k for k in desired(result) if k.startswith("driver-")]
    assert any("EnvironmentConfig pools: data.servingStack.drivers: skipped (h100)" in m for m in messages(result))


def test_removing_the_operator_while_drivers_need_it_is_refused() -> None:
    doc = {
        "components": {"gpu-operator": {"state": "Removed"}, "dra-driver": {"state": "Removed"}},
        "drivers": [{"name": "h100", "nodeSelector": {"a": "b"}, "version": "1"}],
    }
    message = fatal(make_xr("Existing"), ec("pools", doc))
    assert "driver-h100" in message and "Removed is refused" in message


def test_context_document_from_function_environment_configs_is_applied() -> None:
    xr = make_xr("GKE")
    context = {
        "apiextensions.crossplane.io/environment": {
            "apiVersion": "internal.crossplane.io/v1alpha1",
            "kind": "Environment",
            "servingStack": {"components": {"cert-manager": {"replicas": 4}}},
        }
    }
    result = overridden(xr, context=context)
    got = desired(result)
    assert got["cert-manager"]["spec"]["forProvider"]["values"]["replicaCount"] == 4
    assert stack_status(result)["environmentConfigs"] == ["context:apiextensions.crossplane.io/environment"]
    bad: dict[str, Any] = {"apiextensions.crossplane.io/environment": {"servingStack": {"components": {"x": {}}}}}
    assert "context apiextensions.crossplane.io/environment: servingStack.components.x" in fatal(xr, context=bad)


INPUT = {"apiVersion": "servingstack.fn.modelplane.ai/v1beta1", "kind": "Input"}


def test_input_names_a_required_environment_config_and_missing_is_fatal() -> None:
    xr = make_xr("GKE")
    spec = {"selectors": [], "names": [{"name": "regulated-bank"}]}
    message = fatal(xr, input={**INPUT, "spec": spec})
    assert "EnvironmentConfig regulated-bank not found" in message and "Required" in message
    # Present (without the default label): applied.
    mirror = ec("regulated-bank", mirror_all(strict=False), labels={})
    got = desired(overridden(xr, mirror, input={**INPUT, "spec": spec}))
    assert got["cert-manager"]["spec"]["forProvider"]["chart"]["repository"] == "oci://mirror.example.com/charts"
    # Optional and missing: the generated stack.
    optional = {"selectors": [], "names": [{"name": "regulated-bank", "policy": "Optional"}]}
    assert desired(overridden(xr, input={**INPUT, "spec": optional})) == desired(render(xr))


def test_input_selectors_replace_the_default_label() -> None:
    xr = make_xr("GKE")
    team = ec("team", {"components": {"cert-manager": {"replicas": 5}}}, labels={"team": "ml"})
    default = ec("default", {"components": {"cert-manager": {"replicas": 7}}})
    spec = {"selectors": [{"matchLabels": {"team": "ml"}}]}
    result = overridden(xr, team, default, input={**INPUT, "spec": spec})
    assert desired(result)["cert-manager"]["spec"]["forProvider"]["values"]["replicaCount"] == 5
    [req] = result.requirements.values()
    assert list(req.resources) == ["servingstack-overrides-selector-0"]
    required = {"selectors": [{"matchLabels": {"team": "none"}, "policy": "Required"}]}
    assert "no EnvironmentConfig has the labels" in fatal(xr, team, input={**INPUT, "spec": required})


def test_a_bad_input_is_fatal() -> None:
    message = fatal(make_xr("GKE"), input={**INPUT, "spec": {"names": [{"name": "x", "policy": "Maybe"}]}})
    assert "function Input servingstack.fn.modelplane.ai/v1beta1: spec.names[0].policy" in message


def test_a_labelled_config_without_a_document_is_fatal() -> None:
    broken = ec("typo", {})
    broken["data"] = {"other": {}}
    assert "EnvironmentConfig typo: data.servingStack: missing" in fatal(make_xr("GKE"), broken)


def test_with_no_document_planning_returns_the_generated_stack_itself() -> None:
    """The default plan comes from planning, not from the renderer: the generated components, unchanged."""
    for generated in stack.every():
        planned = plan(generated, Collected())
        assert [p.component for p in planned.planned] == list(generated.components)
        assert all(p.component is c for p, c in zip(planned.planned, generated.components, strict=True))
        assert {p.state for p in planned.planned} == {MANAGED} and not any(p.changed_by for p in planned.planned)
        assert plan(generated, Collected()) is planned  # once per stack
        assert planned.images, "the images the stack pulls are known without a document too"
