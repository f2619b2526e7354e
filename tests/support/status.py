"""Recording what ``status.stack`` the runner converts, and checking it against converting the whole status."""

from __future__ import annotations

from typing import Any

import pytest

from function import fn, status
from function.tree import to_struct

Converted = list[tuple[tuple[Any, ...], status.StackStatus]]


def recorded(monkeypatch: pytest.MonkeyPatch) -> Converted:
    """Every ``converted_stack_status`` call the runner makes from now on: its arguments and result."""
    calls: Converted = []
    real = status.converted_stack_status

    def recording(*args: Any) -> status.StackStatus:
        converted = real(*args)
        calls.append((args, converted))
        return converted

    monkeypatch.setattr(fn, "converted_stack_status", recording)
    return calls


def assert_converted_as_the_whole_status(calls: Converted) -> None:
    """Each result is :func:`status.stack_status` of its arguments converted by protobuf."""
    for args, converted in calls:
        struct = to_struct(status.stack_status(*args))
        assert converted.serialized == struct.SerializeToString(deterministic=True)
