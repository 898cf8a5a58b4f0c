"""Search context: the turn a memory answers is indexed for keyword search, never injected."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 1, 6, 9, tzinfo=timezone.utc)


def test_search_text_is_context_then_content() -> None:
    r = MemoryRecord.create(user_id="u", content="Pottery, on Sunday", context="Bob: what did you do?")
    assert r.search_text == "Bob: what did you do?\nPottery, on Sunday"
    assert MemoryRecord.create(user_id="u", content="x").search_text == "x"


@pytest.mark.parametrize("bad", ["   ", "a\x00b", "x" * 100_001])
def test_bad_context_is_a_typed_error(mem: HybridMemory, bad: str) -> None:
    with pytest.raises(InvalidInputError, match="context"):
        mem.remember("u", "fine content", context=bad)
    with pytest.raises(InvalidInputError, match="context"):
        mem.remember_many("u", [{"content": "fine content", "context": bad}])
    assert mem.store.count("u") == 0


def test_remember_many_context_makes_an_answer_findable_by_its_question(mem: HybridMemory) -> None:
    mem.remember_many(
        "u",
        [
            {"content": "Pottery, every Sunday since May", "context": "Which hobby did Melanie pick up?"},
            {"content": "The weather was rainy"},
        ],
    )
    hits = mem.recall("Melanie hobby", user_id="u", k=2, alpha=0.0)
    assert [h.content for h in hits] == ["Pottery, every Sunday since May"]
    assert hits[0].record.context == "Which hobby did Melanie pick up?"
    ctx = mem.build_context("what hobby does Melanie have on Sunday", user_id="u")
    assert "Pottery" in ctx.text and "Which hobby" not in ctx.text  # the context is never injected


def test_add_turn_indexes_each_turn_with_the_turn_before_it() -> None:
    # small buffer: turns get evicted and written; keep even low-importance turns
    cfg = HybridMemoryConfig(buffer={"max_tokens": 40}, writer={"turn_min_importance": 0.0})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)
    try:
        lines = [
            ("user", "Where did you travel in spring for the conference?"),
            ("assistant", "Lisbon, and the food there was wonderful"),
            ("user", "Did you try the custard tarts in the old bakery?"),
            ("assistant", "Yes, three of them every single morning"),
            ("user", "Anything else planned for the summer holidays?"),
        ]
        for i, (role, text) in enumerate(lines):  # two people talking: both sides may become memories
            m.add_turn("u", "s", role, text, timestamp=T0 + timedelta(minutes=i), long_term=True)
        m.end_session("u", "s")
        by_content = {r.content: r for r in m.list_memories("u")}
        assert by_content["Lisbon, and the food there was wonderful"].context == lines[0][1]
        assert by_content["Yes, three of them every single morning"].context == lines[2][1]
        assert by_content[lines[0][1]].context == ""  # the first turn of the session has none
        # the answer is found by the words of the question it answers (BM25 only: alpha 0)
        found = {h.content for h in m.recall("custard tarts bakery", user_id="u", k=5, alpha=0.0)}
        assert found == {lines[2][1], lines[3][1]}
        assert (
            m._sessions.cached() == [] and m.store.load_session("u", "s").count == 0
        )  # the ended session's log is gone
    finally:
        m.close()


def test_a_new_session_starts_without_context() -> None:
    cfg = HybridMemoryConfig(buffer={"max_tokens": 16})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)
    try:
        m.add_turn("u", "s1", "user", "first session closing words about gardening", timestamp=T0)
        m.end_session("u", "s1")
        m.add_turn("u", "s2", "user", "second session opening words about sailing", timestamp=T0)
        m.end_session("u", "s2")
        second = [r for r in m.list_memories("u") if "sailing" in r.content]
        assert second and second[0].context == ""
    finally:
        m.close()


def test_pii_in_context_is_redacted_before_storage(mem: HybridMemory) -> None:
    out = mem.remember("u", "Sure, I will call you back", context="Call me at 13812345678 or bob@example.com")
    assert out.record is not None
    stored = mem.store.get("u", [out.record.id])[0]
    assert "13812345678" not in stored.context and "bob@example.com" not in stored.context
    assert "[PHONE]" in stored.context and out.reason is not None and "context:" in out.reason
    raw = SearchRequest(user_id="u", query="13812345678", vector=None, alpha=0.0)
    assert mem.store.search(raw) == []  # the number is in no index


def test_forget_user_drops_buffered_contexts(mem: HybridMemory) -> None:
    mem.add_turn("u", "s", "user", "my secret hobby is lock picking", timestamp=T0)
    mem.add_turn("u", "s", "assistant", "interesting, tell me more", timestamp=T0)
    assert mem._sessions.cached() and mem.store.load_session("u", "s").count == 2
    mem.forget_user("u")
    assert mem._sessions.cached() == [] and mem.store.load_session("u", "s").count == 0
    assert mem.short_term("u", "s") == []


def test_by_default_only_what_the_user_said_becomes_a_memory() -> None:
    cfg = HybridMemoryConfig(writer={"turn_min_importance": 0.0})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)
    try:
        said = [
            ("user", "I am vegetarian and I live in Lyon"),
            ("assistant", "Noted: vegetarian, Lyon. I will remember that."),
            ("tool", "weather(Lyon) = 12C"),
            ("user", "Observation: the recipe contains peanuts"),  # ReAct scaffolding in a user message
            ("user", "Remember that my sister is called Ana"),
        ]
        turns = [
            m.add_turn("u", "s", role, text, timestamp=T0 + timedelta(minutes=i)) for i, (role, text) in enumerate(said)
        ]
        assert [t.role for t in turns] == [r for r, _ in said]  # every turn is in the session's log
        assert m.store.load_session("u", "s").count == len(said)
        m.end_session("u", "s")
        kept = sorted(r.content for r in m.list_memories("u"))
        assert kept == ["I am vegetarian and I live in Lyon", "Remember that my sister is called Ana"]
    finally:
        m.close()


def test_a_memory_is_not_injected_on_the_words_of_its_context_alone(mem: HybridMemory) -> None:
    """Issue 17: the floor's keyword part counts only a query term in the memory's own text."""
    mem.remember_many(
        "u",
        [
            {"content": "Sure, see you there at seven", "context": "Shall we meet at the pottery studio?"},
            *({"content": f"Unrelated note number {i} about the garden"} for i in range(4)),
        ],
    )
    hits = mem.recall("pottery studio", user_id="u", k=3, touch=False)
    assert hits[0].content == "Sure, see you there at seven"  # found through its context, as it should be
    assert hits[0].keyword_score is not None and hits[0].keyword_score >= mem.config.fuser.min_keyword_score
    assert (hits[0].vector_similarity or 0.0) < mem.fuser.min_similarity
    ctx = mem.build_context("pottery studio", user_id="u")
    assert ctx.skipped and ctx.text == ""
    # The same words in the memory itself do clear the floor.
    mem.remember("u", "The pottery studio moved to Rue Neuve")
    assert "The pottery studio moved to Rue Neuve" in mem.build_context("pottery studio", user_id="u").text


LONG_REPLY = (
    "Great question! Sourdough needs a lively starter, so feed it twice a day, keep it somewhere warm, and use "
    "bread flour with a little rye. Let the dough rest overnight in the fridge, then bake it in a hot Dutch oven "
    "for about forty minutes. "
    "By the way, what did you end up doing with the old wooden bookshelf in your hallway last weekend?"
)


def _user_turn_after(reply: str, answer: str, **writer: object) -> HybridMemory:
    cfg = HybridMemoryConfig(writer={"turn_min_importance": 0.0, **writer})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)
    m.add_turn("u", "s", "assistant", reply, timestamp=T0)
    m.add_turn("u", "s", "user", answer, timestamp=T0 + timedelta(minutes=1))
    return m


def test_add_turn_keeps_the_end_of_a_long_previous_turn_as_context() -> None:
    answer = "I painted it blue and moved it to the study"
    m = _user_turn_after(LONG_REPLY, answer)
    try:
        assert m.config.writer.context_words == 45
        (rec,) = m.list_memories("u")
        words = LONG_REPLY.split()
        assert rec.context == " ".join(words[-45:]) and len(words) > 45
        # the end of the reply, the question the user answers, still finds the answer by keywords ...
        assert [h.content for h in m.recall("wooden bookshelf hallway", user_id="u", alpha=0.0)] == [answer]
        # ... the start of the reply, about something else, no longer does
        assert m.recall("sourdough lively starter", user_id="u", alpha=0.0) == []
    finally:
        m.close()
    whole = _user_turn_after(LONG_REPLY, answer, context_words=None)
    try:
        assert whole.list_memories("u")[0].context == LONG_REPLY
        assert [h.content for h in whole.recall("sourdough lively starter", user_id="u", alpha=0.0)] == [answer]
    finally:
        whole.close()


def test_a_cjk_character_counts_as_one_word_of_context() -> None:
    reply = "今天天气很好，" * 10 + "你周末去哪里爬山了？"  # 80 characters
    m = _user_turn_after(reply, "我们去了黄山，风景特别美", context_words=12)
    try:
        # 好 ， 你 周 末 去 哪 里 爬 山 了 ？: a full-width mark standing alone is a word as well
        assert m.list_memories("u")[0].context == "好，你周末去哪里爬山了？"
    finally:
        m.close()


def test_a_forgotten_turn_leaves_no_byte_on_disk_through_the_next_memorys_context(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    mem = HybridMemory(LocalStore(db), embedder=HashingEmbedder())
    try:
        mem.add_turn("u", "s", "user", "Remember: my locker code is Quokka-7731")
        mem.add_turn("u", "s", "user", "Remember: I swim every Tuesday")
        [secret] = [r for r in mem.list_memories("u") if "Quokka" in r.content]
        [swim] = [r for r in mem.list_memories("u") if "swim" in r.content]
        assert "Quokka-7731" in swim.context  # the turn before it, as add_turn indexes it
        assert mem.forget(secret.id, user_id="u")
        assert mem.get(swim.id, user_id="u").context == ""
        raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(db.name))
        assert b"Quokka" not in raw  # the store file and its WAL, while the memory is open
    finally:
        mem.close()
    assert b"Quokka" not in db.read_bytes()
