"""The README's ``## MCP server`` section: its Python snippets run as written (with fake chat
models handed to the functions they define), its JSON config parses into a valid command."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from llama_index.core.agent.workflow import ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from hybrid_memory.cli import build_parser
from tests.adapters.langchain.conftest import ToolCallingFake
from tests.readme_sections import readme_section, run_section

pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
]
SECTION = "MCP server"


def test_the_desktop_config_is_a_valid_command() -> None:
    block = re.search(r"```json\n(.*?)```", readme_section(SECTION), re.S)
    assert block is not None
    server = json.loads(block.group(1))["mcpServers"]["memory"]
    assert server["command"] == "hybrid-memory"
    args = build_parser().parse_args(server["args"])
    assert (args.command, args.transport, args.user) == ("mcp", "stdio", "alice")


def test_every_command_of_the_section_parses() -> None:
    lines = [
        line.split("  #")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", readme_section(SECTION), re.S)
        for line in block.splitlines()
    ]
    commands = [build_parser().parse_args(shlex.split(line)[1:]) for line in lines if line.startswith("hybrid-memory ")]
    assert [(a.transport, a.metrics_port) for a in commands] == [("http", None), ("http", 9465)]


async def test_the_langgraph_and_llamaindex_snippets_share_one_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the snippets use memory.db in the working directory
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    ns = run_section(SECTION, {})

    model = ToolCallingFake(
        messages=iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[{"name": "remember", "args": {"content": "I prefer aisle seats"}, "id": "c1"}],
                ),
                AIMessage(content="Noted."),
            ]
        )
    )
    agent = await ns["langgraph_agent"](model)
    result = await agent.ainvoke({"messages": [{"role": "user", "content": "Remember that I prefer aisle seats."}]})
    tool_msgs = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(tool_msgs[0].text)["action"] == "added"

    calls = iter([("recall", {"query": "aisle seats"})])

    def respond(messages: Any, **kwargs: Any) -> ChatMessage:
        nxt = next(calls, None)
        if nxt is None:
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        block = ToolCallBlock(tool_call_id=uuid4().hex, tool_name=nxt[0], tool_kwargs=nxt[1])
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    li_agent = await ns["llamaindex_agent"](MockFunctionCallingLLM(response_generator=respond))
    handler = li_agent.run("Where do I like to sit?")
    outputs = [str(ev.tool_output.raw_output) async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
    await handler
    assert "I prefer aisle seats" in outputs[0]
