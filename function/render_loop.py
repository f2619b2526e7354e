"""A local stand-in for ``crossplane render``.

There is no Crossplane CLI in this project's toolchain, so this module does what
``crossplane render`` does with a composition function:

* it builds the ``RunFunctionRequest`` render builds (all five capabilities, no
  tag, the XR as observed composite, observed composed resources keyed by their
  ``crossplane.io/composition-resource-name`` annotation, empty desired state);
* it runs the requirements loop of Crossplane's ``FetchingFunctionRunner``: at
  most ``MAX_REQUIREMENTS_ITERATIONS + 1`` calls per step, stop as soon as the
  returned requirements equal the previous ones, otherwise fetch every selector
  from the supplied objects, rebuild the request's required resources from
  scratch, pass the returned context on and call again;
* it turns the final desired state into the documents render prints, in the same
  order and shape (:func:`render_documents`), and dumps them as YAML
  (:func:`dump_yaml`).

A function is reached through a :data:`RunFn`: :func:`servicer_runner` calls a
servicer in process, :func:`grpc_runner` dials a running function over insecure
gRPC like render's ``Development`` runtime.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import grpc
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from function import goyaml
from function.tree import struct_to_dict, whole_numbers

__all__ = [
    "ANNOTATION_COMPOSITION_RESOURCE_NAME",
    "CAPABILITIES",
    "CONDITION_TIME",
    "LABEL_COMPOSITE",
    "MAX_REQUIREMENTS_ITERATIONS",
    "RENDER_API_VERSION",
    "RenderError",
    "RenderResult",
    "RunFn",
    "dump_yaml",
    "fetch_resources",
    "grpc_runner",
    "observed_by_name",
    "render_documents",
    "run_composition",
    "run_pipeline",
    "servicer_runner",
]

RunFn = Callable[[fnv1.RunFunctionRequest], Awaitable[fnv1.RunFunctionResponse]]
"""Runs a function once: request in, response out."""

MAX_REQUIREMENTS_ITERATIONS = 5
"""Crossplane's ``MaxRequirementsIterations``; the loop runs ``for i := 0; i <= 5``."""

ANNOTATION_COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"
LABEL_COMPOSITE = "crossplane.io/composite"
LABEL_CLAIM_NAME = "crossplane.io/claim-name"
LABEL_CLAIM_NAMESPACE = "crossplane.io/claim-namespace"
RENDER_API_VERSION = "render.crossplane.io/v1beta1"
CONDITION_TIME = "2024-01-01T00:00:00Z"
"""render stamps every condition with this fixed lastTransitionTime."""

CAPABILITIES: tuple[fnv1.Capability, ...] = (
    fnv1.CAPABILITY_CAPABILITIES,
    fnv1.CAPABILITY_REQUIRED_RESOURCES,
    fnv1.CAPABILITY_CREDENTIALS,
    fnv1.CAPABILITY_CONDITIONS,
    fnv1.CAPABILITY_REQUIRED_SCHEMAS,
)
"""What render advertises in ``meta.capabilities`` (and it sends no tag)."""

