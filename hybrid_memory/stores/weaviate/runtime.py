"""Process-wide machinery of the Weaviate store: turn sequence numbers and call threads.

* :class:`_SeqClock` issues the ``seq`` of appended turns (one per process, see the package
  docstring, *Conversation state without transactions*);
* ``_WORKERS`` (a :class:`~hybrid_memory.threads.DaemonPool`) runs client calls in daemon threads,
  so a call hanging on a dead server never blocks the caller past its deadline nor the
  interpreter's exit.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

from hybrid_memory.errors import StoreError
from hybrid_memory.threads import DaemonPool

#: Low bits of a turn's ``seq`` that hold the per-process tie-break.
SEQ_TIE_BREAK_BITS = 10
#: Every ``seq`` is below this: the gRPC batch sends numbers as doubles (exact up to 2**53).
_SEQ_LIMIT = 1 << 53

#: gRPC reconnect backoff (ms). grpc-core's default grows to 120 s while a server is down, so a
#: client could stay unusable for a minute or two after the server came back.
_GRPC_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def _live_url_of(client: Any) -> str | None:
    """``<REST base>/v1/.well-known/live`` of a client (best effort; ``None`` if unknown)."""
    params = getattr(getattr(client, "_connection", None), "_connection_params", None)
    http = getattr(params, "http", None)
    host, port, secure = getattr(http, "host", None), getattr(http, "port", None), getattr(http, "secure", None)
    if not isinstance(host, str) or not isinstance(port, int):
        return None
    scheme = "https" if secure else "http"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}/v1/.well-known/live"


class _SeqClock:
    """Issues the ``seq`` of appended turns: ``unix_ms << SEQ_TIE_BREAK_BITS | tie_break``.

    One per process (shared by every :class:`WeaviateStore` in it; re-seeded in a forked child).
    For each ``(collection, user, session)`` it remembers the largest seq issued or loaded (LRU,
    ``capacity`` sessions), and a new seq is the first one of this process's tie-break that is
    above it and not earlier than the current millisecond. So a session's seqs from one process
    strictly increase in append order, and a turn appended after loading another process's turn
    sorts after it even when that process's clock runs ahead.
    """

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self._floors: collections.OrderedDict[tuple[str, str, str], int] = collections.OrderedDict()
        self._reseed()

    def _reseed(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.tie_break = int.from_bytes(os.urandom(2), "big") & ((1 << SEQ_TIE_BREAK_BITS) - 1)

    def _remember(self, key: tuple[str, str, str], seq: int) -> None:
        if seq > self._floors.get(key, -1):
            self._floors[key] = seq
        self._floors.move_to_end(key)
        while len(self._floors) > self.capacity:
            self._floors.popitem(last=False)

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # a forked child: its own tie-break, a lock nobody holds
            self._reseed()

    def observe(self, key: tuple[str, str, str], seq: int) -> None:
        """Note that ``seq`` was seen in ``key``'s log: later appends here sort after it."""
        self._check_fork()
        with self._lock:
            self._remember(key, seq)

    def next(self, key: tuple[str, str, str]) -> int:
        """A new seq for ``key``, above every seq issued or observed for it."""
        self._check_fork()
        bits, tb = SEQ_TIE_BREAK_BITS, self.tie_break
        with self._lock:
            floor = self._floors.get(key, -1)
            slot = max(0, floor >> bits)
            if (slot << bits | tb) <= floor:
                slot += 1
            seq = max(slot, time.time_ns() // 1_000_000) << bits | tb
            if seq >= _SEQ_LIMIT:
                raise StoreError("turn sequence numbers are exhausted (2**53); the clock is far in the future")
            self._remember(key, seq)
            return seq


_SEQ_CLOCK = _SeqClock()


#: Daemon threads for :meth:`WeaviateStore._watched` calls (see :class:`~hybrid_memory.threads.DaemonPool`).
_WORKERS = DaemonPool(name="hybrid-memory-weaviate-call")
