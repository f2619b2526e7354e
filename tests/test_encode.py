"""One render path, encoded as protobuf would: the plain runner and a fork's transforms send the same bytes.

* properties (hypothesis) of :mod:`function.encode` against protobuf itself:
  a tree against ``to_struct``'s deterministic serialization, map order
  against upb's, a response spliced with encoded resources against the
  message holding them;
* every stack with every override scenario, in every observed state the
  renderer tells apart (first reconcile, ProviderConfigs observed, everything
  observed, some ready, all ready with the last status, a consumer on its way
  out, another step's resources in the desired state): the response against
  its own deterministic re-serialization, against a runner with a no-op
  transform (the one path: transforms edit what the plain runner encodes),
  and against what the runner keeps and sends again;
* transforms edit a private copy: what one call changes, the next does not see.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.internal import decoder, encoder
from hypothesis import given
from hypothesis import strategies as st

from function import encode, fn, stack
from function.fn import FunctionRunner, serialize
from function.model import ServingStack
from function.offline import RenderError, run_pipeline
from function.tree import to_struct
from tests.support.repo import EXAMPLE, load_docs
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


@given(TREES, st.data())
def test_a_tree_encodes_as_protobuf_serializes_its_struct(tree: dict[str, Any], data: st.DataObject) -> None:
    expected = to_struct(tree).SerializeToString(deterministic=True)
    assert encode.struct_bytes(tree) == expected
    # Its maps lasting (one at two paths): the same bytes.
    records = {key: encode.lasting(v) for key, v in tree.items() if type(v) is dict}
    lasting = {key: records[key].node if key in records else v for key, v in tree.items()}
    maps = [key for key, v in tree.items() if type(v) is dict]
    if maps:
        lasting["again"] = lasting[data.draw(st.sampled_from(maps))]
        assert encode.struct_bytes(lasting) == to_struct(lasting).SerializeToString(deterministic=True)
    assert encode.struct_bytes({key: lasting[key] for key in tree}) == expected
    assert encode.struct_bytes({"a": tree, "b": tree}) == to_struct({"a": tree, "b": tree}).SerializeToString(
        deterministic=True
    )


@given(TREES, st.data())
def test_a_body_transforms_edit_encodes_as_what_it_holds_and_its_lasting_parts_come_back(
    tree: dict[str, Any], data: st.DataObject
) -> None:
    # A body around lasting parts (one at two paths) and a map made for the request at two paths, edited
    # or not: it encodes as protobuf encodes what it holds after the edit; then the parts are as they were.
    records = [encode.lasting(v) for v in tree.values() if type(v) is dict]  # held: the parts last while they do
    parts = {f"part{i}": record.node for i, record in enumerate(records)}
    shared = {"name": "pc"}
    body: dict[str, Any] = {"top": tree, **parts, "again": next(iter(parts.values()), []), "r1": shared, "r2": shared}
    kept = {key: (to_struct({"p": part}).SerializeToString(deterministic=True)) for key, part in parts.items()}
    enc = encode.Encoding()
    handed = encode.editable(body, enc)
    assert handed == body
    handed["r1"]["name"] = data.draw(st.sampled_from(["pc", "other"]))
    assert handed["r2"] == {"name": "pc"}, "one path's map is its own"
    if data.draw(st.booleans()):
        target = data.draw(st.sampled_from(sorted(handed)))
        if type(handed[target]) is dict:
            handed[target][data.draw(KEYS)] = data.draw(JSON)
        elif type(handed[target]) is list:
            handed[target].append(data.draw(JSON))
    encode.settle(enc)
    after = to_struct(handed).SerializeToString(deterministic=True)
    assert encode.struct_bytes(handed, enc) == after
    encode.restore(enc)
    for key, part in parts.items():
        assert (
            encode.struct_bytes({"p": part})
            == kept[key]
            == to_struct({"p": part}).SerializeToString(deterministic=True)
        )


def test_a_bool_edited_into_a_number_is_encoded_as_the_number() -> None:
    for changed in (
        {"flag": 1, "n": 1, "z": 0.0},
        {"flag": True, "n": True, "z": 0.0},
        {"flag": True, "n": 1, "z": -0.0},
    ):
        record = encode.lasting({"flag": True, "n": 1, "z": 0.0})
        part = record.node
        enc = encode.Encoding()
        handed = encode.editable({"p": part}, enc)
        handed["p"].update(changed)
        encode.settle(enc)
        assert encode.struct_bytes(handed, enc) == to_struct({"p": changed}).SerializeToString(deterministic=True)
        encode.restore(enc)
        assert encode.struct_bytes({"p": part}) == to_struct({"p": {"flag": True, "n": 1, "z": 0.0}}).SerializeToString(
            deterministic=True
        )


def test_a_lasting_part_is_its_own_copy_put_back_in_place() -> None:
    values = {"image": {"repository": "nvcr.io/x"}}
    record = encode.lasting({"values": values})
    part = record.node
    assert part == {"values": values} and part["values"] is not values  # nothing else reaches into it
    enc = encode.Encoding()
    handed = encode.editable({"p": part}, enc)
    inner = handed["p"]["values"]
    inner["image"]["repository"] = "edited"
    del handed["p"]["values"]  # edited, and what was edited taken out of it
    encode.settle(enc)
    encode.restore(enc)
    assert handed["p"] is part and part == {"values": {"image": {"repository": "nvcr.io/x"}}}
    assert values == {"image": {"repository": "nvcr.io/x"}}


@given(st.lists(KEYS, max_size=12, unique=True))
def test_map_entries_go_in_upb_order(keys: list[str]) -> None:
    struct = struct_pb2.Struct()
    for key in keys:
        struct[key] = 1
    # Read from the bytes: a parsed map does not keep the order it was read in.
    assert _keys_in_order(struct.SerializeToString(deterministic=True)) == sorted(keys, key=encode.sort_key)


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
    expected = fnv1.RunFunctionResponse()
    expected.CopyFrom(rsp)
    encoded = {}
    for key, (body, ready) in resources.items():
        message = fnv1.Resource(resource=to_struct(body), ready=fnv1.READY_TRUE if ready else fnv1.READY_UNSPECIFIED)
        encoded[key] = message.SerializeToString(deterministic=True)
        expected.desired.resources[key].CopyFrom(message)
    assert serialize(rsp, encoded) == expected.SerializeToString(deterministic=True)


@given(st.integers(0, 2**40) | st.integers(0, 1 << 15))
def test_varints_are_protobufs(n: int) -> None:
    assert encode.varint(n) == encoder._VarintBytes(n)
    assert encode.read_varint(b"x" + encode.varint(n) + b"y", 1) == (n, 1 + len(encode.varint(n)))


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


def noop(_xr: ServingStack, _resources: dict[str, dict[str, Any]]) -> None:
    """A fork's transform that changes nothing."""


