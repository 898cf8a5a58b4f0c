"""Traces: what each memory operation did, stored beside the memories, replayable as JSON.

Tracing is opt-in per :class:`~hybrid_memory.memory.HybridMemory` (``HybridMemory(...,
trace=True)`` or ``HYBRID_MEMORY_TRACE__ENABLED=true``). Every ``add_turn``, ``recall``,
``build_context``, ``remember``/``remember_many``, ``end_session`` and ``put`` then records one
:class:`TraceStep` with:

* the query (or the turn) and the call's parameters;
* the short-term window of the session after the call;
* every re-ranked candidate with all its score components (``score``, ``relevance``,
  ``keyword_score``, ``vector_similarity``, ``importance``, ``recency``, ``heat``) and what became
  of it: ``injected`` / ``returned``, ``dropped`` by the context fuser with its reason (short-term
  duplicate, relevance floor, count / character / token budget) or ``cut`` below the top-k;
* the fused text that went into the prompt, or why injection was skipped;
* the write outcomes (added, deduplicated, superseded, demoted, rejected ... with reasons) and
  importance-scorer fallbacks;
* the error, when the call raised.

Writes made in the background (fact extraction, session summaries) are recorded as
``background_write`` steps; an LLM scorer's background refinement of ``add_turn`` scores as
``refine_importance`` steps (the changed memories, old and new importance and why, and any
fallback); a failure of background work (extraction, summary, refinement) as a
``background_error`` step with the error. A background step of a user forgotten meanwhile is not
kept.

Where the trace lives (:func:`default_trace_path`): ``LocalStore("memory.db")`` traces to the
sibling file ``memory.db.traces.sqlite``; ``LocalStore(":memory:")`` in memory; a Weaviate store
to a local SQLite file ``$XDG_STATE_HOME/hybrid-memory/traces/<host>_<port>_<collection>.sqlite``
(next to its dead-letter queue; Weaviate holds only the memories). ``trace="path.sqlite"`` or
``config.trace.path`` chooses the file explicitly.

Privacy: traced text goes through the same PII redactor as memories (unless
``writer.redact_pii`` / ``trace.redact_pii`` is off). :meth:`HybridMemory.forget_user
<hybrid_memory.memory.HybridMemory.forget_user>` deletes the user's steps (SQLite
``secure_delete``, a rewrite of the file for the copies a rebalance leaves in pages that stay,
and a WAL checkpoint, so the text is gone from the file; while a reader of
another connection pins the WAL, the wipe is reported pending and finished once it leaves, see
:class:`TraceStore`), and
:meth:`~hybrid_memory.memory.HybridMemory.forget` blanks the forgotten memory's text in the
user's steps.

Example:
    >>> from datetime import datetime, timezone
    >>> from hybrid_memory import HybridMemory, LocalStore
    >>> from hybrid_memory.testing import HashingEmbedder
    >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), trace=True)
    >>> day = datetime(2024, 5, 1, 9, tzinfo=timezone.utc)
    >>> _ = mem.add_turn("alice", "s1", "user", "Remember: my phone is 13812345678, I hate cilantro",
    ...                  timestamp=day)
    >>> ctx = mem.build_context("Does this dish have cilantro?", user_id="alice", session_id="s1", now=day)
    >>> [s.kind for s in mem.replay("s1")]
    ['add_turn', 'build_context']
    >>> step = mem.replay("s1")[0]
    >>> step.writes[0].action, step.writes[0].content
    ('added', 'Remember: my phone is [PHONE], I hate cilantro')
    >>> mem.replay("s1")[1].candidates[0].outcome
    'dropped'
    >>> mem.replay("s1")[1].candidates[0].reason
    'duplicates the short-term window'
    >>> mem.close()
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict

from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.errors import (
    ConfigurationError,
    InvalidInputError,
    StoreError,
    StoreUnavailableError,
    UserForgottenError,
)
from hybrid_memory.observe.metrics import MemoryMetrics
from hybrid_memory.records import FusedContext, MemoryRecord, RecallHit, Turn, WriteOutcome, check_id, utcnow
from hybrid_memory.stores.local.connection import (
    DEFAULT_WIPE_TIMEOUT,
    WalWiper,
    connect_owned,
    enable_wal,
    wipe_seconds,
)
from hybrid_memory.stores.local.schema import _BUSY_TIMEOUT_MS
from hybrid_memory.text.privacy import PiiRedactor

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_memory.stores.base import MemoryStore
    from hybrid_memory.write.importance import ScoreBatch

__all__ = [
    "TRACE_FORMAT",
    "Observer",
    "TraceCandidate",
    "TraceSetting",
    "TraceStep",
    "TraceStore",
    "TraceTurn",
    "TraceWrite",
    "default_trace_path",
    "format_steps",
    "observed",
]

logger = logging.getLogger("hybrid_memory.trace")  # the public module path, as before the move to observe/

#: Version of the stored step format.
TRACE_FORMAT = "hybrid-memory-trace/1"
_FORGOTTEN = "[forgotten]"

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


# ----------------------------------------------------------------------------- step model
class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TraceTurn(_Model):
    """A turn of the short-term window (or the turn an ``add_turn`` added)."""

    id: str
    role: str
    content: str
    importance: float
    key_frame: bool
    tokens: int
    timestamp: datetime


class TraceCandidate(_Model):
    """One re-ranked candidate of a recall with every score component and its fate.

    ``outcome``: ``injected`` (in the prompt block), ``returned`` (a ``recall`` result),
    ``dropped`` (by the context fuser, ``reason`` says why) or ``cut`` (below the top-k).
    """

    id: str
    content: str
    category: str
    status: str
    created_at: datetime
    score: float
    relevance: float
    keyword_score: float | None
    vector_similarity: float | None
    importance: float
    recency: float
    heat: float
    outcome: Literal["injected", "returned", "dropped", "cut"]
    reason: str | None = None


class TraceWrite(_Model):
    """One write outcome: what the writer did with a memory and why."""

    action: str
    memory_id: str | None
    content: str | None
    category: str | None = None
    importance: float | None = None
    status: str | None = None
    reason: str | None = None
    related_id: str | None = None


class TraceStep(_Model):
    """What one memory operation did (see the module docstring).

    ``seq`` orders steps across the whole trace; ``at`` is the memory's clock at the start of the
    call and ``duration_ms`` the wall time it took.
    """

    seq: int = 0
    kind: str
    user_id: str
    session_id: str | None
    at: datetime
    duration_ms: float
    query: str | None = None
    params: dict[str, Any] = {}
    turn: TraceTurn | None = None
    short_term: tuple[TraceTurn, ...] = ()
    candidates: tuple[TraceCandidate, ...] = ()
    fused_text: str | None = None
    token_count: int | None = None
    skipped_reason: str | None = None
    degraded: bool = False
    writes: tuple[TraceWrite, ...] = ()
    scorer: str | None = None
    scorer_fallback: str | None = None
    error: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-ready dict (ISO-8601 timestamps); :meth:`model_validate` reads it back."""
        return self.model_dump(mode="json")


