"""Start, break and stop a local multi-node Weaviate cluster (tests, benchmarks; weaviate.md §8).

:class:`WeaviateCluster` runs N ``weaviate-server`` processes (each a :class:`WeaviateServer`)
on free loopback ports, each with its own data directory and log, joined by gossip
(``CLUSTER_JOIN`` to node 1) and Raft (``RAFT_JOIN`` lists every node,
``RAFT_BOOTSTRAP_EXPECT=N``). It waits until ``GET /v1/nodes`` lists N ``HEALTHY`` nodes, and
can ``kill -9``, stop and restart one node with the same data and ports.

No ``weaviate`` import: the launcher only runs processes and polls REST endpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from hybrid_memory.errors import ConfigurationError, StoreUnavailableError
from hybrid_memory.stores.weaviate.server import WeaviateServer, _free_ports, require_weaviate_binary

__all__ = ["WeaviateCluster", "cluster_nodes"]


def cluster_nodes(url: str, timeout: float = 2.0) -> dict[str, str]:
    """``GET <url>/v1/nodes``: node name -> status (``HEALTHY``, ``UNHEALTHY``, ``UNAVAILABLE``...).

    Raises:
        StoreUnavailableError: the node at ``url`` did not answer.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url.rstrip('/')}/v1/nodes", timeout=timeout) as resp:
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise StoreUnavailableError(f"GET {url}/v1/nodes failed: {exc}") from exc
    return {str(n.get("name")): str(n.get("status")) for n in body.get("nodes") or []}


