"""Many users on Weaviate (issue 16): one tenant per user, most of them idle.

Usage::

    python -m benchmarks.tenants                      # 10,000 users x 10 memories, one node
    python -m benchmarks.tenants --nodes 3 --users 2000 --per-user 10

One run on this machine (``weaviate-server`` processes started here, ``GOMEMLIMIT`` per node):

* **create**: ``store.upsert`` of ``--per-user`` memories for each of ``--users`` users, 50 users
  per call; every user's tenant is created on its first write (auto tenant creation). Users per
  second and the server's RSS (summed over the nodes) afterwards.
* **hot recall**: p50/p95 of ``store.search`` (hybrid, alpha 0.5, limit 10) for ``--sample``
  users while every tenant is ``ACTIVE``.
* **sweep**: ``deactivate_idle(0)`` over every user (seconds), then RSS again once the server had
  ``--settle`` seconds to release memory.
* **cold recall**: the same searches for other sampled users whose tenants are now ``INACTIVE``:
  each activates its tenant (auto tenant activation) before it answers; then once more, hot.

The machine is shared (2 cores, other processes running): one run's numbers, not a claim.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cluster import WORDS
from benchmarks.harness.perf import _proc_mem_mb
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.weaviate import WeaviateServer, WeaviateStore
from hybrid_memory.stores.weaviate.cluster import WeaviateCluster
from hybrid_memory.values import SearchRequest

RESULTS = Path(__file__).resolve().parent / "results"
DIM = 256


def rss_mb(pids: list[int]) -> float:
    """Resident memory of these processes, summed (MB)."""
    return sum(_proc_mem_mb(pid).get("VmRSS", 0.0) for pid in pids)


def user(i: int) -> str:
    return f"user-{i:05d}"


def open_files(pids: list[int]) -> int:
    """Open file descriptors of these processes, summed."""
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids)


def create(store: WeaviateStore, args: argparse.Namespace, pids: list[int]) -> dict[str, Any]:
    """Write every user's memories, 50 users per ``upsert``, sweeping idle tenants every ``sweep_every`` users."""
    rng = np.random.default_rng(0)
    series: list[dict[str, float]] = []
    sweeps = 0.0
    t0 = time.perf_counter()
    for first in range(0, args.users, 50):
        if first % 500 == 0:  # sampled before the sweep: the peak of each period
            point = {"users": first, "seconds": time.perf_counter() - t0, "rss_mb": rss_mb(pids)}
            point["open_files"] = open_files(pids)
            series.append(point)
            print(f"{first} users: {point}", flush=True)
        if first % args.sweep_every == 0 and first:
            s0 = time.perf_counter()
            store.deactivate_idle(0)
            sweeps += time.perf_counter() - s0
        recs = [
            MemoryRecord.create(user_id=user(u), content=f"memory {j} of {u}: " + " ".join(rng.choice(WORDS, size=6)))
            for u in range(first, min(args.users, first + 50))
            for j in range(args.per_user)
        ]
        store.upsert(recs, rng.normal(size=(len(recs), DIM)).astype(np.float32))
    seconds = time.perf_counter() - t0
    series.append({"users": args.users, "seconds": seconds, "rss_mb": rss_mb(pids), "open_files": open_files(pids)})
    return {"seconds": seconds, "sweep_seconds_during_create": sweeps, "series": series}


def recall_ms(store: WeaviateStore, users: list[str]) -> list[float]:
    rng = np.random.default_rng(1)
    out = []
    for u in users:
        req = SearchRequest(
            user_id=u,
            query=" ".join(rng.choice(WORDS, size=3)),
            vector=rng.normal(size=DIM).astype(np.float32),
            alpha=0.5,
            limit=10,
        )
        t0 = time.perf_counter()
        hits = store.search(req)
        out.append((time.perf_counter() - t0) * 1000)
        assert hits and all(h.record.user_id == u for h in hits), u
    return out


def stats(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "n": len(xs)}