CASES = [
    (cloud, accelerator, kind, scenario)
    for cloud, accelerator, kind in stack.available()
    for scenario in SCENARIOS
]  # fmt: skip


@pytest.mark.parametrize(("cloud", "accelerator", "kind", "scenario"), CASES)
def test_every_stack_scenario_and_observed_state_is_one_path(
    cloud: str, accelerator: str, kind: str, scenario: str
) -> None:
    req = _final_request(cloud, accelerator, SCENARIOS[scenario], kind)
    if req is None:
        pytest.skip(f"{scenario} is refused on {cloud}/{accelerator}")
    for state, variant in _states(req):
        runner = FunctionRunner()
        data = runner.respond(variant)
        assert fnv1.RunFunctionResponse.FromString(data).SerializeToString(deterministic=True) == data, state
        # A fork's no-op transform: the same response, byte for byte.
        assert FunctionRunner(transforms=(noop,)).respond(variant) == data, state
        # What the runner sends, computed and then kept (the tag changes per call), is the same.
        again = fnv1.RunFunctionRequest()
        again.CopyFrom(variant)
        again.meta.tag = "another call"
        expected = fnv1.RunFunctionResponse.FromString(data)
        expected.meta.tag = "another call"
        assert runner.respond(again) == expected.SerializeToString(deterministic=True), state


