"""Responses assembled from parts encoded once are byte for byte what protobuf's deterministic serializer writes.

Two kinds of proof:

* properties (hypothesis) of :mod:`function.wire` against protobuf itself:
  a template filled per request against the same Struct built and edited
  with protobuf's API, map order against upb's, a whole response against
  the message holding the same resources;
* every stack with every override scenario, in every observed state the
  renderer tells apart (first reconcile, ProviderConfigs observed, everything
  observed, some ready, all ready with the last status, a consumer on its way
  out, another step's resources in the desired state): the response's bytes
  against the same response built as a message (the path transforms take)
  and against their own deterministic re-serialization.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.internal import decoder, encoder
from hypothesis import given
from hypothesis import strategies as st

from function import compose, requestlog, stack, wire
from function.cache import caches
from function.fn import FunctionRunner, run
from function.model import ServingStack
from function.offline import RenderError, run_pipeline
from function.overrides.planned import MANAGED, REMOVED, UNMANAGED, Planned
from function.stack import ChartRef, Component
from function.tree import to_struct
from tests.support.repo import EXAMPLE, load_docs
from tests.support.status import assert_converted_as_the_whole_status, recorded
from tests.support.xr import make_xr, provider_configs

# Keys that prefix each other, and beyond ASCII (upb orders map entries by their UTF-8 bytes).
KEYS = st.text(max_size=6) | st.sampled_from(["name", "namespace", "names", "nam", "", "é", "ée", "e", "日本", "😀"])
# Numbers are doubles: ints past 2**53 round, -0.0 keeps its sign; maps and lists may be empty.
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.integers(-(2**80), 2**80),
              st.floats(allow_nan=False, allow_infinity=False), st.just(-0.0), st.text(max_size=10),
              st.just({}), st.just([])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=30,
)  # fmt: skip
TREES = st.dictionaries(KEYS, JSON, max_size=6)
PATHS = st.lists(st.lists(KEYS, min_size=1, max_size=4).map(tuple), max_size=4)


def _holes(paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Hole paths of which none is a prefix of another (a hole is a leaf), each with its own fill."""
    kept: list[tuple[str, ...]] = []
    for path in paths:
        if not any(path[: len(k)] == k or k[: len(path)] == path for k in kept):
            kept.append(path)
    return {path: f"fill-{i}" for i, path in enumerate(kept)}


def _edited(tree: dict[str, Any], holes: dict[tuple[str, ...], str], values: dict[str, Any]) -> struct_pb2.Struct:
    """``tree`` as a Struct with each hole set through protobuf's own API, as rendering into messages did."""
    struct = to_struct(tree)
    for path, fill in holes.items():
        node = struct
        for part in path[:-1]:
            node = node.get_or_create_struct(part)
        node[path[-1]] = values[fill]
    return struct


@given(TREES, PATHS, st.lists(JSON, min_size=4, max_size=4))
def test_a_filled_template_is_the_struct_edited_with_protobuf(
    tree: dict[str, Any], paths: list[tuple[str, ...]], values: list[Any]
) -> None:
    holes = _holes(paths)
    plain = {f"fill-{i}": v for i, v in enumerate(values)}
    template = wire.Template(tree, holes)
    fills = {name: wire.value(v) for name, v in plain.items()}
    assert template.encode(fills) == _edited(tree, holes, plain).SerializeToString(deterministic=True)


@given(TREES, PATHS, st.lists(JSON, min_size=4, max_size=4), st.sets(st.integers(0, 3)))
def test_holes_filled_once_and_the_rest_per_request_are_the_struct_edited_with_protobuf(
    tree: dict[str, Any], paths: list[tuple[str, ...]], values: list[Any], once: set[int]
) -> None:
    holes = _holes(paths)
    plain = {f"fill-{i}": v for i, v in enumerate(values)}
    fills = {name: wire.value(v) for name, v in plain.items()}
    own = {name: fills[name] for name in holes.values() if int(name.removeprefix("fill-")) in once}
    template = wire.Template(tree, holes).filled(own)
    per_request = {name: fill for name, fill in fills.items() if name not in own}
    expected = _edited(tree, holes, plain)
    assert template.encode(per_request) == expected.SerializeToString(deterministic=True)
    encoded = wire.Resources()
    encoded.add("k", template, per_request, ready=True)
    message = fnv1.RunFunctionResponse()
    message.desired.resources["k"].resource.CopyFrom(expected)
    message.desired.resources["k"].ready = fnv1.READY_TRUE
    assert wire.serialize(fnv1.RunFunctionResponse(), encoded) == message.SerializeToString(deterministic=True)


