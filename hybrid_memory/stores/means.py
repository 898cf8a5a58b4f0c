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
not correctness or isolation. So the stale mean of a user with more than 1,000 memories
(``background_above``) is used once more while a background thread reads it again: a user above
10,000 memories is read with the cursor API (about 0.7 s per 10,000), which would otherwise stall
the recall that found the mean stale. A user's first read in a process is bounded the same way when
the store can read "the mean if the user has at most n memories" (a ``probe``; WeaviateStore: one
request of at most 1,001 vectors, about 50 ms): a larger user's first mean is read in the background
too, and its recalls run uncentred (as with ``centre_weight`` 0) until it is in, instead of the first
recall waiting for the whole read (about 7 s at 100,000 memories). Only a small user's reads are made
on the caller's thread. A read racing :meth:`MeanCache.forget` is not kept.

Example:
    >>> import numpy as np
    >>> calls = []
    >>> def fetch(user, before):
    ...     calls.append(user)
    ...     return np.array([0.5, 0.5], dtype=np.float32), 20
    >>> cache = MeanCache(ttl=300.0, clock=lambda: 0.0)
    >>> cache.get("u", fetch).tolist(), cache.get("u", fetch).tolist(), len(calls)
    ([0.5, 0.5], [0.5, 0.5], 1)
    >>> cache.wrote("u", 2); _ = cache.get("u", fetch); len(calls)
    2
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hybrid_memory.values import Vector

__all__ = ["MeanCache"]

logger = logging.getLogger(__name__)

#: ``(user, count of the last read kept or None) -> (mean or None, number of active memories it was
#: computed from)``; the earlier count lets a store pick how to read (WeaviateStore: one request or
#: the cursor).
Fetch = Callable[[str, int | None], tuple[Vector | None, int]]
#: ``(user, n) -> (mean or None, count)`` when the user has at most ``n`` active memories, else
#: ``None``: a read bounded by ``n`` (WeaviateStore: one request of at most ``n + 1`` vectors).
Probe = Callable[[str, int], tuple[Vector | None, int] | None]


@dataclass
class _Entry:
    mean: Vector | None
    count: int
    at: float
    writes: int = 0


@dataclass
class _Flight:
    """A read of one user's mean on a caller's thread, which other callers of that user wait for."""

    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False  # the read succeeded (else a waiter reads itself)
    mean: Vector | None = None
    waiters: int = 0


def _in_a_thread(job: Callable[[], None]) -> None:
    threading.Thread(target=job, name="hybrid-memory-mean-refresh", daemon=True).start()


