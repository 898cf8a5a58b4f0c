"""Node loss on a 3-node cluster with real processes and ``kill -9`` (issue 16, fault rows).

* One of three nodes killed during an ingest (600 memories here; 5,000 in
  ``benchmarks/cluster.py``): every acknowledged write is readable afterwards, every write that
  raised is stored or in the dead-letter queue and a replay brings it in exactly once; writes
  and recall go on while the node is down; when the node is back, async replication repairs its
  copies (read through that node alone at consistency ONE, i.e. from its local replica).
* Two of three nodes down: a write raises a typed ``StoreUnavailableError`` within the insert
  timeout, reads still answer from the live replica, nothing is lost after recovery.

Contract bounds (generous, for a loaded 2-core machine): a failed write ends within the store's
insert timeout plus ``SLACK``; a returning node is repaired within ``REPAIR_BOUND`` seconds with
the fixture's async-replication settings (``tests/weaviate_cluster.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory.errors import StoreError, StoreUnavailableError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.values import SearchRequest
from tests.reliability.conftest import report
from tests.weaviate_cluster import ClusterEndpoint, connect_cluster

DIM = 16
USERS = 4
#: Memories of the ingest under a kill (the benchmark runs 5,000).
INGEST = 600
BATCH = 20
QUERY_TIMEOUT = 5.0
INSERT_TIMEOUT = 8.0
SLACK = 10.0
#: Seconds within which async replication repairs a node that was down.
REPAIR_BOUND = 120.0


def make_records(n: int, seed: int) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(seed)
    recs = [
        MemoryRecord.create(
            user_id=f"user-{i % USERS}",
            content=f"memory {i:05d} of run {seed} about apples and pears",
            metadata={"n": i, "run": seed},
        )
        for i in range(n)
    ]
    return recs, rng.normal(size=(n, DIM)).astype(np.float32)


def fast_store(endpoint: ClusterEndpoint, tmp_path: Path, **kwargs: Any) -> Any:
    kwargs.setdefault("timeout", QUERY_TIMEOUT)
    kwargs.setdefault("insert_timeout", INSERT_TIMEOUT)
    store = connect_cluster(endpoint, tmp_path, **kwargs)
    store.retry_base_delay = 0.05  # keep the outage part of the test short
    store.retry_max_delay = 0.5
    return store


def by_user(recs: Sequence[MemoryRecord]) -> dict[str, list[MemoryRecord]]:
    out: dict[str, list[MemoryRecord]] = {}
    for r in recs:
        out.setdefault(r.user_id, []).append(r)
    return out


def assert_stored(store: Any, recs: Sequence[MemoryRecord], vecs: np.ndarray, *, exactly: bool = False) -> None:
    """Every record is stored, with its content, metadata and (unit) vector.

    With ``exactly`` the users hold nothing else (so each record is stored once).
    """
    want = {r.id: (r, v / np.linalg.norm(v)) for r, v in zip(recs, vecs, strict=True)}
    for user, group in by_user(recs).items():
        ids = [r.id for r in group]
        got = {r.id: r for r in store.get(user, ids)}
        assert set(got) == set(ids), f"{len(set(ids) - set(got))} memories of {user} are missing"
        if exactly:
            assert store.count(user) == len(ids)
        vectors = store.get_vectors(user, ids)
        for i in ids:
            rec, vec = want[i]
            assert (got[i].content, got[i].metadata) == (rec.content, rec.metadata)
            np.testing.assert_allclose(vectors[i], vec, atol=1e-5)


def wait_repaired(
    endpoint: ClusterEndpoint, node: int, tmp_path: Path, store: Any, recs: Sequence[MemoryRecord]
) -> float:
    """Seconds until node ``node`` alone (consistency ONE: its local replica) lists every record."""
    local = connect_cluster(
        ClusterEndpoint([endpoint.urls[node - 1]], [endpoint.grpc_ports[node - 1]], None),
        tmp_path,
        collection=store.collection,
        create_schema=False,
        read_consistency="ONE",
        timeout=QUERY_TIMEOUT,
    )
    groups = {u: {r.id for r in g} for u, g in by_user(recs).items()}
    t0 = time.monotonic()
    try:
        while True:
            missing = {u: len(ids - {r.id for r in local.list(u)}) for u, ids in groups.items()}
            if not any(missing.values()):
                return time.monotonic() - t0
            assert time.monotonic() - t0 < REPAIR_BOUND, f"node{node} still misses {missing} after {REPAIR_BOUND}s"
            time.sleep(0.5)
    finally:
        local.close()


@pytest.mark.parametrize("which", ["entry-node", "raft-leader"])
def test_kill_one_node_during_ingest(cluster: ClusterEndpoint, tmp_path: Path, which: str) -> None:
    """``entry-node``: the node the store talks to (fail-over); ``raft-leader``: the leader
    (another node when node 1 leads), whose death holds the next write server-side."""
    launcher = cluster.owned()
    leader = launcher.raft_leader()
    victim = 1 if which == "entry-node" else (leader if leader not in (None, 1) else 3)
    store = fast_store(cluster, tmp_path)
    recs, vecs = make_records(INGEST, seed=victim)
    acked: list[int] = []  # batch numbers whose upsert returned
    failed: list[tuple[int, BaseException]] = []
    started = threading.Event()

    def ingest() -> None:
        for b in range(0, INGEST, BATCH):
            if b // BATCH == 8:
                started.set()
            try:
                store.upsert(recs[b : b + BATCH], vecs[b : b + BATCH])
                acked.append(b)
            except StoreError as exc:  # typed, and dead-lettered
                failed.append((b, exc))
        started.set()

    try:
        worker = threading.Thread(target=ingest, daemon=True)
        worker.start()
        assert started.wait(timeout=120)
        launcher.kill(victim)
        worker.join(timeout=INGEST / BATCH * (INSERT_TIMEOUT + SLACK))
        assert not worker.is_alive()
        assert len(acked) + len(failed) == INGEST // BATCH
        assert all(isinstance(exc, StoreUnavailableError) for _, exc in failed), failed[:1]

        # The node is still down: every acknowledged write is readable, recall and writes go on.
        ok = [i for b in acked for i in range(b, b + BATCH)]
        assert_stored(store, [recs[i] for i in ok], vecs[ok])
        queued = {r.id for r, _, _ in store.dead_letters()}
        for b, _ in failed:
            for r in recs[b : b + BATCH]:
                assert r.id in queued or store.get(r.user_id, [r.id]), "a failed write is neither stored nor queued"
        hits = store.search(SearchRequest(user_id="user-0", query="apples", vector=vecs[0], alpha=0.5, limit=5))
        assert hits and all(h.record.user_id == "user-0" for h in hits)
        more, more_vecs = make_records(40, seed=100 + victim)
        store.upsert(more, more_vecs)

        # Back: the dead letters are replayed once, the node's copies are repaired.
        launcher.restart(victim)
        replayed = store.replay_dead_letters()
        assert store.dead_letter_count() == 0
        every = recs + more
        every_vecs = np.concatenate([vecs, more_vecs])
        assert_stored(store, every, every_vecs, exactly=True)
        t0 = time.monotonic()
        wait_repaired(cluster, victim, tmp_path, store, every)
        report(
            f"cluster kill -9 of one node during ingest ({which})",
            memories=INGEST,
            acknowledged=len(acked) * BATCH,
            raised=len(failed) * BATCH,
            replayed=replayed,
            written_while_down=len(more),
            final=len(every),
            repaired_s=round(time.monotonic() - t0, 1),
            lost=0,
        )
    finally:
        if not launcher.node(victim).running:
            launcher.restart(victim)
        store.drop()
        store.close()


def test_two_of_three_nodes_down(cluster: ClusterEndpoint, tmp_path: Path) -> None:
    launcher = cluster.owned()
    store = fast_store(cluster, tmp_path)
    recs, vecs = make_records(200, seed=7)
    try:
        store.upsert(recs[:150], vecs[:150])
        launcher.kill(2)
        launcher.kill(3)
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.upsert(recs[150:], vecs[150:])
        write_error_s = time.monotonic() - t0
        assert write_error_s < INSERT_TIMEOUT + SLACK
        assert store.dead_letter_count() == 50
        # Reads: answered from the live replica, or a typed error, never a hang.
        t0 = time.monotonic()
        try:
            hits = store.search(SearchRequest(user_id="user-1", query="pears", vector=vecs[1], alpha=0.5, limit=3))
            assert all(h.record.user_id == "user-1" for h in hits)
        except StoreUnavailableError:
            pass
        assert time.monotonic() - t0 < QUERY_TIMEOUT + SLACK

        launcher.restart(2, wait=False)
        launcher.restart(3, wait=False)
        launcher.node(2).wait_ready()
        launcher.node(3).wait_ready()
        launcher.wait_healthy(3, timeout=120)
        # A node that reports healthy may still refuse a write while its shards catch up: the replay
        # keeps what fails queued, and an operator replays again (bounded here, never a hang).
        replayed, deadline = store.replay_dead_letters(), time.monotonic() + 60
        while store.dead_letter_count() and time.monotonic() < deadline:
            time.sleep(2)
            replayed += store.replay_dead_letters()
        errors = [e for _, e, _ in store.dead_letters()][:1]
        assert replayed == 50 and store.dead_letter_count() == 0, (replayed, errors)
        assert_stored(store, recs, vecs, exactly=True)
        report(
            "cluster two of three nodes down",
            memories=len(recs),
            acknowledged=150,
            raised_typed=50,
            write_error_s=round(write_error_s, 1),
            replayed=50,
            final=len(recs),
            lost=0,
        )
    finally:
        for i in (2, 3):
            if not launcher.node(i).running:
                launcher.restart(i, wait=False)
        launcher.wait_healthy(3, timeout=120)
        store.drop()
        store.close()


def test_rolling_restart_under_traffic(cluster: ClusterEndpoint, tmp_path: Path) -> None:
    """Each node in turn stopped (SIGTERM) and restarted while one thread writes and another
    recalls: nothing acknowledged is lost, a recall never returns another user's memory."""
    launcher = cluster.owned()
    store = fast_store(cluster, tmp_path)
    recs, vecs = make_records(2000, seed=11)
    acked: list[int] = []
    raised: list[tuple[int, BaseException]] = []
    foreign: list[str] = []
    recalls = [0]
    stop = threading.Event()

    def write() -> None:
        for b in range(0, len(recs), 10):
            if stop.is_set():
                return
            try:
                store.upsert(recs[b : b + 10], vecs[b : b + 10])
                acked.append(b)
            except StoreError as exc:
                raised.append((b, exc))
            time.sleep(0.05)

    def recall() -> None:
        rng = np.random.default_rng(3)
        while not stop.is_set():
            user = f"user-{rng.integers(USERS)}"
            try:
                hits = store.search(SearchRequest(user_id=user, query="apples", vector=vecs[0], alpha=0.5, limit=5))
                foreign.extend(h.record.user_id for h in hits if h.record.user_id != user)
                recalls[0] += 1
            except StoreError:
                pass
            time.sleep(0.02)

    threads = [threading.Thread(target=write, daemon=True), threading.Thread(target=recall, daemon=True)]
    try:
        store.upsert(recs[:10], vecs[:10])  # the tenants exist before the first restart
        for t in threads:
            t.start()
        for node in (3, 2, 1):
            launcher.restart(node)  # SIGTERM, then start on the same data and ports; waits for HEALTHY
        stop.set()
        for t in threads:
            t.join(timeout=INSERT_TIMEOUT * 4 + SLACK)
            assert not t.is_alive()
        assert foreign == []
        assert recalls[0] > 0 and acked
        assert all(isinstance(exc, StoreUnavailableError) for _, exc in raised), raised[:1]
        ok = [i for b in acked for i in range(b, b + 10)]
        assert_stored(store, [recs[i] for i in ok], vecs[ok])
        store.replay_dead_letters()
        assert store.dead_letter_count() == 0
        tried = sorted({i for b in acked + [b for b, _ in raised] for i in range(b, b + 10)})
        assert_stored(store, [recs[i] for i in tried], vecs[tried])
        report(
            "cluster rolling restart under traffic",
            restarts=3,
            acknowledged=len(ok),
            raised_typed=len(raised) * 10,
            final=len(tried),
            recalls=recalls[0],
            leaks=len(foreign),
            lost=0,
        )
    finally:
        stop.set()
        store.drop()
        store.close()
