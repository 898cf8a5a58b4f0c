"""The session state per (user, session), backed by the store.

The store's turn log is the single source of truth of a session's short-term window (every
process appends to it and reads it); :class:`Sessions` keeps this process's cache of each window
(the replayed :class:`~hybrid_memory.buffer.KeyFrameBuffer`, the turns' vectors), writes turns to
long-term memory, and hands finished batches of turns to the background fact extractor and
summarizer, and stored turns to the background importance refiner when the scorer is an LLM
(:mod:`hybrid_memory.write.refine`). Failures of background work are reported to the observer
(a ``background_error`` trace step, the metrics) as well as kept in :attr:`BackgroundWorker.errors`.

Fact extraction is driven by the log too: the store keeps each session's extraction watermark
(:meth:`~hybrid_memory.stores.base.MemoryStore.extracted_upto`, the ``seq`` of its last extracted
turn), the pending batch is the log's turns above it, and a batch is marked
(:meth:`~hybrid_memory.stores.base.MemoryStore.mark_extracted`) only after its facts were written.
So turns a killed process never extracted are picked up by the next process that adds a turn to
the session, flushes or ends it. Duplicates are avoided in this process by a claimed floor per
session (a batch is handed to the extractor once), and bounded across processes: a batch whose
turns another process marked meanwhile writes nothing, the mark is a forward-only
compare-and-set, and the rare double extraction of two processes racing on one full batch
reaches the writer, whose dedup merges the repeated facts.

Summaries are driven by the log the same way: the store keeps each session's summary watermark
(:meth:`~hybrid_memory.stores.base.MemoryStore.summarized_upto`), the turns waiting for the next
summary are the log's turns above it, and whichever process sees them reach
``buffer.summary_every`` summarises them. The summary is written first and the watermark moved
after it by a compare-and-set from the value the job read
(:meth:`~hybrid_memory.stores.base.MemoryStore.mark_summarized`): of two processes that
summarised the same turns one wins, the other deletes its redundant summary (unless the
winner's was deduplicated into it); a process killed before its mark leaves the turns pending
for the next one (and at worst an extra active summary, superseded by the next summary of the
session). ``end`` claims the last turns (the same compare-and-set) before it deletes the log,
then summarises them in the background: a process killed before that job ran loses that last
summary (the turns themselves are long-term memories already). The idle-session flush
(``buffer.idle_flush_minutes``) still looks at this process's own sessions only.

Forgetting a turn memory (``HybridMemory.forget``), or a new text for it (``edit``, ``put``),
takes its turns out of the log (:meth:`~hybrid_memory.stores.base.MemoryStore.delete_turns`)
before it changes the memory, so every process's window, extraction and summaries lose them, and
rewrites the search context cut from them in the next turn's memory (``metadata["context_of"]``
names that turn; a memory written while another process forgets loses its context at this
process's next read of the session, which notices the deletion; a turn the refiner promotes later
drops a context whose turn has left the log). An extraction or a log-driven summary whose model
call ran while a turn of its batch left the log re-reads the log before writing and drops the
facts that turn grounds (the summary is not written, and made again without it); it reads the
log once more after writing and deletes what it just added from a turn that left meanwhile, so
what lands after a forget began never stays (a fact whose turn is still in the log then was
written before the forget: a derived memory, listed with its provenance). A log deleted as a
whole (an ended session) is not read as a forget of its turns. Forgetting an extracted fact moves the extraction watermark past its source turns
(:meth:`Sessions.mark_source_extracted`): a batch whose facts were written by a process killed
before its mark is then not extracted again with the forgotten fact in it, and a batch in flight
drops the facts of turns the watermark passed. Forgetting a summary moves the summary watermark
past the turns it covers the same way (:meth:`Sessions.mark_source_summarized`).

Locking: one lock per session window orders this process's writers of that session (other
processes are ordered by the log); the :class:`Sessions` lock guards the in-process maps only and
is never held across a store, embedder or LLM call.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.embeddings import Embedder
from hybrid_memory.errors import InvalidInputError, StoreError, StoreUnavailableError, UserForgottenError
from hybrid_memory.records import CONTEXT_SOURCE_KEY, MemoryRecord, Status, Turn, WriteOutcome
from hybrid_memory.stores.base import MemoryFilter, MemoryStore, Vector, update_present
from hybrid_memory.text.analyzer import last_words
from hybrid_memory.write.buffer import KeyFrameBuffer
from hybrid_memory.write.extraction import BackgroundWorker, FactExtractor
from hybrid_memory.write.importance import HeuristicImportanceScorer, ImportanceScorer, infer_category
from hybrid_memory.write.refine import ImportanceRefiner, PendingTurn, refines_in_background
from hybrid_memory.write.summary import SessionSummarizer
from hybrid_memory.write.writer import MemoryWriter

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_memory.observe.trace import Observer

__all__ = ["Sessions"]

_Key = tuple[str, str]
#: Every status a stored memory can have (a search context is rewritten whatever the status).
_ANY_STATUS: tuple[Status, ...] = get_args(Status)

logger = logging.getLogger("hybrid_memory.write")


@dataclasses.dataclass
class _Window:
    """This process's cache of one session's short-term window; the store's turn log is the truth."""

    buffer: KeyFrameBuffer
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    #: ``seq`` of the last turn replayed into ``buffer``.
    seq: int = 0
    #: Turns replayed (compared with the log's count to notice deletions by other processes).
    count: int = 0
    #: The user's forget epoch when last synced (``None``: never synced).
    epoch: int | None = None
    #: Text of the session's latest turn (the search context of the next one).
    last_content: str | None = None
    #: That turn's ``(id, seq)`` (a memory records where its search context came from: ``context_of``).
    last_turn: tuple[str, int] | None = None
    #: Memories this process wrote last with a context cut from a turn (its id), checked at the next sync.
    unchecked: tuple[tuple[str, ...], str] | None = None
    #: After this process appended a turn without reading the log: ``(seq, count)`` before it and its id.
    appended: tuple[int, int, str] | None = None
    #: ``seq`` of every turn of the log replayed into the window, by turn id (finds a retried ``add_turn``).
    ids: dict[str, int] = dataclasses.field(default_factory=dict)
    #: The session's summary watermark when last read (``None``: not read since the last rebuild).
    summarized: int | None = None
    #: Turns of the log at or below ``summarized`` at that read (``count - below`` are pending).
    below: int = 0


