"""What the served function logs per request.

* every Fatal at info, with the XR's name and the message (what an operator
  reads in the function's pod logs when an XR stops reconciling);
* with ``--debug``, one line per request: the XR, the stack, the override
  documents applied, the result and how long it took.

Fields are read from the request and the response alone (``status.stack``
says which stack and which documents), so logging needs nothing from the
runner's internals.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2


def _field(node: struct_pb2.Struct, *path: str) -> Any:
    value: Any = node
    for key in path:
        if not isinstance(value, struct_pb2.Struct) or key not in value:
            return None
        value = value[key]
    return value


def logged_xr(req: fnv1.RunFunctionRequest) -> str:
    """``namespace/name`` of the observed XR (``?`` where missing)."""
    xr = req.observed.composite.resource
    name, namespace = _field(xr, "metadata", "name"), _field(xr, "metadata", "namespace")
    name = name if isinstance(name, str) and name else "?"
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


def outcome(rsp: fnv1.RunFunctionResponse, resources: int) -> str:
    """Fatal, Requirements (asked Crossplane for the override documents), Warning or Normal.

    ``resources``: how many composed resources the response desires.
    """
    severities = {r.severity for r in rsp.results}
    if fnv1.SEVERITY_FATAL in severities:
        return "Fatal"
    if not resources and rsp.requirements.resources:
        return "Requirements"
    return "Warning" if fnv1.SEVERITY_WARNING in severities else "Normal"


@dataclass(frozen=True)
class Summary:
    """What the log says of a response: kept with a memoized response, so a repeat is logged alike."""

    fatals: tuple[str, ...]
    stack_id: str
    documents: tuple[str, ...]
    result: str
    resources: int

    @property
    def internal_error(self) -> bool:
        return any(m.startswith("internal error") for m in self.fatals)


def summarize(
    rsp: fnv1.RunFunctionResponse, resources: int | None = None, stack: tuple[str, tuple[str, ...]] | None = None
) -> Summary:
    """What the log says of ``rsp``; ``resources`` (how many composed resources it desires) and ``stack`` (its
    ``status.stack``'s id and environmentConfigs) when they are not in the message (:mod:`function.wire`)."""
    resources = len(rsp.desired.resources) if resources is None else resources
    if stack is None:
        xr = rsp.desired.composite.resource
        stack_id, listed = _field(xr, "status", "stack", "id"), _field(xr, "status", "stack", "environmentConfigs")
        documents = tuple(d for d in listed if isinstance(d, str)) if isinstance(listed, struct_pb2.ListValue) else ()
        stack = (stack_id if isinstance(stack_id, str) else "", documents)
    return Summary(
        fatals=tuple(r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL),
        stack_id=stack[0] or "-",
        documents=stack[1],
        result=outcome(rsp, resources),
        resources=resources,
    )


def record(log: Any, req: fnv1.RunFunctionRequest, summary: Summary, seconds: float) -> None:
    """Log one request: its Fatals at info, the summary line at debug (built only where debug is logged)."""
    log = log.bind()  # get_logger's lazy proxy would assemble a logger again for every line
    # A filtering logger (the served function's, at info) says whether it logs debug; others log all.
    enabled = getattr(log, "is_enabled_for", None)
    debug = enabled is None or bool(enabled(logging.DEBUG))
    if not summary.fatals and not debug:
        return
    name = logged_xr(req)
    for message in summary.fatals:
        log.info("Fatal result", xr=name, message=message)
    if debug:
        log.debug(
            "RunFunction",
            xr=name,
            stack_id=summary.stack_id,  # not "stack": structlog renders that key as a stack trace
            documents=list(summary.documents),
            result=summary.result,
            resources=summary.resources,
            duration_ms=round(seconds * 1000, 2),
        )
