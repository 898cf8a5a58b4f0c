"""HybridChatMemory in real legacy chains (ConversationChain, LLMChain) with LangChain's fake models."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_classic.chains import ConversationChain, LLMChain
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import FakeListChatModel, FakeListLLM
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder, PromptTemplate

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.testing import HashingEmbedder
from langchain_hybrid_memory import HybridChatMemory

FACT = "Remember: my daughter's name is Lucia and she is allergic to shellfish"
TURNS = [FACT, "I also enjoy hiking on weekends", "What's a good gift for a runner?"]


class PromptRecorder(BaseCallbackHandler):
    """Keeps the exact prompts (text LLMs) and message lists (chat models) the model received."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.chats: list[list[BaseMessage]] = []

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> None:
        self.prompts.extend(prompts)

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.chats.extend(list(m) for m in messages)


def test_conversation_chain_default_prompt_unchanged(mem: HybridMemory) -> None:
    """Drop-in: the default ConversationChain prompt ({history}, {input}) works as is."""
    rec = PromptRecorder()
    llm = FakeListLLM(responses=["Noted.", "Nice!", "Running socks."])
    chain = ConversationChain(llm=llm, memory=HybridChatMemory(memory=mem, user_id="u1", session_id="s1"))
    for t in TURNS:
        chain.invoke({"input": t}, config={"callbacks": [rec]})
    # the short-term window grew turn by turn
    assert "Human: I also enjoy hiking on weekends\nAI: Nice!" in rec.prompts[2]
    assert [t.role for t in mem.short_term("u1", "s1")] == ["user", "assistant"] * 3

    later = ConversationChain(
        llm=FakeListLLM(responses=["Avoid shrimp."]), memory=HybridChatMemory(memory=mem, user_id="u1", session_id="s2")
    )
    rec2 = PromptRecorder()
    out = later.invoke({"input": "Is Lucia allergic to shellfish?"}, config={"callbacks": [rec2]})
    assert out["response"] == "Avoid shrimp."
    assert "allergic to shellfish" in rec2.prompts[0]
    assert "<memory-context>" in out["history"]


def test_conversation_chain_string_prompt_with_long_term_variable(mem: HybridMemory) -> None:
    prompt = PromptTemplate.from_template("Background:\n{long_term}\n\nConversation:\n{history}\nHuman: {input}\nAI:")
    rec = PromptRecorder()
    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1", long_term_key="long_term")
    chain = ConversationChain(llm=FakeListLLM(responses=["ok"]), prompt=prompt, memory=memory)
    for t in TURNS:
        chain.invoke({"input": t}, config={"callbacks": [rec]})
    assert memory.memory_variables == ["history", "long_term"]
    # the fact is in the short-term window of s1, so the fuser does not repeat it from long-term
    assert "allergic to shellfish" not in rec.prompts[2].split("Conversation:")[0]

    rec2 = PromptRecorder()
    memory2 = HybridChatMemory(memory=mem, user_id="u1", session_id="s2", long_term_key="long_term")
    chain2 = ConversationChain(llm=FakeListLLM(responses=["ok"]), prompt=prompt, memory=memory2)
    chain2.invoke({"input": "Is shellfish OK for Lucia?"}, config={"callbacks": [rec2]})
    background, conversation = rec2.prompts[0].split("Conversation:")
    assert "allergic to shellfish" in background
    assert "Human:" not in conversation.split("Human: Is shellfish")[0]


def test_llm_chain_chat_prompt_messages(mem: HybridMemory) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You are a helpful assistant.\n{long_term}"),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    model = FakeListChatModel(responses=["Got it.", "Sounds fun.", "Try a GPS watch."])

    def chain_for(session: str) -> LLMChain:
        memory = HybridChatMemory(
            memory=mem, user_id="u1", session_id=session, long_term_key="long_term", return_messages=True
        )
        return LLMChain(llm=model, prompt=prompt, memory=memory)

    rec = PromptRecorder()
    first = chain_for("s1")
    for t in TURNS:
        first.invoke({"question": t}, config={"callbacks": [rec]})
    last = rec.chats[-1]
    assert isinstance(last[0], SystemMessage)
    assert [type(m) for m in last[1:]] == [HumanMessage, AIMessage, HumanMessage, AIMessage, HumanMessage]
    assert last[1].content == FACT

    rec2 = PromptRecorder()
    out = chain_for("s2").invoke({"question": "Is Lucia allergic to any shellfish?"}, config={"callbacks": [rec2]})
    system = rec2.chats[0][0]
    assert isinstance(system, SystemMessage) and "allergic to shellfish" in system.text
    assert out["history"] == []
    assert out["text"] == "Got it."  # FakeListChatModel cycles; the 4th call gets the 1st response


