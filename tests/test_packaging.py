"""Packaging: the wheel `pip install .` installs, and the version the CLI reports."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from function import generated
from function.__version__ import __version__
from generator import lock
from generator.build import FACTS_DIR, REPO
from tests.support.serve import Invoke


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # Offline, with the hatchling the dev toolchain installs: what `pip install .` builds.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_wheel_is_compose_serving_stack_with_no_top_level_generated(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    dist_info = f"compose_serving_stack-{__version__}.dist-info"
    assert {n.split("/")[0] for n in names} == {"function", dist_info}
    metadata = Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
    assert (metadata["Name"], metadata["Version"]) == ("compose-serving-stack", __version__)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert wheel.read(f"{dist_info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
    assert {"function/py.typed", "function/generated/__init__.py", "function/generated/eks_nvidia.py"} <= set(names)


def test_wheel_has_both_console_scripts(wheel: zipfile.ZipFile) -> None:
    entry_points = wheel.read(f"compose_serving_stack-{__version__}.dist-info/entry_points.txt").decode()
    assert "function = function.main:cli" in entry_points
    assert "compose-serving-stack = function.main:cli" in entry_points


def test_license_is_the_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_version_names_function_generator_and_aicr_release(invoke: Invoke) -> None:
    locked = lock.read(FACTS_DIR)
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        f"function {__version__}",
        f"generator {generated.GENERATOR}",
        f"aicr {locked.aicr.version} {locked.aicr.commit}",
    ]
    assert result.output.splitlines()[2] == "aicr v0.11.1 bc05c6be7859cee7ce6680b93333ed03ba795f88"


@pytest.mark.parametrize("script", ["function", "compose-serving-stack"])
def test_installed_scripts_print_the_version(script: str) -> None:
    run = subprocess.run(
        [str(Path(sys.executable).parent / script), "--version"], capture_output=True, text=True, check=True
    )
    assert run.stdout.splitlines()[0] == f"function {__version__}"
