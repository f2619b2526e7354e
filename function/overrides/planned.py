"""What planning hands to the renderer: the component states, a planned component, a whole plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from function.stack import ChartRef, Component

from .images import ImageSeen
from .registry import Mirrors

State = Literal["Managed", "Unmanaged", "Removed"]
"""What an override document may say of a component (``components.<key>.state``)."""

# Managed: composed as planned. Unmanaged: kept on the cluster, Observe-only
# where it was installed. Removed: uninstalled, after whatever depends on it.
MANAGED: Final[State] = "Managed"
UNMANAGED: Final[State] = "Unmanaged"
REMOVED: Final[State] = "Removed"


@dataclass(frozen=True)  # (not a named tuple: every render reads its fields, and a tuple's are read slower)
class Planned:
    """A component as planning left it for this request."""

    component: Component
    state: State = MANAGED
    changed_by: tuple[str, ...] = ()  # the documents that changed it, in application order


@dataclass(frozen=True)
class Added:
    """A component a document added, as its defining entry wrote it: what ``status.stack.added`` remembers."""

    key: str
    document: str  # the document whose entry defines it (chart or manifest)
    state: State  # as planned
    entry: dict[str, Any]  # components.<key> of that document, as written
    chart: ChartRef | None  # as the entry gives it, before any mirror rule


@dataclass(frozen=True)
class Plan:
    """Every component of one XR's stack as planned, and what planning has to tell the user."""

    planned: tuple[Planned, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # Normal results: what was skipped and why
    # component key -> field path ("values.a.b", "chart.version", "state" …) -> document name
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)
    # Every image reference of the managed components, after the mirrors; and the mirrors.
    images: tuple[ImageSeen, ...] = ()
    mirrors: Mirrors = field(default_factory=Mirrors)
    added: tuple[Added, ...] = ()  # the components documents added, by key
