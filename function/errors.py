"""Readable messages for bad input: one line naming the object and the field, bounded in size."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

# A Fatal travels in the response and into the XR's conditions and events:
# a few KB is readable, and far below any gRPC or etcd limit.
MAX_MESSAGE_CHARS = 4096
# Long enough to recognise a value, short enough that several fit in one message.
EXCERPT_CHARS = 120
# Problems listed per validation error; the rest are counted.
MAX_PROBLEMS = 10


class InputError(Exception):
    """Input the function refuses; the message is what the user reads."""


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``value`` (a string as is, anything else as its repr) cut to ``limit`` characters, saying how much was cut."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def bounded(message: str) -> str:
    """A message cut to MAX_MESSAGE_CHARS."""
    return excerpt(message, MAX_MESSAGE_CHARS)


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# How pydantic refuses an unknown field: a model's extra="forbid", a dataclass's (function.stack) constructor.
_UNKNOWN_FIELD = ("extra_forbidden", "unexpected_keyword_argument")


def describe(err: ValidationError, obj: str, prefix: str = "") -> str:
    """``<obj>: <field>: <problem> (got <value>)`` for each error, joined by ``; ``; values as excerpts."""
    problems = []
    errors = err.errors(include_url=False)
    for e in errors[:MAX_PROBLEMS]:
        where = excerpt(field_path(tuple(e["loc"]), prefix) or "(document)")
        unknown = e["type"] in _UNKNOWN_FIELD
        message = "unknown field" if unknown else excerpt(e["msg"].removeprefix("Value error, "), 2 * EXCERPT_CHARS)
        got = "" if unknown or e["type"] == "missing" else f" (got {excerpt(repr(e['input']))})"
        problems.append(f"{where}: {message}{got}")
    if len(errors) > MAX_PROBLEMS:
        problems.append(f"and {len(errors) - MAX_PROBLEMS} more problems")
    return f"{obj}: " + "; ".join(problems)


# Items listed in one message: a selector may match many EnvironmentConfigs,
# and a result must stay readable in `kubectl describe`.
MAX_LISTED = 5


def first_few(items: list[str], sep: str = "; ") -> str:
    """The first ``MAX_LISTED`` items, then how many more."""
    more = len(items) - MAX_LISTED
    return sep.join(items[:MAX_LISTED]) + (f"{sep}and {more} more" if more > 0 else "")
