"""Access touches off the caller's path: counted in memory, written to the store in the background.

A touch (``access_count += 1``, ``last_accessed_at = when``) is what :meth:`HybridMemory.recall
<hybrid_memory.HybridMemory.recall>` with ``touch=True``, :meth:`~hybrid_memory.HybridMemory.build_context`
(``rerank.touch_on_inject``) and :meth:`~hybrid_memory.HybridMemory.touch` leave behind. On a
replicated Weaviate cluster one touch is a replicated read-modify-write batch that costs about as
much as the recall itself, so with ``rerank.touch_in_background`` (the default) the caller only
records it in :class:`TouchQueue` and returns:

* pending touches are **coalesced** per (user, memory id): increments add up, the latest access
  time wins; and **batched** per user: a write takes all of one user's touches and needs as many
  store calls as the largest count among them (access times within :data:`COALESCE_WINDOW` are
  written as the latest of them; :func:`touch_calls`), so a backlog shrinks instead of costing
  one store call per recall;
* they are written by a dedicated background thread as soon as it is free (a *group commit*: no
  timer; touches recorded while a write is in flight join the next one). At most
  :attr:`TouchQueue.max_pending` (user, memory id) pairs wait; beyond that the caller waits
  until the thread takes the waiting ones (back-pressure when the store is slower than the
  traffic);
* a user's touches are written in the order they were taken, under the writer's lock of that
  user, so a concurrent read-modify-write of the writer (a dedup bump, a supersede) neither
  loses an increment nor is overwritten by one;
* :meth:`TouchQueue.sync_user` writes one user's pending touches on the caller's thread (reads
  of that user's records, such as ``get`` and ``list_memories``, see their own touches); it
  costs a dictionary lookup when nothing is pending;
* a recall ranks with its user's touches that are not written yet (:meth:`TouchQueue.apply`):
  the access counts and times the search returned get the touches still pending or being
  written added, so the heat a recall sees does not depend on how quick the thread was. The
  caller never waits for it. A store call that commits a touch in the instant between the
  search and this correction is counted twice or not at all, once, for that recall's ranking
  only (nothing is written from it);
* a failed write is never raised: it is reported (``background_errors``, a
  ``background_error`` trace step, ``metrics().background_errors["touch"]``) and its counts are
  dropped. Touch counts are ranking hints (heat, recency), not data: what is pending when the
  process is killed is lost (at most what accumulated during one store write, or
  ``max_pending`` pairs), which is why they may be buffered at all;
* forgetting drops what is pending (:meth:`TouchQueue.forget_user`, :meth:`TouchQueue.discard`),
  and a touch never re-creates a memory: the stores skip missing ids and undo a touch that
  raced a forget (their forget epoch), so a pending touch written after a forget changes nothing.

Example:
    >>> from datetime import datetime, timezone
    >>> from hybrid_memory.stores.local import LocalStore
    >>> from hybrid_memory.records import MAX_COUNTER, MemoryRecord
    >>> store = LocalStore(":memory:")
    >>> store.bind_embedder("demo", 2)
    >>> rec = MemoryRecord.create(user_id="alice", content="likes tea")
    >>> store.upsert([rec], [[1.0, 0.0]])
    >>> q = TouchQueue(store, report_error=lambda *a: None)
    >>> when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    >>> q.record("alice", [rec.id], when); q.record("alice", [rec.id], when)
    >>> q.flush(timeout=10), store.get("alice", [rec.id])[0].access_count
    (True, 2)
    >>> q.close(timeout=10)
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from hybrid_memory.errors import UserForgottenError
from hybrid_memory.records import MAX_COUNTER, MemoryRecord
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.values import StoreHit
from hybrid_memory.write.extraction import BackgroundWorker

__all__ = ["COALESCE_WINDOW", "TouchQueue", "touch_calls"]

#: ``(job, user, session, epoch, message)``: records a background failure (never raised).
ReportError = Callable[[str, str, str | None, int | None, str], None]
#: Holds the writer's lock of these users (the facade passes ``MemoryWriter.locked``).
UserLock = Callable[[Iterable[str]], AbstractContextManager[None]]

#: One user's pending touches: memory id -> (count, latest access time).
_Pending = dict[str, tuple[int, datetime]]


#: Access times at most this far apart are written as the latest of them, in one store call.
COALESCE_WINDOW = timedelta(seconds=60)


def touch_calls(
    pending: Mapping[str, tuple[int, datetime]], *, window: timedelta = COALESCE_WINDOW
) -> list[tuple[list[str], datetime]]:
    """The store ``touch`` calls that apply one user's coalesced touches, in order.

    A store touch adds 1 to every id it is given and sets one access time. Ids whose latest
    access times lie within ``window`` of the earliest of a group share one call with the
    group's latest time (a memory's ``last_accessed_at`` may move later by less than
    ``window``: nothing at the scale of the recency half-life, days), and a group is touched
    once per increment (the ids touched ``n`` times are in the first ``n`` calls of their
    group). So a backlog of many recalls costs as many calls as its largest count, not one per
    recall, while simulated access times (``now=``) days apart stay apart.

    Args:
        pending: Memory id -> (how many touches, the latest access time).
        window: Access times this close are written as one (``timedelta(0)``: exact times).

    Returns:
        ``(ids, when)`` per store call.

    Example:
        >>> from datetime import datetime, timedelta, timezone
        >>> t1 = datetime(2024, 5, 1, tzinfo=timezone.utc)
        >>> t2, t3 = t1 + timedelta(seconds=5), t1 + timedelta(days=1)
        >>> [(ids, w - t1) for ids, w in touch_calls({"a": (1, t1), "b": (2, t2), "c": (1, t3)})]
        [(['a', 'b'], datetime.timedelta(seconds=5)), (['b'], datetime.timedelta(seconds=5)), (['c'], datetime.timedelta(days=1))]
    """
    groups: list[dict[str, tuple[int, datetime]]] = []
    first: datetime | None = None
    for memory_id, (count, when) in sorted(pending.items(), key=lambda kv: kv[1][1]):
        if first is None or when - first > window:
            groups.append({})
            first = when
        groups[-1][memory_id] = (count, when)
    calls: list[tuple[list[str], datetime]] = []
    for group in groups:
        latest = max(when for _, when in group.values())
        for n in range(1, max(count for count, _ in group.values()) + 1):
            calls.append(([i for i, (count, _) in group.items() if count >= n], latest))
    return calls


class TouchQueue:
    """Pending access touches, coalesced per (user, memory id) and written by a background thread.

    Args:
        store: Where the touches are written (``store.touch``).
        report_error: Records a failed write ``(job, user, session, epoch, message)`` in the
            memory's background errors, the trace and the metrics; never raised.
        background: ``False`` writes every touch on the caller's thread at once, as
            :meth:`record` is called (``rerank.touch_in_background=False``).
        user_lock: Holds the writer's lock of a user while its touches are written, so they are
            ordered with the writer's read-modify-writes; default: no lock.
        max_pending: (user, memory id) pairs that may wait; :meth:`record` waits beyond it.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        report_error: ReportError,
        background: bool = True,
        user_lock: UserLock | None = None,
        max_pending: int = 10_000,
    ) -> None:
        self.store = store
        self.background = background
        self.max_pending = max(1, max_pending)
        self._report_error = report_error
        self._user_lock: UserLock = user_lock if user_lock is not None else _no_lock
        #: Writes the touches (one daemon thread of its own: never queued behind an LLM job).
        self.worker = BackgroundWorker(name="hybrid-memory-touches")
        self._cond = threading.Condition()
        self._pending: dict[str, _Pending] = {}
        self._size = 0  # (user, memory id) pairs in _pending
        #: Per user with touches being written: each batch's store calls not returned yet, oldest first.
        self._unsent: dict[str, list[list[tuple[list[str], datetime]]]] = {}
        self._scheduled = False  # a drain job is queued and has not started yet
        self._closed = False

    @property
    def pending(self) -> int:
        """(user, memory id) pairs recorded and not taken for writing yet."""
        with self._cond:
            return self._size

    def record(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        """Count one access of each of ``ids`` at ``when`` (ids and time already validated).

        In the background mode this only updates the in-memory counts and, when no write is
        queued, queues one; a closed queue drops the touch.

        Raises:
            StoreError: only without ``background``: the store's touch failed.
        """
        if not ids:
            return
        if not self.background:
            self.store.touch(user_id, ids, when)
            return
        with self._cond:
            self._cond.wait_for(lambda: self._size < self.max_pending or self._closed)
            if self._closed:
                return
            mine = self._pending.setdefault(user_id, {})
            for memory_id in ids:
                old = mine.get(memory_id)
                if old is None:
                    mine[memory_id] = (1, when)
                    self._size += 1
                else:
                    mine[memory_id] = (old[0] + 1, max(old[1], when))
            if not self._scheduled:
                self._scheduled = True
                self.worker.submit(self._drain)  # under the lock: close() cannot slip in between

    def sync_user(self, user_id: str) -> None:
        """Write ``user_id``'s pending touches now, on this thread, after any of its writes in flight.

        Free when the user has nothing pending or in flight (one dictionary lookup). A failed
        write is reported, not raised.
        """
        with self._cond:
            if user_id not in self._pending and user_id not in self._unsent:
                return
        self._write_user(user_id)

    def apply(self, user_id: str, hits: Sequence[StoreHit]) -> list[StoreHit]:
        """``hits`` of ``user_id`` as they will be once its pending touches are written.

        A store read (a search) does not see the touches still pending or being written; this
        adds them to the hits' access counts and times, without waiting and without writing.

        Example:
            >>> from datetime import datetime, timezone
            >>> from hybrid_memory.stores.local import LocalStore
            >>> from hybrid_memory.records import MemoryRecord
            >>> from hybrid_memory.values import StoreHit
            >>> store = LocalStore(":memory:")
            >>> store.bind_embedder("demo", 2)
            >>> rec = MemoryRecord.create(user_id="alice", content="likes tea")
            >>> store.upsert([rec], [[1.0, 0.0]])
            >>> lock = threading.Lock()  # held: the background write of alice's touches waits
            >>> q = TouchQueue(store, report_error=lambda *a: None, user_lock=lambda users: lock)
            >>> with lock:
            ...     q.record("alice", [rec.id], datetime(2024, 5, 1, tzinfo=timezone.utc))
            ...     hit = StoreHit(record=store.get("alice", [rec.id])[0], score=1.0)
            ...     hit.record.access_count, q.apply("alice", [hit])[0].record.access_count
            (0, 1)
            >>> q.close(timeout=10), store.get("alice", [rec.id])[0].access_count
            (True, 1)
        """
        hits = list(hits)
        if not hits:
            return hits
        with self._cond:
            if user_id not in self._pending and user_id not in self._unsent:
                return hits
            extra = self._unwritten(user_id)
        return [_with_touches(h, extra.get(h.record.id)) for h in hits]

    def _unwritten(self, user_id: str) -> dict[str, tuple[int, datetime]]:
        """Touches of ``user_id`` not in the store: pending plus calls not returned (under _cond)."""
        out: dict[str, tuple[int, datetime]] = dict(self._pending.get(user_id, {}))
        for calls in self._unsent.get(user_id, ()):
            for ids, when in calls:
                for memory_id in ids:
                    old = out.get(memory_id)
                    out[memory_id] = (1, when) if old is None else (old[0] + 1, max(old[1], when))
        return out

    def forget_user(self, user_id: str) -> None:
        """Drop the pending touches of ``user_id`` (it was forgotten)."""
        with self._cond:
            dropped = self._pending.pop(user_id, None)
            if dropped:
                self._size -= len(dropped)
                self._cond.notify_all()

    def discard(self, user_id: str, ids: Iterable[str]) -> None:
        """Drop the pending touches of these memories of ``user_id`` (they were deleted)."""
        with self._cond:
            mine = self._pending.get(user_id)
            if not mine:
                return
            for memory_id in ids:
                if mine.pop(memory_id, None) is not None:
                    self._size -= 1
            if not mine:
                del self._pending[user_id]
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s until every pending touch is written; return whether they were."""
        return self.worker.join(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Write what is pending (waiting up to ``timeout`` s), then stop the thread.

        Touches recorded afterwards are dropped. Returns whether everything was written in time.
        """
        done = self.worker.join(timeout)
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._size = 0
            self._cond.notify_all()
        self.worker.close(timeout=timeout)
        return done

    # ------------------------------------------------------------------ the writes
    def _drain(self) -> None:
        """The background job: write every user's pending touches, one user at a time."""
        with self._cond:
            self._scheduled = False  # touches recorded from here on queue the next job
            users = list(self._pending)
        for user_id in users:
            self._write_user(user_id)

    def _write_user(self, user_id: str) -> None:
        """Take ``user_id``'s pending touches and write them, under the user's lock (in taking order)."""
        with self._user_lock([user_id]):
            with self._cond:
                batch = self._pending.pop(user_id, None)
                if not batch:
                    return
                self._size -= len(batch)
                calls = touch_calls(batch)
                self._unsent.setdefault(user_id, []).append(calls)
                self._cond.notify_all()
            try:
                while calls:
                    ids, when = calls[0]
                    try:
                        self.store.touch(user_id, ids, when)
                    finally:
                        with self._cond:
                            calls.pop(0)  # written, or failed and dropped: no longer added on reads
            except UserForgottenError:
                pass  # forgotten meanwhile (any process): the store kept nothing of it
            except Exception as exc:  # counts are hints: reported and dropped, never raised
                self._report_error("touch", user_id, None, None, f"touch failed: {type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    calls.clear()
                    unsent = [c for c in self._unsent[user_id] if c is not calls]  # by identity
                    if unsent:
                        self._unsent[user_id] = unsent
                    else:
                        del self._unsent[user_id]


def _with_touches(hit: StoreHit, touch: tuple[int, datetime] | None) -> StoreHit:
    """``hit`` with ``touch`` (count, latest time) added to its record."""
    if touch is None:
        return hit
    rec: MemoryRecord = hit.record
    count, when = touch
    last = when if rec.last_accessed_at is None else max(rec.last_accessed_at, when)
    record = rec.model_copy(
        update={"access_count": min(MAX_COUNTER, rec.access_count + count), "last_accessed_at": last}
    )
    return dataclasses.replace(hit, record=record)


def _no_lock(user_ids: Iterable[str]) -> AbstractContextManager[None]:
    """No lock (a queue used without a writer)."""
    return contextlib.nullcontext()
