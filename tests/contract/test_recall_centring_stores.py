"""Query centring (``retrieval.centre_weight``) ranks the same on a LocalStore file and a real Weaviate server."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder
from tests.unit.test_recall_centring import MEMORIES, QUERY, T0


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_centring_reorders_the_vector_leg_and_keeps_query_cosines(either_store: MemoryStore, weight: float) -> None:
    mem = HybridMemory(
        either_store,
        embedder=HashingEmbedder(),
        config={"retrieval": {"centre_weight": weight, "time_windows": False, "archive_fallback": False}},
    )
    for i, text in enumerate(MEMORIES):
        mem.remember("u", text, importance=0.5, timestamp=T0.replace(hour=9 + i))
    hits = mem.recall(QUERY, user_id="u", k=5, alpha=1.0, touch=False)
    order = [h.content for h in hits]
    assert order[0] == MEMORIES[0]
    assert order.index(MEMORIES[1]) == (1 if weight else 4)
    q = np.asarray(mem.embedder.embed_query(QUERY), dtype=np.float32)
    vectors = either_store.get_vectors("u", [h.id for h in hits])
    for h in hits:
        assert h.vector_similarity == pytest.approx(float(vectors[h.id] @ q), abs=1e-4)
