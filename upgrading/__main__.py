"""``python -m upgrading [--check]``: write UPGRADING.md, or exit 1 when the committed one is stale."""

from __future__ import annotations

import sys

import click

from upgrading.compare import OUT, generate


@click.command()
@click.option("--check", is_flag=True, help="Exit 1 when the committed UPGRADING.md is stale.")
def main(check: bool) -> None:
    text = generate()
    if check:
        if not OUT.is_file() or OUT.read_text() != text:
            click.echo("UPGRADING.md is out of date: run `python -m upgrading` and commit it.", err=True)
            sys.exit(1)
        click.echo("UPGRADING.md is up to date")
        return
    OUT.write_text(text)
    click.echo(f"wrote {OUT.name}")


if __name__ == "__main__":
    main()
