"""Validate rendered Kubernetes objects against the real CRDs in ``facts/crds``.

There is no API server here, so this does what one would do with a custom
resource on create, as far as the CRD's structural schema tells:

* it looks the object's ``apiVersion``/``kind`` up among every CRD file
  (``spec.versions[].schema.openAPIV3Schema``, served versions only);
* it applies schema ``default``s first, as the API server defaults before it
  validates (so a required field with a default may be left out);
* it validates with jsonschema (Draft 2020-12), translating the Kubernetes
  extensions: ``x-kubernetes-preserve-unknown-fields`` (unknown fields allowed
  at that node), ``x-kubernetes-int-or-string``, ``x-kubernetes-embedded-resource``
  (``apiVersion``/``kind`` required, ``metadata`` is an ObjectMeta),
  ``nullable``, ``x-kubernetes-list-type`` set/map uniqueness, the int32/int64/
  date-time/byte formats and the CEL rules (``x-kubernetes-validations``) these
  CRDs contain (transition rules using ``oldSelf`` are skipped; a rule not in
  :data:`CEL_RULES` is recorded in ``CRDIndex.unchecked_rules`` and not checked);
* a field a schema node does not declare, where that node does not preserve
  unknown fields, is an error: the API server would prune it silently (or warn
  under strict field validation) and the setting would be lost;
* a ``null`` for a field that is not ``nullable`` and has no default is an error;
* ``metadata`` is checked as an ObjectMeta: known fields only, name or
  generateName (DNS subdomain), namespace (DNS label), label keys and values,
  annotation keys, ownerReferences (``uid`` may be empty: ``crossplane render``
  leaves it empty when the XR has none). A cluster-scoped kind must not carry
  a namespace;
* for a provider-kubernetes ``Object``, the embedded ``spec.forProvider.manifest``
  is validated the same way when its own kind has a CRD here (NVIDIADriver,
  DeviceConfig, ...).

The CRDs are the repository's copies in ``facts/crds`` (``./dev refresh``
writes them; ``SOURCES.yaml`` there names each one's origin). The
``gaie-crds-*.yaml`` files in ``facts/manifests`` (Gateway API Inference
Extension CRDs the stacks ship) are indexed too.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, FormatChecker, validators  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped, unused-ignore]

from tests.support.repo import REPO

__all__ = [
    "CEL_RULES",
    "CRDIndex",
    "CRDVersion",
    "covered",
    "crd_dir",
    "default_sources",
    "index",
    "validate",
    "validate_documents",
]


# --------------------------------------------------------------------------- #
# Locating and indexing CRDs
# --------------------------------------------------------------------------- #


def crd_dir() -> Path:
    return REPO / "facts" / "crds"


def default_sources() -> list[Path]:
    files = sorted(p for p in crd_dir().glob("*.yaml") if p.name != "SOURCES.yaml")
    files += sorted((REPO / "facts" / "manifests").glob("gaie-crds-*.yaml"))
    return files


@dataclass(frozen=True)
class CRDVersion:
    group: str
    version: str
    kind: str
    plural: str
    scope: str  # "Namespaced" or "Cluster"
    served: bool
    storage: bool
    deprecated: bool
    schema: dict[str, Any] = field(repr=False, compare=False, hash=False)
    source: Path = field(compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"


# --------------------------------------------------------------------------- #
# ObjectMeta
# --------------------------------------------------------------------------- #

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


def _meta_errors(meta: Any, *, require_name: bool, namespaced: bool | None) -> list[str]:
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


# --------------------------------------------------------------------------- #
# CEL rules found in these CRDs, as Python
# --------------------------------------------------------------------------- #


def _lower_ascii(s: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in s)


def _of_is_local(s: Mapping[str, Any]) -> bool:
    of = s["of"]
    ref_ok = "resourceRef" not in of or "namespace" not in of["resourceRef"]
    sel_ok = "resourceSelector" not in of or "namespace" not in of["resourceSelector"]
    return ref_ok and sel_ok


CEL_RULES: dict[str, Callable[[Any], bool]] = {
    # provider-kubernetes Object spec.readiness
    "self.policy != 'DeriveFromCelQuery' || (self.policy == 'DeriveFromCelQuery' && size(self.celQuery) > 0)": (
        lambda s: s["policy"] != "DeriveFromCelQuery" or len(s["celQuery"]) > 0
    ),
    # NVIDIADriver spec
    "has(self.default) && self.default ? !has(self.nodeSelector) || size(self.nodeSelector) == 0 : true": (
        lambda s: ("nodeSelector" not in s or len(s["nodeSelector"]) == 0) if s.get("default") is True else True
    ),
    # Usage / ClusterUsage
    "has(self.by) || has(self.reason)": lambda s: "by" in s or "reason" in s,
    "has(self.resourceRef) || has(self.resourceSelector)": lambda s: "resourceRef" in s or "resourceSelector" in s,
    (
        "has(self.by) || (!has(self.of.resourceRef) || !has(self.of.resourceRef.__namespace__)) && "
        "(!has(self.of.resourceSelector) || !has(self.of.resourceSelector.__namespace__))"
    ): lambda s: "by" in s or _of_is_local(s),
    # Gateway API Inference Extension InferencePool endpointPickerRef
    "self.kind != 'Service' || has(self.port)": lambda s: s["kind"] != "Service" or "port" in s,
    # Composition
    "self.mode == 'Pipeline' && has(self.pipeline)": lambda s: s["mode"] == "Pipeline" and "pipeline" in s,
    "self.source == 'Secret' && has(self.secretRef)": lambda s: s["source"] == "Secret" and "secretRef" in s,
    "!(has(self.name) && has(self.matchLabels))": lambda s: not ("name" in s and "matchLabels" in s),
    # ImageConfig
    "size(self) > 0": lambda s: len(s) > 0,
    # CompositeResourceDefinition
    "self.scope == 'LegacyCluster' || !has(self.claimNames)": lambda s: (
        s["scope"] == "LegacyCluster" or "claimNames" not in s
    ),
    "self.scope == 'LegacyCluster' || !has(self.connectionSecretKeys)": lambda s: (
        s["scope"] == "LegacyCluster" or "connectionSecretKeys" not in s
    ),
    "!has(self.claimNames)": lambda s: "claimNames" not in s,
    "!has(self.connectionSecretKeys)": lambda s: "connectionSecretKeys" not in s,
    "self.plural == self.plural.lowerAscii()": lambda s: s["plural"] == _lower_ascii(s["plural"]),
    "!has(self.singular) || self.singular == self.singular.lowerAscii()": lambda s: (
        "singular" not in s or s["singular"] == _lower_ascii(s["singular"])
    ),
    "self.strategy == 'Webhook' && has(self.webhook)": lambda s: s["strategy"] == "Webhook" and "webhook" in s,
}
"""CEL rules (verbatim) that the validator evaluates; ``self.matches('<re>')`` is handled generically."""

_MATCHES_RE = re.compile(r"^self\.matches\('((?:[^'\\]|\\.)*)'\)$")


def _cel_rule(expr: str) -> Callable[[Any], bool] | None:
    fn = CEL_RULES.get(expr)
    if fn is not None:
        return fn
    m = _MATCHES_RE.match(expr)
    if m:
        pattern = re.compile(m.group(1).replace("\\\\", "\\"))
        return lambda s: isinstance(s, str) and pattern.search(s) is not None
    return None


# --------------------------------------------------------------------------- #
# Structural schema -> JSON Schema
# --------------------------------------------------------------------------- #

_PASSTHROUGH = (
    "enum",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "required",
)


def to_json_schema(node: Any, *, root: bool = False, junctor: bool = False) -> dict[str, Any]:
    """Translate a Kubernetes structural schema node into JSON Schema (with custom x- keywords)."""
    if not isinstance(node, Mapping):
        return {}
    out: dict[str, Any] = {}
    nullable = bool(node.get("nullable"))
    int_or_string = bool(node.get("x-kubernetes-int-or-string"))
    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(node.get("x-kubernetes-embedded-resource"))

    types: list[str] = []
    if int_or_string:
        types = ["integer", "string"]
    elif isinstance(node.get("type"), str):
        types = [node["type"]]
    if types and nullable:
        types.append("null")
    if types:
        out["type"] = types[0] if len(types) == 1 else types

    for key in _PASSTHROUGH:
        if key in node:
            out[key] = copy.deepcopy(node[key])
    if nullable and "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    # OpenAPI 3.0 boolean exclusive bounds.
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(flag) is True and bound in out:
            out[flag] = out.pop(bound)

    if isinstance(node.get("properties"), Mapping):
        out["properties"] = {k: to_json_schema(v, junctor=junctor) for k, v in node["properties"].items()}
    additional = node.get("additionalProperties")
    if isinstance(additional, Mapping):
        out["additionalProperties"] = to_json_schema(additional, junctor=junctor)
    elif isinstance(additional, bool):
        out["additionalProperties"] = additional
    if isinstance(node.get("items"), Mapping):
        out["items"] = to_json_schema(node["items"], junctor=junctor)
    if not int_or_string:  # int-or-string's anyOf only restates the two types
        for key in ("allOf", "anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                out[key] = [to_json_schema(x, junctor=True) for x in node[key]]
    if isinstance(node.get("not"), Mapping):
        out["not"] = to_json_schema(node["not"], junctor=True)

    if embedded or root:
        props = out.setdefault("properties", {})
        props["apiVersion"] = {"type": "string", "minLength": 1} if embedded else {"type": "string"}
        props["kind"] = {"type": "string", "minLength": 1} if embedded else {"type": "string"}
        props["metadata"] = OBJECT_META_SCHEMA
        if embedded:
            out["required"] = sorted({*out.get("required", []), "apiVersion", "kind"})
            out["x-embedded-metadata"] = True

    is_object = "object" in types or "properties" in out
    if is_object and not preserve and not junctor and "additionalProperties" not in out:
        out["additionalProperties"] = False

    if isinstance(node.get("x-kubernetes-validations"), list):
        out["x-kubernetes-validations"] = copy.deepcopy(node["x-kubernetes-validations"])
    if node.get("x-kubernetes-list-type") in ("set", "map"):
        out["x-kubernetes-list-type"] = node["x-kubernetes-list-type"]
        out["x-kubernetes-list-map-keys"] = list(node.get("x-kubernetes-list-map-keys") or [])
    return out


def apply_defaults(value: Any, node: Any) -> None:
    """Fill in schema defaults in place, as the API server does before validating."""
    if not isinstance(node, Mapping):
        return
    if isinstance(value, dict):
        props: Mapping[str, Any] = node["properties"] if isinstance(node.get("properties"), Mapping) else {}
        for key, sub in props.items():
            if not isinstance(sub, Mapping) or "default" not in sub:
                continue
            if key not in value or (value[key] is None and not sub.get("nullable")):
                value[key] = copy.deepcopy(sub["default"])
        additional = node.get("additionalProperties")
        for key, child in value.items():
            if key in props:
                apply_defaults(child, props[key])
            elif isinstance(additional, Mapping):
                apply_defaults(child, additional)
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for child in value:
            apply_defaults(child, node["items"])


# --------------------------------------------------------------------------- #
# Custom keywords and formats
# --------------------------------------------------------------------------- #


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _kw_cel(_validator: Any, rules: Any, instance: Any, _schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    for rule in rules:
        expr = str(rule.get("rule", ""))
        message = str(rule.get("message") or f"failed rule: {expr}")
        if "oldSelf" in expr:
            continue  # transition rule: only meaningful on update
        fn = _cel_rule(expr)
        if fn is None:
            continue  # listed in CRDIndex.unchecked_rules
        try:
            ok = fn(instance)
        except (KeyError, TypeError, AttributeError):
            ok = False
            message = f"{message} (rule {expr!r} could not be evaluated: a field it reads is missing)"
        if not ok:
            yield ValidationError(f"Invalid value: {message}", validator="x-kubernetes-validations")


def _kw_list_type(
    _validator: Any, list_type: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, list):
        return
    if list_type == "set":
        seen: set[str] = set()
        for item in instance:
            key = _canonical(item)
            if key in seen:
                yield ValidationError(f"Duplicate value: {item!r} (x-kubernetes-list-type: set)")
            seen.add(key)
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen_keys: set[str] = set()
    for i, item in enumerate(instance):
        if not isinstance(item, Mapping):
            continue
        missing = [k for k in keys if k not in item]
        if missing:
            yield ValidationError(f"[{i}]: Required value: list map key(s) {missing} missing")
            continue
        key = _canonical([item[k] for k in keys])
        if key in seen_keys:
            shown = {k: item[k] for k in keys}
            yield ValidationError(f"Duplicate value: {shown} (x-kubernetes-list-type: map)")
        seen_keys.add(key)


def _kw_embedded_metadata(
    _validator: Any, enabled: Any, instance: Any, _schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if enabled and isinstance(instance, Mapping) and "metadata" in instance:
        for err in _meta_errors(instance["metadata"], require_name=False, namespaced=None):
            yield ValidationError(err)


_FORMATS = FormatChecker(formats=())
_RFC3339_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _is_int32(value: object) -> bool:
    return not isinstance(value, int | float) or isinstance(value, bool) or -(2**31) <= value <= 2**31 - 1


def _is_int64(value: object) -> bool:
    return not isinstance(value, int | float) or isinstance(value, bool) or -(2**63) <= value <= 2**63 - 1


def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or _RFC3339_RE.match(value) is not None


def _is_byte(value: object) -> bool:
    if isinstance(value, str):
        base64.b64decode(value, validate=True)
    return True


_FORMATS.checks("int32")(_is_int32)
_FORMATS.checks("int64")(_is_int64)
_FORMATS.checks("date-time")(_is_date_time)
_FORMATS.checks("byte", raises=(binascii.Error, ValueError))(_is_byte)


_Validator = validators.extend(
    Draft202012Validator,
    {
        "x-kubernetes-validations": _kw_cel,
        "x-kubernetes-list-type": _kw_list_type,
        "x-embedded-metadata": _kw_embedded_metadata,
    },
)


# --------------------------------------------------------------------------- #
# Error formatting
# --------------------------------------------------------------------------- #


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def _join(path: str, child: str) -> str:
    return f"{path}.{child}" if path else child


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _format_error(err: ValidationError) -> list[str]:
    path = _path(err.absolute_path)
    where = path or "<root>"
    if err.validator == "additionalProperties" and err.validator_value is False and isinstance(err.instance, Mapping):
        known = set((err.schema.get("properties") or {}).keys())
        return [
            f"{_join(path, str(k))}: unknown field (not in the CRD schema; the API server would prune it)"
            for k in sorted(err.instance, key=str)
            if k not in known
        ]
    if err.validator == "required" and isinstance(err.instance, Mapping):
        return [f"{_join(path, str(k))}: Required value" for k in err.validator_value if k not in err.instance]
    if err.validator == "type":
        want = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        if err.instance is None:
            return [f"{where}: Invalid value: null: the field is not nullable (want {' or '.join(want)})"]
        got = _json_type(err.instance)
        return [f"{where}: Invalid value: {_short(err.instance)}: must be {' or '.join(want)}, got {got}"]
    if err.validator == "x-embedded-metadata":
        return [_join(path, err.message)]
    if err.validator == "enum":
        return [f"{where}: Unsupported value: {_short(err.instance)}: supported values: {err.validator_value}"]
    return [f"{where}: {err.message}"]


# --------------------------------------------------------------------------- #
# The index
# --------------------------------------------------------------------------- #

_OBJECT_GROUPS = ("kubernetes.m.crossplane.io", "kubernetes.crossplane.io")


def _plain(value: Any) -> Any:
    """YAML-loaded value -> JSON-shaped value (timestamps to strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dt.datetime):
        text = value.isoformat()
        return text.replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _unchecked_rules(node: Any) -> set[str]:
    """CEL rules in a schema that the validator cannot evaluate (transition rules excluded)."""
    out: set[str] = set()
    if isinstance(node, Mapping):
        for rule in node.get("x-kubernetes-validations") or []:
            expr = str(rule.get("rule", ""))
            if "oldSelf" not in expr and _cel_rule(expr) is None:
                out.add(expr)
        for value in node.values():
            out |= _unchecked_rules(value)
    elif isinstance(node, list):
        for value in node:
            out |= _unchecked_rules(value)
    return out