# ----------------------------------------------------------------------------- storage
def _state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "hybrid-memory"


def default_trace_path(store: MemoryStore) -> str:
    """Where the trace of ``store`` lives by default (``":memory:"`` for an in-memory store).

    * ``LocalStore("memory.db")``: ``memory.db.traces.sqlite`` beside it;
    * ``LocalStore(":memory:")``: in memory (gone on close);
    * ``WeaviateStore``: ``$XDG_STATE_HOME/hybrid-memory/traces/<host>_<port>_<collection>.sqlite``;
    * any other store: in memory.
    """
    path = getattr(store, "_path", None)
    if isinstance(path, str) and type(store).__name__ == "LocalStore":
        return ":memory:" if path == ":memory:" else f"{path}.traces.sqlite"
    collection = getattr(store, "collection", None)
    if isinstance(collection, str):
        url = getattr(store, "_live_url", None) or ""
        m = re.match(r"https?://\[?([^/\]]+)\]?:(\d+)", url)
        label = f"{m.group(1)}_{m.group(2)}_{collection}" if m else collection
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
        return str(_state_dir() / "traces" / f"{safe}.sqlite")
    return ":memory:"


_ANY: Any = object()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trace_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trace_steps (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    TEXT NOT NULL,
    session_id TEXT,
    kind       TEXT NOT NULL,
    at         TEXT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS trace_by_session ON trace_steps (user_id, session_id, seq);
"""


class TraceStore:
    """Trace steps in one SQLite file (WAL, ``secure_delete``), readable while being written.

    Deleting steps (:meth:`delete_user`, :meth:`scrub_memory` ...) wipes their text from the file
    and its WAL the way :class:`~hybrid_memory.stores.local.LocalStore` does after a forget: when
    a reader of another connection pins the WAL for longer than ``wipe_timeout``, the wipe is
    recorded as pending (:attr:`wipe_pending`) and finished by the next append, open or
    :meth:`close` once that reader has left, or by :meth:`finish_wipe`.

    Args:
        path: SQLite file (parent folders are created), or ``":memory:"``.
        wipe_timeout: Seconds a delete waits for readers that pin the WAL before it reports a
            pending wipe; 0 = one attempt, no wait.

    Raises:
        InvalidInputError: ``wipe_timeout`` is not a number of seconds in [0, 60].
        StoreUnavailableError: the file cannot be opened or is not a trace file.

    Example:
        >>> from datetime import datetime, timezone
        >>> ts = TraceStore(":memory:")
        >>> at = datetime(2024, 1, 1, tzinfo=timezone.utc)
        >>> ts.append(TraceStep(kind="recall", user_id="u", session_id="s", at=at, duration_ms=1.0)).seq
        1
        >>> [s.kind for s in ts.steps(session_id="s")], ts.delete_user("u"), ts.count()
        (['recall'], 1, 0)
        >>> ts.close()
    """

    def __init__(
        self, path: str | os.PathLike[str] = ":memory:", *, wipe_timeout: float = DEFAULT_WIPE_TIMEOUT
    ) -> None:
        wait = wipe_seconds(wipe_timeout, most=60.0)
        raw = os.fspath(path)
        self.path = raw
        self._memory = raw == ":memory:"
        self._lock = threading.RLock()
        self._closed = False
        try:
            if not self._memory:
                Path(raw).expanduser().parent.mkdir(parents=True, exist_ok=True)
                self.path = str(Path(raw).expanduser())
            self._conn = connect_owned(self.path, self)
            self._conn.execute("PRAGMA secure_delete=ON")
            self._conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            if not self._memory:
                enable_wal(self._conn, self.path, required=False)
                self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            row = self._conn.execute("SELECT value FROM trace_meta WHERE key = 'format'").fetchone()
            if row is None:
                self._conn.execute("INSERT INTO trace_meta VALUES ('format', ?)", (TRACE_FORMAT,))
            elif row[0] != TRACE_FORMAT:
                raise StoreUnavailableError(f"{raw!r} holds trace format {row[0]!r}; this library reads {TRACE_FORMAT}")
            self._wiper = WalWiper(self._conn, table="trace_meta", timeout=wait, memory=self._memory)
            self._wiper.opened()
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailableError(f"cannot open the trace file {raw!r}: {exc}") from exc

    def __repr__(self) -> str:
        return f"TraceStore({self.path!r}{', closed' if self._closed else ''})"

    @contextmanager
    def _guard(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StoreUnavailableError("the trace store is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise StoreError(f"trace SQLite error: {exc}") from exc

    def append(self, step: TraceStep) -> TraceStep:
        """Store ``step``; return it with its ``seq`` set."""
        data = json.dumps(step.to_json_dict(), ensure_ascii=False, separators=(",", ":"))
        with self._guard() as c:
            cur = c.execute(
                "INSERT INTO trace_steps (user_id, session_id, kind, at, data) VALUES (?, ?, ?, ?, ?)",
                (step.user_id, step.session_id, step.kind, step.at.isoformat(), data),
            )
            seq = int(cur.lastrowid or 0)
            self._wiper.after_write()
        return step.model_copy(update={"seq": seq})

    def steps(
        self,
        *,
        user_id: str | None = None,
        session_id: str | None = _ANY,
        kind: str | None = None,
        limit: int | None = None,
        after: int = 0,
    ) -> list[TraceStep]:
        """Steps in order, filtered by user, session (``None`` = session-less steps) and kind.

        Args:
            user_id: Only this user's steps.
            session_id: Only this session; ``None`` selects steps without a session (e.g. plain
                ``recall``); omitted = any session.
            kind: Only steps of this kind (``add_turn``, ``recall``, ``build_context`` ...).
            limit: At most this many (the first ones after ``after``).
            after: Only steps with ``seq > after`` (paging).
        """
        sql = "SELECT seq, data FROM trace_steps WHERE seq > ?"
        args: list[Any] = [after]
        if user_id is not None:
            sql += " AND user_id = ?"
            args.append(user_id)
        if session_id is None:
            sql += " AND session_id IS NULL"
        elif session_id is not _ANY:
            sql += " AND session_id = ?"
            args.append(session_id)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._guard() as c:
            rows = c.execute(sql, args).fetchall()
        return [TraceStep.model_validate({**json.loads(data), "seq": int(seq)}) for seq, data in rows]

    def sessions(self, user_id: str | None = None) -> list[dict[str, Any]]:
        """One row per (user, session): ``user_id``, ``session_id``, ``steps``, ``first_at``, ``last_at``."""
        sql = "SELECT user_id, session_id, COUNT(*), MIN(at), MAX(at), MAX(seq) FROM trace_steps"
        args: tuple[Any, ...] = ()
        if user_id is not None:
            sql += " WHERE user_id = ?"
            args = (user_id,)
        sql += " GROUP BY user_id, session_id ORDER BY MAX(seq) DESC"
        with self._guard() as c:
            rows = c.execute(sql, args).fetchall()
        return [
            {"user_id": u, "session_id": s, "steps": int(n), "first_at": a, "last_at": b} for u, s, n, a, b, _ in rows
        ]

    def users(self) -> list[str]:
        """Users with at least one step."""
        with self._guard() as c:
            return [str(r[0]) for r in c.execute("SELECT DISTINCT user_id FROM trace_steps ORDER BY user_id")]

    def count(self, user_id: str | None = None) -> int:
        """Number of steps (of one user, or of everyone)."""
        with self._guard() as c:
            if user_id is None:
                return int(c.execute("SELECT COUNT(*) FROM trace_steps").fetchone()[0])
            return int(c.execute("SELECT COUNT(*) FROM trace_steps WHERE user_id = ?", (user_id,)).fetchone()[0])

    @property
    def wipe_pending(self) -> bool:
        """Whether deleted steps' text may still be on disk because a reader pinned the WAL.

        True after a delete (of any process on this file) could not checkpoint within
        ``wipe_timeout``; False again once the next append, open, :meth:`finish_wipe` or
        :meth:`close` after the reader left has wiped it. Always False for ``":memory:"``.
        """
        with self._guard():
            return self._wiper.is_pending()

    def finish_wipe(self, timeout: float | None = None) -> bool:
        """Finish a pending wipe, waiting up to ``timeout`` s (default ``wipe_timeout``) for readers.

        Returns:
            True when no deleted text is left on disk; False while a reader still pins the WAL.
        """
        with self._guard():
            return self._wiper.finish(timeout)

    def delete_user(self, user_id: str) -> int:
        """Delete every step of ``user_id`` and leave no copy of its text in the file."""
        with self._guard() as c:
            n = int(c.execute("DELETE FROM trace_steps WHERE user_id = ?", (user_id,)).rowcount)
            self._wiper.after_delete(rewrite=n > 0)  # copies a rebalance left in pages that stay
        return n

    def delete_step(self, seq: int) -> bool:
        """Delete one step by its ``seq`` and leave no copy of its text in the file."""
        with self._guard() as c:
            n = int(c.execute("DELETE FROM trace_steps WHERE seq = ?", (seq,)).rowcount)
            if n:
                self._wiper.after_delete()
        return n > 0

    def delete_session(self, user_id: str, session_id: str | None) -> int:
        """Delete the steps of one session of ``user_id``."""
        with self._guard() as c:
            if session_id is None:
                cur = c.execute("DELETE FROM trace_steps WHERE user_id = ? AND session_id IS NULL", (user_id,))
            else:
                cur = c.execute("DELETE FROM trace_steps WHERE user_id = ? AND session_id = ?", (user_id, session_id))
            self._wiper.after_delete()
        return int(cur.rowcount)

    def scrub_memory(self, user_id: str, memory_id: str, contents: Iterable[str] = ()) -> int:
        """Replace the text of a forgotten memory by ``[forgotten]`` in the steps of ``user_id``.

        The memory's text is found in the steps that mention ``memory_id`` (as a candidate or a
        write), plus ``contents``; every occurrence in any field of the user's steps is blanked.
        The reason of a write that names the memory (it superseded or demoted it) is blanked as
        a whole: it quotes the memory's details ("number changed (4711 → 9999)").

        Returns:
            The number of steps changed.
        """
        with self._guard() as c:
            rows = c.execute(
                "SELECT seq, data FROM trace_steps WHERE user_id = ? AND instr(data, ?) > 0", (user_id, memory_id)
            ).fetchall()
            texts = {t for t in contents if t}
            for _, data in rows:
                step = json.loads(data)
                for cand in step.get("candidates", ()):
                    if cand.get("id") == memory_id and cand.get("content"):
                        texts.add(cand["content"])
                for w in step.get("writes", ()):
                    if w.get("memory_id") == memory_id and w.get("content"):
                        texts.add(w["content"])
            texts.discard(_FORGOTTEN)
            if not texts and not rows:
                return 0
            variants = {v for t in texts for v in (t, " ".join(t.split()))}
            needles = sorted((json.dumps(v, ensure_ascii=False)[1:-1] for v in variants if v), key=len, reverse=True)
            changed = 0
            c.execute("BEGIN IMMEDIATE")
            try:
                for seq, data in c.execute(
                    "SELECT seq, data FROM trace_steps WHERE user_id = ?", (user_id,)
                ).fetchall():
                    new = _blank_reasons(data, memory_id) if memory_id in data else data
                    for n in needles:
                        new = new.replace(n, _FORGOTTEN)
                    if new != data:
                        c.execute("UPDATE trace_steps SET data = ? WHERE seq = ?", (new, seq))
                        changed += 1
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            if changed:
                self._wiper.after_delete()
        return changed

    def export_jsonl(
        self, out: IO[str], *, user_id: str | None = None, session_id: str | None = _ANY, kind: str | None = None
    ) -> int:
        """Write the matching steps to ``out`` as JSON lines; return how many."""
        n = 0
        for step in self.steps(user_id=user_id, session_id=session_id, kind=kind):
            out.write(json.dumps(step.to_json_dict(), ensure_ascii=False) + "\n")
            n += 1
        return n

    def close(self) -> None:
        """Close the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._wiper.close()  # bounded: a reader that pins the WAL does not stall the close
            except sqlite3.Error:  # pragma: no cover - best effort
                pass
            finally:
                self._conn.close()