_SYSTEM_CONDITION_TYPES = frozenset({"Ready", "Synced", "Healthy"})
_DEFAULT_FIRST_N = 3
_DEFAULT_TIMEOUT_SECONDS = 60.0


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
    in order (``len(requests) == calls``).
    """

    xr: dict[str, Any]
    desired: fnv1.State
    results: list[fnv1.Result]
    context: dict[str, Any]
    calls: int
    result_steps: list[str] = field(default_factory=list)
    conditions: list[fnv1.Condition] = field(default_factory=list)
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)
    requirements: dict[str, fnv1.Requirements] = field(default_factory=dict)
    requests: list[fnv1.RunFunctionRequest] = field(default_factory=list)
    has_context: bool = True


# --------------------------------------------------------------------------- #
# Conversions
# --------------------------------------------------------------------------- #


def _format_datetime(value: dt.datetime) -> str:
    offset = value.utcoffset()
    if offset is not None and offset == dt.timedelta(0):
        text = value.replace(tzinfo=None).isoformat()
        return text + "Z"
    return value.isoformat()


def to_jsonable(value: Any) -> Any:
    """Make a YAML-loaded value JSON-shaped (timestamps become RFC 3339 strings)."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return _format_datetime(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    """Convert a dict to a protobuf Struct (numbers become doubles, as on the wire)."""
    s = struct_pb2.Struct()
    json_format.ParseDict(to_jsonable(value), s)
    return s


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("namespace") or "")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


_M = TypeVar("_M", bound=Message)


def _copy(message: _M) -> _M:
    """An independent copy of a protobuf message (the loop keeps and mutates requests)."""
    out: _M = type(message)()
    out.CopyFrom(message)
    return out


# --------------------------------------------------------------------------- #
# Observed and required resources
# --------------------------------------------------------------------------- #


def observed_by_name(observed: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Key observed composed resources by their composition-resource-name annotation.

    An object without the annotation raises :class:`RenderError` (render would
    silently key it as ``""``).
    """
    out: dict[str, dict[str, Any]] = {}
    for obj in observed:
        annotations = _meta(obj).get("annotations")
        name = annotations.get(ANNOTATION_COMPOSITION_RESOURCE_NAME) if isinstance(annotations, Mapping) else None
        if not name:
            raise RenderError(
                f"observed resource {obj.get('kind')} {_name(obj)!r} has no "
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
        and (not selector.HasField("namespace") or _namespace(obj) == selector.namespace)
    ]
    candidates.sort(key=lambda o: (_namespace(o), _name(o)))
    match = selector.WhichOneof("match")
    if match == "match_name":
        candidates = [o for o in candidates if _name(o) == selector.match_name][:1]
    elif match == "match_labels":
        want = dict(selector.match_labels.labels)
        candidates = [o for o in candidates if all(_labels(o).get(k) == v for k, v in want.items())]
    out = fnv1.Resources()
    for obj in candidates:
        out.items.add().resource.CopyFrom(to_struct(obj))
    return out


def _fetch_schema(
    selector: fnv1.SchemaSelector, schemas: Mapping[tuple[str, str], Mapping[str, Any]] | None
) -> fnv1.Schema:
    out = fnv1.Schema()
    found = (schemas or {}).get((selector.api_version, selector.kind))
    if found is not None:
        out.openapi_v3.CopyFrom(to_struct(found))
    return out


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


# --------------------------------------------------------------------------- #
# The requirements loop (FetchingFunctionRunner)
# --------------------------------------------------------------------------- #


def _satisfy(
    req: fnv1.RunFunctionRequest,
    requirements: fnv1.Requirements,
    *,
    required: Sequence[Mapping[str, Any]],
    schemas: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    bootstrap_resources: Mapping[str, fnv1.Resources],
    bootstrap_schemas: Mapping[str, fnv1.Schema],
) -> None:
    """Rebuild the request's required resources/schemas from scratch for ``requirements``."""
    req.ClearField("extra_resources")
    req.ClearField("required_resources")
    req.ClearField("required_schemas")
    for name, resources in bootstrap_resources.items():
        req.required_resources[name].CopyFrom(resources)
    for name, schema in bootstrap_schemas.items():
        req.required_schemas[name].CopyFrom(schema)
    for name in sorted(requirements.extra_resources):
        req.extra_resources[name].CopyFrom(fetch_resources(requirements.extra_resources[name], required))
    for name in sorted(requirements.resources):
        req.required_resources[name].CopyFrom(fetch_resources(requirements.resources[name], required))
    for name in sorted(requirements.schemas):
        req.required_schemas[name].CopyFrom(_fetch_schema(requirements.schemas[name], schemas))


async def _run_with_requirements(
    run: RunFn,
    req: fnv1.RunFunctionRequest,
    *,
    step: str,
    required: Sequence[Mapping[str, Any]],
    schemas: Mapping[tuple[str, str], Mapping[str, Any]] | None,
    sent: list[fnv1.RunFunctionRequest],
) -> fnv1.RunFunctionResponse:
    bootstrap_resources = {k: _copy(v) for k, v in req.required_resources.items()}
    bootstrap_schemas = {k: _copy(v) for k, v in req.required_schemas.items()}
    previous: fnv1.Requirements | None = None
    rsp: fnv1.RunFunctionResponse | None = None
    for _ in range(MAX_REQUIREMENTS_ITERATIONS + 1):
        call_req = _copy(req)
        sent.append(_copy(req))
        try:
            rsp = await run(call_req)
        except Exception as exc:
            raise RenderError(f'cannot run pipeline step "{step}": {exc}', step=step) from exc
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return rsp
        current = rsp.requirements if rsp.HasField("requirements") else None
        if (current is None and previous is None) or (
            current is not None and previous is not None and current == previous
        ):
            return rsp
        # Remember these requirements. (If they went away, previous becomes None and the
        # next call must also return none to stabilise, as proto.Equal(nil, nil) in Go.)
        previous = None
        if current is not None:
            previous = fnv1.Requirements()
            previous.CopyFrom(current)
        _satisfy(
            req,
            current if current is not None else fnv1.Requirements(),
            required=required,
            schemas=schemas,
            bootstrap_resources=bootstrap_resources,
            bootstrap_schemas=bootstrap_schemas,
        )
        if rsp.HasField("context"):
            req.context.CopyFrom(rsp.context)
        else:
            req.ClearField("context")
    raise RenderError(
        f'cannot run pipeline step "{step}": requirements didn\'t stabilize after the maximum number of '
        f"iterations ({MAX_REQUIREMENTS_ITERATIONS})",
        step=step,
        response=rsp,
    )


