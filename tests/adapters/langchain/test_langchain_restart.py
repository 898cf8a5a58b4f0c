"""Across a restart (issue 13): what a user told an agent or a chain is there after the process dies.

Thread A runs in a child process that exits without ``close()`` or ``end_session`` (``os._exit``);
thread B, in this process, on the same store file, recalls every fact. No user code ends a session.
The LangGraph store's ``put`` path scores the redacted text with a real ``LLMImportanceScorer``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.importance import LLMImportanceScorer
from langchain_hybrid_memory import HybridChatMemory, HybridMemoryMiddleware, HybridMemoryStore

ROOT = Path(__file__).resolve().parents[3]
FACTS = [
    "My flight to Berlin is next Tuesday at 9am.",
    "I started learning the cello last month.",
    "Remember: I am allergic to peanuts.",
    "I prefer aisle seats on planes.",
]
QUESTIONS = {
    "When is my flight to Berlin?": "Berlin",
    "Which instrument am I learning, the cello?": "cello",
    "Can I eat peanuts?": "peanuts",
    "Which seats do I prefer on planes?": "aisle",
}

THREAD_A = textwrap.dedent(
    """
    import os, sys
    from langchain.agents import create_agent
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.testing import HashingEmbedder
    from langchain_hybrid_memory import HybridMemoryMiddleware

    facts = sys.argv[2:]
    mem = HybridMemory(LocalStore(sys.argv[1]), embedder=HashingEmbedder())
    model = GenericFakeChatModel(messages=iter([AIMessage(content="Noted.") for _ in facts]))
    agent = create_agent(model, middleware=[HybridMemoryMiddleware(mem)], checkpointer=InMemorySaver())
    for fact in facts:
        agent.invoke({"messages": [("user", fact)]}, config={"configurable": {"thread_id": "A", "user_id": "alice"}})
    sys.stdout.write("told\\n"); sys.stdout.flush()
    os._exit(0)  # the worker dies: no close(), no end_session
    """
)

CHAIN_A = textwrap.dedent(
    """
    import os, sys
    from langchain_hybrid_memory import HybridChatMemory
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.testing import HashingEmbedder

    mem = HybridMemory(LocalStore(sys.argv[1]), embedder=HashingEmbedder())
    chat = HybridChatMemory(mem, user_id="bob", session_id="monday")
    for fact in sys.argv[2:]:
        chat.save_context({"input": fact}, {"output": "Noted."})
    sys.stdout.write("told\\n"); sys.stdout.flush()
    os._exit(0)
    """
)


def _child(code: str, db: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", code, str(db), *FACTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "told", done.stderr


def test_middleware_facts_told_in_thread_a_are_recalled_in_thread_b_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    _child(THREAD_A, db)
    mem = HybridMemory(LocalStore(db), embedder=HashingEmbedder())
    try:
        model = GenericFakeChatModel(messages=iter([AIMessage(content="Let me see.") for _ in QUESTIONS]))
        agent = create_agent(model, middleware=[HybridMemoryMiddleware(mem)], checkpointer=InMemorySaver())
        for question, needle in QUESTIONS.items():
            out = agent.invoke(
                {"messages": [("user", question)]},
                config={"configurable": {"thread_id": "B", "user_id": "alice"}},
            )
            # in this turn's block, or in an earlier block of the thread that the prompt still shows
            injected = " ".join(p["text"] for p in out["memory_context"]["placed"])
            assert needle in injected, (question, out["memory_context"])
    finally:
        mem.close()


def test_chat_memory_facts_survive_a_restart_without_end_session(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    _child(CHAIN_A, db)
    mem = HybridMemory(LocalStore(db), embedder=HashingEmbedder())
    try:
        # the same session continues with the same window ...
        same = HybridChatMemory(mem, user_id="bob", session_id="monday")
        history = same.load_memory_variables({"input": "hello again"})["history"]
        assert all(f in history for f in FACTS)
        # ... and another session recalls every fact from long-term memory
        other = HybridChatMemory(mem, user_id="bob", session_id="tuesday", long_term_key="long_term")
        for question, needle in QUESTIONS.items():
            assert needle in other.load_memory_variables({"input": question})["long_term"], question
    finally:
        mem.close()


class _Recording(FakeListChatModel):
    prompts: list[str] = Field(default_factory=list)

    def _call(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append("\n".join(str(m.content) for m in messages))
        return super()._call(messages, stop, run_manager, **kwargs)


def test_langgraph_put_scores_only_redacted_text_with_an_llm_scorer() -> None:
    llm = _Recording(responses=['{"scores": [{"index": 0, "score": 8}]}'] * 3)
    mem = HybridMemory(
        LocalStore(":memory:"), embedder=HashingEmbedder(), scorer=LLMImportanceScorer(llm, method="json_mode")
    )
    try:
        store = HybridMemoryStore(mem)
        store.put(("memories", "alice"), "phone", {"content": "Alice's phone is 13812345678, call after 6pm"})
        assert llm.prompts, "the LLM scorer was called"
        assert all("13812345678" not in p for p in llm.prompts)
        assert any("[PHONE]" in p for p in llm.prompts)
        item = store.get(("memories", "alice"), "phone")
        assert item is not None
        (record,) = mem.list_memories("alice")
        assert "13812345678" not in record.content and record.importance > 0.5  # the LLM's 8/10 was used
    finally:
        mem.close()
