"""``WeaviateStore`` on a 3-node cluster: replication, consistency, fail-over, a bounded count.

Real processes (``tests/weaviate_cluster.py``); nodes are killed with ``kill -9``. The bounds on
durations are the contract of the setting under test plus generous slack for a loaded 2-core
machine, never a performance claim.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory.errors import ConfigurationError, EmbedderMismatchError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.values import MemoryFilter, SearchRequest
from tests.weaviate_cluster import ClusterEndpoint, connect_cluster

DIM = 16
#: Query timeout of the stores in these tests (seconds).
QUERY_TIMEOUT = 5.0
#: Slack for thread wake-ups, probes and a busy machine on top of a timeout under test.
SLACK = 5.0


def records(user: str, n: int, seed: int = 0) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(seed)
    recs = [MemoryRecord.create(user_id=user, content=f"{user} memory {i} about apples {seed}") for i in range(n)]
    return recs, rng.normal(size=(n, DIM)).astype(np.float32)


def test_collection_is_replicated_and_every_node_serves_it(
    cluster: ClusterEndpoint, cluster_store_factory: Any, tmp_path: Path
) -> None:
    store = cluster_store_factory(timeout=QUERY_TIMEOUT)
    cfg = store.client.collections.use(store.collection).config.get()
    assert cfg.replication_config.factor == len(cluster.urls) == 3
    recs, vecs = records("alice", 20)
    store.upsert(recs, vecs)
    for url, port in zip(cluster.urls, cluster.grpc_ports, strict=True):
        single = connect_cluster(
            ClusterEndpoint([url], [port], None), tmp_path, collection=store.collection, create_schema=False
        )
        try:
            assert single.count("alice") == 20
            assert {r.id for r in single.get("alice", [r.id for r in recs])} == {r.id for r in recs}
        finally:
            single.close()


def test_read_your_writes_across_nodes(cluster: ClusterEndpoint, cluster_store_factory: Any, tmp_path: Path) -> None:
    """QUORUM writes through node 1, QUORUM reads through node 3: every write is seen at once."""
    writer = cluster_store_factory(timeout=QUERY_TIMEOUT)
    reader = connect_cluster(
        ClusterEndpoint([cluster.urls[2]], [cluster.grpc_ports[2]], None),
        tmp_path,
        collection=writer.collection,
        create_schema=False,
    )
    try:
        recs, vecs = records("bob", 40, seed=1)
        for i, (rec, vec) in enumerate(zip(recs, vecs, strict=True)):
            writer.upsert([rec], vec[None, :])
            assert [r.id for r in reader.get("bob", [rec.id])] == [rec.id]
            hits = reader.search(SearchRequest(user_id="bob", vector=vec, query=None, alpha=1.0, limit=1))
            assert hits and hits[0].record.id == rec.id
            updated = rec.evolve(content=f"bob memory {i} edited")
            writer.update([updated])
            assert reader.get("bob", [rec.id])[0].content == updated.content
    finally:
        reader.close()


def test_failover_when_the_connected_node_dies(cluster: ClusterEndpoint, cluster_store_factory: Any) -> None:
    launcher = cluster.owned()
    store = cluster_store_factory(timeout=QUERY_TIMEOUT)
    recs, vecs = records("carol", 30, seed=2)
    store.upsert(recs, vecs)
    first = store._live_url
    launcher.kill(1)
    hits = store.search(SearchRequest(user_id="carol", vector=vecs[0], query="apples", alpha=0.5, limit=5))
    assert hits and hits[0].record.id == recs[0].id
    assert store._live_url != first  # it talks to another node now
    more, more_vecs = records("carol", 10, seed=3)
    store.upsert(more, more_vecs)
    assert store.count("carol") == 40
    assert store.dead_letter_count() == 0


def test_count_is_bounded_right_after_a_node_dies(cluster: ClusterEndpoint, cluster_store_factory: Any) -> None:
    """The aggregate waits for a node killed moments ago; count answers within count_timeout + a search.

    The victim is a follower (not the Raft leader, whose death can hold the next request for
    over 40 s server-side; there a bounded StoreUnavailableError is the contract) and not the
    node the store talks to.
    """
    launcher = cluster.owned()
    store = cluster_store_factory(timeout=QUERY_TIMEOUT, count_timeout=1.0)
    recs, vecs = records("dave", 25, seed=4)
    store.upsert(recs, vecs)
    leader = launcher.raft_leader()
    launcher.kill(next(i for i in (2, 3) if i != leader))
    t0 = time.monotonic()
    n = store.count("dave", filter=MemoryFilter())
    elapsed = time.monotonic() - t0
    assert n == 25
    assert elapsed < store.count_timeout + QUERY_TIMEOUT + SLACK  # not the 30 s of issue 16
    log = store.load_session("dave", "s1", after_seq=1)  # its turn count is bounded the same way
    assert log.count == 0


def test_consistency_settings_are_checked() -> None:
    from hybrid_memory.stores.weaviate.client import _Client

    with pytest.raises(ConfigurationError):
        _Client(object(), read_consistency="MOST")
    with pytest.raises(ConfigurationError):
        _Client(object(), count_timeout=0)


def test_touch_and_update_merge_while_a_replica_is_down(cluster: ClusterEndpoint, cluster_store_factory: Any) -> None:
    """A follower killed moments ago: a merge at ALL waits until the cluster drops it, then fails.

    Once one has failed, the call's other merges go straight to the write level (QUORUM): no
    merge asks for ALL after the first failure at ALL. Nothing is dead-lettered.
    """
    launcher = cluster.owned()
    store = cluster_store_factory(timeout=QUERY_TIMEOUT)
    recs, vecs = records("erin", 30, seed=5)
    store.upsert(recs, vecs)
    leader = launcher.raft_leader()
    launcher.kill(next(i for i in (2, 3) if i != leader))
    asked_all: list[float] = []  # when a merge asked for ALL
    failed_all: list[float] = []  # when a merge at ALL failed
    tenant, watched = store._tenant, store._watched

    def recording(name: str, *, write: bool = False, level: str | None = None) -> Any:
        if level == "ALL":
            asked_all.append(time.monotonic())
        return tenant(name, write=write, level=level)

    def timed(fn: Any, deadline: float) -> Any:  # the ALL attempt of a merge runs through _watched directly
        try:
            return watched(fn, deadline)
        except Exception:
            failed_all.append(time.monotonic())
            raise

    store._tenant = recording  # type: ignore[method-assign]
    store._watched = timed  # type: ignore[method-assign]
    store.update([r.evolve(importance=0.9) for r in recs])
    if failed_all:  # the usual case: the cluster had not dropped the node yet
        assert all(t < min(failed_all) for t in asked_all)
        assert len(asked_all) <= store.write_concurrency
    store.touch("erin", [r.id for r in recs[:10]], recs[0].created_at)
    got = {r.id: r for r in store.get("erin", [r.id for r in recs])}
    assert all(got[r.id].importance == 0.9 for r in recs)
    assert [got[r.id].access_count for r in recs[:11]] == [1] * 10 + [0]
    assert store.dead_letter_count() == 0


def _bind_at_the_barrier(store: Any, name: str, barrier: threading.Barrier, outcomes: dict[str, str]) -> None:
    barrier.wait(timeout=60)
    try:
        store.bind_embedder(name, DIM)
        outcomes[name] = "bound"
    except EmbedderMismatchError:
        outcomes[name] = "refused"


@pytest.mark.parametrize("unbound_first_write", [False, True], ids=["fresh store", "unbound first write"])
def test_stores_on_three_nodes_binding_three_embedders_at_once_agree_on_one(
    cluster: ClusterEndpoint, tmp_path: Path, unbound_first_write: bool
) -> None:
    """The binding (and a name given after an unbound first write) is a collection the Raft leader creates once."""
    for _ in range(3):
        collection = "K" + uuid.uuid4().hex[:20]
        stores = [
            connect_cluster(ClusterEndpoint([url], [port], None), tmp_path, collection=collection, replication_factor=3)
            for url, port in zip(cluster.urls, cluster.grpc_ports, strict=True)
        ]
        barrier, outcomes = threading.Barrier(len(stores)), dict[str, str]()
        try:
            if unbound_first_write:
                first = MemoryRecord.create(user_id="u", content="written before any embedder was named")
                stores[0].upsert([first], np.ones((1, DIM), dtype=np.float32))
                assert (stores[0].embedder_name, stores[0].dimension) == (None, DIM)
            threads = [
                threading.Thread(target=_bind_at_the_barrier, args=(s, f"emb-{i}", barrier, outcomes))
                for i, s in enumerate(stores)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            winners = [name for name, outcome in outcomes.items() if outcome == "bound"]
            assert len(outcomes) == 3 and len(winners) == 1, outcomes
            assert {s.embedder_name for s in stores} == set(winners)
        finally:
            stores[0].drop()
            for s in stores:
                s.close()