def test_llm_chain_messages_merged_history(mem: HybridMemory) -> None:
    """long_term_key=None with messages: the block is a system message in front of the history."""
    mem.remember("u1", "Lucia is allergic to shellfish", importance=0.9)
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s9", return_messages=True)
    out = memory.load_memory_variables({"input": "Is Lucia allergic to shellfish?"})
    assert isinstance(out["history"][0], SystemMessage) and "shellfish" in out["history"][0].text
    chain = LLMChain(llm=FakeListChatModel(responses=["Shellfish."]), prompt=prompt, memory=memory)
    assert chain.invoke({"input": "Is Lucia allergic to shellfish?"})["text"] == "Shellfish."


def test_save_context_feeds_add_turn_and_clear_keeps_long_term(mem: HybridMemory) -> None:
    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1", long_term_key="long_term")
    memory.save_context({"input": FACT}, {"output": "I'll remember that."})
    turns = mem.short_term("u1", "s1")
    assert [(t.role, t.content) for t in turns] == [("user", FACT), ("assistant", "I'll remember that.")]
    assert turns[0].key_frame  # scored by the core: an explicit "remember" is a key frame
    assert any("shellfish" in r.content for r in mem.list_memories("u1"))  # written long-term at once

    memory.clear()
    assert mem.short_term("u1", "s1") == []
    assert memory.load_memory_variables({"input": "x"})["history"] == ""
    assert "shellfish" in memory.load_memory_variables({"input": "Is Lucia allergic to shellfish?"})["long_term"]


def test_load_returns_copies(mem: HybridMemory) -> None:
    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1", return_messages=True)
    memory.save_context({"input": "hello there"}, {"output": "hi"})
    first = memory.load_memory_variables({"input": "next"})["history"]
    first.append(HumanMessage(content="tampered"))
    first[0].content = "changed"
    again = memory.load_memory_variables({"input": "next"})["history"]
    assert [m.content for m in again] == ["hello there", "hi"]


def test_input_key_detection_and_errors(mem: HybridMemory) -> None:
    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1", long_term_key="long_term")
    with pytest.raises(ValueError, match="One input key expected"):
        memory.load_memory_variables({"a": "x", "b": "y"})
    keyed = HybridChatMemory(memory=mem, user_id="u1", session_id="s1", input_key="b", long_term_key="long_term")
    assert keyed.load_memory_variables({"a": "x", "b": "y"}) == {"history": "", "long_term": ""}
    with pytest.raises(ValueError):
        HybridChatMemory(memory=mem, user_id="", session_id="s1")


def test_users_do_not_share_memories(mem: HybridMemory) -> None:
    HybridChatMemory(memory=mem, user_id="u1", session_id="s1").save_context({"input": FACT}, {"output": "ok"})
    other = HybridChatMemory(memory=mem, user_id="u2", session_id="s1", long_term_key="long_term")
    out = other.load_memory_variables({"input": "Is Lucia allergic to shellfish?"})
    assert out == {"history": "", "long_term": ""}


def test_evicted_turns_reach_long_term_memory() -> None:
    """A small short-term budget: old turns leave the window, later sessions still recall them."""
    cfg = HybridMemoryConfig(buffer={"max_tokens": 40})
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(dim=256), config=cfg)
    try:
        chain = ConversationChain(
            llm=FakeListLLM(responses=["ok"]), memory=HybridChatMemory(memory=mem, user_id="u1", session_id="s1")
        )
        chain.invoke({"input": "My project codename is Bluebird and it ships in June"})
        for i in range(8):
            chain.invoke({"input": f"Filler message number {i} about nothing in particular"})
        window = " ".join(t.content for t in mem.short_term("u1", "s1"))
        assert "Bluebird" not in window
        later = HybridChatMemory(memory=mem, user_id="u1", session_id="s2", long_term_key="long_term")
        assert "Bluebird" in later.load_memory_variables({"input": "What is the Bluebird project?"})["long_term"]
    finally:
        mem.close()