#: What ``HybridMemory(trace=...)`` accepts: on/off, a SQLite path, or an open :class:`TraceStore`.
TraceSetting = bool | str | os.PathLike[str] | TraceStore | None


# ----------------------------------------------------------------------------- recording
class _Builder:
    """The step being recorded by the current thread."""

    __slots__ = (
        "args",
        "at",
        "dl_before",
        "epoch",
        "k",
        "kind",
        "ranked",
        "scorer",
        "scorer_fallback",
        "t0",
        "writes",
    )

    def __init__(self, kind: str, args: dict[str, Any], at: datetime, dl_before: int | None) -> None:
        self.kind = kind
        self.args = args
        self.at = at
        self.dl_before = dl_before
        self.t0 = time.perf_counter()
        self.ranked: list[RecallHit] | None = None
        self.k = 0
        self.writes: list[WriteOutcome] = []
        self.scorer: str | None = None
        self.scorer_fallback: str | None = None
        #: The user's forget epoch when the call began (read only when tracing).
        self.epoch: int | None = None


_WRITE_KINDS = frozenset({"add_turn", "remember", "remember_many", "end_session", "put"})


class Observer:
    """Feeds the metrics and the trace of one :class:`~hybrid_memory.memory.HybridMemory`.

    Created by the facade; the hooks are cheap no-ops when both metrics and tracing are off.

    Args:
        store: The memory's store (for the default trace path and dead-letter counts).
        config: The memory's configuration (``trace`` and ``metrics`` sections).
        trace: ``None`` = ``config.trace.enabled``; ``True``/``False``; a SQLite path; or an
            open :class:`TraceStore` (not closed by :meth:`close`).
        clock: The memory's clock (step timestamps).
    """

    def __init__(
        self,
        *,
        store: MemoryStore,
        config: HybridMemoryConfig,
        trace: TraceSetting = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.metrics: MemoryMetrics | None = MemoryMetrics(config.metrics) if config.metrics.enabled else None
        self.tracer: TraceStore | None = None
        self._owns_tracer = False
        if isinstance(trace, TraceStore):
            self.tracer = trace
        else:
            enabled = config.trace.enabled if trace is None else bool(trace)
            if isinstance(trace, (str, os.PathLike)):
                path: str = os.fspath(trace)
            elif config.trace.path is not None:
                path = config.trace.path
            else:
                path = default_trace_path(store)
            if trace is not None and not isinstance(trace, (bool, str, os.PathLike)):
                raise ConfigurationError(f"trace must be a bool, a path or a TraceStore, got {type(trace).__name__}")
            if enabled:
                self.tracer = TraceStore(path)
                self._owns_tracer = True
        redact = config.trace.redact_pii if config.trace.redact_pii is not None else config.writer.redact_pii
        self._redactor: PiiRedactor | None = PiiRedactor() if redact else None
        self._local = threading.local()

    @property
    def active(self) -> bool:
        """Whether anything is recorded at all."""
        return self.metrics is not None or self.tracer is not None

    # -- helpers ------------------------------------------------------------------------------
    def _r(self, text: str | None) -> str | None:
        if text is None or self._redactor is None:
            return text
        return self._redactor.redact(text).text

    def current(self) -> _Builder | None:
        """The step the calling thread is recording, if any."""
        stack: list[_Builder] | None = getattr(self._local, "stack", None)
        return stack[-1] if stack else None

    def _dead_letters(self) -> int | None:
        fn = getattr(self.store, "dead_letter_count", None)
        if not callable(fn):
            return None
        try:
            return int(fn())
        except Exception:  # never let bookkeeping break an operation
            return None

    def _epoch_of(self, args: dict[str, Any]) -> int | None:
        user = args.get("user_id")
        record = args.get("record")
        if user is None and isinstance(record, MemoryRecord):
            user = record.user_id
        if not isinstance(user, str) or not user:
            return None
        try:
            return self.store.user_epoch(user)
        except Exception:  # an invalid id or a store fault: the operation reports it, not the tracer
            return None

    # -- hooks called by the facade ----------------------------------------------------------
    def begin(self, kind: str, args: dict[str, Any]) -> _Builder:
        """Start recording ``kind`` with the call's bound arguments."""
        try:
            at = self.clock()
        except Exception:
            at = utcnow()
        b = _Builder(kind, args, at, self._dead_letters() if kind in _WRITE_KINDS else None)
        if self.tracer is not None:
            b.epoch = self._epoch_of(args)
        stack: list[_Builder] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(b)
        return b

    def candidates(self, ranked: Sequence[RecallHit], k: int) -> None:
        """The re-ranked candidates of a recall (before the top-k cut)."""
        b = self.current()
        if b is not None and self.tracer is not None:
            b.ranked = list(ranked)
            b.k = k

    def scored(self, batch: ScoreBatch) -> None:
        """An importance-scorer call (counts fallbacks)."""
        details = getattr(batch, "details", {}) or {}
        try:
            n_fb = int(details.get("fallback", 0))
        except (TypeError, ValueError):
            n_fb = 0
        if batch.fallback_reason and n_fb == 0:
            n_fb = len(batch.items)
        if self.metrics is not None:
            self.metrics.observe_scoring(batch.scorer, len(batch.items), n_fb, batch.fallback_reason)
        b = self.current()
        if b is not None:
            b.scorer = batch.scorer
            if batch.fallback_reason:
                b.scorer_fallback = batch.fallback_reason

    def writes(self, outcomes: Sequence[WriteOutcome]) -> None:
        """Write outcomes (foreground ones join the current step; others become their own)."""
        if not outcomes:
            return
        if self.metrics is not None:
            self.metrics.observe_writes(o.action for o in outcomes)
        if self.tracer is None:
            return
        b = self.current()
        if b is not None:
            b.writes.extend(outcomes)
            return
        groups: dict[tuple[str, str | None], list[WriteOutcome]] = {}
        for o in outcomes:
            if o.record is not None:
                groups.setdefault((o.record.user_id, o.record.session_id), []).append(o)
        for (user, session), outs in groups.items():
            self._append(
                TraceStep(
                    kind="background_write",
                    user_id=user,
                    session_id=session,
                    at=self.clock(),
                    duration_ms=0.0,
                    writes=tuple(self._write(o) for o in outs),
                )
            )

    def background(
        self,
        kind: str,
        user_id: str,
        session_id: str | None,
        *,
        epoch: int | None,
        seconds: float = 0.0,
        writes: Sequence[WriteOutcome] = (),
        scorer: str | None = None,
        scorer_fallback: str | None = None,
        error: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        """Record work done off the hot path (a refinement, a failed job) as its own ``kind`` step.

        Metrics: ``seconds`` joins the ``kind`` latency histogram (an error counts as a failed
        call and in the background errors by kind); ``writes`` are counted. The trace step is
        dropped again when ``user_id`` was forgotten since ``epoch`` (the user's forget epoch the
        work started from).
        """
        if self.metrics is not None:
            self.metrics.observe_op(kind, seconds, error=error is not None)
            if error is not None:
                self.metrics.observe_background_error(str((params or {}).get("job", kind)))
            if writes:
                self.metrics.observe_writes(o.action for o in writes)
        if self.tracer is None:
            return
        try:
            step = TraceStep(
                kind=kind,
                user_id=user_id,
                session_id=session_id,
                at=self.clock(),
                duration_ms=round(seconds * 1000.0, 3),
                params={k: _jsonable(v) for k, v in (params or {}).items()},
                writes=tuple(self._write(o) for o in writes),
                scorer=scorer,
                scorer_fallback=self._r(scorer_fallback),
                error=self._r(error),
            )
        except Exception:  # bookkeeping must never break background work
            logger.warning("hybrid-memory: could not record a %s step", kind, exc_info=True)
            return
        stored = self._append(step)
        if stored is not None and epoch is not None and self._epoch_of({"user_id": user_id}) != epoch:
            self.tracer.delete_step(stored.seq)  # forgotten meanwhile: nothing of the user is kept

    def finish(self, b: _Builder, mem: Any, result: Any, exc: BaseException | None) -> None:
        """End the step started by :meth:`begin` (``result`` or ``exc``)."""
        elapsed = time.perf_counter() - b.t0
        stack: list[_Builder] = self._local.stack
        if stack and stack[-1] is b:
            stack.pop()
        try:
            self._finish(b, mem, result, exc, elapsed)
        except Exception:  # bookkeeping must never break the memory operation
            logger.warning("hybrid-memory: could not record a %s step", b.kind, exc_info=True)
            if self.metrics is not None:
                self.metrics.observe_trace(error=True)

    def _finish(self, b: _Builder, mem: Any, result: Any, exc: BaseException | None, elapsed: float) -> None:
        m = self.metrics
        if m is not None:
            m.observe_op(b.kind, elapsed, error=exc is not None)
            if exc is None and b.kind == "build_context" and isinstance(result, FusedContext):
                m.observe_context(
                    injected=bool(result.text), skipped_reason=result.skipped_reason, degraded=result.degraded
                )
            elif exc is None and b.kind == "recall" and isinstance(result, list):
                m.observe_recall(len(result))
            if isinstance(exc, StoreError) and b.dl_before is not None:
                after = self._dead_letters()
                if after is not None:
                    m.observe_dead_lettered(after - b.dl_before)
        if self.tracer is None or isinstance(exc, InvalidInputError) or getattr(mem, "_closed", False):
            return  # invalid calls, or calls on a closed memory, did nothing worth tracing
        record = b.args.get("record")
        if b.args.get("user_id") is None and isinstance(record, MemoryRecord):
            b.args["user_id"], b.args["session_id"] = record.user_id, record.session_id
        try:
            user = check_id(b.args.get("user_id"))
        except InvalidInputError:
            return
        if isinstance(exc, UserForgottenError):
            return  # the user was forgotten meanwhile: nothing of this call may be kept
        step = self._build(b, mem, result, exc, elapsed, user)
        stored = self._append(step)
        # A forget (any process) bumps the epoch before it deletes the user's steps: if it did so
        # since this call began, this step may have missed that delete, so it goes now.
        if stored is not None and b.epoch is not None and self._epoch_of(b.args) != b.epoch:
            assert self.tracer is not None
            self.tracer.delete_step(stored.seq)

    def _append(self, step: TraceStep) -> TraceStep | None:
        assert self.tracer is not None
        try:
            stored = self.tracer.append(step)
        except (StoreError, OSError):
            logger.warning("hybrid-memory: could not store a trace step", exc_info=True)
            if self.metrics is not None:
                self.metrics.observe_trace(error=True)
            return None
        if self.metrics is not None:
            self.metrics.observe_trace()
        return stored

    def _turn(self, t: Turn) -> TraceTurn:
        return TraceTurn(
            id=t.id,
            role=t.role,
            content=self._r(t.content) or "",
            importance=t.importance,
            key_frame=t.key_frame,
            tokens=t.tokens,
            timestamp=t.timestamp,
        )

    def _write(self, o: WriteOutcome) -> TraceWrite:
        r = o.record
        return TraceWrite(
            action=o.action,
            memory_id=r.id if r is not None else None,
            content=self._r(r.content) if r is not None else None,
            category=r.category if r is not None else None,
            importance=r.importance if r is not None else None,
            status=r.status if r is not None else None,
            reason=self._r(o.reason),
            related_id=o.related_id,
        )

    def _build(
        self, b: _Builder, mem: Any, result: Any, exc: BaseException | None, elapsed: float, user: str
    ) -> TraceStep:
        a = b.args
        session = a.get("session_id")
        flt = a.get("filter")
        if session is None and flt is not None:
            session = getattr(flt, "session_id", None)
        if not isinstance(session, str):
            session = None
        query = a.get("query") if isinstance(a.get("query"), str) else None
        turn: TraceTurn | None = None
        if b.kind == "add_turn":
            if isinstance(result, Turn):
                turn = self._turn(result)
            elif isinstance(a.get("content"), str):
                query = a.get("content")
        if b.kind == "remember" and isinstance(a.get("content"), str):
            query = a.get("content")
        stm: tuple[TraceTurn, ...] = ()
        if session is not None and b.kind in ("add_turn", "build_context"):
            try:
                stm = tuple(self._turn(t) for t in mem.short_term(user, session))
            except Exception:  # the window is best effort (e.g. invalid ids)
                stm = ()
        params = {
            k: _jsonable(v)
            for k, v in a.items()
            if k not in ("self", "user_id", "session_id", "query", "content", "items", "filter", "record")
        }
        if flt is not None:
            params["filter"] = _jsonable(flt)
        if b.kind == "remember_many":
            items = a.get("items")
            params["items"] = len(items) if isinstance(items, Sized) else None
        fused: str | None = None
        tokens: int | None = None
        skipped: str | None = None
        degraded = False
        injected: set[str] = set()
        dropped: dict[str, str] = {}
        returned: set[str] = set()
        if isinstance(result, FusedContext):
            fused, tokens, skipped, degraded = result.text, result.token_count, result.skipped_reason, result.degraded
            injected = {h.id for h in result.hits}
            dropped = dict(result.dropped)
        elif isinstance(result, list) and b.kind == "recall":
            returned = {h.id for h in result if isinstance(h, RecallHit)}
        cands: list[TraceCandidate] = []
        for i, h in enumerate((b.ranked or [])[: self.config.trace.max_candidates]):
            reason: str | None = None
            outcome: Literal["injected", "returned", "dropped", "cut"]
            if h.id in injected:
                outcome = "injected"
            elif h.id in dropped:
                outcome, reason = "dropped", dropped[h.id]
            elif h.id in returned:
                outcome = "returned"
            elif i >= b.k:
                outcome, reason = "cut", f"below the top-k cut (k={b.k})"
            else:
                outcome, reason = "cut", "not used (the call failed or was skipped)" if exc or skipped else None
            cands.append(
                TraceCandidate(
                    id=h.id,
                    content=self._r(h.content) or "",
                    category=h.record.category,
                    status=h.record.status,
                    created_at=h.record.created_at,
                    score=h.score,
                    relevance=h.relevance,
                    keyword_score=h.keyword_score,
                    vector_similarity=h.vector_similarity,
                    importance=h.importance,
                    recency=h.recency,
                    heat=h.heat,
                    outcome=outcome,
                    reason=reason,
                )
            )
        if isinstance(result, list) and b.kind in ("end_session", "remember_many"):
            extra = [o for o in result if isinstance(o, WriteOutcome) and o not in b.writes]
            b.writes.extend(extra)
        return TraceStep(
            kind=b.kind,
            user_id=user,
            session_id=session,
            at=b.at,
            duration_ms=round(elapsed * 1000.0, 3),
            query=self._r(query),
            params=params,
            turn=turn,
            short_term=stm,
            candidates=tuple(cands),
            fused_text=self._r(fused),
            token_count=tokens,
            skipped_reason=skipped,
            degraded=degraded,
            writes=tuple(self._write(o) for o in b.writes),
            scorer=b.scorer,
            scorer_fallback=self._r(b.scorer_fallback),
            error=self._r(f"{type(exc).__name__}: {exc}") if exc is not None else None,
        )

    # -- forgetting, reading, closing ----------------------------------------------------------
    def forget_user(self, user_id: str) -> int:
        """Delete the user's trace steps (right to be forgotten)."""
        return self.tracer.delete_user(user_id) if self.tracer is not None else 0

    def forget_memory(self, user_id: str, memory_id: str, contents: Iterable[str] = ()) -> int:
        """Blank a forgotten memory's text in the user's trace steps."""
        return self.tracer.scrub_memory(user_id, memory_id, contents) if self.tracer is not None else 0

    def wipe_pending(self) -> bool:
        """Whether forgotten text may still be in the trace file (a reader pins its WAL)."""
        return self.tracer.wipe_pending if self.tracer is not None else False

    def finish_wipe(self, timeout: float | None = None) -> bool:
        """Finish a pending wipe of the trace file (:meth:`TraceStore.finish_wipe`); True when done."""
        return self.tracer.finish_wipe(timeout) if self.tracer is not None else True

    def replay(self, session_id: str | None, *, user_id: str | None = None) -> list[TraceStep]:
        """The steps of a session, oldest first.

        Raises:
            ConfigurationError: tracing is off for this memory.
        """
        if self.tracer is None:
            raise ConfigurationError(
                "tracing is off: create the memory with HybridMemory(..., trace=True) "
                "or set HYBRID_MEMORY_TRACE__ENABLED=true"
            )
        if session_id is None and user_id is None:
            raise InvalidInputError("replay(None) needs user_id= (the session-less steps of one user)")
        return self.tracer.steps(user_id=user_id, session_id=session_id)

    def close(self) -> None:
        """Close the trace file if this observer opened it."""
        if self.tracer is not None and self._owns_tracer:
            self.tracer.close()


def _blank_reasons(data: str, memory_id: str) -> str:
    """A step's JSON with the reason of every write that names ``memory_id`` replaced by ``[forgotten]``."""
    step = json.loads(data)
    changed = False
    for w in step.get("writes", ()):
        if w.get("memory_id") != memory_id and (
            w.get("related_id") == memory_id or memory_id in (w.get("reason") or "")
        ):
            w["reason"], changed = _FORGOTTEN, True
    return json.dumps(step, ensure_ascii=False) if changed else data


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    fields = getattr(v, "__dataclass_fields__", None)
    if fields is not None:
        return {k: _jsonable(getattr(v, k)) for k in fields}
    return repr(v)


def observed(kind: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a facade method so its calls are timed and traced as ``kind`` steps.

    The instance's ``_obs`` attribute (an :class:`Observer`) receives the calls. A call made
    while the same thread is already recording a step (``remember`` -> ``remember_many``)
    belongs to that step.
    """

    def deco(fn: Callable[P, R]) -> Callable[P, R]:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            obs: Observer | None = getattr(args[0], "_obs", None) if args else None
            if obs is None or not obs.active or obs.current() is not None:
                return fn(*args, **kwargs)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)
            bound.apply_defaults()
            b = obs.begin(kind, dict(bound.arguments))
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                obs.finish(b, args[0], None, exc)
                raise
            obs.finish(b, args[0], result, None)
            return result

        return wrapper

    return deco


def counted(kind: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a facade method so its calls are timed and counted as ``kind`` in the metrics only.

    For calls that leave nothing worth replaying (listing, counting, deleting one memory): they
    join the ``kind`` latency histogram and call count like traced operations, a failed call
    counts as an error, and no trace step is written.
    """

    def deco(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            obs: Observer | None = getattr(args[0], "_obs", None) if args else None
            metrics = obs.metrics if obs is not None else None
            if metrics is None:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                metrics.observe_op(kind, time.perf_counter() - t0, error=True)
                raise
            metrics.observe_op(kind, time.perf_counter() - t0)
            return result

        return wrapper

    return deco


# ----------------------------------------------------------------------------- text output
def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_steps(steps: Sequence[TraceStep], *, width: int = 100) -> str:
    """Steps as readable text (what ``hybrid-memory replay SESSION`` prints).

    Example:
        >>> from datetime import datetime, timezone
        >>> at = datetime(2024, 1, 1, 9, tzinfo=timezone.utc)
        >>> print(format_steps([TraceStep(seq=1, kind="recall", user_id="u", session_id=None, at=at,
        ...                               duration_ms=2.5, query="tea?")]))
        #1 recall  2024-01-01 09:00:00Z  2.5 ms  user=u
          query: tea?
          candidates: none
    """
    out: list[str] = []
    for s in steps:
        head = f"#{s.seq} {s.kind}  {s.at.strftime('%Y-%m-%d %H:%M:%S')}Z  {s.duration_ms:g} ms  user={s.user_id}"
        if s.session_id is not None:
            head += f" session={s.session_id}"
        out.append(head)
        if s.turn is not None:
            star = " key-frame" if s.turn.key_frame else ""
            out.append(f"  turn [{s.turn.role}{star} imp={s.turn.importance:.2f}]: {_clip(s.turn.content, width)}")
        if s.query is not None:
            out.append(f"  query: {_clip(s.query, width)}")
        if s.scorer_fallback:
            out.append(f"  scorer fallback ({s.scorer}): {_clip(s.scorer_fallback, width)}")
        if s.kind in ("add_turn", "build_context") and s.short_term:
            out.append(f"  short-term window ({len(s.short_term)} turns):")
            for t in s.short_term:
                mark = "*" if t.key_frame else " "
                out.append(f"    {mark} [{t.role}] {_clip(t.content, width - 8)}")
        if s.kind in ("recall", "build_context"):
            if not s.candidates:
                out.append("  candidates: none")
            else:
                out.append(f"  candidates ({len(s.candidates)}):  score = rel·imp·rec·heat")
                for c in s.candidates:
                    mark = {"injected": "+", "returned": "+", "dropped": "x", "cut": "-"}[c.outcome]
                    comp = (
                        f"{c.score:.3f} rel={c.relevance:.3f} kw={_f(c.keyword_score, '.2f')} "
                        f"vec={_f(c.vector_similarity)} imp={c.importance:.2f} rec={c.recency:.2f} heat={c.heat:.2f}"
                    )
                    why = f"  <- {c.reason}" if c.reason else ""
                    out.append(f"    {mark} {comp}  {_clip(c.content, 60)}{why}")
        if s.kind == "build_context":
            if s.fused_text:
                out.append(f"  injected ({s.token_count} tokens):")
                out.extend(f"    | {line}" for line in s.fused_text.splitlines())
            else:
                out.append(f"  nothing injected: {s.skipped_reason}")
        for w in s.writes:
            why = f" ({w.reason})" if w.reason else ""
            out.append(f"  write {w.action}: {_clip(w.content or '', width - 20)}{why}")
        if s.error:
            out.append(f"  error: {s.error}")
    return "\n".join(out)
