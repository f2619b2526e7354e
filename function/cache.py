"""The one memory budget: every memo in ``function/`` that grows with its input shares it.

Each cache is a least-recently-used map; together they hold at most the
budget (``--cache-size-mb``, env ``CACHE_SIZE_MB``, default 64 MiB), and the
entry used longest ago, in whichever cache, goes first. So no input (20,000
distinct driver names, 1,500 distinct 1 MB documents, 10,000 clusters) grows
the server without bound, and the caches in use split the budget as the
traffic does. Each entry is put with its size in bytes, as its owner measures
it (serialized size, or the size of what it was computed from); a value larger
than a quarter of the budget is not kept. A smaller budget never changes a
response, only how often it is computed again.

Memos keyed by one of the few generated stacks (``stack.load``, ``stack.every``,
``strict.stack_hosts``, ``overrides.build.sizes`` ...) stay ``functools.cache``:
their domain is fixed at build time and no request can add to it.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MIB = 1024 * 1024
DEFAULT_BUDGET_MB = 64

# What an entry costs in memory per byte of its serialized form, measured on the
# EKS stack's values: a parsed Python tree ~2.8x. Owners put entries at
# serialized size times it, so the budget holds for the process's memory, not
# only for the wire size.
PYTHON_FACTOR = 3

_ALL: weakref.WeakSet[BoundedCache[Any, Any]] = weakref.WeakSet()
_clock = itertools.count()  # when each entry was last used, across caches


class _Shared:
    """The budget, and the bytes every cache holds together (as put)."""

    budget = DEFAULT_BUDGET_MB * MIB
    held = 0


_SHARED = _Shared()


def set_budget(megabytes: int) -> None:
    """Share ``megabytes`` MiB among every cache from now on (0: keep nothing), evicting what no longer fits."""
    if megabytes < 0:
        raise ValueError("the cache budget cannot be negative")
    _SHARED.budget = megabytes * MIB
    _evict()


def budget() -> int:
    """The shared budget, in bytes."""
    return _SHARED.budget


def held() -> int:
    """The bytes every cache holds together, as put."""
    return _SHARED.held


def caches() -> list[BoundedCache[Any, Any]]:
    """Every cache alive in the process, by name: what tests and the load script look at."""
    return sorted(_ALL, key=lambda c: c.name)


def _evict() -> None:
    """Evict the least recently used entries, across caches, until what is held fits the budget."""
    while _SHARED.held > _SHARED.budget:
        holding = [c for c in _ALL if c._items]
        if not holding:
            return
        min(holding, key=lambda c: c._used[next(iter(c._items))])._pop_oldest()


def _release(held_by_cache: list[int]) -> None:
    """A cache is gone (a runner's, with its runner): what it held no longer counts."""
    _SHARED.held -= held_by_cache[0]


class BoundedCache(Generic[K, V]):
    """An LRU map whose entries count against the shared budget (see the module's doc)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # The values, least recently used first; their sizes and when each was last used apart: a tuple per
        # entry would be one more object for the cyclic collector to walk for as long as the entry lives.
        self._items: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self._used: dict[K, int] = {}
        self._held = [0]  # its bytes, in a cell its finalizer reads
        _ALL.add(self)
        weakref.finalize(self, _release, self._held)

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        self._used[key] = next(_clock)
        return hit

    def put(self, key: K, value: V, size: int) -> V:
        """Keep ``value`` (``size`` bytes) unless it alone takes over a quarter of the budget; evict the entries
        used longest ago, in any cache, to fit. Returns it."""
        if key in self._items:
            self._remove(key)
        if size > _SHARED.budget // 4:
            return value
        self._items[key] = value
        self._sizes[key] = size
        self._used[key] = next(_clock)
        self._held[0] += size
        _SHARED.held += size
        _evict()
        return value

    def _remove(self, key: K) -> None:
        del self._items[key]
        del self._used[key]
        size = self._sizes.pop(key)
        self._held[0] -= size
        _SHARED.held -= size

    def _pop_oldest(self) -> None:
        self._remove(next(iter(self._items)))

    def clear(self) -> None:
        _SHARED.held -= self._held[0]
        self._items.clear()
        self._sizes.clear()
        self._used.clear()
        self._held[0] = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """The bytes held, as put."""
        return self._held[0]
