"""Where the tests find things: the repository and its example.

Runtime dependencies only: bench/ imports it under ``./dev bench``, which installs no dev toolchain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example"


def load_docs(path: Path) -> list[dict[str, Any]]:
    """Every YAML document of a file, or of a directory's ``*.yaml`` files in name order."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
