"""The HybridMemory facade with the real LocalStore and a fast lexical embedder."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore, MemoryFilter
from hybrid_memory.errors import EmbeddingDimensionError, InvalidInputError, NotFoundError, StoreUnavailableError
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 1, 6, 9, tzinfo=timezone.utc)


def test_remember_is_recallable_at_once_and_isolated(mem: HybridMemory) -> None:
    out = mem.remember("alice", "Alice's cat is called Miso", importance=0.8, tags=("pets",), metadata={"src": "chat"})
    assert out.action == "added" and out.record is not None
    hits = mem.recall("what is the cat called", user_id="alice", k=3)
    assert [h.content for h in hits] == ["Alice's cat is called Miso"]
    assert hits[0].record.metadata == {"src": "chat"} and hits[0].record.tags == ("pets",)
    assert mem.recall("what is the cat called", user_id="bob") == []


def test_alpha_zero_stays_pure_bm25_and_one_pure_vector(mem: HybridMemory) -> None:
    mem.remember_many("u", ["green tea every morning", "coffee after lunch", "running on sundays"])
    bm25 = mem.recall("green tea", user_id="u", k=3, alpha=0.0)
    assert bm25[0].content == "green tea every morning"
    assert all(h.keyword_score is not None for h in bm25)  # only the keyword leg ran
    vec = mem.recall("green tea", user_id="u", k=3, alpha=1.0)
    assert len(vec) == 3 and vec[0].vector_similarity is not None


@pytest.mark.parametrize(
    "bad", [{"k": 0}, {"k": -1}, {"k": 1001}, {"k": True}, {"alpha": -0.1}, {"alpha": 1.5}, {"alpha": float("nan")}]
)
def test_bad_recall_arguments_are_typed_errors(mem: HybridMemory, bad: dict[str, object]) -> None:
    mem.remember("u", "something to find")
    with pytest.raises(InvalidInputError):
        mem.recall("find", user_id="u", **bad)  # type: ignore[arg-type]


def test_remember_many_validates_everything_before_writing(mem: HybridMemory) -> None:
    with pytest.raises(InvalidInputError, match="item 1"):
        mem.remember_many("u", ["fine", "", "also fine"])
    with pytest.raises(InvalidInputError, match="naive"):
        mem.remember_many("u", [{"content": "x", "timestamp": datetime(2024, 1, 1)}])
    with pytest.raises(InvalidInputError, match="unknown memory fields"):
        mem.remember_many("u", [{"content": "x", "colour": "red"}])
    assert mem.store.count("u") == 0


def test_remember_many_batches_and_keeps_order(mem: HybridMemory) -> None:
    items = [
        {"content": f"{w} is a word I learned", "metadata": {"i": i}, "timestamp": T0 - timedelta(minutes=25 - i)}
        for i, w in enumerate(
            [
                "apple",
                "bridge",
                "candle",
                "dolphin",
                "engine",
                "forest",
                "garden",
                "harbor",
                "island",
                "jungle",
                "kettle",
                "lantern",
                "meadow",
                "needle",
                "orchard",
                "pepper",
                "quartz",
                "river",
                "saddle",
                "tunnel",
                "umbrella",
                "violin",
                "walrus",
                "yogurt",
                "zebra",
            ]
        )
    ]
    outcomes = mem.remember_many("u", items, batch_size=7)
    assert [o.action for o in outcomes] == ["added"] * 25
    assert [o.record.metadata["i"] for o in outcomes if o.record] == list(range(25))
    assert mem.store.count("u") == 25


def test_add_turn_pins_key_frames_and_writes_them_at_once(mem: HybridMemory) -> None:
    t = mem.add_turn("u", "s1", "user", "Remember: my passport number expires in March 2027", timestamp=T0)
    chit = mem.add_turn("u", "s1", "user", "haha ok", timestamp=T0)
    assert t.key_frame and not chit.key_frame
    assert (t.key_frame_reason, chit.key_frame_reason) == ("remember", None)
    assert [x.id for x in mem.short_term("u", "s1")] == [t.id, chit.id]
    stored = mem.list_memories("u")
    assert [m.content for m in stored] == [t.content]
    assert stored[0].provenance == (t.id,) and stored[0].metadata["turn_id"] == t.id


def test_stated_goals_are_pinned_and_small_talk_is_not_kept(mem: HybridMemory) -> None:
    goal = mem.add_turn("u", "s1", "user", "我的目标是年底前减重5公斤。", timestamp=T0)
    hi = mem.add_turn("u", "s1", "user", "Hi there!", timestamp=T0)
    thanks = mem.add_turn("u", "s1", "user", "好的，谢谢", timestamp=T0)
    assert goal.key_frame and goal.key_frame_reason == "goal"
    assert not hi.key_frame and not thanks.key_frame
    mem.end_session("u", "s1")
    assert [m.content for m in mem.list_memories("u")] == [goal.content]


def test_turn_log_is_durable_window_bounded_and_turn_ids_unique() -> None:
    cfg = HybridMemoryConfig(buffer={"max_tokens": 40})  # type: ignore[arg-type]
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)
    ids = set()
    for i in range(120):
        turn = m.add_turn(
            "u", "s", "user", f"Remember that item {i} is important to me", timestamp=T0 + timedelta(seconds=i)
        )
        ids.add(turn.id)
    assert len(ids) == 120
    window = m.short_term("u", "s")
    assert sum(t.tokens for t in window) <= 40 and len(window) < 120
    log = m.store.load_session("u", "s")
    assert [t.id for t in log.turns[-len(window) :]] == [t.id for t in window] or {t.id for t in window} <= {
        t.id for t in log.turns
    }
    assert log.count == 120 and [t.seq for t in log.turns] == sorted(t.seq for t in log.turns)
    m.clear_session("u", "s")
    assert m.short_term("u", "s") == [] and m.store.load_session("u", "s").count == 0
    again = m.add_turn("u", "s", "user", "a new turn after clearing", timestamp=T0)
    assert again.id not in ids
    m.close()


def test_end_session_flushes_the_buffer(mem: HybridMemory) -> None:
    mem.add_turn("u", "s1", "user", "I moved to Lisbon last spring", timestamp=T0)
    mem.add_turn("u", "s1", "assistant", "Lisbon is lovely in spring", timestamp=T0)
    before = mem.store.count("u")
    outcomes = mem.end_session("u", "s1")
    assert mem.short_term("u", "s1") == []
    assert mem.store.count("u") == before + sum(o.action == "added" for o in outcomes)
    assert any("Lisbon" in h.content for h in mem.recall("where do I live", user_id="u", k=5))


def test_build_context_skips_what_the_window_already_has(mem: HybridMemory) -> None:
    mem.remember("u", "I am allergic to peanuts", importance=0.9, timestamp=T0)
    mem.add_turn("u", "s2", "user", "I am allergic to peanuts", timestamp=T0)
    ctx = mem.build_context("peanuts in the sauce?", user_id="u", session_id="s2", now=T0)
    assert "allergic to peanuts" not in ctx.text
    fresh = mem.build_context("peanuts in the sauce?", user_id="u", session_id="other", now=T0)
    assert "allergic to peanuts" in fresh.text and not fresh.skipped


def test_recall_is_a_read_and_injection_counts_as_use(mem: HybridMemory) -> None:
    mem.remember("u", "favourite colour is teal")
    mem.recall("colour", user_id="u")
    assert mem.list_memories("u")[0].access_count == 0
    mem.recall("colour", user_id="u", touch=True)
    assert mem.list_memories("u")[0].access_count == 1
    ctx = mem.build_context("what is my favourite colour", user_id="u")
    assert ctx.hits and mem.list_memories("u")[0].access_count == 2


def test_filters_and_archived(mem: HybridMemory) -> None:
    mem.remember("u", "book flight to Oslo", category="project", tags=("travel",), timestamp=T0 - timedelta(days=2))
    mem.remember("u", "likes window seats on flights", category="preference", timestamp=T0)
    only_pref = mem.recall("flight", user_id="u", filter=MemoryFilter(categories=("preference",)))
    assert [h.record.category for h in only_pref] == ["preference"]
    since = mem.recall("flight", user_id="u", filter=MemoryFilter(since=T0 - timedelta(days=1)))
    assert [h.content for h in since] == ["likes window seats on flights"]
    tagged = mem.recall("flight", user_id="u", filter=MemoryFilter(tags=("travel",)))
    assert [h.content for h in tagged] == ["book flight to Oslo"]


def test_forget_and_forget_user(mem: HybridMemory) -> None:
    a = mem.remember("u", "one thing").record
    mem.remember("u", "another thing")
    mem.remember("v", "one thing")
    assert a is not None
    assert mem.forget(a.id, user_id="v") is False  # ids are scoped by user
    assert mem.forget(a.id, user_id="u") is True
    with pytest.raises(NotFoundError):
        mem.get(a.id, user_id="u")
    assert mem.forget_user("u") == 1
    assert mem.store.count("u") == 0 and mem.store.count("v") == 1


def test_embedder_of_another_dimension_is_refused() -> None:
    store = LocalStore(":memory:")
    HybridMemory(store=store, embedder=HashingEmbedder(dim=64)).remember("u", "hello there")
    with pytest.raises(EmbeddingDimensionError, match="64") as info:
        HybridMemory(store=store, embedder=HashingEmbedder(dim=32))
    assert "32" in str(info.value) and "reembed" in str(info.value)


def test_closed_memory_refuses_work() -> None:
    with HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder()) as m:
        m.remember("u", "x y z")
    with pytest.raises(StoreUnavailableError):
        m.recall("x", user_id="u")


async def test_async_twins() -> None:
    async with HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0) as m:
        await m.aremember("u", "async memories work too", importance=0.7)
        await m.aadd_turn("u", "s", "user", "Remember: meeting at 10am Tuesday")
        hits = await m.arecall("memories async", user_id="u", k=2)
        assert hits[0].content == "async memories work too"
        ctx = await m.abuild_context("when is the meeting", user_id="u", now=T0)
        assert "meeting at 10am" in ctx.text
        assert await m.aforget_user("u") == 2


async def test_count_memories_matches_list_memories_for_every_filter(mem: HybridMemory) -> None:
    from hybrid_memory.records import MemoryRecord

    mem.remember("alice", "Alice's cat is called Miso", importance=0.8)
    mem.remember("alice", "Alice plays the cello on Sundays", importance=0.8)
    old = MemoryRecord.create(user_id="alice", content="Alice lived in Lyon in 2019", id="old-1", timestamp=T0)
    mem.put(old.evolve(status="archived"))
    mem.remember("bob", "Bob collects stamps", importance=0.8)
    for flt in (None, MemoryFilter(), MemoryFilter(statuses=("archived",)), MemoryFilter(categories=("project",))):
        assert mem.count_memories("alice", filter=flt) == len(mem.list_memories("alice", filter=flt))
    assert (mem.count_memories("alice"), mem.count_memories("alice", filter=MemoryFilter())) == (3, 2)
    assert await mem.acount_memories("bob") == 1 and mem.count_memories("nobody") == 0
    with pytest.raises(InvalidInputError):
        mem.count_memories("")


def test_store_vectors_are_unit_norm(mem: HybridMemory) -> None:
    r = mem.remember("u", "unit norm check").record
    assert r is not None
    v = mem.store.get_vectors("u", [r.id])[r.id]
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5


def test_put_replaces_by_id_without_write_policy(mem: HybridMemory) -> None:
    from hybrid_memory.records import MemoryRecord

    r = MemoryRecord.create(user_id="u", content="call me on 13812345678", id="key-1", importance=0.0, timestamp=T0)
    first = mem.put(r)
    assert first.action == "added" and first.record is not None
    assert "13812345678" not in first.record.content  # PII is still redacted
    second = mem.put(r.evolve(content="the value changed"))
    assert second.action == "updated"
    assert mem.get("key-1", user_id="u").content == "the value changed"  # no dedup/gate/conflict
    assert mem.store.count("u") == 1
    assert mem.users() == ["u"]
    assert mem.now() == T0


def test_recall_touch_follows_the_config() -> None:
    cfg = HybridMemoryConfig(rerank={"touch_on_recall": True})  # type: ignore[arg-type]
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg)
    m.remember("u", "favourite colour is teal")
    m.recall("colour", user_id="u")
    m.recall("colour", user_id="u", touch=False)
    assert m.list_memories("u")[0].access_count == 1
    m.close()


def test_config_may_be_a_mapping_merged_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # pydantic-settings' rule: given values win over HYBRID_MEMORY_* variables, nested sections merge field by field.
    monkeypatch.setenv("HYBRID_MEMORY_RETRIEVAL__CANDIDATES", "50")
    monkeypatch.setenv("HYBRID_MEMORY_RETRIEVAL__ALPHA", "0.9")
    with HybridMemory(
        embedder=HashingEmbedder(), config={"retrieval": {"alpha": 0.0}, "fuser": {"max_memories": 2}}
    ) as m:
        assert isinstance(m.config, HybridMemoryConfig)
        assert m.config.retrieval.alpha == 0.0  # the mapping wins, and 0.0 stays 0.0 (pure BM25)
        assert m.config.retrieval.candidates == 50  # the rest of the section still comes from the environment
        assert m.config.fuser.max_memories == 2 and m.fuser.config.max_memories == 2
        assert m.config.rerank == HybridMemoryConfig().rerank
    cfg = HybridMemoryConfig(retrieval={"alpha": 0.3})  # type: ignore[arg-type]
    with HybridMemory(embedder=HashingEmbedder(), config=cfg) as m:
        assert m.config is cfg  # a built config is used as it is


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"retrieval": {"alpha": 1.5}}, r"retrieval\.alpha: Input should be less than or equal to 1"),
        ({"retreival": {"alpha": 0.5}}, r"retreival: Extra inputs are not permitted"),
        ({"retrieval": {"alfa": 0.5}}, r"retrieval\.alfa: Extra inputs are not permitted"),
        ({"buffer": "big"}, r"buffer: "),
        ({1: {}}, r"config keys must be setting names"),
        ("retrieval.alpha=0.5", r"config must be a HybridMemoryConfig, a mapping .* got str"),
        ([("retrieval", {"alpha": 0.5})], r"got list"),
    ],
)
def test_a_bad_config_is_a_configuration_error(config: object, message: str) -> None:
    from hybrid_memory.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        HybridMemory(embedder=HashingEmbedder(), config=config)  # type: ignore[arg-type]