class WeaviateCluster:
    """N local ``weaviate-server`` nodes forming one cluster on loopback (weaviate.md §8).

    Node ``i`` (1-based) is named ``node<i>`` and keeps its ports and data directory for its
    whole life, so a node stopped or killed comes back with :meth:`restart` and rejoins.

    Args:
        nodes: Number of nodes (1..9).
        binary: Path of ``weaviate-server`` (default: ``find_weaviate_binary()``).
        root: Directory for ``node<i>/data`` and ``node<i>.log``; ``None`` = a temporary
            directory removed by :meth:`stop`.
        memory_limit: ``GOMEMLIMIT`` of every node (e.g. ``"512MiB"``), ``None`` = unlimited.
        environment: Extra or overriding environment variables for every node.
        startup_timeout: Seconds to wait for the cluster (all nodes ready and healthy).

    Raises:
        ConfigurationError: no binary was found, or ``nodes`` is out of range.

    Example:
        >>> with WeaviateCluster(3, memory_limit="512MiB") as cluster:  # doctest: +SKIP
        ...     cluster.urls
        ...     cluster.kill(2)
        ...     cluster.restart(2)
        ['http://127.0.0.1:41235', 'http://127.0.0.1:41301', 'http://127.0.0.1:41377']
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        binary: str | os.PathLike[str] | None = None,
        root: str | os.PathLike[str] | None = None,
        memory_limit: str | None = None,
        environment: Mapping[str, str] | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        if not 1 <= nodes <= 9:
            raise ConfigurationError(f"nodes must be in 1..9, got {nodes!r}")
        found = require_weaviate_binary(binary)
        self.size = nodes
        self.startup_timeout = startup_timeout
        self._tmp: str | None = None
        if root is None:
            self._tmp = tempfile.mkdtemp(prefix="hybrid-memory-weaviate-cluster-")
            self.root = Path(self._tmp)
        else:
            self.root = Path(root).resolve()
        # Every port is chosen before any node starts: RAFT_JOIN names every node's Raft port.
        # With CLUSTER_IN_LOCALHOST a node's Raft RPC address is RAFT_PORT + 1, and the gossip
        # and data ports are a pair too (see WeaviateServer.env).
        ports = _free_ports(2 * nodes, pairs=2 * nodes)
        singles, pairs = ports[: 2 * nodes], ports[2 * nodes :]
        per_node = [
            (singles[2 * i], singles[2 * i + 1], *pairs[4 * i : 4 * i + 2], *pairs[4 * i + 2 : 4 * i + 4])
            for i in range(nodes)
        ]
        raft_join = ",".join(f"node{i + 1}:{p[4]}" for i, p in enumerate(per_node))
        self.nodes: list[WeaviateServer] = []
        for i, p in enumerate(per_node):
            env = {
                "CLUSTER_HOSTNAME": f"node{i + 1}",
                "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
                "RAFT_JOIN": raft_join,
                "RAFT_BOOTSTRAP_EXPECT": str(nodes),
            }
            if i > 0:
                env["CLUSTER_JOIN"] = f"127.0.0.1:{per_node[0][2]}"
            env.update(environment or {})
            self.nodes.append(
                WeaviateServer(
                    found,
                    data_path=self.root / f"node{i + 1}" / "data",
                    log_path=self.root / f"node{i + 1}.log",
                    memory_limit=memory_limit,
                    environment=env,
                    startup_timeout=startup_timeout,
                    ports=(p[0], p[1], p[2], p[3], p[4], p[5]),
                )
            )
            self.nodes[-1].env()  # fixes http_port/grpc_port now, so urls are known before start
        self.startup_seconds: float | None = None

    # -- addresses -----------------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        """REST base URLs of the nodes, node 1 first."""
        return [n.url for n in self.nodes]

    @property
    def grpc_ports(self) -> list[int]:
        """The nodes' gRPC ports, node 1 first."""
        return [n.grpc_port for n in self.nodes]

    def node(self, i: int) -> WeaviateServer:
        """Node ``i`` (1-based)."""
        if not 1 <= i <= self.size:
            raise ConfigurationError(f"node must be in 1..{self.size}, got {i!r}")
        return self.nodes[i - 1]

    def running(self) -> list[int]:
        """Numbers (1-based) of the nodes whose process is alive."""
        return [i + 1 for i, n in enumerate(self.nodes) if n.running]

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> WeaviateCluster:
        """Start every node that is not running and wait until all N are ``HEALTHY``.

        Raises:
            StoreUnavailableError: a node exited, or the cluster did not become healthy within
                ``startup_timeout`` (the message carries the tail of every node's log). Every
                node is stopped then.
        """
        t0 = time.monotonic()
        try:
            for n in self.nodes:
                n.spawn()
            for n in self.nodes:
                n.wait_ready()
            self.wait_healthy(self.size, timeout=max(1.0, self.startup_timeout - (time.monotonic() - t0)))
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def health(self) -> dict[str, str]:
        """Node name -> status, as the first running node reports it (``{}`` if none answers)."""
        for i in self.running():
            try:
                return cluster_nodes(self.node(i).url)
            except StoreUnavailableError:
                continue
        return {}

    def raft_leader(self) -> int | None:
        """Number (1-based) of the node that leads Raft now (``GET /v1/cluster/statistics``)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for i in self.running():
            try:
                with opener.open(f"{self.node(i).url}/v1/cluster/statistics", timeout=2.0) as resp:
                    stats = json.loads(resp.read()).get("statistics") or []
            except (urllib.error.URLError, OSError, ValueError):
                continue
            for s in stats:
                name = str(s.get("name", ""))
                if (s.get("raft") or {}).get("state") == "Leader" and name.startswith("node"):
                    return int(name[4:])
        return None

    def wait_healthy(self, count: int | None = None, *, timeout: float = 60.0) -> dict[str, str]:
        """Wait until some running node lists ``count`` (default: the running nodes) ``HEALTHY`` nodes.

        Raises:
            StoreUnavailableError: not so within ``timeout`` seconds.
        """
        want = len(self.running()) if count is None else count
        deadline = time.monotonic() + timeout
        seen: dict[str, str] = {}
        while True:
            seen = self.health()
            if sum(1 for s in seen.values() if s == "HEALTHY") >= want:
                return seen
            if time.monotonic() >= deadline:
                raise StoreUnavailableError(
                    f"the Weaviate cluster has not {want} HEALTHY nodes after {timeout:.0f}s: {seen}\n"
                    + self.log_tails()
                )
            time.sleep(0.2)

    def kill(self, i: int) -> None:
        """``kill -9`` node ``i`` (1-based); its data and ports are kept for :meth:`restart`."""
        self.node(i).kill()

    def stop_node(self, i: int, timeout: float = 30.0) -> None:
        """Stop node ``i`` gracefully (SIGTERM); its data and ports are kept for :meth:`restart`."""
        self.node(i).stop(timeout, keep_data=True)

    def restart(self, i: int, *, wait: bool = True) -> None:
        """Start node ``i`` again on the same data and ports (stopping it first if it runs).

        Args:
            i: Node number (1-based).
            wait: Wait until it is ready and every running node is ``HEALTHY``.
        """
        node = self.node(i)
        if node.running:
            node.stop(keep_data=True)
        node.spawn()
        if wait:
            node.wait_ready()
            self.wait_healthy(timeout=self.startup_timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node (all at once); remove a temporary root. Idempotent; also after a failed start.

        In parallel because a node stopped after the others waits for its lost Raft peers and
        is only killed at ``timeout``.
        """
        stoppers = [threading.Thread(target=n.stop, args=(timeout,), kwargs={"keep_data": True}) for n in self.nodes]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def log_tails(self, lines: int = 10) -> str:
        """The last lines of every node's log, one block per node."""
        return "\n".join(f"--- node{i + 1} ---\n{n.log_tail(lines)}" for i, n in enumerate(self.nodes))

    def __enter__(self) -> WeaviateCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
