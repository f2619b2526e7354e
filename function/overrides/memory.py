"""The function's memory of the last reconcile: a document that goes missing keeps what it decided.

Every response writes the documents it applied, content included, to
``status.stack.documents``; Crossplane stores that on the XR and sends it back
as the observed composite on the next reconcile (crossplane
internal/controller/apiextensions/composite/composition_functions.go: the
desired XR status is server-side applied after the composed resources, the
observed composite is the whole XR, and a Fatal result returns before garbage
collection and before any apply, so a refused render leaves the memory as is). A document that applied then
and does not apply now — its EnvironmentConfig deleted, unlabelled, its match
no longer selecting the XR — keeps applying from that memory, with a Warning
naming it, so its drivers, Unmanaged and Removed states, version holds and
mirrors stay in force. Only an explicit statement lets go of it:

* a tombstone: an EnvironmentConfig of the same name whose document is
  ``{retired: true}`` (every ServingStack that remembers it, fleet-wide), or
* the annotation ``servingstack.modelplane.ai/retired-environment-configs`` on
  the ServingStack, a comma-separated list of names (this ServingStack only).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import ValidationError

from function.errors import InputError, describe
from function.inputs import observed_map, plain_value
from function.model import ServingStack

from .document import (
    ADDED_FIELD,
    DOCUMENT_KEY,
    Collected,
    ComponentOverride,
    Document,
    RememberedAddition,
    content_digest,
    driver_key,
    parsed_once,
    validate,
)
from .planned import REMOVED, Added, State

RETIRE_ANNOTATION = "servingstack.modelplane.ai/retired-environment-configs"
# Where the memory lives in the XR's status (the XRD must declare it, or the
# API server prunes it and every missing document becomes a Fatal).
MEMORY_FIELD = "status.stack.documents"
RETIRE_HOW = (
    f"restore it, or retire it on purpose: an EnvironmentConfig of that name whose data.{DOCUMENT_KEY} is "
    f"{{retired: true}}, or the ServingStack annotation {RETIRE_ANNOTATION}"
)


def label(name: str) -> str:
    """A document's name as messages say it (context documents are not EnvironmentConfigs)."""
    return name if name.startswith("context:") else f"EnvironmentConfig {name}"


def _field(struct: struct_pb2.Struct, *path: str) -> struct_pb2.Value | None:
    """The value at ``path``, or None where any step is missing or not a map."""
    *parents, leaf = path
    for key in parents:
        if key not in struct.fields or struct.fields[key].WhichOneof("kind") != "struct_value":
            return None
        struct = struct.fields[key].struct_value
    return struct.fields.get(leaf)


def _items(struct: struct_pb2.Struct, *path: str) -> Sequence[struct_pb2.Value]:
    """The items of the list at ``path``; none where it is missing or not a list."""
    value = _field(struct, *path)
    return value.list_value.values if value is not None and value.WhichOneof("kind") == "list_value" else ()


def _remembered_document(entry: struct_pb2.Struct, index: int) -> Document:
    name_value = _field(entry, "name")
    body = _field(entry, DOCUMENT_KEY)
    if name_value is None or not name_value.string_value or body is None:
        raise InputError(f"ServingStack {MEMORY_FIELD}[{index}]: needs a name and a {DOCUMENT_KEY} document")
    name = name_value.string_value

    def parse(digest: bytes) -> tuple[str, Document | None]:
        raw = plain_value(body, f"ServingStack {MEMORY_FIELD}[{index}]", DOCUMENT_KEY, 2)
        where = f"{label(name)} (absent; as remembered in {MEMORY_FIELD})"
        doc = validate(raw, where, DOCUMENT_KEY)
        return name, Document(name, f"{where}: {DOCUMENT_KEY}", doc, digest, raw, remembered=True)

    remembered = parsed_once("memory", entry.SerializeToString(deterministic=True), parse)[1]
    assert remembered is not None, "parse() always returns a document"
    return remembered