async def test_async_chain(mem: HybridMemory) -> None:
    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1", long_term_key="long_term")
    prompt = PromptTemplate.from_template("{long_term}\n{history}\nHuman: {input}\nAI:")
    chain = ConversationChain(llm=FakeListLLM(responses=["a", "b"]), prompt=prompt, memory=memory)
    await chain.ainvoke({"input": FACT})
    await chain.ainvoke({"input": "thanks"})
    assert [t.content for t in mem.short_term("u1", "s1")] == [FACT, "a", "thanks", "b"]
    other = HybridChatMemory(memory=mem, user_id="u1", session_id="s2", long_term_key="long_term")
    out = await other.aload_memory_variables({"input": "Is Lucia allergic to shellfish?"})
    assert "shellfish" in out["long_term"]
    await memory.aclear()
    assert mem.short_term("u1", "s1") == []


def test_llm_chain_string_prompt_several_turns(mem: HybridMemory) -> None:
    prompt = PromptTemplate.from_template("{history}\nHuman: {question}\nAI:")
    rec = PromptRecorder()

    def chain_for(session: str) -> LLMChain:
        memory = HybridChatMemory(memory=mem, user_id="u7", session_id=session)
        return LLMChain(llm=FakeListLLM(responses=["ok", "sure", "fine"]), prompt=prompt, memory=memory)

    first = chain_for("s1")
    for t in TURNS:
        first.invoke({"question": t}, config={"callbacks": [rec]})
    assert rec.prompts[1].startswith(f"Human: {FACT}\nAI: ok\nHuman: I also enjoy hiking")
    chain_for("s2").invoke({"question": "Is Lucia allergic to shellfish?"}, config={"callbacks": [rec]})
    assert rec.prompts[-1].startswith("<memory-context>")
    assert "allergic to shellfish" in rec.prompts[-1].split("</memory-context>")[0]


def test_messages_with_ids_are_recorded_once_and_a_forgotten_one_stays_forgotten(mem: HybridMemory) -> None:
    """``RunnableWithMessageHistory`` adds a run's messages to the history; a retried run adds them again."""
    from langchain_core.runnables.history import RunnableWithMessageHistory

    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1")
    chain = RunnableWithMessageHistory(
        FakeListChatModel(responses=["Noted.", "Noted again."]), lambda session_id: memory.chat_memory
    )
    said = HumanMessage(content=FACT, id="msg-1")  # the application's own message id
    config = {"configurable": {"session_id": "s1"}}
    chain.invoke([said], config=config)
    chain.invoke([said], config=config)  # the same request retried (the answer is a new message)
    turns = mem.short_term("u1", "s1")
    assert [t.content for t in turns] == [FACT, "Noted.", "Noted again."]  # the user's words once
    assert [r.content for r in mem.list_memories("u1")].count(FACT) == 1

    assert mem.forget_turn(turns[0].id, user_id="u1", session_id="s1")
    memory.chat_memory.add_messages([said])  # a late retry after "forget what I just said"
    assert FACT not in [t.content for t in mem.short_term("u1", "s1")]
    assert not any("shellfish" in r.content for r in mem.list_memories("u1"))

    # scoped by session: the same message in another conversation is a turn there
    other = HybridChatMemory(memory=mem, user_id="u1", session_id="s2")
    other.chat_memory.add_messages([said])
    assert [t.content for t in mem.short_term("u1", "s2")] == [FACT]
    # without an id each add is a new turn, as before
    other.chat_memory.add_messages([HumanMessage(content="hello"), HumanMessage(content="hello")])
    assert [t.content for t in mem.short_term("u1", "s2")] == [FACT, "hello", "hello"]


async def test_a_retried_async_run_records_the_message_once(mem: HybridMemory) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    memory = HybridChatMemory(memory=mem, user_id="u1", session_id="s1")
    chain = RunnableWithMessageHistory(
        FakeListChatModel(responses=["Noted.", "Noted again."]), lambda session_id: memory.chat_memory
    )
    said = HumanMessage(content=FACT, id="msg-1")
    config = {"configurable": {"session_id": "s1"}}
    await chain.ainvoke([said], config=config)  # aadd_messages
    await chain.ainvoke([said], config=config)
    assert [t.content for t in mem.short_term("u1", "s1")] == [FACT, "Noted.", "Noted again."]
