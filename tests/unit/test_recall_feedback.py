"""Dense pseudo-relevance feedback (``retrieval.feedback_weight``): a second search, cosines judged by the query."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.errors import ConfigurationError
from hybrid_memory.read.planner import query_cosines
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, tzinfo=timezone.utc)
#: The answer shares the query's words; its neighbour shares only words with the answer.
MEMORIES = [
    "alpha beta gamma delta",
    "gamma delta epsilon zeta",
    "kappa lambda mu nu",
]


def _memory(weight: float) -> tuple[HybridMemory, list[SearchRequest]]:
    store = LocalStore(":memory:")
    searches: list[SearchRequest] = []
    search = store.search

    def counted(request: SearchRequest) -> Any:
        searches.append(request)
        return search(request)

    store.search = counted  # type: ignore[method-assign]
    mem = HybridMemory(
        store=store,
        embedder=HashingEmbedder(),
        config={
            "retrieval": {
                "feedback_weight": weight,
                "centre_weight": 0.0,  # feedback alone: the searched vector is q + w·v exactly
                "time_windows": False,
                "archive_fallback": False,
            }
        },
    )
    for i, text in enumerate(MEMORIES):
        mem.remember("u", text, importance=0.5, timestamp=T0.replace(hour=9 + i))
    return mem, searches


def test_off_by_default_one_search() -> None:
    mem, searches = _memory(0.0)
    with mem:
        assert mem.config.retrieval.feedback_weight == 0.0
        hits = mem.recall("alpha beta", user_id="u", k=3, touch=False)
    assert len(searches) == 1
    assert [h.content for h in hits][:2] == [MEMORIES[0], MEMORIES[2]]  # the neighbour is not lifted


def test_feedback_searches_again_with_the_query_moved_towards_the_best_hit() -> None:
    mem, searches = _memory(1.0)
    with mem:
        hits = mem.recall("alpha beta", user_id="u", k=3, touch=False)
        q = np.asarray(mem.embedder.embed_query("alpha beta"), dtype=np.float32)
        best = mem.store.get_vectors("u", [hits[0].id])[hits[0].id]
    assert len(searches) == 2
    assert hits[0].content == MEMORIES[0]
    moved = np.asarray(searches[1].vector, dtype=np.float32)
    expected = (q + best) / np.linalg.norm(q + best)
    assert np.allclose(moved, expected, atol=1e-6)
    # The neighbour (no word of the query) comes up through the answer's vector, before the unrelated one.
    assert [h.content for h in hits][:2] == MEMORIES[:2]


def test_hits_keep_their_cosine_to_the_query_not_to_the_moved_vector() -> None:
    mem, _ = _memory(1.0)
    with mem:
        hits = mem.recall("alpha beta", user_id="u", k=3, touch=False)
        q = np.asarray(mem.embedder.embed_query("alpha beta"), dtype=np.float32)
        vectors = mem.store.get_vectors("u", [h.id for h in hits])
    for h in hits:
        assert h.vector_similarity == pytest.approx(float(vectors[h.id] @ q), abs=1e-5)
    assert hits[1].vector_similarity == pytest.approx(0.0, abs=1e-5)  # the neighbour shares no word with the query


def test_query_cosines_leaves_hits_without_a_vector_alone() -> None:
    mem, _ = _memory(0.0)
    with mem:
        found = mem.store.search(
            SearchRequest(user_id="u", query="alpha", vector=mem.embedder.embed_query("alpha"), alpha=0.5, limit=3)
        )
    bare = [type(h)(record=h.record, score=h.score, vector_similarity=h.vector_similarity) for h in found]
    assert query_cosines(bare, np.ones(256, dtype=np.float32)) == bare


@pytest.mark.parametrize("bad", [-0.1, 11.0, "x"])
def test_a_bad_weight_is_a_typed_error(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        HybridMemory(
            store=LocalStore(":memory:"), embedder=HashingEmbedder(), config={"retrieval": {"feedback_weight": bad}}
        )
