"""create_agent + HybridMemoryMiddleware + HybridMemoryStore, with real agents, tools and graphs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from hybrid_memory import HybridMemory, InvalidInputError
from langchain_hybrid_memory import HybridMemoryMiddleware, HybridMemoryStore


@dataclass
class Ctx:
    user_id: str


@tool
def save_memory(content: str, runtime: ToolRuntime[Ctx]) -> str:
    """Save a fact about the user for later conversations."""
    assert runtime.store is not None
    runtime.store.put(("memories", runtime.context.user_id), str(uuid4()), {"content": content})
    return "saved"


@tool
def search_memory(query: str, runtime: ToolRuntime[Ctx]) -> str:
    """Search what is known about the user."""
    assert runtime.store is not None
    items = runtime.store.search(("memories", runtime.context.user_id), query=query, limit=3)
    return "\n".join(i.value["content"] for i in items) or "nothing found"


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid4().hex[:8]}"}])


def _system_text(messages: list[Any]) -> str:
    return messages[0].text if messages and isinstance(messages[0], SystemMessage) else ""


def _user_text(messages: list[Any]) -> str:
    """The newest user message as the model got it (the block goes there by default)."""
    return next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")


def _agent(mem: HybridMemory, model: Any, **kwargs: Any) -> Any:
    return create_agent(
        model,
        tools=[save_memory, search_memory],
        system_prompt="You are a helpful assistant.",
        middleware=[HybridMemoryMiddleware(mem)],
        context_schema=Ctx,
        checkpointer=InMemorySaver(),
        store=HybridMemoryStore(mem),
        **kwargs,
    )


def _thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def test_second_thread_recalls_what_the_first_stored_and_other_users_see_nothing(
    mem: HybridMemory, tool_model: Any
) -> None:
    model = tool_model(
        messages=iter(
            [
                # thread 1, alice: the model stores a fact through the store-backed tool
                _call("save_memory", {"content": "The user's favourite colour is teal"}),
                AIMessage(content="I'll remember that."),
                # thread 2, alice: the model searches the store
                _call("search_memory", {"query": "favourite colour"}),
                AIMessage(content="Your favourite colour is teal."),
                # thread 3, bob: same question
                _call("search_memory", {"query": "favourite colour"}),
                AIMessage(content="I don't know yet."),
            ]
        )
    )
    agent = _agent(mem, model)
    agent.invoke(
        {"messages": [HumanMessage("Please keep in mind which colour I like best")]},
        config=_thread("t1"),
        context=Ctx("alice"),
    )
    found = HybridMemoryStore(mem).search(("memories", "alice"), query="favourite colour")
    assert found[0].value == {"content": "The user's favourite colour is teal"}

    n_before = len(model.seen)
    out = agent.invoke(
        {"messages": [HumanMessage("What is my favourite colour?")]}, config=_thread("t2"), context=Ctx("alice")
    )
    # a fresh thread: no short-term history from t1 ...
    assert [m.text for m in out["messages"] if isinstance(m, HumanMessage)] == ["What is my favourite colour?"]
    # ... yet every model call of t2 got the fact injected by the middleware,
    for prompt in model.seen[n_before:]:
        assert _system_text(prompt) == "You are a helpful assistant."  # the system prompt never changes
        asked = _user_text(prompt)
        assert asked.startswith("<memory-context>") and asked.endswith(
            "</memory-context>\n\nWhat is my favourite colour?"
        )
        assert "favourite colour is teal" in asked
    # the store-backed tool found it,
    tool_msgs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "favourite colour is teal" in tool_msgs[0].text
    # and the recall is inspectable in the agent's output
    hits = out["memory_context"]["hits"]
    assert hits and hits[0]["content"] == "The user's favourite colour is teal"
    assert {"score", "relevance", "keyword_score", "vector_similarity", "importance", "recency", "heat"} <= set(hits[0])

    n_before = len(model.seen)
    bob = agent.invoke(
        {"messages": [HumanMessage("What is my favourite colour?")]}, config=_thread("t3"), context=Ctx("bob")
    )
    for prompt in model.seen[n_before:]:
        assert "teal" not in _user_text(prompt) and _user_text(prompt) == "What is my favourite colour?"
        assert _system_text(prompt) == "You are a helpful assistant."
    assert [m.text for m in bob["messages"] if isinstance(m, ToolMessage)] == ["nothing found"]
    assert bob["memory_context"]["hits"] == []
    assert all("teal" not in r.content for r in mem.list_memories("bob"))


def test_turns_are_recorded_once_per_user_message(mem: HybridMemory, tool_model: Any) -> None:
    model = tool_model(messages=iter([AIMessage(content="Hello Ann."), AIMessage(content="Sure.")]))
    agent = _agent(mem, model)
    agent.invoke({"messages": [HumanMessage("Hi, my name is Ann")]}, config=_thread("t1"), context=Ctx("ann"))
    agent.invoke({"messages": [HumanMessage("Remember: I never eat meat")]}, config=_thread("t1"), context=Ctx("ann"))
    turns = mem.short_term("ann", "t1")
    assert [(t.role, t.content) for t in turns] == [
        ("user", "Hi, my name is Ann"),
        ("assistant", "Hello Ann."),
        ("user", "Remember: I never eat meat"),
        ("assistant", "Sure."),
    ]
    assert turns[2].key_frame  # the core scored it: a constraint written to long-term memory at once
    assert any("never eat meat" in r.content for r in mem.list_memories("ann"))


def test_tool_only_turn_and_no_system_prompt(mem: HybridMemory, tool_model: Any) -> None:
    mem.remember("dan", "Dan's dog is called Rex", importance=0.8)
    model = tool_model(messages=iter([AIMessage(content="Rex!")]))
    agent = create_agent(model, middleware=[HybridMemoryMiddleware(mem, user_id="dan")])
    out = agent.invoke({"messages": [HumanMessage("What is my dog called?")]})
    assert [type(m) for m in model.seen[0]] == [HumanMessage]  # no system message is made up
    assert "Dan's dog is called Rex" in _user_text(model.seen[0])
    assert out["memory_context"]["session_id"] == "default"
    assert [t.content for t in mem.short_term("dan", "default")] == ["What is my dog called?", "Rex!"]


def test_nothing_relevant_leaves_the_prompt_alone(mem: HybridMemory, tool_model: Any) -> None:
    mem.remember("eve", "Eve plays the cello", importance=0.5)
    model = tool_model(messages=iter([AIMessage(content="42")]))
    agent = create_agent(model, system_prompt="Be brief.", middleware=[HybridMemoryMiddleware(mem)])
    out = agent.invoke({"messages": [HumanMessage("zxqv wpt")]}, context={"user_id": "eve"})
    assert _system_text(model.seen[0]) == "Be brief."
    assert out["memory_context"]["skipped"] is True and out["memory_context"]["skipped_reason"]


def test_user_id_lookup_order_and_missing_user(mem: HybridMemory, tool_model: Any) -> None:
    mem.remember("fay", "Fay lives in Lisbon", importance=0.7)
    mem.remember("gus", "Gus lives in Oslo", importance=0.7)
    model = tool_model(messages=iter([AIMessage(content="ok")] * 4))
    mw = HybridMemoryMiddleware(mem, user_id_key="uid")
    agent = create_agent(model, middleware=[mw])
    out = agent.invoke({"messages": [HumanMessage("Where do I live?")]}, config={"configurable": {"uid": "gus"}})
    assert out["memory_context"]["user_id"] == "gus"
    out = agent.invoke({"messages": [HumanMessage("In which city Fay lives?")]}, context={"uid": "fay"})
    assert out["memory_context"]["user_id"] == "fay" and "Lisbon" in out["memory_context"]["text"]
    with pytest.raises(InvalidInputError, match="needs a user id"):
        agent.invoke({"messages": [HumanMessage("Where do I live?")]})
    fallback = create_agent(
        GenericFakeChatModel(messages=iter(["ok"])), middleware=[HybridMemoryMiddleware(mem, user_id="gus")]
    )
    assert fallback.invoke({"messages": [HumanMessage("Where do I live?")]})["memory_context"]["user_id"] == "gus"


def test_record_turns_can_be_switched_off(mem: HybridMemory) -> None:
    agent = create_agent(
        GenericFakeChatModel(messages=iter(["ok"])), middleware=[HybridMemoryMiddleware(mem, record_turns=False)]
    )
    agent.invoke({"messages": [HumanMessage("hello")]}, context={"user_id": "hal"})
    assert mem.short_term("hal", "default") == []


async def test_async_agent(mem: HybridMemory, tool_model: Any) -> None:
    model = tool_model(
        messages=iter(
            [
                _call("save_memory", {"content": "The user's passport expires in March 2027"}),
                AIMessage(content="Saved."),
                AIMessage(content="March 2027."),
            ]
        )
    )
    agent = _agent(mem, model)
    await agent.ainvoke(
        {"messages": [HumanMessage("Note my passport date please")]}, config=_thread("a1"), context=Ctx("ivy")
    )
    n = len(model.seen)
    out = await agent.ainvoke(
        {"messages": [HumanMessage("When does my passport expire?")]}, config=_thread("a2"), context=Ctx("ivy")
    )
    assert "passport expires in March 2027" in _user_text(model.seen[n])
    assert out["messages"][-1].text == "March 2027."
    assert [t.role for t in mem.short_term("ivy", "a2")] == ["user", "assistant"]


# --------------------------------------------------------------------------- LangMem's user key
@tool
def manage_memory(content: str, runtime: ToolRuntime) -> str:
    """Save a memory, as LangMem's manage_memory tool does.

    LangMem fills its ("memories", "{langgraph_user_id}") namespace template from
    ``config["configurable"]["langgraph_user_id"]``; this tool reads the user the same way (LangMem
    itself is not a dependency of this project).
    """
    assert runtime.store is not None
    user = runtime.config["configurable"]["langgraph_user_id"]
    runtime.store.put(("memories", user), str(uuid4()), {"content": content})
    return "saved"


def _langmem_config(thread_id: str, user: str, **extra: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "langgraph_user_id": user, **extra}}


def test_langgraph_user_id_from_langmem_config(mem: HybridMemory, tool_model: Any) -> None:
    model = tool_model(
        messages=iter(
            [
                _call("manage_memory", {"content": "Jo takes the night train to Vienna on Fridays"}),
                AIMessage(content="Saved."),
                AIMessage(content="The night train to Vienna."),
            ]
        )
    )
    agent = create_agent(
        model,
        tools=[manage_memory],
        system_prompt="You are a helpful assistant.",
        middleware=[HybridMemoryMiddleware(mem)],
        checkpointer=InMemorySaver(),
        store=HybridMemoryStore(mem),
    )
    first = agent.invoke(
        {"messages": [HumanMessage("Please note how I travel on Fridays")]}, config=_langmem_config("t1", "jo")
    )
    # The middleware resolved the same user the LangMem-style tool wrote for ...
    assert first["memory_context"]["user_id"] == "jo"
    assert [r.content for r in mem.list_memories("jo") if "Vienna" in r.content]
    assert mem.short_term("jo", "t1")[0].content == "Please note how I travel on Fridays"

    n_before = len(model.seen)
    second = agent.invoke(
        {"messages": [HumanMessage("How do I get to Vienna on Fridays?")]}, config=_langmem_config("t2", "jo")
    )
    # ... so a new thread recalls what the tool stored, in the prompt and in the output.
    assert second["memory_context"]["user_id"] == "jo"
    assert "night train to Vienna" in _user_text(model.seen[n_before])
    assert any("night train" in h["content"] for h in second["memory_context"]["hits"])
    assert mem.list_memories("default") == [] and "jo" in mem.users()


def test_langgraph_user_id_comes_after_the_configured_key(mem: HybridMemory) -> None:
    mem.remember("kim", "Kim lives in Bergen", importance=0.7)
    mem.remember("lou", "Lou lives in Porto", importance=0.7)
    agent = create_agent(GenericFakeChatModel(messages=iter(["ok"] * 5)), middleware=[HybridMemoryMiddleware(mem)])
    question = {"messages": [HumanMessage("Where do I live?")]}

    def user(**kwargs: Any) -> str:
        return str(agent.invoke(question, **kwargs)["memory_context"]["user_id"])

    # Lookup order: context[user_id] > configurable[user_id] > configurable[langgraph_user_id]
    # > context[langgraph_user_id] > the constructor's fallback.
    assert user(config=_langmem_config("t", "lou"), context={"user_id": "kim"}) == "kim"
    assert user(config=_langmem_config("t", "lou", user_id="kim")) == "kim"
    assert user(config=_langmem_config("t", "lou")) == "lou"
    assert user(context={"langgraph_user_id": "lou"}) == "lou"
    fallback = create_agent(
        GenericFakeChatModel(messages=iter(["ok"])), middleware=[HybridMemoryMiddleware(mem, user_id="kim")]
    )
    assert fallback.invoke(question, config=_langmem_config("t", "lou"))["memory_context"]["user_id"] == "lou"
    with pytest.raises(InvalidInputError, match="langgraph_user_id"):
        agent.invoke(question)
