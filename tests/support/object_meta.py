"""ObjectMeta as the API server checks it on create: known fields, names, labels, annotations, owner references.

Names and generateNames are DNS-1123 subdomains, namespaces DNS-1123 labels,
label and annotation keys qualified names; unknown fields are errors. ``uid``
may be empty in an owner reference: ``crossplane render`` leaves it empty when
the XR has none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "selfLink": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer"},
        "creationTimestamp": {"type": ["string", "null"]},
        "deletionTimestamp": {"type": ["string", "null"]},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["apiVersion", "kind", "name", "uid"],
                "properties": {
                    "apiVersion": {"type": "string", "minLength": 1},
                    "kind": {"type": "string", "minLength": 1},
                    "name": {"type": "string", "minLength": 1},
                    "uid": {"type": "string"},
                    "controller": {"type": "boolean"},
                    "blockOwnerDeletion": {"type": "boolean"},
                },
            },
        },
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "managedFields": {"type": "array", "items": {"type": "object"}},
    },
}

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_DNS1123_LABEL_RE = re.compile(rf"^{_DNS1123_LABEL}$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TOTAL_ANNOTATION_SIZE = 256 * 1024


def _subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return errs


def _qualified_name_errors(key: str) -> list[str]:
    errs = []
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        errs.append("prefix part must be non-empty")
    if prefix:
        errs += [f"prefix part {e}" for e in _subdomain_errors(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME_RE.match(name):
        errs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character"
        )
    return errs


def meta_errors(meta: Any, *, require_name: bool, namespaced: bool | None) -> list[str]:
    """Semantic ObjectMeta checks (types and unknown fields are checked by the schema)."""
    if not isinstance(meta, Mapping):
        return ["metadata: Required value"] if require_name else []
    errs: list[str] = []
    name, generate = meta.get("name"), meta.get("generateName")
    if require_name and not name and not generate:
        errs.append("metadata.name: Required value: name or generateName is required")
    if isinstance(name, str) and name:
        errs += [f"metadata.name: Invalid value: {name!r}: {e}" for e in _subdomain_errors(name)]
    if isinstance(generate, str) and generate:
        masked = generate[:-1] + "a" if generate.endswith("-") else generate
        errs += [f"metadata.generateName: Invalid value: {generate!r}: {e}" for e in _subdomain_errors(masked)]
    ns = meta.get("namespace")
    if isinstance(ns, str) and ns:
        if namespaced is False:
            errs.append(
                f"metadata.namespace: Invalid value: {ns!r}: the kind is cluster-scoped (the API server would drop "
                "the namespace; a namespaced XR cannot compose cluster-scoped resources)"
            )
        elif len(ns) > 63 or not _DNS1123_LABEL_RE.match(ns):
            errs.append(f"metadata.namespace: Invalid value: {ns!r}: must be a lowercase RFC 1123 label")
    labels = meta.get("labels")
    if isinstance(labels, Mapping):
        for k, v in labels.items():
            errs += [f"metadata.labels: Invalid value: {k!r}: {e}" for e in _qualified_name_errors(str(k))]
            if isinstance(v, str) and (len(v) > 63 or not _LABEL_VALUE_RE.match(v)):
                errs.append(
                    f"metadata.labels: Invalid value: {v!r}: a valid label value must be 63 characters or less, "
                    "empty or consist of alphanumeric characters, '-', '_' or '.', starting and ending with an "
                    "alphanumeric character"
                )
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        size = 0
        for k, v in annotations.items():
            errs += [f"metadata.annotations: Invalid value: {k!r}: {e}" for e in _qualified_name_errors(str(k))]
            size += len(str(k)) + len(str(v))
        if size > _TOTAL_ANNOTATION_SIZE:
            errs.append(f"metadata.annotations: Too long: must have at most {_TOTAL_ANNOTATION_SIZE} bytes")
    refs = meta.get("ownerReferences")
    if isinstance(refs, list):
        controllers = [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
        if len(controllers) > 1:
            errs.append("metadata.ownerReferences: Invalid value: only one reference can have Controller set to true")
    return errs