# --------------------------------------------------------------------------- #
# Pipelines
# --------------------------------------------------------------------------- #


@dataclass
class _Step:
    name: str
    run: RunFn
    input: Mapping[str, Any] | None = None
    requirements: Mapping[str, Any] | None = None
    credentials: Mapping[str, Mapping[str, bytes]] | None = None


async def _run_steps(
    steps: Sequence[_Step],
    *,
    xr: Mapping[str, Any],
    observed: Iterable[Mapping[str, Any]],
    required: Sequence[Mapping[str, Any]],
    context: Mapping[str, Any] | None,
    required_schemas: Mapping[tuple[str, str], Mapping[str, Any]] | None,
) -> RenderResult:
    xr_doc: dict[str, Any] = to_jsonable(xr)
    required_docs = [to_jsonable(o) for o in required]
    observed_docs = observed_by_name(observed)

    observed_state = fnv1.State()
    observed_state.composite.resource.CopyFrom(to_struct(xr_doc))
    for name, obj in observed_docs.items():
        observed_state.resources[name].resource.CopyFrom(to_struct(obj))

    desired: fnv1.State | None = fnv1.State()  # the pipeline starts with empty desired state
    fctx: struct_pb2.Struct | None = to_struct(context or {})  # ... and the supplied context
    result = RenderResult(xr=xr_doc, desired=fnv1.State(), results=[], context={}, calls=0)
    result.observed = observed_docs

    for step in steps:
        req = fnv1.RunFunctionRequest()
        req.observed.CopyFrom(observed_state)
        if desired is not None:
            req.desired.CopyFrom(desired)
        if fctx is not None:
            req.context.CopyFrom(fctx)
        if step.input is not None:
            req.input.CopyFrom(to_struct(step.input))
        for cred_name, data in (step.credentials or {}).items():
            cred = req.credentials[cred_name]
            cred.credential_data.SetInParent()
            for k, v in data.items():
                cred.credential_data.data[k] = v
        if step.requirements is not None:
            for item in step.requirements.get("requiredResources") or []:
                name = str(item.get("requirementName", ""))
                req.required_resources[name].CopyFrom(fetch_resources(_selector_from_spec(item), required_docs))
            for item in step.requirements.get("requiredSchemas") or []:
                name = str(item.get("requirementName", ""))
                sel = fnv1.SchemaSelector(api_version=str(item.get("apiVersion", "")), kind=str(item.get("kind", "")))
                req.required_schemas[name].CopyFrom(_fetch_schema(sel, required_schemas))
        req.meta.capabilities.extend(CAPABILITIES)

        before = len(result.requests)
        rsp = await _run_with_requirements(
            step.run, req, step=step.name, required=required_docs, schemas=required_schemas, sent=result.requests
        )
        result.calls += len(result.requests) - before

        desired = _copy(rsp.desired) if rsp.HasField("desired") else None
        fctx = _copy(rsp.context) if rsp.HasField("context") else None
        result.conditions.extend(rsp.conditions)
        if rsp.HasField("requirements"):
            reqs = fnv1.Requirements()
            reqs.CopyFrom(rsp.requirements)
            result.requirements[step.name] = reqs
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
    bootstrap_requirements: Mapping[str, Any] | None = None,
    credentials: Mapping[str, Mapping[str, bytes]] | None = None,
    required_schemas: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> RenderResult:
    """Render an XR through a single-step pipeline, like ``crossplane render``.

    ``observed`` are the observed composed resources (``-o``), ``required`` the
    objects required-resource selectors are matched against (``-e``), and
    ``context`` the initial context (``--context-values``).
    ``bootstrap_requirements`` is a step's ``requirements`` block
    (``{"requiredResources": [...], "requiredSchemas": [...]}``); ``credentials``
    maps a credential name to its data; ``required_schemas`` maps
    ``(apiVersion, kind)`` to an OpenAPI v3 schema for schema requirements.
    Raises :class:`RenderError` on a fatal result, a failing call, or
    requirements that do not stabilise.
    """
    return await _run_steps(
        [_Step(step, run, input, bootstrap_requirements, credentials)],
        xr=xr,
        observed=observed,
        required=required,
        context=context,
        required_schemas=required_schemas,
    )


