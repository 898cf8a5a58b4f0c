"""The facade's direct writes: scoring at the door, ``add_turn``'s turn, ``remember_many`` and ``put``.

:class:`DirectWrites` does the work behind :meth:`HybridMemory.add_turn`,
:meth:`~HybridMemory.remember_many` (drafts, scores the items without an importance, writes in
batches with a progress bar) and :meth:`~HybridMemory.put` (the keyed write) and :meth:`~HybridMemory.edit` (an operator's
correction of one memory, which a ``forget_user`` of any process wins over). The facade has
validated the ids and the call's own arguments; the items are validated here (by
:func:`hybrid_memory.write.drafts.draft`) before anything is written. Text reaches an LLM scorer,
an embedder or the store only redacted.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.embeddings import Embedder
from hybrid_memory.errors import InvalidInputError, NotFoundError
from hybrid_memory.observe.trace import Observer
from hybrid_memory.records import MemoryRecord, Turn, WriteOutcome
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.text.tokens import TokenCounter
from hybrid_memory.write.drafts import draft, fallback_note
from hybrid_memory.write.importance import HeuristicImportanceScorer, ImportanceScorer, ScoreBatch, forget_scores
from hybrid_memory.write.session import Sessions
from hybrid_memory.write.sources import turn_source
from hybrid_memory.write.writer import MemoryWriter, without_reviews

__all__ = ["DirectWrites"]


class DirectWrites:
    """Scoring and the direct writes of one :class:`~hybrid_memory.memory.HybridMemory`.

    Args:
        store: The memory's store.
        embedder: The memory's embedder.
        config: The memory's settings.
        writer: The memory's writer (redactor, per-user caches).
        sessions: The session state (hot scorer, batched writes).
        observer: Records scores in traces and metrics.
        counter: Counts a turn's tokens.
        scorer: Returns the memory's current importance scorer (it is settable on the facade).
        redact: Redacts PII from a text (per ``writer.redact_pii``).
        record: Adds outcomes to the per-user write log and the trace; returns them.
        unlog: Takes a memory whose text changed out of the write log (user, memory id, old texts).
        bind: Binds the embedder to the store (once).
        stored_time: The stored time of a write (the clock when ``None``; refuses the far future).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: HybridMemoryConfig,
        *,
        writer: MemoryWriter,
        sessions: Sessions,
        observer: Observer,
        counter: TokenCounter,
        scorer: Callable[[], ImportanceScorer],
        redact: Callable[[str], str],
        record: Callable[[list[WriteOutcome]], list[WriteOutcome]],
        unlog: Callable[[str, str, list[str]], None],
        bind: Callable[[], None],
        stored_time: Callable[..., datetime],
    ) -> None:
        self.store, self.embedder, self.config = store, embedder, config
        self.writer, self.sessions, self.observer, self.counter = writer, sessions, observer, counter
        self._scorer, self._redact, self._record, self._unlog = scorer, redact, record, unlog
        self._bind, self._stored_time = bind, stored_time

    def score(self, texts: list[str], *, roles: list[str] | None = None, hot: bool = False) -> ScoreBatch:
        """Importance of ``texts``; an LLM scorer gets them redacted.

        ``hot``: ``add_turn``'s path, where an LLM scorer is replaced by the heuristic (refined later).
        """
        scorer = self.sessions.hot_scorer() if hot else self._scorer()
        # The heuristic scorer runs in-process; any other scorer (an LLM) gets redacted text.
        if not isinstance(scorer, HeuristicImportanceScorer):
            texts = [self._redact(t) for t in texts]
        batch = scorer.score(texts, roles=roles)
        self.observer.scored(batch)
        return batch

    def add_turn(
        self,
        user_id: str,
        session_id: str,
        role: str,
        content: str,
        ts: datetime,
        *,
        long_term: bool | None,
        turn_id: str | None = None,
    ) -> Turn:
        """Score, redact and append one validated turn (see :meth:`HybridMemory.add_turn`).

        ``long_term=None``: source discipline (:func:`~hybrid_memory.write.sources.turn_source`), so only
        the user's own words (not agent scaffolding in a user message) may become memories.
        """
        if long_term is None:
            long_term = turn_source(role, content)[1]  # type: ignore[arg-type]
        batch = self.score([content], roles=[role], hot=True)
        scored = batch.items[0]
        key = scored.key_frame_reason is not None or scored.importance >= self.config.buffer.key_frame_importance
        red = self.writer.redactor.redact(content) if self.config.writer.redact_pii else None
        text = red.text if red is not None else content
        turn = Turn(
            id=turn_id or str(uuid.uuid4()),  # unique even across clear_session and process restarts
            user_id=user_id,
            session_id=session_id,
            role=role,  # type: ignore[arg-type]
            content=text,
            timestamp=ts,
            importance=scored.importance,
            key_frame=key,
            key_frame_reason=(scored.key_frame_reason or "importance") if key else None,
            tokens=max(1, self.counter.count(text)),
            scoring_note=fallback_note(batch),
        )
        pii = f"PII redacted ({red.summary()})" if red is not None and red.changed else None
        return self.sessions.append(turn, pii_note=pii, long_term=long_term, keyed=turn_id is not None)

    def _score_missing(
        self, items: Sequence[str | Mapping[str, Any]], drafts: list[MemoryRecord]
    ) -> tuple[list[MemoryRecord], dict[int, str]]:
        """Score drafts without an importance; also return a note per draft whose score fell back."""
        missing = [i for i, it in enumerate(items) if isinstance(it, str) or it.get("importance") is None]
        if not missing:
            return drafts, {}
        batch = self.score([drafts[i].content for i in missing])
        out = list(drafts)
        for i, s in zip(missing, batch.items, strict=True):
            out[i] = drafts[i].evolve(importance=s.importance)
        note = fallback_note(batch)
        return out, ({i: note for i in missing} if note else {})

    def remember_many(
        self, user_id: str, items: list[str | Mapping[str, Any]], *, progress: bool | None, batch_size: int
    ) -> list[WriteOutcome]:
        """Validate every item, score the missing importances, then write in batches (see the facade)."""
        drafts: list[MemoryRecord] = []
        for n, item in enumerate(items):
            try:
                drafts.append(draft(user_id, item, stored_time=self._stored_time))
            except InvalidInputError as exc:
                raise InvalidInputError(f"item {n}: {exc}") from exc
        drafts, notes = self._score_missing(items, drafts)
        if not drafts:
            return []
        self._bind()
        epochs = {user_id: self.store.user_epoch(user_id)}
        show = progress if progress is not None else (len(drafts) > 1000 and sys.stderr.isatty())
        bar: Any = None
        if show:
            from tqdm import tqdm

            bar = tqdm(total=len(drafts), unit="mem", desc="remember")
        outcomes: list[WriteOutcome] = []
        try:
            with self.writer.bulk(user_id, len(drafts)):  # a remote store: one copy serves every batch
                for i in range(0, len(drafts), batch_size):
                    chunk = drafts[i : i + batch_size]
                    written = self.sessions.write(chunk, epochs=epochs)
                    if notes:
                        written = [
                            o.model_copy(update={"notes": (*o.notes, notes[i + j])}) if (i + j) in notes else o
                            for j, o in enumerate(written)
                        ]
                    outcomes.extend(self._record(written))
                    if bar is not None:
                        bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return outcomes

    def put(self, record: MemoryRecord, *, score: bool) -> WriteOutcome:
        """Redact (and with ``score`` re-score) a validated record and store exactly it (see the facade)."""
        if self.config.writer.redact_pii:
            red = self.writer.redactor.redact(record.content)
            if red.changed:
                record = record.evolve(content=red.text)
        if score:  # after redaction: an LLM scorer never sees the raw text
            record = record.evolve(importance=self.score([record.content]).items[0].importance)
        self._bind()
        epoch = self.store.user_epoch(record.user_id)
        found = self.store.get(record.user_id, [record.id])
        for old in found:  # a changed turn memory: its old text leaves the log, as for an edit
            if old.content != record.content:
                self.sessions.detach(old, record.content)
                self._unlog(record.user_id, old.id, [old.content])
        self.store.upsert([record], self.embedder.embed_documents([record.content]), epochs={record.user_id: epoch})
        existed = bool(found)
        self.writer.invalidate(record.user_id)
        return self._record([WriteOutcome(action="updated" if existed else "added", record=record)])[0]

    def edit(self, user_id: str, memory_id: str, changes: Mapping[str, Any], *, now: datetime) -> MemoryRecord:
        """Apply ``changes`` to one stored memory in place (see :meth:`HybridMemory.edit`).

        Under the user's write lock (no write of this process lands between the read and the
        write), the user's forget epoch is read before the memory is and carried by the write, so
        a ``forget_user`` of any process in between refuses it instead of bringing the memory
        back. A changed content is redacted (when enabled) and re-embedded, and the old text is
        blanked in the user's trace steps. The turns a memory was written from (``add_turn``)
        leave their sessions' logs when its text changes, as for a forget: no window, extracted
        fact or summary of any process brings back the text as it was before the edit.

        Raises:
            NotFoundError: no such memory for this user (deleted, or its user forgotten, before the
                read), or another process deleted it after the read (it stays deleted).
            UserForgottenError: the user was forgotten (from any process) after the read; nothing was written.
            InvalidInputError: a change is invalid.
        """
        with self.writer.locked([user_id]):
            epoch = self.store.user_epoch(user_id)  # before the read: a forget from here on refuses the write
            found = self.store.get(user_id, [memory_id])
            if not found:
                raise NotFoundError(f"no memory {memory_id!r} for this user")
            old = found[0]
            fields = dict(changes)
            content = fields.get("content")
            if content is not None and content != old.content:  # what is stored already passed the door
                fields["content"] = self._redact(content)
            new = old.evolve(**fields, updated_at=max(now, old.updated_at))
            if new.content != old.content:  # a review's reason quotes the text as it was
                new = without_reviews(new)
            # In place (an update, never an upsert): a memory another process deletes after the
            # read above stays deleted (NotFoundError), the new content with it.
            if new.content != old.content:
                self._bind()
                vectors = self.embedder.embed_documents([new.content])
                # First: the unedited text leaves the log (and the next turn's context); a retry finds it unedited.
                self.sessions.detach(old, new.content)
                self.writer.drop_reviews_of(user_id, memory_id)  # their reasons quote the text as it was
                self.store.update([new], epochs={user_id: epoch}, vectors=vectors)
                self.observer.forget_memory(user_id, memory_id, [old.content])
                self._unlog(user_id, memory_id, [old.content])
                forget_scores(self._scorer(), [old.content])
            else:
                self.store.update([new], epochs={user_id: epoch})
            self.writer.invalidate(user_id)
        return new