@given(st.lists(KEYS, max_size=12, unique=True))
def test_map_entries_go_in_upb_order(keys: list[str]) -> None:
    struct = struct_pb2.Struct()
    for key in keys:
        struct[key] = 1
    # Read from the bytes: a parsed map does not keep the order it was read in.
    assert _keys_in_order(struct.SerializeToString(deterministic=True)) == sorted(keys, key=wire.sort_key)


def _keys_in_order(data: bytes) -> list[str]:
    keys, pos = [], 0
    while pos < len(data):
        assert data[pos] == 0x0A
        length, pos = decoder._DecodeVarint(data, pos + 1)
        entry = data[pos : pos + length]
        key_length, start = decoder._DecodeVarint(entry, 1)
        keys.append(entry[start : start + key_length].decode())
        pos += length
    return keys


RESOURCES = st.dictionaries(KEYS.filter(bool), st.tuples(TREES, st.booleans()), max_size=6)


@given(RESOURCES, TREES, st.text(max_size=8), st.booleans())
def test_a_response_with_encoded_resources_is_the_message_serialized(
    resources: dict[str, tuple[dict[str, Any], bool]], composite: dict[str, Any], tag: str, with_results: bool
) -> None:
    rsp = fnv1.RunFunctionResponse()
    if tag:
        rsp.meta.tag = tag
    if composite:
        rsp.desired.composite.resource.CopyFrom(to_struct(composite))
    if with_results:
        rsp.results.add(severity=fnv1.SEVERITY_NORMAL, message="m")
        rsp.context.CopyFrom(to_struct({"k": "v"}))
    encoded = wire.Resources()
    expected = fnv1.RunFunctionResponse()
    expected.CopyFrom(rsp)
    for key, (body, ready) in resources.items():
        encoded.add(key, wire.Template(body), {}, ready=ready)
        expected.desired.resources[key].resource.CopyFrom(to_struct(body))
        if ready:
            expected.desired.resources[key].ready = fnv1.READY_TRUE
    assert wire.serialize(rsp, encoded) == expected.SerializeToString(deterministic=True)
    assert encoded.sizes() == {key: r.ByteSize() for key, r in expected.desired.resources.items()}


@given(st.integers(0, 2**40) | st.integers(0, 1 << 15))
def test_varints_are_protobufs(n: int) -> None:
    assert wire.varint(n) == encoder._VarintBytes(n)


# --------------------------------------------------------------------------- #
# Every stack, override scenario and observed state
# --------------------------------------------------------------------------- #

ENV_API = "apiextensions.crossplane.io/v1beta1"
OVERRIDE_LABEL = {"servingstack.modelplane.ai/overrides": "true"}
SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    **{p.stem: load_docs(p) for p in sorted((EXAMPLE / "environmentconfigs").glob("*.yaml"))},
    "unmanaged-and-removed": [
        {
            "apiVersion": ENV_API,
            "kind": "EnvironmentConfig",
            "metadata": {"name": "opt-outs", "labels": OVERRIDE_LABEL},
            "data": {
                "servingStack": {
                    "components": {
                        "cert-manager": {"state": "Unmanaged"},
                        "leader-worker-set": {"state": "Removed"},
                        # Removed with what depends on it: it stays while they are observed.
                        **{
                            key: {"state": "Removed"}
                            for key in (
                                "prometheus",
                                "gpu-operator",
                                "gpu-operator-configmap-dcgm-exporter",
                                "dra-driver",
                                "dra-driver-critical-pods-quota",
                            )
                        },
                    }
                }
            },
        }
    ],
}
# The example documents match clusters by name and labels; these names match the per-pool driver documents.
NAMES = {"NVIDIA": "lab-gpu-1", "AMD": "lab-mi300-1"}


def _final_request(
    cloud: str, accelerator: str, docs: list[dict[str, Any]], kind: str = "Standard"
) -> fnv1.RunFunctionRequest | None:
    xr = make_xr(cloud, accelerator, stack=kind)
    xr["metadata"]["name"] = NAMES[accelerator]
    try:
        result = asyncio.run(
            run_pipeline(FunctionRunner().RunFunction, xr=xr, observed=provider_configs(xr), required=docs)
        )
    except RenderError:
        return None  # a scenario refused on this stack by design (e.g. pool drivers where the image has them)
    return result.requests[-1]


def _ready(res: fnv1.Resource) -> None:
    res.resource.get_or_create_struct("status")["conditions"] = [{"type": "Ready", "status": "True"}]


