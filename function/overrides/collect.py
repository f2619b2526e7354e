"""Obtaining override documents: the function's Input, required resources, the pipeline context.

The function asks Crossplane for EnvironmentConfigs itself (required
resources), with the same requirements on every call: Crossplane calls again
until two responses ask for the same thing, and renders only then. A document
can also come from the context key ``apiextensions.crossplane.io/environment``
that function-environment-configs fills (flat: its keys at the top level).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from pydantic import Field, ValidationError

from function.cache import PYTHON_FACTOR, BoundedCache
from function.errors import InputError, describe, excerpt, first_few
from function.inputs import plain, plain_value
from function.model import ServingStack
from function.strictmodel import StrictModel
from function.tenancy import SecretsPolicy
from function.xr import name_of

from . import memory
from .document import DOCUMENT_KEY, Collected, Document, RegistryPolicy, parsed_once, validate

INPUT_API_VERSION = "servingstack.fn.modelplane.ai/v1beta1"
ENVIRONMENT_CONFIG_API = "apiextensions.crossplane.io/v1beta1"  # the only version Crossplane v2 serves
ENVIRONMENT_CONFIG_KIND = "EnvironmentConfig"
DEFAULT_LABEL = "servingstack.modelplane.ai/overrides"
DEFAULT_LABEL_VALUE = "true"
CONTEXT_KEY = "apiextensions.crossplane.io/environment"
CONTEXT_DOCUMENT = f"context:{CONTEXT_KEY}"

# Requirement names: stable across calls and releases (Crossplane compares the
# requirements of consecutive calls) and recognisably ours.
DEFAULT_REQUIREMENT = "servingstack-overrides"
SELECTOR_REQUIREMENT = "servingstack-overrides-selector-{}"
NAME_REQUIREMENT = "servingstack-overrides-name-{}"

Policy = Literal["Required", "Optional"]


class SelectorSource(StrictModel):
    """EnvironmentConfigs carrying all these labels; Optional (default): none is fine."""

    matchLabels: dict[str, str] = Field(min_length=1)  # noqa: N815 - Kubernetes field name
    policy: Policy = "Optional"


class NameSource(StrictModel):
    """One EnvironmentConfig by name; Required (default): missing is a Fatal."""

    name: str = Field(min_length=1)
    policy: Policy = "Required"


class InputSpec(StrictModel):
    # None: the default selector (label servingstack.modelplane.ai/overrides: "true").
    # A list replaces it; [] selects by name only.
    selectors: list[SelectorSource] | None = None
    names: list[NameSource] = Field(default_factory=list)
    # A registry policy every ServingStack of the Composition is held to.
    registry: RegistryPolicy | None = None
    # Where identity secrets may come from besides the ServingStack's own namespace (function.tenancy).
    secrets: SecretsPolicy | None = None


class Input(StrictModel):
    apiVersion: Literal["servingstack.fn.modelplane.ai/v1beta1"]  # noqa: N815
    kind: Literal["Input"]
    metadata: dict[str, Any] | None = None
    spec: InputSpec = Field(default_factory=InputSpec)


@dataclass(frozen=True)
class Requirement:
    name: str
    policy: Policy
    match_name: str | None = None
    match_labels: dict[str, str] | None = None


def parse_input(req: fnv1.RunFunctionRequest) -> Input | None:
    if not req.HasField("input"):
        return None
    return parse_input_document(plain(req.input, f"function Input {INPUT_API_VERSION}"))


def parse_input_document(raw: dict[str, Any] | None) -> Input | None:
    if not raw:
        return None
    try:
        return Input.model_validate(raw)
    except ValidationError as err:
        raise InputError(describe(err, f"function Input {INPUT_API_VERSION}")) from None


def requirements(spec: InputSpec) -> list[Requirement]:
    """What to ask Crossplane for, in a fixed order with fixed names."""
    if spec.selectors is None:
        out = [Requirement(DEFAULT_REQUIREMENT, "Optional", match_labels={DEFAULT_LABEL: DEFAULT_LABEL_VALUE})]
    else:
        out = [
            Requirement(SELECTOR_REQUIREMENT.format(i), s.policy, match_labels=dict(s.matchLabels))
            for i, s in enumerate(spec.selectors)
        ]
    return out + [Requirement(NAME_REQUIREMENT.format(n.name), n.policy, match_name=n.name) for n in spec.names]


def config_document(raw: dict[str, Any], digest: bytes) -> tuple[str, Document | None]:
    """An EnvironmentConfig's name and override document (None when it carries none)."""
    meta, data = raw.get("metadata"), raw.get("data")
    name = str(meta.get("name", "?")) if isinstance(meta, dict) else "?"
    obj = f"EnvironmentConfig {name}"
    if not isinstance(data, dict):
        return name, None
    # data.servingstack or data.ServingStack would otherwise be a silent no-op.
    for key in data:
        if isinstance(key, str) and key != DOCUMENT_KEY and key.lower() == DOCUMENT_KEY.lower():
            raise InputError(f"{obj}: data.{key}: the override document goes under data.{DOCUMENT_KEY} (case matters)")
    body = data.get(DOCUMENT_KEY)
    if body is None:
        return name, None
    where = f"{obj}: data.{DOCUMENT_KEY}"
    doc = validate(body, obj, f"data.{DOCUMENT_KEY}")
    return name, Document(name, where, doc, digest, body)


