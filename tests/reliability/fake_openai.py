"""A scripted OpenAI-compatible HTTP endpoint on loopback (``http.server``), for LLM faults.

Real HTTP, real ``langchain_openai.ChatOpenAI`` and ``openai`` clients: only the *server* is
ours, because a provider cannot be made to time out, rate-limit or cut a reply on demand. Each
request to ``/v1/chat/completions`` takes the next action from the script (the last one repeats):

* ``"ok"``: a well-formed tool call answering the request (``ImportanceScores`` with one score
  per numbered turn, ``FactList`` with one memory from turn 0), or the same JSON as content
  when the request has no tools (JSON mode);
* ``"429"`` / ``"500"`` / ``"503"``: that HTTP status with an OpenAI error body;
* ``"timeout"``: hold the request until the server stops (at most ``slow_seconds``, a guard
  against a hung test), then answer ``ok``: the client's deadline always passes first, however
  loaded the machine is, so a test never depends on one sleep outlasting another;
* ``"truncated"``: ``finish_reason="length"`` and tool-call arguments cut in the middle;
* ``"malformed"``: prose instead of a tool call or JSON;
* ``"wrong_schema"``: valid JSON of the wrong shape;
* ``"bad_body"``: HTTP 200 whose body is not JSON;
* ``"cut"``: a ``Content-Length`` larger than the body, then the connection is closed;
* ``"junk"``: well-formed but wrong, like a too-small model: the same score (5) for every turn,
  and facts that echo the instruction, are empty ("记住！") or are hallucinated
  (:data:`JUNK_FACTS`), each citing every turn of the call.

``latency`` (seconds) delays every ``ok`` answer, like a real model's generation time (the
latency benchmark, ``benchmarks/turn_latency.py``, uses it; fault tests leave it at 0).

Every request is recorded (monotonic time, path, headers, JSON body). Tests assert on the
requests and on the delays the client *asked for* (an injected ``sleep``), never on the
recorded times: wall-clock spacing is not reliable on a loaded machine.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    at: float
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeOpenAI:
    script: list[str]
    slow_seconds: float = 60.0
    latency: float = 0.0
    requests: list[Seen] = field(default_factory=list)
    _lock: threading.Condition = field(default_factory=threading.Condition)
    stopping: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def next_action(self) -> str:
        with self._lock:
            n = len(self.requests)
        return self.script[min(n - 1, len(self.script) - 1)]

    def wait_for_requests(self, n: int, timeout: float) -> bool:
        """Wait until at least ``n`` requests arrived; ``False`` if ``timeout`` passed first (a hang guard)."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self.requests) >= n, timeout)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def _turn_count(body: dict[str, Any]) -> int:
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "user")
    return max(1, len(re.findall(r"^\[(\d+)\]", text, re.M)))


#: What the ``junk`` action extracts from any turns.
JUNK_FACTS = (
    "Extract long-term memories about the USER from the numbered conversation turns.",
    "记住！",
    "Mia est allergique à l'hæblère.",
    "The user enjoys skydiving every weekend with Captain Nemo.",
)


def _answer(body: dict[str, Any], *, junk: bool = False) -> tuple[str, dict[str, Any]]:
    tools = body.get("tools") or []
    name = tools[0]["function"]["name"] if tools else None
    system = " ".join(str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "system")
    if junk and (name == "FactList" or (name is None and "Extract long-term memories" in system)):
        every = list(range(_turn_count(body)))  # cite every turn: the user's are among them
        facts = [{"content": c, "category": "fact", "importance": 9, "source_turns": every} for c in JUNK_FACTS]
        return "FactList", {"memories": facts}
    if junk:
        return "ImportanceScores", {"scores": [{"index": i, "score": 5} for i in range(_turn_count(body))]}
    if name == "FactList" or (name is None and "Extract long-term memories" in system):
        args = {
            "memories": [
                {"content": "The user is allergic to peanuts", "category": "fact", "importance": 9, "source_turns": [0]}
            ]
        }
        return "FactList", args
    n = _turn_count(body)
    return "ImportanceScores", {"scores": [{"index": i, "score": 9 if i == 0 else 2} for i in range(n)]}


def _completion(
    body: dict[str, Any], *, finish: str = "tool_calls", args_text: str | None = None, junk: bool = False
) -> dict[str, Any]:
    name, args = _answer(body, junk=junk)
    text = args_text if args_text is not None else json.dumps(args)
    if body.get("tools"):
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": text}}],
        }
    else:
        message = {"role": "assistant", "content": text}
        finish = "stop" if finish == "tool_calls" else finish
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "gpt-4o-mini"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, payload: bytes, *, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload) if length is None else length))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {}
            with fake._lock:
                fake.requests.append(Seen(time.monotonic(), self.path, dict(self.headers.items()), body))
                fake._lock.notify_all()
            action = fake.next_action()
            if action == "timeout":
                fake.stopping.wait(fake.slow_seconds)
                action = "ok"
            if action in ("ok", "junk"):
                if fake.latency > 0:
                    fake.stopping.wait(fake.latency)
                self._send(200, json.dumps(_completion(body, junk=action == "junk")).encode())
            elif action in ("429", "500", "503"):
                err = {"error": {"message": f"fake {action}", "type": "server_error", "code": action}}
                self._send(int(action), json.dumps(err).encode())
            elif action == "truncated":
                _, args = _answer(body)
                cut = json.dumps(args)[: len(json.dumps(args)) // 2]
                self._send(200, json.dumps(_completion(body, finish="length", args_text=cut)).encode())
            elif action == "malformed":
                done = _completion(body)
                done["choices"][0]["message"] = {"role": "assistant", "content": "I would say it matters a lot."}
                done["choices"][0]["finish_reason"] = "stop"
                self._send(200, json.dumps(done).encode())
            elif action == "wrong_schema":
                self._send(200, json.dumps(_completion(body, args_text=json.dumps({"result": "important"}))).encode())
            elif action == "bad_body":
                self._send(200, b"<html>502 Bad Gateway</html>")
            elif action == "cut":
                payload = json.dumps(_completion(body)).encode()
                self._send(200, payload[: len(payload) // 2], length=len(payload))
                self.close_connection = True
            else:  # pragma: no cover - a typo in a test script
                raise AssertionError(f"unknown action {action!r}")

    return Handler


class _Server(ThreadingHTTPServer):
    """Closing the server also hangs up its open connections.

    A client's keep-alive connection (an LLM client nobody closed) otherwise keeps its handler
    thread waiting in ``recv`` for the rest of the test session.
    """

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self._open_lock:
            still_open = list(self._open)
        for conn in still_open:  # its handler's recv() returns at once and the thread ends
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out has hung up before a held ("timeout") reply is written: that
        # is the scenario, not a server failure, so do not print its BrokenPipeError.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(script: Sequence[str], *, slow_seconds: float = 60.0, latency: float = 0.0) -> Iterator[FakeOpenAI]:
    """Run the scripted server on a free loopback port for the ``with`` block (``latency``: delay of each ``ok``)."""
    fake = FakeOpenAI(list(script), slow_seconds=slow_seconds, latency=latency)
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.stopping.set()  # release the requests held by "timeout"
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
