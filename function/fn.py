"""The gRPC runner: one RunFunction call in, desired state out."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import NamedTuple

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf.message import DecodeError

from function import events, legacy, overrides, requestlog, tenancy, wire
from function.cache import BoundedCache
from function.compose import Observed, renderer
from function.errors import InputError, bounded, excerpt
from function.inputs import MAX_RESPONSE_BYTES, Refused, check_request, undecodable
from function.overrides import memory
from function.overrides.collect import secrets_policy
from function.stack import refuse_switch, select_stack
from function.status import StackStatus, converted_stack_status
from function.transforms import Transform, apply_transforms
from function.xr import observed_xr


class Rendered(NamedTuple):
    """A response; the desired state it carries encoded beside it (:func:`function.wire.serialize` puts it
    in); ``status.stack`` as it wrote it, if it did."""

    rsp: fnv1.RunFunctionResponse
    desired: wire.Resources
    stack: StackStatus | None = None


def run(req: fnv1.RunFunctionRequest, extra: Sequence[Transform] = (), serialized: bytes | None = None) -> Rendered:
    """Compose one request. Bad input becomes a Fatal result, never an exception.

    ``extra`` are a fork's transforms (:mod:`function.transforms`);
    ``serialized`` is the request serialized deterministically, when the caller has it.
    """
    composed = wire.Resources()
    try:
        check_request(req, serialized)
        rsp = _response_to(req)
        xr, name, cloud_given = observed_xr(req.observed.composite.resource, serialized)
        # Before anything is asked for or rendered: a secret outside the XR's reach renders nothing.
        tenancy.check_secrets(xr, name, secrets_policy(req))
        chosen = select_stack(xr)
        refuse_switch(chosen, req.observed.resources, name)
        legacy_notes = legacy.notes(xr, cloud_given, chosen.id, chosen.driver_root, name)
        observed_stack = memory.observed_stack(req, serialized)
        found = overrides.collect(req, rsp, xr, observed_stack)
        if found is None:
            return Rendered(rsp, composed)  # asked Crossplane for the EnvironmentConfigs; render once they arrive
        plan = overrides.plan(chosen, found)
        pending = renderer(chosen).render(xr, Observed(req.observed.resources), plan.planned, into=composed)
        if extra or rsp.desired.resources:
            # Transforms edit messages, and an earlier step's resources are
            # interleaved with ours: both take the message path.
            composed.move_into(rsp.desired)
            apply_transforms(extra, xr, rsp.desired.resources)
    except InputError as err:
        return Rendered(_fatal(req, str(err)), wire.Resources())
    rendered = {*composed, *rsp.desired.resources}
    present = {a.key for a in plan.added if a.key in rendered or a.key in req.observed.resources}
    stack_status = converted_stack_status(chosen, plan.planned, found, rendered, memory.kept(plan.added, present))
    _write_composite(rsp, composed, stack_status, _gateway_address(req), pending=bool(pending))
    normals = [
        bounded(n)
        for n in (
            *found.notes,
            *plan.notes,
            overrides.summary(chosen, found, plan.planned, [a.key for a in plan.added]),
        )
    ]
    warned = [bounded(w) for w in (*legacy_notes, *found.warnings, *plan.warnings)]
    # Compared as deterministic serializations, equal exactly when the messages are (upb compares
    # them alike: map order aside, bit for bit, unknown fields included); the observed one is read
    # once per request.
    events.report(req, rsp, warned, normals, stack_changed=observed_stack != stack_status.serialized)
    return Rendered(rsp, composed, stack_status)


def _write_composite(
    rsp: fnv1.RunFunctionResponse, composed: wire.Resources, stack_status: StackStatus, address: str, *, pending: bool
) -> None:
    """The desired composite: ``status.stack``, ``status.gateway`` once the Gateway has an address, and not
    ready while components are ``pending``.

    Encoded beside the message, unless an earlier step desired the composite: then ours goes into its.
    """
    # While components wait, only the ProviderConfigs (which are ready at
    # once) may be desired so far; Crossplane would call the XR Available
    # when nothing desired is unready (crossplane internal/controller/
    # apiextensions/composite/reconciler.go). Once everything is composed
    # Crossplane's own check decides: Ready needs every composed resource
    # ready, and its message names the unready ones (an explicit readiness
    # would drop that list).
    ready = fnv1.READY_FALSE if pending else fnv1.READY_UNSPECIFIED
    composite = rsp.desired.composite
    if composite.resource.fields or composite.ready or composite.connection_details:
        if pending:
            composite.ready = ready
        status = composite.resource.get_or_create_struct("status")
        if address:
            status["gateway"] = {"address": address}
        status.get_or_create_struct("stack").CopyFrom(stack_status.struct)
        return
    rsp.desired.ClearField("composite")
    status = {"stack": stack_status.value}
    if address:
        status["gateway"] = wire.struct_value({"address": wire.string_value(address)})
    composed.set_composite({"status": wire.struct_value(status)}, ready)


def _response_to(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """``response.to``: the desired state and context carried over, unless they nest too deep to copy.

    The protobuf runtime copies a message by serializing and parsing it, and
    parsing stops at its recursion limit (see function.inputs).
    """
    try:
        return response.to(req)
    except DecodeError as err:
        raise InputError(undecodable(req.SerializeToString(), err)) from None


def _fatal(req: fnv1.RunFunctionRequest, message: str) -> fnv1.RunFunctionResponse:
    # A fresh response carrying only the request's tag: nothing half-rendered
    # reaches Crossplane, which stops the pipeline and keeps the last applied
    # state on Fatal.
    rsp = response.to(fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag=req.meta.tag)))
    response.fatal(rsp, bounded(message))
    return rsp


def _gateway_address(req: fnv1.RunFunctionRequest) -> str:
    """The address the cloud gave the Gateway, once the provider observed one."""
    if "gateway" not in req.observed.resources:
        return ""
    observed = req.observed.resources["gateway"].resource
    try:
        addresses = observed["status"]["atProvider"]["manifest"]["status"]["addresses"]
        value = addresses[0]["value"] if len(addresses) else ""
    except (KeyError, ValueError, TypeError, IndexError):
        return ""
    # A provider reporting something other than a string is not believed.
    return value if isinstance(value, str) else ""


_META_FIELD = b"\x0a"  # RunFunctionRequest/Response field 1 (meta), length-delimited


def _without_meta(data: bytes) -> memoryview:
    """A deterministic serialization without its meta field, which it writes first (fields go in number order);
    a view, not a copy."""
    view = memoryview(data)
    if not data.startswith(_META_FIELD):
        return view
    length, shift, pos = 0, 0, 1
    while True:
        byte = data[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return view[pos + length :]
        shift += 7


def _serialize(rsp: fnv1.RunFunctionResponse) -> bytes:
    data: bytes = rsp.SerializeToString(deterministic=True)
    return data


def _meta(req: fnv1.RunFunctionRequest) -> bytes:
    """The meta field of the response to ``req`` (its tag, the SDK's TTL) alone, serialized: what a kept
    response is sent after."""
    meta = response.to(fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag=req.meta.tag))).meta
    return _serialize(fnv1.RunFunctionResponse(meta=meta))


def _too_large(rsp: fnv1.RunFunctionResponse, composed: wire.Resources, size: int) -> str:
    sizes = {**{key: r.ByteSize() for key, r in rsp.desired.resources.items()}, **composed.sizes()}
    largest = sorted(((n, key) for key, n in sizes.items()), reverse=True)[:3]
    parts = ", ".join(f"{excerpt(key)} ({n} bytes)" for n, key in largest)
    return (
        f"the rendered response: {size} bytes, above the {MAX_RESPONSE_BYTES} bytes Crossplane accepts from a "
        f"function; the largest composed resources: {parts}; make the override documents that change them smaller"
    )


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction; every request is independent and never raises.

    ``transforms`` edit the rendered resources before the response (a fork's
    own rules, :mod:`function.transforms`).
    """

    def __init__(self, transforms: Sequence[Transform] = ()) -> None:
        self.log = logging.get_logger()
        self.transforms = tuple(transforms)
        # Whole responses by request content: Crossplane calls again with the
        # same request on every reconcile (and caches responses itself by the
        # same rule, keyed by the SHA-256 of the deterministically serialized
        # request: internal/xfn/utils.go Tag, internal/xfn/cached; SHA-256 is
        # also the fastest hash hashlib has where the CPU computes it, as
        # current x86 (SHA-NI) and arm64 (SHA2 extensions) do). Kept
        # serialized, without their meta (the tag differs per call), with what
        # the request log says of them: ~60 KB for a full stack, so the default
        # budget holds about a thousand clusters. Per runner: its transforms
        # are part of what a response depends on.
        self._responses: BoundedCache[bytes, tuple[memoryview, requestlog.Summary]] = BoundedCache("responses")

    def _compute(self, req: fnv1.RunFunctionRequest, serialized: bytes) -> tuple[bytes, requestlog.Summary]:
        """The response to ``req``, serialized with its meta; what the log says of it."""
        try:
            rsp, composed, stack_status = run(req, self.transforms, serialized)
        except Exception as err:  # a bug must not take the server down with it
            self.log.exception("Unexpected error composing ServingStack")
            rsp = _fatal(req, f"internal error composing ServingStack: {type(err).__name__}: {err}")
            composed, stack_status = wire.Resources(), None
        data = wire.serialize(rsp, composed)
        if len(data) > MAX_RESPONSE_BYTES:
            rsp = _fatal(req, _too_large(rsp, composed, len(data)))
            composed, stack_status = wire.Resources(), None
            data = _serialize(rsp)
        said = None if stack_status is None else stack_status.said
        return data, requestlog.summarize(rsp, len(rsp.desired.resources) + len(composed), said)

    def respond(self, req: fnv1.RunFunctionRequest | Refused) -> bytes:
        """The serialized response, as the gRPC server sends it: computed once per distinct request content."""
        start = time.perf_counter()
        if isinstance(req, Refused):  # the server's decoder refused it; see function.inputs
            rsp = _fatal(req.req, req.reason)
            requestlog.record(self.log, req.req, requestlog.summarize(rsp), time.perf_counter() - start)
            return _serialize(rsp)
        serialized = req.SerializeToString(deterministic=True)
        key = hashlib.sha256(_without_meta(serialized)).digest()
        hit = self._responses.get(key)
        if hit is None:
            data, summary = self._compute(req, serialized)
            if not summary.internal_error:  # a bug is not worth keeping
                kept = _without_meta(data)  # the tag differs per call
                self._responses.put(key, (kept, summary), len(kept))
            requestlog.record(self.log, req, summary, time.perf_counter() - start)
            return data
        requestlog.record(self.log, req, hit[1], time.perf_counter() - start)
        return _meta(req) + hit[0]

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest | Refused, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        """In process: the very bytes the server would send, parsed."""
        rsp: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(self.respond(req))
        return rsp

    async def serve_bytes(self, req: fnv1.RunFunctionRequest | Refused, _: grpc.aio.ServicerContext) -> bytes:
        """The server's handler: the response goes out as serialized here, not serialized again."""
        return self.respond(req)
