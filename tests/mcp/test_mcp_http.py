"""The SDK's own client against ``hybrid-memory mcp --transport http`` in a subprocess: bearer
tokens mapped to users, 401 without one, no cross-user reads, Host/Origin checks, session binding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from mcp import ClientSession

from tests.mcp.conftest import ALICE_TOKEN, BOB_TOKEN, HttpServer, http_session, start_http, stop

_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
_JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def test_each_token_sees_only_its_users_memory(http_server: HttpServer) -> None:
    async def alice(s: ClientSession) -> Any:
        await s.call_tool("remember", {"content": "Alice's passport number ends in 314", "importance": 0.9})
        return await s.call_tool("recall", {"query": "passport number"})

    async def bob(s: ClientSession) -> tuple[Any, Any, Any]:
        recall = await s.call_tool("recall", {"query": "passport number", "k": 10})
        page = await s.call_tool("list_memories", {"status": "all"})
        spoof = await s.call_tool("recall", {"query": "passport", "user_id": "alice"})
        return recall, page, spoof

    got = await http_session(http_server, ALICE_TOKEN, alice)
    assert got.structuredContent["hits"][0]["content"] == "Alice's passport number ends in 314"
    alice_id = got.structuredContent["hits"][0]["memory_id"]

    recall, page, spoof = await http_session(http_server, BOB_TOKEN, bob)
    assert recall.structuredContent["hits"] == []
    assert page.structuredContent["total"] == 0
    assert spoof.isError is True and "the user is fixed by the connection" in spoof.content[0].text

    async def bob_forgets(s: ClientSession) -> Any:
        return await s.call_tool("forget", {"memory_id": alice_id})

    assert (await http_session(http_server, BOB_TOKEN, bob_forgets)).structuredContent["deleted"] is False

    async def alice_again(s: ClientSession) -> Any:
        return await s.call_tool("list_memories", {})

    assert (await http_session(http_server, ALICE_TOKEN, alice_again)).structuredContent["total"] == 1


def test_http_refusals(http_server: HttpServer) -> None:
    url = http_server.url
    with httpx.Client(timeout=10) as c:
        assert c.post(url, json=_INIT, headers=_JSON).status_code == 401
        r = c.post(url, json=_INIT, headers={**_JSON, "Authorization": "Bearer not-a-token-of-anyone-at-all"})
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert c.post(url, json=_INIT, headers={**_JSON, "Authorization": f"Basic {ALICE_TOKEN}"}).status_code == 401
        # DNS rebinding: a foreign Host or a foreign Origin is refused even with a valid token
        alice = {**_JSON, "Authorization": f"Bearer {ALICE_TOKEN}"}
        assert c.post(url, json=_INIT, headers={**alice, "Host": "evil.example"}).status_code == 421
        assert c.post(url, json=_INIT, headers={**alice, "Origin": "http://evil.example"}).status_code == 403
        ok = c.post(url, json=_INIT, headers={**alice, "Origin": url.rsplit("/", 1)[0]})
        assert ok.status_code == 200
        sid = ok.headers["mcp-session-id"]
        # a session belongs to the credential that opened it: bob cannot ride alice's session
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        bob = {
            **_JSON,
            "Authorization": f"Bearer {BOB_TOKEN}",
            "mcp-session-id": sid,
            "mcp-protocol-version": "2025-06-18",
        }
        assert c.post(url, json=call, headers=bob).status_code == 404


def test_the_token_file_can_be_named_by_the_environment_alone(store_path: Path, tmp_path: Path) -> None:
    server = start_http(store_path, tmp_path, tokens_from_env=True)  # no --tokens on the command line
    try:
        with httpx.Client(timeout=10) as c:
            ok = c.post(server.url, json=_INIT, headers={**_JSON, "Authorization": f"Bearer {BOB_TOKEN}"})
            unknown = c.post(server.url, json=_INIT, headers={**_JSON, "Authorization": "Bearer " + "z9" * 20})
    finally:
        assert stop(server.proc) == 0, server.stderr()
    assert "--tokens" not in server.proc.args
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "hybrid-memory"
    assert unknown.status_code == 401
