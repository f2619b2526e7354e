"""``python -m upgrading [--check]``: write UPGRADING.md, or exit 1 when the committed one is stale.

It renders every Release with real Helm (helm-python-sdk, in the dev extra): without it, one line
says so and it exits 1.
"""

from __future__ import annotations

import sys

import click

from function.helm import HelmError
from upgrading.compare import OUT, generate


@click.command()
@click.option("--check", is_flag=True, help="Exit 1 when the committed UPGRADING.md is stale.")
def main(check: bool) -> None:
    try:
        text = generate()
    except HelmError as error:
        click.echo(f"upgrading: {error}", err=True)
        sys.exit(1)
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
