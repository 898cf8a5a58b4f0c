"""``hybrid-memory mcp --metrics-port``: the server's metrics on a loopback Prometheus endpoint.

The endpoint's URL is announced on stderr (over stdio, stdout is the protocol stream); a scrape
before and after a tool call shows the call counted, over stdio and over HTTP.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession

from tests.mcp.conftest import (
    ALICE_TOKEN,
    http_session,
    hybrid_memory_command,
    run_stdio,
    server_env,
    start_http,
    stdio_args,
    stop,
)

pytest.importorskip("prometheus_client", reason="the 'prometheus' extra is not installed")

_ANNOUNCED = re.compile(r"metrics \(Prometheus\) on (http://127\.0\.0\.1:\d+/metrics)")


def _metrics_url(stderr: str) -> str:
    m = _ANNOUNCED.search(stderr)
    assert m is not None, stderr
    return m.group(1)


def _op_count(url: str, op: str) -> float:
    """``hybrid_memory_operation_duration_seconds_count{op=...}`` scraped from ``url`` (0 before the first call)."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(url, timeout=10)
    assert r.status_code == 200
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            if sample.name == "hybrid_memory_operation_duration_seconds_count" and sample.labels == {"op": op}:
                return float(sample.value)
    return 0.0


async def test_stdio_tool_calls_are_counted_on_the_metrics_port(store_path: Path, tmp_path: Path) -> None:
    async def calls(s: ClientSession) -> list[float]:
        url = _metrics_url((tmp_path / "stdio-alice.log").read_text(encoding="utf-8"))
        counts = [_op_count(url, "remember")]
        await s.call_tool("remember", {"content": "Alice's bike is in the blue shed", "importance": 0.8})
        counts.append(_op_count(url, "remember"))
        await s.call_tool("remember", {"content": "Alice drinks oolong tea"})
        counts += [_op_count(url, "remember"), _op_count(url, "recall")]
        return counts

    assert await run_stdio(store_path, "alice", tmp_path, calls, "--metrics-port", "0") == [0.0, 1.0, 2.0, 0.0]


async def test_http_tool_calls_are_counted_on_the_metrics_port(store_path: Path, tmp_path: Path) -> None:
    server = start_http(store_path, tmp_path, "--metrics-port", "0")
    try:
        url = _metrics_url(server.stderr())  # announced before the MCP URL
        before = _op_count(url, "recall")

        async def recall(s: ClientSession) -> Any:
            return await s.call_tool("recall", {"query": "anything at all"})

        assert (await http_session(server, ALICE_TOKEN, recall)).isError is False
        after = _op_count(url, "recall")
    finally:
        assert stop(server.proc) == 0, server.stderr()
    assert (before, after) == (0.0, 1.0)
    with pytest.raises(httpx.ConnectError):  # the endpoint stops with the server
        httpx.get(url, timeout=5)


def test_a_busy_metrics_port_is_a_configuration_error(store_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = subprocess.run(
            [*hybrid_memory_command(), *stdio_args(store_path, "alice", "--metrics-port", str(port))],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            env=server_env(),
        )
    assert done.returncode == 2
    assert f"error: cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert done.stdout == ""
