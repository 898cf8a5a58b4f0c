"""Re-ranking of hybrid candidates (Generative Agents style). Pure functions, no IO.

``final = max(0, w_rel·relevance + w_imp·importance + w_rec·recency + w_heat·heat + w_time·time_match
- w_length·(1 - length_prior))`` with

* ``relevance``: the fused hybrid score in 0..1 (relativeScoreFusion; rankedFusion scores are
  rescaled by their maximum 1/60 so they also lie in 0..1). A memory in another script than the
  query, its search context included (``cross_script``, with relative fusion), cannot score on
  the keyword leg, which gives same-script memories up to ``1 - alpha`` for a single shared
  character; its relevance is the larger of the fused score and its vector score alone (the
  candidates' cosines rescaled to 0..1, as relativeScoreFusion rescales a leg; with
  ``cross_script_similarity``, those cosines instead, e.g. the language-aligning part of a
  :class:`~hybrid_memory.embeddings.ConcatEmbedder`). Given those cosines and the search's
  ``alpha``, and when some candidates are in the other script, the same-script candidates'
  vector share is re-taken from them too (``score - alpha·v + alpha·v_aligned``, both rescaled
  to 0..1 over the candidates), so every candidate is judged by the same model: a part that
  ranks well in one language but pairs languages badly cannot lift a same-language memory
  over the other-language one that answers;
* ``recency = 0.5 ** (Δt / half_life)``, Δt since the later of last access and last update;
* ``heat = log1p(access_count) / log1p(max access_count among the candidates)`` (0 when none
  was ever accessed);
* ``time_match``: 1.0 when the memory was created inside one of the periods the query names
  (``windows``, from :func:`hybrid_memory.temporal.find_time_windows`), else 0.0;
* ``length_prior`` (:func:`length_prior`): for a conversation turn (a memory with a search
  context or of category ``"turn"``), ``min(1, ln(1 + units) / ln(1 + length_cap))`` of its own
  text's :func:`~hybrid_memory.text.analyzer.content_units`; 1.0 (no penalty) for a memory stated
  on purpose. BM25's length normalisation and the cosine ignore how much a memory says, so a turn
  that only mirrors the question ("What's your best camping memory?") would otherwise rank with
  the one that answers it.

The guard (``guard_margin`` / ``guard_gap`` of :class:`~hybrid_memory.config.RerankConfig`, off by
default): given the ``k`` the caller keeps, the clearly relevant candidates — relevance within
``guard_margin`` of the best candidate's, or in the store's own top ``k`` by a ``guard_gap`` over
candidate ``k + 1`` — come first (at most ``k``), whatever the importance, recency or heat of
the others (:func:`guarded_order`).

Example:
    >>> from datetime import datetime, timedelta, timezone
    >>> from hybrid_memory.records import MemoryRecord
    >>> from hybrid_memory.stores.base import StoreHit
    >>> now = datetime(2024, 1, 8, tzinfo=timezone.utc)
    >>> old = MemoryRecord.create(user_id="u", content="old", timestamp=now - timedelta(days=7))
    >>> new = MemoryRecord.create(user_id="u", content="new", timestamp=now)
    >>> hits = rerank([StoreHit(old, 1.0), StoreHit(new, 1.0)], now=now)
    >>> [(h.content, round(h.recency, 2)) for h in hits]
    [('new', 1.0), ('old', 0.5)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from hybrid_memory.config import RerankConfig
from hybrid_memory.records import MemoryRecord, RecallHit
from hybrid_memory.stores.base import FusionType, StoreHit
from hybrid_memory.text.analyzer import content_units, scripts
from hybrid_memory.text.temporal import TimeWindow

__all__ = ["freshness", "guarded_order", "length_prior", "protected", "recency", "relevance_of", "rerank"]

_RANKED_MAX = 1.0 / 60.0


def recency(record: MemoryRecord, now: datetime, half_life_days: float) -> float:
    """``0.5 ** (Δt / half_life)`` with Δt since the last access or update (never negative)."""
    last = record.updated_at
    if record.last_accessed_at is not None and record.last_accessed_at > last:
        last = record.last_accessed_at
    dt_days = max(0.0, (now - last).total_seconds() / 86400.0)
    return float(0.5 ** (dt_days / half_life_days))


def length_prior(record: MemoryRecord, cap: float) -> float:
    """How much a conversation turn says, 0..1; 1.0 for any other memory.

    ``min(1, ln(1 + content_units(content)) / ln(1 + cap))`` for a turn of a conversation: a memory
    with a search context (``add_turn`` records the turn before it) or of category ``"turn"`` (what
    ``add_turn`` files a turn under unless its importance makes it a key frame), and many turns say
    little. A memory stated on purpose (``remember``, the extractor's facts, summaries, imports) is
    short because it is distilled, and is not held back for it.

    Example:
        >>> from hybrid_memory.records import MemoryRecord
        >>> turn = MemoryRecord.create(
        ...     user_id="u", content="Wow! What's your best camping memory?", context="We camp a lot"
        ... )
        >>> fact = MemoryRecord.create(user_id="u", content="Melanie camps at the beach")
        >>> round(length_prior(turn, 20), 2), length_prior(fact, 20)
        (0.53, 1.0)
    """
    if not record.context and record.category != "turn":
        return 1.0
    return min(1.0, math.log1p(content_units(record.content)) / math.log1p(cap))


def freshness(record: MemoryRecord, now: datetime, half_life_days: float) -> float:
    """Lifecycle freshness: recency slowed down by importance (important memories fade slower).

    The effective half-life is ``half_life · (1 + 9·importance)``: an importance-1.0 memory keeps
    half its freshness for ten half-lives.
    """
    return recency(record, now, half_life_days * (1.0 + 9.0 * record.importance))


def relevance_of(score: float, fusion: FusionType) -> float:
    """Map a store's fused score to 0..1."""
    if fusion == "ranked":
        return min(1.0, max(0.0, score / _RANKED_MAX))
    return min(1.0, max(0.0, score))


def protected(relevances: Sequence[float], k: int, *, margin: float | None, gap: float | None) -> frozenset[int]:
    """Indices of the clearly relevant candidates, which the re-rank may not push out of the top ``k``.

    Args:
        relevances: Relevance of each candidate (0..1).
        k: How many candidates the caller keeps.
        margin: Protect every candidate within ``margin`` of the best relevance (None = no).
        gap: Protect the candidates of the store's own top ``k`` whose relevance exceeds candidate
            ``k + 1``'s by at least ``gap`` (None = no; nothing when there are at most ``k``).

    Example:
        >>> sorted(protected([0.9, 0.85, 0.5, 0.4], 2, margin=0.1, gap=None))
        [0, 1]
        >>> sorted(protected([0.9, 0.85, 0.5, 0.4], 2, margin=None, gap=0.3))
        [0, 1]
        >>> sorted(protected([0.9, 0.6, 0.5, 0.4], 2, margin=None, gap=0.3))
        [0]
    """
    out: set[int] = set()
    if not relevances:
        return frozenset()
    if margin is not None:
        best = max(relevances)
        out.update(i for i, r in enumerate(relevances) if r >= best - margin)
    if gap is not None and len(relevances) > k:
        by_relevance = sorted(range(len(relevances)), key=lambda i: (-relevances[i], i))
        edge = relevances[by_relevance[k]]
        out.update(i for i in by_relevance[:k] if relevances[i] >= edge + gap)
    return frozenset(out)


def guarded_order(scores: Sequence[float], keep: frozenset[int], k: int) -> list[int]:
    """Indices best first by score, the ``keep`` candidates (at most ``k``, the best scored) first.

    Kept candidates come before every other one, so no cut at or below ``k`` made later (the
    context's count cap, a benchmark's @5) can lose one to a better-scored, less relevant
    candidate. Ties keep the input order.

    Example:
        >>> guarded_order([0.9, 0.5, 0.8, 0.7], frozenset({1}), 2)
        [1, 0, 2, 3]
        >>> guarded_order([0.9, 0.5, 0.8, 0.7], frozenset(), 2)
        [0, 2, 3, 1]
    """
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    head = [i for i in order if i in keep][:k]
    if not head:
        return order
    chosen = set(head)
    return head + [i for i in order if i not in chosen]


def _other_script(hits: Sequence[StoreHit], query: str | None) -> list[bool] | None:
    """Per hit, whether its search text is in one script, another than ``query``'s.

    The search text includes the context: what the keyword leg reads. ``None`` when ``query`` is
    not in one script (no words, or mixed: any memory may share its words).
    """
    asked = scripts(query) if query else frozenset()
    if len(asked) != 1:
        return None
    return [len(own) == 1 and own != asked for own in (scripts(h.record.search_text) for h in hits)]


def _rescaled(values: Sequence[float]) -> list[float]:
    """``values`` min-max rescaled to 0..1 (all 1.0 when they are equal), as relativeScoreFusion rescales a leg."""
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 1.0 for v in values]