def _states(req: fnv1.RunFunctionRequest) -> Iterator[tuple[str, fnv1.RunFunctionRequest]]:
    """The request in each observed state the renderer tells apart."""
    rendered = fnv1.RunFunctionResponse.FromString(FunctionRunner().respond(req))

    def variant() -> fnv1.RunFunctionRequest:
        out = fnv1.RunFunctionRequest()
        out.CopyFrom(req)
        return out

    first = variant()
    first.observed.ClearField("resources")
    yield "first reconcile", first
    yield "provider configs observed", req
    everything = variant()
    for key, res in rendered.desired.resources.items():
        everything.observed.resources[key].resource.CopyFrom(res.resource)
    yield "everything observed", everything
    some = variant()
    some.CopyFrom(everything)
    for i, key in enumerate(sorted(some.observed.resources)):
        if i % 2:
            _ready(some.observed.resources[key])
    yield "some ready", some
    steady = variant()
    steady.CopyFrom(everything)
    for res in steady.observed.resources.values():
        _ready(res)
    status = steady.observed.composite.resource.get_or_create_struct("status")
    status.CopyFrom(rendered.desired.composite.resource["status"])
    yield "all ready, last status", steady
    leaving = variant()
    leaving.CopyFrom(steady)
    leaving.observed.resources["retired"].resource.update(
        {
            "apiVersion": "helm.m.crossplane.io/v1beta1",
            "kind": "Release",
            "metadata": {"labels": {"modelplane.ai/usage-consumer": "retired"}},
        }
    )
    yield "a consumer on its way out", leaving
    # What the cluster ran before the documents: Removed components are still observed and leave in order.
    plain = variant()
    for resources in plain.required_resources.values():
        resources.ClearField("items")
    before = fnv1.RunFunctionResponse.FromString(FunctionRunner().respond(plain))
    assert before.desired.resources, "the generated stack renders"
    removing = variant()
    for key, res in before.desired.resources.items():
        removing.observed.resources[key].resource.CopyFrom(res.resource)
        _ready(removing.observed.resources[key])
    yield "what the stack composed before the documents observed", removing
    pipeline = variant()
    pipeline.CopyFrom(steady)
    earlier = pipeline.desired.resources
    earlier["from-an-earlier-step"].resource.update({"apiVersion": "v1", "kind": "ConfigMap"})
    earlier["cert-manager"].resource.update({"apiVersion": "v1", "kind": "Secret"})
    earlier["cert-manager"].ready = fnv1.READY_TRUE
    earlier["cert-manager"].connection_details["k"] = b"v"
    yield "an earlier step's resources", pipeline
    composite = variant()
    composite.CopyFrom(steady)
    composite.desired.composite.resource.update({"status": {"fromAnEarlierStep": True, "stack": "replaced"}})
    yield "an earlier step's composite", composite


def _through_messages(req: fnv1.RunFunctionRequest) -> bytes:
    """The response built as a message, every resource in it, serialized by protobuf (the path transforms take)."""
    rsp, composed, _ = run(req)
    composed.move_into(rsp.desired)
    data: bytes = rsp.SerializeToString(deterministic=True)
    return data


CASES = [
    (cloud, accelerator, kind, scenario)
    for cloud, accelerator, kind in stack.available()
    for scenario in SCENARIOS
]  # fmt: skip


@pytest.mark.parametrize(("cloud", "accelerator", "kind", "scenario"), CASES)
def test_every_stack_scenario_and_observed_state_is_byte_identical(
    cloud: str, accelerator: str, kind: str, scenario: str
) -> None:
    req = _final_request(cloud, accelerator, SCENARIOS[scenario], kind)
    if req is None:
        pytest.skip(f"{scenario} is refused on {cloud}/{accelerator}")
    for state, variant in _states(req):
        rsp, composed, _ = run(variant)
        data = wire.serialize(rsp, composed)
        assert data == _through_messages(variant), state
        assert fnv1.RunFunctionResponse.FromString(data).SerializeToString(deterministic=True) == data, state
        # What the runner sends, computed and then kept (the tag changes per call), is the same.
        runner = FunctionRunner()
        assert runner.respond(variant) == data, state
        again = fnv1.RunFunctionRequest()
        again.CopyFrom(variant)
        again.meta.tag = "another call"
        expected = fnv1.RunFunctionResponse.FromString(data)
        expected.meta.tag = "another call"
        assert runner.respond(again) == expected.SerializeToString(deterministic=True), state


