"""Registry mirrors: which rule rewrites an image or chart reference, and to what.

Rules match on whole path segments (``nvcr.io`` matches ``nvcr.io/nvidia/x``,
never ``nvcr.iox/...``) and the longest ``from`` wins; ``*`` is the fallback,
and it replaces the registry host (or the chart repository's scheme and host)
while keeping the path, so ``quay.io/prometheus/prometheus`` lands at
``<to>/prometheus/prometheus``. A reference already under a rule's ``to`` is
left alone, so a rewrite is idempotent and a reference the author pointed at
the mirror by hand is not mirrored twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, NamedTuple, TypeVar, cast

CATCH_ALL = "*"


@dataclass(frozen=True)
class Rule:
    source: str
    to: str
    document: str  # the name of the document that set it, for provenance


class Rewrite(NamedTuple):  # one per rewritten reference: a tuple is made several times faster than a dataclass
    value: str
    rule: Rule


_R = TypeVar("_R", bound=tuple[Any, ...])


def record(cls: type[_R]) -> Callable[[tuple[Any, ...]], _R]:
    """``cls``, a NamedTuple, made from a tuple of all its fields without the Python-level ``__new__`` its
    constructor runs: a third of the cost, for the records a rebuild makes per image."""
    return cast(Callable[[tuple[Any, ...]], _R], partial(tuple.__new__, cls))


_rewrite = record(Rewrite)


def under(ref: str, prefix: str) -> bool:
    """Whether ``ref`` is ``prefix`` or below it, on a path-segment boundary."""
    exact, below = _boundary(prefix)
    return ref == exact or ref.startswith(below)


def _boundary(prefix: str) -> tuple[str, str]:
    """``prefix`` as :func:`under` compares a reference with it: itself, and what starts below it."""
    exact = prefix.rstrip("/")
    return exact, exact + "/"


@dataclass(frozen=True)
class _Prefixes:
    """Path prefixes stripped once, as :func:`under` compares them: whether a reference is one or below one."""

    exact: frozenset[str]
    below: tuple[str, ...]

    @classmethod
    def of(cls, prefixes: Iterable[str]) -> _Prefixes:
        bounds = [_boundary(p) for p in prefixes]
        return cls(frozenset(exact for exact, _ in bounds), tuple(below for _, below in bounds))

    def cover(self, ref: str) -> bool:
        return ref in self.exact or ref.startswith(self.below)


@dataclass(frozen=True)
class Rules:
    """An ordered set of prefix rules of one kind (images or charts)."""

    rules: tuple[Rule, ...] = ()

    @classmethod
    def of(cls, rules: Iterable[Rule]) -> Rules:
        # Longest prefix first; the catch-all last.
        return cls(tuple(sorted(rules, key=lambda r: (r.source == CATCH_ALL, -len(r.source), r.source))))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def mirrored(self, ref: str) -> bool:
        """Whether ``ref`` is under some rule's target."""
        return self._targets.cover(ref)

    def match(self, ref: str) -> Rule | None:
        matching = self._matching(ref)
        return None if matching is None else matching[0]

    def rewrite(self, ref: str, host_end: int) -> Rewrite | None:
        """``ref`` under the rule that matches it; the catch-all replaces ``ref[:host_end]``, keeping the path.

        None when no rule matches or ``ref`` is already under a rule's target.
        """
        matching = None if self._targets.cover(ref) else self._matching(ref)  # (cover: see mirrored)
        if matching is None:
            return None
        rule, source, _below, to, cut = matching
        if source is None:
            path = ref[host_end + 1 :]  # "" where the host is all of it (host_end == len(ref))
            return _rewrite((f"{to}/{path}" if path else to, rule))
        return _rewrite((to + ref[cut:], rule))

    def _matching(self, ref: str) -> tuple[Rule, str | None, str, str, int] | None:
        """The first of :attr:`_sources` whose rule ``ref`` matches (the longest source; the catch-all last)."""
        for entry in self._sources:
            _rule, source, below, _to, _cut = entry
            if source is None or ref == source or ref.startswith(below):
                return entry
        return None

    # What under() strips and appends, done once per rule set rather than per
    # reference (a rebuild for new mirrors matches every image of a stack).
    @cached_property
    def _targets(self) -> _Prefixes:
        return _Prefixes.of(r.to for r in self.rules)

    @cached_property
    def _sources(self) -> tuple[tuple[Rule, str | None, str, str, int], ...]:
        """Each rule with its source as :func:`under` compares it (None for the catch-all), its target
        without a trailing slash, and how much of a reference its source replaces."""
        return tuple(
            (r, None, "", r.to.rstrip("/"), 0)
            if r.source == CATCH_ALL
            else (r, *_boundary(r.source), r.to.rstrip("/"), len(r.source.rstrip("/")))
            for r in self.rules
        )


def rewrite_image_name(rules: Rules, name: str) -> Rewrite | None:
    """Rewrite a fully qualified image name (``host/path``, no tag); None when no rule applies."""
    return rules.rewrite(name, host_end(name))


def host_end(name: str) -> int:
    """Where the host of an image name ends: what a catch-all rule replaces (see Rules.rewrite)."""
    slash = name.find("/")
    return len(name) if slash < 0 else slash


def chart_repository(repository: str) -> tuple[str, int]:
    """A chart repository URL as rules take it (no trailing slash), and where what the catch-all replaces ends:
    its scheme and host (all of a reference without a scheme)."""
    repository = repository.rstrip("/")
    scheme = repository.find("://")
    return repository, len(repository) if scheme < 0 else scheme + 3 + host_end(repository[scheme + 3 :])


def bare(ref: str) -> str:
    """A reference without its URL scheme (chart repositories carry one; registries do not)."""
    return ref.split("://", 1)[-1].rstrip("/")


@dataclass(frozen=True)
class Policy:
    """One strict policy: who set it, where (for messages), and the registries it allows."""

    by: str  # a document name, or INPUT_POLICY
    where: str  # "EnvironmentConfig bank: data.servingStack.registry"
    allowed: tuple[str, ...]  # host or host/path prefixes, no scheme

    def allows(self, ref: str) -> bool:
        return self._allowed.cover(bare(ref))

    @cached_property  # strict asks for every reference of every rebuilt component
    def _allowed(self) -> _Prefixes:
        return _Prefixes.of(self.allowed)


# ``Policy.by`` of the policy the function Input imposes.
INPUT_POLICY = "function Input"


@dataclass(frozen=True)
class Mirrors:
    """The registry settings of every applied document, merged in application order."""

    images: Rules = field(default_factory=Rules)
    charts: Rules = field(default_factory=Rules)
    image_pull_secrets: tuple[str, ...] = ()
    image_pull_secrets_by: str = ""
    chart_pull_secret: str = ""
    chart_pull_secret_by: str = ""
    # Every strict policy in force (each must hold), and every rule of every
    # document as written (before later documents replaced a source's target),
    # with its kind ("images" or "charts").
    policies: tuple[Policy, ...] = ()
    written_rules: tuple[tuple[str, Rule], ...] = ()

    @property
    def strict(self) -> bool:
        return bool(self.policies)

    @property
    def strict_by(self) -> tuple[str, ...]:
        return tuple(p.by for p in self.policies)

    def allowed(self, ref: str) -> bool:
        return all(p.allows(ref) for p in self.policies)

    def __bool__(self) -> bool:
        return bool(self.images or self.charts or self.image_pull_secrets or self.chart_pull_secret or self.strict)
