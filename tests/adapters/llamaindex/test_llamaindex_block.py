"""HybridMemoryBlock inside a real ``llama_index.core.memory.Memory``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemoryBlock, Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from pydantic import ValidationError

from hybrid_memory import HybridMemory
from llamaindex_hybrid_memory import HybridMemoryBlock
from llamaindex_hybrid_memory.block import DEFAULT_SESSION_ID

MakeMemory = Callable[..., Memory]

FACTS = {
    "school": "My daughter Mia goes to school in Lyon.",
    "allergy": "Remember: Mia is allergic to peanuts.",
    "car": "We drive a blue Renault Zoe.",
}


def _conversation(facts: dict[str, str], filler_rounds: int = 8) -> list[ChatMessage]:
    """Facts first, then enough small talk to push them out of Memory's short-term queue."""
    out: list[ChatMessage] = []
    for text in facts.values():
        out.append(ChatMessage(role="user", content=text))
        out.append(ChatMessage(role="assistant", content=f"Understood: {text.lower()}"))
    for i in range(filler_rounds):
        out.append(ChatMessage(role="user", content=f"Tell me a short fact about the number {i + 10}."))
        out.append(ChatMessage(role="assistant", content=f"The number {i + 10} comes after {i + 9}."))
    return out


def _memory_text(messages: list[ChatMessage]) -> str:
    system = [m for m in messages if m.role == MessageRole.SYSTEM]
    return system[0].content or "" if system else ""


def test_is_a_string_memory_block(core: HybridMemory) -> None:
    block = HybridMemoryBlock(memory=core, user_id="alice")
    assert isinstance(block, BaseMemoryBlock)
    assert block.name == "long_term_memory"
    assert block.priority == 0 and block.accept_short_term_memory
    assert "memory" not in block.model_dump()
    with pytest.raises(ValidationError, match="user_id"):
        HybridMemoryBlock(memory=core, user_id="")


async def test_flushed_turns_reach_long_term_memory_and_come_back(
    core: HybridMemory, make_chat_memory: MakeMemory
) -> None:
    chat = make_chat_memory(
        session_id="monday",
        token_limit=120,
        token_flush_size=30,
        memory_blocks=[HybridMemoryBlock(memory=core, user_id="alice")],
    )
    await chat.aput_messages(_conversation(FACTS))

    archived = await chat.aget_all(status=MessageStatus.ARCHIVED)
    active = await chat.aget_all(status=MessageStatus.ACTIVE)
    assert archived and active
    archived_text = {m.content for m in archived}
    assert set(FACTS.values()) <= archived_text  # the facts left the short-term queue ...

    records = {r.content: r for r in core.list_memories("alice")}
    for text in FACTS.values():  # ... and reached long-term memory, with provenance
        r = records[text]
        assert r.session_id == "monday"
        assert r.metadata["role"] == "user" and r.source == "user"
        assert r.provenance and r.metadata["turn_id"] == r.provenance[0]
    assert all(r.session_id == "monday" for r in records.values())
    assert set(records) <= archived_text  # only flushed messages were written
    assert core.short_term("alice", "monday") == []  # the borrowed buffer is left empty

    # ... and come back through Memory.aget, fused into its system message.
    messages = await chat.aget(input="Where does Mia go to school?")
    block = _memory_text(messages)
    assert "<long_term_memory>" in block and "<memory-context>" in block
    assert FACTS["school"] in block
    assert messages[-len(active) :] == active  # the short-term queue follows, unchanged


async def test_other_users_and_sessions_never_see_each_other(core: HybridMemory, make_chat_memory: MakeMemory) -> None:
    alice = make_chat_memory(
        session_id="a1",
        token_limit=120,
        token_flush_size=30,
        memory_blocks=[HybridMemoryBlock(memory=core, user_id="alice")],
    )
    bob = make_chat_memory(
        session_id="b1",
        token_limit=120,
        token_flush_size=30,
        memory_blocks=[HybridMemoryBlock(memory=core, user_id="bob")],
    )
    await alice.aput_messages(_conversation(FACTS))
    await bob.aput_messages(_conversation({"pet": "Bob's dog Rex is afraid of thunder."}))

    assert "Rex" not in _memory_text(await alice.aget(input="Is Rex afraid of thunder?"))
    assert "Mia" not in _memory_text(await bob.aget(input="Where does Mia go to school?"))
    assert FACTS["school"] in _memory_text(await alice.aget(input="Where does Mia go to school?"))
    assert "Rex is afraid of thunder" in _memory_text(await bob.aget(input="Is Rex afraid of thunder?"))
    # Memory's own short-term queues are per session too.
    alice_history = {m.content for m in await alice.aget_all()}
    bob_history = {m.content for m in await bob.aget_all()}
    assert "Bob's dog Rex is afraid of thunder." in bob_history - alice_history
    assert set(FACTS.values()) <= alice_history - bob_history


