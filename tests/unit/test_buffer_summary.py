"""Incremental session summaries: the numbers/negations/names check, regeneration, fallbacks,
and summaries stored as superseding ``summary`` memories by the facade."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.errors import ConfigurationError
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.summary import SessionSummarizer, check_summary, critical_items

T0 = datetime(2025, 6, 2, 9, tzinfo=timezone.utc)


def test_check_compares_numbers_by_value_across_scripts() -> None:
    assert check_summary("预算 5,000 元", ["预算五千元"]).ok
    assert check_summary("budget 5000", ["预算5000元"]).ok
    missing = check_summary("预算四千元", ["预算五千元"])
    assert missing.missing_numbers == [5000.0] and not missing.ok


def test_check_counts_negations_per_source_and_kind() -> None:
    src = ["不要放香菜", "I never drink milk", "除了周一都可以", "unless it rains"]
    good = "User: no coriander; never drinks milk; any day except Monday, unless it rains."
    assert check_summary(good, src).ok
    lost = check_summary("User likes coriander and milk; any day is fine.", src)
    assert lost.missing_negations == {"negation": 2, "except": 1, "unless": 1}
    assert "negation ×2 (不要/not/never)" in lost.missing


def test_check_keeps_names() -> None:
    items = critical_items("我叫王小明，我的猫叫咪咪，最近在读《三体》。Yesterday I met Dr Chen in Lisbon.")
    assert {"王小明", "咪咪", "三体", "Dr Chen", "Lisbon"} <= items["names"]
    assert check_summary("王小明 reads 三体; cat 咪咪; met Dr Chen in Lisbon", ["我叫王小明", "猫叫咪咪"]).ok
    assert check_summary("The user reads sci-fi.", ["我叫王小明"]).missing_names == ["王小明"]


def test_extractive_summary_without_a_model_keeps_informative_user_turns() -> None:
    s = SessionSummarizer()
    res = s.summarize(
        "我住在上海。",
        ["哈哈好的", "我的预算不能超过3000元", "今天天气真好啊", "You should try the tea."],
        roles=["user", "user", "user", "assistant"],
    )
    # small talk and assistant turns are skipped; the previous summary leads
    assert res.text.splitlines() == ["我住在上海。", "我的预算不能超过3000元"]
    assert res.check.ok and res.attempts == 0 and not s.uses_llm


def test_extractive_summary_is_capped_dropping_the_oldest() -> None:
    s = SessionSummarizer(max_chars=80)
    turns = ["I really love hiking in the mountains", "I enjoy cooking spicy food", "I prefer quiet cafés"]
    res = s.summarize(None, turns)
    assert res.text.splitlines() == ["I enjoy cooking spicy food", "I prefer quiet cafés"]
    assert not res.kept_originals and res.check.ok


def test_the_check_beats_the_cap() -> None:
    turns = [f"My locker number {i} is important, remember it." for i in range(5)]
    res = SessionSummarizer(max_chars=60).summarize(None, turns)
    assert res.kept_originals and res.check.ok  # capping lost numbers: the originals came back
    assert all(t in res.text for t in turns)


def test_llm_summary_is_regenerated_when_the_check_fails() -> None:
    llm = FakeListChatModel(
        responses=[
            "The user has a budget and dislikes something.",
            "Budget must not exceed 3000 yuan; does not eat coriander.",
        ]
    )
    res = SessionSummarizer(llm).summarize(None, ["预算不能超过3000元", "我不吃香菜"])
    assert res.attempts == 2 and res.check.ok and not res.kept_originals
    assert res.text == "Budget must not exceed 3000 yuan; does not eat coriander."


def test_llm_summary_keeps_the_originals_when_it_keeps_failing() -> None:
    llm = FakeListChatModel(responses=["The user likes food.", "The user likes food a lot."])
    res = SessionSummarizer(llm, max_attempts=2).summarize("Lives in Leeds.", ["I never eat pork", "I have 2 cats"])
    assert res.kept_originals and res.attempts == 2 and res.check.ok
    assert res.text.splitlines() == [
        "The user likes food a lot.",
        "Lives in Leeds.",
        "I never eat pork",
        "I have 2 cats",
    ]


def test_llm_failure_falls_back_to_extractive_and_says_so() -> None:
    class Down(FakeListChatModel):
        def _call(self, *a: Any, **k: Any) -> str:
            raise ConnectionError("down")

    res = SessionSummarizer(Down(responses=["x"])).summarize(None, ["I have 2 cats named Tom and Jerry"])
    assert res.fallback_reason == "summary model failed: ConnectionError: down; extractive summary used"
    assert res.text == "I have 2 cats named Tom and Jerry" and res.check.ok


def test_messages_include_previous_summary_and_feedback() -> None:
    msgs = SessionSummarizer.messages("Lives in Leeds.", ["I have 2 cats"], feedback="number 2")
    assert "PREVIOUS SUMMARY:\nLives in Leeds." in msgs[1][1] and msgs[1][1].endswith("lost: number 2. Include them.")
    with pytest.raises(ConfigurationError):
        SessionSummarizer(max_attempts=0)


async def test_async_summary() -> None:
    res = await SessionSummarizer().asummarize(None, ["I never fly before 8am"])
    assert res.text == "I never fly before 8am"


def test_facade_writes_summaries_every_n_turns_as_a_version_chain() -> None:
    cfg = HybridMemoryConfig(buffer={"summary_every": 3})
    mem = HybridMemory(
        store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, summarizer=SessionSummarizer()
    )
    said = [
        "I live in Leeds",
        "haha ok",
        "my budget is at most 900 pounds",
        "I never work on Sundays",
        "thanks!",
        "my daughter Mia is 7",
    ]
    for i, text in enumerate(said):
        mem.add_turn("eve", "s1", "user", text, timestamp=T0 + timedelta(minutes=i))
    assert mem.flush(timeout=10)
    summaries = [r for r in mem.list_memories("eve") if r.category == "summary"]
    assert [r.status for r in summaries] == ["superseded", "active"]
    first, second = summaries
    assert second.supersedes == first.id and first.superseded_by == second.id and second.version == 2
    turn_ids = [t.id for t in mem.short_term("eve", "s1")]
    assert second.provenance == tuple(turn_ids) and first.provenance == tuple(turn_ids[:3])
    assert "900" in second.content and "never" in second.content and "Mia" in second.content
    assert mem.session_summary("eve", "s1") == second.content
    active = mem.list_memories("eve", filter=MemoryFilter(categories=("summary",)))
    assert [r.id for r in active] == [second.id]
    mem.close()


def test_end_session_summarises_the_rest() -> None:
    cfg = HybridMemoryConfig(buffer={"summary_every": 6})
    mem = HybridMemory(
        store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, summarizer=SessionSummarizer()
    )
    mem.add_turn("fay", "s1", "user", "I am training for the Berlin marathon", timestamp=T0)
    mem.end_session("fay", "s1")
    assert mem.flush(timeout=10)
    [s] = [r for r in mem.list_memories("fay") if r.category == "summary"]
    assert s.content == "I am training for the Berlin marathon" and s.metadata["summary_of"] == "s1"
    mem.close()
