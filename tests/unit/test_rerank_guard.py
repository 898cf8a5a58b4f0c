"""The re-rank guard: importance, recency and heat cannot push a clearly relevant memory down (issue 17)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hybrid_memory.config import HybridMemoryConfig, RerankConfig
from hybrid_memory.read.rerank import guarded_order, protected, rerank
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import StoreHit

NOW = datetime(2025, 2, 1, 12, tzinfo=timezone.utc)


def _hit(content: str, relevance: float, *, days_ago: float = 30, importance: float = 0.1, access: int = 0) -> StoreHit:
    record = MemoryRecord.create(
        user_id="u",
        content=content,
        timestamp=NOW - timedelta(days=days_ago),
        importance=importance,
        access_count=access,
    )
    return StoreHit(record, relevance)


#: The answer is the most relevant but old and unimportant; four weaker hits are fresh, important, hot.
HITS = [
    _hit("answer", 1.0),
    _hit("near answer", 0.93),
    *(_hit(f"popular {i}", 0.55 - 0.01 * i, days_ago=0, importance=1.0, access=9) for i in range(4)),
]


def _contents(config: RerankConfig, k: int | None) -> list[str]:
    return [h.content for h in rerank(HITS, now=NOW, config=config, k=k)]


def test_without_the_guard_importance_and_recency_push_the_answer_out_of_the_top_k() -> None:
    unguarded = _contents(RerankConfig(), k=3)
    assert unguarded[:4] == ["popular 0", "popular 1", "popular 2", "popular 3"]
    assert RerankConfig().guard_margin is None and RerankConfig().guard_gap is None  # off by default


@pytest.mark.parametrize("config", [RerankConfig(guard_margin=0.1), RerankConfig(guard_gap=0.2)])
def test_the_guard_keeps_clearly_relevant_memories_first(config: RerankConfig) -> None:
    guarded = _contents(config, k=3)
    assert guarded[:2] == ["answer", "near answer"]  # protected ones first, best scored first
    assert guarded[2:] == ["popular 0", "popular 1", "popular 2", "popular 3"]  # the rest by score
    hits = rerank(HITS, now=NOW, config=config, k=3)
    assert hits[2].score > hits[0].score  # the scores themselves are not changed


def test_a_margin_protects_only_what_is_close_to_the_best_hit() -> None:
    assert _contents(RerankConfig(guard_margin=0.05), k=3)[:2] == ["answer", "popular 0"]
    assert _contents(RerankConfig(guard_margin=0.1), k=None) == _contents(RerankConfig(), k=None)  # needs k


def test_at_most_k_memories_are_protected() -> None:
    assert _contents(RerankConfig(guard_margin=0.1), k=1) == [
        "answer",
        "popular 0",
        "popular 1",
        "popular 2",
        "popular 3",
        "near answer",
    ]


def test_protected_by_margin_and_gap() -> None:
    relevances = [0.9, 0.85, 0.5, 0.4, 0.88]
    assert protected(relevances, 2, margin=0.05, gap=None) == {0, 1, 4}
    assert protected(relevances, 2, margin=0.0, gap=None) == {0}
    assert protected(relevances, 3, margin=None, gap=0.3) == {0, 1, 4}  # rank 4 has 0.5: 0.85 clears 0.8
    assert protected(relevances, 3, margin=None, gap=0.36) == {0, 4}
    assert protected(relevances, 5, margin=None, gap=0.1) == frozenset()  # no candidate k + 1 to beat
    assert protected([], 3, margin=0.1, gap=0.1) == frozenset()


def test_guarded_order_without_protection_is_the_score_order() -> None:
    scores = [0.2, 0.9, 0.9, 0.1]
    assert guarded_order(scores, frozenset(), 2) == [1, 2, 0, 3]  # ties keep the input order
    assert guarded_order(scores, frozenset({3, 0}), 1) == [0, 1, 2, 3]


def test_the_guard_is_configured_like_every_other_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRID_MEMORY_RERANK__GUARD_MARGIN", "0.1")
    assert HybridMemoryConfig().rerank.guard_margin == 0.1
    with pytest.raises(ValueError, match="guard_gap"):
        RerankConfig(guard_gap=1.5)