async def test_one_block_shared_by_sessions_keeps_no_session_state(
    core: HybridMemory, make_chat_memory: MakeMemory
) -> None:
    """Regression test for the VectorMemoryBlock bug: its session filter, set by the first call, stuck."""
    block = HybridMemoryBlock(memory=core, user_id="alice", scope="session")
    before = block.model_dump()
    a = make_chat_memory(session_id="A", token_limit=120, token_flush_size=30, memory_blocks=[block])
    b = make_chat_memory(session_id="B", token_limit=120, token_flush_size=30, memory_blocks=[block])
    await a.aput_messages(_conversation({"school": FACTS["school"]}))
    await b.aput_messages(_conversation({"school": "My son Leo goes to school in Nantes."}))

    question = "Where does my child go to school?"
    for _ in range(2):  # alternate A, B, A, B: each call sees only its own session
        in_a, in_b = _memory_text(await a.aget(input=question)), _memory_text(await b.aget(input=question))
        assert "Lyon" in in_a and "Nantes" not in in_a
        assert "Nantes" in in_b and "Lyon" not in in_b
    assert block.model_dump() == before  # nothing about a call is kept on the block
    assert {r.session_id for r in core.list_memories("alice")} == {"A", "B"}

    # Called directly without a session, a session-scoped block recalls nothing.
    assert await block.aget([ChatMessage(role="user", content=question)]) == ""


async def test_user_scope_recalls_across_sessions(core: HybridMemory, make_chat_memory: MakeMemory) -> None:
    block = HybridMemoryBlock(memory=core, user_id="alice")  # scope="user": cross-session memory
    monday = make_chat_memory(session_id="monday", token_limit=120, token_flush_size=30, memory_blocks=[block])
    await monday.aput_messages(_conversation(FACTS))
    friday = make_chat_memory(session_id="friday", token_limit=120, memory_blocks=[block])
    await friday.aput(ChatMessage(role="user", content="Is Mia allergic to peanuts?"))
    assert FACTS["allergy"] in _memory_text(await friday.aget())


def test_sync_memory_api(core: HybridMemory, make_chat_memory: MakeMemory) -> None:
    chat = make_chat_memory(
        session_id="s1",
        token_limit=120,
        token_flush_size=30,
        memory_blocks=[HybridMemoryBlock(memory=core, user_id="alice", max_tokens=80)],
    )
    chat.put_messages(_conversation(FACTS))
    assert FACTS["car"] in {r.content for r in core.list_memories("alice")}
    block = _memory_text(chat.get(input="What car do we drive?"))
    assert "blue Renault Zoe" in block
    assert "<long_term_memory>" in block


async def test_direct_block_calls(core: HybridMemory) -> None:
    block = HybridMemoryBlock(memory=core, user_id="alice", query_window=2)
    await block.aput(
        [
            ChatMessage(role="user", content="We adopted a cat called Miso."),
            ChatMessage(role="assistant", content=None),  # no text (a tool-call request): skipped
            ChatMessage(role="tool", content="Miso: registered at the vet in Lyon."),
        ]
    )
    records = {r.content: r for r in core.list_memories("alice")}
    # Tool output is conversation context, never a memory about the user.
    assert set(records) == {"We adopted a cat called Miso."}
    assert {r.session_id for r in records.values()} == {DEFAULT_SESSION_ID}

    assert await block.aget(None) == ""
    assert await block.aget([ChatMessage(role="assistant", content=None)]) == ""
    # query_window=2: the latest two messages with text form the query.
    text = await block.aget(
        [ChatMessage(role="user", content="Our cat Miso"), ChatMessage(role="user", content="what is the cat called?")],
        session_id="s1",
    )
    assert "Miso" in text


async def test_max_tokens_caps_the_block(core: HybridMemory) -> None:
    core.remember_many(
        "alice",
        [
            "Mia is allergic to peanuts since 2021",
            "Mia's allergist in Lyon says peanuts cause hives",
            "Mia carries an EpiPen for peanuts at school",
            "Peanuts are banned in Mia's classroom",
        ],
    )
    question = [ChatMessage(role="user", content="Is Mia allergic to peanuts?")]
    free = await HybridMemoryBlock(memory=core, user_id="alice").aget(question, session_id="s1")
    capped = await HybridMemoryBlock(memory=core, user_id="alice", max_tokens=80).aget(question, session_id="s1")
    assert core.counter.count(free) > 80
    assert 0 < core.counter.count(capped) <= 80