def observed_stack(req: fnv1.RunFunctionRequest, serialized: bytes | None = None) -> bytes | None:
    """The observed ``status.stack`` serialized deterministically; None where it is not a map.

    Taken from ``serialized`` (``req`` serialized deterministically) when the caller has it. Read once
    per request: :func:`last_reconcile` reads a memory only where it is a map, and :func:`function.fn.run`
    compares it with the ``status.stack`` a response writes.
    """
    if serialized is not None:
        return observed_map(serialized, "status", "stack")
    stack = _field(req.observed.composite.resource, "status", "stack")
    if stack is None or stack.WhichOneof("kind") != "struct_value":
        return None
    data: bytes = stack.struct_value.SerializeToString(deterministic=True)
    return data


Remembered = tuple[tuple[str, ...], Mapping[str, Document], tuple[RememberedAddition, ...], bytes]


def last_reconcile(req: fnv1.RunFunctionRequest, observed: bytes | None) -> Remembered:
    """The documents applied at the last reconcile: their names in order, and the content remembered; the
    components documents had added then (``status.stack.added``) and a digest of them.

    ``observed``: :func:`observed_stack` of ``req``.
    """
    if observed is None:
        return (), {}, (), b""
    names, documents = _read_memory(req)
    additions, digest = _read_additions(req)
    return tuple(names), documents, additions, digest


def _read_memory(req: fnv1.RunFunctionRequest) -> tuple[list[str], dict[str, Document]]:
    composite = req.observed.composite.resource
    listed = _items(composite, "status", "stack", "environmentConfigs")
    names = [v.string_value for v in listed if v.WhichOneof("kind") == "string_value"]
    documents: dict[str, Document] = {}
    for i, entry in enumerate(_items(composite, "status", "stack", "documents")):
        if entry.WhichOneof("kind") != "struct_value":
            raise InputError(f"ServingStack {MEMORY_FIELD}[{i}]: must be a map")
        doc = _remembered_document(entry.struct_value, i)
        documents[doc.name] = doc
    names += [n for n in documents if n not in names]
    return names, documents


_STATES: tuple[State, ...] = ("Managed", "Unmanaged", "Removed")


def _read_additions(req: fnv1.RunFunctionRequest) -> tuple[tuple[RememberedAddition, ...], bytes]:
    """The components documents added at the last reconcile (``status.stack.added``), and a digest of them."""
    entries = _field(req.observed.composite.resource, "status", "stack", "added")
    if entries is None or entries.WhichOneof("kind") != "list_value" or not entries.list_value.values:
        _none_added(req)
        return (), b""
    out: list[RememberedAddition] = []
    for i, value in enumerate(entries.list_value.values):
        at = f"ServingStack {ADDED_FIELD}[{i}]"
        entry = plain_value(value, "ServingStack", f"{ADDED_FIELD}[{i}]", 3)
        if not isinstance(entry, dict):
            raise InputError(f"{at}: must be a map")
        key, document, state, body = (entry.get(f) for f in ("name", "document", "state", "component"))
        if not (isinstance(key, str) and key and isinstance(document, str) and document and state in _STATES):
            raise InputError(f"{at}: needs a name, a document, a state (Managed, Unmanaged, Removed) and a component")
        if not isinstance(body, dict):
            raise InputError(f"{at}.component: must be a map")
        try:
            over = ComponentOverride.model_validate(body)
        except ValidationError as err:
            raise InputError(describe(err, at, "component")) from None
        if over.chart is None and over.manifest is None:  # it must still describe an added component
            raise InputError(f"{at}.component: an added component's entry gives a chart or a manifest")
        out.append(RememberedAddition(key, document, state, over, body))
    return tuple(out), content_digest(entries.SerializeToString(deterministic=True))


def _none_added(req: fnv1.RunFunctionRequest) -> None:
    """With no memory of added components, status.stack.components must name none on the cluster: else the
    memory was pruned (an XRD that does not declare it), and rendering without it would delete them."""
    for value in _items(req.observed.composite.resource, "status", "stack", "components"):
        entry = value.struct_value.fields if value.HasField("struct_value") else {}
        name, source, state, rendered = (entry.get(f) for f in ("name", "source", "state", "rendered"))
        added = (
            source is not None
            and source.string_value.startswith("override:")
            and name is not None
            and not name.string_value.startswith(driver_key(""))
        )
        if added and ((state is not None and state.string_value != REMOVED) or (rendered and rendered.bool_value)):
            raise InputError(
                f"ServingStack status.stack.components lists {name.string_value if name else '?'}, which "
                f"{source.string_value.removeprefix('override:') if source else '?'} added, and {ADDED_FIELD} "
                "does not record it (pruned by an XRD that does not declare it); refusing to render without it, "
                f"which would uninstall it: declare {ADDED_FIELD} as example/xrd.yaml does"
            )


