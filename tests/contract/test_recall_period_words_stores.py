"""The keyword leg searches without the words of the periods a question names, on a LocalStore file and a real Weaviate server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder

NOW = datetime(2023, 5, 30, 23, 45, tzinfo=timezone.utc)
QUESTION = "How many times did I bake something in the past two weeks?"
BAKED = "I baked a loaf of sourdough bread for the neighbours"
BUSY = "The past two weeks at work were busy, with two deadlines every week"  # the period's words, nothing else


def _memory(store: MemoryStore, drop: bool) -> HybridMemory:
    mem = HybridMemory(
        store,
        embedder=HashingEmbedder(),
        config={"retrieval": {"drop_period_words": drop, "archive_fallback": False}},
        clock=lambda: NOW,
    )
    mem.remember("u", BAKED, importance=0.5, timestamp=NOW - timedelta(days=3))
    mem.remember("u", BUSY, importance=0.5, timestamp=NOW - timedelta(days=2))
    return mem


@pytest.mark.parametrize("drop", [True, False], ids=["dropped (default)", "kept"])
def test_a_memory_that_only_shares_the_periods_words_gets_no_keyword_score(
    either_store: MemoryStore, drop: bool
) -> None:
    mem = _memory(either_store, drop)
    hits = {h.content: h for h in mem.recall(QUESTION, user_id="u", k=5, now=NOW, touch=False)}
    assert set(hits) == {BAKED, BUSY}  # both were written inside the window, both come back
    assert hits[BAKED].keyword_score is not None and hits[BAKED].keyword_score > 0.0  # "bake" still matches
    assert hits[BAKED].time_match == hits[BUSY].time_match == 1.0
    if drop:
        assert hits[BUSY].keyword_score is None
        assert [h.content for h in mem.recall(QUESTION, user_id="u", k=1, now=NOW, touch=False)] == [BAKED]
    else:
        assert hits[BUSY].keyword_score is not None and hits[BUSY].keyword_score > hits[BAKED].keyword_score


def test_a_question_of_nothing_but_a_period_still_recalls_that_period(either_store: MemoryStore) -> None:
    # "the past two weeks?" leaves no keyword at all: the vector leg and the window search answer.
    mem = _memory(either_store, True)
    hits = mem.recall("the past two weeks?", user_id="u", k=5, now=NOW, touch=False)
    assert {h.content for h in hits} == {BAKED, BUSY}
    assert all(h.keyword_score is None and h.time_match == 1.0 for h in hits)
