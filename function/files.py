"""What the commands read from disk: YAML documents, the Input file option, and the one line they fail with."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml


def fail(message: str) -> NoReturn:
    """Exit 1 with one readable line on stderr."""
    click.echo(f"function: {message}", err=True)
    sys.exit(1)


def read_documents(paths: tuple[Path, ...]) -> list[dict[str, Any]]:
    """Every YAML map in the files given, directories searched for *.yaml and *.yml in name order."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for file in files:
            try:
                docs += [d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
            except (OSError, yaml.YAMLError) as err:
                fail(f"cannot read {file}: {err}")
    return docs


def read_one(path: Path | None, what: str) -> dict[str, Any] | None:
    """The one document in ``path`` (None without a path); more or fewer is a failure naming ``what``."""
    if path is None:
        return None
    docs = read_documents((path,))
    if len(docs) != 1:
        fail(f"{path}: expected one {what}, found {len(docs)} documents")
    return docs[0]


# The function's Input as a file: render, explain and validate take it alike.
INPUT_OPTION = click.option(
    "--input",
    "input_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The function's Input (as in the Composition's pipeline step).",
)
