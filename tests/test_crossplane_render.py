"""The offline loop runs the function as ``crossplane render`` does: requests, the requirements loop, pipelines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.offline import (
    ANNOTATION_COMPOSITION_RESOURCE_NAME,
    CAPABILITIES,
    RenderError,
    RunFn,
    Step,
    fetch_resources,
    run_composition,
    run_pipeline,
    run_steps,
)
from function.render_output import render_documents
from function.tree import struct_to_dict
from tests.support.tiny_function import REQUIRED, XR, config_map, names, render, tiny


def counting(run: RunFn) -> tuple[RunFn, list[fnv1.RunFunctionRequest]]:
    seen: list[fnv1.RunFunctionRequest] = []

    async def wrapped(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        seen.append(req)
        return await run(req)

    return wrapped, seen


# --------------------------------------------------------------------------- #
# The requirements loop
# --------------------------------------------------------------------------- #


def test_requirements_converge_in_two_calls() -> None:
    run, seen = counting(tiny())
    result = asyncio.run(
        run_pipeline(run, xr=XR, step="tiny", input={"mode": "require", "namespace": "team-a"}, required=REQUIRED)
    )
    assert result.calls == 2
    assert len(seen) == 2
    assert len(result.requests) == 2

    first, second = seen
    for req in seen:
        assert list(req.meta.capabilities) == list(CAPABILITIES)
        assert len(req.meta.capabilities) == 5
        assert req.meta.tag == ""
        assert struct_to_dict(req.observed.composite.resource) == XR
        assert struct_to_dict(req.input) == {"mode": "require", "namespace": "team-a"}
        assert req.HasField("desired")
        assert len(req.desired.resources) == 0
        assert not req.desired.HasField("composite")
    assert first.HasField("context")
    assert struct_to_dict(first.context) == {}
    assert len(first.required_resources) == 0

    assert sorted(second.required_resources) == ["gpus", "settings"]
    assert names(second.required_resources["settings"]) == [("team-a", "settings")]
    assert names(second.required_resources["gpus"]) == [("", "gpu-a"), ("", "gpu-b")]

    assert sorted(result.desired.resources) == ["config", "pool"]
    assert result.desired.resources["config"].ready == fnv1.READY_TRUE
    assert struct_to_dict(result.desired.resources["pool"].resource)["spec"] == {"replicas": 3, "ratio": 0.5}
    assert result.context == {"example.org/tiny": {"replicas": 3}}
    assert [r.message for r in result.results] == ["found 2 GPU nodes"]
    assert result.result_steps == ["tiny"]
    assert sorted(result.requirements["tiny"].resources) == ["gpus", "settings"]


def test_selector_without_namespace_matches_every_namespace_and_name_match_is_single() -> None:
    result = render()
    sent = result.requests[1].required_resources["settings"]
    # match_name returns at most one object, the first by (namespace, name).
    assert names(sent) == [("other", "settings")]


def test_selector_that_matches_nothing_still_appears_with_no_items() -> None:
    result = render(extra_input={"settingsName": "missing"})
    assert result.calls == 2
    req = result.requests[1]
    assert "settings" in req.required_resources
    assert len(req.required_resources["settings"].items) == 0
    # The tiny function treats "resolved but empty" as done and uses defaults.
    assert struct_to_dict(result.desired.resources["pool"].resource)["spec"]["replicas"] == 1


def test_selector_with_neither_name_nor_labels_matches_all_of_the_kind() -> None:
    result = render("all")
    assert result.calls == 2
    sent = result.requests[1].required_resources["every"]
    assert names(sent) == [("other", "settings"), ("team-a", "settings"), ("team-a", "unrelated")]
    assert struct_to_dict(result.desired.composite.resource) == {
        "status": {"configMaps": ["settings", "settings", "unrelated"]}
    }


def test_fetch_resources_matching_rules() -> None:
    by_name = fnv1.ResourceSelector(api_version="v1", kind="ConfigMap", match_name="settings", namespace="team-a")
    assert names(fetch_resources(by_name, REQUIRED)) == [("team-a", "settings")]

    wrong_ns = fnv1.ResourceSelector(api_version="v1", kind="ConfigMap", match_name="settings", namespace="nowhere")
    assert names(fetch_resources(wrong_ns, REQUIRED)) == []

    wrong_version = fnv1.ResourceSelector(api_version="v2", kind="ConfigMap", match_name="settings")
    assert names(fetch_resources(wrong_version, REQUIRED)) == []

    two_labels = fnv1.ResourceSelector(api_version="v1", kind="Node")
    two_labels.match_labels.labels.update({"accelerator": "gpu", "zone": "a"})
    assert names(fetch_resources(two_labels, REQUIRED)) == [("", "gpu-b")]

    empty_labels = fnv1.ResourceSelector(api_version="v1", kind="Node")
    empty_labels.match_labels.SetInParent()
    assert names(fetch_resources(empty_labels, REQUIRED)) == [("", "cpu-a"), ("", "gpu-a"), ("", "gpu-b")]

    kind_only = fnv1.ResourceSelector(api_version="v2", kind="Node")
    assert names(fetch_resources(kind_only, REQUIRED)) == [("", "gpu-z")]


def test_requirements_that_never_stabilise_fail_after_six_calls() -> None:
    run, seen = counting(tiny())
    with pytest.raises(RenderError) as err:
        asyncio.run(run_pipeline(run, xr=XR, step="tiny", input={"mode": "unstable"}, required=REQUIRED))
    assert len(seen) == 6
    assert str(err.value) == (
        'cannot run pipeline step "tiny": requirements didn\'t stabilize after the maximum number of iterations (5)'
    )
    assert err.value.step == "tiny"
    # The context each response returned was passed on to the next call.
    assert [struct_to_dict(r.context).get("calls") for r in seen] == [None, 1, 2, 3, 4, 5]
    # Required resources were rebuilt from scratch on every call.
    assert [sorted(r.required_resources) for r in seen] == [[]] + [["settings"]] * 5


def test_fatal_result_raises_with_its_message() -> None:
    run, seen = counting(tiny())
    with pytest.raises(RenderError, match=r'^pipeline step "tiny" returned a fatal result: the cluster is on fire$'):
        asyncio.run(run_pipeline(run, xr=XR, step="tiny", input={"mode": "fatal"}))
    assert len(seen) == 1


def test_fatal_result_stops_the_loop_even_with_changing_requirements() -> None:
    calls = 0

    async def run(_req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        nonlocal calls
        calls += 1
        rsp = fnv1.RunFunctionResponse()
        rsp.requirements.resources["x"].api_version = "v1"
        rsp.requirements.resources["x"].kind = "ConfigMap"
        rsp.requirements.resources["x"].match_name = f"n{calls}"
        if calls == 3:
            rsp.results.add(severity=fnv1.SEVERITY_FATAL, message="stop")
        return rsp

    with pytest.raises(RenderError, match="returned a fatal result: stop"):
        asyncio.run(run_pipeline(run, xr=XR, step="s"))
    assert calls == 3


def test_runner_exception_is_wrapped() -> None:
    async def run(_req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        raise ConnectionError("refused")

    with pytest.raises(RenderError, match=r'^cannot run pipeline step "s": refused$'):
        asyncio.run(run_pipeline(run, xr=XR, step="s"))


def test_empty_requirements_message_counts_as_a_change_once() -> None:
    """Go's proto.Equal(nil, &Requirements{}) is false, so an explicitly empty message costs one more call."""
    calls = 0

    async def run(_req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        nonlocal calls
        calls += 1
        rsp = fnv1.RunFunctionResponse()
        rsp.requirements.SetInParent()
        return rsp

    result = asyncio.run(run_pipeline(run, xr=XR, step="s"))
    assert calls == 2
    assert result.calls == 2


def test_no_requirements_means_one_call() -> None:
    async def run(_req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        return fnv1.RunFunctionResponse()

    out = asyncio.run(run_pipeline(run, xr=XR, step="s"))
    assert out.calls == 1
    assert not out.has_context
    assert out.context == {}


def test_deprecated_extra_resources_are_fetched_into_extra_resources() -> None:
    async def run(_req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = fnv1.RunFunctionResponse()
        sel = rsp.requirements.extra_resources["cfg"]
        sel.api_version, sel.kind, sel.match_name = "v1", "ConfigMap", "unrelated"
        return rsp

    result = asyncio.run(run_pipeline(run, xr=XR, step="s", required=REQUIRED))
    assert result.calls == 2
    second = result.requests[1]
    assert names(second.extra_resources["cfg"]) == [("team-a", "unrelated")]
    assert "cfg" not in second.required_resources


def test_bootstrap_requirements_are_sent_first_and_kept() -> None:
    bootstrap = {
        "requiredResources": [
            {"requirementName": "boot", "apiVersion": "v1", "kind": "Node", "matchLabels": {"accelerator": "gpu"}},
        ]
    }
    step = Step("tiny", tiny(), {"mode": "require"}, requirements=bootstrap)
    result = asyncio.run(run_steps([step], xr=XR, required=REQUIRED))
    assert result.calls == 2
    for req in result.requests:
        assert names(req.required_resources["boot"]) == [("", "gpu-a"), ("", "gpu-b")]
    assert sorted(result.requests[1].required_resources) == ["boot", "gpus", "settings"]


def test_initial_context_reaches_the_function() -> None:
    result = render(context={"apiextensions.crossplane.io/environment": {"k": "v"}})
    first = result.requests[0]
    assert struct_to_dict(first.context) == {"apiextensions.crossplane.io/environment": {"k": "v"}}
    assert result.context["apiextensions.crossplane.io/environment"] == {"k": "v"}


def test_observed_resources_are_keyed_by_annotation() -> None:
    observed = {
        "apiVersion": "example.org/v1",
        "kind": "Pool",
        "metadata": {
            "name": "demo-pool-x7k2p",
            "namespace": "team-a",
            "annotations": {ANNOTATION_COMPOSITION_RESOURCE_NAME: "pool"},
            "creationTimestamp": yaml.safe_load("t: 2024-05-01T10:00:00Z")["t"],
        },
    }
    result = render(observed=[observed])
    sent = result.requests[0].observed.resources
    assert list(sent) == ["pool"]
    assert struct_to_dict(sent["pool"].resource)["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"

    with pytest.raises(RenderError, match=r"has no crossplane\.io/composition-resource-name annotation"):
        render(observed=[config_map("x")])


# --------------------------------------------------------------------------- #
# Multi-step compositions
# --------------------------------------------------------------------------- #

COMPOSITION: dict[str, Any] = {
    "apiVersion": "apiextensions.crossplane.io/v1",
    "kind": "Composition",
    "metadata": {"name": "xstacks", "labels": {"tier": "gpu"}},
    "spec": {
        "compositeTypeRef": {"apiVersion": "example.org/v1alpha1", "kind": "XStack"},
        "mode": "Pipeline",
        "pipeline": [
            {
                "step": "compose",
                "functionRef": {"name": "function-tiny"},
                "input": {"apiVersion": "tiny.fn/v1", "kind": "Input", "mode": "require", "namespace": "team-a"},
            },
            {
                "step": "extend",
                "functionRef": {"name": "function-tiny"},
                "input": {"apiVersion": "tiny.fn/v1", "kind": "Input", "mode": "extend"},
            },
        ],
    },
}


def test_composition_feeds_desired_state_and_context_forward() -> None:
    result = asyncio.run(run_composition({"function-tiny": tiny()}, COMPOSITION, xr=XR, required=REQUIRED))
    assert result.calls == 3  # 2 for the requirements loop of "compose", 1 for "extend"
    assert sorted(result.desired.resources) == ["config", "extra", "pool"]
    extra = struct_to_dict(result.desired.resources["extra"].resource)
    assert extra["data"] == {"previous": "config,pool", "seen": "3"}
    assert result.result_steps == ["compose", "extend"]
    docs = render_documents(result, include_results=True)
    assert [(d["kind"], d.get("step")) for d in docs] == [
        ("XStack", None),
        ("ConfigMap", None),
        ("ConfigMap", None),
        ("Pool", None),
        ("Result", "compose"),
        ("Result", "extend"),
    ]
    assert docs[5]["severity"] == "SEVERITY_WARNING"


def test_composition_checks() -> None:
    runners = {"function-tiny": tiny()}
    wrong_kind = {
        **COMPOSITION,
        "spec": {**COMPOSITION["spec"], "compositeTypeRef": {"apiVersion": "x/v1", "kind": "Y"}},
    }
    with pytest.raises(RenderError, match=r"compositeTypeRef.kind \(Y\) does not match XR's kind \(XStack\)"):
        asyncio.run(run_composition(runners, wrong_kind, xr=XR))
    with pytest.raises(RenderError, match='unknown Function "function-tiny"'):
        asyncio.run(run_composition({}, COMPOSITION, xr=XR))
    selecting = {**XR, "spec": {"crossplane": {"compositionSelector": {"matchLabels": {"tier": "cpu"}}}}}
    with pytest.raises(RenderError, match='incorrect value for label "tier": want "cpu", got "gpu"'):
        asyncio.run(run_composition(runners, COMPOSITION, xr=selecting))
