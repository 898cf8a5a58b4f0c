"""A new worker's first recall of a large user on Weaviate: the user's mean read by the recall, or in the background.

Query centring (``retrieval.centre_weight``) searches with the query vector minus a share of the mean
of the user's active memory vectors. ``WeaviateStore`` reads every active vector of the user to
compute that mean and keeps it per process (:mod:`hybrid_memory.stores.means`), so each process
that starts (a worker restarted, scaled out) reads it again for each user. Until 2026-12-06 that
first read was made by the first recall, whatever the user's size; now it asks for at most 1,001
vectors and reads a larger user's mean in the background, the recalls meanwhile running uncentred.

Per size, one user's memories (random sentences, ``HashingEmbedder`` 512-d vectors) are written to
a ``weaviate-server`` started here; then for each mode, fresh Python processes (a worker starting)
each connect, time their first recall, wait until the user's mean is in (the time from the first
recall until the recalls are centred), and time 20 more recalls. ``before``:
``MeanCache(background_above=None)``, every read on the recall's thread; ``now``: the default.
Needs ``weaviate-server`` (``.ci/run`` installs it). About 3 minutes. Reproduce::

    python -m benchmarks.first_recall --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybrid_memory.records import MemoryRecord  # noqa: E402
from hybrid_memory.stores.weaviate import WeaviateServer, WeaviateStore  # noqa: E402
from hybrid_memory.testing import HashingEmbedder  # noqa: E402

SIZES = (1_000, 10_000, 30_000)
MODES = ("before", "now")
DIM = 512
QUERIES = ("what did I say about the garden", "my sister's trip to the mountains", "the book about the sea")
WORDS = [
    "garden",
    "sister",
    "trip",
    "mountains",
    "book",
    "sea",
    "coffee",
    "morning",
    "train",
    "city",
    "river",
    "music",
    "friend",
    "dinner",
    "weekend",
    "school",
    "painting",
    "rain",
    "summer",
    "winter",
    "market",
    "bread",
    "letter",
    "phone",
    "movie",
    "park",
    "dog",
    "cat",
]


def _texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=8)) + f" note {i}" for i in range(n)]


def seed_users(store: WeaviateStore, sizes: tuple[int, ...]) -> None:
    """Write each size's user once (``user-<size>``)."""
    emb = HashingEmbedder(DIM)
    store.bind_embedder(emb.name, DIM)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    for size in sizes:
        texts = _texts(size, size)
        for start in range(0, size, 2_000):
            chunk = texts[start : start + 2_000]
            recs = [
                MemoryRecord.create(user_id=f"user-{size}", content=t, timestamp=t0 + timedelta(seconds=start + i))
                for i, t in enumerate(chunk)
            ]
            store.upsert(recs, np.asarray(emb.embed_documents(chunk), dtype=np.float32))


def child(url: str, grpc_port: int, user: str, mode: str) -> dict[str, float]:
    """One worker: its first recall, the time until its recalls are centred, then 20 more recalls."""
    from hybrid_memory import HybridMemory

    store = WeaviateStore.connect(url, grpc_port=grpc_port, create_schema=False)
    if mode == "before":
        store._means.background_above = None
    mem = HybridMemory(store=store, embedder=HashingEmbedder(DIM), trace=False)
    try:
        t = time.perf_counter()
        mem.recall(QUERIES[0], user_id=user, k=5, touch=False)
        first = time.perf_counter() - t
        store._means.wait(300.0)
        centred = time.perf_counter() - t
        lat = []
        for i in range(20):
            t1 = time.perf_counter()
            mem.recall(QUERIES[i % len(QUERIES)], user_id=user, k=5, touch=False)
            lat.append(time.perf_counter() - t1)
        return {"first_ms": 1e3 * first, "centred_after_ms": 1e3 * centred, "then_p50_ms": 1e3 * statistics.median(lat)}
    finally:
        mem.close()
        store.close()


def measure(runs: int, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """Per size and mode, ``runs`` fresh worker processes against one server."""
    out: dict[str, Any] = {}
    with WeaviateServer().start() as server:
        store = WeaviateStore.connect(server.url, grpc_port=server.grpc_port)
        try:
            seed_users(store, sizes)
        finally:
            store.close()
        for size in sizes:
            for mode in MODES:
                rows = []
                for _ in range(runs):
                    code = (
                        "import json, sys; from benchmarks.first_recall import child; "
                        f"print(json.dumps(child({server.url!r}, {server.grpc_port}, 'user-{size}', {mode!r})))"
                    )
                    done = subprocess.run(
                        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=600
                    )
                    rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                out[f"{size} {mode}"] = {
                    "size": size,
                    "mode": mode,
                    "runs": rows,
                    **{k: statistics.median(r[k] for r in rows) for k in rows[0]},
                }
                print(f"{size} {mode}: " + ", ".join(f"{k} {v:.0f}" for k, v in rows[-1].items()), flush=True)
    return out


def render(report: dict[str, Any]) -> str:
    """``first_recall.md``."""
    lines = [
        "# A new worker's first recall of a large user on Weaviate (`python -m benchmarks.first_recall`)",
        "",
        f"Measured {report['when']} on {os.cpu_count()} cores (load average {report['load']:.2f} before), "
        f"weaviate-server on loopback; medians of {report['runs']} fresh worker processes per row. "
        "`before`: the user's mean vector (query centring) read by the first recall, whatever its size "
        "(`MeanCache(background_above=None)`); `now`: at most 1,001 vectors read by the recall, a larger user's "
        "mean in the background, its recalls uncentred until it is in.",
        "",
        "| memories of the user | mode | first recall ms | recalls centred after ms | next 20 recalls p50 ms |",
        "|---:|---|---:|---:|---:|",
    ]
    for row in report["rows"].values():
        lines.append(
            f"| {row['size']:,} | {row['mode']} | {row['first_ms']:.0f} | {row['centred_after_ms']:.0f} | "
            f"{row['then_p50_ms']:.1f} |"
        )
    rows = report["rows"]
    largest = max(r["size"] for r in rows.values())
    before, now = rows[f"{largest} before"], rows[f"{largest} now"]
    lines += [
        "",
        f"At {largest:,} memories the first recall of a new worker takes {now['first_ms']:.0f} ms instead of "
        f"{before['first_ms']:.0f} ms; its recalls are centred {now['centred_after_ms']:.0f} ms after it started "
        f"(before: {before['centred_after_ms']:.0f} ms, when that first recall returned), and the recalls after "
        f"that take {now['then_p50_ms']:.1f} ms at the median ({before['then_p50_ms']:.1f} ms before).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", type=lambda v: tuple(int(x) for x in v.split(",")), default=SIZES)
    args = p.parse_args(argv)
    report = {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": os.getloadavg()[0],
        "runs": args.runs,
        "rows": measure(args.runs, args.sizes),
    }
    text = render(report)
    print(text)
    if args.out is not None:
        (args.out / "first_recall.md").write_text(text, encoding="utf-8")
        (args.out / "first_recall.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