def _secret_data(secrets: Sequence[Mapping[str, Any]], name: str, namespace: str) -> dict[str, bytes]:
    for s in secrets:
        if _name(s) == name and _namespace(s) == namespace:
            data = s.get("data") or {}
            return {str(k): base64.b64decode(str(v)) for k, v in data.items()}
    raise RenderError(f'cannot get credentials from secret "{name}": secret "{name}" not found')


async def run_composition(
    runners: Mapping[str, RunFn],
    composition: Mapping[str, Any],
    *,
    xr: Mapping[str, Any],
    observed: Iterable[Mapping[str, Any]] = (),
    required: Sequence[Mapping[str, Any]] = (),
    context: Mapping[str, Any] | None = None,
    secrets: Sequence[Mapping[str, Any]] = (),
    required_schemas: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> RenderResult:
    """Render an XR through every step of a Pipeline-mode Composition.

    ``runners`` maps a Function name (``functionRef.name``) to its runner. Each
    step gets the desired state and context the previous step returned. The
    checks render makes before running (compositeTypeRef, Pipeline mode,
    compositionSelector labels) raise :class:`RenderError`. ``secrets`` are
    Secret objects for steps' ``credentials`` (render reads only ``data``).
    """
    spec = composition.get("spec") or {}
    comp_name = _name(composition)
    type_ref = spec.get("compositeTypeRef") or {}
    if type_ref.get("kind") != xr.get("kind"):
        raise RenderError(
            f"composition's compositeTypeRef.kind ({type_ref.get('kind')}) does not match XR's kind ({xr.get('kind')})"
        )
    if type_ref.get("apiVersion") != xr.get("apiVersion"):
        raise RenderError(
            f"composition's compositeTypeRef.apiVersion ({type_ref.get('apiVersion')}) does not match "
            f"XR's apiVersion ({xr.get('apiVersion')})"
        )
    xr_spec = xr.get("spec") or {}
    selector = (xr_spec.get("crossplane") or {}).get("compositionSelector") or xr_spec.get("compositionSelector") or {}
    comp_labels = _labels(composition)
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

    steps: list[_Step] = []
    for entry in spec.get("pipeline") or []:
        step_name = str(entry.get("step", ""))
        fn_name = str((entry.get("functionRef") or {}).get("name", ""))
        if fn_name not in runners:
            raise RenderError(
                f'cannot run pipeline step "{step_name}": unknown Function "{fn_name}" - does it exist in your '
                "Functions file?",
                step=step_name,
            )
        creds: dict[str, Mapping[str, bytes]] = {}
        for c in entry.get("credentials") or []:
            ref = c.get("secretRef")
            if c.get("source") != "Secret" or not isinstance(ref, Mapping):
                continue
            secret_name, secret_ns = str(ref.get("name", "")), str(ref.get("namespace", ""))
            creds[str(c.get("name", ""))] = _secret_data(secrets, secret_name, secret_ns)
        steps.append(_Step(step_name, runners[fn_name], entry.get("input"), entry.get("requirements"), creds))

    return await _run_steps(
        steps, xr=xr, observed=observed, required=required, context=context, required_schemas=required_schemas
    )


# --------------------------------------------------------------------------- #
# Runners
# --------------------------------------------------------------------------- #


class FunctionServicer(Protocol):
    """Anything with the SDK servicer's ``async def RunFunction(req, context)``."""

    async def RunFunction(self, request: fnv1.RunFunctionRequest, context: Any, /) -> fnv1.RunFunctionResponse:  # noqa: N802
        ...


# The generated stubs are untyped; call them through Any.
_StubV1: Any = grpcv1.FunctionRunnerServiceStub
_StubV1beta1: Any = grpcv1beta1.FunctionRunnerServiceStub


def servicer_runner(servicer: FunctionServicer) -> RunFn:
    """Call a servicer's ``RunFunction`` in process.

    Request and response go through serialisation, so the function sees exactly
    what it would see over gRPC (and cannot mutate the caller's objects).
    """

    async def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        wire_req = fnv1.RunFunctionRequest.FromString(req.SerializeToString())
        rsp = await servicer.RunFunction(wire_req, None)
        out: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(rsp.SerializeToString())
        return out

    return run


def grpc_runner(target: str, *, timeout: float | None = _DEFAULT_TIMEOUT_SECONDS) -> RunFn:
    """Call a function served at ``target`` over insecure gRPC, like render's Development runtime.

    Calls wait for the server to become ready (up to ``timeout`` seconds), and
    fall back to the v1beta1 service when v1 answers UNIMPLEMENTED, as render
    does. Each call opens and closes its own channel.
    """

    async def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = _StubV1(channel)
            try:
                rsp: fnv1.RunFunctionResponse = await stub.RunFunction(req, timeout=timeout, wait_for_ready=True)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
            else:
                return rsp
            beta = _StubV1beta1(channel)
            beta_req = fnv1beta1.RunFunctionRequest.FromString(req.SerializeToString())
            beta_rsp = await beta.RunFunction(beta_req, timeout=timeout, wait_for_ready=True)
            out: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(beta_rsp.SerializeToString())
            return out

    return run


# --------------------------------------------------------------------------- #
# Output documents
# --------------------------------------------------------------------------- #


def _first_n_and_some_more(names: Sequence[str], n: int = _DEFAULT_FIRST_N) -> str:
    names = sorted(names)
    if len(names) > n:
        return f"{', '.join(names[:n])}, and {len(names) - n} more"
    if len(names) == n:
        return f"{', '.join(names[: n - 1])}, and {names[n - 1]}"
    return ", ".join(names)


def _set_conditions(obj: dict[str, Any], *conditions: dict[str, Any]) -> None:
    """crossplane-runtime's SetConditions: replace a condition of the same type unless equal, else append."""
    status = obj.setdefault("status", {})
    existing: list[dict[str, Any]] = [c for c in status.get("conditions") or [] if isinstance(c, dict)]

    def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        keys = ("type", "status", "reason", "message", "observedGeneration")
        return all(a.get(k) == b.get(k) for k in keys)

    for new in conditions:
        found = False
        for i, cur in enumerate(existing):
            if cur.get("type") != new.get("type"):
                continue
            found = True
            if not same(cur, new):
                existing[i] = new
        if not found:
            existing.append(new)
    status["conditions"] = existing


def _condition_status(status: int) -> str:
    if status == fnv1.STATUS_CONDITION_TRUE:
        return "True"
    if status == fnv1.STATUS_CONDITION_FALSE:
        return "False"
    return "Unknown"


def _set_or_drop(meta: dict[str, Any], key: str, value: str) -> None:
    if value:
        meta[key] = value
    else:
        meta.pop(key, None)


def _render_xr(result: RenderResult, *, include_full_xr: bool) -> dict[str, Any]:
    xr_in = result.xr
    desired = result.desired
    doc: dict[str, Any] = struct_to_dict(desired.composite.resource) if desired.HasField("composite") else {}
    doc["apiVersion"] = xr_in.get("apiVersion", "")
    doc["kind"] = xr_in.get("kind", "")
    meta = doc.setdefault("metadata", {})
    _set_or_drop(meta, "name", _name(xr_in))
    _set_or_drop(meta, "namespace", _namespace(xr_in))

    unready = [name for name, r in desired.resources.items() if r.ready != fnv1.READY_TRUE]
    ready = desired.composite.ready
    cond: dict[str, Any] = {"type": "Ready", "status": "True", "reason": "Available"}
    if ready == fnv1.READY_FALSE:
        cond = {"type": "Ready", "status": "False", "reason": "Creating"}
    elif ready == fnv1.READY_UNSPECIFIED and unready:
        cond = {
            "type": "Ready",
            "status": "False",
            "reason": "Creating",
            "message": f"Unready resources: {_first_n_and_some_more(unready)}",
        }
    cond["lastTransitionTime"] = CONDITION_TIME
    _set_conditions(doc, cond)
    for c in result.conditions:
        if c.type in _SYSTEM_CONDITION_TYPES:
            continue
        fc: dict[str, Any] = {
            "type": c.type,
            "status": _condition_status(c.status),
            "lastTransitionTime": CONDITION_TIME,
            "reason": c.reason,
        }
        if c.message:
            fc["message"] = c.message
        _set_conditions(doc, fc)

    if include_full_xr:
        if "spec" in xr_in:
            doc["spec"] = xr_in["spec"]
        if "metadata" in xr_in:
            doc["metadata"] = xr_in["metadata"]
    return doc


def _render_composed(result: RenderResult, name: str, resource: fnv1.Resource) -> dict[str, Any]:
    xr = result.xr
    cd = struct_to_dict(resource.resource)
    meta: dict[str, Any] = cd.setdefault("metadata", {})
    observed = result.observed.get(name)
    if observed is not None:
        _set_or_drop(meta, "namespace", _namespace(observed))
        _set_or_drop(meta, "name", _name(observed))
        _set_or_drop(meta, "generateName", str(_meta(observed).get("generateName") or ""))

    xr_labels = _labels(xr)
    prefix = str(xr_labels.get(LABEL_COMPOSITE) or _name(xr))
    if not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = prefix + "-"
    if _namespace(xr):
        meta["namespace"] = _namespace(xr)

    annotations: dict[str, Any] = dict(meta.get("annotations") or {})
    annotations[ANNOTATION_COMPOSITION_RESOURCE_NAME] = name
    meta["annotations"] = annotations
    labels = dict(meta.get("labels") or {})
    labels[LABEL_COMPOSITE] = prefix
    claim_ref = (xr.get("spec") or {}).get("claimRef") if isinstance(xr.get("spec"), Mapping) else None
    if xr_labels.get(LABEL_CLAIM_NAME) and xr_labels.get(LABEL_CLAIM_NAMESPACE):
        labels[LABEL_CLAIM_NAMESPACE] = xr_labels[LABEL_CLAIM_NAMESPACE]
        labels[LABEL_CLAIM_NAME] = xr_labels[LABEL_CLAIM_NAME]
    elif isinstance(claim_ref, Mapping) and claim_ref.get("name"):
        labels[LABEL_CLAIM_NAMESPACE] = str(claim_ref.get("namespace") or "")
        labels[LABEL_CLAIM_NAME] = str(claim_ref["name"])
    meta["labels"] = labels

    uid = str(_meta(xr).get("uid") or "")
    ref = {
        "apiVersion": xr.get("apiVersion", ""),
        "kind": xr.get("kind", ""),
        "name": _name(xr),
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs: list[dict[str, Any]] = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    for r in refs:
        if r.get("controller") and r.get("uid", "") != uid:
            raise RenderError(
                f'cannot render composed resource "{name}" metadata: cannot set composite resource '
                f'"{_name(xr)}" as controller ref of composed resource: already controlled by '
                f"{r.get('kind')} {r.get('name')} (UID {r.get('uid')})"
            )
    for i, r in enumerate(refs):
        if r.get("uid", "") == uid:
            refs[i] = ref
            break
    else:
        refs.append(ref)
    meta["ownerReferences"] = refs
    return cd


def render_documents(
    result: RenderResult,
    *,
    include_results: bool = False,
    include_context: bool = False,
    include_full_xr: bool = False,
) -> list[dict[str, Any]]:
    """The documents ``crossplane render`` prints, in its order.

    1. the XR (apiVersion, kind, name, namespace, the desired status and the
       ``Ready`` condition; with ``include_full_xr`` (``-x``) the input spec and
       metadata too);
    2. the composed resources, sorted by composition-resource-name;
    3. with ``include_results`` (``-r``) one ``Result`` per non-fatal result;
    4. with ``include_context`` (``-c``) the final ``Context``.
    """
    docs: list[dict[str, Any]] = [_render_xr(result, include_full_xr=include_full_xr)]
    for name in sorted(result.desired.resources):
        docs.append(_render_composed(result, name, result.desired.resources[name]))
    if include_results:
        for step, r in zip(result.result_steps, result.results, strict=True):
            docs.append(
                {
                    "apiVersion": RENDER_API_VERSION,
                    "kind": "Result",
                    "step": step,
                    "severity": fnv1.Severity.Name(r.severity),
                    "message": r.message,
                }
            )
    if include_context and result.has_context:
        docs.append({"apiVersion": RENDER_API_VERSION, "kind": "Context", "fields": result.context})
    out: list[dict[str, Any]] = whole_numbers(docs)
    return out


def dump_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """Dump documents the way render prints them: each one preceded by ``---``.

    Quoting, key order and number format are go-yaml v2's, as the Crossplane
    CLI writes them (:mod:`function.goyaml`); integral floats are written as
    ints, so equal input gives equal bytes.
    """
    return goyaml.dump_documents([whole_numbers(to_jsonable(doc)) for doc in docs])