def _cross_script_relevance(
    hits: Sequence[StoreHit], query: str | None, similarity: Sequence[float | None] | None = None
) -> dict[int, float]:
    """Vector-leg relevance (cosines rescaled to 0..1 over the candidates) of the hits in another script than ``query``.

    ``similarity``: one cosine per hit (``None``: none) to use instead of ``vector_similarity``.
    """
    other = _other_script(hits, query)
    if other is None:
        return {}  # no words, or mixed: every memory may share words with the query
    cos = list(similarity) if similarity is not None else [h.vector_similarity for h in hits]
    if len(cos) != len(hits):
        raise ValueError(f"cross_script_similarity has {len(cos)} values for {len(hits)} hits")
    known = [(i, c) for i, c in enumerate(cos) if c is not None]
    if not known:
        return {}
    scaled = _rescaled([c for _, c in known])
    return {i: v for (i, _), v in zip(known, scaled, strict=True) if other[i]}


def _aligned_same_script(
    hits: Sequence[StoreHit], other: Sequence[bool], similarity: Sequence[float | None], alpha: float
) -> dict[int, float]:
    """Fused relevance of the same-script hits with the vector share taken from ``similarity`` (see the module docstring).

    Empty unless every hit has both cosines.
    """
    whole = [h.vector_similarity for h in hits if h.vector_similarity is not None]
    part = [c for c in similarity if c is not None]
    if len(whole) != len(hits) or len(part) != len(hits):
        return {}
    v_whole, v_part = _rescaled(whole), _rescaled(part)
    return {
        i: min(1.0, max(0.0, h.score - alpha * v_whole[i] + alpha * v_part[i]))
        for i, h in enumerate(hits)
        if not other[i]
    }


