"""Cluster benchmark (issue 16): WeaviateStore on a local 3-node cluster vs one node.

Usage::

    python -m benchmarks.cluster                  # writes benchmarks/results/cluster.{json,md}
    python -m benchmarks.cluster --ingest 5000 --per-user 10000 --queries 300

Everything runs on this machine: three ``weaviate-server`` processes started by
:class:`~hybrid_memory.stores.weaviate.cluster.WeaviateCluster` (``GOMEMLIMIT`` per node, fast
async-replication settings as in ``tests/weaviate_cluster.py``) and one single node
(:class:`~hybrid_memory.stores.weaviate.WeaviateServer`) for comparison. Measured, one run:

* **ingest**: ``store.upsert`` of ``--ingest`` memories (50 users, batches of 200, the store's
  default ``write_concurrency``), memories per second: one node; RF 3 with the default
  ALL-first writes; RF 3 with QUORUM writes only.
* **recall**: p50/p95 of ``store.search`` (hybrid, alpha 0.5, limit 10) on one user with
  ``--per-user`` memories, read consistency ONE and QUORUM, against the bare client's
  ``hybrid()`` on the same tenant, query and vector (the ratio is what the store adds).
* **kill**: ``kill -9`` of the Raft leader during an ingest of ``--ingest`` memories in batches
  of 100: batches acknowledged / raised, dead letters replayed, every memory stored exactly once,
  seconds until the restarted node's own replica holds everything (async replication).

The machine is shared (2 cores, other processes running): numbers are one run's, not a claim.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_memory.errors import StoreError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.weaviate import WeaviateServer, WeaviateStore
from hybrid_memory.stores.weaviate.cluster import WeaviateCluster
from hybrid_memory.stores.weaviate.mapping import SEARCH_PROPERTY, tenant_name
from hybrid_memory.values import SearchRequest

RESULTS = Path(__file__).resolve().parent / "results"
DIM = 256
MEMORY_LIMIT = "768MiB"
#: As tests/weaviate_cluster.py: repair in seconds rather than Weaviate's default minute.
NODE_ENV = {
    "ASYNC_REPLICATION_FREQUENCY": "5s",
    "ASYNC_REPLICATION_FREQUENCY_WHILE_PROPAGATING": "1s",
    "ASYNC_REPLICATION_PROPAGATION_DELAY": "1s",
}
WORDS = [
    "apple",
    "pear",
    "garden",
    "train",
    "ticket",
    "doctor",
    "monday",
    "coffee",
    "python",
    "berlin",
    "sister",
    "budget",
    "flight",
    "meeting",
    "allergy",
    "peanut",
    "guitar",
    "lesson",
    "marathon",
    "invoice",
    "holiday",
    "kitchen",
    "paint",
    "museum",
]


def make(n: int, users: int, seed: int) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(seed)
    recs = [
        MemoryRecord.create(
            user_id=f"user-{i % users:03d}",
            content=f"memory {i} " + " ".join(rng.choice(WORDS, size=8)),
        )
        for i in range(n)
    ]
    return recs, rng.normal(size=(n, DIM)).astype(np.float32)


def ingest_rate(store: WeaviateStore, n: int, seed: int, users: int = 50) -> float:
    """Memories per second through ``upsert`` calls of 1000 memories of ``users`` users."""
    if users == 1:  # one user per call: the calls rotate over 5 users
        recs, vecs = make(n, 5, seed)
        order = sorted(range(n), key=lambda i: (recs[i].user_id, i))
        recs, vecs = [recs[i] for i in order], vecs[order]
    else:
        recs, vecs = make(n, users, seed)
    t0 = time.perf_counter()
    for b in range(0, n, 1000):
        store.upsert(recs[b : b + 1000], vecs[b : b + 1000])
    return n / (time.perf_counter() - t0)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000.0, q))


def recall_latency(store: WeaviateStore, per_user: int, queries: int) -> dict[str, Any]:
    """Store search vs the bare client's hybrid() on one user's tenant (ms)."""
    from weaviate.classes.config import ConsistencyLevel
    from weaviate.classes.query import HybridFusion

    recs, vecs = make(per_user, 1, 11)
    for b in range(0, per_user, 1000):
        store.upsert(recs[b : b + 1000], vecs[b : b + 1000])
    rng = np.random.default_rng(5)
    qs = [(" ".join(rng.choice(WORDS, size=3)), rng.normal(size=DIM).astype(np.float32)) for _ in range(queries)]
    out: dict[str, Any] = {"memories": per_user, "queries": queries}
    user = recs[0].user_id
    for level in ("ONE", "QUORUM"):
        store.read_consistency = level
        bare = store.client.collections.use(store.collection).with_tenant(tenant_name(user))
        bare = bare.with_consistency_level(ConsistencyLevel(level))
        timings: dict[str, list[float]] = {"store": [], "bare": []}
        for k, (text, vec) in enumerate(qs + qs[:20]):  # the first 20 warm up
            req = SearchRequest(user_id=user, query=text, vector=vec, alpha=0.5, limit=10)
            t0 = time.perf_counter()
            store.search(req)
            t1 = time.perf_counter()
            bare.query.hybrid(
                query=store.analyzer.analyze_query(text),
                vector=vec.tolist(),
                alpha=0.5,
                fusion_type=HybridFusion.RELATIVE_SCORE,
                query_properties=[SEARCH_PROPERTY],
                limit=10,
            )
            t2 = time.perf_counter()
            if k >= 20:
                timings["store"].append(t1 - t0)
                timings["bare"].append(t2 - t1)
        out[level] = {
            "store_p50_ms": pct(timings["store"], 50),
            "store_p95_ms": pct(timings["store"], 95),
            "bare_p50_ms": pct(timings["bare"], 50),
            "bare_p95_ms": pct(timings["bare"], 95),
            "p95_ratio": pct(timings["store"], 95) / pct(timings["bare"], 95),
        }
    store.read_consistency = "QUORUM"
    return out


def cluster_store(cluster: WeaviateCluster, collection: str, root: Path, **kwargs: Any) -> WeaviateStore:
    """A store on every node of ``cluster``, replication factor 3."""
    return WeaviateStore.connect(
        cluster.urls,
        grpc_port=cluster.grpc_ports,
        replication_factor=3,
        collection=collection,
        dead_letter_path=root / f"{collection}-dead-letters.sqlite",
        **kwargs,
    )


def kill_during_ingest(cluster: WeaviateCluster, n: int, root: Path) -> dict[str, Any]:
    store = cluster_store(cluster, "BenchKill", root, timeout=10.0, insert_timeout=20.0)
    recs, vecs = make(n, 20, 3)
    acked, failed = 0, 0
    victim = cluster.raft_leader() or 2
    kill_at = n // 100 // 3
    out: dict[str, Any] = {"memories": n, "batch": 100, "victim": f"node{victim} (Raft leader)"}

    def run() -> None:
        nonlocal acked, failed
        for k, b in enumerate(range(0, n, 100)):
            if k == kill_at:
                threading.Thread(target=cluster.kill, args=(victim,), daemon=True).start()
            try:
                store.upsert(recs[b : b + 100], vecs[b : b + 100])
                acked += 1
            except StoreError:
                failed += 1

    t0 = time.perf_counter()
    run()
    out["ingest_seconds_with_kill"] = time.perf_counter() - t0
    out["batches_acknowledged"], out["batches_raised"] = acked, failed
    out["dead_letters"] = store.dead_letter_count()
    t0 = time.perf_counter()
    cluster.restart(victim)
    out["restart_seconds"] = time.perf_counter() - t0
    out["replayed"] = store.replay_dead_letters()
    stored = sum(store.count(f"user-{u:03d}") for u in range(20))
    out["stored"], out["exactly_once"] = stored, stored == n
    local = WeaviateStore.connect(
        cluster.urls[victim - 1],
        grpc_port=cluster.grpc_ports[victim - 1],
        collection="BenchKill",
        create_schema=False,
        read_consistency="ONE",
        dead_letter_path=root / "kill-local.sqlite",
    )
    t0 = time.perf_counter()
    while sum(len(local.list(f"user-{u:03d}")) for u in range(20)) < n and time.perf_counter() - t0 < 300:
        time.sleep(1.0)
    out["repair_seconds_after_restart"] = time.perf_counter() - t0
    local.close()
    store.drop()
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ingest", type=int, default=5000)
    ap.add_argument("--per-user", type=int, default=10000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    res: dict[str, Any] = {"machine": f"{platform.machine()}, {platform.python_version()}", "dim": DIM}
    res["load_average_at_start"] = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hm-bench-cluster-") as tmp:
        root = Path(tmp)
        with WeaviateServer(memory_limit=MEMORY_LIMIT, data_path=root / "single") as server:
            store = WeaviateStore.connect(
                server.url, grpc_port=server.grpc_port, collection="Bench", dead_letter_path=root / "s.sqlite"
            )
            res["single_ingest_per_s"] = ingest_rate(store, args.ingest, 1)
            res["single_ingest_one_user_per_s"] = ingest_rate(store, args.ingest, 4, users=1)
            res["single_recall"] = recall_latency(store, args.per_user, args.queries)
            store.close()
        with WeaviateCluster(3, root=root / "cluster", memory_limit=MEMORY_LIMIT, environment=NODE_ENV) as cluster:
            res["cluster_startup_seconds"] = cluster.startup_seconds
            store = cluster_store(cluster, "Bench", root)
            res["rf3_ingest_per_s"] = ingest_rate(store, args.ingest, 2)
            res["rf3_ingest_one_user_per_s"] = ingest_rate(store, args.ingest, 5, users=1)
            store.write_all_first = False
            res["rf3_quorum_only_ingest_per_s"] = ingest_rate(store, args.ingest, 3)
            store.write_all_first = True
            res["rf3_recall"] = recall_latency(store, args.per_user, args.queries)
            store.drop()
            store.close()
            res["kill_leader_during_ingest"] = kill_during_ingest(cluster, args.ingest, root)
    res["load_average_at_end"] = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "cluster.md").write_text(render(res), encoding="utf-8")
    print(render(res))


def render(res: dict[str, Any]) -> str:
    k = res["kill_leader_during_ingest"]
    lines = [
        "# WeaviateStore on a local 3-node cluster (benchmarks/cluster.py)",
        "",
        f"One run, weaviate-server 1.39.0, {res['machine']}, 2 shared cores, `GOMEMLIMIT={MEMORY_LIMIT}` per node, "
        f"{res['dim']}-d vectors, load average {res.get('load_average_at_start', float('nan')):.1f} at the start "
        f"and {res.get('load_average_at_end', float('nan')):.1f} at the end (other processes share the cores). "
        f"Cluster start-up: {res['cluster_startup_seconds']:.1f} s.",
        "",
        "| ingest (memories/s, `upsert` calls of 1000) | 50 users per call | 1 user per call |",
        "|---|---|---|",
        f"| one node | {res['single_ingest_per_s']:.0f} | {res['single_ingest_one_user_per_s']:.0f} |",
        f"| 3 nodes, RF 3, ALL-first writes (default) | {res['rf3_ingest_per_s']:.0f} "
        f"| {res['rf3_ingest_one_user_per_s']:.0f} |",
        f"| 3 nodes, RF 3, QUORUM writes only | {res['rf3_quorum_only_ingest_per_s']:.0f} | |",
        "",
        "| recall, one user (ms) | store p50 | store p95 | bare `hybrid()` p50 | bare p95 | p95 ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, key in (("one node", "single_recall"), ("3 nodes RF 3", "rf3_recall")):
        r = res[key]
        for level in ("ONE", "QUORUM"):
            x = r[level]
            lines.append(
                f"| {name}, {r['memories']} memories, read {level} | {x['store_p50_ms']:.1f} | {x['store_p95_ms']:.1f} "
                f"| {x['bare_p50_ms']:.1f} | {x['bare_p95_ms']:.1f} | {x['p95_ratio']:.2f} |"
            )
    lines += [
        "",
        f"**kill -9 of {k['victim']} during an ingest of {k['memories']} memories** (batches of {k['batch']}): "
        f"{k['batches_acknowledged']} batches acknowledged, {k['batches_raised']} raised "
        f"({k['dead_letters']} memories dead-lettered, {k['replayed']} replayed); stored afterwards {k['stored']} "
        f"(exactly once: {k['exactly_once']}); ingest took {k['ingest_seconds_with_kill']:.1f} s; restart "
        f"{k['restart_seconds']:.1f} s; the restarted node's own replica held everything "
        f"{k['repair_seconds_after_restart']:.1f} s after it was back.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
