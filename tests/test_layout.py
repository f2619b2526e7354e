"""The product apart from its test rig: who may import whom, where test helpers live, how long a module may grow."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.repo import REPO

TESTS = REPO / "tests"
# A module past this many lines holds more than one job: split it by job.
MAX_LINES = 600


def _imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at the top or inside a function; ``from x import y`` gives x and x.y.

    A relative import comes out with its leading dots (``.collect``): it stays in its own package.
    """
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def _modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py") if "generated" not in p.parts)


def test_test_helpers_live_in_tests_support() -> None:
    top = {p.name for p in TESTS.glob("*.py")}
    assert {n for n in top if not n.startswith("test_")} == {"__init__.py", "conftest.py"}


@pytest.mark.parametrize("path", _modules("tests"), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path) -> None:
    """Shared code is in tests/support/ and fixtures in conftest.py; nothing imports a test module or conftest."""
    for name in _imports(path):
        assert not name.startswith("."), f"{path.relative_to(REPO)}: relative import {name}"
        if name == "tests" or name.startswith("tests."):
            assert name.startswith("tests.support"), f"{path.relative_to(REPO)} imports {name}"


@pytest.mark.parametrize("folder", ["function", "generator", "upgrading"])
def test_the_product_imports_nothing_from_the_test_rig_or_the_bench(folder: str) -> None:
    for path in _modules(folder):
        wrong = [n for n in _imports(path) if n.split(".")[0] in {"tests", "bench"}]
        assert wrong == [], f"{path.relative_to(REPO)} imports {wrong}"


def test_no_hand_written_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules("function", "generator", "upgrading", "tests", "bench", "example")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_bench_and_the_test_rig_it_uses_need_no_dev_toolchain() -> None:
    """``./dev bench`` and ``./dev soak`` install the runtime only: bench/ and what it takes from tests/support/."""
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    # A requirement's import name: "types-PyYAML" and "pre-commit" are no imports; the rest import as named.
    blocked = sorted({r.split("=")[0].strip().lower() for r in dev} - {"types-pyyaml", "pre-commit"})
    block = f"import sys\nfor name in {blocked!r}: sys.modules[name] = None\n"
    code = block + "import bench.benchmark, bench.files_per_render, bench.load, bench.soak"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


# Only the refresh command reads the reference sources (and parity tests, which
# skip where they are absent); a fresh clone has none, so nothing the build,
# the function or its data rely on may point there, not even a comment citing
# a fact: a fact names its upstream file, or the facts/ file that keeps it.
# Named as a relative path, or built from a parent directory and its name.
REFERENCE_DIR = re.compile(r"\.\./shared\b|/\s*[\"']shared[\"']")
MAY_NAME_THE_REFERENCE_DIR = {
    "generator/refresh.py",  # the refresh command: DEFAULT_SHARED
    "tests/support/parity.py",  # the parity tests' one way there, skipping where it is absent
    "dev",  # the refresh command's usage line
    "tests/test_layout.py",  # this guard
}


def test_only_the_refresh_command_and_parity_tests_name_the_reference_directory() -> None:
    folders = ("function", "generator", "upgrading", "stacks", "facts", "schema", "docs", "example", "package")
    files = [p for folder in (*folders, "tests", "bench", ".ci") for p in (REPO / folder).rglob("*")]
    naming = sorted(
        rel
        for p in (*files, REPO / "dev", REPO / "README.md")
        if p.is_file()
        and "__pycache__" not in p.parts
        and (rel := str(p.relative_to(REPO))) not in MAY_NAME_THE_REFERENCE_DIR
        and REFERENCE_DIR.search(p.read_text(errors="replace"))
    )
    assert naming == []


def test_parity_tests_reach_the_reference_sources_through_one_helper() -> None:
    """``DEFAULT_SHARED``/``DEFAULT_SOURCES`` are the refreshes' defaults; tests take them only through parity.py."""
    taking = sorted(
        str(p.relative_to(REPO))
        for folder in ("tests", "bench", "upgrading", "function")
        for p in (REPO / folder).rglob("*.py")
        if ("DEFAULT_SHARED" in (text := p.read_text()) or "DEFAULT_SOURCES" in text)
        and p.name not in ("parity.py", "test_layout.py", "refresh.py")
    )
    assert taking == []
