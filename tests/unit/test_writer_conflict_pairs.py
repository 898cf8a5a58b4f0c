"""The heuristic conflict judge on the labelled pairs, and the issue-18 bug templates end to end.

``tests/data/conflict_pairs.jsonl`` holds hand-written old/new pairs labelled ``update``,
``distinct``, ``paraphrase`` or ``near_duplicate`` (``benchmarks/conflict_judge.py`` reports the
same rates per category and language). A false supersede hides a true memory, so its rate is held
at ≤ 1 %; the missed-update ceiling is the rate measured when the rule was written (11.2 %).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.conflict import HeuristicConflictJudge

DATA = Path(__file__).resolve().parents[1] / "data" / "conflict_pairs.jsonl"
MAX_FALSE_SUPERSEDE = 0.01
MAX_MISSED_UPDATE = 0.12
T0 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)


def load() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert "meta" in rows[0] and "Hand-written" in rows[0]["meta"]
    return rows[1:]


def test_the_set_is_large_bilingual_and_covers_every_label() -> None:
    pairs = load()
    assert len(pairs) >= 300
    assert set(Counter(p["label"] for p in pairs)) == {"update", "distinct", "paraphrase", "near_duplicate"}
    langs = Counter(p["lang"] for p in pairs)
    assert langs["en"] >= 100 and langs["zh"] >= 100 and langs["mixed"] >= 30
    assert len({(p["old"], p["new"]) for p in pairs}) == len(pairs)


def test_false_supersede_and_missed_update_rates() -> None:
    judge = HeuristicConflictJudge()
    pairs = load()
    superseding = [judge.judge(p["new"], [p["old"]])[0].relation == "contradicts" for p in pairs]
    updates = [s for p, s in zip(pairs, superseding, strict=True) if p["label"] == "update"]
    others = [s for p, s in zip(pairs, superseding, strict=True) if p["label"] != "update"]
    false_rate = sum(others) / len(others)
    missed_rate = 1 - sum(updates) / len(updates)
    assert false_rate <= MAX_FALSE_SUPERSEDE, false_rate
    assert missed_rate <= MAX_MISSED_UPDATE, missed_rate
    # every identifier, date, list-item and bug-template pair stays distinct
    for p, s in zip(pairs, superseding, strict=True):
        if p["category"] in {"identifier", "event_date", "list_item", "bug_template"}:
            assert not s, p


@pytest.mark.parametrize(
    ("old", "new", "relation", "reason"),
    [
        ("I have 2 cats", "I have 3 cats", "contradicts", "number changed (2 → 3)"),
        ("我每天七点起床", "我现在每天六点起床", "contradicts", "number changed (7 → 6)"),
        ("The meeting is at 2pm", "The meeting was rescheduled to 4pm", "contradicts", "number changed (2 → 4)"),
        ("My order #1234 has not arrived", "My order #5678 has not arrived", "compatible", "different identifiers"),
        ("room 301 有投影仪", "room 302 有投影仪", "compatible", "different identifiers"),
        ("5月3日看牙医", "6月7日看牙医", "compatible", "different dates or times"),
        ("I have 2 cats", "I have 2 cats and 1 dog", "compatible", "different quantities"),
        ("My daughter is 5 years old", "My son is 7 years old", "compatible", "about different things"),
        ("My brother has 2 cats", "I have 3 cats", "compatible", "about different things"),
    ],
)
def test_slot_rule_cases(old: str, new: str, relation: str, reason: str) -> None:
    [v] = HeuristicConflictJudge().judge(new, [old])
    assert (v.relation, reason in v.reason) == (relation, True), v


def test_distinct_numbers_are_still_not_duplicates() -> None:
    # the writer's dedup guard and consolidation's merge guard: a non-None verdict keeps both texts
    v = HeuristicConflictJudge().hard_conflict("note 2 about 项目进度 2", "note 1 about 项目进度 1")
    assert v is not None and v.relation == "compatible"


@pytest.mark.parametrize(
    ("template", "n"),
    [("note {i} about 项目进度 {i}", 50), ("fact number {i} about topic {j}", 300)],
)
def test_bug_templates_stay_distinct_and_active(template: str, n: int) -> None:
    # the clock is a year on: every timestamp below is in the past (future ones are refused)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0 + timedelta(days=365))
    try:
        texts = [template.format(i=i, j=i % 7) for i in range(n)]
        actions = [
            mem.remember("u", t, importance=0.7, category="fact", timestamp=T0 + timedelta(minutes=i)).action
            for i, t in enumerate(texts)
        ]
        assert actions == ["added"] * n
        active = {r.content for r in mem.list_memories("u", filter=MemoryFilter())}
        assert active == set(texts)
        assert [r for r in mem.review_queue("u") if r.action == "superseded"] == []
    finally:
        mem.close()


def test_a_real_update_through_remember_still_supersedes() -> None:
    # the clock is a year on: every timestamp below is in the past (future ones are refused)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0 + timedelta(days=365))
    try:
        mem.remember("u", "I have 2 cats", importance=0.7, category="fact", timestamp=T0)
        out = mem.remember("u", "I have 3 cats", importance=0.7, category="fact", timestamp=T0 + timedelta(days=1))
        assert out.action == "superseded"
        assert [r.content for r in mem.list_memories("u", filter=MemoryFilter())] == ["I have 3 cats"]
    finally:
        mem.close()
