"""The one cache the runtime uses: least recently used, bounded by entries and by bytes.

Every memo in ``function/`` that grows with its input (parsed documents,
plans, converted bodies, status blocks, whole responses) is one of these, so
no input — 20,000 distinct driver names, 1,500 distinct 1 MB documents — can
grow the server without bound. Each entry is put with its size in bytes, as
its owner measures it (serialized protobuf size, or the size of the document
it was computed from, times the factor below); a value larger than the whole
byte budget is not kept.

Memos keyed by one of the few generated stacks (``stack.load``, ``stack.every``,
``renderer``, ``strict.stack_hosts``, ``strict._read_generated``,
``overrides.build.sizes``, ``overrides.build._untouched_by_mirrors``,
``overrides.build._unlayered`` and ``overrides.apply._unchanged``) stay
``functools.cache``: their domain is fixed at build time and no request can
add to it.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MIB = 1024 * 1024

# What an entry costs in memory per byte of its serialized form, measured on the
# EKS stack's values: a parsed Python tree ~2.8x, a upb protobuf Struct ~4.4x.
# Owners put entries at serialized size times one of these, so the byte bounds
# hold for the process's memory, not only for the wire size.
PYTHON_FACTOR = 3
PROTOBUF_FACTOR = 5


_ALL: weakref.WeakSet[BoundedCache[Any, Any]] = weakref.WeakSet()


def caches() -> list[BoundedCache[Any, Any]]:
    """Every cache alive in the process, by name: what tests and the load script look at."""
    return sorted(_ALL, key=lambda c: c.name)


class BoundedCache(Generic[K, V]):
    """An LRU map holding at most ``max_entries`` entries and ``max_bytes`` bytes (as put)."""

    def __init__(self, name: str, *, max_entries: int, max_bytes: int) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"cache {name}: bounds must be positive")
        self.name = name
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        # The values, least recently used first, and their sizes apart: a (value, size) pair per entry
        # would be one more object for the cyclic collector to walk for as long as the entry lives.
        self._items: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self._bytes = 0
        _ALL.add(self)

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit

    def put(self, key: K, value: V, size: int) -> V:
        """Keep ``value`` (``size`` bytes) unless it alone exceeds the budget; evict the oldest to fit. Returns it."""
        old = self._sizes.pop(key, None)
        if old is not None:
            del self._items[key]
            self._bytes -= old
        if size > self.max_bytes:
            return value
        self._items[key] = value
        self._sizes[key] = size
        self._bytes += size
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            evicted, _ = self._items.popitem(last=False)
            self._bytes -= self._sizes.pop(evicted)
        return value

    def clear(self) -> None:
        self._items.clear()
        self._sizes.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """The bytes held, as put."""
        return self._bytes
