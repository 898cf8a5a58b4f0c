"""Fixtures of the reliability suite: real processes, real kills.

* ``private_weaviate``: a factory of ``weaviate-server`` processes owned by ONE test (started
  from the binary on free loopback ports with a data directory under ``tmp_path``), so a test may
  ``kill -9``, ``SIGSTOP`` or restart it without disturbing the session server other tests share.
  Every server is continued (``SIGCONT``) and stopped at teardown, also when the test fails.
  Without a binary the tests are skipped, except with ``CI=true`` where that is a failure
  (same policy as ``tests/weaviate_fixtures.py``). ``WEAVIATE_URL`` cannot replace these: a
  test cannot kill a server it does not own.
* ``weaviate_endpoint`` / ``weaviate_store_factory``: the shared session server of
  ``tests/weaviate_fixtures.py`` for tests that only need *a* Weaviate.

Durations: the default suite keeps each scenario short; ``benchmarks/reliability.py`` runs the
long variants (``HYBRID_MEMORY_RELIABILITY_SECONDS``, ``HYBRID_MEMORY_RELIABILITY_RUNS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.weaviate_fixtures import (  # noqa: F401 - fixtures are registered by import
    unavailable,
    weaviate_endpoint,
    weaviate_store_factory,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.reliability)


def load_seconds(default: float) -> float:
    """Duration of a load scenario: ``HYBRID_MEMORY_RELIABILITY_SECONDS`` or ``default``."""
    raw = os.environ.get("HYBRID_MEMORY_RELIABILITY_SECONDS")
    return float(raw) if raw else default


def child_env() -> dict[str, str]:
    """The environment of a child Python process that imports this checkout (``tests.*``, ``hybrid_memory``)."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def runs(default: int) -> int:
    """Repetitions of a kill scenario: ``HYBRID_MEMORY_RELIABILITY_RUNS`` or ``default``."""
    raw = os.environ.get("HYBRID_MEMORY_RELIABILITY_RUNS")
    return int(raw) if raw else default


def report(scenario: str, **values: object) -> None:
    """Append one result line to ``HYBRID_MEMORY_RELIABILITY_REPORT`` (set by the benchmark)."""
    path = os.environ.get("HYBRID_MEMORY_RELIABILITY_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"scenario": scenario, **values}, default=str) + "\n")


@pytest.fixture
def weaviate_binary() -> str:
    """Path of ``weaviate-server`` (skip, or fail with ``CI=true``, when there is none)."""
    try:
        import weaviate  # noqa: F401
    except ImportError:
        unavailable("weaviate-client is not installed (pip install 'hybrid-memory[weaviate]')")
    from hybrid_memory.stores.weaviate import find_weaviate_binary

    binary = find_weaviate_binary()
    if binary is None:
        unavailable(
            "the reliability tests kill their own weaviate-server and need the binary (set WEAVIATE_BINARY or "
            "run `go install github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0`)"
        )
    assert binary is not None
    return binary


@pytest.fixture
def private_weaviate(weaviate_binary: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start ``weaviate-server`` processes that belong to this test (killed/stopped at teardown)."""
    from hybrid_memory.stores.weaviate import WeaviateServer

    servers: list[Any] = []

    def start(*, environment: dict[str, str] | None = None, name: str = "w") -> Any:
        root = tmp_path / f"{name}{len(servers)}"
        server = WeaviateServer(
            weaviate_binary,
            data_path=root / "data",
            log_path=root / "server.log",
            memory_limit="1GiB",
            environment=environment,
            startup_timeout=120.0,
        )
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        pid = server.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        server.stop(timeout=10)
