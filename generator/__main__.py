"""``python -m generator [--check]``: regenerate ``function/generated/`` from ``facts/`` and ``stacks/``."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from generator.build import FACTS_DIR, REPO, Inputs, generate
from generator.stackfile import StackFileError


@click.command()
@click.option(
    "--facts",
    type=click.Path(path_type=Path),
    default=FACTS_DIR,
    show_default=True,
    help="The facts directory (AICR lock, external manifests); `./dev refresh` writes it.",
)
@click.option("--out", type=click.Path(path_type=Path), default=REPO / "function" / "generated", show_default=True)
@click.option("--check", is_flag=True, help="Exit 1 when the committed output differs from what would be generated.")
def main(facts: Path, out: Path, check: bool) -> None:
    try:
        files = generate(Inputs(facts=facts))
    except StackFileError as err:
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
            click.echo(f"stale: function/generated/{name} ({changed} lines differ)")
        for name in extra:
            click.echo(f"stale: function/generated/{name} (no stack file produces it)")
        if stale or extra:
            click.echo("function/generated/ is out of date: run `python -m generator` and commit the result.", err=True)
            sys.exit(1)
        click.echo(f"function/generated/ is up to date ({len(files)} files)")
        return
    out.mkdir(parents=True, exist_ok=True)
    for name in existing - set(files):
        (out / name).unlink()
    for name, text in files.items():
        (out / name).write_text(text)
    click.echo(f"wrote {len(files)} files to {out}")


if __name__ == "__main__":
    main()