def run(store: WeaviateStore, pids: list[int], args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"rss_mb_empty": rss_mb(pids), "open_files_empty": open_files(pids)}
    made = create(store, args, pids)
    res["create_seconds"] = made["seconds"]
    res["create_series"] = made["series"]
    res["sweep_seconds_during_create"] = made["sweep_seconds_during_create"]
    res["users_per_s"] = args.users / made["seconds"]
    res["memories_per_s"] = args.users * args.per_user / made["seconds"]
    res["states_after_create"] = store.tenant_states()
    res["rss_mb_after_create"] = rss_mb(pids)
    res["open_files_after_create"] = open_files(pids)
    # users created early: their tenants were deactivated by a sweep during the ingest
    early = min(args.users // 2, max(args.sweep_every, 1))
    rng = np.random.default_rng(2)
    sample = [user(int(i)) for i in rng.choice(early, size=min(args.sample, early), replace=False)]
    assert not any(store.is_active(u) for u in sample[:5]), "sampled users should be inactive"
    res["recall_inactive_first"] = stats(recall_ms(store, sample))
    res["recall_active_again"] = stats(recall_ms(store, sample))
    t0 = time.perf_counter()
    res["deactivated_by_final_sweep"] = store.deactivate_idle(0)
    res["final_sweep_seconds"] = time.perf_counter() - t0
    time.sleep(args.settle)
    res["rss_mb_all_inactive"] = rss_mb(pids)
    res["open_files_all_inactive"] = open_files(pids)
    res["states_at_end"] = store.tenant_states()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--per-user", type=int, default=10)
    ap.add_argument("--sample", type=int, default=100, help="users recalled hot, and other users recalled cold")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds before each RSS reading")
    ap.add_argument("--memory-limit", default="2GiB", help="GOMEMLIMIT per node")
    ap.add_argument(
        "--sweep-every",
        type=int,
        default=500,
        help="deactivate idle tenants every N users created (default 500; a huge value = never)",
    )
    args = ap.parse_args()
    res: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} CPUs",
        "nodes": args.nodes,
        "users": args.users,
        "per_user": args.per_user,
        "dim": DIM,
        "memory_limit": args.memory_limit,
        "sweep_every": args.sweep_every,
        "open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "load_average_at_start": os.getloadavg(),
    }
    # The data directory holds ~10 files per tenant: removing it can take minutes, so the
    # results are written first (``write``), inside the ``with``.
    with tempfile.TemporaryDirectory(prefix="hm-bench-tenants-") as tmp:
        root = Path(tmp)
        if args.nodes == 1:
            with WeaviateServer(memory_limit=args.memory_limit, data_path=root / "single") as server:
                store = WeaviateStore.connect(
                    server.url, grpc_port=server.grpc_port, collection="Tenants", dead_letter_path=root / "d.sqlite"
                )
                res.update(run(store, [int(server.pid or 0)], args))
                store.close()
            write(res)
        else:
            with WeaviateCluster(3, root=root / "cluster", memory_limit=args.memory_limit) as cluster:
                store = WeaviateStore.connect(
                    cluster.urls,
                    grpc_port=cluster.grpc_ports,
                    replication_factor=3,
                    collection="Tenants",
                    dead_letter_path=root / "d.sqlite",
                )
                res.update(run(store, [int(cluster.node(i).pid or 0) for i in range(1, cluster.size + 1)], args))
                store.close()
            write(res)


def write(res: dict[str, Any]) -> None:
    """Write ``tenants-<N>node.{json,md}`` into ``benchmarks/results``."""
    res["load_average_at_end"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    name = f"tenants-{res['nodes']}node"
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    (RESULTS / f"{name}.md").write_text(render(res), encoding="utf-8")
    print(render(res), flush=True)


def render(res: dict[str, Any]) -> str:
    """The result as a Markdown page."""
    n = res["users"]
    la0 = ", ".join(f"{x:.2f}" for x in res["load_average_at_start"])
    la1 = ", ".join(f"{x:.2f}" for x in res["load_average_at_end"])
    nodes = "one node" if res["nodes"] == 1 else f"{res['nodes']} nodes, replication factor 3"
    peak = max(res["create_series"], key=lambda p: p["open_files"])
    ms = "{p50_ms:.1f} / {p95_ms:.1f} ms"
    lines = [
        f"# {n:,} users on Weaviate, one tenant each ({nodes}; `python -m benchmarks.tenants`)",
        "",
        f"One run: weaviate-server 1.39.0, {res['machine']}, `GOMEMLIMIT={res['memory_limit']}` per node, "
        f"{res['per_user']} memories per user ({res['dim']}-d vectors), open-file limit {res['open_files_limit']:,}. "
        f"Load average (1, 5, 15 min) {la0} at the start, {la1} at the end (other processes share the 2 cores). "
        "RSS and open files are summed over the node processes.",
        "",
        f"Users are created by their first write (auto tenant creation), 50 users per `upsert`; every "
        f"{res['sweep_every']:,} users `deactivate_idle(0)` sets every tenant not used since then INACTIVE, as an "
        "operator's cron job would (`hybrid-memory tenants --deactivate-idle S`).",
        "",
        "| step | value |",
        "|---|---|",
        f"| server, empty | {res['rss_mb_empty']:.0f} MB RSS, {res['open_files_empty']} open files |",
        f"| create {n:,} users | {res['create_seconds']:.0f} s: {res['users_per_s']:.0f} users/s, "
        f"{res['memories_per_s']:.0f} memories/s (sweeps took {res['sweep_seconds_during_create']:.1f} s of it) |",
        f"| peak during the ingest | {max(p['rss_mb'] for p in res['create_series']):.0f} MB RSS, "
        f"{peak['open_files']:,} open files (at {peak['users']:,} users) |",
        f"| after the ingest | {res['rss_mb_after_create']:.0f} MB RSS, {res['open_files_after_create']:,} open "
        f"files; tenants {res['states_after_create']} |",
        "| first recall of an INACTIVE user: activates its tenant (p50 / p95) | "
        + ms.format(**res["recall_inactive_first"])
        + " |",
        "| the same users again, ACTIVE (p50 / p95) | " + ms.format(**res["recall_active_again"]) + " |",
        f"| final sweep: {res['deactivated_by_final_sweep']:,} users set INACTIVE | "
        f"{res['final_sweep_seconds']:.1f} s |",
        f"| every tenant INACTIVE | {res['rss_mb_all_inactive']:.0f} MB RSS, {res['open_files_all_inactive']:,} "
        "open files |",
        "",
        "Just before each sweep (open files and RSS are highest then):",
        "",
        "| users created | seconds | RSS (MB) | open files |",
        "|---|---|---|---|",
        *(
            f"| {p['users']:,} | {p['seconds']:.0f} | {p['rss_mb']:.0f} | {p['open_files']:,} |"
            for p in res["create_series"]
        ),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
