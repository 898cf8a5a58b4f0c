"""The recall planner: which store searches one recall runs, and what the context builder dedups.

A recall is one hybrid search of the user's memories (``alpha`` 1.0 = pure vector, 0.0 = pure
keyword/BM25), then

* query centring (``retrieval.centre_weight``, 0.75 by default): the vector leg searches with the
  query vector minus that weight times the mean of the user's active memory vectors
  (:meth:`RecallPlanner.centred`), so a memory that resembles everything the user says (a greeting,
  a generic question) no longer comes up for every query; every hit keeps its cosine to the query
  itself;
* dense pseudo-relevance feedback (``retrieval.feedback_weight``, off by default): the query vector
  is moved towards the stored vector of the first search's best hit and the store is searched a
  second time with it (:meth:`RecallPlanner.feedback`); the keyword leg and the store's maths are
  unchanged, and every hit keeps its cosine to the query itself for the gate and the floor;
* the archive fall-back: when no active hit clears the relevance floor, archived memories that
  do are added (``retrieval.archive_fallback``);
* the time windows: for every period the query names ("last week", "上个月"), the best hits
  created inside it are added, and re-ranking rewards them (``retrieval.time_windows``);
* the re-rank (:func:`hybrid_memory.read.rerank.rerank`).

Before fusing, :meth:`RecallPlanner.window_dedup` gathers what the context builder needs to
skip memories already in the session's short-term window; :meth:`RecallPlanner.context` fuses
the recalled memories into the block for the prompt (or the skipped block of a store outage).

The planner receives validated arguments and redacted text: validation and redaction are the
facade's, once, at the door.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import cast

import numpy as np

from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.embeddings import Embedder
from hybrid_memory.errors import ConfigurationError, InvalidInputError, StoreUnavailableError
from hybrid_memory.read.context import ContextFuser, passes_floor
from hybrid_memory.read.rerank import rerank
from hybrid_memory.records import FusedContext, RecallHit, Turn
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.nearest import MeanSource
from hybrid_memory.text.temporal import TimeWindow, find_time_windows, without_periods
from hybrid_memory.values import FusionType, MemoryFilter, SearchRequest, StoreHit, Vector

logger = logging.getLogger("hybrid_memory.read")

__all__ = ["RecallPlanner", "Recalled", "WindowDedup", "check_alpha", "check_fusion", "check_k", "query_cosines"]

_MAX_K = 1000


def check_k(k: object) -> int:
    """``k`` of a recall: an int in 1..1000."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k > _MAX_K:
        raise InvalidInputError(f"k must be an int between 1 and {_MAX_K}, got {k!r}")
    return k


