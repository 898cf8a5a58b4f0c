"""The web inspector over HTTP (no browser): pages, JSON, read-only mode, Host/CSRF/Origin checks, XSS.

The end-to-end test in a real headless Chromium is ``tests/integration/test_inspector_browser.py``.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlencode

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.inspector import InspectorServer, make_server
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[HybridMemory]:
    # The story runs two days past the frozen clock: allow that much future skew (writer.max_future_skew_seconds).
    cfg = HybridMemoryConfig(writer={"max_future_skew_seconds": 3 * 86400})
    m = HybridMemory(
        store=LocalStore(tmp_path / "m.db"), embedder=HashingEmbedder(), trace=True, clock=lambda: T0, config=cfg
    )
    m.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts", timestamp=T0)
    m.build_context("peanut allergy", user_id="alice", session_id="s1", now=T0)
    m.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0)
    m.remember("alice", "I moved to Munich, I live in Munich now", importance=0.8, timestamp=T0 + timedelta(days=2))
    m.remember("alice", f"note {XSS}", importance=0.4, timestamp=T0, session_id="s1")
    m.remember("李雷", "我喜欢喝乌龙茶，不要加糖", importance=0.8, timestamp=T0)
    yield m
    m.close()


def _serve(mem: HybridMemory, *, allow_edit: bool) -> InspectorServer:
    server = make_server(mem, port=0, allow_edit=allow_edit)
    server.serve_in_thread()
    return server


@pytest.fixture
def ro(mem: HybridMemory) -> Iterator[InspectorServer]:
    s = _serve(mem, allow_edit=False)
    yield s
    s.shutdown()


@pytest.fixture
def rw(mem: HybridMemory) -> Iterator[InspectorServer]:
    s = _serve(mem, allow_edit=True)
    yield s
    s.shutdown()


def request(
    server: InspectorServer,
    method: str,
    path: str,
    *,
    body: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = urlencode(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/x-www-form-urlencoded"} if data is not None else {}
    hdrs.update(headers or {})
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    text = resp.read().decode("utf-8")
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, text


def memory_id(mem: HybridMemory, user: str, content: str) -> str:
    from hybrid_memory.stores.base import MemoryFilter

    every = MemoryFilter(statuses=("active", "superseded", "archived", "deleted"))
    return next(r.id for r in mem.store.list(user, filter=every) if r.content == content)


def test_binds_loopback_by_default(ro: InspectorServer) -> None:
    assert ro.server_address[0] == "127.0.0.1" and ro.url.startswith("http://127.0.0.1:")


def test_pages_render_with_strict_headers(ro: InspectorServer, mem: HybridMemory) -> None:
    status, headers, body = request(ro, "GET", "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    assert "<script" not in body.lower()
    assert 'href="/user?u=alice"' in body and "李雷" in body and "read-only" in body
    status, _, body = request(ro, "GET", "/user?" + urlencode({"u": "alice", "status": "all"}))
    assert status == 200 and "Superseded chains" in body and "I live in Berlin" in body
    assert "Review queue" in body and "declared change" in body  # the writer's in-process queue
    assert 'href="/replay?u=alice&amp;s=s1"' in body
    mid = memory_id(mem, "alice", "I live in Berlin")
    status, _, body = request(ro, "GET", "/memory?" + urlencode({"u": "alice", "id": mid}))
    assert status == 200 and "Superseded chain" in body and "I moved to Munich" in body
    assert 'action="/memory/edit"' not in body  # read-only: no edit form
    status, _, body = request(ro, "GET", "/search?" + urlencode({"u": "李雷", "q": "乌龙茶", "alpha": "0"}))
    assert status == 200 and "我喜欢喝乌龙茶，不要加糖" in body
    for head in ("score", "relevance", "bm25", "cosine", "importance", "recency", "heat"):
        assert f'<th class="num">{head}</th>' in body
    status, _, body = request(ro, "GET", "/replay?" + urlencode({"u": "alice", "s": "s1"}))
    assert status == 200 and "#1 add_turn" in body and "duplicates the short-term window" in body


def test_stored_text_is_escaped_everywhere(ro: InspectorServer) -> None:
    for path in ("/user?u=alice", "/replay?u=alice&s=s1", "/search?u=alice&q=note"):
        status, _, body = request(ro, "GET", path)
        assert status == 200
        assert XSS not in body and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body


def test_json_endpoints(ro: InspectorServer, mem: HybridMemory) -> None:
    status, headers, body = request(ro, "GET", "/api/replay?u=alice&s=s1")
    steps = json.loads(body)
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert [s["kind"] for s in steps][:2] == ["add_turn", "build_context"]
    status, _, body = request(ro, "GET", "/api/search?" + urlencode({"u": "李雷", "q": "乌龙茶"}))
    hits = json.loads(body)
    assert hits[0]["content"] == "我喜欢喝乌龙茶，不要加糖" and {"relevance", "heat", "recency"} <= set(hits[0])
    status, _, body = request(ro, "GET", "/api/metrics")
    assert status == 200 and json.loads(body)["operations"]["recall"]["count"] >= 1
    status, headers, body = request(ro, "GET", "/metrics")
    if status == 200:
        assert "hybrid_memory_operation_duration_seconds_bucket" in body
    else:  # without prometheus-client the page says how to get it
        assert status == 404 and "hybrid-memory[prometheus]" in body
    assert request(ro, "GET", "/healthz")[2] == "ok\n"


def test_errors_are_pages_not_tracebacks(ro: InspectorServer) -> None:
    status, _, body = request(ro, "GET", "/nope")
    assert status == 404 and "no page" in body
    status, _, body = request(ro, "GET", "/user")
    assert status == 400 and "missing parameter" in body
    status, _, body = request(ro, "GET", "/memory?u=alice&id=does-not-exist")
    assert status == 404
    status, _, body = request(ro, "GET", "/search?u=alice&q=tea&k=zero")
    assert status == 400


def test_other_host_headers_are_refused(ro: InspectorServer) -> None:
    port = ro.server_address[1]
    assert request(ro, "GET", "/", headers={"Host": f"localhost:{port}"})[0] == 200
    status, _, body = request(ro, "GET", "/", headers={"Host": f"evil.example:{port}"})
    assert status == 421 and "DNS rebinding" in body


def test_read_only_refuses_edits(ro: InspectorServer, mem: HybridMemory) -> None:
    mid = memory_id(mem, "alice", "I live in Berlin")
    status, _, body = request(ro, "POST", "/memory/delete", body={"u": "alice", "id": mid, "csrf": "x"})
    assert status == 403 and "read-only" in body
    assert mem.store.get("alice", [mid])


def test_edits_need_the_form_token_and_a_same_origin(rw: InspectorServer, mem: HybridMemory) -> None:
    mid = memory_id(mem, "alice", "I live in Berlin")
    page = request(rw, "GET", "/memory?" + urlencode({"u": "alice", "id": mid}))[2]
    token = re.search(r'action="/memory/edit\?csrf=([^"&]+)"', page)
    assert token is not None  # the token is in the action URL: checked before the body is read
    form = {
        "u": "alice",
        "id": mid,
        "content": "I live in Berlin",
        "importance": "0.35",
        "category": "fact",
        "status": "superseded",
        "tags": "home, city",
    }
    assert request(rw, "POST", "/memory/edit", body=form)[0] == 403  # no token
    assert request(rw, "POST", "/memory/edit", body={**form, "csrf": token.group(1)})[0] == 403  # only in the body
    edit = f"/memory/edit?csrf={token.group(1)}"
    status, _, _ = request(rw, "POST", edit, body=form, headers={"Origin": "http://evil.example"})
    assert status == 403
    status, headers, _ = request(rw, "POST", edit, body=form, headers={"Origin": rw.url.rstrip("/")})
    assert status == 303 and headers["location"].startswith("/memory?")
    rec = mem.store.get("alice", [mid])[0]
    assert (rec.importance, rec.tags, rec.status) == (0.35, ("home", "city"), "superseded")


def test_editing_content_re_embeds_redacts_and_scrubs_the_trace(rw: InspectorServer, mem: HybridMemory) -> None:
    mid = memory_id(mem, "alice", "Remember: I am allergic to peanuts")
    page = request(rw, "GET", "/memory?" + urlencode({"u": "alice", "id": mid}))[2]
    token = re.search(r'action="/memory/edit\?csrf=([^"&]+)"', page)
    assert token is not None
    form = {
        "u": "alice",
        "id": mid,
        "content": "Allergic to cashews, call 13812345678",
        "importance": "0.9",
        "category": "fact",
        "status": "active",
        "tags": "",
    }
    assert request(rw, "POST", f"/memory/edit?csrf={token.group(1)}", body=form)[0] == 303
    rec = mem.store.get("alice", [mid])[0]
    assert rec.content == "Allergic to cashews, call [PHONE]"
    assert mem.recall("cashews", user_id="alice", k=1)[0].id == mid
    text = json.dumps([s.to_json_dict() for s in mem.replay("s1")])
    assert "allergic to peanuts" not in text and "[forgotten]" in text


def test_delete_forgets_the_memory(rw: InspectorServer, mem: HybridMemory) -> None:
    mid = memory_id(mem, "李雷", "我喜欢喝乌龙茶，不要加糖")
    page = request(rw, "GET", "/memory?" + urlencode({"u": "李雷", "id": mid}))[2]
    token = re.search(r'action="/memory/edit\?csrf=([^"&]+)"', page)
    assert token is not None
    status, headers, _ = request(rw, "POST", f"/memory/delete?csrf={token.group(1)}", body={"u": "李雷", "id": mid})
    assert status == 303 and headers["location"].startswith("/user?")
    assert mem.store.get("李雷", [mid]) == []


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_cli_inspect_serve_starts_on_loopback_and_stops_on_ctrl_c_or_sigterm(
    tmp_path: Path, stop: signal.Signals
) -> None:
    db = tmp_path / "cli.db"
    m = HybridMemory(store=LocalStore(db), embedder=HashingEmbedder())
    m.remember("alice", "I like green tea")
    m.close()
    proc = subprocess.Popen(
        [
            # Started the way a shell starts a background job: SIGINT ignored (the server must still stop).
            "sh",
            "-c",
            'trap "" INT; exec "$@"',
            "sh",
            sys.executable,
            "-X",
            "faulthandler",
            "-m",
            "hybrid_memory.cli",
            "inspect",
            "--serve",
            "--store",
            str(db),
            "--port=0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m_url = re.search(r"(http://127\.0\.0\.1:(\d+)/)", line)
        assert m_url is not None and "read-only" in line, line
        conn = http.client.HTTPConnection("127.0.0.1", int(m_url.group(2)), timeout=10)
        conn.request("GET", "/user?u=alice")
        resp = conn.getresponse()
        assert resp.status == 200 and "I like green tea" in resp.read().decode()
        conn.close()
        proc.send_signal(stop)
        try:
            code = proc.wait(timeout=90)  # a hang guard, not a timing check: under load 12 on 2 cores 20 s fell short
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # -X faulthandler: every thread's stack on stderr
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"the inspector did not stop on {stop.name}; its threads:\n{err[-8000:]}") from None
        assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
