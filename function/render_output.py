"""The documents ``crossplane render`` prints for a :class:`~function.offline.RenderResult`, and their YAML.

Render's output, in its order and shape: the XR with the desired status and
the Ready condition render computes, each composed resource with the metadata
render sets (names, the composite label, the controller reference), then the
results and the context when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import goyaml
from function.offline import (
    ANNOTATION_COMPOSITION_RESOURCE_NAME,
    RenderError,
    RenderResult,
    meta_labels,
    meta_name,
    meta_namespace,
    metadata,
)
from function.tree import struct_to_dict, to_jsonable, whole_numbers

LABEL_COMPOSITE = "crossplane.io/composite"
LABEL_CLAIM_NAME = "crossplane.io/claim-name"
LABEL_CLAIM_NAMESPACE = "crossplane.io/claim-namespace"
RENDER_API_VERSION = "render.crossplane.io/v1beta1"
CONDITION_TIME = "2024-01-01T00:00:00Z"
"""render stamps every condition with this fixed lastTransitionTime."""

# Conditions render sets itself; a function's conditions of these types are not copied onto the XR.
_SYSTEM_CONDITION_TYPES = frozenset({"Ready", "Synced", "Healthy"})
# render's "Unready resources: a, b, c, and N more" names this many.
_UNREADY_NAMED = 3
_CONDITION_STATUS = {fnv1.STATUS_CONDITION_TRUE: "True", fnv1.STATUS_CONDITION_FALSE: "False"}  # else "Unknown"


def _first_n_and_some_more(names: Sequence[str], n: int = _UNREADY_NAMED) -> str:
    names = sorted(names)
    if len(names) > n:
        return f"{', '.join(names[:n])}, and {len(names) - n} more"
    if len(names) == n:
        return f"{', '.join(names[: n - 1])}, and {names[n - 1]}"
    return ", ".join(names)


def _set_condition(obj: dict[str, Any], new: dict[str, Any]) -> None:
    """crossplane-runtime's SetConditions: replace a condition of the same type unless equal, else append."""
    status = obj.setdefault("status", {})
    existing: list[dict[str, Any]] = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    keys = ("type", "status", "reason", "message", "observedGeneration")
    same_type = [i for i, cur in enumerate(existing) if cur.get("type") == new.get("type")]
    for i in same_type:
        if any(existing[i].get(k) != new.get(k) for k in keys):
            existing[i] = new
    if not same_type:
        existing.append(new)
    status["conditions"] = existing


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
    _set_or_drop(meta, "name", meta_name(xr_in))
    _set_or_drop(meta, "namespace", meta_namespace(xr_in))

    unready = [name for name, r in desired.resources.items() if r.ready != fnv1.READY_TRUE]
    ready = desired.composite.ready
    cond: dict[str, Any] = {"type": "Ready", "status": "True", "reason": "Available"}
    if ready == fnv1.READY_FALSE or (ready == fnv1.READY_UNSPECIFIED and unready):
        cond = {"type": "Ready", "status": "False", "reason": "Creating"}
        if ready == fnv1.READY_UNSPECIFIED:
            cond["message"] = f"Unready resources: {_first_n_and_some_more(unready)}"
    _set_condition(doc, {**cond, "lastTransitionTime": CONDITION_TIME})
    for c in result.conditions:
        if c.type in _SYSTEM_CONDITION_TYPES:
            continue
        fc: dict[str, Any] = {
            "type": c.type,
            "status": _CONDITION_STATUS.get(c.status, "Unknown"),
            "lastTransitionTime": CONDITION_TIME,
            "reason": c.reason,
        }
        if c.message:
            fc["message"] = c.message
        _set_condition(doc, fc)

    if include_full_xr:
        doc.update({key: xr_in[key] for key in ("spec", "metadata") if key in xr_in})
    return doc


def _render_composed(result: RenderResult, name: str, resource: fnv1.Resource) -> dict[str, Any]:
    xr = result.xr
    cd = struct_to_dict(resource.resource)
    meta: dict[str, Any] = cd.setdefault("metadata", {})
    observed = result.observed.get(name)
    if observed is not None:
        _set_or_drop(meta, "namespace", meta_namespace(observed))
        _set_or_drop(meta, "name", meta_name(observed))
        _set_or_drop(meta, "generateName", str(metadata(observed).get("generateName") or ""))

    xr_labels = meta_labels(xr)
    prefix = str(xr_labels.get(LABEL_COMPOSITE) or meta_name(xr))
    if not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = prefix + "-"
    if meta_namespace(xr):
        meta["namespace"] = meta_namespace(xr)

    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_COMPOSITION_RESOURCE_NAME: name}
    labels = {**(meta.get("labels") or {}), LABEL_COMPOSITE: prefix}
    claim_ref = xr["spec"].get("claimRef") if isinstance(xr.get("spec"), Mapping) else None
    if xr_labels.get(LABEL_CLAIM_NAME) and xr_labels.get(LABEL_CLAIM_NAMESPACE):
        labels[LABEL_CLAIM_NAMESPACE] = xr_labels[LABEL_CLAIM_NAMESPACE]
        labels[LABEL_CLAIM_NAME] = xr_labels[LABEL_CLAIM_NAME]
    elif isinstance(claim_ref, Mapping) and claim_ref.get("name"):
        labels[LABEL_CLAIM_NAMESPACE] = str(claim_ref.get("namespace") or "")
        labels[LABEL_CLAIM_NAME] = str(claim_ref["name"])
    meta["labels"] = labels

    uid = str(metadata(xr).get("uid") or "")
    ref = {
        "apiVersion": xr.get("apiVersion", ""),
        "kind": xr.get("kind", ""),
        "name": meta_name(xr),
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs: list[dict[str, Any]] = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    for r in refs:
        if r.get("controller") and r.get("uid", "") != uid:
            raise RenderError(
                f'cannot render composed resource "{name}" metadata: cannot set composite resource '
                f'"{meta_name(xr)}" as controller ref of composed resource: already controlled by '
                f"{r.get('kind')} {r.get('name')} (UID {r.get('uid')})"
            )
    same = [i for i, r in enumerate(refs) if r.get("uid", "") == uid]
    if same:
        refs[same[0]] = ref
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
    resources = result.desired.resources
    docs = [_render_xr(result, include_full_xr=include_full_xr)]
    docs += [_render_composed(result, name, resources[name]) for name in sorted(resources)]
    if include_results:
        docs += [
            {
                "apiVersion": RENDER_API_VERSION,
                "kind": "Result",
                "step": step,
                "severity": fnv1.Severity.Name(r.severity),
                "message": r.message,
            }
            for step, r in zip(result.result_steps, result.results, strict=True)
        ]
    if include_context and result.has_context:
        docs.append({"apiVersion": RENDER_API_VERSION, "kind": "Context", "fields": result.context})
    return cast(list[dict[str, Any]], whole_numbers(docs))


def dump_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """Dump documents the way render prints them: each one preceded by ``---``.

    Quoting, key order and number format are go-yaml v2's, as the Crossplane
    CLI writes them (:mod:`function.goyaml`); integral floats are written as
    ints, so equal input gives equal bytes.
    """
    return goyaml.dump_documents([whole_numbers(to_jsonable(doc)) for doc in docs])
