"""Per-user mean vectors for a store whose reads are network round trips (query centring).

Query centring (``retrieval.centre_weight``) needs the mean of a user's active memory vectors on
every recall. ``LocalStore`` computes it from its in-process index (again once about a tenth of the
user's memories changed, the rule below). ``WeaviateStore`` has to read every active vector of the user to compute it (one request:
about 35 ms for 600 memories of 512 dimensions, 130 ms for 2,000, on two cores), so it keeps the
result in a :class:`MeanCache` and reads it again only when

* this process has written about a tenth of the user's memories since (``max(1, n // 10)``
  memories written, updated or deleted through this store; a new user's first write counts at
  once), or
* ``ttl`` seconds have passed (what other processes wrote is seen within that time), or
* this process forgot the user (``delete_user`` drops the entry at once).

A mean of hundreds of memories moves little with a few more, and the mean only shifts the query
vector of that user's own searches: it is never returned, and a stale one costs ranking quality,
not correctness or isolation.

Example:
    >>> import numpy as np
    >>> calls = []
    >>> def fetch(user):
    ...     calls.append(user)
    ...     return np.array([0.5, 0.5], dtype=np.float32), 20
    >>> cache = MeanCache(ttl=300.0, clock=lambda: 0.0)
    >>> cache.get("u", fetch).tolist(), cache.get("u", fetch).tolist(), len(calls)
    ([0.5, 0.5], [0.5, 0.5], 1)
    >>> cache.wrote("u", 2); _ = cache.get("u", fetch); len(calls)
    2
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hybrid_memory.values import Vector

__all__ = ["MeanCache"]

#: ``user -> (mean or None, number of active memories it was computed from)``.
Fetch = Callable[[str], tuple[Vector | None, int]]


@dataclass
class _Entry:
    mean: Vector | None
    count: int
    at: float
    writes: int = 0


class MeanCache:
    """The mean vector of each user's active memories, read again after writes or ``ttl`` seconds.

    Thread-safe. At most ``max_users`` users are kept (least recently used dropped first).

    Args:
        ttl: Seconds after which a user's mean is read again (other processes' writes).
        max_users: Users kept.
        clock: Monotonic seconds (injectable for tests).
    """

    def __init__(
        self, *, ttl: float = 300.0, max_users: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_users = max_users
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: str, fetch: Fetch) -> Vector | None:
        """``user_id``'s mean: the cached one while fresh, else ``fetch(user_id)`` (then cached)."""
        now = self._clock()
        with self._lock:
            e = self._entries.get(user_id)
            if e is not None and now - e.at <= self.ttl and e.writes < max(1, e.count // 10):
                self._entries.move_to_end(user_id)
                return e.mean
        mean, count = fetch(user_id)  # outside the lock: a slow read does not block other users
        with self._lock:
            self._entries[user_id] = _Entry(mean, count, now)
            self._entries.move_to_end(user_id)
            while len(self._entries) > self.max_users:
                self._entries.popitem(last=False)
        return mean

    def wrote(self, user_id: str, n: int = 1) -> None:
        """Count ``n`` memories of ``user_id`` written, updated or deleted by this process."""
        with self._lock:
            e = self._entries.get(user_id)
            if e is not None:
                e.writes += n

    def wrote_records(self, user_ids: Iterable[str]) -> None:
        """:meth:`wrote` once per item of ``user_ids`` (one per record written)."""
        for user_id in user_ids:
            self.wrote(user_id)

    def forget(self, user_id: str) -> None:
        """Drop ``user_id``'s mean (the user was forgotten)."""
        with self._lock:
            self._entries.pop(user_id, None)
