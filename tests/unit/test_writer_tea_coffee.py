"""The tea → coffee case with the offline defaults (real USE embedder + LocalStore) via add_turn."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.embeddings import Embedder
from hybrid_memory.stores.base import MemoryFilter

DAY1 = datetime(2025, 3, 3, 20, 0, tzinfo=timezone.utc)
DAY5 = DAY1 + timedelta(days=4)


def test_tea_then_coffee(default_embedder: Embedder) -> None:
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=default_embedder)
    mem.add_turn("alice", "day1", "user", "晚上好呀", timestamp=DAY1)
    tea_turn = mem.add_turn("alice", "day1", "user", "我喜欢喝茶", timestamp=DAY1 + timedelta(minutes=1))
    mem.add_turn("alice", "day1", "assistant", "好的，记住了，你喜欢喝茶。", timestamp=DAY1 + timedelta(minutes=2))
    mem.add_turn("alice", "day1", "user", "今天天气真好", timestamp=DAY1 + timedelta(minutes=3))
    assert tea_turn.key_frame

    coffee_turn = mem.add_turn("alice", "day5", "user", "我现在改喝咖啡了", timestamp=DAY5)
    assert coffee_turn.key_frame

    every = {r.content: r for r in mem.list_memories("alice", filter=None)}
    tea, coffee = every["我喜欢喝茶"], every["我现在改喝咖啡了"]
    # the coffee memory is active, the tea memory superseded and still inspectable
    assert coffee.status == "active" and coffee.supersedes == tea.id and coffee.version == tea.version + 1
    assert tea.status == "superseded" and tea.superseded_by == coffee.id
    assert mem.get(tea.id, user_id="alice").content == "我喜欢喝茶"
    [review] = [r for r in mem.review_queue("alice") if r.old_id == tea.id]
    assert review.action == "superseded" and "drink" in review.reason
    outcome = next(o for o in mem.write_log("alice") if o.record is not None and o.record.id == coffee.id)
    assert outcome.action == "superseded" and outcome.related_id == tea.id

    # recall for 饮品偏好 returns coffee first; tea is not offered as current
    hits = mem.recall("饮品偏好", user_id="alice", now=DAY5 + timedelta(hours=1))
    assert hits and hits[0].content == "我现在改喝咖啡了"
    assert "我喜欢喝茶" not in [h.content for h in hits]
    # a later session: the context offers coffee, and neither the old preference nor the
    # assistant's stale echo of it ("你喜欢喝茶"): the assistant's words never became a memory
    day6 = DAY5 + timedelta(days=1)
    ctx = mem.build_context("我平时喝什么？", user_id="alice", session_id="day6", now=day6)
    assert "我现在改喝咖啡了" in ctx.text
    assert "喜欢喝茶" not in ctx.text
    assert "好的，记住了，你喜欢喝茶。" not in every
    mem.close()


def test_tea_then_coffee_in_english(default_embedder: Embedder) -> None:
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=default_embedder)
    mem.add_turn("bob", "s1", "user", "I really like tea.", timestamp=DAY1)
    mem.add_turn("bob", "s2", "user", "I switched to coffee now, no more tea for me.", timestamp=DAY5)
    active = [r.content for r in mem.list_memories("bob", filter=MemoryFilter())]
    assert active == ["I switched to coffee now, no more tea for me."]
    hits = mem.recall("what does bob drink", user_id="bob", now=DAY5)
    assert hits[0].content.startswith("I switched to coffee")
    mem.close()
