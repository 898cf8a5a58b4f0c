"""Pytest fixtures for a real 3-node Weaviate cluster (weaviate.md §8; issue 16).

``weaviate_cluster`` (session scope) starts three ``weaviate-server`` processes once per session
with :class:`~hybrid_memory.stores.weaviate.cluster.WeaviateCluster`: free loopback ports, one
data directory and log per node under pytest's temporary path, ``GOMEMLIMIT`` per node, and
waits until ``GET /v1/nodes`` lists three ``HEALTHY`` nodes. Every node is stopped at the end of
the session, also when tests fail.

* ``cluster`` (function scope) hands a test the session cluster with every node running and
  healthy: a node a previous test killed or stopped is restarted first (same data and ports).
* ``WEAVIATE_CLUSTER_URLS`` (comma-separated REST URLs, plus ``WEAVIATE_CLUSTER_GRPC_PORTS``,
  comma-separated, default 50051 for each) points the same tests at an existing cluster;
  the fault tests, which must kill nodes, are skipped then (they cannot kill what they do not
  own).
* Without a binary and without ``WEAVIATE_CLUSTER_URLS`` the tests are skipped -- except with
  ``CI=true``, where that is a failure (:func:`tests.weaviate_fixtures.unavailable`).

Tests using these fixtures carry ``pytest.mark.cluster`` (registered in pyproject.toml), so
``-m "not cluster"`` leaves the three nodes out of a quick run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.weaviate_fixtures import unavailable

#: Nodes of the test cluster.
CLUSTER_SIZE = 3
#: Memory cap of each node's Go runtime (three nodes on a 2-core, shared CI machine).
NODE_MEMORY_LIMIT = "512MiB"
#: Async replication (anti-entropy) of the test nodes: hash-tree comparison every 5 s (1 s
#: while propagating) and objects propagated once 1 s old. Weaviate's defaults (30 s, 5 s,
#: 30 s) repair a returning node within about a minute; these make it seconds (docs/weaviate.md).
NODE_ENVIRONMENT = {
    "ASYNC_REPLICATION_FREQUENCY": "5s",
    "ASYNC_REPLICATION_FREQUENCY_WHILE_PROPAGATING": "1s",
    "ASYNC_REPLICATION_PROPAGATION_DELAY": "1s",
}


@dataclass(frozen=True)
class ClusterEndpoint:
    """Where the tests' cluster listens; ``cluster`` is the launcher when the fixture owns it."""

    urls: list[str]
    grpc_ports: list[int]
    cluster: Any | None  # WeaviateCluster, or None for WEAVIATE_CLUSTER_URLS

    def owned(self) -> Any:
        """The launcher; skips (fails in CI) when the cluster is not this session's own."""
        if self.cluster is None:
            unavailable("this test kills nodes: it needs the fixture's own cluster, not WEAVIATE_CLUSTER_URLS")
        return self.cluster


def _from_env() -> ClusterEndpoint | None:
    raw = os.environ.get("WEAVIATE_CLUSTER_URLS", "").strip()
    if not raw:
        return None
    urls = [u.strip().rstrip("/") for u in raw.split(",") if u.strip()]
    ports_raw = os.environ.get("WEAVIATE_CLUSTER_GRPC_PORTS", "").strip()
    ports = [int(p) for p in ports_raw.split(",") if p.strip()] if ports_raw else [50051] * len(urls)
    if len(ports) != len(urls):
        pytest.fail(f"WEAVIATE_CLUSTER_GRPC_PORTS has {len(ports)} ports for {len(urls)} URLs", pytrace=False)
    return ClusterEndpoint(urls=urls, grpc_ports=ports, cluster=None)


@pytest.fixture(scope="session")
def weaviate_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterEndpoint]:
    """The session's cluster: three nodes started from the binary, or ``WEAVIATE_CLUSTER_URLS``."""
    try:
        import weaviate  # noqa: F401
    except ImportError:
        unavailable("weaviate-client is not installed (pip install 'hybrid-memory[weaviate]')")
    external = _from_env()
    if external is not None:
        yield external
        return
    from hybrid_memory.stores.weaviate import find_weaviate_binary
    from hybrid_memory.stores.weaviate.cluster import WeaviateCluster

    binary = find_weaviate_binary()
    if binary is None:
        unavailable(
            "no weaviate-server binary (set WEAVIATE_BINARY, put it on PATH, or run `go install "
            "github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0`) and no WEAVIATE_CLUSTER_URLS"
        )
    launcher = WeaviateCluster(
        CLUSTER_SIZE,
        binary=binary,
        root=tmp_path_factory.mktemp("weaviate-cluster"),
        memory_limit=NODE_MEMORY_LIMIT,
        environment=NODE_ENVIRONMENT,
        startup_timeout=180.0,
    )
    launcher.start()
    try:
        yield ClusterEndpoint(urls=launcher.urls, grpc_ports=launcher.grpc_ports, cluster=launcher)
    finally:
        launcher.stop()


@pytest.fixture
def cluster(weaviate_cluster: ClusterEndpoint) -> ClusterEndpoint:
    """The session cluster with all nodes running and ``HEALTHY`` (restarts what a test killed)."""
    launcher = weaviate_cluster.cluster
    if launcher is not None:
        for i in range(1, launcher.size + 1):
            if not launcher.node(i).running:
                launcher.restart(i, wait=False)
        for i in launcher.running():
            launcher.node(i).wait_ready()
        launcher.wait_healthy(launcher.size, timeout=120.0)
    return weaviate_cluster


def connect_cluster(endpoint: ClusterEndpoint, tmp_path: Path, **kwargs: Any) -> Any:
    """``WeaviateStore.connect`` to every node of the cluster (replication factor 3 by default)."""
    from hybrid_memory.stores.weaviate import WeaviateStore

    kwargs.setdefault("collection", "K" + uuid.uuid4().hex[:20])
    kwargs.setdefault("replication_factor", len(endpoint.urls))
    kwargs.setdefault("dead_letter_path", tmp_path / f"dead-letters-{uuid.uuid4().hex[:8]}.sqlite")
    return WeaviateStore.connect(endpoint.urls, grpc_port=endpoint.grpc_ports, **kwargs)


@pytest.fixture
def cluster_store_factory(cluster: ClusterEndpoint, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Build ``WeaviateStore`` objects on the cluster, each on a fresh collection; drop them after."""
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        store = connect_cluster(cluster, tmp_path, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        if store.closed:
            store = connect_cluster(cluster, tmp_path, collection=store.collection, create_schema=False)
        try:
            store.drop()
        finally:
            store.close()
