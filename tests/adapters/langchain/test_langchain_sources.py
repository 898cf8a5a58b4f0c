"""Source discipline in the LangChain adapters: only the user's words become memories about the user."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from hybrid_memory import HybridMemory
from langchain_hybrid_memory import HybridChatMemory, HybridMemoryMiddleware


def test_middleware_records_the_answer_as_context_not_as_a_memory(mem: HybridMemory, tool_model: Any) -> None:
    hallucination = "Thought: she said it before.\nAnswer: Mia est allergique à l'hæblère et au sésame."
    model = tool_model(messages=iter([AIMessage(content=hallucination)]))
    agent = create_agent(model, system_prompt="Always answer in French.", middleware=[HybridMemoryMiddleware(mem)])
    agent.invoke(
        {"messages": [HumanMessage("Remember: my daughter Mia is allergic to peanuts.")]},
        config={"configurable": {"user_id": "alice", "thread_id": "t1"}},
    )
    turns = mem.short_term("alice", "t1")
    assert [t.role for t in turns] == ["user", "assistant"]  # the answer is conversation context
    assert {r.content for r in mem.list_memories("alice")} == {"Remember: my daughter Mia is allergic to peanuts."}
    assert all(r.source == "user" for r in mem.list_memories("alice"))


def test_chat_history_stores_only_the_users_words(mem: HybridMemory) -> None:
    history = HybridChatMemory(memory=mem, user_id="bob", session_id="s1").chat_memory
    history.add_messages(
        [
            SystemMessage("You are a travel agent. Never mention prices."),
            HumanMessage("I am vegetarian and I never fly at night."),
            AIMessage("Thought: find day flights.\nAction: search_flights"),
            ToolMessage("Flight LH123 departs 07:10, 240 EUR", tool_call_id="call_1"),
            HumanMessage("Observation: LH123 is fully booked"),
            AIMessage("I booked you on the 07:10 Lufthansa flight to Lisbon."),
        ]
    )
    roles = [t.role for t in mem.short_term("bob", "s1")]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert {r.content for r in mem.list_memories("bob")} == {"I am vegetarian and I never fly at night."}
