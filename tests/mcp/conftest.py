"""Fixtures for the MCP server tests: real ``hybrid-memory mcp`` processes and the SDK's own clients.

Servers run as subprocesses of the installed ``hybrid-memory`` command, over a ``LocalStore``
file with the fast lexical ``hashing`` embedder. The HTTP server binds port 0 on 127.0.0.1 and
announces its URL on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")

ALICE_TOKEN = "alice-token-" + "a1" * 16
BOB_TOKEN = "bob-token-" + "b2" * 16


def hybrid_memory_command() -> list[str]:
    """The installed console script (or ``python -m hybrid_memory.cli`` from a source tree)."""
    script = Path(sys.executable).with_name("hybrid-memory")
    if script.exists():
        return [str(script)]
    found = shutil.which("hybrid-memory")
    return [found] if found else [sys.executable, "-m", "hybrid_memory.cli"]


def stdio_args(store: Path, user: str, *extra: str) -> list[str]:
    """Arguments of ``hybrid-memory`` for a stdio server (after the command itself)."""
    return ["mcp", "--store", str(store), "--user", user, "--embedder", "hashing", *extra]


@dataclass
class HttpServer:
    """A running ``hybrid-memory mcp --transport http`` process."""

    url: str
    proc: subprocess.Popen[str]
    store: Path
    log: Path

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def write_tokens(path: Path) -> Path:
    import hashlib

    path.write_text(
        json.dumps(
            {
                # alice's entry is a digest (what the README recommends), bob's the raw token
                "sha256:" + hashlib.sha256(ALICE_TOKEN.encode()).hexdigest(): "alice",
                BOB_TOKEN: "bob",
            }
        ),
        encoding="utf-8",
    )
    return path


def start_http(store: Path, tmp: Path, *extra: str) -> HttpServer:
    tokens = write_tokens(tmp / "tokens.json")
    log = tmp / f"http-{os.getpid()}-{len(list(tmp.iterdir()))}.log"
    cmd = [
        *hybrid_memory_command(),
        "mcp",
        "--transport",
        "http",
        "--store",
        str(store),
        "--tokens",
        str(tokens),
        "--port",
        "0",
        "--embedder",
        "hashing",
        *extra,
    ]
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        stop(proc)
        pytest.fail(f"the MCP HTTP server did not start: {line!r}\n{log.read_text(encoding='utf-8')}")
    url = next(w for w in line.split() if w.startswith("http://"))
    return HttpServer(url=url, proc=proc, store=store, log=log)


def stop(proc: subprocess.Popen[str]) -> int:
    """Ctrl-C the server, wait for it and close its pipes."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
        proc.kill()
        proc.communicate()
    return int(proc.returncode)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def http_server(store_path: Path, tmp_path: Path) -> Iterator[HttpServer]:
    server = start_http(store_path, tmp_path)
    yield server
    assert stop(server.proc) == 0, server.log.read_text(encoding="utf-8")