def _parse_config(config: struct_pb2.Struct) -> tuple[str, Document | None]:
    data = config.SerializeToString(deterministic=True)
    return parsed_once("EnvironmentConfig", data, lambda digest: config_document(read_config(config), digest))


def read_config(config: struct_pb2.Struct) -> dict[str, Any]:
    """What ``config_document`` reads of an EnvironmentConfig: its name, its data's keys and the document.

    The rest of its data belongs to other functions: whatever it holds (even
    a NaN) is not ours to judge, nor to convert.
    """
    fields = config.fields
    meta, data = fields.get("metadata"), fields.get("data")
    raw: dict[str, Any] = {}
    if meta is not None and meta.HasField("struct_value"):
        name = meta.struct_value.fields.get("name")
        raw["metadata"] = (
            {"name": excerpt(name.string_value)} if name is not None and name.HasField("string_value") else {}
        )
    if data is not None and data.HasField("struct_value"):
        name = raw.get("metadata", {}).get("name", "?")
        raw["data"] = {
            key: plain_value(value, f"EnvironmentConfig {name}", f"data.{key}", 2) if key == DOCUMENT_KEY else None
            for key, value in data.struct_value.fields.items()
        }
    return raw


def parse_environment_config(obj: Mapping[str, Any]) -> Document | None:
    """The override document of one EnvironmentConfig (None without one); InputError when it is bad."""
    config = struct_pb2.Struct()
    config.update(dict(obj))
    return _parse_config(config)[1]


def _context_document(req: fnv1.RunFunctionRequest) -> Document | None:
    if not req.HasField("context") or CONTEXT_KEY not in req.context.fields:
        return None
    env = req.context.fields[CONTEXT_KEY]
    if env.WhichOneof("kind") != "struct_value" or DOCUMENT_KEY not in env.struct_value.fields:
        return None
    value: struct_pb2.Value = env.struct_value.fields[DOCUMENT_KEY]

    def parse(digest: bytes) -> tuple[str, Document | None]:
        body = plain_value(value, f"context {CONTEXT_KEY}", DOCUMENT_KEY, 2)
        doc = validate(body, f"context {CONTEXT_KEY}", DOCUMENT_KEY)
        where = f"context {CONTEXT_KEY}: {DOCUMENT_KEY}"
        return CONTEXT_DOCUMENT, Document(CONTEXT_DOCUMENT, where, doc, digest, body)

    return parsed_once("context", value.SerializeToString(deterministic=True), parse)[1]


@dataclass
class _Source:
    """What one requirement delivered."""

    requirement: Requirement
    documents: list[Document] = field(default_factory=list)
    without: list[str] = field(default_factory=list)  # EnvironmentConfigs with no document

    def what(self) -> str:
        r = self.requirement
        return f"EnvironmentConfig {r.match_name}" if r.match_name else f"the selector {r.match_labels}"


def _required_applies(source: _Source, xr: ServingStack, warnings: list[str]) -> None:
    """A Required source must put a document in force on this XR; say what kept it from doing so."""
    applying = [d for d in source.documents if not d.doc.retired and d.doc.match.matches(xr)]
    if applying:
        if source.without:
            warnings.append(
                f"function Input: {source.what()} (Required) selects EnvironmentConfigs with no "
                f"data.{DOCUMENT_KEY}, which are ignored: {first_few(source.without)}"
            )
        return
    reasons = [f"EnvironmentConfig {n} has no data.{DOCUMENT_KEY}" for n in source.without]
    reasons += [
        f"{d.name} is retired (retired: true)"
        if d.doc.retired
        else f"{d.name}'s match ({d.doc.match.describe()}) excludes it"
        for d in source.documents
    ]
    raise InputError(
        f"function Input: {source.what()} is Required, but no override document it selects applies to "
        f"{name_of(xr)}: {first_few(reasons)}; refusing to render without it (Crossplane keeps the last applied state)"
    )


