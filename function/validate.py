"""``function validate``: check EnvironmentConfigs before they reach a cluster (for CI and reviewers)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click


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
@click.option(
    "--input",
    "input_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The function's Input (as in the Composition's pipeline step).",
)
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
    from crossplane.function import logging

    from function.errors import InputError
    from function.main import _fail, _read_documents, _read_one
    from function.overrides import check
    from function.overrides.collect import Input, InputSpec, parse_input_document
    from function.render_loop import to_jsonable

    logging.configure(logging.Level.DISABLED)
    supplied = [to_jsonable(d) for d in _read_documents(configs)]
    raw_input: dict[str, Any] | None = to_jsonable(_read_one(input_file, "Input"))
    try:
        given: Input | None = parse_input_document(raw_input)
    except InputError as err:
        _fail(str(err))
    findings: list[check.Finding] = []
    if xrs:
        stacks = [(xr, path) for path in xrs for xr in _read_documents((path,))]
        for xr, path in stacks:
            subject = f"ServingStack {xr.get('metadata', {}).get('name', '?')} ({path})"
            findings += check.check_xr(to_jsonable(xr), supplied, raw_input, subject)
        scope = f"{len(stacks)} ServingStacks"
    else:
        findings = check.check_stacks(supplied, given.spec if given is not None else InputSpec())
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