class CRDIndex:
    """CRDs indexed by ``(apiVersion, kind)``.

    ``unchecked_rules`` lists the CEL rules in the indexed CRDs that are not
    evaluated (neither in :data:`CEL_RULES` nor a ``self.matches``).
    """

    def __init__(self, sources: Iterable[Path]) -> None:
        self.versions: dict[tuple[str, str], CRDVersion] = {}
        self.sources: list[Path] = []
        self.unchecked_rules: set[str] = set()
        self._validators: dict[tuple[str, str], Any] = {}
        for path in sources:
            self._load(Path(path))

    def _load(self, path: Path) -> None:
        found = False
        with path.open(encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc.get("spec") or {}
                names = spec.get("names") or {}
                for v in spec.get("versions") or []:
                    schema = ((v.get("schema") or {}).get("openAPIV3Schema")) or {}
                    crd = CRDVersion(
                        group=str(spec.get("group", "")),
                        version=str(v.get("name", "")),
                        kind=str(names.get("kind", "")),
                        plural=str(names.get("plural", "")),
                        scope=str(spec.get("scope", "Namespaced")),
                        served=bool(v.get("served", False)),
                        storage=bool(v.get("storage", False)),
                        deprecated=bool(v.get("deprecated", False)),
                        schema=schema,
                        source=path,
                    )
                    self.versions[(crd.api_version, crd.kind)] = crd
                    self.unchecked_rules |= _unchecked_rules(schema)
                    found = True
        if found:
            self.sources.append(path)

    def lookup(self, obj: Mapping[str, Any]) -> CRDVersion | None:
        return self.versions.get((str(obj.get("apiVersion")), str(obj.get("kind"))))

    def covered(self, obj: Mapping[str, Any]) -> bool:
        crd = self.lookup(obj)
        return crd is not None and crd.served

    def _validator(self, crd: CRDVersion) -> Any:
        key = (crd.api_version, crd.kind)
        if key not in self._validators:
            self._validators[key] = _Validator(to_json_schema(crd.schema, root=True), format_checker=_FORMATS)
        return self._validators[key]

    def validate(self, obj: Mapping[str, Any]) -> list[str]:
        """Errors for ``obj`` (an empty list means valid)."""
        if not isinstance(obj, Mapping):
            return [f"<root>: Invalid value: {_short(obj)}: not an object"]
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
            return ["<root>: apiVersion and kind are required"]
        crd = self.lookup(obj)
        if crd is None:
            known = sorted(av for (av, k) in self.versions if k == kind)
            hint = f" (this kind exists as: {', '.join(known)})" if known else ""
            return [f"<root>: no CRD for {api_version} {kind} among the indexed CRDs{hint}"]
        if not crd.served:
            return [f"<root>: {api_version} {kind} is not served"]

        inst = _plain(obj)
        apply_defaults(inst, crd.schema)
        errors: list[str] = []
        for err in self._validator(crd).iter_errors(inst):
            errors += _format_error(err)
        errors += _meta_errors(inst.get("metadata"), require_name=True, namespaced=crd.namespaced)

        if crd.group in _OBJECT_GROUPS and crd.kind == "Object":
            manifest = ((inst.get("spec") or {}).get("forProvider") or {}).get("manifest")
            if isinstance(manifest, Mapping) and self.covered(manifest):
                errors += [f"spec.forProvider.manifest.{e}" for e in self.validate(manifest)]
        return sorted(dict.fromkeys(errors))


@functools.cache
def index() -> CRDIndex:
    """The shared index over :func:`default_sources` (built once)."""
    return CRDIndex(default_sources())


def covered(obj: Mapping[str, Any]) -> bool:
    """Whether a served CRD for the object's apiVersion and kind is indexed."""
    return index().covered(obj)


def validate(obj: Mapping[str, Any]) -> list[str]:
    """Validate one object against its CRD; ``[]`` means valid."""
    return index().validate(obj)


def validate_documents(docs: Sequence[Mapping[str, Any]], *, require_covered: bool = False) -> list[str]:
    """Validate every covered document; errors are prefixed with ``<kind> <name>:``.

    With ``require_covered`` a document with no CRD is an error too.
    """
    errors: list[str] = []
    for doc in docs:
        meta: Mapping[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), Mapping) else {}
        label = f"{doc.get('kind')} {meta.get('name') or meta.get('generateName') or '?'}"
        annotations: Mapping[str, Any] = meta["annotations"] if isinstance(meta.get("annotations"), Mapping) else {}
        resource_name = annotations.get("crossplane.io/composition-resource-name")
        if resource_name:
            label += f" ({resource_name})"
        if covered(doc):
            errors += [f"{label}: {e}" for e in validate(doc)]
        elif require_covered:
            errors.append(f"{label}: no CRD for {doc.get('apiVersion')} {doc.get('kind')}")
    return errors
