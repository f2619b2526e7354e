"""The gRPC runner: one RunFunction call in, desired state out."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf.message import DecodeError

from function import events, legacy, overrides, requestlog, tenancy, transforms
from function.cache import BoundedCache
from function.compose import Desired, Observed, render
from function.encode import Encoding, Kept, keep, read_varint, restore, struct_bytes, upb_order, varint
from function.errors import InputError, bounded, excerpt
from function.inputs import MAX_RESPONSE_BYTES, Refused, check_request, undecodable
from function.model import ServingStack
from function.overrides import memory
from function.overrides.collect import secrets_policy
from function.stack import refuse_switch, select_stack
from function.status import StackStatus, converted_stack_status
from function.transforms import Transform, apply_transforms
from function.xr import observed_xr


class Rendered(NamedTuple):
    """A response without its desired composed resources, which ``resources`` holds encoded (see
    :func:`serialize`); ``status.stack`` as it wrote it, if it did; the large encodings it shares with other
    responses, in order (:func:`function.encode.keep`); and whether Crossplane may send the very request
    again: not once the response asks for resources or writes a ``status.stack`` other than the observed one
    (the next request carries them)."""

    rsp: fnv1.RunFunctionResponse
    resources: dict[str, bytes]
    stack: StackStatus | None = None
    shared: tuple[bytes, ...] = ()
    asked_again: bool = True


def run(req: fnv1.RunFunctionRequest, extra: Sequence[Transform] = (), serialized: bytes | None = None) -> Rendered:
    """Compose one request. Bad input becomes a Fatal result, never an exception.

    ``extra`` are a fork's transforms (:mod:`function.transforms`);
    ``serialized`` is the request serialized deterministically, when the caller has it.
    """
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
            # Asked Crossplane for the EnvironmentConfigs; render once they arrive.
            return Rendered(rsp, _carried(rsp), asked_again=False)
        plan = overrides.plan(chosen, found)
        desired, pending = render(xr, Observed(req.observed.resources), plan.planned)
        resources, shared = _encoded(rsp, xr, desired, extra)
    except InputError as err:
        return Rendered(_fatal(req, str(err)), {})
    rendered = set(resources)
    present = {a.key for a in plan.added if a.key in rendered or a.key in req.observed.resources}
    stack_status = converted_stack_status(chosen, plan.planned, found, rendered, memory.kept(plan.added, present))
    _write_composite(rsp, stack_status, _gateway_address(req), pending=bool(pending))
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
    stack_changed = observed_stack != stack_status.serialized
    events.report(req, rsp, warned, normals, stack_changed=stack_changed)
    # The composite, and so status.stack (one object per distinct status), goes before the resources.
    return Rendered(rsp, resources, stack_status, (stack_status.serialized, *shared), asked_again=not stack_changed)


# Transforms edit lasting parts in place until the response is encoded and they are put back: one
# request at a time may (the server runs one; a library caller might run several threads), and a
# transform may not render with transforms itself (it would see, and put back, its caller's edits).
_EDITING = threading.Lock()
_EDITOR = threading.local()  # .on: this thread holds _EDITING


def _encoded(
    rsp: fnv1.RunFunctionResponse, xr: ServingStack, desired: Desired, extra: Sequence[Transform]
) -> tuple[dict[str, bytes], list[bytes]]:
    """The desired composed resources encoded (:func:`_resources`), ``extra`` transforms applied first."""
    enc = Encoding()
    if not extra:
        return _resources(rsp, desired, apply_transforms(extra, xr, desired, enc), extra, enc)
    if getattr(_EDITOR, "on", False):
        raise InputError(
            f"transforms {transforms.names(extra)}: called while another render's transforms run in this thread; "
            "a transform may not render a ServingStack with transforms itself"
        )
    with _EDITING:
        _EDITOR.on = True
        try:
            return _resources(rsp, desired, apply_transforms(extra, xr, desired, enc), extra, enc)
        finally:
            restore(enc)
            _EDITOR.on = False


def _resources(
    rsp: fnv1.RunFunctionResponse,
    desired: Desired,
    bodies: Mapping[str, Any],
    extra: Sequence[Transform],
    enc: Encoding,
) -> tuple[dict[str, bytes], list[bytes]]:
    """Every composed resource desired, encoded as a ``Resource``: ours with their body in ``bodies`` (what
    ``extra`` transforms made of the rendered one), and those an earlier step desired (taken out of ``rsp``).
    A resource both desire takes our body, and our readiness where we have one. Only transforms can have put
    into a body something that is not JSON. And the large encodings they share, in the response's order."""
    carried = rsp.desired.resources
    out = {}
    shared: dict[str, list[bytes]] = {}
    for key, (_, ready) in desired.items():
        body = bodies[key]
        enc.shared = shared[key] = []
        try:
            if type(body) is not dict:
                raise TypeError(f"a resource is a map, not a {type(body).__name__}")
            data = struct_bytes(body, enc)
        except TypeError as err:
            raise InputError(
                f"transforms {transforms.names(extra)}: resource {key}: {err}; a resource holds JSON values only"
            ) from None
        if key in carried:  # an earlier step's: its other fields stay
            earlier = carried[key]
            earlier.resource.Clear()
            earlier.resource.MergeFromString(data)
            if ready:
                earlier.ready = fnv1.READY_TRUE
            continue
        out[key] = _RESOURCE + varint(len(data)) + data + (_READY_TRUE if ready else b"")
    out.update(_carried(rsp))
    return out, [part for key in upb_order(out) for part in shared.get(key, ())]