def required_missing(r: Requirement) -> str:
    what = (
        f"EnvironmentConfig {r.match_name} not found"
        if r.match_name
        else f"no EnvironmentConfig has the labels {r.match_labels}"
    )
    return (
        f"function Input: {what}, and its policy is Required; "
        "refusing to render without it (Crossplane keeps the last applied state)"
    )


def must_carry_document(r: Requirement) -> bool:
    # Selected by our own label or by name: it must carry a document. A
    # custom selector may match configs meant for other functions.
    return r.name == DEFAULT_REQUIREMENT or r.match_name is not None


def document_missing(name: str) -> str:
    return f"EnvironmentConfig {name}: data.{DOCUMENT_KEY}: missing (selected as an override document)"


def ask(rsp: fnv1.RunFunctionResponse, wanted: list[Requirement]) -> None:
    """Put the requirements into a response: Crossplane answers them on the next call."""
    for r in wanted:
        response.require_resources(
            rsp,
            r.name,
            ENVIRONMENT_CONFIG_API,
            ENVIRONMENT_CONFIG_KIND,
            match_name=r.match_name,
            match_labels=r.match_labels,
        )


@dataclass(frozen=True)
class _Asked:
    """The function Input read, the requirements it makes, and them as a serialized ``Requirements``."""

    given: Input | None
    wanted: tuple[Requirement, ...]
    encoded: bytes


# The function Input read, by its serialized content (an absent Input reads as
# an empty one: both are no Input): the Composition's Input arrives unchanged
# on every request. One per Composition that uses the function.
_INPUTS: BoundedCache[bytes, _Asked] = BoundedCache("function Inputs")


def _asked(req: fnv1.RunFunctionRequest) -> _Asked:
    key = req.input.SerializeToString(deterministic=True)
    hit = _INPUTS.get(key)
    if hit is not None:
        return hit
    given = parse_input(req)
    wanted = requirements(given.spec if given is not None else InputSpec())
    asking = fnv1.RunFunctionResponse()
    ask(asking, wanted)
    asked = _Asked(given, tuple(wanted), asking.requirements.SerializeToString(deterministic=True))
    # The key, the Input parsed (a few times its size), the requirements encoded.
    return _INPUTS.put(key, asked, len(key) * (1 + PYTHON_FACTOR) + len(asked.encoded))


def secrets_policy(req: fnv1.RunFunctionRequest) -> SecretsPolicy | None:
    """The function Input's ``spec.secrets``, if it sets one; InputError when the Input is bad."""
    given = _asked(req).given
    return given.spec.secrets if given is not None else None


def collect(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, xr: ServingStack, observed: bytes | None
) -> Collected | None:
    """Ask for the override documents; None until Crossplane has supplied them.

    ``observed``: the observed ``status.stack``, serialized (:func:`function.overrides.memory.observed_stack`).
    """
    asked = _asked(req)
    given, wanted = asked.given, asked.wanted
    rsp.requirements.MergeFromString(asked.encoded)  # as ask(rsp, wanted) writes them
    if any(r.name not in req.required_resources for r in wanted):
        return None  # the first call: nothing resolved yet
    documents: dict[str, Document] = {}
    warnings: list[str] = []
    for r in wanted:
        items = req.required_resources[r.name].items
        if not items and r.policy == "Required":
            # Never fall back to the upstream registries a mirror document replaces.
            raise InputError(required_missing(r))
        source = _Source(r)
        for item in items:
            name, found = _parse_config(item.resource)
            if found is not None:
                source.documents.append(found)
                documents[found.name] = found
            elif must_carry_document(r):
                raise InputError(document_missing(name))
            else:
                source.without.append(name)
        if r.policy == "Required":
            _required_applies(source, xr, warnings)
    context = _context_document(req)
    if context is not None:
        documents[context.name] = context
    in_force = memory.reconcile(req, xr, documents, warnings, observed)
    policy = given.spec.registry if given is not None else None
    return dataclasses.replace(in_force, policy=policy) if policy is not None else in_force
