"""Source discipline: a ReAct-style transcript through ``Memory.from_defaults(memory_blocks=[HybridMemoryBlock])``.

Only the user's own words become memories about the user: the model's thoughts and answers (a
hallucinated "Mia est allergique à l'hæblère."), tool output, ReAct ``Observation:`` text sent as
a user message, and system prompts are conversation context only.
"""

from __future__ import annotations

from collections.abc import Callable

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus

from hybrid_memory import HybridMemory
from llamaindex_hybrid_memory import HybridAgentMemory, HybridMemoryBlock

MakeMemory = Callable[..., Memory]

USER_SAID = [
    "Remember: my daughter Mia is allergic to peanuts.",
    "We are vegetarian, so no meat or fish please.",
    "Can Mia have the satay tonight?",
]
NOT_THE_USER = [
    "Thought: The user told me about an allergy. I should remember it.\nAnswer: Mia est allergique à l'hæblère.",
    "Observation: The satay is served with peanut sauce and contains shrimp paste.",
    'Thought: I need to check the menu.\nAction: check_menu\nAction Input: {"dish": "satay"}',
    "The satay is served with peanut sauce.",
    "You are a helpful assistant. Always answer in French and never mention prices.",
]


def _react_transcript() -> list[ChatMessage]:
    """What a ReAct agent run leaves in Memory: scaffolding in assistant *and* user messages."""
    return [
        ChatMessage(role="system", content=NOT_THE_USER[4]),
        ChatMessage(role="user", content=USER_SAID[0]),
        ChatMessage(role="assistant", content=NOT_THE_USER[0]),
        ChatMessage(role="user", content=USER_SAID[1]),
        ChatMessage(role="assistant", content="Answer: Noted, vegetarian dishes only."),
        ChatMessage(role="user", content=USER_SAID[2]),
        ChatMessage(role="assistant", content=NOT_THE_USER[2]),
        ChatMessage(role="tool", content=NOT_THE_USER[3]),
        ChatMessage(role="user", content=NOT_THE_USER[1]),  # ReActChatFormatter: observations as user messages
        ChatMessage(role="assistant", content="Thought: I can answer.\nAnswer: No, the satay contains peanuts."),
    ]


async def test_a_react_transcript_stores_only_the_users_words(core: HybridMemory, make_chat_memory: MakeMemory) -> None:
    chat = make_chat_memory(
        session_id="monday",
        token_limit=60,
        token_flush_size=20,
        memory_blocks=[HybridMemoryBlock(memory=core, user_id="alice")],
    )
    for message in _react_transcript():  # one at a time, reading the blocks in between like an agent run
        await chat.aput_messages([message])
        await chat.aget()
    assert await chat.aget_all(status=MessageStatus.ARCHIVED)  # Memory flushed into the block
    core.flush()
    stored = [r for r in core.list_memories("alice")]
    assert stored, "the user's facts reach long-term memory"
    assert {r.content for r in stored} <= set(USER_SAID)
    assert USER_SAID[0] in {r.content for r in stored}
    assert all(r.source == "user" and r.metadata["role"] == "user" for r in stored)
    for text in ("hæblère", "Thought", "Observation", "Action", "French", "peanut sauce"):
        assert not any(text in r.content for r in stored), text
    # Nothing but the user's words comes back as a memory about the user.
    block = await HybridMemoryBlock(memory=core, user_id="alice").aget(
        [ChatMessage(role="user", content="What is Mia allergic to?")], session_id="tuesday"
    )
    assert "allergic to peanuts" in block and "hæblère" not in block and "peanut sauce" not in block


async def test_observation_sent_as_a_user_message_is_not_recorded_as_the_user(core: HybridMemory) -> None:
    block = HybridMemoryBlock(memory=core, user_id="bob")
    messages = [
        ChatMessage(role="user", content="I live in Lyon with my two cats."),
        ChatMessage(role="assistant", content="Thought: check the weather.\nAction: weather"),
        ChatMessage(role="user", content="Observation: Lyon is sunny, 31 degrees."),
    ]
    await block.aget(messages, session_id="s1")  # records the latest *user's* words only
    assert [(t.role, t.content) for t in core.short_term("bob", "s1")] == [("user", messages[0].content)]
    await block.aput([m.model_copy(update={"additional_kwargs": {"session_id": "s1"}}) for m in messages])
    assert {r.content for r in core.list_memories("bob")} == {messages[0].content}


async def test_agent_memory_keeps_assistant_and_tool_text_as_context_only(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(memory=core, user_id="carol", session_id="s1")
    await memory.aput_messages(
        [
            ChatMessage(role="user", content="My sister Mei is a nurse in Porto."),
            ChatMessage(role="assistant", content="Answer: Mei works night shifts at the Hospital de Santo António."),
            ChatMessage(role="tool", content="Porto weather: rain"),
            ChatMessage(role="user", content="Observation: the hospital has 600 beds"),
        ]
    )
    window = [(t.role, t.content) for t in core.short_term("carol", "s1")]
    assert [r for r, _ in window] == ["user", "assistant", "tool", "tool"]  # all kept as conversation context
    assert {r.content for r in core.list_memories("carol")} == {"My sister Mei is a nurse in Porto."}