# Resource fields (run_function.proto): resource (1, a Struct), ready (3, an enum).
_RESOURCE = b"\x0a"
_READY_TRUE = b"\x18" + bytes((fnv1.READY_TRUE,))


def _carried(rsp: fnv1.RunFunctionResponse) -> dict[str, bytes]:
    """The composed resources ``rsp`` desires, encoded, taken out of it."""
    carried = rsp.desired.resources
    out = {key: carried[key].SerializeToString(deterministic=True) for key in carried}
    carried.clear()
    return out


def serialize(rsp: fnv1.RunFunctionResponse, resources: Mapping[str, bytes]) -> bytes:
    """``rsp`` serialized deterministically, with ``resources`` as its desired composed resources.

    ``RunFunctionResponse`` fields go in number order: ``meta`` (1), then ``desired`` (2), whose ``resources``
    map (2) follows its ``composite`` (1) and is written here, its entries in upb's order (the bytes are
    ``SerializeToString(deterministic=True)``'s, tests/test_encode.py).
    """
    data: bytes = rsp.SerializeToString(deterministic=True)
    if not resources:
        return data
    pos = _meta_end(data)
    head, rest, desired = data[:pos], data[pos:], b""
    if rest[:1] == _DESIRED:
        length, start = read_varint(rest, 1)
        desired, rest = rest[start : start + length], rest[start + length :]
    parts = [desired]
    for key in upb_order(resources):
        name, value = key.encode(), resources[key]
        entry = _RESOURCE + varint(len(name)) + name + _MAP_VALUE + varint(len(value)) + value
        parts += (_RESOURCES, varint(len(entry)), entry)
    body = b"".join(parts)
    return b"".join((head, _DESIRED, varint(len(body)), body, rest))


_META = b"\x0a"  # RunFunctionResponse.meta (1)
_DESIRED = b"\x12"  # RunFunctionResponse.desired (2)
_RESOURCES = b"\x12"  # State.resources (2)
_MAP_VALUE = b"\x12"  # a map entry's value (2); its key is field 1, as _RESOURCE


def _write_composite(rsp: fnv1.RunFunctionResponse, stack_status: StackStatus, address: str, *, pending: bool) -> None:
    """The desired composite: ``status.stack``, ``status.gateway`` once the Gateway has an address, and not
    ready while components are ``pending``; beside what an earlier step desired of it."""
    # While components wait, only the ProviderConfigs (which are ready at
    # once) may be desired so far; Crossplane would call the XR Available
    # when nothing desired is unready (crossplane internal/controller/
    # apiextensions/composite/reconciler.go). Once everything is composed
    # Crossplane's own check decides: Ready needs every composed resource
    # ready, and its message names the unready ones (an explicit readiness
    # would drop that list).
    composite = rsp.desired.composite
    if pending:
        composite.ready = fnv1.READY_FALSE
    status = composite.resource.get_or_create_struct("status")
    if address:
        status["gateway"] = {"address": address}
    stack = status.get_or_create_struct("stack")
    stack.Clear()
    stack.MergeFromString(stack_status.serialized)