def retired_by_annotation(req: fnv1.RunFunctionRequest) -> set[str]:
    value = _field(req.observed.composite.resource, "metadata", "annotations", RETIRE_ANNOTATION)
    text = value.string_value if value is not None else ""
    return {n.strip() for n in text.split(",") if n.strip()}


def reconcile(
    req: fnv1.RunFunctionRequest,
    xr: ServingStack,
    delivered: Mapping[str, Document],
    warnings: list[str],
    observed: bytes | None,
) -> Collected:
    """The documents in force on this XR: those that apply now, plus those kept from the last reconcile.

    ``observed``: :func:`observed_stack` of ``req``.
    """
    tombstones = {n for n, d in delivered.items() if d.doc.retired}
    annotated = retired_by_annotation(req)
    applying = {n: d for n, d in delivered.items() if not d.doc.retired and d.doc.match.matches(xr)}
    notes: list[str] = []
    for name in sorted(annotated & applying.keys()):
        warnings.append(
            f"annotation {RETIRE_ANNOTATION} names {label(name)}, which applies: the annotation has no effect "
            "on it; remove the name, or it would silently let go of the document the next time it goes missing"
        )
    last, remembered, additions, digest = last_reconcile(req, observed)
    for name in last:
        if name in applying:
            continue
        if name in tombstones or name in annotated:
            how = "a tombstone document (retired: true)" if name in tombstones else f"annotation {RETIRE_ANNOTATION}"
            notes.append(f"{label(name)} retired by {how}: what it decided at the last reconcile no longer applies")
            continue
        kept = remembered.get(name)
        if kept is None:
            raise InputError(
                f"{label(name)} applied at the last reconcile (status.stack.environmentConfigs) and does not apply "
                f"now, and {MEMORY_FIELD} does not record what it said (written by an earlier version of the "
                f"function, or pruned by an XRD that does not declare it); refusing to render without it: {RETIRE_HOW}"
            )
        present = delivered.get(name)
        why = (
            f"its match ({present.doc.match.describe()}) no longer selects this ServingStack"
            if present is not None
            else "it was not delivered"
        )
        warnings.append(
            f"{label(name)} applied at the last reconcile but {why}; keeping what it decided, "
            f"as remembered in {MEMORY_FIELD} (nothing is removed or taken over): {RETIRE_HOW}"
        )
        applying[name] = kept
    ordered = sorted(applying.values(), key=lambda d: (d.doc.priority, d.name))
    unmatched = tuple(sorted(n for n, d in delivered.items() if n not in applying and not d.doc.retired))
    retired = frozenset((tombstones | annotated) - applying.keys()) if additions else frozenset()
    return Collected(
        tuple(d.name for d in ordered),
        tuple(ordered),
        tuple(warnings),
        tuple(notes),
        unmatched,
        additions=additions,
        additions_digest=digest,
        retired=retired,
    )


def entries(found: Collected) -> list[dict[str, Any]]:
    """``status.stack.documents``: what the next reconcile remembers."""
    return [
        {"name": d.name, DOCUMENT_KEY: d.body, **({"remembered": True} if d.remembered else {})}
        for d in found.documents
    ]


def kept(additions: Sequence[Added], present: Collection[str]) -> tuple[Added, ...]:
    """The added components the next reconcile remembers: all but a Removed one no longer ``present``
    (composed or observed). Until it is gone, its removal is ordered by what it depends on, which needs
    its definition."""
    return tuple(a for a in additions if a.state != REMOVED or a.key in present)


def added_entries(additions: Sequence[Added]) -> list[dict[str, Any]]:
    """``status.stack.added``: the ``kept`` added components, as the next reconcile reads them."""
    return [{"name": a.key, "document": a.document, "state": a.state, "component": a.entry} for a in additions]
