"""One real ChatOpenAI conversation through HybridMemoryMiddleware, replayed from a vcrpy cassette.

The cassette was recorded once against a real OpenAI-compatible server: llama-cpp-python's
server running SmolLM2-135M-Instruct (Q4_1 GGUF, alias ``smollm2``) on 127.0.0.1, with::

    LLM_BASE_URL=http://127.0.0.1:PORT/v1 LLM_MODEL=<served model> \\
        python -m pytest tests/adapters/langchain/test_langchain_openai_vcr.py --record-mode=once

CI replays it (pytest-recording's default ``--record-mode=none``); no network, no key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from hybrid_memory import HybridMemory
from langchain_hybrid_memory import HybridMemoryMiddleware

CASSETTE = (
    Path(__file__).parent
    / "cassettes"
    / "test_langchain_openai_vcr"
    / "test_chat_openai_conversation_through_middleware.yaml"
)


class Prompts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kw: Any) -> None:
        self.seen.extend(list(m) for m in messages)


@pytest.mark.vcr
def test_chat_openai_conversation_through_middleware(mem: HybridMemory, record_mode: str) -> None:
    if record_mode == "none" and not CASSETTE.exists():
        pytest.skip(f"no cassette yet: record it against a real server with --record-mode=once ({CASSETTE.name})")
    openai = pytest.importorskip("langchain_openai")
    model = openai.ChatOpenAI(
        model=os.environ.get("LLM_MODEL", "recorded-model"),
        base_url=os.environ.get("LLM_BASE_URL", "http://127.0.0.1:8080/v1"),
        api_key=os.environ.get("LLM_API_KEY", "sk-test"),
        temperature=0,
        max_tokens=64,
        max_retries=0,
        timeout=120,
    )
    agent = create_agent(
        model,
        system_prompt="You are a concise assistant. Answer in one short sentence.",
        middleware=[HybridMemoryMiddleware(mem)],
        checkpointer=InMemorySaver(),
    )
    prompts = Prompts()

    def ask(thread: str, text: str) -> str:
        out = agent.invoke(
            {"messages": [("user", text)]},
            config={"configurable": {"thread_id": thread}, "callbacks": [prompts]},
            context={"user_id": "alice"},
        )
        return str(out["messages"][-1].text)

    ask("t1", "Remember: my cat is called Miso and she is allergic to chicken.")
    answer = ask("t2", "What is my cat called, and which food is she allergic to?")

    # the second thread had no history, but the middleware injected the fact into the user message
    # (the default placement; the system message stays as given, so a prefix cache keeps working)
    second = prompts.seen[-1]
    assert isinstance(second[0], SystemMessage)
    assert second[0].text == "You are a concise assistant. Answer in one short sentence."
    assert [m.type for m in second[1:]] == ["human"]
    assert "my cat is called Miso" in second[1].text and second[1].text.startswith("<memory-context>")
    # and the real model used it
    assert "miso" in answer.lower()
    assert "chicken" in answer.lower()
    assert [t.role for t in mem.short_term("alice", "t2")] == ["user", "assistant"]
