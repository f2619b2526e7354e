"""What a restarted server reads of its stacks before the first request, so its first plans cost what later ones do.

``overrides.prepare`` (called for every stack by the server's warm-up) reads
what planning reads of a generated stack whatever the documents; these tests
empty every cache, prepare, and then count what the first plans still read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from function import main, overrides, server, stack
from function.cache import caches
from function.model import Accelerator, Cloud
from function.overrides import Plan, apply, build, prepare, strict
from function.overrides.registry import Mirrors
from function.stack import Component, Stack
from tests.support.overrides import bank, ec, overridden
from tests.support.xr import make_xr

# What prepare fills: the memos keyed by a generated stack.
PER_STACK = (
    build._unlayered,
    build.sizes,
    build._untouched_by_mirrors,
    strict.stack_hosts,
    strict._read_generated,
    apply._generated,
    apply._unchanged,
)


def _empty() -> None:
    for cache in caches():
        cache.clear()
    for memo in PER_STACK:
        memo.cache_clear()


def _stack(cloud: str) -> Stack:
    loaded = stack.load(Cloud(cloud), Accelerator.NVIDIA)
    assert loaded is not None
    return loaded


@pytest.mark.parametrize("cloud", ["EKS", "Existing"])
def test_after_prepare_the_first_strict_plan_reads_nothing_per_stack_and_walks_only_rebuilt_bodies(
    cloud: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _stack(cloud)
    _empty()
    generated = prepare(loaded)  # as the server's warm-up does
    assert [p.component for p in generated.planned] == list(loaded.components)
    misses = [memo.cache_info().misses for memo in PER_STACK]

    walked: list[str] = []
    checked: list[Component] = []
    real_head, real_enforce = strict._head, strict.enforce

    def walking(component: Component, *rest: Any) -> list[strict.Held]:  # what each body it walks starts with
        walked.append(component.key)
        return real_head(component, *rest)

    def enforcing(loaded: Stack, mirrors: Mirrors, components: Iterable[Component], *rest: Any) -> None:
        checked.extend(components)
        real_enforce(loaded, mirrors, checked, *rest)

    monkeypatch.setattr(strict, "_head", walking)
    monkeypatch.setattr(strict, "enforce", enforcing)
    overridden(make_xr(cloud=cloud), ec("bank", bank()))  # raises on a Fatal

    assert [memo.cache_info().misses for memo in PER_STACK] == misses
    generated_ids = {id(c) for c in loaded.components}
    rebuilt = [c.key for c in checked if id(c) not in generated_ids]
    assert rebuilt and walked == rebuilt


def test_the_server_prepares_every_stack_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    prepared: list[str] = []
    real = overrides.prepare

    def recording(loaded: Stack) -> Plan:
        prepared.append(loaded.id)
        return real(loaded)

    monkeypatch.setattr(overrides, "prepare", recording)
    monkeypatch.setattr(server, "settle_heap", lambda: None)  # the collector is not this test's
    main._warm_up()
    assert sorted(prepared) == sorted(s.id for s in stack.every())
