"""``python -m generator [--check]``: regenerate ``generated/`` from AICR and ``stacks/``."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from generator import aicr
from generator.build import DEFAULT_SHARED, REPO, Inputs, aicr_provenance, generate
from generator.stackfile import StackFileError


@click.command()
@click.option(
    "--shared",
    type=click.Path(path_type=Path),
    default=DEFAULT_SHARED,
    show_default=True,
    help="Shared data directory (gaie CRDs and other inputs).",
)
@click.option(
    "--recipes",
    type=click.Path(path_type=Path),
    default=None,
    help="AICR recipes directory. Default: <shared>/aicr/recipes; point it at recipes/ of your own AICR checkout.",
)
@click.option("--aicr-version", default=None, help="AICR release tag, when the recipes have no VERSION.md beside them.")
@click.option("--aicr-commit", default=None, help="AICR commit, likewise.")
@click.option("--out", type=click.Path(path_type=Path), default=REPO / "generated", show_default=True)
@click.option("--check", is_flag=True, help="Exit 1 when the committed output differs from what would be generated.")
def main(
    shared: Path, recipes: Path | None, aicr_version: str | None, aicr_commit: str | None, out: Path, check: bool
) -> None:
    recipes = recipes or shared / "aicr" / "recipes"
    try:
        if aicr_version is None or aicr_commit is None:
            tag, commit = aicr_provenance(recipes)
            aicr_version, aicr_commit = aicr_version or tag, aicr_commit or commit
        files = generate(Inputs(recipes=recipes, shared=shared, aicr_version=aicr_version, aicr_commit=aicr_commit))
    except (StackFileError, aicr.AicrError) as err:
        click.echo(f"generator: {err}", err=True)
        sys.exit(2)
    existing = {p.name for p in out.glob("*.py")} if out.is_dir() else set()
    if check:
        stale = sorted(n for n in files if not (out / n).is_file() or (out / n).read_text() != files[n])
        extra = sorted(existing - set(files))
        for name in stale:
            old = (out / name).read_text().splitlines() if (out / name).is_file() else []
            changed = sum(
                1
                for line in difflib.unified_diff(old, files[name].splitlines(), lineterm="", n=0)
                if line[:1] in "+-" and line[:3] not in ("+++", "---")
            )
            click.echo(f"stale: generated/{name} ({changed} lines differ)")
        for name in extra:
            click.echo(f"stale: generated/{name} (no stack file produces it)")
        if stale or extra:
            click.echo("generated/ is out of date: run `python -m generator` and commit the result.", err=True)
            sys.exit(1)
        click.echo(f"generated/ is up to date ({len(files)} files)")
        return
    out.mkdir(parents=True, exist_ok=True)
    for name in existing - set(files):
        (out / name).unlink()
    for name, text in files.items():
        (out / name).write_text(text)
    click.echo(f"wrote {len(files)} files to {out}")


if __name__ == "__main__":
    main()
