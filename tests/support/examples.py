"""The expected render output of the examples: ``example/expected/<case>.yaml``.

``python -m tests.support.examples`` (``./dev examples``) rewrites them from
``example/expected/cases.yaml``; ``python -m tests.support.examples --check`` and
``tests/test_examples_expected.py`` compare them with a fresh render.
"""

from __future__ import annotations

import contextlib
import sys

import yaml
from click.testing import CliRunner

from function.main import cli
from tests.support.repo import REPO

EXPECTED = REPO / "example" / "expected"


def cases() -> dict[str, list[str]]:
    raw = yaml.safe_load((EXPECTED / "cases.yaml").read_text())
    return {str(name): [str(a) for a in args] for name, args in raw.items()}


def render(args: list[str]) -> str:
    """``function render <args>`` from the repository root; its output."""
    with contextlib.chdir(REPO):  # the cases name paths from the repository root
        result = CliRunner().invoke(cli, ["render", *args], catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"function render {' '.join(args)}: {result.output}")
    return result.output


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    wanted = cases()
    for name, args in wanted.items():
        path = EXPECTED / f"{name}.yaml"
        text = render(args)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    extra = sorted(p.name for p in EXPECTED.glob("*.yaml") if p.name != "cases.yaml" and p.stem not in wanted)
    if check and (stale or extra):
        print(f"example/expected is stale: {', '.join(stale + extra)}; run ./dev examples", file=sys.stderr)
        return 1
    for name in extra:
        (EXPECTED / name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
