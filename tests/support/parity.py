"""The reference sources beside the clone (``../shared``): read by parity tests only, skipped without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.refresh import DEFAULT_SHARED


def reference_source(relative: str) -> Path:
    """A path in the reference sources beside the clone (``../shared``), for parity tests only.

    A clone standing alone has none: the test is skipped, saying so.
    """
    path = DEFAULT_SHARED / relative
    if not path.exists():
        pytest.skip(f"parity test: {path} is absent (the reference sources are not beside this clone)")
    return path
