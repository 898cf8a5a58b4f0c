"""Traces: what each add_turn / recall / build_context did, replay, JSON export, privacy."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.errors import ConfigurationError, InvalidInputError, StoreUnavailableError
from hybrid_memory.observe.trace import TraceStep, TraceStore, default_trace_path, format_steps
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
PHONE = "13812345678"


def _file_bytes(path: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            data += p.read_bytes()
    return data


def _mem(path: Path, **kw: object) -> HybridMemory:
    return HybridMemory(
        store=LocalStore(path),
        embedder=HashingEmbedder(),
        clock=lambda: T0,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def mem(db: Path) -> Iterator[HybridMemory]:
    m = _mem(db, trace=True)
    yield m
    m.close()


def test_tracing_is_off_by_default_and_replay_says_how_to_turn_it_on(db: Path) -> None:
    m = _mem(db)
    try:
        m.add_turn("alice", "s1", "user", "Remember: I like green tea", timestamp=T0)
        with pytest.raises(ConfigurationError, match="trace=True"):
            m.replay("s1")
    finally:
        m.close()
    assert not Path(str(db) + ".traces.sqlite").exists()


def test_trace_lives_beside_a_local_store_file(mem: HybridMemory, db: Path) -> None:
    assert default_trace_path(mem.store) == f"{db}.traces.sqlite"
    mem.add_turn("alice", "s1", "user", "Remember: I like green tea", timestamp=T0)
    assert Path(f"{db}.traces.sqlite").exists()
    assert default_trace_path(LocalStore(":memory:")) == ":memory:"


def test_add_turn_step_has_turn_window_writes_and_redacts_pii(mem: HybridMemory, db: Path) -> None:
    mem.add_turn("alice", "s1", "user", "hello there", timestamp=T0)
    mem.add_turn("alice", "s1", "user", f"Remember: my phone is {PHONE}, I hate cilantro", timestamp=T0)
    steps = mem.replay("s1")
    assert [s.kind for s in steps] == ["add_turn", "add_turn"]
    second = steps[1]
    assert second.user_id == "alice" and second.session_id == "s1"
    assert second.turn is not None and second.turn.key_frame is True
    assert second.turn.content == "Remember: my phone is [PHONE], I hate cilantro"
    assert [t.content for t in second.short_term] == ["hello there", "Remember: my phone is [PHONE], I hate cilantro"]
    assert [w.action for w in second.writes] == ["added"]
    assert second.writes[0].content == "Remember: my phone is [PHONE], I hate cilantro"
    assert second.writes[0].reason is not None and "PII redacted" in second.writes[0].reason
    assert second.scorer == "heuristic" and second.scorer_fallback is None
    assert second.duration_ms >= 0 and second.at == T0
    assert steps[0].seq < steps[1].seq
    assert PHONE.encode() not in _file_bytes(Path(f"{db}.traces.sqlite"))


def test_build_context_step_shows_components_injected_and_budget_cuts(db: Path) -> None:
    cfg = HybridMemoryConfig(fuser={"max_memories": 1})
    m = _mem(db, trace=True, config=cfg)
    try:
        for text in ("Alice drinks green tea every morning", "Alice buys green tea in Hangzhou", "green tea matcha"):
            m.remember("alice", text, importance=0.8, timestamp=T0)
        ctx = m.build_context("green tea", user_id="alice", session_id="s9", now=T0 + timedelta(days=1))
        assert ctx.text and len(ctx.hits) == 1
        (step,) = m.replay("s9", user_id="alice")
        assert step.kind == "build_context" and step.query == "green tea"
        assert step.fused_text == ctx.text and step.token_count == ctx.token_count
        by_id = {c.id: c for c in step.candidates}
        injected = [c for c in step.candidates if c.outcome == "injected"]
        assert [c.id for c in injected] == [ctx.hits[0].id]
        hit = ctx.hits[0]
        c = by_id[hit.id]
        assert (c.score, c.relevance, c.keyword_score, c.vector_similarity, c.importance, c.recency, c.heat) == (
            hit.score,
            hit.relevance,
            hit.keyword_score,
            hit.vector_similarity,
            hit.importance,
            hit.recency,
            hit.heat,
        )
        dropped = {c.id: c.reason for c in step.candidates if c.outcome == "dropped"}
        assert dropped == dict(ctx.dropped)
        assert "over the count cap (1)" in dropped.values()
        assert len(step.candidates) == 3
    finally:
        m.close()


def test_skipped_injection_is_traced_with_its_reason(mem: HybridMemory) -> None:
    mem.remember("alice", "Alice owns a red bicycle", importance=0.5, timestamp=T0)
    ctx = mem.build_context("quantum chromodynamics lecture", user_id="alice", session_id="s2", now=T0)
    (step,) = mem.replay("s2")
    assert ctx.skipped and step.fused_text == ""
    assert step.skipped_reason == ctx.skipped_reason
    assert all(c.outcome == "dropped" and c.reason == "below the relevance floor" for c in step.candidates)


def test_recall_step_marks_returned_and_cut_and_has_no_session(mem: HybridMemory) -> None:
    for text in ("tea in the morning", "tea with milk", "tea from Yunnan"):
        mem.remember("alice", text, importance=0.5, timestamp=T0)
    hits = mem.recall("tea", user_id="alice", k=1, now=T0)
    steps = mem.replay(None, user_id="alice")
    recall = [s for s in steps if s.kind == "recall"]
    assert len(recall) == 1
    outcomes = [(c.id, c.outcome, c.reason) for c in recall[0].candidates]
    assert outcomes[0] == (hits[0].id, "returned", None)
    assert [o[1:] for o in outcomes[1:]] == [("cut", "below the top-k cut (k=1)")] * 2
    assert recall[0].params["k"] == 1
    with pytest.raises(InvalidInputError):
        mem.replay(None)


def test_recall_filtered_to_a_session_is_traced_under_that_session(mem: HybridMemory) -> None:
    mem.remember("alice", "tea in the morning", session_id="s5", timestamp=T0)
    mem.recall("tea", user_id="alice", filter=MemoryFilter(session_id="s5"), now=T0)
    kinds = [s.kind for s in mem.replay("s5", user_id="alice")]
    assert kinds == ["remember", "recall"]


def test_replay_separates_users_sharing_a_session_id(mem: HybridMemory) -> None:
    mem.add_turn("alice", "shared", "user", "Remember: alice likes tea", timestamp=T0)
    mem.add_turn("bob", "shared", "user", "Remember: bob likes coffee", timestamp=T0)
    assert {s.user_id for s in mem.replay("shared")} == {"alice", "bob"}
    only_bob = mem.replay("shared", user_id="bob")
    assert [s.turn.content for s in only_bob if s.turn] == ["Remember: bob likes coffee"]


def test_remember_many_and_end_session_steps_carry_write_outcomes(mem: HybridMemory) -> None:
    mem.add_turn("alice", "s3", "user", "the weather is nice today and we talked about lunch plans", timestamp=T0)
    mem.end_session("alice", "s3")
    mem.remember_many("alice", ["I own a cat called Miso", "I own a cat called Miso"])
    steps = mem.replay("s3")
    assert steps[-1].kind == "end_session"
    everything = mem.replay(None, user_id="alice")
    many = [s for s in everything if s.kind == "remember_many"]
    assert len(many) == 1 and many[0].params["items"] == 2
    assert [w.action for w in many[0].writes] == ["added", "deduplicated"]


def test_json_export_round_trips(mem: HybridMemory, tmp_path: Path) -> None:
    mem.add_turn("alice", "s1", "user", "Remember: I like 乌龙茶 without sugar", timestamp=T0)
    mem.build_context("乌龙茶", user_id="alice", session_id="s1", now=T0)
    steps = mem.replay("s1")
    again = [TraceStep.model_validate(json.loads(json.dumps(s.to_json_dict(), ensure_ascii=False))) for s in steps]
    assert again == steps
    ts = TraceStore(default_trace_path(mem.store))
    try:
        out = tmp_path / "s1.jsonl"
        with open(out, "w", encoding="utf-8") as fh:
            assert ts.export_jsonl(fh, session_id="s1") == 2
        lines = out.read_text(encoding="utf-8").splitlines()
        assert [TraceStep.model_validate(json.loads(x)) for x in lines] == steps
        assert "乌龙茶" in lines[0]
    finally:
        ts.close()


def test_forget_user_removes_steps_and_their_text_from_the_file(mem: HybridMemory, db: Path) -> None:
    mem.add_turn("alice", "s1", "user", "Remember: my secret island is Zanzibarquux", timestamp=T0)
    mem.build_context("Zanzibarquux", user_id="alice", session_id="s1", now=T0)
    mem.add_turn("bob", "s1", "user", "Remember: bob likes coffee", timestamp=T0)
    trace_file = Path(f"{db}.traces.sqlite")
    assert b"Zanzibarquux" in _file_bytes(trace_file)
    mem.forget_user("alice")
    assert mem.replay("s1", user_id="alice") == []
    assert [s.user_id for s in mem.replay("s1")] == ["bob"]
    assert b"Zanzibarquux" not in _file_bytes(trace_file)
    assert b"Zanzibarquux" not in _file_bytes(db)


def test_forget_one_memory_blanks_its_text_in_the_trace(mem: HybridMemory, db: Path) -> None:
    out = mem.remember("alice", "My locker code is Quokkavault", importance=0.9, session_id="s1", timestamp=T0)
    mem.remember("alice", "I like hiking", session_id="s1", timestamp=T0)
    mem.build_context("locker code Quokkavault", user_id="alice", session_id="s1", now=T0)
    assert out.record is not None
    assert mem.forget(out.record.id, user_id="alice")
    text = json.dumps([s.to_json_dict() for s in mem.replay("s1")], ensure_ascii=False)
    assert "Quokkavault" not in text.replace("locker code Quokkavault", "")  # the query itself stays
    assert "[forgotten]" in text and "I like hiking" in text
    cands = [c for s in mem.replay("s1") for c in s.candidates if c.id == out.record.id]
    assert cands and all(c.content == "[forgotten]" for c in cands)


def test_trace_survives_reopening_and_is_readable_by_another_connection(db: Path) -> None:
    m = _mem(db, trace=True)
    m.add_turn("alice", "s1", "user", "Remember: I like green tea", timestamp=T0)
    reader = TraceStore(f"{db}.traces.sqlite")
    try:
        assert [s.kind for s in reader.steps(session_id="s1")] == ["add_turn"]
        assert reader.sessions("alice")[0]["session_id"] == "s1"
        assert reader.users() == ["alice"] and reader.count("alice") == 1
    finally:
        reader.close()
    m.close()
    m2 = _mem(db, trace=True)
    try:
        m2.add_turn("alice", "s1", "user", "Remember: I also like oolong", timestamp=T0)
        assert len(m2.replay("s1")) == 2
    finally:
        m2.close()


def test_explicit_trace_path_config_path_and_shared_trace_store(tmp_path: Path) -> None:
    explicit = tmp_path / "elsewhere" / "t.sqlite"
    m = _mem(tmp_path / "a.db", trace=str(explicit))
    m.add_turn("u", "s", "user", "Remember: A", timestamp=T0)
    m.close()
    assert explicit.exists() and not Path(f"{tmp_path / 'a.db'}.traces.sqlite").exists()

    via_cfg = tmp_path / "cfg.sqlite"
    m = _mem(tmp_path / "b.db", config=HybridMemoryConfig(trace={"enabled": True, "path": str(via_cfg)}))
    m.add_turn("u", "s", "user", "Remember: B", timestamp=T0)
    assert [s.kind for s in m.replay("s")] == ["add_turn"]
    m.close()
    assert via_cfg.exists()

    shared = TraceStore(tmp_path / "shared.sqlite")
    m = _mem(tmp_path / "c.db", trace=shared)
    m.add_turn("u", "s", "user", "Remember: C", timestamp=T0)
    m.close()
    assert shared.count() == 1  # a TraceStore passed in is not closed by the memory
    shared.close()
    with pytest.raises(ConfigurationError):
        _mem(tmp_path / "d.db", trace=3.5)


def test_invalid_calls_are_not_traced(mem: HybridMemory) -> None:
    with pytest.raises(InvalidInputError):
        mem.recall("   ", user_id="alice")
    with pytest.raises(InvalidInputError):
        mem.add_turn("alice", "s1", "robot", "hi")
    assert mem.replay("s1", user_id="alice") == []
    assert mem.metrics().operations["recall"].errors == 1


def test_a_failing_store_call_is_traced_with_the_error(mem: HybridMemory) -> None:
    mem.remember("alice", "tea", session_id="s1", timestamp=T0)
    mem.store.close()
    with pytest.raises(StoreUnavailableError):
        mem.build_context("tea", user_id="alice", session_id="s1", now=T0)
    last = mem.replay("s1")[-1]
    assert last.kind == "build_context" and last.error is not None and "StoreUnavailableError" in last.error


def test_a_broken_trace_never_breaks_the_memory(tmp_path: Path) -> None:
    ts = TraceStore(tmp_path / "t.sqlite")
    m = _mem(tmp_path / "m.db", trace=ts)
    try:
        ts.close()
        turn = m.add_turn("alice", "s1", "user", "Remember: tea", timestamp=T0)
        assert turn.key_frame and m.store.count("alice") == 1
        snap = m.metrics()
        assert snap.trace_errors == 1 and snap.trace_steps == 0
    finally:
        m.close()


async def test_async_twins_are_traced_too(mem: HybridMemory) -> None:
    await mem.aadd_turn("alice", "s1", "user", "Remember: I like green tea", T0)
    await mem.abuild_context("green tea", user_id="alice", session_id="s1", now=T0)
    steps = await mem.areplay("s1")
    assert [s.kind for s in steps] == ["add_turn", "build_context"]


def test_background_writes_become_their_own_steps(mem: HybridMemory) -> None:
    from hybrid_memory.records import MemoryRecord

    draft = MemoryRecord.create(user_id="alice", content="extracted: likes tea", session_id="s7", timestamp=T0)
    # What the background extractor does after its LLM call: write drafts outside any facade call.
    mem._record(mem.writer.write([draft]))
    (step,) = mem.replay("s7")
    assert step.kind == "background_write"
    assert [(w.action, w.content) for w in step.writes] == [("added", "extracted: likes tea")]


def test_format_steps_reads_like_a_story(mem: HybridMemory) -> None:
    mem.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts", timestamp=T0)
    mem.add_turn("alice", "s1", "assistant", "ok", timestamp=T0)
    mem.build_context("peanuts", user_id="alice", session_id="s1", now=T0)
    text = format_steps(mem.replay("s1"))
    assert "#1 add_turn" in text and "key-frame" in text
    assert "short-term window (2 turns)" in text
    assert "candidates (1)" in text and "duplicates the short-term window" in text
    assert "nothing injected: every recalled memory is already in the short-term window" in text
    assert "write added: Remember: I am allergic to peanuts" in text


def test_max_candidates_caps_what_is_kept(db: Path) -> None:
    m = _mem(db, trace=True, config=HybridMemoryConfig(trace={"max_candidates": 2}))
    try:
        for w in ("morning", "Yunnan", "milk", "grandmother", "Hangzhou"):
            m.remember("alice", f"oolong tea and {w}", timestamp=T0)
        assert m.store.count("alice") == 5
        m.recall("oolong tea", user_id="alice", k=5, now=T0)
        (step,) = [s for s in m.replay(None, user_id="alice") if s.kind == "recall"]
        assert len(step.candidates) == 2
    finally:
        m.close()


def test_redaction_can_be_turned_off_for_traces(db: Path) -> None:
    # With the writer's redaction off, the trace keeps raw text only when told to.
    cfg = HybridMemoryConfig(trace={"redact_pii": False}, writer={"redact_pii": False})
    m = _mem(db, trace=True, config=cfg)
    try:
        m.add_turn("alice", "s1", "user", f"my number is {PHONE}", timestamp=T0)
        (step,) = m.replay("s1")
        assert step.turn is not None and PHONE in step.turn.content
    finally:
        m.close()


def test_text_redacted_at_the_door_is_redacted_in_traces_too(db: Path) -> None:
    # Redaction happens once when a turn enters: turning it off for traces cannot bring PII back.
    m = _mem(db, trace=True, config=HybridMemoryConfig(trace={"redact_pii": False}))
    try:
        m.add_turn("alice", "s1", "user", f"my number is {PHONE}", timestamp=T0)
        (step,) = m.replay("s1")
        assert step.turn is not None and step.turn.content == "my number is [PHONE]"
        assert PHONE not in m.short_term("alice", "s1")[0].content
    finally:
        m.close()


def test_calls_on_a_closed_memory_raise_without_trace_noise(db: Path, caplog: pytest.LogCaptureFixture) -> None:
    m = _mem(db, trace=True)
    m.add_turn("alice", "s1", "user", "Remember: tea", timestamp=T0)
    m.close()
    with pytest.raises(StoreUnavailableError):
        m.recall("tea", user_id="alice")
    assert not [r for r in caplog.records if r.name == "hybrid_memory.trace" or " step" in r.getMessage()]
    reader = TraceStore(f"{db}.traces.sqlite")
    try:
        assert [s.kind for s in reader.steps()] == ["add_turn"]
    finally:
        reader.close()


def test_put_is_traced_as_its_own_step(mem: HybridMemory) -> None:
    from hybrid_memory.records import MemoryRecord

    rec = MemoryRecord.create(user_id="alice", content="key-value note 13812345678", session_id="kv", timestamp=T0)
    out = mem.put(rec)
    (step,) = mem.replay("kv")
    assert step.kind == "put" and step.user_id == "alice"
    assert [(w.action, w.content) for w in step.writes] == [(out.action, "key-value note [PHONE]")]
    assert "record" not in step.params


@pytest.mark.parametrize("seed", [0, 1])
def test_delete_user_leaves_no_copy_in_pages_a_rebalance_rebuilt(tmp_path: Path, seed: int) -> None:
    """Steps of two users of varied sizes share pages: the victim's text is gone after its delete.

    The delete rebalances half-empty pages; SQLite rebuilds the pages that stay without clearing
    their unallocated gap, so without a rewrite a moved copy of a victim step (or its user id)
    stayed in the file (both seeds did on the base).
    """
    path = tmp_path / "shared-pages.traces.sqlite"
    canary, victim = "CANARY-91d3aa-rebalanced-step", "victim-e0c2b4"
    at = datetime(2025, 1, 1, tzinfo=timezone.utc)
    rng = random.Random(seed)
    ts = TraceStore(path)
    try:
        for i in range(2000):
            user = victim if rng.random() < 0.5 else "other"
            pad = "x" * rng.randint(0, 600)
            query = f"{canary} {i} {pad}" if user == victim else f"ordinary {i} {pad}"
            session = f"s{rng.randint(0, 5)}"
            ts.append(TraceStep(kind="recall", user_id=user, session_id=session, at=at, duration_ms=1.0, query=query))
        if seed:
            ts.delete_session(victim, "s1")
        assert ts.delete_user(victim) > 0
        assert ts.steps(user_id=victim) == [] and ts.steps(user_id="other")
        left = b"".join(p.read_bytes() for p in tmp_path.iterdir())
        assert canary.encode() not in left and victim.encode() not in left
    finally:
        ts.close()
