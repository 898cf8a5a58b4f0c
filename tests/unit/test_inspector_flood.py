"""The web inspector cannot be flooded by a local process (issue 15, attack 4), tested with raw sockets.

Refused before a byte of the body is read: a negative, non-numeric or oversized
``Content-Length``, a chunked body, a POST to a read-only inspector, a POST without the form
token. Hung connections neither keep a thread each forever (per-connection read timeout, a cap on
connections, the oldest connection still waiting for its request is dropped for a new one) nor
keep a normal request out; when every slot is busy the answer is a clear 503.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psutil
import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.inspector import InspectorServer, make_server
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
BODY_MB = 100


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[HybridMemory]:
    m = HybridMemory(store=LocalStore(tmp_path / "m.db"), embedder=HashingEmbedder(), clock=lambda: T0)
    m.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0)
    yield m
    m.close()


def serve(mem: HybridMemory, **kw: object) -> InspectorServer:
    server = make_server(mem, port=0, **kw)  # type: ignore[arg-type]
    server.serve_in_thread()
    return server


@pytest.fixture
def rw(mem: HybridMemory) -> Iterator[InspectorServer]:
    s = serve(mem, allow_edit=True)
    yield s
    s.shutdown()


@pytest.fixture
def ro(mem: HybridMemory) -> Iterator[InspectorServer]:
    s = serve(mem, allow_edit=False)
    yield s
    s.shutdown()


def port(server: InspectorServer) -> int:
    return int(server.server_address[1])


def connect(server: InspectorServer, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port(server)), timeout=timeout)


def head(server: InspectorServer, method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port(server)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """Status and raw bytes of the response (read until the peer closes or the body is complete)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        m = re.search(rb"content-length: *(\d+)", data, re.IGNORECASE)
        end = data.find(b"\r\n\r\n")
        if m and end >= 0 and len(data) >= end + 4 + int(m.group(1)):
            break
    first = data.split(b"\r\n", 1)[0]
    assert first.startswith(b"HTTP/1."), data[:200]
    return int(first.split()[1]), data


def get(server: InspectorServer, path: str = "/") -> int:
    with connect(server) as s:
        s.sendall(head(server, "GET", path, {"Connection": "close"}))
        return read_response(s)[0]