def check_alpha(alpha: object) -> float:
    """``alpha`` of a recall: a number in [0, 1] (1.0 = pure vector, 0.0 = pure keyword (BM25))."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise InvalidInputError(f"alpha must be a number in [0, 1], got {alpha!r}")
    a = float(alpha)
    if not 0.0 <= a <= 1.0:  # also rejects NaN
        raise InvalidInputError(f"alpha must be in [0, 1] (1.0 = pure vector, 0.0 = pure BM25), got {alpha!r}")
    return a


def check_fusion(fusion: object) -> FusionType:
    """``fusion`` of a recall: ``"relative"`` or ``"ranked"``."""
    if fusion not in ("relative", "ranked"):
        raise InvalidInputError(f"fusion must be 'relative' or 'ranked', got {fusion!r}")
    return fusion


class Recalled(list[RecallHit]):
    """Recalled memories, best first, with the stored vector of each (``vectors``: memory id -> unit vector).

    A plain ``list`` of :class:`~hybrid_memory.records.RecallHit` to every caller; ``vectors`` is
    what the store returned with the hits, kept for the context builder's dedup.
    """

    def __init__(self, hits: Iterable[RecallHit] = (), vectors: Mapping[str, Vector] | None = None) -> None:
        super().__init__(hits)
        self.vectors: dict[str, Vector] = dict(vectors or {})

    def top(self, k: int) -> Recalled:
        """The best ``k`` hits with their vectors."""
        head = self[:k]
        return Recalled(head, {h.id: self.vectors[h.id] for h in head if h.id in self.vectors})


@dataclasses.dataclass(frozen=True)
class WindowDedup:
    """What the context builder needs to skip memories already in the short-term window.

    Attributes:
        turn_ids: Ids of the window's turns (a memory made from one of them is skipped by id).
        stm_vectors: One row per window turn compared by similarity (``None``: none to compare).
        hit_vectors: The stored vectors of the hits (``None`` when there is nothing to compare).
    """

    turn_ids: frozenset[str] = frozenset()
    stm_vectors: Vector | None = None
    hit_vectors: dict[str, Vector] | None = None


def _moved(vector: Vector, towards: Vector, weight: float) -> Vector | None:
    """``(q + weight·v) / ‖q + weight·v‖`` in float32, or ``None`` (shapes differ, or nothing is left)."""
    q = np.asarray(vector, dtype=np.float32)
    v = np.asarray(towards, dtype=np.float32)
    if v.shape != q.shape:
        return None
    moved = q + np.float32(weight) * v
    norm = float(np.linalg.norm(moved))
    if not np.isfinite(norm) or norm < 1e-6:
        return None
    out: Vector = (moved / np.float32(norm)).astype(np.float32, copy=False)
    return out


def query_cosines(hits: Sequence[StoreHit], vector: Vector) -> list[StoreHit]:
    """``hits`` with each ``vector_similarity`` set to the cosine of its stored vector to ``vector``.

    After a feedback search the store's cosines are to the moved vector; the floor, the gate and
    the score components must judge a memory by the query itself. A hit without a stored vector
    keeps what the store said.

    Example:
        >>> import numpy as np
        >>> from datetime import datetime, timezone
        >>> from hybrid_memory.records import MemoryRecord
        >>> r = MemoryRecord(id="m1", user_id="u", content="x", created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        ...                  updated_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
        >>> hit = StoreHit(record=r, score=1.0, vector_similarity=0.9, vector=np.array([0.6, 0.8], dtype=np.float32))
        >>> round(query_cosines([hit], np.array([1.0, 0.0], dtype=np.float32))[0].vector_similarity, 3)
        0.6
    """
    q = np.asarray(vector, dtype=np.float32)
    out: list[StoreHit] = []
    for h in hits:
        if h.vector is None or h.vector_similarity is None:
            out.append(h)
            continue
        sim = float(np.dot(np.asarray(h.vector, dtype=np.float32), q))
        out.append(dataclasses.replace(h, vector_similarity=sim))
    return out


class RecallPlanner:
    """Runs the store searches of one recall and re-ranks what they found.

    Args:
        store: The memory store searched.
        embedder: Embeds the query.
        config: The memory's settings (``retrieval`` and ``rerank`` sections are used).
        fuser: The context builder whose relevance floor the archive fall-back shares.
        bind: Binds the embedder to the store before the first embedding (idempotent).
        touches: Adds a user's access touches not written yet to its hits (:meth:`TouchQueue.apply
            <hybrid_memory.read.touches.TouchQueue.apply>`); ``None``: the hits as the store has them.

    Raises:
        ConfigurationError: ``retrieval.centre_weight`` was set and the store cannot give a user's
            mean vector (:class:`~hybrid_memory.stores.nearest.MeanSource`). Left at its default,
            centring is then off for that store (logged once, at INFO).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: HybridMemoryConfig,
        *,
        fuser: ContextFuser,
        bind: Callable[[], None],
        touches: Callable[[str, Sequence[StoreHit]], list[StoreHit]] | None = None,
    ) -> None:
        self.store = store
        self._touches = touches
        self.embedder = embedder
        self.config = config
        self.fuser = fuser
        self._bind = bind
        #: The weight query centring uses with this store (0: off).
        self.centre_weight = config.retrieval.centre_weight
        if self.centre_weight > 0 and not isinstance(store, MeanSource):
            if "centre_weight" in config.retrieval.model_fields_set:
                raise ConfigurationError(
                    f"retrieval.centre_weight needs a store that implements MeanSource (mean_vector); "
                    f"{type(store).__name__} does not: set it to 0 or use LocalStore / WeaviateStore"
                )
            logger.info("query centring is off: %s has no mean_vector (MeanSource)", type(store).__name__)
            self.centre_weight = 0.0

    def recall(
        self,
        query: str,
        *,
        user_id: str,
        k: int,
        alpha: float,
        fusion: FusionType,
        filter: MemoryFilter | None,
        include_archived: bool,
        now: datetime,
    ) -> Recalled:
        """Every candidate of ``user_id`` for ``query``, re-ranked, best first (the caller keeps ``k``).

        The result also carries the stored vector of every hit (:attr:`Recalled.vectors`), as the
        store returned it with the hit, so the context builder's dedup needs no second read.

        Args:
            query: The (redacted) query.
            user_id: Whose memories.
            k: How many the caller keeps (at least that many candidates are fetched).
            alpha: Vector weight: 1.0 = pure vector, 0.0 = pure keyword (BM25).
            fusion: ``"relative"`` or ``"ranked"``.
            filter: Restrictions; ``None`` = active memories.
            include_archived: Also search archived memories.
            now: Reference time for recency and time windows.
        """
        base = filter if filter is not None else MemoryFilter()
        if include_archived and "archived" not in base.statuses:
            base = MemoryFilter(
                categories=base.categories,
                tags=base.tags,
                since=base.since,
                until=base.until,
                session_id=base.session_id,
                statuses=(*base.statuses, "archived"),
            )
        if self.store.dimension is None:
            return Recalled()  # nothing was ever stored (no embedding needed); a per-user COUNT(*) costs O(n)
        self._bind()
        vector = self.embedder.embed_query(query) if alpha > 0 or self.config.retrieval.archive_fallback else None
        asked = vector  # the query's own vector; ``vector`` is what the searches use (centred, moved by feedback)
        if vector is not None and alpha > 0 and self.centre_weight > 0:
            vector = self.centred(vector, user_id)
        limit = max(k, self.config.retrieval.candidates)
        windows = self.time_windows(query, now, base)
        # what the keyword leg searches: the periods' own words out once they are windows
        words = without_periods(query, windows) if self.config.retrieval.drop_period_words else query
        hits = self.search(words, user_id, limit=limit, alpha=alpha, filt=base, fusion=fusion, vector=vector)
        hits = self._as_asked(hits, asked, vector)
        if vector is not None and alpha > 0 and hits and self.config.retrieval.feedback_weight > 0:
            moved = self.feedback(vector, hits[0], user_id)
            if moved is not None:
                vector = moved
                hits = self.search(words, user_id, limit=limit, alpha=alpha, filt=base, fusion=fusion, vector=vector)
                hits = self._as_asked(hits, asked, vector)
        judged = self.judged_cosines(hits, asked, user_id)
        if (
            not include_archived
            and self.config.retrieval.archive_fallback
            and "archived" not in base.statuses
            and not any(self.hit_relevant(h, query, judged) for h in hits)
        ):
            archived = MemoryFilter(
                categories=base.categories,
                tags=base.tags,
                since=base.since,
                until=base.until,
                session_id=base.session_id,
                statuses=("archived",),
            )
            found = self.search(words, user_id, limit=limit, alpha=alpha, filt=archived, fusion=fusion, vector=vector)
            found = self._as_asked(found, asked, vector)
            judged = self.judged_cosines(found, asked, user_id, known=judged)
            extra = [h for h in found if self.hit_relevant(h, query, judged)]
            hits = hits + extra
        if windows:
            hits = self.search_windows(
                hits, windows, words, user_id, limit=limit, alpha=alpha, base=base, fusion=fusion, vector=vector
            )
            hits = self._as_asked(hits, asked, vector)
        if self._touches is not None:
            hits = self._touches(user_id, hits)  # heat counts the touches still being written
        judged = self.judged_cosines(hits, asked, user_id, known=judged)  # the windows may have added hits
        ranked = rerank(
            hits,
            now=now,
            config=self.config.rerank,
            fusion=fusion,
            windows=windows,
            k=k,
            query=words,
            cross_script_similarity=self.cross_script_cosines(hits, judged),
            alpha=alpha,
        )
        if judged is not None:  # the floor and the gate read the judging part's cosine
            ranked = [r.model_copy(update={"vector_similarity": judged.get(r.id)}) for r in ranked]
        return Recalled(ranked, vectors={h.record.id: h.vector for h in hits if h.vector is not None})

    def judged_cosines(
        self,
        hits: Sequence[StoreHit],
        asked: Vector | None,
        user_id: str,
        *,
        known: Mapping[str, float | None] | None = None,
    ) -> dict[str, float | None] | None:
        """Each hit's cosine to ``asked`` in the view of the part that judges relevance (``None``: the whole vector).

        A :class:`~hybrid_memory.embeddings.ConcatEmbedder` built with ``cross_script`` takes its
        relevance floor and injection gate from that part (they were calibrated on its cosines), so
        the cosine they compare is that part's too: the ``vector_similarity`` of what ``recall``
        returns. A hit the store returned without its vector is read with ``get_vectors``; one
        still without gets ``None`` (no cosine: only the keyword floor can pass it). ``known``:
        cosines already computed for this query (kept, and returned with the new ones).
        """
        view = getattr(self.embedder, "cross_script_view", None)
        if view is None or asked is None:
            return None
        q = view(asked)
        if q is None:
            return None
        out = dict(known or {})
        todo = [h for h in hits if h.record.id not in out]
        vectors = {h.record.id: h.vector for h in todo if h.vector is not None}
        missing = [h.record.id for h in todo if h.vector is None]
        if missing:
            vectors.update(self.store.get_vectors(user_id, missing))
        for h in todo:
            stored = vectors.get(h.record.id)
            out[h.record.id] = None if stored is None else float(np.dot(view(stored), q))
        return out

    def cross_script_cosines(
        self, hits: Sequence[StoreHit], judged: Mapping[str, float | None] | None
    ) -> list[float | None] | None:
        """The re-rank's cross-script cosines: :meth:`judged_cosines` in hit order (``None``: the whole vector's).

        An embedder with a ``cross_script_view`` (a :class:`~hybrid_memory.embeddings.ConcatEmbedder`
        built with ``cross_script``) judges memories in another script than the question by one of
        its parts. When the store returned a hit without its vector (a store that does not return
        them), every hit keeps the whole vector's cosine, so no two hits are compared on two scales.
        """
        if judged is None or not self.config.rerank.cross_script or any(h.vector is None for h in hits):
            return None
        return [judged.get(h.record.id) for h in hits]

    @staticmethod
    def _as_asked(hits: list[StoreHit], asked: Vector | None, searched: Vector | None) -> list[StoreHit]:
        """``hits`` of a search with ``searched`` judged by the cosine to ``asked`` (no-op when they are the same)."""
        return hits if asked is None or searched is asked else query_cosines(hits, asked)

    def centred(self, vector: Vector, user_id: str) -> Vector:
        """``vector`` minus ``retrieval.centre_weight`` times the user's mean memory vector, renormalised.

        ``q' = (q - w·m) / ‖q - w·m‖``: the cosine to ``q'`` ranks a memory by how much more it
        resembles the query than it resembles the user's memories on average, which demotes the
        memories that come up for any query (hubs). The keyword leg and the store's maths are
        unchanged. ``vector`` itself when the user has no active memory or the result would be 0.
        """
        mean = cast(MeanSource, self.store).mean_vector(user_id)
        if mean is None:
            return vector
        out = _moved(vector, mean, -self.centre_weight)
        return vector if out is None else out

    def feedback(self, vector: Vector, best: StoreHit, user_id: str) -> Vector | None:
        """The query vector moved towards ``best``'s stored vector (unit norm), or ``None`` without one.

        ``q' = (q + w·v) / ‖q + w·v‖`` with ``w = retrieval.feedback_weight``: the memories that
        resemble the best hybrid hit (often the other turns of the same exchange) come up in the
        vector leg next to those that resemble the question.
        """
        top = best.vector
        if top is None:
            top = self.store.get_vectors(user_id, [best.record.id]).get(best.record.id)
        if top is None:
            return None
        return _moved(vector, top, self.config.retrieval.feedback_weight)

    def search(
        self,
        query: str,
        user_id: str,
        *,
        limit: int,
        alpha: float,
        filt: MemoryFilter,
        fusion: FusionType,
        vector: Vector | None,
    ) -> list[StoreHit]:
        """One hybrid search of the store."""
        return self.store.search(
            SearchRequest(
                user_id=user_id,
                query=query,
                vector=vector,
                alpha=alpha,
                limit=limit,
                fusion=fusion,
                max_vector_distance=self.config.retrieval.max_vector_distance,
                filter=filt,
            )
        )

    def time_windows(self, query: str, when: datetime, base: MemoryFilter) -> list[TimeWindow]:
        """Periods the query names (none when disabled or when the caller already set a time range)."""
        cfg = self.config.retrieval
        if not cfg.time_windows or cfg.max_time_windows == 0 or base.since is not None or base.until is not None:
            return []
        return find_time_windows(query, when)[: cfg.max_time_windows]

    def search_windows(
        self,
        hits: list[StoreHit],
        windows: Sequence[TimeWindow],
        query: str,
        user_id: str,
        *,
        limit: int,
        alpha: float,
        base: MemoryFilter,
        fusion: FusionType,
        vector: Vector | None,
    ) -> list[StoreHit]:
        """Add the best hits created inside each named period (a memory found twice keeps its higher score)."""
        best = {h.record.id: h for h in hits}
        order = [h.record.id for h in hits]
        for w in windows:
            narrowed = dataclasses.replace(base, since=w.start, until=w.end)
            for h in self.search(query, user_id, limit=limit, alpha=alpha, filt=narrowed, fusion=fusion, vector=vector):
                seen = best.get(h.record.id)
                if seen is None:
                    order.append(h.record.id)
                if seen is None or h.score > seen.score:
                    best[h.record.id] = h
        return [best[i] for i in order]

    def hit_relevant(self, h: StoreHit, query: str, judged: Mapping[str, float | None] | None = None) -> bool:
        """Whether a store hit clears the context builder's relevance floor (:func:`passes_floor`).

        ``judged``: the cosines of :meth:`judged_cosines` (``None``: the hit's own ``vector_similarity``).
        """
        fuser = self.fuser
        return passes_floor(
            h.vector_similarity if judged is None else judged.get(h.record.id),
            h.keyword_score,
            fuser.min_similarity,
            fuser.config.min_keyword_score,
            own_terms=lambda: fuser.holds_query_terms(h.record.content, query),
        )

    def window_dedup(
        self,
        hits: Sequence[RecallHit],
        *,
        user_id: str,
        turns: Sequence[Turn],
        asked: str,
        turn_vectors: Callable[[Sequence[Turn]], Vector],
        vectors: Mapping[str, Vector] | None = None,
    ) -> WindowDedup:
        """What :meth:`ContextFuser.fuse` needs to skip ``hits`` already in the window ``turns``.

        Args:
            hits: The recalled memories.
            user_id: Whose memories.
            turns: The session's short-term window.
            asked: The (redacted) question being asked: it may already be a turn of the window
                and must not hide the memories that answer it, so similarity dedup skips it
                (its own memory goes by id).
            turn_vectors: Embeds turns (one row each, cached by the session state).
            vectors: The hits' stored vectors already at hand (:attr:`Recalled.vectors`); only the
                missing ones are read from the store.
        """
        ids = frozenset(t.id for t in turns)
        others = [t for t in turns if t.content != asked]
        if not hits or not others:
            return WindowDedup(turn_ids=ids)
        stm_vectors = turn_vectors(others)
        known = vectors or {}
        hit_vectors = {h.id: known[h.id] for h in hits if h.id in known}
        missing = [h.id for h in hits if h.id not in known]
        if missing:
            hit_vectors.update(self.store.get_vectors(user_id, missing))
        return WindowDedup(turn_ids=ids, stm_vectors=stm_vectors, hit_vectors=hit_vectors)

    def context(
        self,
        hits: Recalled,
        *,
        query: str,
        user_id: str,
        now: datetime,
        max_tokens: int | None,
        turns: Sequence[Turn] | None = None,
        asked: str = "",
        turn_vectors: Callable[[Sequence[Turn]], Vector] | None = None,
    ) -> FusedContext:
        """The context block of ``hits``, skipping the memories already in the window ``turns``.

        Args:
            hits: The recalled memories, best first.
            query: The current user message.
            user_id: Whose memories.
            now: Reference time.
            max_tokens: Token cap for the block (``None``: the fuser's default).
            turns: The session's short-term window (``None``: no session, no window dedup).
            asked: The (redacted) query (see :meth:`window_dedup`).
            turn_vectors: Embeds turns (needed with ``turns``).
        """
        dedup = WindowDedup()
        if turns is not None and turn_vectors is not None and hits:
            dedup = self.window_dedup(
                hits, user_id=user_id, turns=turns, asked=asked, turn_vectors=turn_vectors, vectors=hits.vectors
            )
        return self.fuser.fuse(
            hits,
            query=query,
            now=now,
            max_tokens=max_tokens,
            hit_vectors=dedup.hit_vectors,
            stm_vectors=dedup.stm_vectors,
            stm_threshold=self.embedder.stm_threshold,
            stm_turn_ids=dedup.turn_ids,
        )

    def unavailable(self, exc: StoreUnavailableError) -> FusedContext:
        """The skipped, degraded block of a context whose recall found the store down.

        Raises:
            StoreUnavailableError: ``exc`` itself, unless ``fuser.degrade_on_store_error``.
        """
        if not self.config.fuser.degrade_on_store_error:
            raise exc
        return FusedContext(
            text="",
            token_count=0,
            skipped=True,
            skipped_reason=f"long-term store unavailable: {exc}",
            degraded=True,
            token_counter=self.fuser.counter.name,
        )
