"""LocalStore's array fast paths rank exactly like the reference maths of :mod:`hybrid_memory.ranking`.

The reference is built in the test from the records alone: the exact vector leg sorted in Python by
``(distance, id)``, the keyword leg from :func:`~hybrid_memory.ranking.bm25_scores` over every memory
of the user (statistics unfiltered) ranked by :func:`~hybrid_memory.ranking.rank_keyword`, both fused
by :func:`~hybrid_memory.ranking.hybrid_fuse`. The corpus is made of few distinct vectors and texts
so that exact distance ties, BM25 ties and fusion ties are everywhere; filters cover every mask path
(statuses, categories with an unknown name, tags, session, time range, all rows allowed).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.ranking import (
    KeywordCandidate,
    VectorCandidate,
    bm25_scores,
    candidate_limit,
    cosine_distance,
    hybrid_fuse,
    rank_keyword,
)
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter, SearchRequest
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.stores.local.partition import _unit_rows, _unit_vector

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
WORDS = ["tea", "coffee", "green", "black", "morning", "evening", "drink", "likes", "the", "a"]
CATEGORIES = ("fact", "preference", "project", "turn")
STATUSES = ("active", "active", "active", "archived", "superseded")


def corpus(rng: np.random.Generator, n: int) -> tuple[list[MemoryRecord], np.ndarray]:
    basis = rng.normal(size=(6, 16)).astype(np.float32)
    recs: list[MemoryRecord] = []
    for i in range(n):
        words = [WORDS[int(w)] for w in rng.integers(0, len(WORDS), size=int(rng.integers(2, 6)))]
        recs.append(
            MemoryRecord.create(
                user_id="u",
                id=str(uuid.UUID(int=(int(rng.integers(0, 2**40)) << 20) + i)),  # unique, random order
                content=" ".join(words) + f" {i % 7}",  # repeated texts -> BM25 ties
                timestamp=T0 + timedelta(hours=i),
                category=CATEGORIES[i % len(CATEGORIES)],
                status=STATUSES[i % len(STATUSES)],
                session_id=f"s{i % 3}",
                tags=("work",) if i % 4 == 0 else (),
            )
        )
    vectors = basis[rng.integers(0, len(basis), size=n)]  # repeated vectors -> distance ties
    return recs, vectors


def reference(
    store: LocalStore, recs: list[MemoryRecord], vectors: np.ndarray, req: SearchRequest
) -> list[tuple[str, float, float | None]]:
    flt = req.filter
    allowed = [
        r
        for r in recs
        if r.status in flt.statuses
        and (flt.categories is None or r.category in flt.categories)
        and (flt.tags is None or set(r.tags) & set(flt.tags))
        and (flt.session_id is None or r.session_id == flt.session_id)
        and (flt.since is None or r.created_at >= flt.since)
    ]
    k = candidate_limit(req.limit)
    stored = store.get_vectors("u", [r.id for r in recs])
    q = np.asarray(req.vector, dtype=np.float32)
    q = (q / np.linalg.norm(q[None, :], axis=1).astype(np.float32)[0]).astype(np.float32)
    vec_leg = None
    if req.alpha > 0:
        m = np.stack([stored[r.id] for r in allowed]) if allowed else np.zeros((0, q.size), np.float32)
        sims = np.einsum("ij,j->i", m, q)
        dist = [cosine_distance(float(s)) for s in sims]
        order = sorted(range(len(allowed)), key=lambda i: (dist[i], allowed[i].id))[:k]
        vec_leg = [VectorCandidate(allowed[i].id, dist[i]) for i in order]
    tokens = [store.analyzer.index_tokens(r.content) for r in recs]
    scores = bm25_scores(store.analyzer.query_tokens(req.query or ""), tokens)
    ok = {r.id for r in allowed}
    kw_leg: list[KeywordCandidate] = [
        c for c in rank_keyword({recs[i].id: s for i, s in scores.items()}) if c.id in ok
    ][:k]
    fused = hybrid_fuse(
        alpha=req.alpha, vector_leg=vec_leg, keyword_leg=kw_leg, fusion=req.fusion, limit=req.limit, offset=req.offset
    )
    return [(h.id, h.score, h.keyword_score) for h in fused]


FILTERS = [
    MemoryFilter(),
    MemoryFilter(statuses=("active", "archived", "superseded")),  # every row allowed
    MemoryFilter(categories=("fact", "no-such-category")),
    MemoryFilter(statuses=("archived",), categories=("project", "turn")),
    MemoryFilter(tags=("work",)),
    MemoryFilter(session_id="s1", since=T0 + timedelta(hours=30)),
    MemoryFilter(session_id="no-such-session"),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
def test_search_equals_reference_with_ties_and_filters(seed: int, alpha: float) -> None:
    rng = np.random.default_rng(seed)
    recs, vectors = corpus(rng, 260)
    with LocalStore(":memory:") as store:
        store.upsert(recs, vectors)
        for flt in FILTERS:
            for fusion in ("relative", "ranked"):
                q = vectors[int(rng.integers(0, len(recs)))] + rng.normal(scale=0.01, size=16).astype(np.float32)
                req = SearchRequest(
                    user_id="u",
                    query="green tea likes 3",
                    vector=q,
                    alpha=alpha,
                    limit=int(rng.integers(5, 30)),
                    offset=int(rng.integers(0, 3)),
                    fusion=fusion,
                    filter=flt,
                )
                got = [(h.record.id, h.score, h.keyword_score) for h in store.search(req)]
                assert got == reference(store, recs, vectors, req)


def test_cached_bm25_contributions_follow_every_write(tmp_path: Path) -> None:
    """Searches between writes reuse per-term BM25 arrays; each kind of write must drop them."""
    rng = np.random.default_rng(11)
    recs, vectors = corpus(rng, 120)
    path = tmp_path / "m.db"

    def keyword(store: LocalStore) -> list[tuple[str, float | None]]:
        req = SearchRequest(
            user_id="u",
            query="green tea likes",
            vector=None,
            alpha=0.0,
            limit=50,
            filter=MemoryFilter(statuses=("active", "archived", "superseded")),
        )
        return [(h.record.id, h.keyword_score) for h in store.search(req)]

    with LocalStore(path) as store:
        store.upsert(recs[:100], vectors[:100])
        before = keyword(store)
        assert keyword(store) == before  # served from the cache
        store.upsert(recs[100:], vectors[100:])  # N, df and avgdl change
        store.update([recs[5].evolve(content="green green tea tea likes")])  # tokens change
        store.update([recs[6].evolve(status="archived")])  # filter fields only
        store.delete("u", [recs[7].id, recs[8].id])  # rows move
        after = keyword(store)
        assert after != before
    with LocalStore(path) as fresh:
        assert keyword(fresh) == after


@pytest.mark.parametrize("dim", [3, 16, 384, 512, 1536])
def test_unit_vector_equals_the_row_normalisation_bit_for_bit(dim: int) -> None:
    rng = np.random.default_rng(dim)
    for scale in (1e-3, 1.0, 1e3):
        for _ in range(50):
            v = (rng.normal(size=dim) * scale).astype(np.float32)
            assert np.array_equal(_unit_vector(v), _unit_rows(v[None, :])[0])
    for bad in (np.zeros(dim, np.float32), np.full(dim, np.nan, np.float32), np.full(dim, 1e30, np.float32)):
        with pytest.raises(InvalidInputError):
            _unit_vector(bad)