class Sessions:
    """Every session of one memory: its window (cached from the store), turn writes and background jobs.

    Args:
        store: Holds the turn logs and the long-term memories.
        embedder: Embeds turns (once per turn; the vector is reused by the context dedup).
        config: The memory's settings (``buffer`` and ``writer`` sections are used).
        writer: Writes turns, extracted facts and summaries to long-term memory.
        extractor: Background fact extractor (``None`` = none).
        summarizer: Background incremental session summarizer (``None`` = none).
        redact: Replaces PII in a text an LLM component is about to see.
        bind: Binds the embedder to the store before the first embedding (idempotent).
        record: Logs write outcomes (the facade's write log and observer) and returns them.
        scorer: Returns the memory's current importance scorer (one with a true ``background``
            attribute refines ``add_turn`` scores in the background).
        observer: Receives refinement steps and background errors (trace and metrics).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: HybridMemoryConfig,
        *,
        writer: MemoryWriter,
        extractor: FactExtractor | None,
        summarizer: SessionSummarizer | None,
        redact: Callable[[str], str],
        bind: Callable[[], None],
        record: Callable[[list[WriteOutcome]], list[WriteOutcome]],
        scorer: Callable[[], ImportanceScorer],
        observer: Observer,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.config = config
        self.writer = writer
        self.extractor = extractor
        self.summarizer = summarizer
        self._redact = redact
        self._bind = bind
        self._record = record
        #: Runs extraction and summaries (one daemon thread).
        self.worker = BackgroundWorker()
        #: Set by :meth:`close`: background jobs still running afterwards write nothing.
        self.closed = False
        # Guards the in-process maps only; never held across store, embedder or LLM calls.
        self._lock = threading.Lock()
        self._windows: dict[_Key, _Window] = {}
        self._turn_vectors: dict[str, Vector] = {}
        #: Per session: ``seq`` of the last turn this process handed to the extractor (its claim).
        self._extract_floor: dict[_Key, int] = {}
        #: Sessions with a summary job queued in this process (a second one would find nothing to do).
        self._summary_queued: set[_Key] = set()
        self._last_turn_at: dict[_Key, datetime] = {}
        self._warned_retired = False
        self._scorer = scorer
        self._observer = observer
        self._heuristic = HeuristicImportanceScorer(key_frame_threshold=config.buffer.key_frame_importance)
        #: Refines ``add_turn`` scores with an LLM scorer in the background.
        self.refiner = ImportanceRefiner(
            store=store,
            writer=writer,
            scorer=scorer,
            submit=self.worker.submit,
            promote=self._promote,
            observer=observer,
            min_importance=config.writer.turn_min_importance,
            report_error=self.report_error,
        )

    def hot_scorer(self) -> ImportanceScorer:
        """The scorer ``add_turn`` uses on the caller's thread: the heuristic when the scorer refines later."""
        scorer = self._scorer()
        if not refines_in_background(scorer):
            return scorer
        fallback = getattr(scorer, "fallback", None)
        return fallback if isinstance(fallback, HeuristicImportanceScorer) else self._heuristic

    # ------------------------------------------------------------------ the window cache
    def cached(self) -> list[_Key]:
        """The (user, session) pairs whose window this process holds a cache of."""
        with self._lock:
            return list(self._windows)

    def _window(self, user_id: str, session_id: str) -> _Window:
        key = (user_id, session_id)
        with self._lock:
            w = self._windows.get(key)
            if w is None:
                w = self._windows[key] = _Window(
                    KeyFrameBuffer(
                        max_tokens=self.config.buffer.max_tokens,
                        max_key_frame_ratio=self.config.buffer.max_key_frame_ratio,
                    )
                )
            return w

    def _drop_vectors(self, turns: Iterable[Turn]) -> None:
        with self._lock:
            for t in turns:
                self._turn_vectors.pop(t.id, None)

    def _sync(self, w: _Window, user_id: str, session_id: str) -> int:
        """Replay the store's new turns into the cached window (``w.lock`` held); return the epoch.

        The window is rebuilt from the whole log when the user was forgotten or turns were
        deleted (an ended or cleared session, a forgotten turn) by any process since the last sync,
        or when another process appended a turn between this process's last read and its own
        append (the log is read again from before that append). When turns were deleted, the
        memories this process wrote last with a context whose turn is gone lose that context
        (:meth:`_drop_context`).
        """
        appended = w.appended
        log = self.store.load_session(user_id, session_id, after_seq=w.seq if appended is None else appended[0])
        unchecked, w.unchecked, w.appended = w.unchecked, None, None
        turns = log.turns
        if appended is None:
            changed = log.count != w.count + len(turns)
        else:  # read again from before this process's own turn: nothing else may have happened around it
            _, count, own = appended
            changed = log.count != count + len(turns) or not turns or turns[0].id != own
            turns = turns[1:]  # the own turn is in the window already
        if w.epoch is not None and (log.epoch != w.epoch or changed):
            self._drop_vectors(w.buffer.clear())
            w.seq, w.count, w.last_content, w.last_turn, w.summarized = 0, 0, None, None, None
            w.ids.clear()
            log = self.store.load_session(user_id, session_id)
            turns = log.turns
            if unchecked is not None and log.turns and all(t.id != unchecked[1] for t in log.turns):
                self._drop_context(user_id, unchecked[0])
        for t in turns:
            self._drop_vectors(w.buffer.add(t))
            w.ids[t.id] = t.seq
        if turns:
            last = turns[-1]
            w.seq, w.last_content, w.last_turn = last.seq, last.content, (last.id, last.seq)
        w.count, w.epoch = log.count, log.epoch
        return log.epoch

    def short_term(self, user_id: str, session_id: str) -> list[Turn]:
        """The turns in the session's window, oldest first, as the store has them now.

        When the store cannot be reached, the window as this process last saw it is returned.

        Raises:
            StoreUnavailableError: the store is down and this process never saw the window.
        """
        w = self._window(user_id, session_id)
        with w.lock:
            try:
                self._sync(w, user_id, session_id)
            except StoreUnavailableError:
                if w.epoch is None:  # nothing cached: there is no window to fall back on
                    raise
            return w.buffer.turns

    def turn_matrix(self, turns: Sequence[Turn]) -> Vector:
        """One embedding row per turn (cached per turn id; turn text is already redacted)."""
        with self._lock:
            known = {t.id: self._turn_vectors[t.id] for t in turns if t.id in self._turn_vectors}
        missing = [t for t in turns if t.id not in known]
        if missing:  # turns below the gate, or added by another process (turn text is redacted)
            vecs = self.embedder.embed_documents([t.content for t in missing])
            with self._lock:
                for t, v in zip(missing, vecs, strict=True):
                    known[t.id] = self._turn_vectors[t.id] = v
        return np.stack([known[t.id] for t in turns])

    # ------------------------------------------------------------------ turns
    def append(self, turn: Turn, *, pii_note: str | None = None, long_term: bool = True, keyed: bool = False) -> Turn:
        """Write ``turn`` (scored and redacted) to long-term memory and the session's log; return it stored.

        ``long_term=False``: the session's log only (conversation context, never a memory).

        A turn whose id the log already holds (a retried ``add_turn`` with the caller's id) writes
        nothing and returns the stored turn; one found in another session, or with another role
        or text, is refused. ``keyed``: the id is the caller's, so the turn may be a retry of one
        forgotten since (the turn, or its user): such a turn is checked before and after the write
        (:meth:`~hybrid_memory.stores.base.MemoryStore.retired_turns`), nothing of it is kept, and
        it is returned as given, with ``seq`` 0.

        Raises:
            UserForgottenError: the user was forgotten (by any process) while the turn was written.
            InvalidInputError: the turn's id names another turn of the user.
        """
        user_id, session_id = turn.user_id, turn.session_id
        w = self._window(user_id, session_id)
        with w.lock:  # one writer per session in this process; other processes are ordered by the log
            epoch = self._sync(w, user_id, session_id)
            if turn.id in w.ids:
                logged = self._logged(turn, w.ids[turn.id])
                if logged is not None:
                    return logged
            if keyed and self._retired(turn, epoch):
                return turn
            context = last_words(w.last_content or "", self.config.writer.context_words)
            source = w.last_turn if context else None
            # Long-term first, then the log: a turn in the window is always recallable too.
            written = (
                self._write_turns([turn], contexts=[(context, source)], epoch=epoch, pii_note=pii_note)
                if long_term
                else []
            )
            (stored,) = self.store.append_turns([turn], epoch=epoch)
            if stored.model_copy(update={"seq": turn.seq}) != turn:  # the log held this id already
                return self._kept(turn, stored, written)
            if keyed and self._retired(turn, epoch):  # forgotten by another process while this wrote
                self.store.delete_turns(user_id, [turn.id])
                self._undo_added(turn, written)
                return turn
            # Into the cache without a re-read; the next sync reads the log from before it, so a turn
            # another process appended or deleted meanwhile is not missed (see _sync).
            w.appended = (w.seq, w.count, stored.id)
            w.ids[stored.id] = stored.seq
            self._drop_vectors(w.buffer.add(stored))
            w.seq, w.count, w.last_content = max(w.seq, stored.seq), w.count + 1, stored.content
            w.last_turn = (stored.id, stored.seq)
            w.unchecked = None
            if source is not None:  # checked at the next sync (_drop_context)
                mine = tuple(o.record.id for o in written if o.record and o.record.context_source == source[0])
                w.unchecked = (mine, source[0]) if mine else None
        with self._lock:
            self._last_turn_at[(user_id, session_id)] = turn.timestamp
        if long_term and refines_in_background(self._scorer()) and not self.closed:
            own = tuple(
                o.record.id for o in written if o.record is not None and o.record.metadata.get("turn_id") == turn.id
            )
            self.refiner.add(PendingTurn(stored, own, context, epoch, context_of=source))
        self._after_turn(stored)
        return stored

    def _logged(self, turn: Turn, seq: int) -> Turn | None:
        """The stored turn of ``turn``'s id at ``seq`` in its session's log (``None``: it left the log since).

        Raises:
            InvalidInputError: the stored turn has another role or text.
        """
        log = self.store.load_session(turn.user_id, turn.session_id, after_seq=max(0, seq - 1))
        found = next((t for t in log.turns if t.id == turn.id), None)
        if found is not None:
            _same_turn(turn, found)
        return found

    def _kept(self, turn: Turn, stored: Turn, written: Sequence[WriteOutcome]) -> Turn:
        """After ``append_turns`` returned the log's own turn for ``turn``'s id: return it, or refuse.

        Another process appended this id first (a retry racing the original), or the id names a
        turn of another session or text. A refused turn's memories written by this call are
        deleted again (a memory the writer merged into an existing one stays: it was there before).
        """
        try:
            _same_turn(turn, stored)
        except InvalidInputError:
            self._undo_added(turn, written)
            raise
        return stored

    def _undo_added(self, turn: Turn, written: Sequence[WriteOutcome]) -> None:
        """Delete the memories this call added for ``turn`` (one it merged into an existing memory stays)."""
        mine = [o.record.id for o in written if o.action == "added" and o.record is not None]
        if mine:
            self.store.delete(turn.user_id, mine)

    def _retired(self, turn: Turn, epoch: int) -> bool:
        """Whether ``turn`` is a late retry of a forgotten turn; logged when so.

        A store written against an older contract, without ``retired_turns``, is warned about
        once and treated as holding none.
        """
        retired_turns = getattr(self.store, "retired_turns", None)
        if retired_turns is None:
            if not self._warned_retired:
                self._warned_retired = True
                logger.warning(
                    "%s has no retired_turns(): a late add_turn retry can add a turn that left the log again "
                    "(see hybrid_memory.testing.store_contract)",
                    type(self.store).__name__,
                )
            return False
        if turn.id not in retired_turns(turn.user_id, [turn.id], epoch=epoch):
            return False
        logger.warning(
            "add_turn: turn id %r (session %r) was forgotten; the retry writes nothing", turn.id, turn.session_id
        )
        return True

    def _promote(
        self, turn: Turn, context: str, source: tuple[str, int] | None, epoch: int, metadata: dict[str, Any]
    ) -> list[WriteOutcome]:
        """Write a turn whose refined importance cleared the gate (the refiner's promotion).

        ``source`` is the turn the search context was cut from when the turn was added; a context
        whose turn has left the log since (forgotten or edited, by any process) is not written.
        """
        if context and not (source is not None and self._in_log(turn, source)):
            context, source = "", None
        return self._write_turns([turn], contexts=[(context, source)], epoch=epoch, metadata=metadata)

    def _settle(self, w: _Window, user_id: str, session_id: str) -> None:
        """Check what :meth:`_drop_context` would at the next sync, before this process lets go of a window.

        Its session ends or the memory closes, so no next sync will come (best effort; ``w.lock`` held).
        """
        if w.unchecked is None:
            return
        try:
            self._sync(w, user_id, session_id)
        except UserForgottenError:
            return  # nothing of the user is left to check
        except StoreError as exc:
            self.report_error("context check", user_id, session_id, w.epoch, f"{type(exc).__name__}: {exc}")

    def _drop_context(self, user_id: str, memory_ids: Sequence[str]) -> None:
        """Blank the search context of memories this process wrote with a context whose turn left the log.

        A forget in another process takes the turn out of the log, then looks for the memories
        holding its text: a memory written from a read of the log before the first step and
        landing after the second is not found there. This process notices the deletion at its
        next read of the session's log, or when it ends the session or closes (:meth:`_settle`),
        and blanks the context itself (no read is added to ``add_turn``). A process killed before
        either leaves the context.
        """
        try:
            found = self.store.get(user_id, list(memory_ids))
            update_present(self.store, [r.evolve(context="") for r in found if r.context])
        except UserForgottenError:
            return

    def _in_log(self, turn: Turn, source: tuple[str, int]) -> bool:
        """Whether the turn ``source`` (``(id, seq)``) is still in the log of ``turn``'s session.

        Reads the log from that turn's ``seq`` on (the turns after it are few: it was the latest when
        ``turn`` was added).
        """
        turn_id, seq = source
        log = self.store.load_session(turn.user_id, turn.session_id, after_seq=max(0, seq - 1))
        return any(t.id == turn_id for t in log.turns)

    def _write_turns(
        self,
        turns: Sequence[Turn],
        *,
        contexts: Sequence[tuple[str, tuple[str, int] | None]],
        epoch: int,
        pii_note: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[WriteOutcome]:
        if not self.config.writer.store_turns:
            return []
        drafts: list[MemoryRecord] = []
        notes: list[str | None] = []
        for t, (context, source) in zip(turns, contexts, strict=True):
            if t.importance < self.config.writer.turn_min_importance and not t.key_frame:
                continue
            category = infer_category(t.content) if t.key_frame else "turn"
            notes.append(t.scoring_note)
            drafts.append(
                MemoryRecord.create(
                    user_id=t.user_id,
                    content=t.content,
                    session_id=t.session_id,
                    category=category,
                    importance=t.importance,
                    source="assistant"
                    if t.role == "assistant"
                    else ("system" if t.role in ("system", "tool") else "user"),
                    timestamp=t.timestamp,
                    metadata={
                        **(metadata or {}),
                        "role": t.role,
                        "turn_id": t.id,
                        **({CONTEXT_SOURCE_KEY: source[0]} if context and source else {}),
                    },
                    provenance=(t.id,),
                    context=context,
                )
            )
        if not drafts:
            return []
        self._bind()
        # One embedding per turn: the writer stores it and the short-term dedup of build_context
        # reuses it (the text is already redacted, so the writer has no reason to re-embed).
        vectors = self.embedder.embed_documents([d.content for d in drafts])
        with self._lock:
            for d, v in zip(drafts, vectors, strict=True):
                self._turn_vectors[d.provenance[0]] = v
        written = [
            o.model_copy(update={"notes": (*o.notes, note)}) if note else o
            for o, note in zip(
                self.writer.write(drafts, vectors=vectors, epochs={turns[0].user_id: epoch}), notes, strict=True
            )
        ]
        if pii_note is not None:  # redacted at the door: say so where the writer would have
            written = [o if o.reason else o.model_copy(update={"reason": pii_note}) for o in written]
        return self._record(written)

    def write(self, drafts: Sequence[MemoryRecord], *, epochs: Mapping[str, int]) -> list[WriteOutcome]:
        """Write memory drafts through the writer; return one outcome per draft (not logged yet).

        The drafts are embedded here, before the writer takes its lock (the writer is shared
        by every user: a slow embedder must not hold up the others' writes). The text embedded
        is redacted; the writer re-embeds only a draft its own redaction changes.

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since (nothing is written).
        """
        self._bind()
        vectors = self.embedder.embed_documents([self._redact(d.content) for d in drafts])
        return self.writer.write(drafts, vectors=vectors, epochs=epochs)

    def idle(self, user_id: str, session_id: str, now: datetime) -> list[_Key]:
        """The user's *other* sessions idle for ``buffer.idle_flush_minutes`` at ``now`` (to be ended)."""
        minutes = self.config.buffer.idle_flush_minutes
        if minutes <= 0:
            return []
        try:
            cutoff = now - timedelta(minutes=minutes)
        except OverflowError:  # ``now`` within minutes of datetime.min: nothing can be idle before it
            return []
        with self._lock:
            return [
                k for k, at in self._last_turn_at.items() if k[0] == user_id and k[1] != session_id and at <= cutoff
            ]

    def end(self, user_id: str, session_id: str) -> None:
        """Drop the session's log and hand its last turns to the extractor, the summarizer and the refiner.

        The turns above the summary watermark are claimed (the watermark moved past them) before
        the log is deleted, so no other process summarises them too.
        """
        key = (user_id, session_id)
        rest = self._claim_summary(key)
        self.drop(user_id, session_id)
        if rest is not None:
            self._submit_summary(key, rest)
        self.refiner.submit()

    def drop(self, user_id: str, session_id: str) -> None:
        """Delete the session's turn log in the store and this process's cache of it.

        Turns not extracted yet are read first and handed to the extractor (the log, and with it
        the session's extraction watermark, is gone afterwards).
        """
        key = (user_id, session_id)
        w = self._window(user_id, session_id)
        with w.lock:
            self._settle(w, user_id, session_id)
            pending = self._claim(key, whole=True) if self.extractor is not None else []
            self.store.delete_session(user_id, session_id)
            self._drop_vectors(w.buffer.clear())
            with self._lock:
                self._windows.pop(key, None)
                self._last_turn_at.pop(key, None)
                self._extract_floor.pop(key, None)
        for batch in pending:
            self._submit_extract(batch, mark=False)

    def forget_user(self, user_id: str) -> None:
        """Drop everything this process holds about ``user_id`` (the store was wiped by the caller)."""
        self.refiner.forget_user(user_id)
        with self._lock:
            for table in (self._extract_floor, self._last_turn_at):
                for key in [k for k in table if k[0] == user_id]:
                    table.pop(key, None)
            self._summary_queued -= {k for k in self._summary_queued if k[0] == user_id}
            windows = [self._windows.pop(k) for k in [k for k in self._windows if k[0] == user_id]]
        for w in windows:
            self._drop_vectors(w.buffer.clear())

    # ------------------------------------------------------------------ background jobs
    def report_error(self, job: str, user_id: str, session_id: str | None, epoch: int | None, error: str) -> None:
        """Record a failure of background work: in the worker's errors, the trace and the metrics."""
        self.worker.errors.append(error)
        self._observer.background(
            "background_error", user_id, session_id, epoch=epoch, error=error, params={"job": job}
        )

    def _guarded(self, job: str, key: _Key, epoch: int | None, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` as a worker job whose unexpected failure is reported for ``key`` (never raised)."""

        def run() -> None:
            try:
                fn()
            except UserForgottenError:
                return  # forgotten meanwhile (any process): nothing from before the forget is kept
            except Exception as exc:  # recorded, never fatal for the worker
                self.report_error(job, key[0], key[1], epoch, f"{job} failed: {type(exc).__name__}: {exc}")

        return run

    def _after_turn(self, turn: Turn) -> None:
        key = (turn.user_id, turn.session_id)
        if self.extractor is not None:
            for batch in self._claim_or_report(key, whole=False):
                self._submit_extract(batch)
        if self._summary_due(key):
            self._submit_summary(key)

    def _summary_due(self, key: _Key) -> bool:
        """Whether the session's turns above the summary watermark reach ``buffer.summary_every``.

        Counted on the window cache (the log's turn count minus the turns at or below the
        watermark when it was last read); the store is read only when that count says a summary
        is due (another process may have made it meanwhile) or after the cache was rebuilt. An
        unreachable store is reported, not raised (the turn is stored; the summary waits).
        """
        every = self.config.buffer.summary_every
        if self.summarizer is None or every <= 0:
            return False
        w = self._window(*key)
        with w.lock:
            if w.summarized is not None and w.count - w.below < every:
                return False
            try:
                upto = self.store.summarized_upto(*key)
                log = self.store.load_session(*key, after_seq=upto)
            except StoreError as exc:
                self.report_error("summary", *key, None, f"summary deferred: {type(exc).__name__}: {exc}")
                return False
            w.summarized, w.below = upto, log.count - len(log.turns)
            return len(log.turns) >= every

    def _claim(self, key: _Key, *, whole: bool) -> list[list[Turn]]:
        """Claim the session's turns not extracted yet, in batches of ``extractor.batch_turns``.

        The pending turns are the log's turns above the store's watermark and this process's
        floor (turns already handed to the extractor). ``whole=False`` claims full batches only
        (the rest stays pending); ``whole=True`` claims everything, the last batch partial.
        """
        extractor = self.extractor
        if extractor is None:
            return []
        size = max(1, extractor.batch_turns)
        with self._lock:
            floor = self._extract_floor.get(key)
        if floor is None:  # first look at this session in this process
            floor = self.store.extracted_upto(*key)
        turns = list(self.store.load_session(*key, after_seq=floor).turns)
        if len(turns) < (1 if whole else size):
            self._raise_floor(key, floor)
            return []
        # Another process may have extracted some of them: the watermark is re-read before a claim.
        floor = max(floor, self.store.extracted_upto(*key))
        with self._lock:
            floor = max(floor, self._extract_floor.get(key, 0))
            turns = [t for t in turns if t.seq > floor]
            take = len(turns) if whole else len(turns) - len(turns) % size
            claimed = turns[:take]
            self._extract_floor[key] = claimed[-1].seq if claimed else floor
        return [claimed[i : i + size] for i in range(0, len(claimed), size)]

    def _claim_or_report(self, key: _Key, *, whole: bool) -> list[list[Turn]]:
        """:meth:`_claim`, an unreachable store reported instead of raised (the turns stay pending)."""
        try:
            return self._claim(key, whole=whole)
        except StoreError as exc:
            self.report_error("extraction", *key, None, f"extraction deferred: {type(exc).__name__}: {exc}")
            return []

    def _raise_floor(self, key: _Key, floor: int) -> None:
        with self._lock:
            self._extract_floor[key] = max(floor, self._extract_floor.get(key, 0))

    def _redacted_turn(self, turn: Turn) -> Turn:
        """``turn`` as an LLM component may see it (PII replaced when ``writer.redact_pii``)."""
        text = self._redact(turn.content)
        return turn if text == turn.content else turn.model_copy(update={"content": text})

    def _submit_extract(self, turns: list[Turn], *, mark: bool = True) -> None:
        """Extract facts from ``turns`` in the background; with ``mark``, then advance the watermark.

        A batch whose turns another process marked meanwhile writes nothing. A failed model call
        marks the batch too (the error is reported; it is not retried on every later turn); an
        unexpected failure, or a closed memory, leaves it unmarked for the next process.
        """
        extractor = self.extractor
        if extractor is None:
            return
        user = turns[0].user_id
        epoch = self.store.user_epoch(user)
        key = (user, turns[0].session_id)
        last = turns[-1].seq

        def job() -> None:
            t0 = time.perf_counter()
            result = extractor.extract([self._redacted_turn(t) for t in turns])
            if result.error is not None:
                self.report_error("extraction", *key, epoch, result.error)
            elif result.dropped:  # what the sanity checks refused is visible, not silent
                self._observer.background(
                    "extract",
                    *key,
                    epoch=epoch,
                    seconds=time.perf_counter() - t0,
                    params={"turns": len(turns), "kept": len(result.memories), "dropped": result.dropped},
                )
            drafts = [m.to_record() for m in result.memories]
            if self.closed:
                return
            if mark and drafts:
                upto = self.store.extracted_upto(*key)
                if upto >= last:
                    return  # another process extracted these turns meanwhile
                # A turn that left the log while the model ran grounds nothing, nor does one the
                # watermark passed meanwhile (its facts were written, some perhaps forgotten since).
                gone, seq_of = self._forgotten(key, turns), {t.id: t.seq for t in turns}
                drafts = [
                    d
                    for d in drafts
                    if gone.isdisjoint(d.provenance) and any(seq_of.get(p, last) > upto for p in d.provenance)
                ]
            if drafts:
                written = self.write(drafts, epochs={user: epoch})
                if mark:  # a turn forgotten between the check above and the write: its facts go again
                    written = self._drop_forgotten(key, turns, written)
                self._record(written)
            if mark:
                self.store.mark_extracted(*key, last, epoch=epoch)

        self.worker.submit(self._guarded("extraction", key, epoch, job))

    def detach(self, record: MemoryRecord, new_text: str | None = None) -> None:
        """Take the turns a memory was written from out of their sessions' logs (forget, a new text).

        Only a turn memory (``add_turn``: its ``metadata["turn_id"]``) has them: its own turn and
        those merged into it (its ``provenance``). Called before the memory changes, so a process
        killed in between leaves a memory a retry finds as it was.

        ``add_turn`` indexes each turn with the end of the turn before it (its search context), so
        the text that leaves lives on in the next turn's memory too. Those memories (any status)
        get the end of ``new_text`` as their context instead (an edit, a keyed replace), or none
        (a forget): the old words no longer find them, and no read returns them.
        """
        if not (isinstance(record.metadata.get("turn_id"), str) and record.provenance):
            return
        texts = self._turn_texts(record)  # before they leave the log: the contexts were cut from them
        self.store.delete_turns(record.user_id, list(record.provenance))
        prov = set(record.provenance)
        session = record.session_id if len(prov) == 1 else None  # merged turns: any session
        self._rewrite_contexts(record.user_id, session, prov, texts, new_text, skip=record.id)

    def detach_turn(self, turn: Turn) -> None:
        """Take one turn out of its session's log and its text out of the search context cut from it.

        For a turn no memory was written from (below the gate, an assistant reply); a turn
        memory leaves with :meth:`detach`.
        """
        self.store.delete_turns(turn.user_id, [turn.id])
        self._rewrite_contexts(turn.user_id, turn.session_id, {turn.id}, {turn.content}, None)

    def detach_turn_id(self, user_id: str, session_id: str, turn_id: str) -> list[str]:
        """:meth:`detach_turn` for a turn no longer in its session's log (the session ended).

        Its text lives on only in the search context cut from it; the memories that name it
        (``context_of``) lose that context. Returns the contexts removed (the end of the turn's text).
        """
        self.store.delete_turns(user_id, [turn_id])  # a store's own copies (a Weaviate dead letter's context)
        return self._rewrite_contexts(user_id, session_id, {turn_id}, set(), None)

    def _turn_texts(self, record: MemoryRecord) -> set[str]:
        """The memory's text and those of its turns still in its session's log."""
        texts = {record.content}
        if record.session_id is not None:
            prov = set(record.provenance)
            try:
                log = self.store.load_session(record.user_id, record.session_id)
            except UserForgottenError:
                return texts
            texts.update(t.content for t in log.turns if t.id in prov)
        return texts

    def _rewrite_contexts(
        self,
        user_id: str,
        session_id: str | None,
        turn_ids: set[str],
        texts: set[str],
        new_text: str | None,
        *,
        skip: str | None = None,
    ) -> list[str]:
        """Replace the search context cut from one of ``turn_ids`` in every memory that has one.

        A memory written since ``context_of`` existed names the turn; an older one is matched by
        its context being the end of one of ``texts`` (how ``add_turn`` cut it). Only memories of
        ``session_id`` are read (``None``: every memory of the user), except ``skip``. Returns the
        contexts replaced.
        """
        prov = turn_ids
        which = MemoryFilter(session_id=session_id, statuses=_ANY_STATUS)
        try:
            found = self.store.list(user_id, filter=which)
        except UserForgottenError:
            return []
        replacement = last_words(new_text, self.config.writer.context_words) if new_text else ""
        old: list[MemoryRecord] = []
        for r in found:
            if r.id == skip or not r.context or r.context == replacement:
                continue
            source = r.context_source
            if source in prov if source is not None else any(t.endswith(r.context) for t in texts):
                old.append(r)
        if old:
            try:
                update_present(self.store, [r.evolve(context=replacement) for r in old])
            except UserForgottenError:
                return []
        return [r.context for r in old]

    def mark_source_extracted(self, user_id: str, session_id: str, turn_ids: Sequence[str]) -> None:
        """Move the session's extraction watermark past these turns (the source of a forgotten fact).

        Their facts were written (the fact being forgotten is one), so they are extracted: a
        process killed between writing their batch's facts and its mark leaves them pending,
        and without this the next process would extract the forgotten fact again.
        """
        ids = set(turn_ids)
        try:
            log = self.store.load_session(user_id, session_id)
            seqs = [t.seq for t in log.turns if t.id in ids]
            if seqs:
                self.store.mark_extracted(user_id, session_id, max(seqs), epoch=log.epoch)
        except UserForgottenError:
            return  # the whole user is gone: nothing is extracted again

    def mark_source_summarized(self, user_id: str, session_id: str, turn_ids: Sequence[str]) -> None:
        """Move the session's summary watermark past these turns (the ones a forgotten summary covers).

        As :meth:`mark_source_extracted` for summaries: a process killed between writing a
        summary and moving the watermark leaves its turns due, and the next process would
        summarise them again, bringing the forgotten summary back. A compare-and-set from the
        watermark read (a few tries when another process moves it meanwhile).
        """
        ids = set(turn_ids)
        try:
            for _ in range(3):
                upto = self.store.summarized_upto(user_id, session_id)
                log = self.store.load_session(user_id, session_id, after_seq=upto)
                seqs = [t.seq for t in log.turns if t.id in ids]
                if not seqs or self.store.mark_summarized(
                    user_id, session_id, max(seqs), expected=upto, epoch=log.epoch
                ):
                    return
        except UserForgottenError:
            return  # the whole user is gone: nothing is summarised again

    def _drop_forgotten(self, key: _Key, turns: Sequence[Turn], written: list[WriteOutcome]) -> list[WriteOutcome]:
        """Delete the facts just ``written`` (added) that a turn forgotten meanwhile grounds; return the rest.

        ``forget`` takes the turn out of the log before it deletes the memory, so a fact whose
        turn is still in the log after the write was written before the forget began: it is a
        memory derived before the forget, listed with its provenance.
        """
        gone = self._forgotten(key, turns)
        stale = [
            o.record.id
            for o in written
            if o.action == "added" and o.record is not None and not gone.isdisjoint(o.record.provenance)
        ]
        if not stale:
            return written
        with self.writer.locked([key[0]]):
            self.store.delete(key[0], stale)
        return [o for o in written if o.record is None or o.record.id not in stale]

    def _forgotten(self, key: _Key, turns: Sequence[Turn]) -> set[str]:
        """Ids of ``turns`` taken out of the session's log since they were read (``forget``).

        Empty when none of them is left: the log was deleted (the session ended), which is not
        a forget of what they said.
        """
        log = self.store.load_session(*key, after_seq=turns[0].seq - 1)
        read, present = {t.id for t in turns}, {t.id for t in log.turns}
        return read - present if read & present else set()

    def _claim_summary(self, key: _Key) -> tuple[list[Turn], int] | None:
        """Claim the session's turns above the summary watermark for its last summary (``end``).

        Returns the turns and the epoch they were read under, or ``None`` when there are none
        (or the user was forgotten meanwhile). The watermark is moved past them first, so a
        process summarising them at the same time loses its mark and deletes its summary.
        """
        if self.summarizer is None or self.config.buffer.summary_every <= 0:
            return None
        try:
            for _ in range(3):  # each retry follows a summary another process just marked
                upto = self.store.summarized_upto(*key)
                log = self.store.load_session(*key, after_seq=upto)
                if not log.turns:
                    return None
                if self.store.mark_summarized(*key, log.turns[-1].seq, expected=upto, epoch=log.epoch):
                    return list(log.turns), log.epoch
        except UserForgottenError:
            return None  # nothing said before the forget is summarised
        return None

    def _submit_summary(self, key: _Key, claimed: tuple[list[Turn], int] | None = None) -> None:
        """Summarise the session in the background: ``claimed`` turns, or those above the watermark.

        Without ``claimed`` the job reads the watermark and the turns above it when it runs (a
        summary another process made meanwhile leaves it nothing to do) and marks them after
        writing; at most one such job per session is queued in this process.
        """
        summarizer = self.summarizer
        if summarizer is None:
            return
        every = self.config.buffer.summary_every
        if claimed is not None:
            turns, epoch = claimed

            def last() -> None:
                for i in range(0, len(turns), every):
                    self._summarize(key, turns[i : i + every], epoch, None)

            self.worker.submit(self._guarded("summary", key, epoch, last))
            return
        with self._lock:
            if key in self._summary_queued:
                return
            self._summary_queued.add(key)

        def job() -> None:
            with self._lock:
                self._summary_queued.discard(key)
            upto = self.store.summarized_upto(*key)
            log = self.store.load_session(*key, after_seq=upto)
            # Every ``every`` turns one summary, as if it had run on time (bounded prompts, one version each).
            for i in range(0, len(log.turns) - every + 1, every):
                batch = list(log.turns[i : i + every])
                if not self._summarize(key, batch, log.epoch, upto):
                    return  # another process summarised from here first
                upto = batch[-1].seq

        self.worker.submit(self._guarded("summary", key, None, job))

    def _summarize(self, key: _Key, turns: list[Turn], epoch: int, expected: int | None) -> bool:
        """Fold ``turns`` into the session's summary; with ``expected``, then move the watermark from it.

        A summary whose mark fails (another process summarised from ``expected`` first) is
        deleted again; a new summary supersedes every older active summary of the session.

        Returns:
            Whether the turns are summarised by this call (``False``: closed, or the mark failed).
        """
        summarizer = self.summarizer
        if summarizer is None:
            return False
        user = key[0]
        prev = self.latest_summary(*key)
        result = summarizer.summarize(
            prev.content if prev else None,
            [self._redact(t.content) for t in turns],
            roles=[t.role for t in turns],
        )
        if result.fallback_reason is not None:  # the model failed (an extractive summary is used)
            self.report_error("summary", *key, epoch, result.fallback_reason)
        if self.closed:
            return False
        if expected is not None and self._forgotten(key, turns):
            return False  # a turn was forgotten while the model ran: summarised again without it
        written: MemoryRecord | None = None
        if result.text.strip():
            covered = tuple(dict.fromkeys((*(prev.provenance if prev else ()), *(t.id for t in turns))))
            meta: dict[str, Any] = {"summary_of": key[1], "kept_originals": result.kept_originals}
            if result.fallback_reason:
                meta["fallback_reason"] = result.fallback_reason
            draft = MemoryRecord.create(
                user_id=user,
                content=result.text,
                id=str(uuid.uuid4()),  # one per attempt: a redundant one is deleted by its own id
                session_id=key[1],
                category="summary",
                importance=0.5,
                source="inferred",
                timestamp=max(t.timestamp for t in turns),
                provenance=covered,
                metadata=meta,
                supersedes=prev.id if prev else None,
                version=prev.version + 1 if prev else 1,
            )
            out = self.write([draft], epochs={user: epoch})[0]
            if expected is not None and self._forgotten(key, turns):  # forgotten during the write
                if out.action == "added" and out.record is not None:
                    with self.writer.locked([user]):
                        self.store.delete(user, [out.record.id])
                return False
            self._record([out])
            if out.action == "added" and out.record is not None:
                written = out.record
        if expected is not None and not self.store.mark_summarized(*key, turns[-1].seq, expected=expected, epoch=epoch):
            # Another process summarised these turns first: this summary is redundant, unless
            # the winner's was deduplicated into it (then it is the one stored for them).
            if written is not None and any(
                r.id != written.id and r.version >= written.version for r in self._summaries(*key)
            ):
                with self.writer.locked([user]):
                    self.store.delete(user, [written.id])
            return False
        if written is not None:
            self._supersede_older(key, written, epoch)
        return True

    def _supersede_older(self, key: _Key, new: MemoryRecord, epoch: int) -> None:
        """Mark the session's active summaries that rank below ``new`` superseded by it.

        Ranked by (version, created_at, id): the summary ``new`` was folded from, any left by a
        process killed between writing its summary and marking it, and a summary of the same
        turns whose mark also won (a store without conditional writes). One ranking above
        ``new`` is left alone: it is that race's other winner (then two summaries of the same
        turns stay active until the session's next summary supersedes both) or a loser about
        to delete its own.
        """

        def rank(r: MemoryRecord) -> tuple[int, datetime, str]:
            return (r.version, r.created_at, r.id)

        for old in self._summaries(*key):
            if rank(old) < rank(new):
                self.writer.mark_superseded(key[0], old.id, new, epoch=epoch)

    def _summaries(self, user_id: str, session_id: str) -> list[MemoryRecord]:
        found = self.store.list(user_id, filter=MemoryFilter(categories=("summary",), session_id=session_id))
        return [r for r in found if r.metadata.get("summary_of") == session_id]

    def latest_summary(self, user_id: str, session_id: str) -> MemoryRecord | None:
        """The session's newest active summary memory, read from the store (any process made it)."""
        mine = self._summaries(user_id, session_id)
        return max(mine, key=lambda r: (r.version, r.updated_at)) if mine else None

    def flush(self, timeout: float | None = None) -> bool:
        """Extract partial batches now and wait up to ``timeout`` s for every background job."""
        if self.extractor is not None:
            with self._lock:
                keys = list(dict.fromkeys([*self._windows, *self._extract_floor]))
            for key in keys:
                for batch in self._claim_or_report(key, whole=True):
                    self._submit_extract(batch)
        self.refiner.submit()
        return self.worker.join(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Stop the background worker (waiting up to ``timeout`` s) and drop the caches.

        Loses nothing: every turn is already durable in the store (queued refinements run first).
        """
        with self._lock:
            windows = list(self._windows.items())
        for (user_id, session_id), w in windows:
            with w.lock:
                self._settle(w, user_id, session_id)
        self.refiner.submit()
        self.worker.close(timeout=timeout)
        self.closed = True
        with self._lock:
            self._windows.clear()
            self._turn_vectors.clear()


def _same_turn(turn: Turn, stored: Turn) -> None:
    """Raise unless ``stored`` (the log's turn with ``turn``'s id) is ``turn`` said again.

    Raises:
        InvalidInputError: another session, role or text under the same turn id.
    """
    if (stored.session_id, stored.role, stored.content) != (turn.session_id, turn.role, turn.content):
        raise InvalidInputError(
            f"turn id {turn.id!r} names another turn of this user (session {stored.session_id!r}, role "
            f"{stored.role!r}); a retried add_turn must repeat the same session, role and text"
        )