def rerank(
    hits: Sequence[StoreHit],
    *,
    now: datetime,
    config: RerankConfig | None = None,
    fusion: FusionType = "relative",
    windows: Sequence[TimeWindow] = (),
    k: int | None = None,
    query: str | None = None,
    cross_script_similarity: Sequence[float | None] | None = None,
    alpha: float | None = None,
) -> list[RecallHit]:
    """Score store hits with relevance, importance, recency, heat and time match; best first.

    Ties on the final score keep the store's order (which is deterministic). With ``k`` (how many
    the caller keeps) and the guard on (``config.guard_margin`` / ``guard_gap``), the clearly
    relevant candidates (:func:`protected`) come first, at most ``k`` (:func:`guarded_order`).
    With ``query`` (and ``config.cross_script``), memories in another script than the query are
    scored by their vector leg alone (see the module docstring): by ``cross_script_similarity``
    when given (one cosine per hit, ``None`` for a hit without one), else by ``vector_similarity``;
    with both those cosines and the search's ``alpha``, the same-script memories' vector share is
    re-taken from them as well when the candidates mix scripts.
    """
    cfg = config if config is not None else RerankConfig()
    max_access = max((h.record.access_count for h in hits), default=0)
    denom = math.log1p(max_access)
    vector_alone = (
        _cross_script_relevance(hits, query, cross_script_similarity)
        if cfg.cross_script and fusion == "relative"
        else {}
    )
    aligned: dict[int, float] = {}
    if vector_alone and cross_script_similarity is not None and alpha is not None:  # the candidates mix scripts
        other = _other_script(hits, query)
        if other is not None:
            aligned = _aligned_same_script(hits, other, cross_script_similarity, alpha)
    out: list[RecallHit] = []
    for i, h in enumerate(hits):
        rel = max(aligned.get(i, relevance_of(h.score, fusion)), vector_alone.get(i, 0.0))
        rec = recency(h.record, now, cfg.half_life_days)
        heat = math.log1p(h.record.access_count) / denom if denom > 0 else 0.0
        imp = h.record.importance
        tm = 1.0 if any(h.record.created_at in w for w in windows) else 0.0
        lp = length_prior(h.record, cfg.length_cap) if cfg.w_length > 0 else 1.0
        final = max(
            0.0,
            cfg.w_relevance * rel
            + cfg.w_importance * imp
            + cfg.w_recency * rec
            + cfg.w_heat * heat
            + cfg.w_time * tm
            - cfg.w_length * (1.0 - lp),
        )
        out.append(
            RecallHit(
                record=h.record,
                score=final,
                relevance=rel,
                keyword_score=h.keyword_score,
                vector_similarity=h.vector_similarity,
                importance=imp,
                recency=rec,
                heat=heat,
                time_match=tm,
                length_prior=lp,
            )
        )
    keep: frozenset[int] = frozenset()
    if k is not None and (cfg.guard_margin is not None or cfg.guard_gap is not None):
        keep = protected([x.relevance for x in out], k, margin=cfg.guard_margin, gap=cfg.guard_gap)
    return [out[i] for i in guarded_order([x.score for x in out], keep, k if k is not None else len(out))]