def wait_for_slots(server: InspectorServer, ready: Callable[[list[Any]], bool], limit: float = 60.0) -> None:
    """Poll the server's connection slots until ``ready`` holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while True:
        with server._slots_lock:
            if ready(list(server._slots.values())):
                return
        assert time.monotonic() < deadline, "the server's connection slots never reached the expected state"
        time.sleep(0.01)


def form_token(server: InspectorServer, mem: HybridMemory) -> str:
    mid = mem.store.list("alice")[0].id
    with connect(server) as s:
        s.sendall(head(server, "GET", "/memory?" + urlencode({"u": "alice", "id": mid}), {"Connection": "close"}))
        page = read_response(s)[1].decode()
    m = re.search(r'action="/memory/edit\?csrf=([^"&]+)"', page)
    assert m is not None
    return m.group(1)


def push_body(sock: socket.socket, total: int, sent: list[int]) -> None:
    """Send up to ``total`` bytes; record how many the server side accepted before it stopped us."""
    chunk = b"a=" + b"x" * (1 << 20)
    try:
        while sent[0] < total:
            n = sock.send(chunk)
            sent[0] += n
    except OSError:  # reset, broken pipe or the 5 s timeout: the server stopped reading
        pass


def test_negative_content_length_with_a_big_body_is_refused_without_reading_it(
    rw: InspectorServer, mem: HybridMemory
) -> None:
    token = form_token(rw, mem)
    me = psutil.Process()
    rss_before = me.memory_info().rss
    with connect(rw) as s:
        s.sendall(
            head(
                rw,
                "POST",
                f"/memory/edit?csrf={token}",
                {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "-1"},
            )
        )
        sent = [0]
        pusher = threading.Thread(target=push_body, args=(s, BODY_MB << 20, sent), daemon=True)
        pusher.start()
        status, data = read_response(s)
        pusher.join(timeout=15)
        with pytest.raises(OSError):  # the server hung up instead of draining 100 MB
            for _ in range(200):
                s.sendall(b"x" * 65536)
    grown = me.memory_info().rss - rss_before
    assert status == 400 and b"Content-Length" in data
    # What the kernel buffers took before the server closed: a few MB, not the body.
    assert sent[0] < 40 << 20, f"the server accepted {sent[0] >> 20} MB of a refused body"
    assert grown < 40 << 20, f"server RSS grew by {grown >> 20} MB"
    assert get(rw) == 200


@pytest.mark.parametrize("value", ["abc", "+5", "1e3", "5, 5"])
def test_malformed_content_length_is_refused(rw: InspectorServer, mem: HybridMemory, value: str) -> None:
    token = form_token(rw, mem)
    with connect(rw) as s:
        s.sendall(head(rw, "POST", f"/memory/edit?csrf={token}", {"Content-Length": value}))
        assert read_response(s)[0] == 400


def test_oversized_content_length_is_refused_before_reading(rw: InspectorServer, mem: HybridMemory) -> None:
    token = form_token(rw, mem)
    with connect(rw, timeout=8) as s:  # < the server's 10 s read timeout
        s.sendall(head(rw, "POST", f"/memory/edit?csrf={token}", {"Content-Length": str(10**12)}))
        assert read_response(s)[0] == 413


def test_chunked_post_is_refused(rw: InspectorServer, mem: HybridMemory) -> None:
    token = form_token(rw, mem)
    with connect(rw, timeout=8) as s:  # < the server's 10 s read timeout
        s.sendall(
            head(
                rw,
                "POST",
                f"/memory/edit?csrf={token}",
                {"Transfer-Encoding": "chunked", "Content-Type": "application/x-www-form-urlencoded"},
            )
            + b"5\r\nu=ali\r\n"
        )
        status, data = read_response(s)
    assert status == 411 and b"chunked" in data


def test_read_only_refuses_a_post_before_reading_its_body(ro: InspectorServer) -> None:
    with connect(ro, timeout=8) as s:  # < the 10 s read timeout: only an answer before reading the body passes
        s.sendall(head(ro, "POST", "/memory/delete", {"Content-Length": "900000"}))
        status, data = read_response(s)
    assert status == 403 and b"read-only" in data


def test_a_post_without_the_form_token_is_refused_before_reading_its_body(rw: InspectorServer) -> None:
    with connect(rw, timeout=8) as s:  # < the server's 10 s read timeout
        s.sendall(head(rw, "POST", "/memory/delete", {"Content-Length": "900000"}))
        assert read_response(s)[0] == 403
    with connect(rw, timeout=8) as s:  # < the server's 10 s read timeout
        s.sendall(head(rw, "POST", "/memory/delete?csrf=wrong", {"Content-Length": "900000"}))
        assert read_response(s)[0] == 403


def _handler_threads() -> int:
    return sum(t.name == "hybrid-memory-inspector-conn" for t in threading.enumerate())


def test_hung_connections_neither_keep_threads_forever_nor_keep_a_normal_request_out(mem: HybridMemory) -> None:
    # Counted by name, so threads that other parts of the process start or end meanwhile do not matter.
    base = _handler_threads()  # another test's server still closing; can only shrink
    # The read timeout is long next to a normal request, so "served before the hung connections
    # timed out" holds however loaded the machine is (no tight wall-clock bound).
    timeout = 20.0
    server = serve(mem, max_connections=8, request_timeout=timeout)
    hung: list[socket.socket] = []
    most = 0
    try:
        for i in range(100):
            s = connect(server)
            hung.append(s)
            if i % 2:
                s.sendall(b"GET / HTTP/1.1\r\n")  # half a request, then silence (slowloris)
            most = max(most, _handler_threads())
        assert most <= base + 8, most  # capped at any time
        assert get(server) == 200
        # Served while the newest hung connection was still waiting (a full slot drops the longest-
        # waiting one; its read timeout would close it): still open, nothing to read, no end of
        # stream. A causal check, no clock.
        hung[-1].setblocking(False)
        with pytest.raises(BlockingIOError):
            hung[-1].recv(1)
        assert _handler_threads() <= base + 8
        deadline = time.monotonic() + 3 * timeout  # hang guard only
        while _handler_threads() > base and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _handler_threads() <= base  # the read timeout ended every waiting thread
    finally:
        for s in hung:
            s.close()
        server.shutdown()


def test_when_every_slot_is_busy_the_answer_is_a_clear_503(mem: HybridMemory) -> None:
    server = serve(mem, allow_edit=True, max_connections=2, request_timeout=10.0)
    busy: list[socket.socket] = []
    try:
        token = form_token(server, mem)
        wait_for_slots(server, lambda slots: not slots)  # the token page's connection has let go of its slot
        for _ in range(2):  # authorised requests whose body is still on its way hold their slot
            s = connect(server, timeout=60)  # longer than the server's read timeout: we wait for its 408
            busy.append(s)
            s.sendall(head(server, "POST", f"/memory/delete?csrf={token}", {"Content-Length": "100"}))
        # Wait until the server has read both requests' headers (no fixed sleep: load may delay it).
        wait_for_slots(server, lambda slots: sum(slot.busy for slot in slots) == 2)
        with connect(server) as s:
            s.sendall(head(server, "GET", "/", {"Connection": "close"}))
            status, data = read_response(s)
        assert status == 503 and b"Retry-After" in data and b"too many connections" in data
        for s in busy:  # the body never came: refused when the request's read timeout ran out
            assert read_response(s)[0] == 408
            s.close()
        wait_for_slots(server, lambda slots: len(slots) < 2)  # their threads free the slots after answering
        assert get(server) == 200
    finally:
        for s in busy:
            s.close()
        server.shutdown()
