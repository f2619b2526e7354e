"""The why-comments of a YAML section in stacks/, so the generated output carries them.

A section is found by its key path (``components``, ``cert-manager``); its comments are
the block right above its key, then every comment inside it, in file order. Inline
comments keep the key they annotate (``version: AICR pin``).
"""

from __future__ import annotations


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _text(line: str) -> str:
    return line.lstrip()[1:].strip()


def _find(lines: list[str], path: tuple[str, ...]) -> int | None:
    """The index of the line holding the last key of ``path``, each key nested in the one before."""
    start, parent = 0, -1
    found: int | None = None
    for name in path:
        found = None
        for i in range(start, len(lines)):
            line = lines[i]
            if not line.strip() or _is_comment(line):
                continue
            if _indent(line) <= parent and i > start:
                break
            if _indent(line) > parent and line.strip().startswith(f"{name}:"):
                found, start, parent = i, i + 1, _indent(line)
                break
        if found is None:
            return None
    return found


def section(text: str, *path: str) -> tuple[str, ...]:
    """Every comment of the section at ``path``; none when the file has no such section."""
    lines = text.splitlines()
    at = _find(lines, path)
    if at is None:
        return ()
    above: list[str] = []
    own = _indent(lines[at])
    i = at - 1
    # Comments indented deeper than the key close the section before it.
    while i >= 0 and _is_comment(lines[i]) and _indent(lines[i]) <= own:
        above.insert(0, _text(lines[i]))
        i -= 1
    inside: list[str] = []
    for n, line in enumerate(lines[at:]):
        if n and line.strip() and not _is_comment(line) and _indent(line) <= own:
            break
        if _is_comment(line):
            inside.append(_text(line))
        elif " #" in line:
            key = line.strip().split(":", 1)[0]
            inside.append(f"{key}: {line.split(' #', 1)[1].strip()}")
    return (*above, *inside)