def _edit_everything(_xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
    """Writes into every part of every body, deep in the values and manifests too."""
    for body in resources.values():
        body.setdefault("metadata", {}).setdefault("labels", {})["edited"] = "yes"
        for part in body.get("spec", {}).values():
            if isinstance(part, dict):
                part["edited"] = True
                for inner in part.values():
                    if isinstance(inner, dict):
                        inner["edited"] = 1


def test_what_a_transform_edits_is_its_own_copy() -> None:
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    plain = FunctionRunner().respond(req)
    edited = fnv1.RunFunctionResponse.FromString(FunctionRunner(transforms=(_edit_everything,)).respond(req))
    assert all(r.resource["metadata"]["labels"]["edited"] == "yes" for r in edited.desired.resources.values())
    values = edited.desired.resources["gpu-operator"].resource["spec"]["forProvider"]["values"]
    assert values["edited"] == 1
    # The plain runner, afresh (no memo): the same bytes as before the transform ran.
    assert FunctionRunner().respond(req) == plain


def _edit_then_fail(xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
    _edit_everything(xr, resources)
    raise RuntimeError("a fork's bug")


def test_what_a_failing_transform_edited_is_put_back_too() -> None:
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    plain = FunctionRunner().respond(req)
    failed = fnv1.RunFunctionResponse.FromString(FunctionRunner(transforms=(_edit_then_fail,)).respond(req))
    assert failed.results[0].severity == fnv1.SEVERITY_FATAL
    assert "a fork's bug" in failed.results[0].message
    assert FunctionRunner().respond(req) == plain
    assert FunctionRunner(transforms=(noop,)).respond(req) == plain


def _point_one_release_elsewhere(_xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
    resources["cert-manager"]["spec"]["providerConfigRef"]["name"] = "elsewhere"


def test_editing_one_body_edits_that_body_only() -> None:
    # Every body's ProviderConfig reference is one object as rendered; a transform gets one per body.
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    rsp = fnv1.RunFunctionResponse.FromString(FunctionRunner(transforms=(_point_one_release_elsewhere,)).respond(req))
    refs = {key: r.resource["spec"]["providerConfigRef"]["name"] for key, r in rsp.desired.resources.items()
            if "providerConfigRef" in r.resource["spec"]}  # fmt: skip
    assert refs.pop("cert-manager") == "elsewhere"
    assert len(refs) > 1 and len(set(refs.values())) == 1 and "elsewhere" not in refs.values()


def test_a_transform_that_renders_with_transforms_itself_is_a_fatal_not_a_hang() -> None:
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    plain = FunctionRunner().respond(req)
    inner: list[fnv1.RunFunctionResponse] = []

    def renders_again(_xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
        resources["cert-manager"]["metadata"]["labels"]["edited"] = "yes"
        inner.append(fnv1.RunFunctionResponse.FromString(FunctionRunner(transforms=(noop,)).respond(req)))

    outcome: list[fnv1.RunFunctionResponse] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            fnv1.RunFunctionResponse.FromString(FunctionRunner(transforms=(renders_again,)).respond(req))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=60)
    assert outcome, "the nested render hung"
    assert inner[0].results[0].severity == fnv1.SEVERITY_FATAL
    assert "may not render a ServingStack with transforms itself" in inner[0].results[0].message
    # The outer render goes on with its own edit; the parts are put back after it.
    assert outcome[0].desired.resources["cert-manager"].resource["metadata"]["labels"]["edited"] == "yes"
    assert FunctionRunner().respond(req) == plain


def test_a_part_marshal_cannot_write_is_made_plain_and_still_lasts() -> None:
    class Kind(enum.StrEnum):
        RELEASE = "Release"

    record = encode.lasting({"kind": Kind.RELEASE, "pair": (1, 2)})
    part = record.node
    assert type(part) is dict and type(part["kind"]) is str
    assert part == {"kind": "Release", "pair": [1, 2]}
    assert encode.struct_bytes({"p": part}) == to_struct({"p": {"kind": "Release", "pair": [1, 2]}}).SerializeToString(
        deterministic=True
    )


def test_the_runner_keeps_what_crossplane_asks_for_again_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # A first status written (a new cluster) makes the XR's next request differ: not kept. Once the request
    # carries the status the response writes, every reconcile sends it again: kept, answered without rendering.
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    states = dict(_states(req))
    rendered: list[int] = []
    real_run = fn.run

    def counted(*args: Any, **kwargs: Any) -> fn.Rendered:
        rendered.append(1)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(fn, "run", counted)
    new_cluster = states["provider configs observed"]
    runner = FunctionRunner()
    told = fnv1.RunFunctionResponse.FromString(runner.respond(new_cluster))
    assert runner.respond(new_cluster) == runner.respond(new_cluster)
    assert len(rendered) == 3, "a new cluster's first status: rendered each time"
    steady = fnv1.RunFunctionRequest()
    steady.CopyFrom(new_cluster)
    steady.observed.composite.resource.get_or_create_struct("status").CopyFrom(
        told.desired.composite.resource["status"]
    )
    rendered.clear()
    assert runner.respond(steady) == runner.respond(steady) == runner.respond(steady)
    assert len(rendered) == 1, "the status as told: rendered once, then kept"


def test_a_part_is_lasting_while_its_record_is_held() -> None:
    body = {"a": 1}
    before = len(encode._LASTING)
    records = [encode.lasting(body) for _ in range(100)]
    assert len(encode._LASTING) == before + 100
    # A body keeps its part's map after the record goes (a plan evicted mid-request): it is then a map like
    # any other, encoded anew and, for transforms, edited without being put back (no plan holds it).
    node = records[0].node
    del records
    gc.collect()
    assert len(encode._LASTING) == before
    enc = encode.Encoding()
    assert encode.editable({"p": node}, enc)["p"] is node and not enc.reached
    assert encode.struct_bytes({"p": node}) == to_struct({"p": {"a": 1}}).SerializeToString(deterministic=True)


def test_transforms_get_plain_dicts_and_lists() -> None:
    # As function.transforms promises: what any Python code (yaml.safe_dump, type checks) takes as JSON.
    req = _final_request("EKS", "NVIDIA", SCENARIOS["regulated-bank"])
    assert req is not None
    kinds: set[type] = set()

    def walk(node: Any) -> None:
        kinds.add(type(node))
        for child in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
            walk(child)

    def inspect(_xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
        walk(resources)
        yaml.safe_dump(resources)

    rsp = fnv1.RunFunctionResponse.FromString(FunctionRunner(transforms=(inspect,)).respond(req))
    assert not any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results)
    assert kinds <= {dict, list, str, bool, int, float, type(None)} and dict in kinds
