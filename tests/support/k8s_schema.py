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
  ``tests.support.cel_rules.CEL_RULES`` is recorded in ``CRDIndex.unchecked_rules``
  and not checked);
* a field a schema node does not declare, where that node does not preserve
  unknown fields, is an error: the API server would prune it silently (or warn
  under strict field validation) and the setting would be lost;
* a ``null`` for a field that is not ``nullable`` and has no default is an error;
* ``metadata`` is checked as an ObjectMeta (:mod:`tests.support.object_meta`): known fields only, name or
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
import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, FormatChecker, validators  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped, unused-ignore]

from function.tree import to_jsonable
from tests.support.cel_rules import cel_rule, unchecked_rules
from tests.support.object_meta import OBJECT_META_SCHEMA, meta_errors
from tests.support.repo import REPO

__all__ = [
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
        fn = cel_rule(expr)
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
        for err in meta_errors(instance["metadata"], require_name=False, namespaced=None):
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
                    self.unchecked_rules |= unchecked_rules(schema)
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

        inst = to_jsonable(obj)
        apply_defaults(inst, crd.schema)
        errors: list[str] = []
        for err in self._validator(crd).iter_errors(inst):
            errors += _format_error(err)
        errors += meta_errors(inst.get("metadata"), require_name=True, namespaced=crd.namespaced)

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
