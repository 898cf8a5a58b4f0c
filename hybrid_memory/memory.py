"""The :class:`HybridMemory` facade: the whole memory loop behind a few methods.

Write path: :meth:`HybridMemory.add_turn` makes a turn durable in the store's turn log (the
single source of truth for the session's short-term window, shared by every process) and writes
it to long-term memory at once when it clears the writer's importance gate, so it is recallable
from any session, any process and after a restart. Key frames (explicit "remember",
preferences, constraints, goals, high importance) stay pinned in the window.
:meth:`~HybridMemory.remember` and :meth:`~HybridMemory.remember_many` write long-term memories
directly.

Forget is a store-level fact: :meth:`~HybridMemory.forget_user` bumps the user's forget epoch in
the same step as it deletes, and every write carries the epoch it read, so nothing any process
accepted before the forget can be written back after it.

Read path: :meth:`~HybridMemory.recall` runs a Weaviate-exact hybrid search (``alpha`` 1.0 =
pure vector, 0.0 = pure keyword/BM25) for one user and re-ranks by relevance, importance,
recency and heat; :meth:`~HybridMemory.build_context` fuses the best few into a delimited block
for the prompt, skipping memories already in the short-term window.

Every method has an ``a``-prefixed async twin. Memories of one user are never returned for
another.

The facade is the door: it validates and redacts once, delegates and observes. The recall
planner, re-ranking and the context block builder live in :mod:`hybrid_memory.read`; the session
state per (user, session) and the background jobs in :mod:`hybrid_memory.write.session`.

Example:
    >>> from datetime import datetime, timezone
    >>> from hybrid_memory import HybridMemory, LocalStore
    >>> from hybrid_memory.testing import HashingEmbedder
    >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
    >>> day1 = datetime(2024, 5, 1, 9, tzinfo=timezone.utc)
    >>> t = mem.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts", timestamp=day1)
    >>> t.key_frame
    True
    >>> ctx = mem.build_context("Any peanuts in this dish?", user_id="alice",
    ...                         now=datetime(2024, 5, 3, tzinfo=timezone.utc))
    >>> "allergic to peanuts" in ctx.text, ctx.skipped
    (True, False)
    >>> mem.forget_user("alice")
    1
    >>> mem.close()

    The async twins, from a coroutine (an agent's event loop is never blocked):

    >>> import asyncio
    >>> async def turn() -> list[str]:
    ...     mem = HybridMemory(embedder=HashingEmbedder())
    ...     _ = await mem.aremember("bob", "I prefer aisle seats when I fly")
    ...     hits = await mem.arecall("Book me a seat: aisle or window?", user_id="bob")
    ...     await mem.aclose()
    ...     return [h.content for h in hits]
    >>> asyncio.run(turn())
    ['I prefer aisle seats when I fly']
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

from hybrid_memory.config import HybridMemoryConfig, as_config
from hybrid_memory.embeddings import Embedder, _BaseEmbedder, as_embedder, embedder_from_name
from hybrid_memory.errors import (
    ConfigurationError,
    EmbedderMismatchError,
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    StoreUnavailableError,
)
from hybrid_memory.observe.metrics import MetricsSnapshot
from hybrid_memory.observe.trace import Observer, TraceSetting, TraceStep, counted, observed
from hybrid_memory.read.context import ContextFuser
from hybrid_memory.read.planner import Recalled, RecallPlanner, check_alpha, check_fusion, check_k
from hybrid_memory.read.touches import TouchQueue
from hybrid_memory.records import (
    Category,
    ForgetCount,
    FusedContext,
    MemoryRecord,
    RecallHit,
    Status,
    Turn,
    WriteOutcome,
    check_id,
    check_not_future,
    check_text,
    ensure_utc,
    utcnow,
)
from hybrid_memory.stores.base import MemoryFilter, MemoryStore, check_ids
from hybrid_memory.text.tokens import TokenCounter
from hybrid_memory.write.conflict import ConflictJudge, ConflictReview
from hybrid_memory.write.extraction import FactExtractor
from hybrid_memory.write.importance import HeuristicImportanceScorer, ImportanceScorer, forget_scores
from hybrid_memory.write.lifecycle import ConsolidationReport, consolidate
from hybrid_memory.write.outcome_log import UserWriteLogs
from hybrid_memory.write.remember import DirectWrites
from hybrid_memory.write.session import Sessions
from hybrid_memory.write.summary import SessionSummarizer
from hybrid_memory.write.writer import MemoryWriter

__all__ = ["HybridMemory", "require_core"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")

_ROLES = ("user", "assistant", "system", "tool")


def _async_twin(fn: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
    """The ``a``-prefixed async twin of a facade method: same parameters, run in a worker thread.

    The twin is a coroutine function whose signature (``inspect.signature``, type checkers) is
    exactly ``fn``'s, so the two cannot drift apart.
    """

    async def twin(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(functools.partial(fn, self, *args, **kwargs))

    name = f"a{fn.__name__}"
    twin.__name__, twin.__qualname__ = name, f"{fn.__qualname__.rpartition('.')[0]}.{name}"
    twin.__doc__ = f"Async twin of :meth:`{fn.__name__}` (same parameters; runs it in a worker thread)."
    twin.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return twin


def _embedder_for(recorded: str | None, embedder: Any) -> Embedder:
    """``embedder`` as an :class:`Embedder`; for ``None``, the one the store recorded (``recorded``).

    A new store (no embedder recorded yet) gets the default local model. A store that recorded
    an embedder the library can rebuild (:func:`~hybrid_memory.embeddings.embedder_from_name`)
    gets that one, so ``embedder=None`` never searches a store with another model's vectors.

    Raises:
        ConfigurationError: the store recorded an embedder the library cannot rebuild by name.
    """
    if embedder is not None or recorded is None:
        return as_embedder(embedder)
    known = embedder_from_name(recorded)
    if known is None:
        raise ConfigurationError(
            f"this store's vectors were made by the embedder {recorded!r}, which the library cannot "
            "rebuild from its name: pass that embedder as embedder=..., or migrate the store with "
            "`hybrid-memory reembed`"
        )
    return known


class HybridMemory:
    """Short-term + long-term memory for LLM agents, for many users at once.

    Background work (fact extraction, session summaries) runs in one daemon thread, access
    touches in another (:mod:`hybrid_memory.read.touches`); :meth:`flush` waits for both and
    :meth:`close` drains them (at most ``close_timeout`` seconds).

    Args:
        store: Where long-term memories live; default an ephemeral ``LocalStore(":memory:")``.
            Use ``LocalStore("memory.db")`` to persist, or a ``WeaviateStore``.
        embedder: ``None`` for the embedder the store was built with, and for a new store the
            default local multilingual model (offline, no torch); or any LangChain
            ``Embeddings``, LlamaIndex ``BaseEmbedding``, callable or
            :class:`~hybrid_memory.embeddings.Embedder`, which must be the store's (same name).
        scorer: Importance scorer; default :class:`~hybrid_memory.scoring.HeuristicImportanceScorer`.
        config: Settings: a :class:`~hybrid_memory.config.HybridMemoryConfig`, or a mapping of its
            fields such as ``{"retrieval": {"alpha": 0.25}}`` (validated; its values win over the
            ``HYBRID_MEMORY_*`` environment variables, nested sections merged field by field);
            ``None`` reads the environment alone.
        clock: Returns the current UTC time (inject for simulations and tests).
        extractor: LLM fact extractor run in the background over batches of turns
            (:class:`~hybrid_memory.extraction.FactExtractor`); ``None`` = no extraction.
        summarizer: Incremental session summaries every ``buffer.summary_every`` turns
            (:class:`~hybrid_memory.summary.SessionSummarizer`); ``None`` = no summaries.
        judge: Conflict judge of the writer (e.g. ``LLMConflictJudge(chat_model)``); default
            the heuristic :class:`~hybrid_memory.writer.HeuristicConflictJudge`.
        trace: Record a trace step per operation (:mod:`hybrid_memory.trace`): ``None`` =
            ``config.trace.enabled``; ``True``/``False``; a SQLite path; or a ``TraceStore``.
            Read it back with :meth:`replay`.

    Raises:
        EmbeddingDimensionError: the store already holds vectors of another dimension.
        EmbedderMismatchError: the store recorded another embedder (same dimension).
        ConfigurationError: an argument is unusable (``config`` of another type, an unknown
            setting or an invalid value: the message names the field), or ``embedder=None`` on a
            store built with an embedder the library cannot rebuild by name.
    """

    #: Seconds :meth:`close` waits for background extraction/summaries to finish.
    close_timeout: float = 60.0
    #: Recent write outcomes kept per user (see :meth:`write_log`).
    write_log_size: int = 500

    def __init__(
        self,
        store: MemoryStore | None = None,
        embedder: Any = None,
        scorer: ImportanceScorer | None = None,
        config: HybridMemoryConfig | Mapping[str, Any] | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        extractor: FactExtractor | None = None,
        summarizer: SessionSummarizer | None = None,
        judge: ConflictJudge | None = None,
        trace: TraceSetting = None,
    ) -> None:
        self.config = as_config(config)
        if store is None:
            from hybrid_memory.stores.local import LocalStore

            store = LocalStore(":memory:")
        self.store: MemoryStore = store
        recorded = getattr(store, "embedder_name", None)  # not a protocol member: a third backend may lack it
        recorded = recorded if isinstance(recorded, str) else None
        self.embedder: Embedder = _embedder_for(recorded, embedder)
        self.scorer: ImportanceScorer = (
            scorer
            if scorer is not None
            else HeuristicImportanceScorer(key_frame_threshold=self.config.buffer.key_frame_importance)
        )
        self._clock = clock if clock is not None else utcnow
        self._counter = TokenCounter(self.config.tokenizer_model)
        self._fuser = ContextFuser.for_embedder(self.config.fuser, self.embedder, counter=self._counter)
        self.writer = MemoryWriter(self.store, self.embedder, self.config.writer, clock=self._clock, judge=judge)
        self._outcomes = UserWriteLogs()  # per-user logs within the cache budget
        self._obs = Observer(store=self.store, config=self.config, trace=trace, clock=self._clock)
        self._sessions = Sessions(
            self.store,
            self.embedder,
            self.config,
            writer=self.writer,
            extractor=extractor,
            summarizer=summarizer,
            redact=self._redact,
            bind=self._ensure_bound,
            record=self._record,
            scorer=lambda: self.scorer,
            observer=self._obs,
        )
        self._direct = DirectWrites(
            self.store,
            self.embedder,
            self.config,
            writer=self.writer,
            sessions=self._sessions,
            observer=self._obs,
            counter=self._counter,
            scorer=lambda: self.scorer,
            redact=self._redact,
            record=self._record,
            unlog=self._outcomes.scrub,
            bind=self._ensure_bound,
            stored_time=self._stored_time,
        )
        self._touches = TouchQueue(
            self.store,
            report_error=self._sessions.report_error,
            background=self.config.rerank.touch_in_background,
            user_lock=self.writer.locked,
        )
        self._bound = False
        self._closed = False
        self._planner = RecallPlanner(
            self.store,
            self.embedder,
            self.config,
            fuser=self._fuser,
            bind=self._ensure_bound,
            touches=self._touches.apply,
        )
        static_dim = self.embedder._dim if isinstance(self.embedder, _BaseEmbedder) else None
        if static_dim is not None and self.store.dimension is not None and static_dim != self.store.dimension:
            raise EmbeddingDimensionError(
                self.store.dimension,
                static_dim,
                hint=f"the embedder {self.embedder.name!r} does not match this store; migrate it with "
                "`hybrid-memory reembed` or use the embedder the store was built with",
            )
        if recorded is not None and recorded != self.embedder.name and self.store.dimension is not None:
            raise EmbedderMismatchError(recorded, self.embedder.name, self.store.dimension)

    @property
    def fuser(self) -> ContextFuser:
        """The context fuser that builds this memory's prompt blocks (read-only).

        Its settings are ``config.fuser``; adapters use it to place a block
        (:func:`hybrid_memory.read.placement.place`) and to inject one into a system prompt
        (``memory.fuser.inject(system, ctx)``).
        """
        return self._fuser

    @property
    def counter(self) -> TokenCounter:
        """The token counter of this memory's budgets (``config.tokenizer_model``; read-only)."""
        return self._counter

    @property
    def extractor(self) -> FactExtractor | None:
        """The background fact extractor (``None`` = no extraction); settable."""
        return self._sessions.extractor

    @extractor.setter
    def extractor(self, value: FactExtractor | None) -> None:
        self._sessions.extractor = value

    @property
    def summarizer(self) -> SessionSummarizer | None:
        """The background session summarizer (``None`` = no summaries); settable."""
        return self._sessions.summarizer

    @summarizer.setter
    def summarizer(self, value: SessionSummarizer | None) -> None:
        self._sessions.summarizer = value

    # ------------------------------------------------------------------ helpers
    def _now(self, now: datetime | None = None) -> datetime:
        return ensure_utc(now, name="now") if now is not None else ensure_utc(self._clock(), name="clock()")

    def _stored_time(self, value: datetime | None, *, name: str = "timestamp") -> datetime:
        """A timestamp a write stores: the clock when ``None``; refused beyond the future skew."""
        now = self._now()
        if value is None:
            return now
        return check_not_future(value, now=now, max_skew_seconds=self.config.writer.max_future_skew_seconds, name=name)

    def _access_time(self, now: datetime | None) -> datetime:
        """The access stamp a read writes: its reference ``now``, never beyond clock + the future skew.

        A read's ``now=`` may lie in the future (what-if ranking); it is not refused, but the
        ``last_accessed_at`` it leaves behind is capped so recency cannot be pinned that way.
        """
        when = self._now(now)
        if now is None:
            return when
        try:
            cap = self._now() + timedelta(seconds=self.config.writer.max_future_skew_seconds)
        except OverflowError:
            return when
        return min(when, cap)

    def _redact(self, text: str) -> str:
        """``text`` with PII replaced when ``writer.redact_pii`` (before it reaches an embedder or a store)."""
        return self.writer.redactor.redact(text).text if self.config.writer.redact_pii else text

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("this HybridMemory is closed")

    def _ensure_bound(self) -> None:
        if not self._bound:
            self.store.bind_embedder(self.embedder.name, self.embedder.dimension)
            self._bound = True

    # ------------------------------------------------------------------ write path
    @observed("add_turn")
    def add_turn(
        self,
        user_id: str,
        session_id: str,
        role: str,
        content: str,
        timestamp: datetime | None = None,
        *,
        long_term: bool | None = None,
        turn_id: str | None = None,
    ) -> Turn:
        """Add a conversation turn: durable in the session's log and recallable when this returns.

        The turn is scored for importance (an LLM scorer, whose calls take seconds, is kept off
        this path: the heuristic scores the turn now and the LLM refines the stored score in the
        background, in batches; see :mod:`hybrid_memory.write.refine`) and appended to the
        store's turn log, which is the session's short-term window for every process (a restart
        or another worker continues it). A turn that clears ``writer.turn_min_importance`` (or is a key frame) is also written to
        long-term memory at once, with the previous turn as its search context; key frames
        (explicit "remember", preferences, constraints, goals) stay pinned in the window. PII is
        redacted (``writer.redact_pii``) before the text reaches the store.

        Args:
            user_id: Whose conversation this is.
            session_id: The conversation (one buffer per user and session).
            role: ``"user"``, ``"assistant"``, ``"system"`` or ``"tool"``.
            content: The text of the turn.
            timestamp: When it was said (aware datetime; default now, UTC).
            long_term: Whether the turn may become a long-term memory. ``None`` (default): only
                what the user said may (``role="user"``, and not agent scaffolding such as a
                ReAct ``Observation:`` line); assistant, system and tool turns only join the
                session's window as conversation context and the search context of the next
                turn. ``True`` also lets a non-user turn through the importance gate (e.g. an
                imported transcript where both speakers are people); ``False`` keeps any turn
                out of long-term memory.
            turn_id: The turn's id, unique for the user (default: a new UUID). Give the id your
                application already has for the message (a chat message id) to make the call
                safe to retry: when the user's log already holds a turn with this id, nothing is
                written and that turn is returned, so a worker that died after the write, a
                framework re-running a step or a client retrying on a timeout does not add the
                turn twice. The same id must come with the same session, role and text. A retry
                that comes after the turn or its user was forgotten (up to seven days later)
                writes nothing either: no forgotten turn comes back. After a session ended (or
                was cleared) the id is free: it adds a turn to the new window.

        Returns:
            The stored :class:`~hybrid_memory.records.Turn` (redacted text, importance, key-frame
            flag and its ``seq`` in the log); for a retry of a forgotten turn, the turn as given,
            not stored (``seq`` 0).

        Raises:
            InvalidInputError: bad ids, role, text or timestamp, or a ``turn_id`` the user's log
                holds for another session, role or text (nothing is stored).
            UserForgottenError: the user was forgotten while the turn was being written.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> first = mem.add_turn("alice", "s1", "user", "I moved to Hangzhou", turn_id="msg-41")
            >>> again = mem.add_turn("alice", "s1", "user", "I moved to Hangzhou", turn_id="msg-41")
            >>> again.id == first.id == "msg-41", len(mem.short_term("alice", "s1"))
            (True, 1)
            >>> mem.forget_turn("msg-41", user_id="alice", session_id="s1")
            True
            >>> late = mem.add_turn("alice", "s1", "user", "I moved to Hangzhou", turn_id="msg-41")
            >>> late.seq, mem.short_term("alice", "s1")
            (0, [])
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        check_id(session_id, name="session_id")
        if turn_id is not None:
            check_id(turn_id, name="turn_id")
        if role not in _ROLES:
            raise InvalidInputError(f"role must be one of {_ROLES}, got {role!r}")
        check_text(content)
        ts = self._stored_time(timestamp)
        self._flush_idle(user_id, session_id, ts)
        return self._direct.add_turn(user_id, session_id, role, content, ts, long_term=long_term, turn_id=turn_id)

    @observed("end_session")
    def end_session(self, user_id: str, session_id: str) -> list[WriteOutcome]:
        """End a session: extraction and the session summary run on it, and its window is dropped.

        Every turn was already durable and (above the importance gate) in long-term memory when
        ``add_turn`` returned, so ending a session is a policy step, not a durability step: it
        hands the session's last turns to the fact extractor and the summarizer (when
        configured) and deletes the session's turn log, in every process.

        Returns:
            Write outcomes of this call (none since turns are written by ``add_turn``; kept for
            compatibility).

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> _ = mem.add_turn("alice", "s1", "user", "Remember: my locker code is 7731")
            >>> _ = mem.end_session("alice", "s1")
            >>> mem.short_term("alice", "s1"), [m.content for m in mem.list_memories("alice")]
            ([], ['Remember: my locker code is 7731'])
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        check_id(session_id, name="session_id")
        self._sessions.end(user_id, session_id)
        return []

    # ------------------------------------------------------------------ background write path
    def _record(self, outcomes: list[WriteOutcome]) -> list[WriteOutcome]:
        self._outcomes.add(outcomes, maxlen=self.write_log_size)
        self._obs.writes(outcomes)
        return outcomes

    def write_log(self, user_id: str) -> list[WriteOutcome]:
        """The most recent write outcomes of ``user_id``, oldest first.

        Includes the writes of ``add_turn``, background extraction and summaries, with reasons.
        """
        check_id(user_id)
        return self._outcomes.recent(user_id)

    def _flush_idle(self, user_id: str, session_id: str, now: datetime) -> None:
        """End the user's *other* sessions that have been idle for ``buffer.idle_flush_minutes``."""
        for key in self._sessions.idle(user_id, session_id, now):
            self.end_session(*key)

    def session_summary(self, user_id: str, session_id: str) -> str | None:
        """The latest summary of a session (``None`` before the first one is made), from the store."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        self._ensure_open()
        got = self._sessions.latest_summary(user_id, session_id)
        return got.content if got else None

    def flush(self, timeout: float | None = None) -> bool:
        """Extract and refine partial batches now and wait for all background work to finish.

        Afterwards every extracted memory, summary and importance refinement is stored and
        recallable, and every access touch (``rerank.touch_in_background``) is written.

        Args:
            timeout: Seconds to wait at most (``None`` = until done).

        Returns:
            Whether everything finished within ``timeout``.
        """
        start = time.monotonic()
        done = self._sessions.flush(timeout)
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        return self._touches.flush(left) and done

    @property
    def background_errors(self) -> list[str]:
        """Recent failures of background extraction, summaries, refinements and touches (never raised to the agent).

        Each is also a ``background_error`` trace step and counted in ``metrics().background_errors``.
        """
        return list(self._sessions.worker.errors)

    def review_queue(self, user_id: str) -> list[ConflictReview]:
        """Conflicts the writer detected or suspected for ``user_id``, oldest first.

        Each entry says what was done (superseded, demoted, or suspected and both kept). The queue
        is in the store (with the memory that raised each review), so every process sees the same
        one and a restart keeps it.
        """
        check_id(user_id)
        return self.writer.review_queue(user_id)

    def consolidate(self, user_id: str, now: datetime | None = None) -> ConsolidationReport:
        """Archive faded memories, delete forgotten ones and merge near-duplicates of ``user_id``.

        Rules (``config.lifecycle``): freshness < 0.1 → archived, < 0.05 → deleted; idle over 90
        days with importance < 0.6 → archived; near-duplicates merged into the most complete.
        Archived memories are still found with ``include_archived=True`` and by the archive
        fall-back of :meth:`recall`.

        Args:
            user_id: Whose memories.
            now: Reference time (aware; default now).

        Raises:
            UserForgottenError: the user was forgotten (from any process) while this ran.
        """
        self._ensure_open()
        check_id(user_id)
        self._touches.sync_user(user_id)  # freshness reads the access counts and times
        # Under the user's write lock: a concurrent write of this process never bumps a memory
        # this merges away; other processes and forgets are covered by the forget epoch.
        with self.writer.locked([user_id]):
            try:
                return consolidate(
                    self.store,
                    user_id,
                    now=self._now(now),
                    config=self.config.lifecycle,
                    half_life_days=self.config.rerank.half_life_days,
                    dedup_threshold=self.writer.dedup_threshold,
                )
            finally:
                self.writer.invalidate(user_id)

    def short_term(self, user_id: str, session_id: str) -> list[Turn]:
        """The turns in the session's short-term window, oldest first (as the store has them now).

        When the store cannot be reached, the window as this process last saw it is returned (a
        prompt can still be built; ``add_turn`` fails typed until the store is back).

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> _ = mem.add_turn("alice", "s1", "user", "Remember: my locker code is 7731")
            >>> _ = mem.add_turn("alice", "s1", "assistant", "Saved.")
            >>> [(t.role, t.content) for t in mem.short_term("alice", "s1")]
            [('user', 'Remember: my locker code is 7731'), ('assistant', 'Saved.')]
            >>> mem.close()
        """
        check_id(user_id)
        check_id(session_id, name="session_id")
        self._ensure_open()
        return self._sessions.short_term(user_id, session_id)

    def clear_session(self, user_id: str, session_id: str) -> None:
        """Empty the session's short-term window in every process (long-term memory is kept)."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        self._ensure_open()
        self._sessions.drop(user_id, session_id)

    @observed("remember")
    def remember(
        self,
        user_id: str,
        content: str,
        *,
        importance: float | None = None,
        category: str | None = None,
        source: str = "user",
        tags: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        session_id: str | None = None,
        provenance: Sequence[str] = (),
        context: str = "",
    ) -> WriteOutcome:
        """Write one long-term memory directly; it is recallable at once.

        Args:
            user_id: Whose memory.
            content: The memory text.
            importance: 0..1; scored by the importance scorer when omitted.
            category: ``fact``, ``preference``, ``project``, ``temporary``, ``summary`` or
                ``turn``; inferred when omitted.
            source: ``user``, ``assistant``, ``inferred``, ``system`` or ``import``.
            tags: Free-form tags (filterable).
            metadata: JSON-serialisable data, returned unchanged.
            timestamp: When it was stated (aware; default now).
            session_id: The session it came from.
            provenance: Ids of the turns or memories it was derived from.
            context: Text that situates the memory for keyword search without being part of it,
                e.g. the question a turn answers (``add_turn`` sets the previous turn). It is
                redacted like the content, never embedded and never injected.

        Returns:
            What happened (``added``, ``deduplicated``, ``rejected`` ... with the reason).

        Raises:
            InvalidInputError: invalid input; nothing is written.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> out = mem.remember("alice", "I am vegetarian", category="preference", importance=0.8)
            >>> out.action, out.record.importance
            ('added', 0.8)
            >>> again = mem.remember("alice", "I am vegetarian")
            >>> again.action, again.reason
            ('deduplicated', 'already stored')
            >>> mem.close()
        """
        return self.remember_many(
            user_id,
            [
                {
                    "content": content,
                    "importance": importance,
                    "category": category,
                    "source": source,
                    "tags": tags,
                    "metadata": metadata,
                    "timestamp": timestamp,
                    "session_id": session_id,
                    "provenance": provenance,
                    "context": context,
                }
            ],
            progress=False,
        )[0]

    @observed("remember_many")
    def remember_many(
        self,
        user_id: str,
        items: Iterable[str | Mapping[str, Any]],
        *,
        progress: bool | None = None,
        batch_size: int = 256,
    ) -> list[WriteOutcome]:
        """Write many memories with batched embedding (a progress bar on long runs).

        Every item is validated before anything is written, so a bad item loses nothing.

        Args:
            user_id: Whose memories.
            items: Texts, or mappings with the keyword arguments of :meth:`remember`
                (``content`` required; also ``id``).
            progress: Show a progress bar (default: when there are over 1,000 items and
                stderr is a terminal).
            batch_size: Memories embedded and stored per batch.

        Returns:
            One outcome per item, in order.

        Raises:
            InvalidInputError: an item is invalid (the message says which); nothing is written.
            UserForgottenError: the user was forgotten (from any process) while this call ran;
                batches from then on are refused.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> outs = mem.remember_many("alice", ["My sister lives in Berlin", "我住在杭州"])
            >>> [o.action for o in outs], mem.count_memories("alice")
            (['added', 'added'], 2)
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError("batch_size must be a positive int")
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvalidInputError("items must be an iterable of memories, not a single memory")
        return self._direct.remember_many(user_id, list(items), progress=progress, batch_size=batch_size)

    # ------------------------------------------------------------------ read path
    def _recall(
        self,
        query: str,
        *,
        user_id: str,
        k: int,
        alpha: float | None,
        include_archived: bool,
        now: datetime | None,
        filter: MemoryFilter | None,
        fusion: str | None,
    ) -> Recalled:
        self._ensure_open()
        check_text(query, name="query")
        check_id(user_id)
        k = check_k(k)
        a = self.config.retrieval.alpha if alpha is None else check_alpha(alpha)
        fz = check_fusion(self.config.retrieval.fusion if fusion is None else fusion)
        if filter is not None and not isinstance(filter, MemoryFilter):
            raise InvalidInputError("filter must be a MemoryFilter")
        ranked = self._planner.recall(
            self._redact(query),  # the query goes to the embedder and the store: no raw PII
            user_id=user_id,
            k=k,
            alpha=a,
            fusion=fz,
            filter=filter,
            include_archived=include_archived,
            now=self._now(now),
        )
        self._obs.candidates(ranked, k)
        return ranked.top(k)

    @observed("recall")
    def recall(
        self,
        query: str,
        *,
        user_id: str,
        k: int = 5,
        alpha: float | None = None,
        include_archived: bool = False,
        now: datetime | None = None,
        filter: MemoryFilter | None = None,
        fusion: str | None = None,
        touch: bool | None = None,
    ) -> list[RecallHit]:
        """Recall the ``k`` best memories of ``user_id`` for ``query``.

        Candidates come from the store's hybrid search (``alpha``: 1.0 = pure vector, 0.0 = pure
        keyword/BM25; default from the config), then are re-ranked by relevance, importance,
        recency and heat, a conversation turn that says little held back (``rerank.w_length``). A period the query names ("last week", "5月2日") is searched as well and
        favours the memories created in it, and the keyword leg leaves its words out
        (``retrieval.time_windows``, ``retrieval.drop_period_words``). ``recall`` is a read: it
        changes nothing unless ``touch=True`` (or ``config.rerank.touch_on_recall``);
        :meth:`build_context` counts what it injects as used.

        Args:
            query: What to look for.
            user_id: Whose memories; never anyone else's.
            k: How many to return (1..1000).
            alpha: Vector weight in hybrid search; ``None`` uses the configured default.
            include_archived: Also search archived memories.
            now: Reference time for recency (aware; default now).
            filter: Category / tags / time range / session restrictions.
            fusion: ``"relative"`` (default) or ``"ranked"``.
            touch: Count this recall as an access (``access_count += 1``); default from
                ``config.rerank.touch_on_recall``. Pass ``False`` when the caller filters the hits
                further and only wants to count what it really uses. The count is written in the
                background (``rerank.touch_in_background``); :meth:`get`, :meth:`list_memories`
                and later recalls of this process see it at once.

        Returns:
            Hits, best first, each with every score component.

        Raises:
            InvalidInputError: bad query, ids, k, alpha or filter.
            StoreUnavailableError: the store cannot be reached.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> _ = mem.remember_many("alice", ["I am vegetarian", "My sister lives in Berlin"])
            >>> hits = mem.recall("Where does my sister live?", user_id="alice", k=1)
            >>> [h.content for h in hits], hits[0].relevance
            (['My sister lives in Berlin'], 1.0)
            >>> mem.recall("Where does my sister live?", user_id="bob")  # another user's memories: never
            []
            >>> mem.close()
        """
        hits = self._recall(
            query,
            user_id=user_id,
            k=k,
            alpha=alpha,
            include_archived=include_archived,
            now=now,
            filter=filter,
            fusion=fusion,
        )
        if hits and (self.config.rerank.touch_on_recall if touch is None else touch):
            self._touches.record(user_id, [h.id for h in hits], self._access_time(now))
        return hits

    @observed("build_context")
    def build_context(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str | None = None,
        max_tokens: int | None = None,
        now: datetime | None = None,
        k: int | None = None,
        filter: MemoryFilter | None = None,
    ) -> FusedContext:
        """Recall and fuse long-term memories into a block for the prompt.

        Memories already present in the session's short-term window are not repeated.
        Injection is skipped (``skipped=True`` with the reason) when nothing is relevant.

        Args:
            query: The current user message.
            user_id: Whose memories.
            session_id: The current session (for short-term dedup).
            max_tokens: Token cap for the block (default: 15 % of the context window).
            now: Reference time (aware; default now).
            k: Candidates to consider (default: twice the fuser's count cap).
            filter: Category / tags / time range / session restrictions on the recalled memories.

        Raises:
            InvalidInputError: bad arguments.
            StoreUnavailableError: the store is down (unless ``fuser.degrade_on_store_error``).

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> _ = mem.remember("alice", "I am vegetarian", category="preference")
            >>> ctx = mem.build_context("Plan a vegetarian dinner for two", user_id="alice")
            >>> ctx.skipped, [h.content for h in ctx.hits], "I am vegetarian" in ctx.text
            (False, ['I am vegetarian'], True)
            >>> mem.build_context("Plan a vegetarian dinner for two", user_id="bob").skipped
            True
            >>> mem.close()
        """
        self._ensure_open()
        if session_id is not None:
            check_id(session_id, name="session_id")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
        ):
            raise InvalidInputError("max_tokens must be a non-negative int")
        kk = k if k is not None else max(1, 2 * self.config.fuser.max_memories)
        when = self._now(now)
        if session_id is not None:
            check_id(user_id)
            self._flush_idle(user_id, session_id, when)
        try:
            hits = self._recall(
                query, user_id=user_id, k=kk, alpha=None, include_archived=False, now=when, filter=filter, fusion=None
            )
        except StoreUnavailableError as exc:
            return self._planner.unavailable(exc)
        with_window = session_id is not None and bool(hits)
        ctx = self._planner.context(
            hits,
            query=query,
            user_id=user_id,
            now=when,
            max_tokens=max_tokens,
            turns=self.short_term(user_id, session_id) if with_window and session_id is not None else None,
            asked=self._redact(query) if with_window else "",
            turn_vectors=self._sessions.turn_matrix,
        )
        if ctx.hits and self.config.rerank.touch_on_inject:
            self._touches.record(user_id, [h.id for h in ctx.hits], self._access_time(now))
        return ctx

    # ------------------------------------------------------------------ management
    @observed("put")
    def put(self, record: MemoryRecord, *, score: bool = False) -> WriteOutcome:
        """Store exactly ``record`` under its id, replacing any previous version.

        This is the keyed write of key-value style stores (LangGraph's ``BaseStore.put``): PII is
        still redacted (when enabled), but the importance gate, deduplication and conflict rules
        of :meth:`remember` do not apply, so what the caller put is what a ``get`` returns. A new
        text for a memory written from turns takes them out of their sessions' logs, as
        :meth:`edit` does.

        Args:
            record: The memory to store.
            score: Replace ``record.importance`` with the importance scorer's score of the
                (redacted) content, for callers that have no importance of their own.

        Returns:
            ``updated`` when a memory with this id existed, else ``added``.

        Raises:
            InvalidInputError: the record is invalid.
        """
        self._ensure_open()
        if not isinstance(record, MemoryRecord):
            raise InvalidInputError("record must be a MemoryRecord")
        check_id(record.user_id)
        check_text(record.content)
        for field in ("created_at", "updated_at", "last_accessed_at"):
            self._stored_time(getattr(record, field), name=f"record.{field}")
        self._touches.sync_user(record.user_id)  # a touch recorded before the put lands before it
        return self._direct.put(record, score=score)

    @counted("edit")
    def edit(
        self,
        memory_id: str,
        *,
        user_id: str,
        content: str | None = None,
        importance: float | None = None,
        category: Category | None = None,
        status: Status | None = None,
        tags: Sequence[str] | None = None,
    ) -> MemoryRecord:
        """Correct one memory of ``user_id`` in place (an operator's edit; ``None`` keeps a field).

        Unlike :meth:`put`, the memory is read and written under the user's write lock and the
        forget epoch read before it, so a ``forget_user`` of any process between the read and
        the write wins: the edit raises instead of bringing the memory back. A changed content
        is redacted (when enabled) and re-embedded, and the old text is blanked in the traces.
        A memory written from turns (``add_turn``) takes them out of their sessions' logs when its
        text changes, as :meth:`forget` does: the edited memory stays in long-term memory, and no
        process's window, extracted fact or summary brings back the text as it was; the next
        turn's memory gets the end of the new text as its search context instead of the old one.

        Returns:
            The stored memory after the edit (``updated_at`` moves to now).

        Raises:
            NotFoundError: no such memory for this user (also when another process deletes it while
                this runs: an edit never brings a deleted memory back).
            UserForgottenError: the user was forgotten (from any process) while this ran; nothing was written.
            InvalidInputError: bad ids or an invalid field value.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> rec = mem.remember("alice", "My sister lives in Berlin").record
            >>> mem.edit(rec.id, user_id="alice", content="My sister lives in Munich").content
            'My sister lives in Munich'
            >>> mem.get(rec.id, user_id="alice").content
            'My sister lives in Munich'
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        if not isinstance(memory_id, str) or not memory_id:
            raise InvalidInputError("memory_id must be a non-empty str")
        if content is not None:
            check_text(content)
        if isinstance(tags, (str, bytes)):
            raise InvalidInputError("tags must be a sequence of str (not a single str)")
        given = {"content": content, "importance": importance, "category": category, "status": status}
        changes: dict[str, object] = {k: v for k, v in given.items() if v is not None}
        if tags is not None:
            changes["tags"] = tuple(tags)
        self._touches.sync_user(user_id)  # a touch recorded before the edit lands before it
        return self._direct.edit(user_id, memory_id, changes, now=self._now())

    def touch(self, user_id: str, memory_ids: Sequence[str], *, now: datetime | None = None) -> None:
        """Count a use of these memories (``access_count += 1``, ``last_accessed_at = now``).

        Use it with ``recall(..., touch=False)`` when the caller filters hits and only some are used.
        Like the touches of ``recall`` and ``build_context``, it is written in the background
        (``rerank.touch_in_background``): :meth:`get`, :meth:`list_memories` and :meth:`flush` see it.

        Raises:
            InvalidInputError: bad user id, ids or ``now``.
        """
        self._ensure_open()
        check_id(user_id)
        if isinstance(memory_ids, (str, bytes)) or not isinstance(memory_ids, Iterable):
            raise InvalidInputError("memory_ids must be a sequence of str (not a single str)")
        ids = check_ids([i for i in memory_ids if isinstance(i, str) and i])
        if ids:
            self._touches.record(user_id, ids, self._access_time(now))

    def users(self) -> list[str]:
        """Ids of the users that have long-term memories."""
        self._ensure_open()
        return self.store.users()

    def now(self) -> datetime:
        """The current time from this memory's clock (aware UTC)."""
        return self._now()

    def get(self, memory_id: str, *, user_id: str) -> MemoryRecord:
        """One memory of ``user_id`` by id.

        Raises:
            NotFoundError: no such memory for this user.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> rec = mem.remember("alice", "My sister lives in Berlin").record
            >>> mem.get(rec.id, user_id="alice").content
            'My sister lives in Berlin'
            >>> mem.get(rec.id, user_id="bob")
            Traceback (most recent call last):
                ...
            hybrid_memory.errors.NotFoundError: no memory ... for this user
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        self._touches.sync_user(user_id)  # read-your-own-touches
        found = self.store.get(user_id, [memory_id])
        if not found:
            raise NotFoundError(f"no memory {memory_id!r} for this user")
        return found[0]

    @counted("list_memories")
    def list_memories(
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> list[MemoryRecord]:
        """Memories of ``user_id`` passing ``filter``, oldest first (``filter=None``: every status; ``MemoryFilter()``: active).

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> _ = mem.remember_many("alice", ["I am vegetarian", "My sister lives in Berlin"])
            >>> [m.content for m in mem.list_memories("alice", limit=1)], mem.count_memories("alice")
            (['I am vegetarian'], 2)
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        self._touches.sync_user(user_id)  # read-your-own-touches
        return self.store.list(user_id, filter=filter, limit=limit, offset=offset)

    @counted("count_memories")
    def count_memories(self, user_id: str, *, filter: MemoryFilter | None = None) -> int:
        """How many memories :meth:`list_memories` would return for ``user_id`` and ``filter`` without a limit."""
        self._ensure_open()
        check_id(user_id)
        return self.store.count(user_id, filter=filter)

    @counted("forget")
    def forget(self, memory_id: str, *, user_id: str) -> bool:
        """Delete one memory of ``user_id``; return whether it existed.

        A memory written from conversation turns (``add_turn``: its ``metadata["turn_id"]``) also
        takes those turns (its ``provenance``) out of their sessions' logs, first: no process's
        short-term window, fact extraction or summary sees them again, so what was forgotten
        does not come back as a new memory. The memory of the turn after it loses the search
        context ``add_turn`` cut from its text, so its words find nothing any more. Memories
        already derived from them (extracted facts, summaries: their ``provenance`` names the
        turns) are separate memories and stay. An
        extracted fact moves its session's extraction watermark past its source turns, so a
        batch a killed process wrote but never marked is not extracted again with it; a session
        summary moves the summary watermark past the turns it covers the same way.

        Any memory also leaves what quotes it: the conflict reviews naming it (their reasons quote
        its details), the reasons of the writes that superseded or demoted it (``[forgotten]`` in
        the trace and in :meth:`write_log`, where its own writes leave too), its text in the trace.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> rec = mem.remember("alice", "My locker code is 7731").record
            >>> mem.forget(rec.id, user_id="alice"), mem.forget(rec.id, user_id="alice")
            (True, False)
            >>> mem.recall("locker code", user_id="alice")
            []
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        if not isinstance(memory_id, str) or not memory_id:
            raise InvalidInputError("memory_id must be a non-empty str")
        found = self.store.get(user_id, [memory_id])
        # Under the user's write lock: a concurrent remember reads a related memory, then updates it
        # (dedup bump, supersede); a delete in between made that update raise NotFoundError.
        with self.writer.locked([user_id]):
            for r in found:  # the log first: a process killed in between leaves a memory a retry deletes
                self._sessions.detach(r)
                if r.metadata.get("extracted") is True and r.session_id:
                    self._sessions.mark_source_extracted(user_id, r.session_id, r.provenance)
                elif r.category == "summary" and isinstance(r.metadata.get("summary_of"), str):
                    self._sessions.mark_source_summarized(user_id, r.metadata["summary_of"], r.provenance)
            self.writer.drop_reviews_of(user_id, memory_id)  # their reasons quote its details
            deleted = self.store.delete(user_id, [memory_id]) > 0
        self._touches.discard(user_id, [memory_id])
        self._obs.forget_memory(user_id, memory_id, [r.content for r in found])
        self._outcomes.scrub(user_id, memory_id, [r.content for r in found])
        forget_scores(self.scorer, [r.content for r in found])  # its cache keys are hashes of the texts
        return deleted

    @counted("forget_turn")
    def forget_turn(self, turn_id: str, *, user_id: str, session_id: str) -> bool:
        """Take one conversation turn out of memory; return whether anything of it was there.

        For "forget what I just said", or an assistant reply that repeated it: the turn leaves
        the session's log (every process's short-term window, fact extraction and summaries),
        the memory ``add_turn`` wrote from it is forgotten as :meth:`forget` does, the next turn's
        memory loses the search context cut from its text, and the text is blanked in the trace
        and the write log. A turn below the importance gate or an assistant, system or tool turn
        has no memory of its own, but is in the log and in the next memory's context all the same;
        after its session ended (the log deleted) it is still in that context, which is cut out
        too. Facts or a summary already made from it are separate memories (their ``provenance``
        names the turn): forget them too.

        Args:
            turn_id: The ``id`` of the :class:`~hybrid_memory.records.Turn` ``add_turn`` returned.
            user_id: Whose conversation.
            session_id: The turn's session.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> said = mem.add_turn("alice", "s1", "user", "Remember: my locker code is 7731")
            >>> echo = mem.add_turn("alice", "s1", "assistant", "Saved: locker code 7731.")
            >>> mem.forget_turn(echo.id, user_id="alice", session_id="s1")
            True
            >>> [t.role for t in mem.short_term("alice", "s1")]
            ['user']
            >>> mem.forget_turn(said.id, user_id="alice", session_id="s1"), mem.list_memories("alice")
            (True, [])
            >>> mem.forget_turn(said.id, user_id="alice", session_id="s1")
            False
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        check_id(session_id, name="session_id")
        if not isinstance(turn_id, str) or not turn_id:
            raise InvalidInputError("turn_id must be a non-empty str")
        log = self.store.load_session(user_id, session_id)
        turn = next((t for t in log.turns if t.id == turn_id), None)
        every = MemoryFilter(session_id=session_id, statuses=("active", "superseded", "archived"))
        own = [r for r in self.store.list(user_id, filter=every) if r.metadata.get("turn_id") == turn_id]
        for r in own:  # the turn leaves the log with its memory (its provenance)
            self.forget(r.id, user_id=user_id)
        with self.writer.locked([user_id]):
            if turn is not None:
                self._sessions.detach_turn(turn)
                texts = [turn.content]
            else:  # the session ended: its text is left only in the context cut from it
                texts = self._sessions.detach_turn_id(user_id, session_id, turn_id)
        if texts:
            self._obs.forget_memory(user_id, turn_id, texts)
            self._outcomes.scrub(user_id, turn_id, texts)
            forget_scores(self.scorer, texts)
        return bool(texts) or bool(own)

    @counted("forget_user")
    def forget_user(self, user_id: str) -> ForgetCount:
        """Right to be forgotten: delete every memory, turn, trace step and cache of ``user_id``.

        The store deletes the user's memories and turn logs and bumps the user's forget epoch in
        one step; every write carries the epoch it read, so no process (this one, another worker,
        a background job) can write back anything the user said before this call. Writes already
        in flight fail with :class:`~hybrid_memory.errors.UserForgottenError`.

        Returns:
            The number of long-term memories deleted, as a :class:`~hybrid_memory.records.ForgetCount`
            (an ``int``) whose ``wipe_pending`` is True when a reader in another connection still
            pins an old copy of the deleted text on disk (the WAL of a ``LocalStore`` file, of the
            trace file or of a ``WeaviateStore``'s dead-letter file). Each file finishes that wipe
            by itself on its next write or open once the reader has left; wait for it with
            :meth:`finish_wipe`, check it with :meth:`wipe_pending`.

        Example:
            >>> from hybrid_memory import HybridMemory
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> mem = HybridMemory(embedder=HashingEmbedder())
            >>> _ = mem.remember_many("alice", ["I am vegetarian", "My sister lives in Berlin"])
            >>> _ = mem.add_turn("alice", "s1", "user", "Remember: my locker code is 7731")
            >>> mem.forget_user("alice")
            3
            >>> mem.users(), mem.short_term("alice", "s1"), mem.recall("locker code", user_id="alice")
            ([], [], [])
            >>> mem.close()
        """
        self._ensure_open()
        check_id(user_id)
        n = self.store.delete_user(user_id)  # first: from here on, stale writes are refused
        self._obs.forget_user(user_id)  # after the epoch bump (see Observer: late steps delete themselves)
        self._sessions.forget_user(user_id)
        self._touches.forget_user(user_id)
        self._outcomes.drop(user_id)
        self.writer.forget_user(user_id)
        clear = getattr(self.scorer, "clear_cache", None)
        if callable(clear):
            clear()
        return ForgetCount(n, wipe_pending=self.wipe_pending())

    def wipe_pending(self) -> bool:
        """Whether text deleted by a forget may still be on disk because a reader pinned a file.

        Local SQLite files can be in that state (a read transaction of another connection holds
        the WAL): a :class:`~hybrid_memory.stores.local.LocalStore` file, the trace file, a
        ``WeaviateStore``'s dead-letter file. What the Weaviate server holds is deleted there.
        """
        self._ensure_open()
        pending = getattr(self.store, "wipe_pending", False)
        return pending is True or self._obs.wipe_pending()

    def finish_wipe(self, timeout: float | None = None) -> bool:
        """Finish a pending wipe, waiting up to ``timeout`` s (per file) for readers of other connections.

        Returns:
            True when no deleted text is left on disk; False while a reader still pins it.
        """
        self._ensure_open()
        finish = getattr(self.store, "finish_wipe", None)
        store_done = bool(finish(timeout)) if callable(finish) else True
        return self._obs.finish_wipe(timeout) and store_done

    # ------------------------------------------------------------------ observability
    def replay(self, session_id: str | None, *, user_id: str | None = None) -> list[TraceStep]:
        """The trace steps of a session, oldest first (needs ``trace=True``).

        Each step says what an ``add_turn`` / ``recall`` / ``build_context`` / ``remember`` did:
        the query, the short-term window, every candidate with its score components and its
        fate (injected, dropped and why, cut), the fused text and the write outcomes. Export with
        ``[s.to_json_dict() for s in steps]`` or ``hybrid-memory replay SESSION --json``.

        Args:
            session_id: The session; ``None`` = the steps without a session (needs ``user_id``).
            user_id: Only this user's steps (session ids may repeat across users).

        Raises:
            ConfigurationError: tracing is off for this memory.
        """
        if session_id is not None:
            check_id(session_id, name="session_id")
        if user_id is not None:
            check_id(user_id)
        return self._obs.replay(session_id, user_id=user_id)

    def metrics(self, *, store_sizes: bool = True) -> MetricsSnapshot:
        """A snapshot of this memory's metrics (:mod:`hybrid_memory.metrics`).

        Latency histograms per operation, the context hit rate, write outcomes, scorer fallbacks
        and, with ``store_sizes``, the number of memories per user read from the store.

        Raises:
            ConfigurationError: metrics are disabled (``config.metrics.enabled=False``).
        """
        from hybrid_memory.errors import ConfigurationError

        if self._obs.metrics is None:
            raise ConfigurationError("metrics are disabled (config.metrics.enabled=False)")
        return self._obs.metrics.snapshot(self.store if store_sizes else None)

    def close(self) -> None:
        """Close the memory (and the store). Idempotent; loses nothing (turns are durable).

        Pending access touches are written before the store closes (within ``close_timeout``).
        """
        if self._closed:
            return
        self.flush(timeout=self.close_timeout)
        self._sessions.close(timeout=self.close_timeout)
        self._touches.close(timeout=self.close_timeout)  # before the store closes
        self._closed = True
        self._obs.close()
        self.store.close()

    def __enter__(self) -> HybridMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> HybridMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ async twins (same signatures)
    aadd_turn = _async_twin(add_turn)
    aend_session = _async_twin(end_session)
    asession_summary = _async_twin(session_summary)
    aflush = _async_twin(flush)
    areview_queue = _async_twin(review_queue)
    aconsolidate = _async_twin(consolidate)
    ashort_term = _async_twin(short_term)
    aclear_session = _async_twin(clear_session)
    aremember = _async_twin(remember)
    aremember_many = _async_twin(remember_many)
    arecall = _async_twin(recall)
    abuild_context = _async_twin(build_context)
    aput = _async_twin(put)
    aedit = _async_twin(edit)
    atouch = _async_twin(touch)
    ausers = _async_twin(users)
    aget = _async_twin(get)
    alist_memories = _async_twin(list_memories)
    acount_memories = _async_twin(count_memories)
    aforget = _async_twin(forget)
    aforget_turn = _async_twin(forget_turn)
    aforget_user = _async_twin(forget_user)
    awipe_pending = _async_twin(wipe_pending)
    afinish_wipe = _async_twin(finish_wipe)
    areplay = _async_twin(replay)
    ametrics = _async_twin(metrics)
    aclose = _async_twin(close)


def require_core(memory: object, owner: str) -> HybridMemory:
    """Check that an adapter was given a :class:`HybridMemory` core (the adapters' one check).

    Every adapter takes the core first, positionally or as ``memory=``; none builds a private
    one (it would silently forget everything between sessions).

    Raises:
        ConfigurationError: ``memory`` is not a ``HybridMemory``.
    """
    if isinstance(memory, HybridMemory):
        return memory
    from hybrid_memory.errors import ConfigurationError

    raise ConfigurationError(
        f"{owner} needs a hybrid-memory core as its first argument (or memory=), got {type(memory).__name__}: "
        f"build one per application, e.g. HybridMemory(store=LocalStore('memory.db')), and share it "
        "between adapters and sessions so memories persist"
    )
