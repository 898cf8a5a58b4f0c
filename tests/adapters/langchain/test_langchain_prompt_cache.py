"""The memory block keeps the prompt's prefix byte-identical from one turn to the next (issue 17 part 4).

A prefix-caching model server re-processes a prompt from the first token that differs from the
previous call's; these tests pin, for the middleware and the chat memory, that the previous
call's whole prompt is a prefix of the next call's with the default placement, that a memory
already shown is not repeated, and that the old system placements remain available.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langgraph.checkpoint.memory import InMemorySaver

from hybrid_memory import HybridMemory
from langchain_hybrid_memory import HybridChatMemory, HybridMemoryMiddleware
from tests.adapters.prompt_cache_script import ANSWERS, QUESTIONS, ann_core


@pytest.fixture
def core() -> Iterator[HybridMemory]:
    """A core with three memories of user ``ann`` and the default placement."""
    c = ann_core()
    yield c
    c.close()


def _flat(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, m.text) for m in messages]


def _assert_prefix_kept(prompts: list[list[BaseMessage]]) -> None:
    """Each prompt starts with the whole previous prompt, byte for byte."""
    for before, after in pairwise(prompts):
        assert _flat(after)[: len(before)] == _flat(before)


def _run_agent(core: HybridMemory, tool_model: Any) -> tuple[list[list[BaseMessage]], list[dict[str, Any]]]:
    model = tool_model(messages=iter([AIMessage(content=a) for a in ANSWERS]))
    agent = create_agent(
        model,
        system_prompt="You are a helpful assistant.",
        middleware=[HybridMemoryMiddleware(core, user_id="ann")],
        checkpointer=InMemorySaver(),
    )
    outs = [
        agent.invoke({"messages": [HumanMessage(q)]}, config={"configurable": {"thread_id": "t1"}}) for q in QUESTIONS
    ]
    return model.seen, outs


def test_middleware_keeps_the_prefix_and_does_not_repeat_a_memory(core: HybridMemory, tool_model: Any) -> None:
    prompts, outs = _run_agent(core, tool_model)
    assert len(prompts) == len(QUESTIONS)
    _assert_prefix_kept(prompts)
    assert all(p[0] == SystemMessage("You are a helpful assistant.") for p in prompts)
    first_user = prompts[0][-1].text
    assert first_user.startswith("<memory-context>") and "allergic to peanuts" in first_user
    assert first_user.endswith("\n\n" + QUESTIONS[0])
    # The peanut memory was shown with the first question: the third one does not repeat it.
    third = outs[2]["memory_context"]
    assert "allergic to peanuts" not in prompts[2][-1].text
    assert ("already in the conversation" in (third["skipped_reason"] or "")) or all(
        "peanuts" not in h["content"] for h in third["hits"]
    )
    # What is recorded is what the user said, never the block.
    assert [t.content for t in core.short_term("ann", "t1") if t.role == "user"] == QUESTIONS
    assert len(outs[-1]["memory_context"]["placed"]) >= 1


def test_middleware_before_user_is_a_message_of_its_own(tool_model: Any) -> None:
    core = ann_core("before_user")
    try:
        prompts, _ = _run_agent(core, tool_model)
    finally:
        core.close()
    _assert_prefix_kept(prompts)
    assert isinstance(prompts[0][1], SystemMessage) and prompts[0][1].text.startswith("<memory-context>")
    assert prompts[0][2] == HumanMessage(QUESTIONS[0], id=prompts[0][2].id)


def test_middleware_system_end_is_still_available(tool_model: Any) -> None:
    core = ann_core("system_end")
    try:
        prompts, _ = _run_agent(core, tool_model)
    finally:
        core.close()
    assert "allergic to peanuts" in prompts[0][0].text and prompts[0][0].text.startswith("You are a helpful")
    assert [m.text for m in prompts[1] if isinstance(m, HumanMessage)] == QUESTIONS[:2]
    # The system message changes with the block: the old placement does not keep the prefix.
    assert any(_flat(b)[0] != _flat(a)[0] for b, a in pairwise(prompts))


def _chat_prompts(core: HybridMemory, return_messages: bool) -> list[Any]:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are a helpful assistant."), MessagesPlaceholder("history"), ("human", "{input}")]
    )
    memory = HybridChatMemory(core, user_id="ann", session_id="s1", return_messages=return_messages)
    seen: list[Any] = []
    for question, answer in zip(QUESTIONS, ANSWERS, strict=True):
        variables = memory.load_memory_variables({"input": question})
        if return_messages:
            seen.append(prompt.invoke({**variables, "input": question}).to_messages())
        else:
            seen.append(f"{variables['history']}\nHuman: {question}\nAI:")
        memory.save_context({"input": question}, {"output": answer})
    return seen


def test_chat_memory_keeps_the_prefix_as_messages(core: HybridMemory) -> None:
    prompts = _chat_prompts(core, return_messages=True)
    _assert_prefix_kept(prompts)
    block = prompts[0][1]
    assert isinstance(block, SystemMessage) and "allergic to peanuts" in block.text
    assert prompts[0][-1] == HumanMessage(QUESTIONS[0])
    assert all("allergic to peanuts" not in m.text for m in prompts[2][len(prompts[1]) :])


def test_chat_memory_keeps_the_prefix_as_a_string(core: HybridMemory) -> None:
    prompts = _chat_prompts(core, return_messages=False)
    for before, after in pairwise(prompts):
        stem = before.removesuffix("AI:")
        assert after.startswith(stem)
    assert prompts[0].startswith("<memory-context>")


def test_chat_memory_system_start_is_still_available() -> None:
    core = ann_core("system_start")
    try:
        prompts = _chat_prompts(core, return_messages=True)
    finally:
        core.close()
    assert isinstance(prompts[0][1], SystemMessage) and "allergic to peanuts" in prompts[0][1].text
    assert [type(m) for m in prompts[1]][:3] == [SystemMessage, SystemMessage, HumanMessage]


def test_chat_memory_clear_forgets_the_placed_blocks(core: HybridMemory) -> None:
    memory = HybridChatMemory(core, user_id="ann", session_id="s1", return_messages=True)
    first = memory.load_memory_variables({"input": QUESTIONS[0]})["history"]
    assert "allergic to peanuts" in first[-1].text  # placed at the start of the (empty) window
    memory.save_context({"input": QUESTIONS[0]}, {"output": ANSWERS[0]})
    memory.clear()
    memory.save_context({"input": "Hello again"}, {"output": "Hi!"})
    again = memory.load_memory_variables({"input": QUESTIONS[2]})["history"]
    # The cleared window starts with its own turns, not with a block from before the clear,
    # and the allergy is shown again, after them.
    assert [m.text for m in again[:2]] == ["Hello again", "Hi!"]
    assert len(again) == 3 and "allergic to peanuts" in again[2].text


def test_middleware_a_repeated_run_for_the_same_message_keeps_its_block(core: HybridMemory, tool_model: Any) -> None:
    model = tool_model(messages=iter([AIMessage(content="Better not."), AIMessage(content="Still no.")]))
    agent = create_agent(
        model,
        system_prompt="You are a helpful assistant.",
        middleware=[HybridMemoryMiddleware(core, user_id="ann")],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage(QUESTIONS[0])]}, config=config)
    core.remember("ann", "Ann ate peanuts once and was fine with a tiny amount", importance=0.9)
    agent.invoke({"messages": []}, config=config)  # no new user message: the same turn runs again
    first, second = model.seen
    assert _flat(second)[: len(first)] == _flat(first)  # the block of that message did not change
