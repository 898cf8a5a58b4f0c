"""Pytest fixtures for a real Weaviate server (weaviate.md §7), shared by two test folders.

``tests/integration/conftest.py`` and ``tests/contract/conftest.py`` both import these fixtures
(the contract classes take ``weaviate_contract_store`` and ``weaviate_contract_twin``).
Pytest registers an imported fixture once per conftest, so the server itself is a refcounted
process-wide singleton: one ``weaviate-server`` per test session, however many folders run.

By default the server is started from the binary: free 127.0.0.1 ports, a fresh data directory
under pytest's temporary path, the loopback environment of weaviate.md §3.3 (telemetry and pprof
off, cluster/Raft on loopback, ``GOMEMLIMIT``), ``--scheme http``; the fixture waits for
``/v1/.well-known/ready`` and stops the server at the end of the session, also when tests fail.

* ``WEAVIATE_URL`` (plus ``WEAVIATE_GRPC_PORT``, optional ``WEAVIATE_API_KEY``) points the same
  tests at an existing server instead; every test uses its own collection and drops it.
* The binary comes from ``WEAVIATE_BINARY``, ``PATH`` or ``$GOPATH/bin``
  (``go install github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0``).
* Without binary and URL the tests are skipped with the reason -- except when ``CI=true``,
  where that is a failure: CI must never go green without running Weaviate.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: Memory cap of the test server's Go runtime (2-core, shared CI machines).
SERVER_MEMORY_LIMIT = "1GiB"


@dataclass(frozen=True)
class WeaviateEndpoint:
    """Where the tests' Weaviate listens."""

    url: str
    grpc_port: int
    api_key: str | None
    server: Any | None  # the WeaviateServer when the fixture started one


_SHARED: dict[str, Any] = {"endpoint": None, "users": 0}


def unavailable(reason: str) -> None:
    """Skip (or, with ``CI=true``, fail) because no Weaviate can be used."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true but the Weaviate tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _start(tmp_path_factory: pytest.TempPathFactory) -> WeaviateEndpoint:
    try:
        import weaviate  # noqa: F401
    except ImportError:
        unavailable("weaviate-client is not installed (pip install 'hybrid-memory[weaviate]')")
    from hybrid_memory.stores.weaviate import WeaviateServer, find_weaviate_binary

    url = os.environ.get("WEAVIATE_URL")
    if url:
        return WeaviateEndpoint(
            url=url.rstrip("/"),
            grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051")),
            api_key=os.environ.get("WEAVIATE_API_KEY") or None,
            server=None,
        )
    binary = find_weaviate_binary()
    if binary is None:
        unavailable(
            "no weaviate-server binary (set WEAVIATE_BINARY, put it on PATH, or run `go install "
            "github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0`) and no WEAVIATE_URL"
        )
    root = tmp_path_factory.mktemp("weaviate")
    server = WeaviateServer(
        binary,
        data_path=root / "data",
        log_path=root / "server.log",
        memory_limit=SERVER_MEMORY_LIMIT,
        startup_timeout=120.0,
    )
    server.start()
    return WeaviateEndpoint(url=server.url, grpc_port=server.grpc_port, api_key=None, server=server)


@pytest.fixture(scope="session")
def weaviate_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeaviateEndpoint]:
    """The session's Weaviate: started from the binary, or the one named by ``WEAVIATE_URL``."""
    if _SHARED["endpoint"] is None:
        _SHARED["endpoint"] = _start(tmp_path_factory)
    _SHARED["users"] += 1
    try:
        yield _SHARED["endpoint"]
    finally:
        _SHARED["users"] -= 1
        if _SHARED["users"] == 0:
            endpoint, _SHARED["endpoint"] = _SHARED["endpoint"], None
            if endpoint is not None and endpoint.server is not None:
                endpoint.server.stop()


def connect(endpoint: WeaviateEndpoint, **kwargs: Any) -> Any:
    """``WeaviateStore.connect`` to the test server."""
    from hybrid_memory.stores.weaviate import WeaviateStore

    return WeaviateStore.connect(endpoint.url, grpc_port=endpoint.grpc_port, api_key=endpoint.api_key, **kwargs)


def drop(endpoint: WeaviateEndpoint, store: Any) -> None:
    """Drop a test store's collections (reconnecting if the test closed the store)."""
    if store.closed:
        store = connect(endpoint, collection=store.collection, create_schema=False)
    try:
        store.drop()
    finally:
        store.close()


@pytest.fixture
def weaviate_store_factory(weaviate_endpoint: WeaviateEndpoint, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Build ``WeaviateStore`` objects, each on a fresh collection; drop them after the test."""
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("collection", "T" + uuid.uuid4().hex[:20])
        kwargs.setdefault("dead_letter_path", tmp_path / f"dead-letters-{len(made)}.sqlite")
        store = connect(weaviate_endpoint, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        drop(weaviate_endpoint, store)


@pytest.fixture
def weaviate_store(weaviate_store_factory: Callable[..., Any]) -> Any:
    """A connected ``WeaviateStore`` on its own collection."""
    return weaviate_store_factory()


@pytest.fixture
def weaviate_contract_store(weaviate_endpoint: WeaviateEndpoint, tmp_path: Path) -> Iterator[Any]:
    """An empty ``WeaviateStore`` for the contract suite (its ``store`` fixture closes it)."""
    store = connect(
        weaviate_endpoint,
        collection="C" + uuid.uuid4().hex[:20],
        dead_letter_path=tmp_path / "dead-letters.sqlite",
    )
    try:
        yield store
    finally:
        drop(weaviate_endpoint, store)


@pytest.fixture
def weaviate_contract_twin(weaviate_endpoint: WeaviateEndpoint, tmp_path: Path) -> Callable[[Any], Any]:
    """Connect a second ``WeaviateStore`` (own client, own dead-letter file) to a store's collections."""

    def twin(store: Any) -> Any:
        return connect(
            weaviate_endpoint,
            collection=store.collection,
            dead_letter_path=tmp_path / f"dead-letters-twin-{uuid.uuid4().hex[:8]}.sqlite",
        )

    return twin
