"""Property-based fuzzing of the real RunFunction: every case ends in a render or a readable Fatal.

Hypothesis generates XRs, override documents (EnvironmentConfigs and the
context's), function Inputs and observed resources: valid ones, almost valid
ones (one field replaced by a wrong or hostile value) and hostile ones (NaN,
±Infinity, huge numbers and strings, odd Unicode, deep nesting). Every request
goes through ``FunctionRunner`` in process; a smaller set goes over the real
gRPC server.

Profiles (``HYPOTHESIS_PROFILE``): ``ci`` (default, a few hundred cases, run by
``./dev test``) and ``long`` (``./dev fuzz``: over 10,000 cases). Each run
prints how many cases rendered, asked for resources or ended in a Fatal.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given, settings
from hypothesis import strategies as st

from function import stack
from function.model import Accelerator, Cloud
from function.overrides.collect import CONTEXT_KEY, DEFAULT_LABEL, DEFAULT_REQUIREMENT, INPUT_API_VERSION
from tests.support.profiles import PROFILE
from tests.support.repo import EXAMPLE, load_docs
from tests.support.requests import ANNOTATION, assert_readable, call, request, run
from tests.support.xr import make_xr, provider_configs

# gRPC cases per profile (the in-process counts are the profiles' max_examples, tests/support/profiles.py).
OVER_GRPC = {"ci": 15, "long": 300}[PROFILE]

OUTCOMES: Counter[str] = Counter()

EXAMPLE_DOCS = [d for d in load_docs(EXAMPLE / "environmentconfigs") if d.get("kind") == "EnvironmentConfig"]


def _keys() -> list[str]:
    keys: set[str] = set()
    for loaded in stack.every():
        keys.update(c.key for c in loaded.components)
    return sorted(keys)


COMPONENT_KEYS = _keys()

# --------------------------------------------------------------------------- #
# Values: plain, and hostile
# --------------------------------------------------------------------------- #

HOSTILE_SCALARS = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -0.0, 2**63, 2**53 + 1, True, None, ""]),
    st.sampled_from(["\x00", "\u202e", "\ud7ff", "😀" * 50, " ", "a" * 5000, "docker.io", "*", "-", "..", "\\"]),
    st.text(max_size=20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
)
SCALARS = st.one_of(st.text(max_size=12), st.integers(-5, 5), st.booleans(), st.none(), st.floats(-10, 10))


def trees(leaves: st.SearchStrategy[Any], max_leaves: int = 8) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=max_leaves,
    )


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": value} if levels % 2 else [value]
    return value


HOSTILE = st.one_of(
    HOSTILE_SCALARS,
    trees(HOSTILE_SCALARS),
    st.integers(25, 60).map(nested),  # around the depth limit
    st.just("x" * 200_000),
)


@st.composite
def mutated(draw: st.DrawFn, value: Any, replacement: st.SearchStrategy[Any] = HOSTILE) -> Any:
    """``value`` with one node (at a random path) replaced, removed or given a sibling."""
    value = copy.deepcopy(value)
    node = value
    for _ in range(draw(st.integers(0, 5))):
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node, key=str)))
            if not isinstance(node[key], dict | list) or not node[key]:
                break
            node = node[key]
        elif isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            if not isinstance(node[index], dict | list) or not node[index]:
                break
            node = node[index]
        else:
            break
    action = draw(st.sampled_from(["replace", "remove", "add"]))
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node, key=str)))
        if action == "replace":
            node[key] = draw(replacement)
        elif action == "remove":
            del node[key]
        else:
            node[draw(st.text(max_size=10))] = draw(replacement)
    elif isinstance(node, list) and node:
        index = draw(st.integers(0, len(node) - 1))
        if action == "remove":
            del node[index]
        else:
            node[index] = draw(replacement)
    return value


def maybe_mutated(value: Any) -> st.SearchStrategy[Any]:
    """Valid most of the time; almost valid (one node wrong) often; hostile sometimes."""
    return st.one_of(st.just(value), mutated(value), mutated(value, trees(SCALARS)))


# --------------------------------------------------------------------------- #
# The objects
# --------------------------------------------------------------------------- #

CLOUDS = [c.value for c in Cloud]
ACCELERATORS = [a.value for a in Accelerator]


@st.composite
def xrs(draw: st.DrawFn) -> dict[str, Any]:
    xr = make_xr(draw(st.sampled_from(CLOUDS)), draw(st.sampled_from(ACCELERATORS)))
    if draw(st.booleans()):
        xr["spec"]["gateway"]["listeners"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.text(min_size=1, max_size=8), "port": st.integers(-1, 70000)},
                    optional={"protocol": st.sampled_from(["HTTP", "HTTPS"]), "hostname": st.text(max_size=8)},
                ),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        xr["metadata"]["labels"] = draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3))
    result: dict[str, Any] = draw(maybe_mutated(xr))
    return result


IMAGE_TARGETS = ["mirror.example.com/hub", "mirror.example.com", "mirror.example.com:5000/a/b", "bad target", "*"]
CHART_TARGETS = ["oci://mirror.example.com/charts", "https://mirror.example.com", "ftp://x", ""]


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """An override document drawn from the fields the schema has, then maybe broken."""
    component = st.fixed_dictionaries(
        {},
        optional={
            "state": st.sampled_from(["Managed", "Unmanaged", "Removed", "managed"]),
            "version": st.sampled_from(["v1.17.1", "v25.3.4", "1.0.0", ""]),
            "values": trees(SCALARS, 6).filter(lambda v: isinstance(v, dict)),
            "replicas": st.integers(-1, 5),
            "resources": st.fixed_dictionaries({}, optional={"requests": st.just({"cpu": "100m", "memory": 1})}),
            "image": st.sampled_from(["mirror.example.com/x:1", "", "docker.io/library/nginx"]),
            "podDisruptionBudget": st.fixed_dictionaries(
                {}, optional={"minAvailable": st.integers(0, 2), "enabled": st.booleans()}
            ),
            "manifest": trees(SCALARS, 6).filter(lambda v: isinstance(v, dict)),
        },
    )
    doc = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "priority": st.integers(-3, 3),
                "match": st.fixed_dictionaries(
                    {}, optional={"clouds": st.lists(st.sampled_from(CLOUDS), max_size=2), "names": st.just(["x"])}
                ),
                "registry": st.fixed_dictionaries(
                    {},
                    optional={
                        "images": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "from": st.sampled_from(["*", "nvcr.io", "docker.io", "quay.io/x"]),
                                    "to": st.sampled_from(IMAGE_TARGETS),
                                }
                            ),
                            max_size=3,
                        ),
                        "charts": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "from": st.sampled_from(["*", "https://helm.ngc.nvidia.com"]),
                                    "to": st.sampled_from(CHART_TARGETS),
                                }
                            ),
                            max_size=2,
                        ),
                        "imagePullSecrets": st.lists(st.sampled_from(["pull", "", "b"]), max_size=2),
                        "chartPullSecretRef": st.just({"name": "creds"}),
                        "strict": st.booleans(),
                    },
                ),
                "components": st.dictionaries(
                    st.sampled_from([*COMPONENT_KEYS, "no-such-component"]), component, max_size=3
                ),
                "drivers": st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": st.sampled_from(["h100", "b200", "Bad_Name", "a" * 70]),
                            "nodeSelector": st.just({"pool": "gpu"}),
                            "version": st.sampled_from(["570.195.03", ""]),
                        }
                    ),
                    max_size=2,
                ),
            },
        )
    )
    result: dict[str, Any] = draw(maybe_mutated(doc))
    return result


@st.composite
def environment_configs(draw: st.DrawFn) -> list[dict[str, Any]]:
    configs = []
    for i in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 3)) == 0:
            config = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DOCS)))
        else:
            config = {
                "apiVersion": "apiextensions.crossplane.io/v1beta1",
                "kind": "EnvironmentConfig",
                "metadata": {"name": f"doc-{i}", "labels": {DEFAULT_LABEL: "true"}},
                "data": {"servingStack": draw(documents())},
            }
        if draw(st.booleans()):
            config["data"]["other"] = draw(HOSTILE)  # another function's data
        configs.append(draw(maybe_mutated(config)))
    return configs


@st.composite
def contexts(draw: st.DrawFn) -> dict[str, Any] | None:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return None
    if choice == 1:
        return {CONTEXT_KEY: {"servingStack": draw(documents())}}
    context: dict[str, Any] = draw(maybe_mutated({CONTEXT_KEY: {"servingStack": {}, "other": 1}, "x/y": {}}))
    return context


INPUTS = [
    {"apiVersion": INPUT_API_VERSION, "kind": "Input"},
    {"apiVersion": INPUT_API_VERSION, "kind": "Input", "spec": {"selectors": []}},
    {"apiVersion": INPUT_API_VERSION, "kind": "Input", "spec": {"names": [{"name": "regulated-bank"}]}},
    {
        "apiVersion": INPUT_API_VERSION,
        "kind": "Input",
        "spec": {"selectors": [{"matchLabels": {DEFAULT_LABEL: "true"}, "policy": "Required"}]},
    },
    {
        "apiVersion": INPUT_API_VERSION,
        "kind": "Input",
        "spec": {"secrets": {"allowedNamespaces": ["crossplane-system"]}},
    },
]


@st.composite
def inputs(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    value: dict[str, Any] = draw(maybe_mutated(draw(st.sampled_from(INPUTS))))
    return value


CONDITIONS: st.SearchStrategy[Any] = st.one_of(
    st.just([{"type": "Ready", "status": "True", "reason": "Available"}]),
    st.just([{"type": "Ready", "status": "False"}]),
    st.sampled_from([[{"type": "Ready"}], [{}], "x", [5], None, {"type": "Ready"}]),
    st.just([{"type": "Ready", "status": "True", "lastTransitionTime": "not a time"}]),
    trees(HOSTILE_SCALARS, 4),
)


@st.composite
def observed(draw: st.DrawFn, xr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    meta = xr.get("metadata")
    if draw(st.integers(0, 3)) and isinstance(meta, dict) and isinstance(meta.get("name"), str):
        meta.setdefault("namespace", "")
        if isinstance(meta.get("namespace"), str):
            out = {o["metadata"]["annotations"][ANNOTATION]: o for o in provider_configs(copy.deepcopy(xr))}
    for key in draw(st.lists(st.sampled_from([*COMPONENT_KEYS, "gateway", "unknown"]), max_size=4)):
        body: dict[str, Any] = {"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release"}
        body["status"] = {"conditions": draw(CONDITIONS)}
        if key == "gateway":
            body["status"]["atProvider"] = {"manifest": {"status": {"addresses": draw(trees(HOSTILE_SCALARS, 3))}}}
        out[key] = draw(maybe_mutated(body))
    return out


@st.composite
def requests(draw: st.DrawFn) -> fnv1.RunFunctionRequest:
    xr = draw(xrs())
    the_input = draw(inputs())
    configs = draw(environment_configs())
    # Answer every requirement the function may ask for with the configs it selects.
    required: dict[str, list[dict[str, Any]]] = {DEFAULT_REQUIREMENT: configs}
    if draw(st.booleans()):
        required["servingstack-overrides-name-regulated-bank"] = configs[:1]
        required["servingstack-overrides-selector-0"] = configs
    return request(xr, observed=draw(observed(xr)), required=required, context=draw(contexts()), input=the_input)


# --------------------------------------------------------------------------- #
# The properties
# --------------------------------------------------------------------------- #


def _record(rsp: fnv1.RunFunctionResponse) -> None:
    message = assert_readable(rsp)
    if message is not None:
        OUTCOMES["fatal"] += 1
    elif rsp.desired.resources:
        OUTCOMES["rendered"] += 1
    else:
        OUTCOMES["asked for resources or rendered nothing yet"] += 1


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    total = sum(OUTCOMES.values())
    counts = ", ".join(f"{n} {what}" for what, n in OUTCOMES.most_common())
    print(f"\nfuzz profile {PROFILE}: {total} cases, {counts}; 0 internal errors, 0 unbounded messages")


@given(requests())
def test_any_request_renders_or_is_a_readable_fatal(req: fnv1.RunFunctionRequest) -> None:
    _record(run(req))


@given(xrs())
def test_any_xr_renders_or_is_a_readable_fatal(xr: dict[str, Any]) -> None:
    _record(run(request(xr)))


@given(documents(), st.sampled_from(CLOUDS), st.sampled_from(ACCELERATORS))
def test_any_override_document_renders_or_is_a_readable_fatal(doc: dict[str, Any], cloud: str, acc: str) -> None:
    config = {
        "apiVersion": "apiextensions.crossplane.io/v1beta1",
        "kind": "EnvironmentConfig",
        "metadata": {"name": "fuzzed", "labels": {DEFAULT_LABEL: "true"}},
        "data": {"servingStack": doc},
    }
    _record(run(request(make_xr(cloud, acc), required={DEFAULT_REQUIREMENT: [config]})))


@given(contexts(), inputs())
def test_any_context_and_input_render_or_are_a_readable_fatal(
    context: dict[str, Any] | None, the_input: dict[str, Any] | None
) -> None:
    _record(run(request(make_xr("Existing"), context=context, input=the_input)))


@given(st.data())
def test_any_observed_state_renders_or_is_a_readable_fatal(data: st.DataObject) -> None:
    xr = make_xr(data.draw(st.sampled_from(["EKS", "Existing"])))
    _record(run(request(xr, observed=data.draw(observed(xr)))))


def test_over_grpc_any_request_renders_or_is_a_readable_fatal(server: str) -> None:
    @settings(max_examples=OVER_GRPC)
    @given(requests())
    def check(req: fnv1.RunFunctionRequest) -> None:
        _record(call(server, req))

    check()
