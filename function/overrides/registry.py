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

from collections.abc import Iterable
from dataclasses import dataclass, field

CATCH_ALL = "*"


@dataclass(frozen=True)
class Rule:
    source: str
    to: str
    origin: str  # the document that set it, for provenance


@dataclass(frozen=True)
class Rewrite:
    value: str
    rule: Rule


def under(ref: str, prefix: str) -> bool:
    """Whether ``ref`` is ``prefix`` or below it, on a path-segment boundary."""
    prefix = prefix.rstrip("/")
    return ref == prefix or ref.startswith(prefix + "/")


def _ordered(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    # Longest prefix first; the catch-all last.
    return tuple(sorted(rules, key=lambda r: (r.source == CATCH_ALL, -len(r.source), r.source)))


@dataclass(frozen=True)
class Rules:
    """An ordered set of prefix rules of one kind (images or charts)."""

    rules: tuple[Rule, ...] = ()

    @classmethod
    def of(cls, rules: Iterable[Rule]) -> Rules:
        return cls(_ordered(rules))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def mirrored(self, ref: str) -> bool:
        return any(under(ref, r.to) for r in self.rules)

    def match(self, ref: str) -> Rule | None:
        for rule in self.rules:
            if rule.source == CATCH_ALL or under(ref, rule.source):
                return rule
        return None


def rewrite_image_name(rules: Rules, name: str) -> Rewrite | None:
    """Rewrite a fully qualified image name (``host/path``, no tag); None when no rule applies."""
    if rules.mirrored(name):
        return None
    rule = rules.match(name)
    if rule is None:
        return None
    if rule.source == CATCH_ALL:
        _host, _, path = name.partition("/")
        return Rewrite(f"{rule.to.rstrip('/')}/{path}" if path else rule.to.rstrip("/"), rule)
    return Rewrite(rule.to.rstrip("/") + name[len(rule.source.rstrip("/")) :], rule)


def rewrite_chart_repository(rules: Rules, repository: str) -> Rewrite | None:
    """Rewrite a chart repository URL; the chart name and version are not part of it."""
    repository = repository.rstrip("/")
    if rules.mirrored(repository):
        return None
    rule = rules.match(repository)
    if rule is None:
        return None
    if rule.source == CATCH_ALL:
        _scheme, _, rest = repository.partition("://")
        _host, _, path = rest.partition("/")
        return Rewrite(f"{rule.to.rstrip('/')}/{path}" if path else rule.to.rstrip("/"), rule)
    return Rewrite(rule.to.rstrip("/") + repository[len(rule.source.rstrip("/")) :], rule)


@dataclass(frozen=True)
class Mirrors:
    """The registry settings of every applied document, merged in application order."""

    images: Rules = field(default_factory=Rules)
    charts: Rules = field(default_factory=Rules)
    image_pull_secrets: tuple[str, ...] = ()
    image_pull_secrets_by: str = ""
    chart_pull_secret: str = ""
    chart_pull_secret_by: str = ""
    strict_by: tuple[str, ...] = ()

    @property
    def strict(self) -> bool:
        return bool(self.strict_by)

    def __bool__(self) -> bool:
        return bool(self.images or self.charts or self.image_pull_secrets or self.chart_pull_secret or self.strict)
