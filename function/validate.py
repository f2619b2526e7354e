"""``function validate``: check EnvironmentConfigs before they reach a cluster (for CI and reviewers).

Two ways, both through the function's own code so the messages are the ones
a ServingStack would get:

* against given ServingStacks: the function runs on each, in process, through
  the same requirements loop ``crossplane render`` runs;
* against every generated stack: the EnvironmentConfigs the function would be
  given (its requirements, answered from the files) are parsed, and every
  document whose ``match`` admits the stack's cloud and accelerator is planned
  onto it, in (priority, name) order. Criteria that depend on a ServingStack
  (labels, names, namespaces) are taken as holding: the worst case, every
  document that could meet on a cluster of that stack, together.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import click
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import stack
from function.errors import InputError
from function.files import INPUT_OPTION, fail, read_documents, read_one
from function.fn import FunctionRunner
from function.offline import RenderError, fetch_resources, run_pipeline
from function.overrides import Collected, plan
from function.overrides.collect import (
    DEFAULT_LABEL,
    DEFAULT_LABEL_VALUE,
    ENVIRONMENT_CONFIG_KIND,
    Input,
    InputSpec,
    ask,
    config_document,
    document_missing,
    must_carry_document,
    parse_input_document,
    read_config,
    required_missing,
    requirements,
)
from function.overrides.document import DOCUMENT_KEY, Document, content_digest
from function.tree import to_jsonable

Severity = Literal["fatal", "warning"]


@dataclass(frozen=True)
class Finding:
    subject: str  # the stack or ServingStack checked; "" for a document on its own
    severity: Severity
    message: str  # exactly what the function says

    def line(self) -> str:
        return ": ".join(p for p in (self.severity, self.subject, self.message) if p)


def _selected(configs: Sequence[Mapping[str, Any]], spec: InputSpec) -> tuple[list[Document], list[Finding]]:
    """The documents the function's requirements select from ``configs``, parsed as the function parses them."""
    documents: dict[str, Document] = {}
    findings: list[Finding] = []
    delivered: set[str] = set()
    wanted = requirements(spec)
    asked = fnv1.RunFunctionResponse()
    ask(asked, wanted)
    for r in wanted:
        items = fetch_resources(asked.requirements.resources[r.name], configs).items
        if not items and r.policy == "Required":
            findings.append(Finding("", "fatal", required_missing(r)))
        for item in items:
            try:
                # Digested as the function digests it: plans are cached by it.
                digest = content_digest(item.resource.SerializeToString(deterministic=True))
                name, doc = config_document(read_config(item.resource), digest)
            except InputError as err:
                findings.append(Finding("", "fatal", str(err)))
                delivered.add(str(item.resource["metadata"]["name"]))  # selected, though unreadable
                continue
            delivered.add(name)
            if doc is not None:
                documents.setdefault(name, doc)
            elif must_carry_document(r):
                findings.append(Finding("", "fatal", document_missing(name)))
    for raw in configs:
        name = str((raw.get("metadata") or {}).get("name", "?"))
        data = raw.get("data")
        unselected = raw.get("kind") == ENVIRONMENT_CONFIG_KIND and name not in delivered
        keys = [k for k in data if str(k).lower() == DOCUMENT_KEY.lower()] if isinstance(data, dict) else []
        if unselected and keys:
            unread = (
                f"EnvironmentConfig {name} carries data.{keys[0]}, but the function does not select it "
                f"(no label {DEFAULT_LABEL}={DEFAULT_LABEL_VALUE}, nor selected or named by the function Input)"
            )
            findings.append(Finding("", "warning", unread))
    return sorted(documents.values(), key=lambda d: (d.doc.priority, d.name)), findings


def check_stacks(configs: Sequence[Mapping[str, Any]], spec: InputSpec) -> list[Finding]:
    """Every document the function would be given, planned onto every generated stack it can apply to."""
    documents, findings = _selected(configs, spec)
    for s in stack.every():
        docs = [d for d in documents if not d.doc.retired and d.doc.match.admits(s.cloud, s.accelerator)]
        if not docs and spec.registry is None:
            continue
        try:
            planned = plan(s, Collected(documents=tuple(docs), policy=spec.registry))
        except InputError as err:
            findings.append(Finding(f"stack {s.id}", "fatal", str(err)))
            continue
        findings += [Finding(f"stack {s.id}", "warning", n) for n in planned.warnings]
    return findings


def check_xr(
    xr: Mapping[str, Any], configs: Sequence[Mapping[str, Any]], input_doc: Mapping[str, Any] | None, subject: str
) -> list[Finding]:
    """Run the function on one ServingStack with ``configs`` as the EnvironmentConfigs Crossplane would supply."""
    try:
        result = asyncio.run(run_pipeline(FunctionRunner().RunFunction, xr=xr, input=input_doc, required=list(configs)))
    except RenderError as err:
        fatal = [r.message for r in err.response.results if r.severity == fnv1.SEVERITY_FATAL] if err.response else []
        return [Finding(subject, "fatal", m) for m in fatal or [str(err)]]
    return [Finding(subject, "warning", r.message) for r in result.results if r.severity == fnv1.SEVERITY_WARNING]


@click.command()
@click.option(
    "--required-resources",
    "--extra-resources",
    "-e",
    "configs",
    multiple=True,
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="EnvironmentConfigs to check (file or directory).",
)
@click.option(
    "--xr",
    "xrs",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Check against these ServingStacks (file or directory) instead of every generated stack.",
)
@INPUT_OPTION
@click.option("--warnings-as-errors", is_flag=True, help="Exit non-zero on warnings too.")
def validate(
    configs: tuple[Path, ...], xrs: tuple[Path, ...], input_file: Path | None, warnings_as_errors: bool
) -> None:
    """Check EnvironmentConfigs against every generated stack, or against the given ServingStacks.

    Prints one line per problem, with the message the function would give, and
    exits 1 on any fatal one. Without --xr, every document that can apply to a
    stack (by match.clouds and match.accelerators) is checked on it, together:
    labels, names and namespaces are taken as matching.
    """
    logging.configure(logging.Level.DISABLED)
    supplied = [to_jsonable(d) for d in read_documents(configs)]
    raw_input: dict[str, Any] | None = to_jsonable(read_one(input_file, "Input"))
    try:
        given: Input | None = parse_input_document(raw_input)
    except InputError as err:
        fail(str(err))
    findings: list[Finding] = []
    if xrs:
        stacks = [(xr, path) for path in xrs for xr in read_documents((path,))]
        for xr, path in stacks:
            subject = f"ServingStack {xr.get('metadata', {}).get('name', '?')} ({path})"
            findings += check_xr(to_jsonable(xr), supplied, raw_input, subject)
        scope = f"{len(stacks)} ServingStacks"
    else:
        findings = check_stacks(supplied, given.spec if given is not None else InputSpec())
        scope = "every generated stack"
    distinct = list(dict.fromkeys(findings))  # a bad document selected twice is one problem
    for finding in distinct:
        click.echo(finding.line())
    fatal = sum(f.severity == "fatal" for f in distinct)
    warned = len(distinct) - fatal
    click.echo(
        f"function validate: {len(supplied)} documents against {scope}: {fatal} fatal, {warned} warnings", err=True
    )
    if fatal or (warnings_as_errors and warned):
        sys.exit(1)
