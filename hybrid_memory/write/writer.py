"""The long-term write path: gate, redact, embed, deduplicate, resolve conflicts and store.

:class:`MemoryWriter` applies the write policy to a batch of draft memories:

1. **Gate**: drafts below ``min_importance`` are rejected.
2. **PII redaction** (on by default): phones, e-mails, Chinese ID numbers and bank cards become
   typed placeholders *before* anything is embedded or stored (see :mod:`hybrid_memory.privacy`).
3. **Dedup**: a draft whose cosine to an active memory of the same user is at or above the
   embedder's calibrated ``dedup_threshold`` (0.92 for normalised models) creates no record; the
   existing memory gets ``updated_at``/``access_count`` bumped. A whole batch is compared with one
   matrix product against the user's active vectors (cached per user in
   :mod:`hybrid_memory.write.neighbours`), never one search per item.
   Near-identical texts whose numbers or negation differ ("我每天跑步5公里" / "…10公里") are
   *not* duplicates: they go to conflict resolution.
4. **Conflicts**: related memories (cosine at or above ``conflict_similarity``) are checked by a
   :class:`~hybrid_memory.write.conflict.ConflictJudge` (:mod:`hybrid_memory.write.conflict`):
   ``LLMConflictJudge`` when a chat model is configured, otherwise ``HeuristicConflictJudge``. A
   newer, not less important memory supersedes the old one (version chain: old
   ``status="superseded"``/``superseded_by``; new ``supersedes``/``version + 1``); otherwise the new one is demoted to ``temporary``. Conflicts
   and suspected conflicts are listed in :meth:`MemoryWriter.review_queue`.

Every draft gets a :class:`~hybrid_memory.records.WriteOutcome` (added / deduplicated /
superseded / demoted / rejected / updated) with the reason: nothing is dropped silently.

Example (``...`` stands for the old memory's id):
    >>> from datetime import datetime, timezone
    >>> from hybrid_memory.stores.local import LocalStore
    >>> from hybrid_memory.records import MemoryRecord
    >>> from hybrid_memory.testing import HashingEmbedder
    >>> w = MemoryWriter(LocalStore(":memory:"), HashingEmbedder())
    >>> day1, day5 = datetime(2024, 5, 1, tzinfo=timezone.utc), datetime(2024, 5, 5, tzinfo=timezone.utc)
    >>> two = MemoryRecord.create(user_id="u", content="I have 2 kids", importance=0.7, timestamp=day1)
    >>> [o.action for o in w.write([two, two])]
    ['added', 'deduplicated']
    >>> three = MemoryRecord.create(user_id="u", content="I have 3 kids", importance=0.7, timestamp=day5)
    >>> out = w.write([three])[0]
    >>> out.action, out.related_id == two.id, out.record.version, out.reason  # doctest: +ELLIPSIS
    ('superseded', True, 2, 'supersedes ... (number changed (2 → 3); judge: heuristic)')
    >>> w.write([MemoryRecord.create(user_id="u", content="call me at 13812345678")])[0].record.content
    'call me at [PHONE]'
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from hybrid_memory.config import WriterConfig
from hybrid_memory.embeddings import Embedder
from hybrid_memory.errors import EmbeddingDimensionError, InvalidInputError, NotFoundError, ScoringError
from hybrid_memory.records import MemoryRecord, WriteOutcome, memory_id, utcnow
from hybrid_memory.stores.base import MemoryStore, Vector, update_present
from hybrid_memory.text.privacy import PiiRedactor
from hybrid_memory.values import MemoryFilter
from hybrid_memory.write.conflict import ConflictJudge, ConflictReview, HeuristicConflictJudge
from hybrid_memory.write.neighbours import Neighbour, NeighbourCache, NeighbourSource, SnapshotSource, UserIndex

__all__ = ["LOCK_STRIPES", "REVIEW_KEY", "MemoryWriter", "conflict_similarity_for"]

#: Categories of new memories that are checked for conflicts (raw turns and summaries are not).
_CONFLICT_CATEGORIES = frozenset({"fact", "preference", "project", "temporary"})
#: Categories of stored memories a new memory can supersede (stale raw turns too).
_CONFLICT_OLD_CATEGORIES = _CONFLICT_CATEGORIES | {"turn"}
#: The metadata key under which a memory carries the conflict reviews it raised (see
#: :meth:`MemoryWriter.review_queue`): ``old_id``, ``action``, ``reason``, ``judge``, ``detected_at``.
REVIEW_KEY = "conflict_reviews"

#: How many striped locks serialise writes per user: users hashing to the same stripe wait for
#: each other, everyone else writes in parallel; the table never grows with the number of users.
LOCK_STRIPES = 64

#: A bulk write (:meth:`MemoryWriter.bulk`) copies a user's active vectors when they number at most
#: this many per item of the call (and at most :data:`BULK_SNAPSHOT_MAX`): copying a vector costs a
#: small fraction of the one neighbour query per item it saves.
BULK_SNAPSHOT_PER_ITEM = 10
#: The most active memories a bulk write copies (one request; above it, one query per item).
BULK_SNAPSHOT_MAX = 8_000
#: Below this many items a bulk write keeps the store's per-item neighbour queries.
BULK_MIN_ITEMS = 64
#: A bulk write holds back this many new or changed records of its user and sends them in one store
#: write (the store keeps ``write_concurrency`` batch requests in flight), not one write per batch.
BULK_FLUSH = 1024

_VERSION_NAMESPACE = uuid.UUID("3b0f6c52-8d7e-5a41-9c2b-6e1d4f7a8b35")


def conflict_similarity_for(dedup_threshold: float) -> float:
    """Cosine above which two memories are related enough to check for a conflict.

    Derived from the embedder's calibrated dedup threshold so it scales with the model's cosine
    range: 0.40 for a 0.92 model (USE), 0.74 for E5-small's compressed 0.965.

    Example:
        >>> round(conflict_similarity_for(0.92), 2), round(conflict_similarity_for(0.965), 3)
        (0.4, 0.737)
    """
    return dedup_threshold - 6.5 * (1.0 - dedup_threshold)


# --------------------------------------------------------------------------- the writer
@dataclass
class _Pending:
    """A draft on its way into the store."""

    index: int
    record: MemoryRecord
    vector: Vector
    note: list[str] = field(default_factory=list)


@dataclass
class _Held:
    """A bulk write's records of one user not sent to the store yet (newest version of each)."""

    new: dict[str, tuple[MemoryRecord, Vector]] = field(default_factory=dict)
    changed: dict[str, MemoryRecord] = field(default_factory=dict)
    epoch: int | None = None
    #: A write of these records that failed for another lock holder: the bulk call raises it at its end.
    error: Exception | None = None

    def __len__(self) -> int:
        return len(self.new) + len(self.changed)

    def get(self, memory_id: str) -> MemoryRecord | None:
        """The held version of ``memory_id`` (``None``: not held)."""
        got = self.new.get(memory_id)
        return got[0] if got is not None else self.changed.get(memory_id)


