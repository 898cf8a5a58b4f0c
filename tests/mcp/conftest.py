"""Fixtures for the MCP server tests: real ``hybrid-memory mcp`` processes and the SDK's own clients.

Servers run as subprocesses of the installed ``hybrid-memory`` command, over a ``LocalStore``
file (or the ``--weaviate URL`` arguments of the session's Weaviate, ``tests/weaviate_fixtures.py``)
with the fast lexical ``hashing`` embedder, in this process's environment (``server_env``), so
``PYTHONPATH`` and ``XDG_STATE_HOME`` reach them. The HTTP server binds port 0 on 127.0.0.1 and
announces its URL on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory.mcp.tokens import TOKENS_ENV
from tests.weaviate_fixtures import (  # noqa: F401 - fixtures are registered by import
    weaviate_endpoint,
    weaviate_store_factory,
)

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


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server subprocess: this process's, plus ``extra``.

    The SDK's stdio client passes only ``HOME``, ``PATH`` and a few more by default: without
    ``PYTHONPATH`` a server would run the installed package rather than the tree under test,
    and without ``XDG_STATE_HOME`` a Weaviate-backed server would trace outside the test's
    temporary directory.
    """
    return {**os.environ, **extra}


def store_args(store: Path | Sequence[str]) -> list[str]:
    """``--store PATH`` for a ``LocalStore`` file, or the given arguments (``--weaviate URL ...``)."""
    return ["--store", str(store)] if isinstance(store, Path) else list(store)


def stdio_args(store: Path | Sequence[str], user: str, *extra: str) -> list[str]:
    """Arguments of ``hybrid-memory`` for a stdio server (after the command itself)."""
    return ["mcp", *store_args(store), "--user", user, "--embedder", "hashing", *extra]


def stdio_params(store: Path | Sequence[str], user: str, *extra: str) -> Any:
    """The SDK's ``StdioServerParameters`` of a stdio server over ``store``, in :func:`server_env`."""
    from mcp import StdioServerParameters

    cmd = hybrid_memory_command()
    return StdioServerParameters(command=cmd[0], args=[*cmd[1:], *stdio_args(store, user, *extra)], env=server_env())


async def run_stdio(store: Path | Sequence[str], user: str, tmp: Path, calls: Any, *extra: str) -> Any:
    """Start a stdio server, open an SDK session, return ``await calls(session)``.

    The server's stderr goes to ``tmp / f"stdio-{user}.log"`` (appended).
    """
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    with open(tmp / f"stdio-{user}.log", "a", encoding="utf-8") as errlog:
        async with (
            stdio_client(stdio_params(store, user, *extra), errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await calls(session)


@dataclass
class HttpServer:
    """A running ``hybrid-memory mcp --transport http`` process."""

    url: str
    proc: subprocess.Popen[str]
    store: Path | Sequence[str]
    log: Path

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        return self.log.read_text(encoding="utf-8")


async def http_session(server: HttpServer, token: str, calls: Any) -> Any:
    """Open an SDK session with ``token`` on an HTTP server, return ``await calls(session)``."""
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx.AsyncClient(headers=server.headers(token), timeout=60) as http,
        streamable_http_client(server.url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await calls(session)


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


def start_http(store: Path | Sequence[str], tmp: Path, *extra: str, tokens_from_env: bool = False) -> HttpServer:
    """Start an HTTP server; its token file is named by ``--tokens`` or, with ``tokens_from_env``,
    only by ``$HYBRID_MEMORY_MCP_TOKENS``."""
    tokens = write_tokens(tmp / "tokens.json")
    log = tmp / f"http-{os.getpid()}-{len(list(tmp.iterdir()))}.log"
    env = server_env()
    env.pop(TOKENS_ENV, None)
    if tokens_from_env:
        env[TOKENS_ENV] = str(tokens)
    token_args = [] if tokens_from_env else ["--tokens", str(tokens)]
    cmd = [
        *hybrid_memory_command(),
        "mcp",
        "--transport",
        "http",
        *store_args(store),
        *token_args,
        "--port",
        "0",
        "--embedder",
        "hashing",
        *extra,
    ]
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
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
