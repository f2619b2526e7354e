"""What the offline render prints: ``crossplane render``'s documents, in its order and shape, as its YAML."""

from __future__ import annotations

import asyncio

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.offline import ANNOTATION_COMPOSITION_RESOURCE_NAME, RenderResult, run_pipeline
from function.render_output import dump_yaml, render_documents
from tests.support.tiny_function import EXPECTED_YAML, REQUIRED, XR, render, tiny


def test_documents_order_and_shape() -> None:
    result = render(extra_input={"namespace": "team-a"})
    docs = render_documents(result, include_results=True, include_context=True)
    assert [d["kind"] for d in docs] == ["XStack", "ConfigMap", "Pool", "Result", "Context"]
    assert dump_yaml(docs) == EXPECTED_YAML

    plain = render_documents(result)
    assert [d["kind"] for d in plain] == ["XStack", "ConfigMap", "Pool"]
    assert plain == docs[:3]
    # Integers stay integers (the Struct carried them as doubles).
    assert type(plain[2]["spec"]["replicas"]) is int
    assert type(plain[0]["status"]["gpuNodes"]) is int


def test_full_xr_adds_spec_and_metadata() -> None:
    docs = render_documents(render(), include_full_xr=True)
    assert docs[0]["spec"] == {"cloud": "EKS"}
    assert docs[0]["metadata"]["uid"] == "0000-1111"


def test_dump_is_deterministic() -> None:
    a = dump_yaml(render_documents(render(), include_results=True, include_context=True))
    b = dump_yaml(render_documents(render(), include_results=True, include_context=True))
    assert a == b
    assert a.encode() == b.encode()
    assert "3.0" not in a
    shared = {"k": 1.0}
    assert dump_yaml([{"a": shared, "b": shared, "long": "x" * 300}]) == (
        "---\na:\n  k: 1\nb:\n  k: 1\nlong: " + "x" * 300 + "\n"
    )
    assert dump_yaml([]) == ""


def test_observed_name_and_namespace_are_carried_over() -> None:
    observed = {
        "apiVersion": "example.org/v1",
        "kind": "Pool",
        "metadata": {
            "name": "demo-pool-x7k2p",
            "namespace": "elsewhere",
            "annotations": {ANNOTATION_COMPOSITION_RESOURCE_NAME: "pool"},
        },
    }
    cluster_xr = {**XR, "metadata": {"name": "demo"}}
    result = asyncio.run(
        run_pipeline(tiny(), xr=cluster_xr, step="tiny", input={"mode": "require"}, observed=[observed],
                        required=REQUIRED)
    )  # fmt: skip
    docs = render_documents(result)
    pool = docs[2]["metadata"]
    assert pool["name"] == "demo-pool-x7k2p"
    assert pool["namespace"] == "elsewhere"  # cluster-scoped XR: namespace stays as observed
    assert "generateName" not in pool
    assert pool["ownerReferences"][0]["uid"] == ""
    config = docs[1]["metadata"]
    assert config["generateName"] == "demo-"
    assert "namespace" not in config
    assert "name" not in config
    assert docs[0]["metadata"] == {"name": "demo"}


def _result_with(ready: dict[str, int], composite_ready: int = fnv1.READY_UNSPECIFIED) -> RenderResult:
    desired = fnv1.State()
    desired.composite.ready = composite_ready  # type: ignore[assignment]
    for name, r in ready.items():
        desired.resources[name].resource.update({"apiVersion": "v1", "kind": "ConfigMap"})
        desired.resources[name].ready = r
    return RenderResult(xr=XR, desired=desired, results=[], context={})


@pytest.mark.parametrize(
    ("ready", "composite_ready", "want"),
    [
        ({}, fnv1.READY_UNSPECIFIED, {"status": "True", "reason": "Available"}),
        ({"a": fnv1.READY_TRUE}, fnv1.READY_UNSPECIFIED, {"status": "True", "reason": "Available"}),
        (
            {"b": fnv1.READY_FALSE, "a": fnv1.READY_UNSPECIFIED, "c": fnv1.READY_TRUE},
            fnv1.READY_UNSPECIFIED,
            {"status": "False", "reason": "Creating", "message": "Unready resources: a, b"},
        ),
        (
            {"c": 0, "b": 0, "a": 0},
            fnv1.READY_UNSPECIFIED,
            {"status": "False", "reason": "Creating", "message": "Unready resources: a, b, and c"},
        ),
        (
            {"e": 0, "d": 0, "c": 0, "b": 0, "a": 0},
            fnv1.READY_UNSPECIFIED,
            {"status": "False", "reason": "Creating", "message": "Unready resources: a, b, c, and 2 more"},
        ),
        ({"a": fnv1.READY_FALSE}, fnv1.READY_TRUE, {"status": "True", "reason": "Available"}),
        ({"a": fnv1.READY_TRUE}, fnv1.READY_FALSE, {"status": "False", "reason": "Creating"}),
    ],
)
def test_xr_ready_condition(ready: dict[str, int], composite_ready: int, want: dict[str, str]) -> None:
    xr_doc = render_documents(_result_with(ready, composite_ready))[0]
    assert xr_doc["status"]["conditions"] == [
        {"type": "Ready", "lastTransitionTime": "2024-01-01T00:00:00Z", **want},
    ]
