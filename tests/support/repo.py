"""Where the tests find things: the repository, its example, the reference sources beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.refresh import DEFAULT_SHARED

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example"


def reference_source(relative: str) -> Path:
    """A path in the reference sources beside the clone (``../shared``), for parity tests only.

    A clone standing alone has none: the test is skipped, saying so.
    """
    path = DEFAULT_SHARED / relative
    if not path.exists():
        pytest.skip(f"parity test: {path} is absent (the reference sources are not beside this clone)")
    return path


def load_docs(path: Path) -> list[dict[str, Any]]:
    """Every YAML document of a file, or of a directory's ``*.yaml`` files in name order."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
