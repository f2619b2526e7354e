"""Render offline, in process, the way ``crossplane render`` drives the function.

What ``function render``, ``function explain``, ``function validate`` and the
library's ``render`` run, and nothing more:

* the ``RunFunctionRequest`` render builds (all five capabilities, no tag, the
  XR as observed composite, observed composed resources keyed by their
  ``crossplane.io/composition-resource-name`` annotation, empty desired state);
* the requirements loop of Crossplane's ``FetchingFunctionRunner``: at most
  ``MAX_REQUIREMENTS_ITERATIONS + 1`` calls per step, stop as soon as the
  returned requirements equal the previous ones, otherwise fetch every selector
  from the supplied objects, rebuild the request's required resources from
  scratch, pass the returned context on and call again;
* a Pipeline-mode Composition checked as render checks it, its steps run in
  order, each given the desired state and context of the one before;
* the documents render prints (:mod:`function.render_output`).

Only this function's steps run here: a step of another Function
(function-environment-configs, say) is refused with a hint to pass what it
would put in the context with ``--context-values``. Talking to a function over
gRPC is the tests' business (``tests/support/crossplane.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from function.tree import struct_to_dict, to_jsonable, to_struct

RunFn = Callable[[fnv1.RunFunctionRequest], Awaitable[fnv1.RunFunctionResponse]]
"""Runs a function once: request in, response out."""

MAX_REQUIREMENTS_ITERATIONS = 5
"""Crossplane's ``MaxRequirementsIterations``; the loop runs ``for i := 0; i <= 5``."""

ANNOTATION_COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"

CAPABILITIES: tuple[fnv1.Capability, ...] = (
    fnv1.CAPABILITY_CAPABILITIES,
    fnv1.CAPABILITY_REQUIRED_RESOURCES,
    fnv1.CAPABILITY_CREDENTIALS,
    fnv1.CAPABILITY_CONDITIONS,
    fnv1.CAPABILITY_REQUIRED_SCHEMAS,
)
"""What render advertises in ``meta.capabilities`` (and it sends no tag)."""


class RenderError(Exception):
    """Rendering failed the way ``crossplane render`` would fail.

    ``step`` names the pipeline step (when one was running) and ``response`` is
    the last response received from it, if any.
    """

    def __init__(
        self, message: str, *, step: str | None = None, response: fnv1.RunFunctionResponse | None = None
    ) -> None:
        super().__init__(message)
        self.step = step
        self.response = response


@dataclass
class RenderResult:
    """Everything a render produced.

    ``results`` and ``result_steps`` are parallel: ``result_steps[i]`` is the step
    that returned ``results[i]``. ``requests`` holds a copy of every request sent,
    in order.
    """

    xr: dict[str, Any]
    desired: fnv1.State
    results: list[fnv1.Result] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    result_steps: list[str] = field(default_factory=list)
    conditions: list[fnv1.Condition] = field(default_factory=list)
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)
    requirements: dict[str, fnv1.Requirements] = field(default_factory=dict)
    requests: list[fnv1.RunFunctionRequest] = field(default_factory=list)
    has_context: bool = True

    @property
    def calls(self) -> int:
        """How many times a function was called."""
        return len(self.requests)


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's metadata; empty when it has none (so are its name, namespace and labels below)."""
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def meta_name(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("name") or "")


def meta_namespace(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("namespace") or "")