class MemoryWriter:
    """Applies the write policy and stores memories with their embeddings.

    Thread-safe: concurrent :meth:`write` calls for the same user (e.g. the background
    extractor and ``add_turn``) are serialised by a per-user lock (one of
    :data:`LOCK_STRIPES` striped locks, so the table stays bounded however many users a
    process serves); writes of different users run in parallel.

    Args:
        store: Where memories go.
        embedder: Embeds memory text; its ``dedup_threshold`` calibrates dedup.
        config: Write policy settings.
        clock: Returns "now" (UTC); injectable for tests and replays.
        judge: Conflict judge; default :class:`HeuristicConflictJudge`.
        redactor: PII redactor used when ``config.redact_pii`` (default :class:`PiiRedactor`).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: WriterConfig | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        judge: ConflictJudge | None = None,
        redactor: PiiRedactor | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.config = config if config is not None else WriterConfig()
        self.clock = clock
        self.judge: ConflictJudge = judge if judge is not None else HeuristicConflictJudge()
        # The number/negation rules of the dedup check; the default judge's instance when it is
        # one, so both share one cache of text features.
        self._hard = self.judge if isinstance(self.judge, HeuristicConflictJudge) else HeuristicConflictJudge()
        self.redactor = redactor if redactor is not None else PiiRedactor()
        self._stripes = tuple(threading.RLock() for _ in range(LOCK_STRIPES))
        # A store that finds neighbours in its own index serves dedup; otherwise a cache of vectors.
        self._source: NeighbourSource | None = store if isinstance(store, NeighbourSource) else None
        self._neighbours = NeighbourCache(store)
        # A remote store's bulk snapshots (see bulk()): user -> (nesting depth, copy limit); users
        # found to have more active memories than the limit (their snapshot is not taken).
        self._snapshot: SnapshotSource | None = store if isinstance(store, SnapshotSource) else None
        self._bulk: dict[str, tuple[int, int]] = {}
        self._bulk_big: set[str] = set()
        # Records a bulk write holds back (users with a copy only: the copy includes them).
        self._held: dict[str, _Held] = {}
        # Reviews raised by the write in progress, per user (only touched under that user's lock).
        self._pending_reviews: dict[str, list[ConflictReview]] = {}

    # ---------------------------------------------------------------- thresholds
    @property
    def dedup_threshold(self) -> float:
        """Cosine at or above which a draft duplicates an existing memory."""
        t = self.config.dedup_threshold
        return float(self.embedder.dedup_threshold) if t is None else float(t)

    @property
    def conflict_threshold(self) -> float:
        """Cosine at or above which an existing memory is checked for a conflict."""
        t = self.config.conflict_similarity
        return conflict_similarity_for(self.dedup_threshold) if t is None else float(t)

    # ---------------------------------------------------------------- locking
    @contextmanager
    def locked(self, user_ids: Iterable[str]) -> Iterator[None]:
        """Hold the write locks of ``user_ids`` (re-entrant; taken in one global order, so no deadlock).

        Callers that change a user's memories outside :meth:`write` (e.g. deleting one) hold it
        so that a concurrent write never reads a memory, then updates one that vanished in between.
        What a :meth:`bulk` write of these users holds back is written to the store first; if
        that write fails, the bulk call raises the error when it ends (the caller here, which did
        not make those records, goes on).

        Example:
            >>> from hybrid_memory.stores.local import LocalStore
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> w = MemoryWriter(LocalStore(":memory:"), HashingEmbedder(dim=32))
            >>> with w.locked(["alice", "bob"]):
            ...     pass
        """
        users = list(user_ids)
        with self._locked(users):
            for user in users:
                try:
                    self._flush(user)
                except Exception as exc:  # the bulk call that held them raises it (see bulk())
                    held = self._held.get(user)
                    if held is not None and held.error is None:
                        held.error = exc
            yield

    @contextmanager
    def _locked(self, user_ids: Iterable[str]) -> Iterator[None]:
        """The write locks of ``user_ids`` without writing what a bulk write holds back."""
        stripes = sorted({zlib.crc32(u.encode("utf-8")) % LOCK_STRIPES for u in user_ids})
        with ExitStack() as stack:
            for i in stripes:
                stack.enter_context(self._stripes[i])
            yield

    def _flush(self, user: str) -> None:
        """Write what a bulk write of ``user`` holds back: new records first, then changed ones."""
        held = self._held.get(user)
        if not held:
            return
        new, changed = held.new, held.changed
        held.new, held.changed = {}, {}  # emptied in place: callers may hold this object
        epochs = None if held.epoch is None else {user: held.epoch}
        if new:
            self.store.upsert([r for r, _ in new.values()], np.stack([v for _, v in new.values()]), epochs=epochs)
        if changed and self._update_present(list(changed.values()), epochs):
            # Held bumps of memories another process deleted meanwhile were left out: the outcomes
            # are already returned, so that write counts as landed before the delete.
            self._neighbours.drop(user)

    @contextmanager
    def bulk(self, user_id: str, items: int) -> Iterator[None]:
        """Within this block, check ``user_id``'s writes against a copy of the user's active vectors.

        For a store whose neighbour lookups are round trips (a :class:`SnapshotSource`, e.g.
        ``WeaviateStore``: one query per item), a call writing ``items`` drafts in several
        batches (``remember_many``) copies the user's active vectors once, in one request, when
        there are at most ``BULK_SNAPSHOT_PER_ITEM * items`` of them (and ``BULK_SNAPSHOT_MAX``);
        the writer keeps the copy current with its own writes and checks every batch with one
        matrix product. It also holds back the user's new and changed records and writes them
        ``BULK_FLUSH`` at a time (and when the block ends, or when another caller takes the
        user's lock), so the store receives large writes with several batch requests in flight;
        its dedup and conflict reads see the held records. The copy is dropped when the block
        ends. Memories that *another process* writes for the same user while the block runs are
        not seen by its dedup and conflict checks (the store's own lookups see them from the
        next write on), and other readers see the held records only once they are written. A
        no-op for other stores, below ``BULK_MIN_ITEMS`` items, and for users with more active
        memories.

        Example:
            >>> from hybrid_memory.stores.local import LocalStore
            >>> from hybrid_memory.testing import HashingEmbedder
            >>> w = MemoryWriter(LocalStore(":memory:"), HashingEmbedder(dim=32))
            >>> with w.bulk("alice", 1000):
            ...     pass
        """
        if self._snapshot is None or self._source is None or items < BULK_MIN_ITEMS:
            yield
            return
        limit = min(BULK_SNAPSHOT_MAX, BULK_SNAPSHOT_PER_ITEM * items)
        with self.locked([user_id]):
            depth, prev = self._bulk.get(user_id, (0, limit))
            self._bulk[user_id] = (depth + 1, max(prev, limit))
        try:
            yield
        finally:
            with self._locked([user_id]):
                depth, prev = self._bulk.pop(user_id)
                if depth > 1:
                    self._bulk[user_id] = (depth - 1, prev)
                else:
                    self._bulk_big.discard(user_id)
                    self._neighbours.drop(user_id)
                    try:
                        self._flush(user_id)  # what failed is dead-lettered by the store and raised
                        held = self._held.get(user_id)
                        if held is not None and held.error is not None:
                            raise held.error  # a write of held records failed for another lock holder
                    finally:
                        self._held.pop(user_id, None)

    # ---------------------------------------------------------------- review queue & caches
    def review_queue(self, user_id: str) -> list[ConflictReview]:
        """Detected and suspected conflicts of ``user_id``, oldest first (at most ``review_queue_size``, newest kept).

        Read from the store: each review is written with the memory that raised it (in its
        ``metadata[REVIEW_KEY]``, in the same upsert), so every process sees the same queue, a
        restart loses nothing, and forgetting the memory or the user forgets its reviews. The old
        memory's text is read at call time, never copied (``""`` once it is deleted).
        """
        entries: list[tuple[MemoryRecord, dict[str, str]]] = []
        for r in self._reviewed(user_id):
            entries.extend((r, e) for e in r.metadata[REVIEW_KEY])
        entries.sort(key=lambda re_: (re_[1]["detected_at"], re_[0].id))
        size = self.config.review_queue_size
        entries = entries[-size:] if size else []
        olds = {r.id: r.content for r in self.store.get(user_id, sorted({e["old_id"] for _, e in entries}))}
        return [
            ConflictReview(
                user_id,
                r.id,
                e["old_id"],
                r.content,
                olds.get(e["old_id"], ""),
                e["action"],  # type: ignore[arg-type]
                e["reason"],
                e["judge"],
                datetime.fromisoformat(e["detected_at"]),
            )
            for r, e in entries
        ]

    def clear_review(self, user_id: str) -> int:
        """Empty ``user_id``'s review queue (in the store); return how many entries it held.

        Raises:
            UserForgottenError: the user was forgotten (from any process) while this ran.
        """
        with self.locked([user_id]):
            epoch = self.store.user_epoch(user_id)  # before the read: a forget from here on refuses the update
            marked = self._reviewed(user_id)
            gone = update_present(self.store, [without_reviews(r) for r in marked], epochs={user_id: epoch})
            return sum(len(r.metadata[REVIEW_KEY]) for r in marked if (user_id, r.id) not in gone)

    def _reviewed(self, user_id: str) -> list[MemoryRecord]:
        """Every stored memory of ``user_id`` carrying review entries (a scan: an operator's call)."""
        every = MemoryFilter(statuses=("active", "superseded", "archived"))
        return [r for r in self.store.list(user_id, filter=every) if r.metadata.get(REVIEW_KEY)]

    def drop_reviews_of(self, user_id: str, memory_id: str) -> None:
        """Drop every review that names ``memory_id`` as its old memory (it is forgotten or rewritten).

        A review's reason quotes the old memory's details ("number changed (4711 → 9999)"), so
        it leaves with them. A scan of the user's memories, as :meth:`review_queue` does (about
        130 ms per 10,000 memories on a ``LocalStore`` file): ``forget`` and ``edit`` call it, a
        keyed ``put`` does not.
        """
        with self.locked([user_id]):
            pending = self._pending_reviews.get(user_id)
            if pending:
                self._pending_reviews[user_id] = [r for r in pending if memory_id not in (r.old_id, r.new_id)]
            changed = []
            for r in self._reviewed(user_id):
                entries = r.metadata[REVIEW_KEY]
                left = [e for e in entries if e.get("old_id") != memory_id]
                if len(left) != len(entries):
                    changed.append(r.evolve(metadata={**r.metadata, REVIEW_KEY: left}) if left else without_reviews(r))
            if changed:
                update_present(self.store, changed)

    def invalidate(self, user_id: str | None = None) -> None:
        """Drop the cached vectors of ``user_id`` (all users when ``None``); rebuilt on demand."""
        if user_id is None:
            self._neighbours.drop(None)
            return
        with self.locked([user_id]):
            self._neighbours.drop(user_id)

    def forget_user(self, user_id: str) -> None:
        """Drop every trace of ``user_id`` held by the writer (its cached vectors, records a bulk write holds back)."""
        with self._locked([user_id]):
            self._neighbours.drop(user_id)
            self._pending_reviews.pop(user_id, None)
            held = self._held.get(user_id)
            if held is not None:  # never written: the user is being forgotten
                held.new, held.changed = {}, {}

    def mark_superseded(
        self, user_id: str, old_id: str, new: MemoryRecord, *, epoch: int | None = None
    ) -> MemoryRecord | None:
        """Mark the active memory ``old_id`` as superseded by ``new`` (already stored).

        Used for memories that replace their predecessor by construction, such as the next
        incremental session summary. Returns the updated old record, or ``None`` when it is
        missing or not active. ``epoch``: the user's forget epoch the caller read (see :meth:`write`).
        """
        with self.locked([user_id]):
            found = self.store.get(user_id, [old_id])
            if not found or found[0].status != "active":
                return None
            old = found[0]
            gone = old.evolve(status="superseded", superseded_by=new.id, updated_at=max(self.clock(), old.updated_at))
            try:
                self.store.update([gone], epochs=None if epoch is None else {user_id: epoch})
            except NotFoundError:  # deleted meanwhile by another process: missing, and it stays deleted
                return None
            idx = self._neighbours.peek(user_id)
            if idx is not None:
                idx.remove([old_id])
            return gone

    def _queue(self, review: ConflictReview) -> None:
        """Hold ``review`` until :meth:`_write` stores it with its memory (under the user's lock)."""
        if self.config.review_queue_size == 0:
            return
        self._pending_reviews.setdefault(review.user_id, []).append(review)

    def _attach_reviews(self, users: Iterable[str], to_upsert: list[_Pending]) -> None:
        """Put the reviews this write raised into the metadata of the memories that raised them."""
        raised: dict[str, list[dict[str, str]]] = {}
        for user in users:
            for rv in self._pending_reviews.pop(user, ()):
                raised.setdefault(rv.new_id, []).append(
                    {
                        "old_id": rv.old_id,
                        "action": rv.action,
                        "reason": rv.reason,
                        "judge": rv.judge,
                        "detected_at": rv.detected_at.isoformat(),
                    }
                )
        for p in to_upsert:
            mine = raised.get(p.record.id)
            if mine:
                kept = [*p.record.metadata.get(REVIEW_KEY, ()), *mine][-self.config.review_queue_size :]
                p.record = p.record.evolve(metadata={**p.record.metadata, REVIEW_KEY: kept})

    # ---------------------------------------------------------------- writing
    def write(
        self,
        drafts: Sequence[MemoryRecord],
        *,
        vectors: Vector | None = None,
        epochs: Mapping[str, int] | None = None,
    ) -> list[WriteOutcome]:
        """Write ``drafts`` (any users) and return one outcome per draft, in order.

        Args:
            drafts: Validated draft records.
            vectors: Optional precomputed embeddings, one row per draft (unit-normalised here).
                Drafts whose text is changed by PII redaction are re-embedded.
            epochs: The forget epochs (``user -> epoch``) the caller read when it accepted the
                data; the store refuses the write if one changed since.

        Raises:
            InvalidInputError: ``vectors`` does not have one row per draft.
            UserForgottenError: a user in ``epochs`` was forgotten since (nothing of that
                batch is written).

        A memory this write reads and then updates may be deleted by another process in
        between (``forget(memory_id)``): it is treated as absent, never written back, and the
        drafts merged into it are planned again once without it.
        """
        if vectors is not None:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(drafts):
                raise InvalidInputError(f"vectors must have one row per draft; got shape {vectors.shape}")
        users = {d.user_id for d in drafts}
        with self._locked(users):
            try:
                return self._write(list(drafts), vectors, epochs)
            finally:  # a failed write leaves no review behind for the next one
                for user in users:
                    self._pending_reviews.pop(user, None)

    async def awrite(
        self,
        drafts: Sequence[MemoryRecord],
        *,
        vectors: Vector | None = None,
        epochs: Mapping[str, int] | None = None,
    ) -> list[WriteOutcome]:
        """Async twin of :meth:`write` (runs in a worker thread)."""
        return await asyncio.to_thread(lambda: self.write(drafts, vectors=vectors, epochs=epochs))

    def _redact(self, d: MemoryRecord) -> tuple[MemoryRecord, str | None]:
        if not self.config.redact_pii:
            return d, None
        red = self.redactor.redact(d.content)
        ctx = self.redactor.redact(d.context) if d.context else None
        if not red.changed and (ctx is None or not ctx.changed):
            return d, None
        new_id = memory_id(d.user_id, red.text) if d.id == memory_id(d.user_id, d.content) else d.id
        summary = red.summary() if red.changed else ""
        if ctx is not None and ctx.changed:
            summary = f"{summary}; context: {ctx.summary()}" if summary else f"context: {ctx.summary()}"
        return d.evolve(content=red.text, id=new_id, context=ctx.text if ctx else ""), f"PII redacted ({summary})"

    def _check_dimensions(self, vec: dict[int, Vector]) -> None:
        """Every vector of a write has the store's dimension (checked before anything is written).

        Raises:
            EmbeddingDimensionError: an embedder changed its output size, or precomputed vectors
                and the embedder disagree, or the store holds vectors of another dimension.
        """
        expected = self.store.dimension
        for v in vec.values():
            got = int(v.shape[-1]) if v.ndim else 0
            if expected is None:
                expected = got
            elif got != expected:
                raise EmbeddingDimensionError(
                    expected,
                    got,
                    hint="the embedder's output size changed or does not match this store; nothing was written",
                )

    def _write(
        self,
        drafts: list[MemoryRecord],
        vectors: Vector | None,
        epochs: Mapping[str, int] | None,
        *,
        replan: bool = True,
    ) -> list[WriteOutcome]:
        """Plan and store ``drafts`` (see :meth:`write`); ``replan``: see :meth:`_replan_vanished`."""
        n = len(drafts)
        outcomes: list[WriteOutcome | None] = [None] * n
        notes: list[str | None] = [None] * n
        reembed: set[int] = set()
        todo: list[int] = []
        for i, d in enumerate(drafts):
            if d.importance < self.config.min_importance:
                outcomes[i] = WriteOutcome(
                    action="rejected",
                    record=d,
                    reason=f"importance {d.importance:.2f} below min_importance {self.config.min_importance:.2f}",
                )
                continue
            red, note = self._redact(d)
            if note is not None:
                drafts[i], notes[i] = red, note
                reembed.add(i)
            todo.append(i)

        # Exact duplicates (same deterministic id) inside the batch.
        first_of: dict[tuple[str, str], int] = {}
        fresh: list[int] = []
        for i in todo:
            key = (drafts[i].user_id, drafts[i].id)
            if key in first_of:
                outcomes[i] = WriteOutcome(
                    action="deduplicated",
                    record=drafts[first_of[key]],
                    reason="same content earlier in this batch",
                    related_id=drafts[first_of[key]].id,
                )
                continue
            first_of[key] = i
            fresh.append(i)
        if not fresh:
            return [o for o in outcomes if o is not None]

        now = self.clock()
        by_user: dict[str, list[int]] = {}
        for i in fresh:
            by_user.setdefault(drafts[i].user_id, []).append(i)

        # Vectors for every fresh draft: one embedding call for those without a usable vector.
        need = [i for i in fresh if vectors is None or i in reembed]
        vec: dict[int, Vector] = {}
        if need:
            emb = self.embedder.embed_documents([drafts[i].content for i in need])
            vec.update(zip(need, emb, strict=True))
        if vectors is not None:
            for i in fresh:
                if i not in vec:
                    v = vectors[i]
                    norm = float(np.linalg.norm(v))
                    if not np.isfinite(norm) or norm == 0:
                        raise InvalidInputError(f"vector {i} is zero or not finite")
                    vec[i] = (v / norm).astype(np.float32)
        self._check_dimensions(vec)

        to_upsert: list[_Pending] = []
        to_update: dict[tuple[str, str], MemoryRecord] = {}
        removed: dict[str, list[str]] = {}
        for user, idxs in by_user.items():
            epoch = None if epochs is None else epochs.get(user)
            self._write_user(user, idxs, drafts, vec, notes, outcomes, now, to_upsert, to_update, removed, epoch)
        self._attach_reviews(by_user, to_upsert)

        held = {u: self._held[u] for u in by_user if u in self._held}
        if held:
            to_upsert_now, to_update_now = self._hold(held, to_upsert, to_update, epochs)
        else:
            to_upsert_now, to_update_now = to_upsert, list(to_update.values())
        if to_upsert_now:
            recs, vecs = [p.record for p in to_upsert_now], np.stack([p.vector for p in to_upsert_now])
            self.store.upsert(recs, vecs, epochs=epochs)
        gone = self._update_present(to_update_now, epochs) if to_update_now else set()
        for user, h in held.items():
            if len(h) >= BULK_FLUSH:
                self._flush(user)
        for user in by_user:
            idx = self._neighbours.peek(user)
            if idx is None:
                continue
            idx.remove(removed.get(user, []))
            mine = [p for p in to_upsert if p.record.user_id == user and p.record.status == "active"]
            if mine:
                idx.add(
                    [p.record.id for p in mine], np.stack([p.vector for p in mine]), [p.record.category for p in mine]
                )
                self._neighbours.resized(user)
        # Outcomes of added/superseded/demoted drafts carry the final stored record.
        final = {p.record.id: p.record for p in to_upsert}
        out: list[WriteOutcome] = []
        for o in outcomes:
            assert o is not None
            if o.record is not None and o.action in ("added", "superseded", "demoted") and o.record.id in final:
                o = o.model_copy(update={"record": final[o.record.id]})
            out.append(o)
        if gone:
            for user in {u for u, _ in gone}:
                self._neighbours.drop(user)  # the cached index still holds what another process deleted
            if replan:
                self._replan_vanished(gone, drafts, vec, notes, out, epochs)
        return out

    def _update_present(self, records: list[MemoryRecord], epochs: Mapping[str, int] | None) -> set[tuple[str, str]]:
        """Update ``records``, leaving out those another process deleted meanwhile; return their ``(user, id)``.

        A memory this write read and then updates (a dedup bump, a superseded predecessor) may be
        deleted by another process in between (``forget(memory_id)``): it stays deleted
        (:func:`~hybrid_memory.stores.base.update_present`).
        """
        return update_present(self.store, records, epochs=epochs)

    def _replan_vanished(
        self,
        gone: set[tuple[str, str]],
        drafts: list[MemoryRecord],
        vec: Mapping[int, Vector],
        notes: list[str | None],
        out: list[WriteOutcome],
        epochs: Mapping[str, int] | None,
    ) -> None:
        """Write again, once, the drafts that were merged into a memory deleted meanwhile (in place in ``out``).

        A draft deduplicated into (or re-activating) a vanished memory was not stored at all:
        it is planned again as if that memory had never been there, so the user's new words
        land. A draft that superseded a vanished memory is already stored and stays as it is
        (its ``supersedes`` names the memory the forget deleted after the decision).
        """
        redo = [
            j
            for j, o in enumerate(out)
            if o.action in ("deduplicated", "updated")
            and o.related_id is not None
            and (drafts[j].user_id, o.related_id) in gone
            and j in vec
        ]
        if not redo:
            return
        again = self._write([drafts[j] for j in redo], np.stack([vec[j] for j in redo]), epochs, replan=False)
        for j, o in zip(redo, again, strict=True):
            out[j] = o.model_copy(update={"reason": _join(o.reason, notes[j])}) if notes[j] else o

    def _hold(
        self,
        held: Mapping[str, _Held],
        to_upsert: list[_Pending],
        to_update: Mapping[tuple[str, str], MemoryRecord],
        epochs: Mapping[str, int] | None,
    ) -> tuple[list[_Pending], list[MemoryRecord]]:
        """Keep the bulk users' new and changed records back; return what is written now (the other users')."""
        for user, mine in held.items():
            epoch = None if epochs is None else epochs.get(user)
            if mine and mine.epoch != epoch:  # written under another epoch: never mix them in one write
                self._flush(user)
            mine.epoch = epoch
        now_up: list[_Pending] = []
        for p in to_upsert:
            h = held.get(p.record.user_id)
            if h is None:
                now_up.append(p)
            else:
                h.changed.pop(p.record.id, None)
                h.new[p.record.id] = (p.record, p.vector)
        now_update: list[MemoryRecord] = []
        for (user, mid), r in to_update.items():
            h = held.get(user)
            if h is None:
                now_update.append(r)
            elif mid in h.new:
                h.new[mid] = (r, h.new[mid][1])
            else:
                h.changed[mid] = r
        return now_up, now_update

    def _write_user(
        self,
        user: str,
        idxs: list[int],
        drafts: list[MemoryRecord],
        vec: dict[int, Vector],
        notes: list[str | None],
        outcomes: list[WriteOutcome | None],
        now: datetime,
        to_upsert: list[_Pending],
        to_update: dict[tuple[str, str], MemoryRecord],
        removed: dict[str, list[str]],
        epoch: int | None,
    ) -> None:
        dim = int(vec[idxs[0]].shape[0])
        dup_t, rel_t = self.dedup_threshold, self.conflict_threshold
        # Existing memories worth a look: duplicates always, related ones only for conflict checks.
        look_t = rel_t if self.config.detect_conflicts else dup_t
        top = max(8, self.config.max_conflict_candidates * 2)
        records = _Records(self.store, user, to_update, self._held.get(user))
        ids = [drafts[i].id for i in idxs]
        # In a bulk write to a remote store the neighbours come from the local copy: the records
        # the checks read go in the same request as the drafts' own ids (one round trip, not two).
        bulk = self._bulk_index(user, dim) if self._source is not None else None
        early: dict[int, list[Neighbour]] = {}
        if bulk is not None:
            rows = bulk.neighbours(np.stack([vec[i] for i in idxs]), look_t, top)
            early = dict(zip(idxs, rows, strict=True))
            records.prefetch([*ids, *self._wanted(rows, [drafts[i] for i in idxs], dup_t)])
            stored = {m: r for m in ids if (r := records.fetched(m)) is not None}
        else:
            stored = {r.id: r for r in self.store.get(user, ids)}
        # Same deterministic id already stored: bump an active one; re-version a superseded one.
        rest: list[int] = []
        for i in idxs:
            old = stored.get(drafts[i].id)
            if old is None or old.status == "deleted":
                rest.append(i)
            elif old.status == "active":
                bumped = self._bump(to_update.get((user, old.id), old), drafts[i], now)
                to_update[(user, old.id)] = bumped
                outcomes[i] = WriteOutcome(
                    action="deduplicated", record=bumped, reason=_join("already stored", notes[i]), related_id=old.id
                )
            elif old.status == "archived":
                revived = self._bump(old, drafts[i], now).evolve(status="active")
                to_update[(user, old.id)] = revived
                outcomes[i] = WriteOutcome(
                    action="updated",
                    record=revived,
                    reason=_join("re-activated an archived memory stated again", notes[i]),
                    related_id=old.id,
                )
                removed.setdefault(user, [])  # the index is refreshed by count on next use
                self._neighbours.drop(user)
            else:  # superseded: the user states an old value again -> a new version with a fresh id
                fresh_id = str(uuid.uuid5(_VERSION_NAMESPACE, f"{old.id}\x1f{drafts[i].created_at.isoformat()}"))
                drafts[i] = drafts[i].evolve(id=fresh_id)
                rest.append(i)
        if not rest:
            return
        mat = np.stack([vec[i] for i in rest])
        sim_in = mat @ mat.T
        near = [early[i] for i in rest] if early else self._near(user, mat, dim, epoch, look_t, top)
        records.prefetch(self._wanted(near, [drafts[i] for i in rest], dup_t))
        accepted: dict[int, _Pending] = {}  # row in rest -> pending
        in_batch = sim_in >= look_t

        for a, i in enumerate(rest):
            d = drafts[i]
            # (cosine, id, category, pending draft of this batch or None), most similar first
            cands: list[tuple[float, str, str, _Pending | None]] = [(sim, mid, cat, None) for mid, sim, cat in near[a]]
            for b in np.flatnonzero(in_batch[a, :a]).tolist():
                p = accepted.get(b)
                if p is not None and p.record.status == "active":
                    cands.append((float(sim_in[a, b]), p.record.id, p.record.category, p))
            if not cands:
                pending = _Pending(i, d, vec[i])
                to_upsert.append(pending)
                accepted[a] = pending
                outcomes[i] = WriteOutcome(action="added", record=d, reason=notes[i])
                continue
            cands.sort(key=lambda c: -c[0])

            # 1. duplicate (unless the numbers or the negation differ); summaries only match summaries
            is_summary = d.category == "summary"
            dup = next(
                (
                    c
                    for c in records.resolve(x for x in cands if x[0] >= dup_t and (x[2] == "summary") == is_summary)
                    if (c[1].category == "summary") == is_summary
                    and self._hard.hard_conflict(d.content, c[1].content) is None
                ),
                None,
            )
            if dup is not None:
                sim, old, pend = dup
                if pend is not None:
                    pend.record = self._bump(pend.record, d, now, count=False)
                    rec = pend.record
                else:
                    rec = self._bump(to_update.get((user, old.id), old), d, now)
                    to_update[(user, old.id)] = rec
                outcomes[i] = WriteOutcome(
                    action="deduplicated",
                    record=rec,
                    reason=_join(f"cosine {sim:.3f} ≥ {dup_t:.2f} to an active memory", notes[i]),
                    related_id=old.id,
                )
                continue

            # 2. conflicts with related memories
            pending = _Pending(i, d, vec[i])
            checkable = (
                list(
                    itertools.islice(
                        (
                            c
                            for c in records.resolve(x for x in cands if x[2] in _CONFLICT_OLD_CATEGORIES)
                            if c[1].category in _CONFLICT_OLD_CATEGORIES
                        ),
                        self.config.max_conflict_candidates,
                    )
                )
                if self.config.detect_conflicts and d.category in _CONFLICT_CATEGORIES
                else []
            )
            verdicts = self.judge.judge(d.content, [c[1].content for c in checkable]) if checkable else []
            if len(verdicts) != len(checkable):
                raise ScoringError(f"judge {self.judge.name!r} returned {len(verdicts)} verdicts for {len(checkable)}")
            contra = [(c, v) for c, v in zip(checkable, verdicts, strict=True) if v.relation == "contradicts"]
            # The main conflict is with a memory proper; raw turns that say the same old thing follow it.
            conflict = next((cv for cv in contra if cv[0][1].category != "turn"), contra[0] if contra else None)
            for c, v in zip(checkable, verdicts, strict=True):
                if v.relation == "suspected":
                    self._queue(
                        ConflictReview(
                            user, d.id, c[1].id, d.content, c[1].content, "suspected", v.reason, v.judge, now
                        )
                    )
            if conflict is None:
                to_upsert.append(pending)
                accepted[a] = pending
                outcomes[i] = WriteOutcome(action="added", record=d, reason=notes[i])
                continue
            (sim, old, pend), verdict = conflict
            newer = d.created_at >= old.created_at
            not_less = d.importance >= old.importance - self.config.supersede_tolerance
            if newer and not_less:
                pending.record = d.evolve(supersedes=old.id, version=old.version + 1)
                also = [(c, v) for c, v in contra if c[1].id != old.id and c[1].created_at <= d.created_at]
                for (_, prev, prev_pend), v in [((sim, old, pend), verdict), *also]:
                    gone = prev.evolve(status="superseded", superseded_by=d.id, updated_at=max(now, prev.updated_at))
                    if prev_pend is not None:
                        prev_pend.record = gone
                    else:
                        to_update[(user, prev.id)] = gone
                        removed.setdefault(user, []).append(prev.id)
                    self._queue(
                        ConflictReview(
                            user, d.id, prev.id, d.content, prev.content, "superseded", v.reason, v.judge, now
                        )
                    )
                to_upsert.append(pending)
                accepted[a] = pending
                reason = f"supersedes {old.id} ({verdict.reason}; judge: {verdict.judge})"
                if also:
                    reason += f" and {len(also)} older related memory/turn(s)"
                outcomes[i] = WriteOutcome(
                    action="superseded", record=pending.record, reason=_join(reason, notes[i]), related_id=old.id
                )
            else:
                why = "older than" if not newer else "less important than"
                pending.record = d.evolve(category="temporary")
                to_upsert.append(pending)
                accepted[a] = pending
                reason = f"conflicts with {old.id} ({verdict.reason}) but is {why} it; kept as temporary"
                outcomes[i] = WriteOutcome(
                    action="demoted", record=pending.record, reason=_join(reason, notes[i]), related_id=old.id
                )
                self._queue(
                    ConflictReview(
                        user, d.id, old.id, d.content, old.content, "demoted", verdict.reason, verdict.judge, now
                    )
                )

    def _near(
        self, user: str, mat: Vector, dim: int, epoch: int | None, threshold: float, top: int
    ) -> list[list[Neighbour]]:
        """Each draft's nearest active memories: from the store's own index, else the writer's cache."""
        if self._source is not None:
            return self._source.neighbours(user, mat, threshold=threshold, top=top)
        return self._neighbours.load(user, dim, epoch).neighbours(mat, threshold, top)

    def _bulk_index(self, user: str, dim: int) -> UserIndex | None:
        """The bulk copy of ``user``'s active vectors (taken on first use); ``None``: not in a bulk write."""
        if self._snapshot is None or user not in self._bulk or user in self._bulk_big:
            return None
        idx = self._neighbours.peek(user)
        if idx is not None and idx.dim == dim:
            self._held.setdefault(user, _Held())
            return idx
        self._flush(user)  # the copy is taken from the store: it must see what was held back
        got = self._snapshot.active_vectors(user, limit=self._bulk[user][1])
        if got is None:
            self._bulk_big.add(user)
            self._held.pop(user, None)
            return None
        ids, cats, m = got
        if len(ids) and int(m.shape[1]) != dim:
            raise EmbeddingDimensionError(int(m.shape[1]), dim)
        idx = UserIndex(ids, m.astype(np.float32, copy=False).reshape(len(ids), dim), dim, cats)
        self._neighbours.put(user, idx)
        self._held.setdefault(user, _Held())
        return idx

    def _wanted(self, near: list[list[Neighbour]], drafts: list[MemoryRecord], dup_t: float) -> list[str]:
        """Ids of the stored memories the checks will read: dedup range and the first conflict candidates."""
        out: list[str] = []
        k_max = self.config.max_conflict_candidates
        for found, d in zip(near, drafts, strict=True):
            is_summary = d.category == "summary"
            check = self.config.detect_conflicts and d.category in _CONFLICT_CATEGORIES
            k = 0
            for mid, sim, cat in found:
                if sim >= dup_t and (cat == "summary") == is_summary:
                    out.append(mid)
                if check and k < k_max and cat in _CONFLICT_OLD_CATEGORIES:
                    out.append(mid)
                    k += 1
        return out

    @staticmethod
    def _bump(old: MemoryRecord, new: MemoryRecord, now: datetime, *, count: bool = True) -> MemoryRecord:
        prov = tuple(dict.fromkeys((*old.provenance, *new.provenance)))
        return old.evolve(
            updated_at=max(now, old.updated_at, new.created_at),
            access_count=old.access_count + (1 if count else 0),
            importance=max(old.importance, new.importance),
            provenance=prov,
        )


class _Records:
    """The stored records a write of one user reads, fetched in batches and only when needed.

    Records changed earlier in the same write (``to_update``) win over those a bulk write holds
    back (``held``), which win over the stored ones.
    """

    def __init__(
        self,
        store: MemoryStore,
        user: str,
        to_update: dict[tuple[str, str], MemoryRecord],
        held: _Held | None = None,
    ) -> None:
        self._store = store
        self._user = user
        self._to_update = to_update
        self._held = held
        self._fetched: dict[str, MemoryRecord | None] = {}

    def prefetch(self, ids: Iterable[str]) -> None:
        """Read these ids from the store (500 per request), skipping those already read."""
        held = self._held
        todo = [m for m in dict.fromkeys(ids) if m not in self._fetched]
        if held:
            for m in todo:
                if (r := held.get(m)) is not None:
                    self._fetched[m] = r
            todo = [m for m in todo if m not in self._fetched]
        for k in range(0, len(todo), 500):
            chunk = todo[k : k + 500]
            got = {r.id: r for r in self._store.get(self._user, chunk)}
            for m in chunk:
                self._fetched[m] = got.get(m)

    def fetched(self, memory_id: str) -> MemoryRecord | None:
        """The stored record of ``memory_id`` as read by :meth:`prefetch` (any status; ``None``: missing or not read)."""
        return self._fetched.get(memory_id)

    def active(self, memory_id: str) -> MemoryRecord | None:
        """The current record of ``memory_id`` if it is active (``None``: gone or no longer active)."""
        r = self._to_update.get((self._user, memory_id))
        if r is None:
            if memory_id not in self._fetched:
                self.prefetch([memory_id])
            r = self._fetched[memory_id]
        return r if r is not None and r.status == "active" else None

    def resolve(
        self, cands: Iterable[tuple[float, str, str, _Pending | None]]
    ) -> Iterator[tuple[float, MemoryRecord, _Pending | None]]:
        """``(cosine, record, pending)`` of the candidates that are active, in order (lazily)."""
        for sim, mid, _cat, pend in cands:
            if pend is not None:
                yield sim, pend.record, pend
                continue
            r = self.active(mid)
            if r is not None:
                yield sim, r, None


def without_reviews(r: MemoryRecord) -> MemoryRecord:
    """``r`` without the conflict reviews it carries (``metadata[REVIEW_KEY]``)."""
    return r.evolve(metadata={k: v for k, v in r.metadata.items() if k != REVIEW_KEY})


def _join(a: str | None, b: str | None) -> str | None:
    parts = [p for p in (a, b) if p]
    return "; ".join(parts) if parts else None
