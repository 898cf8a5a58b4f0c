"""The SDK's own client against ``hybrid-memory mcp`` over stdio (a real subprocess per test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from hybrid_memory.cli import main
from tests.mcp.conftest import run_stdio


async def test_tools_resources_and_prompts_round_trip_and_replay_shows_them(
    store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def calls(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["init_tools"] = (await s.list_tools()).tools
        out["remember"] = await s.call_tool("remember", {"content": "Alice is allergic to peanuts", "importance": 0.9})
        await s.call_tool("remember", {"content": "Alice prefers green tea", "category": "preference"})
        out["recall"] = await s.call_tool("recall", {"query": "peanut allergy", "k": 2, "alpha": 0.0})
        out["turn"] = await s.call_tool(
            "add_turn", {"session_id": "chat-1", "role": "user", "content": "Remember: my flight is on Friday"}
        )
        out["context"] = await s.call_tool("build_context", {"query": "what am I allergic to?", "max_tokens": 200})
        out["page1"] = await s.call_tool("list_memories", {"limit": 2})
        out["page2"] = await s.call_tool("list_memories", {"limit": 2, "offset": 2})
        out["resource"] = await s.read_resource("memory://recent")
        out["prompt"] = await s.get_prompt("answer_with_memory", {"question": "am I allergic to peanuts?"})
        tea = out["page1"].structuredContent["memories"][1]["memory_id"]
        out["forget"] = await s.call_tool("forget", {"memory_id": tea})
        out["forget_again"] = await s.call_tool("forget", {"memory_id": tea})
        turn = {"session_id": "chat-1", "turn_id": out["turn"].structuredContent["turn_id"]}
        out["forget_turn"] = await s.call_tool("forget_turn", turn)
        out["forget_turn_again"] = await s.call_tool("forget_turn", turn)
        out["after_turn"] = await s.call_tool("list_memories", {})
        return out

    out = await run_stdio(store_path, "alice", tmp_path, calls)
    names = {t.name for t in out["init_tools"]}
    assert names == {"remember", "recall", "build_context", "add_turn", "forget", "forget_turn", "list_memories"}
    for t in out["init_tools"]:
        assert "user_id" not in json.dumps(t.inputSchema)  # no tool can name a user
        assert t.description and len(t.description) > 40
        assert t.outputSchema is not None

    assert out["remember"].isError is False
    assert out["remember"].structuredContent["action"] == "added"
    hits = out["recall"].structuredContent["hits"]
    assert hits[0]["content"] == "Alice is allergic to peanuts"
    components = {"score", "relevance", "keyword_score", "vector_similarity", "importance", "recency", "heat"}
    assert set(hits[0]) >= components | {"time_match", "length_prior"}
    assert hits[0]["length_prior"] == 1.0  # remembered on purpose: no length prior
    assert hits[0]["keyword_score"] > 0  # alpha 0.0 = pure BM25 stayed 0.0
    assert out["turn"].structuredContent["key_frame"] is True
    ctx = out["context"].structuredContent
    assert "peanuts" in ctx["text"] and 0 < ctx["token_count"] <= 200
    p1, p2 = out["page1"].structuredContent, out["page2"].structuredContent
    assert p1["total"] == 3 and len(p1["memories"]) == 2 and p1["next_offset"] == 2
    assert len(p2["memories"]) == 1 and p2["next_offset"] is None
    recent = json.loads(out["resource"].contents[0].text)
    assert recent[0]["content"].startswith("Remember: my flight")  # newest first
    prompt_text = out["prompt"].messages[0].content.text
    assert "peanuts" in prompt_text and prompt_text.endswith("am I allergic to peanuts?")
    assert out["forget"].structuredContent == {"memory_id": p1["memories"][1]["memory_id"], "deleted": True}
    assert out["forget_again"].structuredContent["deleted"] is False
    assert out["forget_turn"].structuredContent["deleted"] is True  # the turn and the memory kept from it
    assert out["forget_turn_again"].structuredContent["deleted"] is False
    left = [m["content"] for m in out["after_turn"].structuredContent["memories"]]
    assert left == ["Alice is allergic to peanuts"]

    # the tool calls were traced like library calls: `hybrid-memory replay` shows them
    capsys.readouterr()
    assert main(["replay", "-", "--user", "alice", "--store", str(store_path), "--json"]) == 0
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [s["kind"] for s in steps]
    assert kinds.count("remember") == 2 and "recall" in kinds and "build_context" in kinds
    assert main(["replay", "chat-1", "--user", "alice", "--store", str(store_path), "--json"]) == 0
    assert [json.loads(line)["kind"] for line in capsys.readouterr().out.splitlines()] == ["add_turn"]


async def test_the_user_is_fixed_at_start_and_forget_user_needs_the_operator_flag(
    store_path: Path, tmp_path: Path
) -> None:
    async def alice(s: ClientSession) -> Any:
        return await s.call_tool("remember", {"content": "Alice's locker code is 4711", "importance": 0.9})

    async def bob(s: ClientSession) -> tuple[Any, Any, Any, set[str]]:
        names = {t.name for t in (await s.list_tools()).tools}
        mine = await s.call_tool("recall", {"query": "locker code", "k": 5})
        spoof = await s.call_tool("recall", {"query": "locker code", "user_id": "alice"})
        erase = await s.call_tool("forget_user", {"confirm": True})
        return mine, spoof, erase, names

    assert (await run_stdio(store_path, "alice", tmp_path, alice)).isError is False
    mine, spoof, erase, names = await run_stdio(store_path, "bob", tmp_path, bob)
    assert mine.structuredContent["hits"] == []
    assert spoof.isError is True and "unknown argument(s) 'user_id'" in spoof.content[0].text
    assert "forget_user" not in names
    assert erase.isError is True and "unknown tool 'forget_user'" in erase.content[0].text

    async def alice_erases(s: ClientSession) -> tuple[Any, Any, Any]:
        refused = await s.call_tool("forget_user", {"confirm": False})
        done = await s.call_tool("forget_user", {"confirm": True})
        after = await s.call_tool("recall", {"query": "locker code"})
        return refused, done, after

    refused, done, after = await run_stdio(store_path, "alice", tmp_path, alice_erases, "--allow-forget-user")
    assert refused.isError is True and "confirm must be true" in refused.content[0].text
    assert done.structuredContent == {"deleted_memories": 1}
    assert after.structuredContent["hits"] == []
