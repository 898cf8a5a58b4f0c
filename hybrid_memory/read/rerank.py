"""Re-ranking of hybrid candidates (Generative Agents style). Pure functions, no IO.

``final = w_rel·relevance + w_imp·importance + w_rec·recency + w_heat·heat + w_time·time_match``
with

* ``relevance``: the fused hybrid score in 0..1 (relativeScoreFusion; rankedFusion scores are
  rescaled by their maximum 1/60 so they also lie in 0..1);
* ``recency = 0.5 ** (Δt / half_life)``, Δt since the later of last access and last update;
* ``heat = log1p(access_count) / log1p(max access_count among the candidates)`` (0 when none
  was ever accessed);
* ``time_match``: 1.0 when the memory was created inside one of the periods the query names
  (``windows``, from :func:`hybrid_memory.temporal.find_time_windows`), else 0.0.

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
from hybrid_memory.text.temporal import TimeWindow

__all__ = ["freshness", "recency", "relevance_of", "rerank"]

_RANKED_MAX = 1.0 / 60.0


def recency(record: MemoryRecord, now: datetime, half_life_days: float) -> float:
    """``0.5 ** (Δt / half_life)`` with Δt since the last access or update (never negative)."""
    last = record.updated_at
    if record.last_accessed_at is not None and record.last_accessed_at > last:
        last = record.last_accessed_at
    dt_days = max(0.0, (now - last).total_seconds() / 86400.0)
    return float(0.5 ** (dt_days / half_life_days))


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


def rerank(
    hits: Sequence[StoreHit],
    *,
    now: datetime,
    config: RerankConfig | None = None,
    fusion: FusionType = "relative",
    windows: Sequence[TimeWindow] = (),
) -> list[RecallHit]:
    """Score store hits with relevance, importance, recency, heat and time match; best first.

    Ties on the final score keep the store's order (which is deterministic).
    """
    cfg = config if config is not None else RerankConfig()
    max_access = max((h.record.access_count for h in hits), default=0)
    denom = math.log1p(max_access)
    out: list[RecallHit] = []
    for h in hits:
        rel = relevance_of(h.score, fusion)
        rec = recency(h.record, now, cfg.half_life_days)
        heat = math.log1p(h.record.access_count) / denom if denom > 0 else 0.0
        imp = h.record.importance
        tm = 1.0 if any(h.record.created_at in w for w in windows) else 0.0
        final = (
            cfg.w_relevance * rel + cfg.w_importance * imp + cfg.w_recency * rec + cfg.w_heat * heat + cfg.w_time * tm
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
            )
        )
    order = sorted(range(len(out)), key=lambda i: (-out[i].score, i))
    return [out[i] for i in order]