class MeanCache:
    """The mean vector of each user's active memories, read again after writes or ``ttl`` seconds.

    Thread-safe. At most ``max_users`` users are kept (least recently used dropped first). A stale
    mean of more than ``background_above`` memories is served once more while one background read
    replaces it: reading 10,000 vectors takes Weaviate about 0.7 s, which would otherwise stall the
    recall that found it stale. At most :attr:`max_refreshes` users are read in the background at
    once; the others keep their stale means until a read is free. A user's first read is made on
    the caller's thread, bounded by ``background_above`` when :meth:`get` has a ``probe``: a larger
    user gets ``None`` (no centring) until its first mean, read in the background, is in. Other
    callers of the same user wait for a read on a caller's thread and share its result instead of
    making their own (a worker's first recalls of one user arriving at once). A mean read while
    :meth:`forget` ran is not kept.

    Args:
        ttl: Seconds after which a user's mean is read again (other processes' writes).
        max_users: Users kept.
        clock: Monotonic seconds (injectable for tests).
        background_above: Stale means of more memories are refreshed in the background
            (``None``: never).
        spawn: Runs a background refresh (default: a daemon thread; injectable for tests).
    """

    #: Background reads under way at most (for as many users): more stale large users are served
    #: their stale means until a read is free (a scan each; two cores).
    max_refreshes = 2

    def __init__(
        self,
        *,
        ttl: float = 300.0,
        max_users: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        background_above: int | None = 1_000,
        spawn: Callable[[Callable[[], None]], None] = _in_a_thread,
    ) -> None:
        self.ttl = ttl
        self.max_users = max_users
        self.background_above = background_above
        self._clock = clock
        self._spawn = spawn
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._reading: dict[str, int] = {}  # user -> reads of its mean under way
        self._forgotten: set[str] = set()  # users forgotten while a read was under way: its result is dropped
        self._refreshing: set[str] = set()  # users with a background read under way (one at a time)
        self._flights: dict[str, _Flight] = {}  # user -> the read on a caller's thread the others wait for
        self._closed = False  # the store closed: a background read ending now is dropped quietly

    def get(self, user_id: str, fetch: Fetch, probe: Probe | None = None) -> Vector | None:
        """``user_id``'s mean: the cached one while fresh, else ``fetch(user_id, count before)`` (then cached).

        Args:
            user_id: Whose mean.
            fetch: Reads the mean (any size).
            probe: Reads it if the user has at most ``n`` active memories: a first read then costs
                at most ``background_above`` vectors, and a larger user's first mean is read in
                the background (``None`` until it is in).
        """
        while True:
            now = self._clock()
            with self._lock:
                e = self._entries.get(user_id)
                if e is not None:
                    fresh = now - e.at <= self.ttl and e.writes < max(1, e.count // 10)
                    large = self.background_above is not None and e.count > self.background_above
                    if fresh or large:
                        self._entries.move_to_end(user_id)
                        if not fresh:
                            self._refresh_in_background(user_id, e.count, fetch, now)
                        return e.mean
                flight = self._flights.get(user_id)
                if flight is None:  # this caller reads; callers of the same user meanwhile wait for it
                    flight = self._flights[user_id] = _Flight()
                    before = None if e is None else e.count
                    bound = self.background_above if e is None else None
                    self._reading[user_id] = self._reading.get(user_id, 0) + 1
                    break
                flight.waiters += 1
            flight.done.wait()
            if flight.ok:
                return flight.mean
            # The read waited for failed (its caller got the error): read again.
        try:  # outside the lock: a slow read does not block other users
            got = probe(user_id, bound) if probe is not None and bound is not None else fetch(user_id, before)
        except BaseException:
            self._finish(user_id, None, now)
            self._land(user_id, flight, None, ok=False)
            raise
        mean: Vector | None = None
        try:
            if got is None and bound is not None:
                # A first read of more than ``bound`` memories: an entry without a mean, stale at once
                # and large, so its read is made in the background (the recalls meanwhile: uncentred).
                self._finish(user_id, (None, bound + 1), -math.inf)
                with self._lock:
                    if user_id in self._entries:  # not forgotten while the probe ran
                        self._refresh_in_background(user_id, bound + 1, fetch, now)
            else:
                self._finish(user_id, got, now)
                mean = None if got is None else got[0]
        finally:
            self._land(user_id, flight, mean, ok=True)
        return mean

    def _land(self, user_id: str, flight: _Flight, mean: Vector | None, *, ok: bool) -> None:
        """End ``flight``: its waiters get ``mean`` (or read again when not ``ok``)."""
        with self._lock:
            if self._flights.get(user_id) is flight:
                del self._flights[user_id]
            flight.ok, flight.mean = ok, mean
        flight.done.set()

    def _refresh_in_background(self, user_id: str, count: int, fetch: Fetch, now: float) -> None:
        """Start a background read of ``user_id``'s mean unless one runs or too many do (hold the lock)."""
        if user_id in self._refreshing or len(self._refreshing) >= self.max_refreshes:
            return
        self._refreshing.add(user_id)
        self._reading[user_id] = self._reading.get(user_id, 0) + 1
        self._spawn(lambda: self._refresh(user_id, fetch, count, now))

    def _refresh(self, user_id: str, fetch: Fetch, before: int, at: float) -> None:
        got: tuple[Vector | None, int] | None = None
        try:
            got = fetch(user_id, before)
        except Exception as exc:  # the stale mean stays; the next recall that finds it stale tries again
            if not self._closed:  # a read cut off by the store's close is no news
                logger.warning("could not read a user's mean vector again (query centring keeps the old one): %s", exc)
        finally:
            with self._lock:
                self._refreshing.discard(user_id)
            self._finish(user_id, got, at)

    def _finish(self, user_id: str, got: tuple[Vector | None, int] | None, at: float) -> None:
        """End one read of ``user_id``'s mean: keep its result unless it failed or the user was forgotten meanwhile."""
        with self._lock:
            left = self._reading.get(user_id, 1) - 1
            if left:
                self._reading[user_id] = left
            else:
                self._reading.pop(user_id, None)
            forgotten = user_id in self._forgotten
            if not left:
                self._forgotten.discard(user_id)
            if got is None or forgotten or self._closed:
                return
            self._entries[user_id] = _Entry(got[0], got[1], at)
            self._entries.move_to_end(user_id)
            while len(self._entries) > self.max_users:
                self._entries.popitem(last=False)

    def close(self) -> None:
        """The store is closing: background reads still under way end quietly, their results unkept."""
        with self._lock:
            self._closed = True
            self._entries.clear()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the background reads under way; ``True`` when none is left.

        For benchmarks and tests that measure the steady state after a warm-up recall.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._refreshing:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

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
        """Drop ``user_id``'s mean (the user was forgotten), and the result of any read of it under way."""
        with self._lock:
            self._entries.pop(user_id, None)
            self._flights.pop(user_id, None)  # later callers read afresh instead of waiting for this read
            if user_id in self._reading:
                self._forgotten.add(user_id)
