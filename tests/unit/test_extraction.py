"""Fact extraction: the extractor's logic (fake chat models) and the facade's background path."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from pydantic import Field

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.errors import ConfigurationError, InvalidInputError
from hybrid_memory.llm_call import LLMCallPolicy
from hybrid_memory.records import Turn
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.extraction import BackgroundWorker, FactExtractor

T0 = datetime(2025, 2, 3, 10, tzinfo=timezone.utc)


def facts(*items: tuple[str, str, int, list[int]]) -> str:
    return json.dumps(
        {"memories": [{"content": c, "category": k, "importance": i, "source_turns": s} for c, k, i, s in items]}
    )


def turn(i: int, role: str, text: str, user: str = "u", session: str = "s") -> Turn:
    return Turn(
        id=f"{user}-{session}-{i}",
        user_id=user,
        session_id=session,
        role=role,  # type: ignore[arg-type]
        content=text,
        timestamp=T0 + timedelta(minutes=i),
    )


def test_keeps_only_grounded_user_memories_with_provenance() -> None:
    reply = facts(
        ("The user has a cat named Pixel.", "fact", 7, [0]),
        ("The user prefers aisle seats.", "preference", 8, [2, 1]),
        ("Cats are great pets.", "fact", 3, [1]),  # only the assistant said it
        ("Nothing.", "none", 1, [0]),
        ("The user has a cat named Pixel.", "fact", 7, [0]),  # repeated
        ("Ghost.", "fact", 5, [9]),  # no such turn
    )
    ex = FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode")
    ts = [
        turn(0, "user", "My cat is Pixel"),
        turn(1, "assistant", "Cats are great"),
        turn(2, "user", "I prefer aisle seats please"),
    ]
    res = ex.extract(ts)
    assert [(m.content, m.category, m.importance, m.provenance) for m in res.memories] == [
        ("The user has a cat named Pixel.", "fact", 0.7, ("u-s-0",)),
        ("The user prefers aisle seats.", "preference", 0.8, ("u-s-2",)),
    ]
    assert res.memories[1].timestamp == ts[2].timestamp
    assert res.dropped == [
        '"Cats are great pets." not stated by the user',
        '"Nothing." has category none',
        '"The user has a cat named Pixel." repeated',
        '"Ghost." not stated by the user',
    ]
    assert res.error is None and res.turn_ids == ("u-s-0", "u-s-1", "u-s-2")
    rec = res.memories[0].to_record()
    assert rec.source == "inferred" and rec.provenance == ("u-s-0",) and rec.metadata == {"extracted": True}


def test_model_failure_is_reported_not_raised() -> None:
    class Down(FakeListChatModel):
        def _call(self, *a: Any, **k: Any) -> str:
            raise ConnectionError("refused")

    waits: list[float] = []
    ex = FactExtractor(
        Down(responses=["x"]), method="json_mode", policy=LLMCallPolicy(max_retries=1, backoff=0.3, sleep=waits.append)
    )
    res = ex.extract([turn(0, "user", "I'm vegan"), turn(1, "user", "and I live in Rome"), turn(2, "user", "ok")])
    assert res.memories == [] and waits == [0.3]
    assert res.error == "extraction failed: ConnectionError: refused after 2 attempt(s)"


def test_input_checks() -> None:
    llm = FakeListChatModel(responses=["{}"])
    with pytest.raises(ConfigurationError):
        FactExtractor(llm, batch_turns=2)
    ex = FactExtractor(llm, method="json_mode")
    with pytest.raises(InvalidInputError):
        ex.extract([])
    with pytest.raises(InvalidInputError):
        ex.extract([turn(0, "user", "a", user="a"), turn(1, "user", "b", user="b")])


async def test_async_extract() -> None:
    ex = FactExtractor(FakeListChatModel(responses=[facts(("The user is 34.", "fact", 6, [0]))]), method="json_mode")
    res = await ex.aextract([turn(0, "user", "I'm 34"), turn(1, "user", "yes"), turn(2, "user", "really")])
    assert [m.content for m in res.memories] == ["The user is 34."]


def test_messages_show_roles_and_indexes() -> None:
    msgs = FactExtractor.messages([turn(0, "user", "hi  there"), turn(1, "assistant", "hello")])
    assert msgs[1][1] == "Turns:\n[0] user: hi there\n[1] assistant: hello"
    assert "Only what the user stated" in msgs[0][1]


class Gate(FakeListChatModel):
    """Blocks in the model call until released (to observe that add_turn does not wait for it)."""

    started: Any = None
    release: Any = None

    def _call(self, *a: Any, **k: Any) -> str:
        self.started.set()
        assert self.release.wait(10)
        return super()._call(*a, **k)


def test_background_extraction_is_off_the_hot_path_and_recallable_after_flush() -> None:
    reply = facts(("The user is allergic to shellfish.", "fact", 9, [1]))
    llm = Gate(responses=[reply], started=threading.Event(), release=threading.Event())
    ex = FactExtractor(llm, method="json_mode", batch_turns=3)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), extractor=ex)
    said = ["hey there, long day", "btw shellfish makes me really sick", "anyway what's for dinner"]
    for i, text in enumerate(said):
        mem.add_turn("ann", "s1", "user", text, timestamp=T0 + timedelta(minutes=i))
    assert llm.started.wait(5)  # the third turn filled a batch and the worker took it ...
    assert mem._sessions.worker.pending == 1  # ... while add_turn already returned
    llm.release.set()
    assert mem.flush(timeout=10)
    hits = mem.recall("shellfish allergy", user_id="ann", k=3, now=T0 + timedelta(hours=1))
    extracted = [h for h in hits if h.record.source == "inferred"]
    assert [h.content for h in extracted] == ["The user is allergic to shellfish."]
    turn_ids = [t.id for t in mem.short_term("ann", "s1")]
    assert extracted[0].record.provenance == (turn_ids[1],)
    assert any(o.record is not None and o.record.source == "inferred" for o in mem.write_log("ann"))
    mem.close()


def test_flush_extracts_partial_batches_and_end_session_too() -> None:
    replies = [facts(("The user lives in Porto.", "fact", 7, [0])), facts(("The user plays chess.", "fact", 5, [0]))]
    ex = FactExtractor(FakeListChatModel(responses=replies), method="json_mode", batch_turns=5)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), extractor=ex)
    mem.add_turn("bo", "s1", "user", "I live in Porto", timestamp=T0)
    assert mem.flush(timeout=10)
    mem.add_turn("bo", "s2", "user", "I play chess on Sundays", timestamp=T0)
    mem.end_session("bo", "s2")
    assert mem.flush(timeout=10)
    inferred = sorted(r.content for r in mem.list_memories("bo") if r.source == "inferred")
    assert inferred == ["The user lives in Porto.", "The user plays chess."]
    mem.close()


def test_failures_are_visible_and_forget_user_cancels_pending_writes() -> None:
    class Down(FakeListChatModel):
        def _call(self, *a: Any, **k: Any) -> str:
            raise ConnectionError("no route")

    ex = FactExtractor(Down(responses=["x"]), method="json_mode", batch_turns=3, policy=LLMCallPolicy(max_retries=0))
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), extractor=ex)
    for i in range(3):
        mem.add_turn("cy", "s", "user", f"I collect stamps from {1900 + i}", timestamp=T0 + timedelta(minutes=i))
    assert mem.flush(timeout=10)
    assert mem.background_errors == ["extraction failed: ConnectionError: no route after 1 attempt(s)"]

    reply = facts(("The user's PIN hint is blue.", "fact", 8, [0]))
    llm = Gate(responses=[reply], started=threading.Event(), release=threading.Event())
    mem2 = HybridMemory(
        store=LocalStore(":memory:"),
        embedder=HashingEmbedder(),
        extractor=FactExtractor(llm, method="json_mode", batch_turns=3),
    )
    for i in range(3):
        mem2.add_turn("dee", "s", "user", f"note {i}: my PIN hint is blue", timestamp=T0 + timedelta(minutes=i))
    assert llm.started.wait(5)
    mem2.forget_user("dee")  # while the extraction is in flight
    llm.release.set()
    assert mem2.flush(timeout=10)
    assert mem2.store.count("dee") == 0
    mem2.close()
    mem.close()


def test_background_worker_runs_in_order_and_closes() -> None:
    w = BackgroundWorker()
    seen: list[int] = []
    for i in range(20):
        w.submit(lambda i=i: seen.append(i))
    assert w.join(timeout=5) and seen == list(range(20))
    assert w.close(timeout=5)
    with pytest.raises(RuntimeError):
        w.submit(lambda: None)


# ------------------------------------------------------------------ grounding in the user's own words
def test_empty_echoed_and_unsupported_memories_are_dropped_with_reasons() -> None:
    reply = facts(
        ("记住！", "fact", 10, [0]),  # the cue alone: nothing to remember
        ("Extract long-term memories about the USER from the numbered conversation turns", "fact", 5, [0]),
        ("Mia est allergique à l'hæblère.", "fact", 9, [2]),  # hallucinated, not in the user's words
        ("用户对花生过敏", "fact", 10, [0]),
        ("The user's sister Mia is a nurse.", "fact", 6, [2]),
    )
    ex = FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode")
    ts = [
        turn(0, "user", "记住！我对花生过敏"),
        turn(1, "assistant", "好的，我记住了。Thought: the user has an allergy. Answer: noted"),
        turn(2, "user", "My sister Mia works as a nurse"),
    ]
    res = ex.extract(ts)
    assert [m.content for m in res.memories] == ["用户对花生过敏", "The user's sister Mia is a nurse."]
    assert res.dropped == [
        '"记住！" is empty of content',
        '"Extract long-term memories about the USER from the numbered conversation turns" copies the instruction',
        "\"Mia est allergique à l'hæblère.\" not supported by the user's words (1 of 6 key words)",
    ]


def test_a_memory_citing_only_the_assistants_words_is_not_grounded_by_them() -> None:
    # The assistant's ReAct text mentions the allergy; the user turn it also cites does not.
    reply = facts(("The user has a severe shellfish allergy", "fact", 9, [0, 1]))
    ex = FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode")
    ts = [
        turn(0, "user", "What should I cook tonight?"),
        turn(1, "assistant", "Thought: the user has a severe shellfish allergy. Action: search"),
        turn(2, "user", "ok"),
    ]
    res = ex.extract(ts)
    assert res.memories == []
    assert res.dropped == [
        '"The user has a severe shellfish allergy" not supported by the user\'s words (0 of 3 key words)'
    ]


def test_dropped_memories_are_visible_in_an_extract_trace_step(tmp_path: Any) -> None:
    reply = facts(("记住！", "fact", 10, [0]), ("用户对花生过敏", "fact", 10, [0]))
    mem = HybridMemory(
        store=LocalStore(":memory:"),
        embedder=HashingEmbedder(),
        extractor=FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode", batch_turns=3),
        clock=lambda: T0,
        trace=tmp_path / "t.sqlite",
    )
    try:
        for i, text in enumerate(["记住！我对花生过敏", "好的", "谢谢"]):
            mem.add_turn("u", "s", "user" if i != 1 else "assistant", text, timestamp=T0)
        assert mem.flush(timeout=30)
        (step,) = [s for s in mem.replay("s") if s.kind == "extract"]
        assert step.params == {"turns": 3, "kept": 1, "dropped": ['"记住！" is empty of content']}
        assert [r.content for r in mem.list_memories("u") if r.metadata.get("extracted")] == ["用户对花生过敏"]
    finally:
        mem.close()


# ------------------------------------------------------------------ the pending batch lives in the store
class Counting(FakeListChatModel):
    """A fake chat model that records the turn texts of every prompt it is asked."""

    prompts: list[str] = Field(default_factory=list)

    def _call(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append(str(messages))
        return super()._call(messages, stop, run_manager, **kwargs)


def extracting_memory(path: Any, llm: FakeListChatModel) -> HybridMemory:
    return HybridMemory(
        store=LocalStore(path),
        embedder=HashingEmbedder(),
        extractor=FactExtractor(llm, method="json_mode", batch_turns=3),
    )


def test_turns_a_stopped_process_left_unextracted_are_extracted_once_by_the_next(tmp_path: Any) -> None:
    path = tmp_path / "m.sqlite"
    first_llm = Counting(responses=["unused"])
    first = extracting_memory(path, first_llm)
    first.add_turn("u", "s", "user", "I keep bees on my roof", timestamp=T0)
    first.add_turn("u", "s", "assistant", "Lovely!", timestamp=T0)
    # ``first`` stops here (as if killed): the batch of 3 was never full; its turns stay pending in the log.
    reply = facts(("The user keeps bees on their roof.", "fact", 7, [0]), ("The user plays oboe.", "fact", 6, [2]))
    llm = Counting(responses=[reply, facts()])
    second = extracting_memory(path, llm)
    try:
        stored = second.add_turn("u", "s", "user", "I play the oboe", timestamp=T0)  # completes the batch
        assert second.flush(timeout=10)
        assert len(llm.prompts) == 1 and "bees" in llm.prompts[0] and "oboe" in llm.prompts[0]
        extracted = sorted(r.content for r in second.list_memories("u") if r.metadata.get("extracted"))
        assert extracted == ["The user keeps bees on their roof.", "The user plays oboe."]
        assert second.store.extracted_upto("u", "s") == stored.seq
        assert second.flush(timeout=10) and len(llm.prompts) == 1  # nothing pending: nothing asked again
        first.close()  # its flush finds the batch marked by ``second``
        assert first_llm.prompts == []
    finally:
        first.close()
        second.close()


def test_a_batch_another_process_marked_is_not_extracted_again(tmp_path: Any) -> None:
    path = tmp_path / "m.sqlite"
    reply = facts(("The user grows tomatoes.", "fact", 6, [0]))
    a_llm, b_llm = Counting(responses=[reply]), Counting(responses=[reply])
    a, b = extracting_memory(path, a_llm), extracting_memory(path, b_llm)
    try:
        a.add_turn("u", "s", "user", "I grow tomatoes", timestamp=T0)
        b.add_turn("u", "s", "user", "and basil too", timestamp=T0)  # one log, one pending batch
        a.add_turn("u", "s", "user", "in the garden", timestamp=T0)  # A claims the full batch
        assert a.flush(timeout=10) and b.flush(timeout=10)
        assert (len(a_llm.prompts), len(b_llm.prompts)) == (1, 0)
        assert [r.content for r in b.list_memories("u") if r.metadata.get("extracted")] == ["The user grows tomatoes."]
    finally:
        a.close()
        b.close()


def test_ending_a_session_extracts_its_rest_before_the_log_is_deleted(tmp_path: Any) -> None:
    reply = facts(("The user is moving to Oslo.", "fact", 8, [0]))
    llm = Counting(responses=[reply])
    mem = extracting_memory(tmp_path / "m.sqlite", llm)
    try:
        mem.add_turn("u", "s", "user", "I am moving to Oslo", timestamp=T0)
        mem.end_session("u", "s")
        assert mem.flush(timeout=10)
        assert len(llm.prompts) == 1 and "Oslo" in llm.prompts[0]
        assert mem.store.load_session("u", "s").count == 0 and mem.store.extracted_upto("u", "s") == 0
        assert [r.content for r in mem.list_memories("u") if r.metadata.get("extracted")] == [
            "The user is moving to Oslo."
        ]
    finally:
        mem.close()


def test_a_user_turn_that_is_agent_scaffolding_neither_states_nor_grounds_a_memory() -> None:
    # What SmolLM2-135M stored on the pollution benchmark's core path: it copied the Observation line
    # (sent with the user role by a ReAct loop) and glued the assistant's hallucination onto it.
    polluted = "Observation: LH1172 07:10 has aisle seats left. You mentioned you love red-eye flights."
    reply = facts(
        (polluted, "fact", 7, [4]),
        ("The user loves red-eye flights and LH1172 has aisle seats", "preference", 6, [1, 4]),
        ("The user prefers aisle seats", "preference", 7, [1, 4]),
    )
    ex = FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode")
    ts = [
        turn(0, "system", "You are a travel agent. Use the tools."),
        turn(1, "user", "I never fly at night and I prefer aisle seats."),
        turn(2, "assistant", "Thought: day flights only.\nAction: search_flights\nAction Input: LIS"),
        turn(3, "tool", "LH1172 departs 07:10, TP553 departs 22:40"),
        turn(4, "user", "Observation: LH1172 07:10 has aisle seats left."),
    ]
    res = ex.extract(ts)
    assert [(m.content, m.provenance) for m in res.memories] == [("The user prefers aisle seats", ("u-s-1",))]
    assert res.dropped[0] == f'"{polluted}" not stated by the user (cites only agent scaffolding)'
    assert res.dropped[1].startswith('"The user loves red-eye flights and LH1172 has aisle seats" not supported')
