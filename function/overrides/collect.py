"""Obtaining override documents: the function's Input, required resources, the pipeline context.

The function asks Crossplane for EnvironmentConfigs itself (required
resources), with the same requirements on every call: Crossplane calls again
until two responses ask for the same thing, and renders only then. A document
can also come from the context key ``apiextensions.crossplane.io/environment``
that function-environment-configs fills (flat: its keys at the top level).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from function.errors import InputError, describe
from function.model import ServingStack

from .document import OverrideDocument, RegistryPolicy

INPUT_API_VERSION = "servingstack.fn.modelplane.ai/v1beta1"
ENVIRONMENT_CONFIG_API = "apiextensions.crossplane.io/v1beta1"  # the only version Crossplane v2 serves
ENVIRONMENT_CONFIG_KIND = "EnvironmentConfig"
DEFAULT_LABEL = "servingstack.modelplane.ai/overrides"
DEFAULT_LABEL_VALUE = "true"
CONTEXT_KEY = "apiextensions.crossplane.io/environment"
CONTEXT_DOCUMENT = f"context:{CONTEXT_KEY}"
DOCUMENT_KEY = "servingStack"

# Requirement names: stable across calls and releases (Crossplane compares the
# requirements of consecutive calls) and recognisably ours.
DEFAULT_REQUIREMENT = "servingstack-overrides"
SELECTOR_REQUIREMENT = "servingstack-overrides-selector-{}"
NAME_REQUIREMENT = "servingstack-overrides-name-{}"

Policy = Literal["Required", "Optional"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SelectorSource(_Strict):
    """EnvironmentConfigs carrying all these labels; Optional (default): none is fine."""

    matchLabels: dict[str, str] = Field(min_length=1)  # noqa: N815 - Kubernetes field name
    policy: Policy = "Optional"


class NameSource(_Strict):
    """One EnvironmentConfig by name; Required (default): missing is a Fatal."""

    name: str = Field(min_length=1)
    policy: Policy = "Required"


class InputSpec(_Strict):
    # None: the default selector (label servingstack.modelplane.ai/overrides: "true").
    # A list replaces it; [] selects by name only.
    selectors: list[SelectorSource] | None = None
    names: list[NameSource] = Field(default_factory=list)
    # A registry policy every ServingStack of the Composition is held to.
    registry: RegistryPolicy | None = None


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["servingstack.fn.modelplane.ai/v1beta1"]  # noqa: N815
    kind: Literal["Input"]
    metadata: dict[str, Any] | None = None
    spec: InputSpec = Field(default_factory=InputSpec)


@dataclass(frozen=True)
class Document:
    """One override document: where it came from (for messages) and what it says."""

    name: str  # the EnvironmentConfig's name, or CONTEXT_DOCUMENT
    where: str  # "EnvironmentConfig regulated-bank: data.servingStack"
    doc: OverrideDocument
    digest: bytes  # of its serialized content: plans are cached by it


@dataclass(frozen=True)
class Found:
    """The override documents that apply to one XR, in application order."""

    applied: tuple[str, ...] = ()
    documents: tuple[Document, ...] = field(default_factory=tuple)
    policy: RegistryPolicy | None = None  # the function Input's spec.registry

    @property
    def fingerprint(self) -> tuple[tuple[str, bytes], ...]:
        return tuple((d.name, d.digest) for d in self.documents)


@dataclass(frozen=True)
class Requirement:
    name: str
    policy: Policy
    match_name: str | None = None
    match_labels: dict[str, str] | None = None


def parse_input(req: fnv1.RunFunctionRequest) -> Input | None:
    if not req.HasField("input"):
        return None
    raw = resource.struct_to_dict(req.input)
    if not raw:
        return None
    try:
        return Input.model_validate(raw)
    except ValidationError as err:
        raise InputError(describe(err, f"function Input {INPUT_API_VERSION}")) from None


def requirements(spec: InputSpec) -> list[Requirement]:
    """What to ask Crossplane for, in a fixed order with fixed names."""
    out: list[Requirement] = []
    if spec.selectors is None:
        out.append(Requirement(DEFAULT_REQUIREMENT, "Optional", match_labels={DEFAULT_LABEL: DEFAULT_LABEL_VALUE}))
    else:
        out += [
            Requirement(SELECTOR_REQUIREMENT.format(i), s.policy, match_labels=dict(s.matchLabels))
            for i, s in enumerate(spec.selectors)
        ]
    out += [Requirement(NAME_REQUIREMENT.format(n.name), n.policy, match_name=n.name) for n in spec.names]
    return out


# Parsed documents by serialized content: the same EnvironmentConfig arrives on
# every reconcile of every XR, and parsing it is most of this module's cost.
_PARSED: OrderedDict[bytes, tuple[str, OverrideDocument | None]] = OrderedDict()
_PARSED_MAX = 256


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _parse_config(item: fnv1.Resource, require_document: bool) -> Document | None:
    data = item.resource.SerializeToString(deterministic=True)
    digest = _digest(data)
    cached = _PARSED.get(digest)
    if cached is None:
        raw = resource.struct_to_dict(item.resource)
        meta, data = raw.get("metadata"), raw.get("data")
        name = str(meta.get("name", "?")) if isinstance(meta, dict) else "?"
        body = data.get(DOCUMENT_KEY) if isinstance(data, dict) else None
        doc = None if body is None else _validate(body, f"EnvironmentConfig {name}", f"data.{DOCUMENT_KEY}")
        cached = (name, doc)
        _PARSED[digest] = cached
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(digest)
    name, doc = cached
    if doc is None:
        if require_document:
            raise InputError(
                f"EnvironmentConfig {name}: data.{DOCUMENT_KEY}: missing (selected as an override document)"
            )
        return None
    return Document(name, f"EnvironmentConfig {name}: data.{DOCUMENT_KEY}", doc, digest)


def parse_environment_config(obj: Mapping[str, Any]) -> Document | None:
    """The override document of one EnvironmentConfig (None without one); InputError when it is bad."""
    item = fnv1.Resource()
    item.resource.update(dict(obj))
    return _parse_config(item, require_document=False)


def _validate(body: Any, obj: str, prefix: str) -> OverrideDocument:
    if not isinstance(body, dict):
        raise InputError(f"{obj}: {prefix}: must be a map (got {type(body).__name__})")
    try:
        return OverrideDocument.model_validate(body)
    except ValidationError as err:
        raise InputError(describe(err, obj, prefix)) from None


def _context_document(req: fnv1.RunFunctionRequest) -> Document | None:
    if not req.HasField("context") or CONTEXT_KEY not in req.context.fields:
        return None
    env = req.context.fields[CONTEXT_KEY]
    if env.WhichOneof("kind") != "struct_value" or DOCUMENT_KEY not in env.struct_value.fields:
        return None
    value: struct_pb2.Value = env.struct_value.fields[DOCUMENT_KEY]
    data = value.SerializeToString(deterministic=True)
    digest = _digest(data)
    cached = _PARSED.get(digest)
    if cached is None or cached[1] is None:
        body = resource.struct_to_dict(env.struct_value).get(DOCUMENT_KEY)
        doc = _validate(body, f"context {CONTEXT_KEY}", DOCUMENT_KEY)
        _PARSED[digest] = (CONTEXT_DOCUMENT, doc)
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    else:
        doc = cached[1]
    return Document(CONTEXT_DOCUMENT, f"context {CONTEXT_KEY}: {DOCUMENT_KEY}", doc, digest)


def collect(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, xr: ServingStack) -> Found | None:
    """Ask for the override documents; None until Crossplane has supplied them."""
    given = parse_input(req)
    wanted = requirements(given.spec if given is not None else InputSpec())
    for r in wanted:
        response.require_resources(
            rsp,
            r.name,
            ENVIRONMENT_CONFIG_API,
            ENVIRONMENT_CONFIG_KIND,
            match_name=r.match_name,
            match_labels=r.match_labels,
        )
    if any(r.name not in req.required_resources for r in wanted):
        return None  # the first call: nothing resolved yet
    documents: dict[str, Document] = {}
    for r in wanted:
        items = req.required_resources[r.name].items
        if not items and r.policy == "Required":
            what = (
                f"EnvironmentConfig {r.match_name} not found"
                if r.match_name
                else f"no EnvironmentConfig has the labels {r.match_labels}"
            )
            # Never fall back to the upstream registries a mirror document replaces.
            raise InputError(
                f"function Input: {what}, and its policy is Required; "
                "refusing to render without it (Crossplane keeps the last applied state)"
            )
        # A config selected by our own label or by name must carry a document;
        # a custom selector may match configs meant for other functions.
        require = r.name == DEFAULT_REQUIREMENT or r.match_name is not None
        for item in items:
            found = _parse_config(item, require)
            if found is not None:
                documents[found.name] = found
    context = _context_document(req)
    if context is not None:
        documents[context.name] = context
    applied = sorted(
        (d for d in documents.values() if d.doc.match.matches(xr)),
        key=lambda d: (d.doc.priority, d.name),
    )
    policy = given.spec.registry if given is not None else None
    return Found(applied=tuple(d.name for d in applied), documents=tuple(applied), policy=policy)
