"""HybridAgentMemory: a real LlamaIndex BaseMemory, driven directly and by a real FunctionAgent."""

from __future__ import annotations

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import ChatMessage, MessageRole, TextBlock
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall, MockLLM
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from pydantic import ValidationError

from hybrid_memory import HybridMemory
from llamaindex_hybrid_memory import HybridAgentMemory

# FunctionAgent's workflow machinery (workflows.utils.get_steps_from_instance) runs inspect.getmembers over
# the pydantic agent, which reads every deprecated pydantic attribute (``__fields__``, ``__fields_set__``,
# ``model_computed_fields`` on the instance ...). That happens inside llama-index, not in our code, so we
# ignore pydantic's deprecation warnings only when ``inspect`` triggered them.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
]

FACT = "Remember: my daughter Mia is allergic to peanuts."
QUESTION = "Is Mia allergic to peanuts?"


def _tokens(core: HybridMemory, messages: list[ChatMessage]) -> int:
    return sum(core.counter.count(m.content or "") for m in messages)


def _system_texts(messages: list[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages if m.role == MessageRole.SYSTEM]


def _blocks(messages: list[ChatMessage]) -> list[str]:
    """The memory blocks in the messages, wherever they were placed."""
    out = []
    for m in messages:
        text = m.content or ""
        if "<memory-context>" in text:
            out.append(
                text[text.index("<memory-context>") : text.index("</memory-context>") + len("</memory-context>")]
            )
    return out


def _chit_chat(n: int) -> list[ChatMessage]:
    out = []
    for i in range(n):
        out.append(ChatMessage(role="user", content=f"Question {i} about the weather in town number {i}?"))
        out.append(ChatMessage(role="assistant", content=f"Answer {i}: it is mild and dry in town number {i}."))
    return out


# ---------------------------------------------------------------- construction


def test_is_a_llamaindex_base_memory(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    assert isinstance(memory, BaseMemory)
    assert HybridAgentMemory.class_name() == "HybridAgentMemory"
    assert memory.memory is core
    assert "memory" not in memory.model_dump()  # the engine is never serialised


def test_from_defaults_sizes_token_limit_from_llm(core: HybridMemory) -> None:
    llm = MockLLM()
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", llm=llm)
    assert memory.token_limit == int(llm.metadata.context_window * 0.75)
    assert HybridAgentMemory.from_defaults(core, user_id="alice", token_limit=123, llm=llm).token_limit == 123


def test_from_defaults_starts_a_new_session_and_takes_chat_history(core: HybridMemory) -> None:
    a = HybridAgentMemory.from_defaults(core, user_id="alice")
    b = HybridAgentMemory.from_defaults(core, user_id="alice")
    assert a.session_id != b.session_id
    history = [ChatMessage(role="user", content="hello"), ChatMessage(role="assistant", content="hi there")]
    c = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s9", chat_history=history)
    assert [(m.role, m.content) for m in c.get_all()] == [(m.role, m.content) for m in history]


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b"])
def test_rejects_bad_ids(core: HybridMemory, bad: str) -> None:
    with pytest.raises(ValidationError, match="user_id"):
        HybridAgentMemory(memory=core, user_id=bad, session_id="s1")
    with pytest.raises(ValidationError, match="session_id"):
        HybridAgentMemory(memory=core, user_id="alice", session_id=bad)


# ---------------------------------------------------------------- sync path


def test_get_returns_window_plus_one_system_message_sync(core: HybridMemory) -> None:
    first = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    first.put(ChatMessage(role="user", content=FACT))
    first.put(ChatMessage(role="assistant", content="Noted."))
    # The same session: the fact is in the window, so it is not repeated as a memory.
    same = first.get()
    assert [m.role for m in same] == [MessageRole.USER, MessageRole.ASSISTANT]

    second = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s2")
    second.put(ChatMessage(role="user", content=QUESTION))
    messages = second.get()
    # By default the block goes inside the newest user message, before its text.
    assert [m.role for m in messages] == [MessageRole.USER]
    assert "daughter Mia is allergic to peanuts" in _blocks(messages)[0]
    assert (messages[0].content or "").startswith("<memory-context>")
    assert (messages[0].content or "").endswith("</memory-context>\n\n" + QUESTION)
    assert [m.content for m in second.get_all()] == [QUESTION]  # get_all: the window, without the block


def test_get_with_input_recalls_for_that_input(core: HybridMemory) -> None:
    core.remember("alice", "Alice's favourite tea is oolong", importance=0.8)
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    assert memory.get() == []  # nothing to recall for
    messages = memory.get(input="Which tea is Alice's favourite?")
    assert len(messages) == 1 and "oolong" in (messages[0].content or "")


def test_other_users_memories_never_appear(core: HybridMemory) -> None:
    HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1").put(ChatMessage(role="user", content=FACT))
    bob = HybridAgentMemory.from_defaults(core, user_id="bob", session_id="s1")
    bob.put(ChatMessage(role="user", content=QUESTION))
    assert _blocks(bob.get()) == []
    assert _blocks(bob.get(input=FACT)) == []


@pytest.mark.parametrize("limit", [1, 12, 40, 80, 200, 2000])
def test_get_stays_within_token_limit(core: HybridMemory, limit: int) -> None:
    core.remember("alice", "Mia is allergic to peanuts and tree nuts", importance=0.9)
    core.remember("alice", "Mia's school in Lyon serves peanut-free lunches", importance=0.7)
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1", token_limit=limit)
    memory.put_messages([*_chit_chat(6), ChatMessage(role="user", content=QUESTION)])
    messages = memory.get()
    assert _tokens(core, messages) <= limit
    assert len(_blocks(messages)) <= 1
    if limit >= 2000:  # room for both: the newest turn and the long-term block
        assert (messages[-1].content or "").endswith(QUESTION)
        assert "allergic to peanuts" in _blocks(messages)[0]
    # initial_token_count (as ChatMemoryBuffer) shrinks the budget
    assert _tokens(core, memory.get(initial_token_count=limit // 2)) <= limit - limit // 2


def test_window_is_cut_oldest_first(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1", token_limit=30)
    memory.put_messages(_chit_chat(5))
    window = memory.get()
    everything = memory.get_all()
    assert 0 < len(window) < len(everything)
    assert window == everything[-len(window) :]


def test_context_max_tokens_caps_the_long_term_block(core: HybridMemory) -> None:
    for i in range(8):
        core.remember("alice", f"Mia is allergic to peanuts, fact number {i} from the allergist", importance=0.9)
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1", context_max_tokens=60)
    memory.put(ChatMessage(role="user", content=QUESTION))
    block = _blocks(memory.get())
    assert block and core.counter.count(block[0]) <= 60


def test_roles_text_and_tool_results(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    memory.put_messages(
        [
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="user", blocks=[TextBlock(text="Plan a trip"), TextBlock(text="to Lyon")]),
            ChatMessage(role="assistant", content=None),  # a tool-call request without text: not stored
            ChatMessage(role="tool", content="Lyon: 18 degrees, sunny"),
            ChatMessage(role="chatbot", content="It will be sunny."),
        ]
    )
    assert [(m.role, m.content) for m in memory.get_all()] == [
        (MessageRole.SYSTEM, "Be brief."),
        (MessageRole.USER, "Plan a trip\nto Lyon"),
        (MessageRole.ASSISTANT, "Tool result: Lyon: 18 degrees, sunny"),
        (MessageRole.ASSISTANT, "It will be sunny."),
    ]
    assert [t.role for t in core.short_term("alice", "s1")] == ["system", "user", "tool", "assistant"]


def test_set_replaces_the_window(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    memory.put_messages(_chit_chat(2))
    memory.set([ChatMessage(role="user", content="Start over")])
    assert [m.content for m in memory.get_all()] == ["Start over"]


def test_reset_clears_the_window_but_not_long_term_memory(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    memory.put(ChatMessage(role="user", content=FACT))  # a key frame: written to long-term at once
    memory.put(ChatMessage(role="user", content="Question 1 about the weather in town number 1?"))
    memory.reset()
    assert memory.get_all() == []
    assert core.short_term("alice", "s1") == []
    contents = [r.content for r in core.list_memories("alice")]
    assert contents == [FACT]  # the non-key turn was dropped, not written


def test_end_session_writes_the_window_to_long_term(core: HybridMemory) -> None:
    memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    memory.put(ChatMessage(role="user", content="We moved to Lyon in March 2024."))
    assert core.list_memories("alice") == [] or all(r.session_id == "s1" for r in core.list_memories("alice"))
    memory.end_session()
    assert memory.get_all() == []
    records = core.list_memories("alice")
    assert [r.content for r in records] == ["We moved to Lyon in March 2024."]
    assert records[0].session_id == "s1" and records[0].metadata["role"] == "user"


# ---------------------------------------------------------------- async path


async def test_async_twins(core: HybridMemory) -> None:
    first = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    await first.aput(ChatMessage(role="user", content=FACT))
    noted = "Noted: Mia must never eat peanuts."
    await first.aput_messages([ChatMessage(role="assistant", content=noted), ChatMessage(role="tool", content="ok")])
    assert [m.content for m in await first.aget_all()] == [FACT, noted, "Tool result: ok"]

    second = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s2")
    await second.aset([ChatMessage(role="user", content=QUESTION)])
    messages = await second.aget()
    assert messages == second.get()  # sync and async agree (a second read renders the same block)
    assert [m.role for m in messages] == [MessageRole.USER]
    assert "daughter Mia" in _blocks(messages)[0]

    await second.areset()
    assert await second.aget_all() == []
    await first.aend_session()
    assert await first.aget_all() == []
    stored = {r.content for r in core.list_memories("alice")}
    assert FACT in stored and noted not in stored and "ok" not in stored  # only the user's words are memories


# ---------------------------------------------------------------- a real FunctionAgent


def check_menu(dish: str = "satay") -> str:
    """Look up a dish on tonight's menu."""
    return f"The {dish} is served with peanut sauce."


@pytest.fixture
def agent_and_llm() -> tuple[FunctionAgent, MockFunctionCallingLLMWithChatMemoryOfLastCall]:
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(check_menu)],
        llm=llm,
        system_prompt="You are a careful waiter.",
    )
    return agent, llm


async def test_function_agent_remembers_across_runs_and_isolates_users(
    core: HybridMemory, agent_and_llm: tuple[FunctionAgent, MockFunctionCallingLLMWithChatMemoryOfLastCall]
) -> None:
    agent, llm = agent_and_llm

    # Run 1 (Monday): the user states a fact; the mock LLM calls the tool, then answers.
    monday = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="monday")
    await agent.run(FACT, memory=monday, ctx=Context(agent))
    assert [m.content for m in monday.get_all()] == [
        FACT,
        "Tool result: The satay is served with peanut sauce.",
        "Tool calls complete.",
    ]

    # Run 2 (Friday): fresh Context, fresh memory= for a new session of the same user.
    llm.reset_memory()
    friday = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="friday")
    await agent.run(QUESTION, memory=friday, ctx=Context(agent))
    prompt = list(llm.last_chat_messages or [])
    assert prompt[0].role == MessageRole.SYSTEM and prompt[0].content == "You are a careful waiter."
    memory_blocks = _blocks(prompt)
    assert len(memory_blocks) == 1
    assert "daughter Mia is allergic to peanuts" in memory_blocks[0]
    assert [m.content for m in prompt if m.role == MessageRole.USER] == [memory_blocks[0] + "\n\n" + QUESTION]

    # Another user asks the same question: nothing of Alice's reaches the prompt.
    llm.reset_memory()
    bob = HybridAgentMemory.from_defaults(core, user_id="bob", session_id="friday")
    await agent.run(QUESTION, memory=bob, ctx=Context(agent))
    bob_prompt = " ".join(m.content or "" for m in llm.last_chat_messages or [])
    assert "<memory-context>" not in bob_prompt
    assert "daughter" not in bob_prompt


async def test_function_agent_same_session_keeps_the_window(
    core: HybridMemory, agent_and_llm: tuple[FunctionAgent, MockFunctionCallingLLMWithChatMemoryOfLastCall]
) -> None:
    agent, llm = agent_and_llm
    await agent.run(FACT, memory=HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1"))
    # A new HybridAgentMemory object for the same session sees the same window (it lives in the core).
    again = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    await agent.run(QUESTION, memory=again, ctx=Context(agent))
    prompt = list(llm.last_chat_messages or [])
    user_turns = [m.content for m in prompt if m.role == MessageRole.USER]
    assert user_turns == [FACT, QUESTION]
    # The fact is already in the window, so it is not repeated as a long-term memory.
    assert _blocks(prompt) == []


async def test_chinese_memories_round_trip(core: HybridMemory) -> None:
    first = HybridAgentMemory.from_defaults(core, user_id="小王", session_id="周一")
    await first.aput(ChatMessage(role="user", content="记住：我对花生过敏。"))
    later = HybridAgentMemory.from_defaults(core, user_id="小王", session_id="周五")
    await later.aput(ChatMessage(role="user", content="我能吃花生酱吗？"))
    messages = await later.aget()
    assert [m.role for m in messages] == [MessageRole.USER]
    assert "我对花生过敏" in _blocks(messages)[0]
    assert "长期记忆" in _blocks(messages)[0]  # the block speaks the user's language
