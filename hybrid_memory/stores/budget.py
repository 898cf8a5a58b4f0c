"""One memory budget for everything per-user a process caches, least recently used users evicted first.

A process that serves many users must not grow with the number of users it has seen. Every
per-user cache (a :class:`~hybrid_memory.stores.local.LocalStore` partition: vectors, BM25
postings and filter columns; the writer's fallback neighbour index) registers its entries here
with an estimate of their size in bytes. When the total exceeds the budget, the least recently
used entries of *any* owner are evicted (the owner's ``evict`` callback drops them); an evicted
entry is rebuilt from the store the next time it is needed, so eviction costs time, never
correctness.

The budget is one setting, :attr:`hybrid_memory.config.CacheConfig.max_bytes` (default 512 MB),
read from ``HYBRID_MEMORY_CACHE_BYTES`` (or ``HYBRID_MEMORY_CACHE__MAX_BYTES``) when the process
first needs it; :func:`set_cache_budget` changes it at run time.

Example:
    >>> b = CacheBudget(1000)
    >>> dropped = []
    >>> b.add(dropped.append, "alice", 600)
    >>> b.add(dropped.append, "bob", 600)  # over budget: alice is the least recently used
    >>> dropped, b.stats().entries, b.stats().evictions
    (['alice'], 1, 1)
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["CacheBudget", "CacheStats", "cache_budget", "set_cache_budget"]

#: The environment variable that sets the budget in bytes (a shorter alias of the config's).
ENV_BYTES = "HYBRID_MEMORY_CACHE_BYTES"

Evict = Callable[[Hashable], None]
_T = TypeVar("_T")


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of the per-user caches of this process.

    Attributes:
        max_bytes: The budget.
        bytes: Estimated bytes held now.
        entries: Cached per-user entries (of every owner).
        hits: Lookups served from a cached entry.
        misses: Lookups that had to build an entry from the store.
        evictions: Entries dropped to stay within the budget.
    """

    max_bytes: int
    bytes: int
    entries: int
    hits: int
    misses: int
    evictions: int


class CacheBudget:
    """Byte accounting and LRU eviction across every per-user cache of a process (thread-safe).

    An entry is keyed by its owner's ``evict`` callback and the owner's key (e.g. a user id).
    Callbacks run without the budget's lock held and must only drop the entry (never block on
    I/O); a callback may run in whichever thread pushed the total over the budget.

    Args:
        max_bytes: The budget in bytes (>= 0; 0 keeps nothing cached beyond the entry in use).
    """

    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._lru: OrderedDict[tuple[Evict, Hashable], int] = OrderedDict()
        # Owners the garbage collector freed, forgotten the next time the lock is taken. The GC
        # may free an owner in any thread at any allocation, also one made while this thread holds
        # the lock (inside resize()): its callback only appends here and never waits for the lock.
        self._collected: deque[Evict] = deque()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def owner(self, owner: _T, drop: Callable[[_T, Hashable], None]) -> Evict:
        """An ``evict`` callback that calls ``drop(owner, key)`` while holding ``owner`` only weakly.

        When ``owner`` is garbage-collected its entries are forgotten (by the budget's next call),
        so an owner that was never closed neither stays alive through the budget nor leaves its
        bytes accounted.
        """
        ref = weakref.ref(owner)

        def evict(key: Hashable) -> None:
            o = ref()
            if o is not None:
                drop(o, key)

        weakref.finalize(owner, self._collected.append, evict)
        return evict

    def _forget_collected(self) -> None:
        """Drop the entries of owners the garbage collector freed (the lock is held)."""
        while self._collected:
            self._discard_owner(self._collected.popleft())

    def _discard_owner(self, evict: Evict) -> None:
        for k in [k for k in self._lru if k[0] == evict]:
            self._bytes -= self._lru.pop(k)

    def hit(self, evict: Evict, key: Hashable) -> None:
        """Mark ``key`` of that owner as just used (a cache hit)."""
        with self._lock:
            self._forget_collected()
            self._hits += 1
            k = (evict, key)
            if k in self._lru:
                self._lru.move_to_end(k)

    def add(self, evict: Evict, key: Hashable, nbytes: int) -> None:
        """Account a newly built entry (a cache miss) as most recently used; evict others if over budget."""
        with self._lock:
            self._misses += 1
        self.resize(evict, key, nbytes)

    def resize(self, evict: Evict, key: Hashable, nbytes: int) -> None:
        """Set the size of an entry (added if unknown, made most recently used); evict others if over budget."""
        victims: list[tuple[Evict, Hashable]] = []
        k = (evict, key)
        with self._lock:
            self._forget_collected()
            self._bytes += nbytes - self._lru.get(k, 0)
            self._lru[k] = nbytes
            self._lru.move_to_end(k)
            while self._bytes > self.max_bytes and len(self._lru) > 1:
                victim, size = next(iter(self._lru.items()))
                if victim == k:
                    break
                del self._lru[victim]
                self._bytes -= size
                self._evictions += 1
                victims.append(victim)
        for owner, vkey in victims:
            owner(vkey)

    def discard(self, evict: Evict, key: Hashable) -> None:
        """Forget an entry its owner dropped itself (not counted as an eviction)."""
        with self._lock:
            self._forget_collected()
            self._bytes -= self._lru.pop((evict, key), 0)

    def discard_owner(self, evict: Evict) -> None:
        """Forget every entry of one owner (it closed or cleared its cache)."""
        with self._lock:
            self._forget_collected()
            self._discard_owner(evict)

    def set_max_bytes(self, max_bytes: int) -> None:
        """Change the budget; entries over the new budget are evicted by the next :meth:`add`."""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        with self._lock:
            self.max_bytes = max_bytes

    def stats(self) -> CacheStats:
        """Budget, size, entry count and the hit/miss/eviction counters."""
        with self._lock:
            self._forget_collected()
            return CacheStats(self.max_bytes, self._bytes, len(self._lru), self._hits, self._misses, self._evictions)


_default: CacheBudget | None = None
_default_lock = threading.Lock()


def _configured_bytes() -> int:
    for name in (ENV_BYTES, "HYBRID_MEMORY_CACHE__MAX_BYTES"):
        raw = os.environ.get(name, "").strip()
        if raw:
            return int(raw)
    from hybrid_memory.config import CacheConfig

    return CacheConfig().max_bytes


def cache_budget() -> CacheBudget:
    """The process-wide budget (created on first use from the configuration)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CacheBudget(_configured_bytes())
        return _default


def set_cache_budget(max_bytes: int) -> CacheBudget:
    """Change the process-wide budget (bytes) and return it."""
    budget = cache_budget()
    budget.set_max_bytes(max_bytes)
    return budget