def _response_to(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """``response.to``: the desired state and context carried over, unless they nest too deep to copy.

    The protobuf runtime copies a message by serializing and parsing it, and
    parsing stops at its recursion limit (see function.inputs).
    """
    try:
        return response.to(req)
    except DecodeError as err:
        raise InputError(undecodable(req.SerializeToString(), err)) from None


def _fresh(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """A response carrying only the request's tag (and the SDK's TTL): nothing of the request's state."""
    return response.to(fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag=req.meta.tag)))


def _fatal(req: fnv1.RunFunctionRequest, message: str) -> fnv1.RunFunctionResponse:
    # Nothing half-rendered reaches Crossplane, which stops the pipeline and
    # keeps the last applied state on Fatal.
    rsp = _fresh(req)
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


def _meta_end(data: bytes) -> int:
    """Where a deterministic serialization's meta field ends: it is written first (fields go in number order)."""
    if not data.startswith(_META):
        return 0
    length, start = read_varint(data, 1)
    return start + length


def _meta(req: fnv1.RunFunctionRequest) -> bytes:
    """The meta field of the response to ``req`` (its tag, the SDK's TTL) alone, serialized: what a kept
    response is sent after."""
    return serialize(fnv1.RunFunctionResponse(meta=_fresh(req).meta), {})


def _too_large(resources: Mapping[str, bytes], size: int) -> str:
    sizes = {key: len(r) for key, r in resources.items()}
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
        # the request log says of them; as function.encode.Kept: a full
        # stack's ~70 KB are mostly encodings every cluster of its stack
        # shares, so an entry costs its own few KB and the default budget
        # holds a fleet of ten thousand. Per runner: its transforms are part
        # of what a response depends on.
        self._responses: BoundedCache[bytes, tuple[Kept, requestlog.Summary]] = BoundedCache("responses")

    def _compute(
        self, req: fnv1.RunFunctionRequest, serialized: bytes
    ) -> tuple[bytes, requestlog.Summary, tuple[bytes, ...], bool]:
        """The response to ``req``, serialized with its meta; what the log says of it; what it shares; whether
        the same request may come again."""
        try:
            rsp, resources, stack_status, shared, again = run(req, self.transforms, serialized)
        except Exception as err:  # a bug must not take the server down with it
            self.log.exception("Unexpected error composing ServingStack")
            rsp = _fatal(req, f"internal error composing ServingStack: {type(err).__name__}: {err}")
            resources, stack_status, shared, again = {}, None, (), True
        data = serialize(rsp, resources)
        if len(data) > MAX_RESPONSE_BYTES:
            rsp, resources, stack_status, shared = _fatal(req, _too_large(resources, len(data))), {}, None, ()
            data, again = serialize(rsp, {}), True
        said = None if stack_status is None else stack_status.said
        return data, requestlog.summarize(rsp, len(resources), said), shared, again

    def respond(self, req: fnv1.RunFunctionRequest | Refused) -> bytes:
        """The serialized response, as the gRPC server sends it: computed once per distinct request content."""
        start = time.perf_counter()
        if isinstance(req, Refused):  # the server's decoder refused it; see function.inputs
            rsp = _fatal(req.req, req.reason)
            requestlog.record(self.log, req.req, requestlog.summarize(rsp), time.perf_counter() - start)
            return serialize(rsp, {})
        serialized = req.SerializeToString(deterministic=True)
        key = hashlib.sha256(memoryview(serialized)[_meta_end(serialized) :]).digest()
        hit = self._responses.get(key)
        if hit is None:
            data, summary, shared, again = self._compute(req, serialized)
            # Kept unless it is a bug's, or the XR's next request will differ (a new cluster's first status):
            # at fleet scale those would only push out what is asked for again.
            if again and not summary.internal_error:
                kept = keep(data, shared, _meta_end(data))  # the tag differs per call
                self._responses.put(key, (kept, summary), kept.weight())
            requestlog.record(self.log, req, summary, time.perf_counter() - start)
            return data
        requestlog.record(self.log, req, hit[1], time.perf_counter() - start)
        return b"".join((_meta(req), *hit[0].pieces()))

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest | Refused, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        """In process: the very bytes the server would send, parsed."""
        rsp: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(self.respond(req))
        return rsp

    async def serve_bytes(self, req: fnv1.RunFunctionRequest | Refused, _: grpc.aio.ServicerContext) -> bytes:
        """The server's handler: the response goes out as serialized here, not serialized again."""
        return self.respond(req)
