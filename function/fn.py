"""The gRPC runner: one RunFunction call in, desired state out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import grpc
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import events, legacy, overrides, requestlog, stack
from function.compose import Observed, renderer
from function.errors import InputError, describe
from function.model import KUBECONFIG, ServingStack
from function.status import write_stack_status
from function.transforms import Transform, apply_transforms


def _xr_name(raw: dict[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    name = meta.get("name", "?") if isinstance(meta, dict) else "?"
    namespace = meta.get("namespace", "") if isinstance(meta, dict) else ""
    return f"ServingStack {namespace + '/' if namespace else ''}{name}"


def _xr_fields(xr: struct_pb2.Struct) -> dict[str, Any]:
    # Only what the model reads: the observed status (our own last output)
    # is large and would cost a conversion on every reconcile.
    return {
        k: resource.struct_to_dict(xr[k]) if isinstance(xr[k], struct_pb2.Struct) else xr[k]
        for k in ("apiVersion", "kind", "metadata", "spec")
        if k in xr
    }


def parse_xr(raw: dict[str, Any]) -> ServingStack:
    try:
        xr = ServingStack.model_validate(raw)
    except ValidationError as err:
        raise InputError(describe(err, _xr_name(raw))) from None
    if xr.spec.kubeconfig() is None:
        raise InputError(f"{_xr_name(raw)}: spec.secrets: a secret of type {KUBECONFIG} is required")
    return legacy.resolve(xr, _xr_name(raw))


def select_stack(xr: ServingStack) -> stack.Stack:
    assert xr.spec.cloud is not None, "set or inferred by parse_xr"
    chosen = stack.load(xr.spec.cloud, xr.spec.accelerator)
    if chosen is None:
        pairs = ", ".join(f"{c}/{a}" for c, a in stack.available())
        raise InputError(
            f"{_xr_name(xr.model_dump())}: spec.accelerator: no {xr.spec.accelerator.value} stack for cloud "
            f"{xr.spec.cloud.value}; stacks exist for {pairs}"
        )
    return chosen


def run(req: fnv1.RunFunctionRequest, extra: Sequence[Transform] = ()) -> fnv1.RunFunctionResponse:
    """Compose one request. Bad input becomes a Fatal result, never an exception.

    ``extra`` are a fork's transforms (:mod:`function.transforms`).
    """
    rsp = response.to(req)
    try:
        raw = _xr_fields(req.observed.composite.resource)
        xr = parse_xr(raw)
        chosen = select_stack(xr)
        legacy_notes = legacy.notes(xr, "cloud" in raw.get("spec", {}), chosen, _xr_name(raw))
        found = overrides.collect(req, rsp, xr)
        if found is None:
            return rsp  # asked Crossplane for the EnvironmentConfigs; render once they arrive
        plan, warnings, notes = overrides.plan(chosen, found)
        pending = renderer(chosen).render(xr, Observed(req.observed.resources), plan, into=rsp.desired.resources)
        apply_transforms(extra, xr, rsp.desired.resources)
    except InputError as err:
        return _fatal(req, str(err))
    if pending:
        # Only the ProviderConfigs (which are ready at once) may be desired so
        # far; Crossplane would call the XR Available when nothing desired is
        # unready (crossplane internal/controller/apiextensions/composite/
        # reconciler.go). Once everything is composed Crossplane's own check
        # decides: Ready needs every composed resource ready, and its message
        # names the unready ones (an explicit readiness would drop that list).
        rsp.desired.composite.ready = fnv1.READY_FALSE
    status = rsp.desired.composite.resource.get_or_create_struct("status")
    address = _gateway_address(req)
    if address:
        status["gateway"] = {"address": address}
    write_stack_status(status, chosen, plan, found, rsp.desired.resources.keys())
    normals = [*found.notes, *notes, overrides.summary(chosen, found, plan)]
    events.report(req, rsp, [*legacy_notes, *found.warnings, *warnings], normals, status["stack"])
    return rsp


def _fatal(req: fnv1.RunFunctionRequest, message: str) -> fnv1.RunFunctionResponse:
    # A fresh response: nothing half-rendered reaches Crossplane, which keeps
    # the last applied state on Fatal.
    rsp = response.to(req)
    response.fatal(rsp, message)
    return rsp


def _gateway_address(req: fnv1.RunFunctionRequest) -> str:
    """The address the cloud gave the Gateway, once the provider observed one."""
    if "gateway" not in req.observed.resources:
        return ""
    observed = req.observed.resources["gateway"].resource
    try:
        addresses = observed["status"]["atProvider"]["manifest"]["status"]["addresses"]
        return str(addresses[0]["value"]) if len(addresses) else ""
    except (KeyError, ValueError, TypeError, IndexError):
        return ""


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction; every request is independent and never raises.

    ``transforms`` edit the rendered resources before the response (a fork's
    own rules, :mod:`function.transforms`).
    """

    def __init__(self, transforms: Sequence[Transform] = ()) -> None:
        self.log = logging.get_logger()
        self.transforms = tuple(transforms)

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        start = time.perf_counter()
        try:
            rsp = run(req, self.transforms)
        except Exception as err:  # a bug must not take the server down with it
            self.log.exception("Unexpected error composing ServingStack")
            rsp = _fatal(req, f"internal error composing ServingStack: {type(err).__name__}: {err}")
        requestlog.record(self.log, req, rsp, time.perf_counter() - start)
        return rsp
