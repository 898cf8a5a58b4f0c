"""The memory block keeps the prompt's prefix byte-identical from one turn to the next (issue 17 part 4).

``HybridAgentMemory`` controls the messages it returns: with the default placement the previous
call's whole prompt is a prefix of the next call's. ``HybridMemoryBlock`` returns text that
LlamaIndex's ``Memory`` places; with ``insert_method=InsertMethod.USER`` Memory puts it in front
of the newest user message and keeps no block in its history, so the block puts its earlier
blocks back where Memory first rendered them: the previous call's whole prompt is again a prefix
of the next call's (Memory's default ``SYSTEM`` changes the system message, as the test shows).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from itertools import pairwise

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.memory import InsertMethod, Memory

from hybrid_memory import HybridMemory
from llamaindex_hybrid_memory import HybridAgentMemory, HybridMemoryBlock
from tests.adapters.prompt_cache_script import ANSWERS, QUESTIONS, ann_core


@pytest.fixture
def core() -> Iterator[HybridMemory]:
    """A core with three memories of user ``ann`` and the default placement."""
    c = ann_core()
    yield c
    c.close()


def _flat(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role.value, m.content or "") for m in messages]


def _agent_prompts(core: HybridMemory) -> list[list[ChatMessage]]:
    memory = HybridAgentMemory.from_defaults(core, user_id="ann", session_id="s1")
    prompts = []
    for question, answer in zip(QUESTIONS, ANSWERS, strict=True):
        memory.put(ChatMessage(role="user", content=question))
        prompts.append(memory.get())
        assert memory.get() == prompts[-1]  # every call for the same user message renders the same block
        memory.put(ChatMessage(role="assistant", content=answer))
    return prompts


def test_agent_memory_keeps_the_prefix(core: HybridMemory) -> None:
    prompts = _agent_prompts(core)
    for before, after in pairwise(prompts):
        assert _flat(after)[: len(before)] == _flat(before)
    assert (prompts[0][0].content or "").startswith("<memory-context>")
    assert "allergic to peanuts" in (prompts[0][0].content or "")
    assert "allergic to peanuts" not in (prompts[2][-1].content or "")  # shown with the first question
    assert [m.content for m in HybridAgentMemory(core, user_id="ann", session_id="s1").get_all()] == [
        x for pair in zip(QUESTIONS, ANSWERS, strict=True) for x in pair
    ]


def test_agent_memory_before_user_is_a_system_message() -> None:
    core = ann_core("before_user")
    try:
        prompts = _agent_prompts(core)
    finally:
        core.close()
    for before, after in pairwise(prompts):
        assert _flat(after)[: len(before)] == _flat(before)
    assert [m.role for m in prompts[0]] == [MessageRole.SYSTEM, MessageRole.USER]
    assert prompts[0][1].content == QUESTIONS[0]


def test_agent_memory_system_start_is_still_available() -> None:
    core = ann_core("system_start")
    try:
        prompts = _agent_prompts(core)
    finally:
        core.close()
    assert prompts[0][0].role == MessageRole.SYSTEM and "allergic" in (prompts[0][0].content or "")
    assert [m.content for m in prompts[1] if m.role == MessageRole.USER] == QUESTIONS[:2]


def _block_prompts(core: HybridMemory, make: Callable[..., Memory], insert: InsertMethod) -> list[list[ChatMessage]]:
    chat = make(
        session_id="s1",
        token_limit=4000,
        memory_blocks=[HybridMemoryBlock(core, user_id="ann")],
        insert_method=insert,
    )

    async def run() -> list[list[ChatMessage]]:
        prompts = []
        for question, answer in zip(QUESTIONS, ANSWERS, strict=True):
            await chat.aput(ChatMessage(role="user", content=question))
            prompts.append([ChatMessage(role="system", content="You are helpful."), *await chat.aget()])
            await chat.aput(ChatMessage(role="assistant", content=answer))
        return prompts

    return asyncio.run(run())


def test_memory_block_with_user_insertion_keeps_the_prefix(
    core: HybridMemory, make_chat_memory: Callable[..., Memory]
) -> None:
    prompts = _block_prompts(core, make_chat_memory, InsertMethod.USER)
    for before, after in pairwise(prompts):
        assert _flat(after)[: len(before)] == _flat(before)  # earlier blocks stay, byte for byte
    first = prompts[0][-1].content or ""
    assert first.startswith("<memory>") and "allergic to peanuts" in first and first.endswith(QUESTIONS[0])
    # The third question asks about peanuts again: the block shown with the first one answers it.
    third = prompts[2][-1].content or ""
    assert "allergic to peanuts" not in third and third.endswith(QUESTIONS[2])
    assert sum("allergic to peanuts" in (m.content or "") for m in prompts[-1]) == 1
    second = prompts[1][-1].content or ""  # the restaurant question: a later block, only what is new
    assert "Background memories" not in second and "lives in Lyon" in second and "peanuts" not in second


def test_memory_block_renders_each_user_message_once_per_read(
    core: HybridMemory, make_chat_memory: Callable[..., Memory]
) -> None:
    """An agent reads Memory before every LLM call of a run: each read shows the same block."""
    chat = make_chat_memory(
        session_id="s1",
        token_limit=4000,
        memory_blocks=[HybridMemoryBlock(core, user_id="ann")],
        insert_method=InsertMethod.USER,
    )

    async def run() -> list[list[tuple[str, str]]]:
        await chat.aput(ChatMessage(role="user", content=QUESTIONS[0]))
        reads = [_flat(await chat.aget())]
        await chat.aput(ChatMessage(role="assistant", content="Let me check a tool."))
        reads.append(_flat(await chat.aget()))
        reads.append(_flat(await chat.aget(input=QUESTIONS[0])))  # an agent's handoff passes it again
        return reads

    first, second, third = asyncio.run(run())
    assert second[: len(first)] == first and third == second
    assert core.short_term("ann", "s1")[0].content == QUESTIONS[0]  # recorded once, without the block
    assert len(core.short_term("ann", "s1")) == 1


def test_memory_block_system_placement_keeps_the_old_behaviour(make_chat_memory: Callable[..., Memory]) -> None:
    core = ann_core("system_end")
    try:
        prompts = _block_prompts(core, make_chat_memory, InsertMethod.USER)
    finally:
        core.close()
    # No block is kept: the newest user message carries the whole block, earlier ones none.
    assert "allergic to peanuts" in (prompts[2][-1].content or "")
    assert all("<memory" not in (m.content or "") for m in prompts[2][:-1])


def test_memory_block_with_system_insertion_changes_the_system_message(
    core: HybridMemory, make_chat_memory: Callable[..., Memory]
) -> None:
    prompts = _block_prompts(core, make_chat_memory, InsertMethod.SYSTEM)
    firsts = {(p[1].content or "") for p in prompts}
    assert len(firsts) > 1  # Memory's default placement: the prefix changes with the block


def test_memory_block_tells_apart_user_messages_with_the_same_text(
    core: HybridMemory, make_chat_memory: Callable[..., Memory]
) -> None:
    """A second "Can I eat peanuts?" is a message of its own: the first keeps its block, the second gets none new."""
    chat = make_chat_memory(
        session_id="s1",
        token_limit=4000,
        memory_blocks=[HybridMemoryBlock(core, user_id="ann")],
        insert_method=InsertMethod.USER,
    )
    question = "Can I eat peanuts, given I am allergic?"

    async def run() -> list[list[tuple[str, str]]]:
        prompts = []
        for answer in ("No.", "Still no."):
            await chat.aput(ChatMessage(role="user", content=question))
            prompts.append(_flat(await chat.aget()))
            await chat.aput(ChatMessage(role="assistant", content=answer))
        return prompts

    first, second = asyncio.run(run())
    assert second[: len(first)] == first
    assert "allergic to peanuts" in first[-1][1] and second[-1] == ("user", question)


def test_one_block_keeps_the_blocks_of_each_session_apart(
    core: HybridMemory, make_chat_memory: Callable[..., Memory]
) -> None:
    block = HybridMemoryBlock(core, user_id="ann")
    chats = {
        s: make_chat_memory(session_id=s, token_limit=4000, memory_blocks=[block], insert_method=InsertMethod.USER)
        for s in ("A", "B")
    }

    async def run() -> dict[str, list[list[tuple[str, str]]]]:
        prompts: dict[str, list[list[tuple[str, str]]]] = {"A": [], "B": []}
        for question, answer in zip(QUESTIONS[:3], ANSWERS, strict=False):
            for s, chat in chats.items():  # the sessions alternate on the same block
                await chat.aput(ChatMessage(role="user", content=question))
                prompts[s].append(_flat(await chat.aget()))
                await chat.aput(ChatMessage(role="assistant", content=answer))
        return prompts

    prompts = asyncio.run(run())
    for s in ("A", "B"):
        for before, after in pairwise(prompts[s]):
            assert after[: len(before)] == before
        assert "allergic to peanuts" in prompts[s][0][-1][1]  # each session is shown the memory once
        assert sum("allergic to peanuts" in text for _, text in prompts[s][-1]) == 1
