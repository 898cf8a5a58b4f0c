"""Dense feedback (``retrieval.feedback_weight``) behaves the same on a LocalStore file and a real Weaviate server."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder
from tests.unit.test_recall_feedback import MEMORIES, T0


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_feedback_lifts_the_best_hits_neighbour_and_keeps_query_cosines(
    either_store: MemoryStore, weight: float
) -> None:
    mem = HybridMemory(
        either_store,
        embedder=HashingEmbedder(),
        config={"retrieval": {"feedback_weight": weight, "time_windows": False, "archive_fallback": False}},
    )
    for i, text in enumerate(MEMORIES):  # the unrelated memory is the newest: it wins the tie without feedback
        mem.remember("u", text, importance=0.5, timestamp=T0.replace(hour=9 + i))
    hits = mem.recall("alpha beta", user_id="u", k=3, touch=False)
    expected = MEMORIES[:2] if weight else [MEMORIES[0], MEMORIES[2]]
    assert [h.content for h in hits][:2] == expected
    q = np.asarray(mem.embedder.embed_query("alpha beta"), dtype=np.float32)
    vectors = either_store.get_vectors("u", [h.id for h in hits])
    for h in hits:
        assert h.vector_similarity == pytest.approx(float(vectors[h.id] @ q), abs=1e-4)
