"""Readable messages for bad input: one line naming the object and the field."""

from __future__ import annotations

from pydantic import ValidationError


class InputError(Exception):
    """Input the function refuses; the message is what the user reads."""


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def describe(err: ValidationError, obj: str, prefix: str = "") -> str:
    """``<obj>: <field>: <problem> (got <value>)`` for each error, joined by ``; ``."""
    problems = []
    for e in err.errors(include_url=False):
        where = field_path(tuple(e["loc"]), prefix) or "(document)"
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown field"
        got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {e['input']!r})"
        problems.append(f"{where}: {message}{got}")
    return f"{obj}: " + "; ".join(problems)


# Items listed in one message: a selector may match many EnvironmentConfigs,
# and a result must stay readable in `kubectl describe`.
MAX_LISTED = 5


def first_few(items: list[str], sep: str = "; ") -> str:
    """The first ``MAX_LISTED`` items, then how many more."""
    more = len(items) - MAX_LISTED
    return sep.join(items[:MAX_LISTED]) + (f"{sep}and {more} more" if more > 0 else "")
