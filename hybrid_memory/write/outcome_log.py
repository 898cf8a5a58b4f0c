"""Each user's recent write outcomes, within the process's cache budget.

:class:`UserWriteLogs` is the table behind ``HybridMemory.write_log``: one bounded deque of
:class:`~hybrid_memory.records.WriteOutcome` per user. A server that has written for many users
would otherwise keep every user's log forever (about 1 MB per user at the default 500 outcomes);
here each log counts against :mod:`hybrid_memory.stores.budget` and the logs of the least
recently written users are dropped first when the budget is full (their ``write_log`` is then
empty until they write again; the memories themselves are in the store).

Example:
    >>> from collections import deque
    >>> from hybrid_memory.stores.budget import CacheBudget
    >>> logs = UserWriteLogs(CacheBudget(5 * OUTCOME_BYTES))
    >>> logs["a"] = deque([1, 2]); logs["b"] = deque([3])
    >>> logs["c"] = deque([4])  # over budget: a's log (least recently used) goes
    >>> sorted(logs)
    ['b', 'c']
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

from hybrid_memory.records import WriteOutcome
from hybrid_memory.stores.budget import CacheBudget, cache_budget
from hybrid_memory.write.writer import REVIEW_KEY

__all__ = ["FORGOTTEN_REASON", "OUTCOME_BYTES", "UserWriteLogs"]

#: The reason of a logged write that named a memory forgotten since.
FORGOTTEN_REASON = "[forgotten]"
#: Estimated bytes of one logged outcome (the outcome, its record and the record's strings).
OUTCOME_BYTES = 2048


class UserWriteLogs(dict[str, "deque[Any]"]):
    """``user -> deque of outcomes``, accounted in the cache budget (LRU users' logs evicted).

    Only :meth:`get`, item assignment and :meth:`pop` are accounted (what :meth:`add`,
    :meth:`recent` and :meth:`drop` use); a log's size is re-accounted on each :meth:`get`, i.e.
    before an outcome is appended to it. :meth:`add`, :meth:`recent` and :meth:`drop` are
    thread-safe.

    Args:
        budget: The cache budget (default: the process's).
    """

    def __init__(self, budget: CacheBudget | None = None) -> None:
        super().__init__()
        self._budget = budget if budget is not None else cache_budget()
        self._evict = self._budget.owner(self, UserWriteLogs._evicted)
        # Guards the logs only; never held across store, embedder or LLM calls.
        self._lock = threading.Lock()

    def add(self, outcomes: Iterable[WriteOutcome], *, maxlen: int) -> None:
        """Append each outcome that has a record to its user's log (a new log keeps the last ``maxlen``)."""
        with self._lock:
            for o in outcomes:
                if o.record is not None:
                    log = self.get(o.record.user_id)
                    if log is None:
                        log = self[o.record.user_id] = deque(maxlen=maxlen)
                    log.append(o)

    def recent(self, user_id: str) -> list[WriteOutcome]:
        """The outcomes logged for ``user_id``, oldest first."""
        with self._lock:
            return list(self.get(user_id, ()))

    def scrub(self, user_id: str, memory_id: str, texts: Iterable[str] = ()) -> None:
        """Take a forgotten (or rewritten: ``texts`` are its old texts) memory out of ``user_id``'s log.

        Its own outcomes so far leave; an outcome whose reason names it (a supersede, a demotion: the
        reason quotes its details) keeps its action with the reason replaced by ``[forgotten]``,
        and its record loses the conflict reviews that name it; a record whose search context is
        the end of one of ``texts`` is listed without it.
        """
        gone = [t for t in texts if t]
        with self._lock:
            log = self.get(user_id)
            if not log:
                return
            kept: deque[Any] = deque(maxlen=log.maxlen)
            for o in log:
                rec = o.record
                if rec is not None and rec.id == memory_id:
                    continue
                update: dict[str, Any] = {}
                if o.related_id == memory_id or memory_id in (o.reason or ""):
                    update["reason"] = FORGOTTEN_REASON
                if rec is not None:
                    reviews = rec.metadata.get(REVIEW_KEY) or []
                    left = [e for e in reviews if e.get("old_id") != memory_id]
                    if len(left) != len(reviews):
                        meta = {k: v for k, v in rec.metadata.items() if k != REVIEW_KEY}
                        rec = rec.evolve(metadata={**meta, REVIEW_KEY: left} if left else meta)
                    if rec.context and any(t.endswith(rec.context) for t in gone):
                        rec = rec.evolve(context="")
                    if rec is not o.record:
                        update["record"] = rec
                kept.append(o.model_copy(update=update) if update else o)
            self[user_id] = kept

    def drop(self, user_id: str) -> None:
        """Forget the log of ``user_id``."""
        with self._lock:
            self.pop(user_id, None)

    def _evicted(self, user_id: Hashable) -> None:
        dict.pop(self, str(user_id), None)

    def get(self, user_id: str, default: Any = None) -> Any:
        """The log of ``user_id`` (marked as just used, re-accounted for one more outcome)."""
        log = super().get(user_id)
        if log is None:
            return default
        self._budget.resize(self._evict, user_id, (len(log) + 1) * OUTCOME_BYTES)
        return log

    def __setitem__(self, user_id: str, log: deque[Any]) -> None:
        super().__setitem__(user_id, log)
        self._budget.add(self._evict, user_id, (len(log) + 1) * OUTCOME_BYTES)

    def pop(self, user_id: str, default: Any = None) -> Any:
        """Remove and return the log of ``user_id`` (``default`` when there is none)."""
        self._budget.discard(self._evict, user_id)
        return super().pop(user_id, default)