def meta_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = metadata(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


_M = TypeVar("_M", bound=Message)


def _copy(message: _M) -> _M:
    """An independent copy of a protobuf message (the loop keeps and mutates requests)."""
    out: _M = type(message)()
    out.CopyFrom(message)
    return out


def _function_name(entry: Mapping[str, Any]) -> str:
    """The Function a Composition pipeline entry runs (its ``functionRef.name``)."""
    return str((entry.get("functionRef") or {}).get("name", ""))


def observed_by_name(observed: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Key observed composed resources by their composition-resource-name annotation.

    An object without the annotation raises :class:`RenderError` (render would
    silently key it as ``""``).
    """
    out: dict[str, dict[str, Any]] = {}
    for obj in observed:
        annotations = metadata(obj).get("annotations")
        name = annotations.get(ANNOTATION_COMPOSITION_RESOURCE_NAME) if isinstance(annotations, Mapping) else None
        if not name:
            raise RenderError(
                f"observed resource {obj.get('kind')} {meta_name(obj)!r} has no "
                f"{ANNOTATION_COMPOSITION_RESOURCE_NAME} annotation"
            )
        out[str(name)] = to_jsonable(obj)
    return out


def fetch_resources(selector: fnv1.ResourceSelector, supplied: Sequence[Mapping[str, Any]]) -> fnv1.Resources:
    """Return the supplied objects a selector matches, like render's fetcher.

    apiVersion and kind must be equal; when the selector sets a namespace the
    object's namespace must be equal too. ``match_name`` returns at most one
    object, ``match_labels`` every object carrying all the labels, and a
    selector with neither returns every object of the kind. Items are sorted by
    namespace, then name. Nothing matched gives an empty ``Resources``.
    """
    candidates = [
        obj
        for obj in supplied
        if obj.get("apiVersion") == selector.api_version
        and obj.get("kind") == selector.kind
        and (not selector.HasField("namespace") or meta_namespace(obj) == selector.namespace)
    ]
    candidates.sort(key=lambda o: (meta_namespace(o), meta_name(o)))
    match = selector.WhichOneof("match")
    if match == "match_name":
        candidates = [o for o in candidates if meta_name(o) == selector.match_name][:1]
    elif match == "match_labels":
        want = dict(selector.match_labels.labels)
        candidates = [o for o in candidates if all(meta_labels(o).get(k) == v for k, v in want.items())]
    return fnv1.Resources(items=[fnv1.Resource(resource=to_struct(to_jsonable(obj))) for obj in candidates])


def _selector_from_spec(item: Mapping[str, Any]) -> fnv1.ResourceSelector:
    """Build a selector from a Composition step's ``requirements.requiredResources[]`` entry."""
    sel = fnv1.ResourceSelector(api_version=str(item.get("apiVersion", "")), kind=str(item.get("kind", "")))
    if item.get("name"):
        sel.match_name = str(item["name"])
    elif isinstance(item.get("matchLabels"), Mapping):
        sel.match_labels.SetInParent()
        for k, v in item["matchLabels"].items():
            sel.match_labels.labels[str(k)] = str(v)
    if item.get("namespace"):
        sel.namespace = str(item["namespace"])
    return sel


async def _run_with_requirements(
    run: RunFn,
    req: fnv1.RunFunctionRequest,
    *,
    step: str,
    required: Sequence[Mapping[str, Any]],
    sent: list[fnv1.RunFunctionRequest],
) -> fnv1.RunFunctionResponse:
    bootstrap = {k: _copy(v) for k, v in req.required_resources.items()}
    previous: fnv1.Requirements | None = None
    rsp: fnv1.RunFunctionResponse | None = None
    for _ in range(MAX_REQUIREMENTS_ITERATIONS + 1):
        sent.append(_copy(req))
        try:
            rsp = await run(_copy(req))
        except Exception as exc:
            raise RenderError(f'cannot run pipeline step "{step}": {exc}', step=step) from exc
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return rsp
        current = _copy(rsp.requirements) if rsp.HasField("requirements") else None
        if current == previous:  # also None == None: proto.Equal(nil, nil) in Go
            return rsp
        previous = current
        # The required resources are rebuilt from scratch: the step's own, then what was asked.
        asked = current if current is not None else fnv1.Requirements()
        req.ClearField("extra_resources")
        req.ClearField("required_resources")
        req.ClearField("context")  # ... and the context is the one returned, if any
        for name, resources in bootstrap.items():
            req.required_resources[name].CopyFrom(resources)
        for name in sorted(asked.extra_resources):
            req.extra_resources[name].CopyFrom(fetch_resources(asked.extra_resources[name], required))
        for name in sorted(asked.resources):
            req.required_resources[name].CopyFrom(fetch_resources(asked.resources[name], required))
        if rsp.HasField("context"):
            req.context.CopyFrom(rsp.context)
    raise RenderError(
        f'cannot run pipeline step "{step}": requirements didn\'t stabilize after the maximum number of '
        f"iterations ({MAX_REQUIREMENTS_ITERATIONS})",
        step=step,
        response=rsp,
    )


@dataclass(frozen=True)
class Step:
    """One pipeline step: its name, how to run its function, its Input and its ``requirements`` block."""

    name: str
    run: RunFn
    input: Mapping[str, Any] | None = None
    requirements: Mapping[str, Any] | None = None


async def run_steps(
    steps: Sequence[Step],
    *,
    xr: Mapping[str, Any],
    observed: Iterable[Mapping[str, Any]] = (),
    required: Sequence[Mapping[str, Any]] = (),
    context: Mapping[str, Any] | None = None,
) -> RenderResult:
    """Render an XR through ``steps`` as ``crossplane render`` does.

    ``observed`` are the observed composed resources (``-o``), ``required`` the
    objects required-resource selectors are matched against (``-e``), and
    ``context`` the initial context (``--context-values``). Raises
    :class:`RenderError` on a fatal result, a failing call, or requirements
    that do not stabilise.
    """
    xr_doc: dict[str, Any] = to_jsonable(xr)
    required_docs = [to_jsonable(o) for o in required]
    result = RenderResult(xr=xr_doc, desired=fnv1.State(), observed=observed_by_name(observed))
    observed_state = fnv1.State()
    observed_state.composite.resource.CopyFrom(to_struct(xr_doc))
    for name, obj in result.observed.items():
        observed_state.resources[name].resource.CopyFrom(to_struct(obj))

    desired: fnv1.State | None = fnv1.State()  # the pipeline starts with empty desired state
    fctx: struct_pb2.Struct | None = to_struct(to_jsonable(context or {}))  # ... and the supplied context
    for step in steps:
        req = fnv1.RunFunctionRequest(
            meta=fnv1.RequestMeta(capabilities=CAPABILITIES),
            observed=observed_state,
            desired=desired,  # a field given None stays unset (here, in context and in input)
            context=fctx,
            input=to_struct(to_jsonable(step.input)) if step.input is not None else None,
        )
        for item in (step.requirements or {}).get("requiredResources") or []:
            req.required_resources[str(item.get("requirementName", ""))].CopyFrom(
                fetch_resources(_selector_from_spec(item), required_docs)
            )

        rsp = await _run_with_requirements(step.run, req, step=step.name, required=required_docs, sent=result.requests)
        desired = _copy(rsp.desired) if rsp.HasField("desired") else None
        fctx = _copy(rsp.context) if rsp.HasField("context") else None
        result.conditions.extend(rsp.conditions)
        if rsp.HasField("requirements"):
            result.requirements[step.name] = _copy(rsp.requirements)
        for r in rsp.results:
            if r.severity == fnv1.SEVERITY_FATAL:
                raise RenderError(
                    f'pipeline step "{step.name}" returned a fatal result: {r.message}', step=step.name, response=rsp
                )
            result.results.append(r)
            result.result_steps.append(step.name)

    result.desired = desired if desired is not None else fnv1.State()
    result.has_context = fctx is not None
    result.context = struct_to_dict(fctx) if fctx is not None else {}
    return result


async def run_pipeline(
    run: RunFn,
    *,
    xr: Mapping[str, Any],
    step: str = "compose-serving-stack",
    input: Mapping[str, Any] | None = None,
    observed: Iterable[Mapping[str, Any]] = (),
    required: Sequence[Mapping[str, Any]] = (),
    context: Mapping[str, Any] | None = None,
) -> RenderResult:
    """Render an XR through a single-step pipeline, like ``crossplane render`` (see :func:`run_steps`)."""
    return await run_steps([Step(step, run, input)], xr=xr, observed=observed, required=required, context=context)


def composition_steps(
    runners: Mapping[str, RunFn], composition: Mapping[str, Any], xr: Mapping[str, Any]
) -> list[Step]:
    """The steps of a Pipeline-mode Composition, checked as render checks it before running.

    ``runners`` maps a Function name (``functionRef.name``) to its runner. A
    compositeTypeRef other than the XR's, a mode other than Pipeline, labels
    the XR's compositionSelector wants and the Composition lacks, and a step of
    an unknown Function raise :class:`RenderError`.
    """
    spec = composition.get("spec") or {}
    comp_name = meta_name(composition)
    type_ref = spec.get("compositeTypeRef") or {}
    for key in ("kind", "apiVersion"):
        if type_ref.get(key) != xr.get(key):
            raise RenderError(
                f"composition's compositeTypeRef.{key} ({type_ref.get(key)}) does not match XR's {key} ({xr.get(key)})"
            )
    xr_spec = xr.get("spec") or {}
    selector = (xr_spec.get("crossplane") or {}).get("compositionSelector") or xr_spec.get("compositionSelector") or {}
    comp_labels = meta_labels(composition)
    for key, value in sorted((selector.get("matchLabels") or {}).items()):
        if key not in comp_labels:
            raise RenderError(f'composition "{comp_name}" is missing required label "{key}"')
        if comp_labels[key] != value:
            raise RenderError(
                f'composition "{comp_name}" has incorrect value for label "{key}": want "{value}", '
                f'got "{comp_labels[key]}"'
            )
    if spec.get("mode", "Pipeline") != "Pipeline":
        raise RenderError(
            f'render only supports Composition Function pipelines: Composition "{comp_name}" must use '
            "spec.mode: Pipeline"
        )
    steps: list[Step] = []
    for entry in spec.get("pipeline") or []:
        step_name = str(entry.get("step", ""))
        fn_name = _function_name(entry)
        if fn_name not in runners:
            raise RenderError(
                f'cannot run pipeline step "{step_name}": unknown Function "{fn_name}" - does it exist in your '
                "Functions file?",
                step=step_name,
            )
        steps.append(Step(step_name, runners[fn_name], entry.get("input"), entry.get("requirements")))
    return steps


async def run_composition(
    runners: Mapping[str, RunFn],
    composition: Mapping[str, Any],
    *,
    xr: Mapping[str, Any],
    observed: Iterable[Mapping[str, Any]] = (),
    required: Sequence[Mapping[str, Any]] = (),
    context: Mapping[str, Any] | None = None,
) -> RenderResult:
    """Render an XR through every step of a Pipeline-mode Composition (see :func:`composition_steps`)."""
    steps = composition_steps(runners, composition, xr)
    return await run_steps(steps, xr=xr, observed=observed, required=required, context=context)


class FunctionServicer(Protocol):
    """Anything with the SDK servicer's ``async def RunFunction(req, context)``."""

    async def RunFunction(self, request: fnv1.RunFunctionRequest, context: Any, /) -> fnv1.RunFunctionResponse:  # noqa: N802
        ...


def servicer_runner(servicer: FunctionServicer) -> RunFn:
    """Call a servicer's ``RunFunction`` in process.

    Request and response go through serialisation, so the function sees exactly
    what it would see over gRPC (and cannot mutate the caller's objects).
    """

    async def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = await servicer.RunFunction(fnv1.RunFunctionRequest.FromString(req.SerializeToString()), None)
        out: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(rsp.SerializeToString())
        return out

    return run


def own_steps(composition: Mapping[str, Any], input_api_version: str) -> dict[str, str]:
    """Function name per pipeline step; raises unless every step runs the function rendering here.

    A step is that function's when its Input has ``input_api_version`` (this
    function's: ``servingstack.fn.modelplane.ai/v1beta1``) or it names the same
    Function as such a step.
    """
    pipeline = [e for e in (composition.get("spec") or {}).get("pipeline") or [] if isinstance(e, Mapping)]
    steps = {str(e.get("step", "")): _function_name(e) for e in pipeline}
    ours = {_function_name(e) for e in pipeline if (e.get("input") or {}).get("apiVersion") == input_api_version}
    if not ours:
        raise RenderError(f"the Composition has no pipeline step with a {input_api_version} Input")
    for step, function in steps.items():
        if function not in ours:
            raise RenderError(
                f'pipeline step "{step}" runs Function "{function}", which only crossplane render can run; '
                "give what it puts in the context with --context-values or --context-files, or use crossplane render"
            )
    return steps


def render(
    runner: FunctionServicer,
    xr: Mapping[str, Any],
    *,
    input_api_version: str,
    composition: Mapping[str, Any] | None = None,
    input: Mapping[str, Any] | None = None,
    observed: Iterable[Mapping[str, Any]] = (),
    required: Sequence[Mapping[str, Any]] = (),
    context: Mapping[str, Any] | None = None,
) -> RenderResult:
    """Render one XR with ``runner`` in process; raises :class:`RenderError` as render fails.

    Given a Composition, only the steps of the function whose Input has
    ``input_api_version`` run (:func:`own_steps`).
    """
    run = servicer_runner(runner)
    if composition is None:
        return asyncio.run(run_pipeline(run, xr=xr, input=input, observed=observed, required=required, context=context))
    if input is not None:
        raise RenderError("give the function Input either in the Composition or with --input, not both")
    runners = dict.fromkeys(own_steps(composition, input_api_version).values(), run)
    return asyncio.run(
        run_composition(runners, composition, xr=xr, observed=observed, required=required, context=context)
    )
