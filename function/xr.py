"""The ServingStack a request carries: named for messages, validated, and its v0.3.1 fields resolved."""

from __future__ import annotations

from typing import Any, NamedTuple

from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import legacy
from function.cache import PYTHON_FACTOR, BoundedCache
from function.errors import InputError, describe, excerpt
from function.inputs import observed_map, plain_value
from function.model import KUBECONFIG, Metadata, ServingStack, ServingStackSpec

# The metadata the model reads; the rest (managedFields, annotations …) is
# Kubernetes' and can be large, so it is not converted on every reconcile.
_METADATA_READ = tuple(Metadata.model_fields)


def xr_name(raw: dict[str, Any]) -> str:
    """``ServingStack <namespace>/<name>`` for messages, whatever the metadata holds."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    # Whatever types they have (an excerpt shows a non-string as its repr): the name is for messages only,
    # and the model reports a mistyped name or namespace itself.
    return _named(meta.get("name", "?"), meta.get("namespace", ""))


def name_of(xr: ServingStack) -> str:
    """``ServingStack <namespace>/<name>`` of a validated XR, for messages."""
    return _named(xr.metadata.name, xr.metadata.namespace)


def _named(name: Any, namespace: Any) -> str:
    name, namespace = excerpt(name), excerpt(namespace)
    return f"ServingStack {namespace + '/' if namespace else ''}{name}"


def parse_xr(raw: dict[str, Any]) -> ServingStack:
    """The validated XR, with ``spec.cloud`` set (given, or inferred from v0.3.1's fields); InputError otherwise."""
    name = xr_name(raw)
    return legacy.resolve(_validated(raw, name), name)


def _validated(raw: dict[str, Any], name: str) -> ServingStack:
    try:
        xr = ServingStack.model_validate(raw)
    except ValidationError as err:
        raise InputError(describe(err, name)) from None
    if xr.spec.kubeconfig() is None:
        raise InputError(f"{name}: spec.secrets: a secret of type {KUBECONFIG} is required")
    return xr


class ObservedXR(NamedTuple):
    """The ServingStack a request carries, validated and resolved (:func:`parse_xr`)."""

    xr: ServingStack
    name: str  # ``ServingStack <namespace>/<name>`` for messages (:func:`xr_name`)
    cloud_given: bool  # spec.cloud is written, not inferred from v0.3.1's fields


# Validated specs by their serialized content: an XR's spec is the same on every
# reconcile (its status and the composed resources are what change), and
# converting and validating it is most of reading the XR. Exact bytes are the
# key; a spec refused is never kept, so it is refused again, alike. One entry
# per ServingStack, weighed at 4x its serialized size (the key, and the model
# about the size of the plain data): ~350 bytes for the example's spec, ~5 KB
# once Crossplane lists a full stack's ~40 composed resources under
# spec.crossplane.resourceRefs.
_SPECS: BoundedCache[bytes, ServingStackSpec] = BoundedCache("ServingStack specs")


def observed_xr(resource: struct_pb2.Struct, serialized: bytes | None = None) -> ObservedXR:
    """The observed composite resource read as :func:`parse_xr` reads it: only the fields the model reads
    are converted (its status, the function's own last output, is large), the spec once per content.

    ``serialized``: the request carrying ``resource`` serialized deterministically, when the caller has
    it; the spec's bytes are sliced from it rather than serialized again.
    """
    fields = resource.fields
    meta = fields.get("metadata")
    meta_fields = meta.struct_value.fields if meta is not None and meta.HasField("struct_value") else None
    # Only the fields the model reads are looked up: Kubernetes' own (managedFields …) are never touched.
    read = {} if meta_fields is None else {k: v for k in _METADATA_READ if (v := meta_fields.get(k)) is not None}
    named = {k: v.string_value for k, v in read.items() if k in ("name", "namespace") and v.HasField("string_value")}
    name = xr_name({"metadata": named})  # for messages about the metadata itself
    raw: dict[str, Any] = {k: plain_value(fields[k], name, k) for k in ("apiVersion", "kind") if k in fields}
    spec, key, known = fields.get("spec"), None, None
    if spec is not None:
        # Only a map can be a valid spec, and only a valid one is kept.
        if serialized is not None:
            key = observed_map(serialized, "spec")
        elif spec.HasField("struct_value"):
            key = spec.struct_value.SerializeToString(deterministic=True)
        known = _SPECS.get(key) if key is not None else None
        # A spec validated before is taken as it is: pydantic does not validate a model instance's fields again.
        raw["spec"] = known if known is not None else plain_value(spec, name, "spec")
    if meta_fields is not None:
        raw["metadata"] = {k: plain_value(v, name, f"metadata.{k}", 2) for k, v in read.items()}
    elif meta is not None:
        raw["metadata"] = plain_value(meta, name, "metadata")  # not a map: the model says so
    name = xr_name(raw)
    validated = _validated(raw, name)
    if key is not None and known is None:
        # The key, and the validated spec: about the plain data's size.
        _SPECS.put(key, validated.spec, len(key) * (1 + PYTHON_FACTOR))
    cloud_given = spec is not None and "cloud" in spec.struct_value.fields
    return ObservedXR(legacy.resolve(validated, name), name, cloud_given)