def _with_mirror_targets(docs: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(docs)
    for doc in out:
        registry = doc["data"]["servingStack"].get("registry", {})
        for rule in (*registry.get("images", []), *registry.get("charts", [])):
            rule["to"] = f"{rule['to']}/{suffix}"
    return out


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stack.available())
def test_a_rebuilt_body_encodes_as_its_whole_body_does(
    cloud: str, accelerator: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every scenario; then every component rebuilt for one registry setting,
    # then for another: their values share what was not written with the
    # generated values, their skeletons (kept by content) with each other and
    # with the stack's own bodies. Each template encodes as the whole body,
    # encoded afresh, does.
    built: list[tuple[Planned, wire.Template]] = []
    real = compose.body_template

    def recording(planned: Planned) -> wire.Template:
        template = real(planned)
        built.append((planned, template))
        return template

    monkeypatch.setattr(compose, "body_template", recording)
    for cache in caches():
        cache.clear()  # plans cached by an earlier test would render from their templates
    for docs in SCENARIOS.values():
        _final_request(cloud, accelerator, docs, kind)
    for target in (f"{cloud}-a", f"{cloud}-b/longer"):
        if _final_request(cloud, accelerator, _with_mirror_targets(SCENARIOS["regulated-bank"], target), kind) is None:
            pytest.skip(f"regulated-bank is refused on {cloud}/{accelerator}")
    assert sum(1 for planned, _ in built if planned.changed_by) > 1
    assert any(planned.state == UNMANAGED for planned, _ in built)
    for planned, template in built:
        names = {compose.PC_NAME_FILL, *planned.component.xr_fields.values()}
        fills = {name: wire.string_value(f"filled {name}") for name in names}
        whole = wire.Template(*compose.whole_body(planned))
        assert template.encode(fills) == whole.encode(fills), planned.component.key


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stack.available())
def test_status_stack_converts_as_the_whole_status_does(
    cloud: str, accelerator: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each scenario, then the bank's with two other registry settings: new
    # plans whose status says what it says of each component whatever the
    # documents from an encoding kept per component, beside the rest.
    calls = recorded(monkeypatch)
    banks = [_with_mirror_targets(SCENARIOS["regulated-bank"], f"{cloud}-{n}") for n in ("a", "b")]
    for docs in (*SCENARIOS.values(), *banks):
        _final_request(cloud, accelerator, docs, kind)
    assert len(calls) > len(SCENARIOS)
    assert_converted_as_the_whole_status(calls)


def test_skeletons_that_encode_apart_are_kept_apart() -> None:
    # Readiness values equal as map keys (1, True, 1.0; 0.0, -0.0) but encoded apart.
    readinesses: list[dict[str, Any]] = [{"x": 1}, {"x": True}, {"x": "1"}, {"x": 0.0}, {"x": -0.0}, {"x": 1.5}]
    fills = {compose.PC_NAME_FILL: wire.string_value("pc")}
    for readiness in readinesses:
        component = Component(key="obj", kind="Object", origin="platform", readiness=readiness, manifest={"a": 1})
        planned = Planned(component)
        expected = wire.Template(*compose.whole_body(planned)).encode(fills)
        assert compose.body_template(planned).encode(fills) == expected, readiness


def _skeleton_text(planned: Planned) -> str:
    """A planned body's skeleton as the text of its tree and holes: equal texts, equal skeletons."""
    tree, _holes = compose.whole_body(planned)
    apart = compose._apart(tree, "values" if planned.component.is_release else "manifest")
    return repr((sorted((path, fill) for fill, (path, _part) in apart.items()), tree))


def _other_values(value: Any) -> list[Any]:
    """Other values of a component field's type than ``value``."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, str):
        return [f"{value}-other", ""]
    if isinstance(value, dict):
        return [{**value, "other": "x"}, {}]
    if isinstance(value, tuple):
        return [(), value[:1] * 2] if value else [("other",)]
    if isinstance(value, ChartRef):
        return [dataclasses.replace(value, **{f.name: "other"}) for f in dataclasses.fields(ChartRef)]
    assert value is None, value
    return [ChartRef("other", "oci://other", "1.0.0")]


def test_a_skeleton_and_what_varies_around_it_change_only_with_its_key() -> None:
    # Every component of every stack in every state, annotated or not, then
    # with each of its fields changed in turn: a key never stands for two
    # skeletons (the cache would hand one body's skeleton to another), and
    # what varies, read off a component beside the skeleton kept for
    # another with its key, is what its whole body has.
    texts: dict[tuple[str, ...], set[str]] = {}
    made: list[Planned] = []
    for loaded in stack.every():
        for component in loaded.components:
            if component.xr_fields:
                continue  # encoded whole (body_template)
            variants = [component] + [
                dataclasses.replace(component, **{f.name: other})
                for f in dataclasses.fields(Component)
                for other in _other_values(getattr(component, f.name))
            ]
            for variant in variants:
                for state in (MANAGED, UNMANAGED, REMOVED):
                    for changed_by in ((), ("a-document",), ("a-document", "another")):
                        planned = Planned(variant, state, changed_by)
                        try:
                            text = _skeleton_text(planned)
                        except (AssertionError, AttributeError):
                            continue  # no body: a Release without a chart
                        texts.setdefault(compose._skeleton_key(planned), set()).add(text)
                        made.append(planned)
    assert len(texts) > 100
    assert {key: found for key, found in texts.items() if len(found) > 1} == {}
    compose._SKELETONS.clear()
    try:
        for planned in made:
            tree, _holes = compose.whole_body(planned)
            apart = compose._apart(tree, "values" if planned.component.is_release else "manifest")
            _skeleton, parts = compose._skeleton_of(planned)  # the first of each key makes the skeleton
            assert repr(parts) == repr({fill: part for fill, (_path, part) in apart.items()}), planned
    finally:
        compose._SKELETONS.clear()


def test_an_earlier_steps_resources_stay_and_ours_replace_their_bodies() -> None:
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    variant = dict(_states(req))["an earlier step's resources"]
    rsp = fnv1.RunFunctionResponse.FromString(FunctionRunner().respond(variant))
    assert resource.struct_to_dict(rsp.desired.resources["from-an-earlier-step"].resource)["kind"] == "ConfigMap"
    ours = rsp.desired.resources["cert-manager"]
    assert resource.struct_to_dict(ours.resource)["kind"] == "Release"
    # What the earlier step set and we do not (readiness, connection details) stays.
    assert ours.ready == fnv1.READY_TRUE
    assert ours.connection_details["k"] == b"v"


def test_an_earlier_steps_composite_keeps_its_fields_beside_ours() -> None:
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    variant = dict(_states(req))["an earlier step's composite"]
    rsp = fnv1.RunFunctionResponse.FromString(FunctionRunner().respond(variant))
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["fromAnEarlierStep"] is True
    assert status["stack"]["id"] == "eks-nvidia"


def test_the_log_says_of_a_render_what_its_written_status_stack_says() -> None:
    # The log takes the stack's id and documents from the status it converted, not from a Struct parsed again.
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    for variant in (req, dict(_states(req))["an earlier step's composite"]):
        data, summary = FunctionRunner()._compute(variant, variant.SerializeToString(deterministic=True))
        written = requestlog.summarize(fnv1.RunFunctionResponse.FromString(data))
        assert summary == written
        assert summary.stack_id == "eks-nvidia"
        assert summary.documents


def test_a_transform_takes_the_message_path_and_gives_the_same_bytes() -> None:
    req = _final_request("GKE", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None

    def untouched(_xr: ServingStack, _resources: dict[str, dict[str, Any]]) -> None:
        pass

    assert FunctionRunner(transforms=[untouched]).respond(req) == FunctionRunner().respond(req)


def test_a_template_refuses_overlapping_holes() -> None:
    with pytest.raises(ValueError, match="overlaps"):
        wire.Template({"a": {"b": 1}}, {("a",): "x", ("a", "b"): "y"})


def test_a_fill_of_another_length_lays_the_template_out_again() -> None:
    body: dict[str, Any] = {"spec": {"providerConfigRef": {"kind": "ProviderConfig", "name": ""}}, "kind": "Release"}
    template = wire.Template(body, {("spec", "providerConfigRef", "name"): "pc"})
    for name in ("a", "b", "a-much-longer-name" * 20, "c"):
        encoded = wire.Resources()
        encoded.add("k", template, {"pc": wire.string_value(name)}, ready=False)
        expected = fnv1.RunFunctionResponse()
        edited = copy.deepcopy(body)
        edited["spec"]["providerConfigRef"]["name"] = name
        expected.desired.resources["k"].resource.CopyFrom(to_struct(edited))
        assert wire.serialize(fnv1.RunFunctionResponse(), encoded) == expected.SerializeToString(deterministic=True)


def test_a_laid_out_entry_is_left_alone_by_the_collector_once_seen() -> None:
    # Every new template keeps its last entry for as long as it is cached:
    # holding only text, bytes and numbers, the cyclic collector stops
    # walking it once it has looked.
    template = wire.Template({"kind": "Release", "spec": {"a": 1}}, {("spec", "pc"): "pc", ("spec", "x"): "x"})
    fills = {"pc": wire.string_value("name"), "x": wire.string_value("other")}
    entry = template.entry("k", fills, ready=True)
    assert template.entry("k", fills, ready=True) is entry  # kept
    for _ in range(3):  # one pass may see a tuple before those inside it: one per level, at worst
        gc.collect()
    assert not gc.is_tracked(entry)
