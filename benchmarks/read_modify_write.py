"""Weaviate ``touch`` and ``update`` latency, on one node and on a local 3-node cluster (replication factor 3).

Usage::

    python -m benchmarks.read_modify_write            # writes results/read_modify_write.{md,json}

Both change stored memories in place with one merge (REST ``PATCH``) per memory
(``hybrid_memory.stores.weaviate.writes._Writes._merge``). Before 2026-12-02 they wrote whole objects
back with one gRPC batch insert and checked tombstones and forget epochs after it; those figures,
measured with this script's steps on commit ``690d61f``, are kept in :data:`BATCH_BEFORE` for the
comparison.

Per deployment: 300 memories of one user (32-d vectors), then 30 touches of 10 memories each,
20 updates of one memory, one update of 200 memories, 20 archives of one memory and one archive
of 80, all through the store's public methods (default consistency: ALL first, then QUORUM). An
update that changes a status also checks the index afterwards (``WeaviateStore._reindex_status_ghosts``):
the archive columns show what that costs next to the importance updates, which do not. Needs ``weaviate-server`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybrid_memory.records import MemoryRecord  # noqa: E402
from hybrid_memory.stores.weaviate import WeaviateStore  # noqa: E402
from hybrid_memory.stores.weaviate.cluster import WeaviateCluster  # noqa: E402

#: The batch-insert version (commit 690d61f), measured with the same steps on this machine on 2026-12-02.
BATCH_BEFORE: dict[str, dict[str, float]] = {
    "1 node": {"touch10_p50_ms": 12.3, "touch10_p95_ms": 13.6, "update1_p50_ms": 8.1, "update200_ms": 88.1},
    "3 nodes, RF 3": {"touch10_p50_ms": 125.9, "touch10_p95_ms": 129.7, "update1_p50_ms": 119.6, "update200_ms": 267.2},
}
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def measure(store: WeaviateStore) -> dict[str, float]:
    """Time the steps of the module docstring on ``store``."""
    store.bind_embedder("bench", 32)
    rng = np.random.default_rng(0)
    recs = [
        MemoryRecord.create(
            user_id="u", content=f"memory {i} about topic {i % 17}", timestamp=T0 + timedelta(minutes=i)
        )
        for i in range(300)
    ]
    store.upsert(recs, rng.random((300, 32), dtype=np.float32))
    touch: list[float] = []
    for k in range(30):
        start = time.perf_counter()
        store.touch("u", [r.id for r in recs[k * 10 : (k + 1) * 10]], T0 + timedelta(days=1, seconds=k))
        touch.append((time.perf_counter() - start) * 1000)
    one: list[float] = []
    for k in range(20):
        start = time.perf_counter()
        store.update([recs[k].evolve(importance=0.7)])
        one.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    store.update([r.evolve(importance=0.9) for r in recs[:200]])
    many = (time.perf_counter() - start) * 1000
    archive: list[float] = []
    for r in recs[200:220]:
        start = time.perf_counter()
        store.update([r.evolve(status="archived")])
        archive.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    store.update([r.evolve(status="archived") for r in recs[220:300]])
    archive_many = (time.perf_counter() - start) * 1000
    return {
        "touch10_p50_ms": round(statistics.median(touch), 1),
        "touch10_p95_ms": round(float(np.percentile(touch, 95)), 1),
        "update1_p50_ms": round(statistics.median(one), 1),
        "update200_ms": round(many, 1),
        "archive1_p50_ms": round(statistics.median(archive), 1),
        "archive80_ms": round(archive_many, 1),
    }


def render(report: dict[str, Any]) -> str:
    """The markdown report."""
    lines = [
        "# Weaviate touch and update: merges in place (`python -m benchmarks.read_modify_write`)",
        "",
        f"{report['when']}, load average before {report['load']:.2f}, 2 cores. "
        "Merge = one REST `PATCH` per memory (now); batch = one gRPC batch insert plus tombstone and epoch checks "
        "(before, commit `690d61f`, same steps).",
        "",
        "| deployment | touch of 10, p50 ms (batch) | p95 ms (batch) | update of 1, p50 ms (batch) "
        "| update of 200, ms (batch) | archive of 1 (status check), p50 ms | archive of 80, ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, now in report["merge"].items():
        old = BATCH_BEFORE[name]
        cells = [f"{now[k]} ({old[k]})" for k in ("touch10_p50_ms", "touch10_p95_ms", "update1_p50_ms", "update200_ms")]
        cells += [str(now.get(k, "-")) for k in ("archive1_p50_ms", "archive80_ms")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Why merges: the server merges under its per-object lock and refuses a missing object, so a touch or update "
        "that raced a delete or a forget from another process cannot re-create the memory, even when its process dies "
        "right after (`tests/reliability/test_weaviate_crash_windows.py`). A batch insert re-created it, and only a "
        "check after the write, which a killed process never ran, deleted it again. The cost is one request per "
        "memory: bulk updates (consolidation) are slower, while a touch or a single update no longer waits for a "
        "replicated batch on a cluster.",
        "",
        "An archive (an update that changes a status) then reads the memories again and asks, per status involved,"
        " which of them the index matches (`hybrid_memory.stores.weaviate` package docstring, Index ghosts): the"
        " difference between the archive and the update columns.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "read_modify_write.md")
    args = p.parse_args(argv)
    report: dict[str, Any] = {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": os.getloadavg()[0],
        "merge": {},
    }
    store = WeaviateStore.embedded()
    try:
        report["merge"]["1 node"] = measure(store)
    finally:
        store.close()
    with tempfile.TemporaryDirectory() as tmp, WeaviateCluster(3, root=Path(tmp) / "cluster") as cluster:
        cluster.wait_healthy()
        store = WeaviateStore.connect(
            cluster.urls,
            grpc_port=cluster.grpc_ports,
            replication_factor=3,
            collection="BenchMerge",
            dead_letter_path=Path(tmp) / "dead-letters.sqlite",
        )
        try:
            report["merge"]["3 nodes, RF 3"] = measure(store)
        finally:
            store.close()
    args.out.write_text(render(report), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
