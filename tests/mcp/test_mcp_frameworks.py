"""Framework agents through the MCP server: a LangChain ``create_agent`` over streamable HTTP
(``langchain-mcp-adapters``) and a LlamaIndex ``FunctionAgent`` over stdio
(``llama-index-tools-mcp``), two server processes over one store. A fact remembered through one
client is recalled through the other; another user's token sees nothing.

The chat models are fakes that emit scripted tool calls (LangChain's ``GenericFakeChatModel``
with ``bind_tools``, LlamaIndex's ``MockFunctionCallingLLM`` with a response generator); the
agents, MCP adapters, SDK clients, servers and store are real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

pytest.importorskip("langchain_mcp_adapters")
pytest.importorskip("llama_index.tools.mcp")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec

from tests.adapters.langchain.conftest import ToolCallingFake
from tests.mcp.conftest import ALICE_TOKEN, BOB_TOKEN, HttpServer, hybrid_memory_command, server_env, stdio_args

# FunctionAgent's workflow machinery runs inspect.getmembers over the pydantic agent, which reads
# deprecated pydantic attributes; that happens inside llama-index (same filter as
# tests/adapters/llamaindex/test_llamaindex_agent_memory.py), only when ``inspect`` triggered it.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
]

FACT = "Alice's daughter Mia is allergic to peanuts"
FACT_2 = "Alice's favourite tea is Tieguanyin oolong"


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid4().hex[:8]}"}])


async def _langchain_run(server: HttpServer, token: str, script: list[AIMessage], question: str) -> list[ToolMessage]:
    client = MultiServerMCPClient(
        {"memory": {"transport": "streamable_http", "url": server.url, "headers": server.headers(token)}}
    )
    tools = await client.get_tools()
    assert {t.name for t in tools} >= {"remember", "recall", "build_context"}
    agent = create_agent(ToolCallingFake(messages=iter(script)), tools=tools, system_prompt="Use your memory tools.")
    result = await agent.ainvoke({"messages": [{"role": "user", "content": question}]})
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def _scripted(calls: Sequence[tuple[str, dict[str, Any]]]) -> Any:
    """A LlamaIndex response generator: the next scripted tool call, then an answer quoting the tool result."""
    todo: Iterator[tuple[str, dict[str, Any]]] = iter(calls)

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        nxt = next(todo, None)
        if nxt is None:
            last = messages[-1].content or ""
            return ChatMessage(role=MessageRole.ASSISTANT, content=f"From memory: {last}")
        name, args = nxt
        block = ToolCallBlock(tool_call_id=f"call-{uuid4().hex[:8]}", tool_name=name, tool_kwargs=args)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    return respond


async def _llamaindex_run(
    store: Path, user: str, calls: Sequence[tuple[str, dict[str, Any]]], question: str
) -> list[str]:
    cmd = hybrid_memory_command()
    client = BasicMCPClient(cmd[0], args=[*cmd[1:], *stdio_args(store, user)], env=server_env())
    tools = await McpToolSpec(client=client, allowed_tools=["remember", "recall"]).to_tool_list_async()
    assert sorted(t.metadata.name or "" for t in tools) == ["recall", "remember"]
    agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=_scripted(calls)))
    handler = agent.run(question)
    outputs = [str(ev.tool_output.raw_output) async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
    await handler
    return outputs


async def test_langchain_remembers_over_http_and_llamaindex_recalls_over_stdio(
    http_server: HttpServer, store_path: Path
) -> None:
    # 1. LangChain agent (HTTP, alice's token) stores a fact
    msgs = await _langchain_run(
        http_server,
        ALICE_TOKEN,
        [_call("remember", {"content": FACT, "importance": 0.9}), AIMessage(content="Noted.")],
        "Please remember that my daughter Mia is allergic to peanuts.",
    )
    assert len(msgs) == 1 and msgs[0].status == "success"
    assert json.loads(msgs[0].text)["action"] == "added"

    # 2. LlamaIndex agent (stdio, another process, --user alice) recalls it and stores another one
    outputs = await _llamaindex_run(
        http_server.store,
        "alice",
        [("recall", {"query": "Mia peanuts allergy", "k": 3}), ("remember", {"content": FACT_2})],
        "Can Mia eat satay?",
    )
    assert len(outputs) == 2
    assert FACT in outputs[0]
    assert "added" in outputs[1]

    # 3. back in LangChain over HTTP, the fact stored through LlamaIndex is there
    msgs = await _langchain_run(
        http_server,
        ALICE_TOKEN,
        [_call("recall", {"query": "favourite tea oolong"}), AIMessage(content="Tieguanyin.")],
        "Which tea do I like?",
    )
    hits = json.loads(msgs[0].text)["hits"]
    assert hits[0]["content"] == FACT_2
    assert hits[0]["score"] > 0 and "relevance" in hits[0]

    # 4. bob's token, same question, same tools: nothing of alice's
    msgs = await _langchain_run(
        http_server,
        BOB_TOKEN,
        [_call("recall", {"query": "Mia peanuts allergy tea"}), AIMessage(content="I don't know.")],
        "What do you know?",
    )
    assert json.loads(msgs[0].text)["hits"] == []


async def test_a_hostile_tool_call_from_an_agent_is_a_tool_error_the_agent_sees(http_server: HttpServer) -> None:
    msgs = await _langchain_run(
        http_server,
        ALICE_TOKEN,
        [_call("recall", {"query": "tea", "k": 5000}), AIMessage(content="Sorry.")],
        "tea?",
    )
    assert msgs[0].status == "error"
    assert "InvalidInputError: invalid arguments: k: Input should be less than or equal to 50" in msgs[0].text
