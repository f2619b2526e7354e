"""The reference sources beside the clone (``../shared``, and git snapshots of chart repositories in
``../.mirror``): read by parity tests only, skipped without them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from generator.refresh import DEFAULT_SHARED
from upgrading.refresh import DEFAULT_SOURCES


def reference_source(relative: str) -> Path:
    """A path in the reference sources beside the clone (``../shared``), for parity tests only.

    A clone standing alone has none: the test is skipped, saying so.
    """
    path = DEFAULT_SHARED / relative
    if not path.exists():
        pytest.skip(f"parity test: {path} is absent (the reference sources are not beside this clone)")
    return path


def chart_repositories(repositories: Iterable[str]) -> Path:
    """The folder of git snapshots (``<owner>+<name>``) holding every one of ``repositories``, for parity tests only.

    A clone standing alone has none: the test is skipped, saying which are absent.
    """
    missing = [r for r in repositories if not (DEFAULT_SOURCES / r.replace("/", "+")).is_dir()]
    if missing:
        pytest.skip(f"parity test: no git snapshot of {', '.join(missing)} in {DEFAULT_SOURCES}")
    return DEFAULT_SOURCES
