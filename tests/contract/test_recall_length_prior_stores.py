"""The length prior through the API, on a LocalStore file and a real Weaviate server.

A conversation turn that says little ("Haha, good one!") but is indexed on the question before it
matches that question's words through its search context, and its short text gets BM25's length
bonus; the prior holds it back. A fact stated without a search context keeps the whole prior.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder

NOW = datetime(2024, 6, 1, 12, tzinfo=timezone.utc)
ASKED = "What is your favourite camping memory?"
CHATTY = "Haha, good one!"  # a reply, indexed on the question before it
FACT = "Favourite camping spot: the lake"  # stated on purpose, no search context


@pytest.mark.parametrize("w_length", [0.4, 0.0], ids=["prior on (default)", "prior off"])
def test_a_turn_that_says_little_ranks_below_a_fact(either_store: MemoryStore, w_length: float) -> None:
    mem = HybridMemory(
        either_store, embedder=HashingEmbedder(), config={"rerank": {"w_length": w_length}}, clock=lambda: NOW
    )
    mem.remember("u", CHATTY, importance=0.5, context=ASKED, timestamp=NOW)
    mem.remember("u", FACT, importance=0.5, timestamp=NOW)
    hits = mem.recall("What is my favourite camping memory?", user_id="u", k=2, touch=False)
    by = {h.content: h for h in hits}
    assert set(by) == {CHATTY, FACT}
    # The reply matches more of the question's words (through its context) and is shorter.
    assert by[CHATTY].relevance > by[FACT].relevance
    assert by[FACT].length_prior == 1.0
    if w_length:
        assert 0.0 < by[CHATTY].length_prior < 0.5
        assert [h.content for h in hits] == [FACT, CHATTY]
    else:
        assert by[CHATTY].length_prior == 1.0  # not computed when the weight is 0
        assert [h.content for h in hits] == [CHATTY, FACT]
