"""``hybrid-memory mcp --weaviate URL``: the SDK's clients against servers over a real Weaviate.

A stdio server (``--user alice``) and then an HTTP server over the same collection of the
session's Weaviate (``tests/weaviate_fixtures.py``: skipped without a server, a failure under
``CI=true``): alice's memories written over stdio are hers over HTTP too, bob's token sees none
of them, and ``hybrid-memory replay`` shows the tool calls of both processes from the trace file
that a Weaviate-backed memory keeps under ``$XDG_STATE_HOME`` (pointed at the test's directory).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from hybrid_memory.cli import main
from tests.mcp.conftest import ALICE_TOKEN, BOB_TOKEN, http_session, run_stdio, start_http, stop
from tests.weaviate_fixtures import WeaviateEndpoint

pytestmark = pytest.mark.weaviate

BIKE = "Alice keeps her bike in the blue shed"
TEA = "Alice drinks oolong tea without sugar"


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_STATE_HOME`` of this process and of the servers it starts (they get its environment)."""
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture
def wv_args(weaviate_endpoint: WeaviateEndpoint, weaviate_store_factory: Callable[..., Any]) -> list[str]:
    """``--weaviate URL ...`` of a fresh collection (dropped after the test)."""
    collection = weaviate_store_factory().collection
    args = ["--weaviate", weaviate_endpoint.url, "--grpc-port", str(weaviate_endpoint.grpc_port)]
    if weaviate_endpoint.api_key:
        args += ["--api-key", weaviate_endpoint.api_key]
    return [*args, "--collection", collection]


async def test_stdio_and_http_over_weaviate_share_one_memory_per_user_and_replay_shows_the_calls(
    wv_args: list[str], state_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def alice_stdio(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["remember"] = await s.call_tool("remember", {"content": BIKE, "importance": 0.8})
        await s.call_tool("remember", {"content": TEA, "category": "preference"})
        out["recall"] = await s.call_tool("recall", {"query": "where is the bike", "k": 3, "alpha": 0.0})
        out["page"] = await s.call_tool("list_memories", {"limit": 1})
        out["recent"] = await s.read_resource("memory://recent")
        return out

    out = await run_stdio(wv_args, "alice", tmp_path, alice_stdio)
    assert out["remember"].isError is False and out["remember"].structuredContent["action"] == "added"
    hits = out["recall"].structuredContent["hits"]
    assert hits[0]["content"] == BIKE and hits[0]["keyword_score"] > 0
    page = out["page"].structuredContent
    assert [m["content"] for m in page["memories"]] == [BIKE]  # oldest first
    assert (page["total"], page["next_offset"]) == (2, 1)
    assert [m["content"] for m in json.loads(out["recent"].contents[0].text)] == [TEA, BIKE]  # newest first

    async def alice_http(s: ClientSession) -> Any:
        return await s.call_tool("recall", {"query": "oolong tea", "k": 1})

    async def bob_http(s: ClientSession) -> tuple[Any, Any, Any]:
        recall = await s.call_tool("recall", {"query": "bike shed oolong tea", "k": 10})
        listed = await s.call_tool("list_memories", {"status": "all"})
        recent = await s.read_resource("memory://recent")
        return recall, listed, recent

    server = start_http(wv_args, tmp_path)
    try:
        mine = await http_session(server, ALICE_TOKEN, alice_http)
        recall, listed, recent = await http_session(server, BOB_TOKEN, bob_http)
    finally:
        assert stop(server.proc) == 0, server.stderr()
    assert mine.structuredContent["hits"][0]["content"] == TEA  # the stdio process's write, read over HTTP
    assert recall.isError is False and recall.structuredContent["hits"] == []
    assert listed.structuredContent["total"] == 0 and listed.structuredContent["memories"] == []
    assert json.loads(recent.contents[0].text) == []

    # Both processes traced into the same file under $XDG_STATE_HOME; replay reads it.
    [trace_file] = (state_home / "hybrid-memory" / "traces").iterdir()
    assert trace_file.name.endswith(f"_{wv_args[-1]}.sqlite")  # <host>_<port>_<collection>.sqlite
    capsys.readouterr()
    assert main(["replay", "-", "--user", "alice", *wv_args, "--json"]) == 0
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s["kind"] for s in steps] == ["remember", "remember", "recall", "recall"]
    assert steps[-1]["query"] == "oolong tea"
    assert main(["replay", "-", "--user", "bob", *wv_args, "--json"]) == 0
    assert [json.loads(line)["kind"] for line in capsys.readouterr().out.splitlines()] == ["recall"]