async def test_query_is_the_latest_user_message(core: HybridMemory) -> None:
    core.remember("alice", "Alice's cat Miso eats salmon", importance=0.7)
    block = HybridMemoryBlock(memory=core, user_id="alice")
    asked = [ChatMessage(role="user", content="What does the cat Miso eat?")]
    # The assistant's reply after the question does not replace it as the recall query.
    answered = [*asked, ChatMessage(role="assistant", content="OK.")]
    assert "salmon" in await block.aget(asked, session_id="s1")
    assert await block.aget(answered, session_id="s1") == await block.aget(asked, session_id="s1")


# --------------------------------------------------------------------------- short sessions
# FunctionAgent's workflow machinery runs inspect.getmembers over the pydantic agent, reading
# pydantic's deprecated attributes inside llama-index; ignore those only when inspect triggers them.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect")
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect")
async def test_a_short_agent_session_is_recalled_by_the_next_one(
    core: HybridMemory, make_chat_memory: MakeMemory
) -> None:
    """The README's setup: token_limit=4000 never flushes in a short session, yet the fact is kept."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall

    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    agent = FunctionAgent(tools=[], llm=llm)
    block = HybridMemoryBlock(core, user_id="alice")

    tuesday = make_chat_memory(session_id="tuesday", token_limit=4000, memory_blocks=[block])
    await agent.run("We moved to Lyon in March.", memory=tuesday)
    assert await tuesday.aget_all(status=MessageStatus.ARCHIVED) == []  # Memory flushed nothing ...
    assert "We moved to Lyon in March." in {r.content for r in core.list_memories("alice")}  # ... still kept

    wednesday = make_chat_memory(session_id="wednesday", token_limit=4000, memory_blocks=[block])
    await agent.run("Which city do we live in now?", memory=wednesday)
    system = [m.content or "" for m in llm.last_chat_messages or [] if m.role == MessageRole.SYSTEM]
    assert any("We moved to Lyon in March." in s for s in system)  # the new session's prompt recalls it


async def test_user_turns_are_recorded_once_and_not_again_when_flushed(
    core: HybridMemory, make_chat_memory: MakeMemory
) -> None:
    chat = make_chat_memory(
        session_id="s1", token_limit=120, token_flush_size=30, memory_blocks=[HybridMemoryBlock(core, user_id="alice")]
    )
    await chat.aput(ChatMessage(role="user", content=FACTS["allergy"]))
    for _ in range(3):  # an agent reads memory before every LLM call of a run
        await chat.aget()
    assert [(t.role, t.content) for t in core.short_term("alice", "s1")] == [("user", FACTS["allergy"])]
    assert [r.content for r in core.list_memories("alice")] == [FACTS["allergy"]]  # a key frame: written at once

    # Enough conversation for Memory to flush the fact: it is not written a second time.
    await chat.aput_messages(_conversation({}, filler_rounds=8))
    assert FACTS["allergy"] in {m.content for m in await chat.aget_all(status=MessageStatus.ARCHIVED)}
    contents = [r.content for r in core.list_memories("alice")]
    assert contents.count(FACTS["allergy"]) == 1
    assert "Tell me a short fact about the number 10." in contents  # the flushed turns were written


async def test_recording_user_turns_can_be_switched_off(core: HybridMemory, make_chat_memory: MakeMemory) -> None:
    block = HybridMemoryBlock(core, user_id="alice", record_user_turns=False)
    chat = make_chat_memory(session_id="s1", token_limit=4000, memory_blocks=[block])
    await chat.aput(ChatMessage(role="user", content=FACTS["allergy"]))
    await chat.aget()
    assert core.short_term("alice", "s1") == [] and core.list_memories("alice") == []


async def test_the_question_does_not_hide_the_memory_that_answers_it(core: HybridMemory) -> None:
    core.remember("alice", "Mia is allergic to peanuts", importance=0.9)
    block = HybridMemoryBlock(core, user_id="alice")
    question = [ChatMessage(role="user", content="Is Mia allergic to peanuts?")]
    for _ in range(2):  # recorded on the first read; still recalled on the next
        assert "Mia is allergic to peanuts" in await block.aget(question, session_id="s1")
    assert [t.content for t in core.short_term("alice", "s1")] == ["Is Mia allergic to peanuts?"]
