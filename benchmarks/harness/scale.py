"""``hybrid-memory bench scale``: one LocalStore file with many users; RSS, ingest rate and recall against users touched.

Two processes, as in a deployment:

1. **ingest** (this process): ``remember_many`` (the writer policy) or ``store.upsert`` of
   ``--per-user`` memories for each of ``--users`` users, with precomputed vectors (no embedding
   model in the picture); RSS, rate and the cache statistics are sampled as users are written.
2. **recall** (a fresh interpreter on the same file): for every user in turn, the first
   (cold) recall, then ``--queries`` warm recalls; RSS sampled against users touched.

Both run under the process's cache budget (:mod:`hybrid_memory.stores.budget`, ``--budget``
bytes, default the configured 512 MB), so RSS should flatten at the budget plus a fixed
overhead however many users were touched. Results go to ``--out`` (default
``benchmarks/results/``) as ``scale-<U>x<N>.json``, ``.md`` and a ``.png`` plot.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="hybrid-memory bench")
    >>> register_scale(parser.add_subparsers(dest="dataset"))
    >>> args = parser.parse_args(["scale", "--users", "10", "--per-user", "100"])
    >>> args.users, args.per_user, args.ingest
    (10, 100, 'remember')
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.perf import Corpus, PrecomputedEmbedder, _now, _rss_mb, make_corpus

__all__ = ["ScaleOptions", "register_scale", "run_scale"]

_RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass
class ScaleOptions:
    """What to build and measure.

    Attributes:
        users: Users written and then recalled.
        per_user: Memories per user.
        dim: Vector dimension of the precomputed vectors.
        queries: Warm recalls per user after the cold one.
        ingest: ``remember`` (``remember_many``, the writer policy) or ``upsert`` (the store alone).
        budget: Cache budget in bytes for both processes (``None``: the configured default).
        sample_every: Users between two RSS samples.
        pool: Distinct texts the users' memories are drawn from (``None``: ``min(users * per_user, 50_000)``).
        seed: Corpus seed.
        workdir: Folder of the SQLite file (default a temporary folder, removed afterwards).
        progress: Progress on stderr.
    """

    users: int = 1_000
    per_user: int = 1_000
    dim: int = 384
    queries: int = 5
    ingest: str = "remember"
    budget: int | None = None
    sample_every: int = 10
    pool: int | None = None
    seed: int = 7
    workdir: Path | None = None
    progress: bool = True


def _corpus(opts: ScaleOptions) -> Corpus:
    pool = opts.pool or max(opts.per_user, min(opts.users * opts.per_user, 50_000))
    return make_corpus(pool, max(64, opts.queries + 1), dim=opts.dim, seed=opts.seed)


def _slice(n_pool: int, user: int, per_user: int) -> list[int]:
    """The pool rows of one user: a window starting at a user-specific offset (wrapping)."""
    start = (user * 7919 * per_user) % n_pool
    return [(start + i) % n_pool for i in range(per_user)]


def _uid(i: int) -> str:
    return f"user-{i:06d}"


def _log(opts: ScaleOptions, msg: str) -> None:
    if opts.progress:
        print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _cache() -> dict[str, Any]:
    from hybrid_memory.stores.budget import cache_budget

    return asdict(cache_budget().stats())


def _budget(opts: ScaleOptions) -> None:
    if opts.budget is not None:
        from hybrid_memory.stores.budget import set_cache_budget

        set_cache_budget(opts.budget)


def ingest(opts: ScaleOptions, path: Path) -> dict[str, Any]:
    """Write every user's memories into ``path``; rate, RSS and cache statistics as users are written."""
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.records import MemoryRecord
    from hybrid_memory.stores.local import LocalStore

    _budget(opts)
    corpus = _corpus(opts)
    n_pool = len(corpus.texts)
    store = LocalStore(path)
    mem = HybridMemory(store=store, embedder=PrecomputedEmbedder(corpus.vector_of(), opts.dim), clock=_now)
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    samples: list[dict[str, Any]] = []
    actions: dict[str, int] = {}
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    for u in range(opts.users):
        rows = _slice(n_pool, u, opts.per_user)
        if opts.ingest == "remember":
            items = [{"content": corpus.texts[r], "importance": 0.7, "category": "fact"} for r in rows]
            for o in mem.remember_many(_uid(u), items, progress=False):
                actions[o.action] = actions.get(o.action, 0) + 1
        else:
            recs = [
                MemoryRecord.create(
                    user_id=_uid(u), content=corpus.texts[r], importance=0.7, timestamp=base + timedelta(minutes=i)
                )
                for i, r in enumerate(rows)
            ]
            store.upsert(recs, corpus.vectors[rows])
            actions["added"] = actions.get("added", 0) + len(recs)
        done = u + 1
        if done % opts.sample_every == 0 or done == opts.users:
            dt = time.perf_counter() - t0
            samples.append(
                {
                    "users": done,
                    "seconds": dt,
                    "rss_mb": _rss_mb(),
                    "per_s": done * opts.per_user / dt,
                    "cache": _cache(),
                }
            )
            _log(
                opts,
                f"ingest {done}/{opts.users} users, {samples[-1]['per_s']:.0f}/s, RSS {samples[-1]['rss_mb']:.0f} MB",
            )
    seconds = time.perf_counter() - t0
    mem.close()
    store.close()
    return {
        "mode": opts.ingest,
        "memories": opts.users * opts.per_user,
        "seconds": seconds,
        "per_s": opts.users * opts.per_user / seconds,
        "actions": actions,
        "rss_start_mb": rss0,
        "rss_end_mb": samples[-1]["rss_mb"] if samples else _rss_mb(),
        "file_mb": sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6,
        "snapshots": _snapshot_sizes(path),
        "samples": samples,
    }


def _snapshot_sizes(path: Path) -> dict[str, float]:
    """How many users have a saved index snapshot in the file, and the MB they take."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        users, size = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(vectors) + LENGTH(columns) + LENGTH(postings) + LENGTH(CAST(ids AS BLOB)) "
            "+ LENGTH(CAST(terms AS BLOB)) + LENGTH(CAST(sessions AS BLOB)) + LENGTH(CAST(tags AS BLOB))), 0) FROM snapshots"
        ).fetchone()
        # Schema 3 keeps the vectors in parts of their own table (the ``vectors`` column is empty).
        has_parts = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'snapshot_vectors'"
        ).fetchone()
        if has_parts:
            size += conn.execute("SELECT COALESCE(SUM(LENGTH(vectors)), 0) FROM snapshot_vectors").fetchone()[0]
    finally:
        conn.close()
    return {"users": int(users), "mb": int(size) / 1e6}


def recall(opts: ScaleOptions, path: Path) -> dict[str, Any]:
    """In a fresh process: each user's cold then warm recalls, RSS against users touched."""
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.stores.local import LocalStore

    _budget(opts)
    corpus = _corpus(opts)
    rss0 = _rss_mb()
    t_open = time.perf_counter()
    store = LocalStore(path)
    open_s = time.perf_counter() - t_open
    mem = HybridMemory(store=store, embedder=PrecomputedEmbedder(corpus.vector_of(), opts.dim), clock=_now)
    nq = len(corpus.query_texts)
    cold: list[float] = []
    warm: list[float] = []
    samples: list[dict[str, Any]] = []
    for u in range(opts.users):
        uid = _uid(u)
        t = time.perf_counter()
        mem.recall(corpus.query_texts[u % nq], user_id=uid)
        cold.append(1000 * (time.perf_counter() - t))
        mine = []
        for j in range(opts.queries):
            t = time.perf_counter()
            mem.recall(corpus.query_texts[(u + j + 1) % nq], user_id=uid)
            mine.append(1000 * (time.perf_counter() - t))
        warm.extend(mine)
        done = u + 1
        if done % opts.sample_every == 0 or done == opts.users:
            window = cold[-opts.sample_every :]
            samples.append(
                {
                    "users": done,
                    "rss_mb": _rss_mb(),
                    "cold_ms_p50": statistics.median(window),
                    "warm_ms_p50": statistics.median(mine) if mine else None,
                    "cache": _cache(),
                }
            )
            _log(
                opts,
                f"recall {done}/{opts.users} users, cold p50 {samples[-1]['cold_ms_p50']:.1f} ms, RSS {samples[-1]['rss_mb']:.0f} MB",
            )
    mem.close()
    store.close()
    return {
        "open_s": open_s,
        "rss_start_mb": rss0,
        "rss_end_mb": samples[-1]["rss_mb"] if samples else _rss_mb(),
        "cold_ms": _dist(cold),
        "warm_ms": _dist(warm),
        "samples": samples,
    }


def _dist(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    a = np.asarray(xs)
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)), "mean": float(a.mean())}


def run_scale(opts: ScaleOptions, out: Path | None = None) -> dict[str, Any]:
    """Ingest in this process, recall in a fresh one; write ``scale-<U>x<N>.{json,md,png}`` into ``out``."""
    with tempfile.TemporaryDirectory(dir=opts.workdir) as tmp:
        path = Path(tmp) / "scale.sqlite"
        _log(opts, f"ingest {opts.users} users x {opts.per_user} ({opts.ingest}) into {path}")
        ing = ingest(opts, path)
        _log(opts, "recall in a fresh process")
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.harness.scale",
                "--recall-phase",
                str(path),
                json.dumps(_opts_json(opts)),
            ],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
                ),
            },
        )
        rec = json.loads(child.stdout)
    from hybrid_memory.stores.budget import cache_budget

    report = {
        "options": _opts_json(opts),
        "budget_bytes": opts.budget if opts.budget is not None else cache_budget().max_bytes,
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "ingest": ing,
        "recall": rec,
    }
    report["projection_10k_users"] = _project(report, 10_000)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = out / f"scale-{opts.users}x{opts.per_user}"
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
        stem.with_suffix(".md").write_text(render_markdown(report))
        _plot(report, stem.with_suffix(".png"))
    return report


def _opts_json(opts: ScaleOptions) -> dict[str, Any]:
    d = asdict(opts)
    d["workdir"] = None if opts.workdir is None else str(opts.workdir)
    return d


def _project(report: dict[str, Any], users: int) -> dict[str, Any]:
    """Linear in users for time and file size; RSS = the last plateau (bounded by the budget)."""
    ing, rec, o = report["ingest"], report["recall"], report["options"]
    k = users / o["users"]
    return {
        "users": users,
        "ingest_hours": ing["seconds"] * k / 3600,
        "file_gb": ing["file_mb"] * k / 1000,
        "rss_reader_mb": rec["rss_end_mb"],
        "rss_writer_mb": ing["rss_end_mb"],
        "note": "RSS stays at the budget plus a fixed overhead once the budget is full; time and file grow linearly",
    }


def render_markdown(report: dict[str, Any]) -> str:
    """A short human-readable summary of a scale report."""
    o, ing, rec, pr = report["options"], report["ingest"], report["recall"], report["projection_10k_users"]
    lines = [
        f"# Scale: {o['users']} users x {o['per_user']} memories ({o['dim']}-d precomputed vectors)",
        "",
        f"Machine: {report['machine']['cpus']} CPUs, load {report['machine']['load_avg'][0]:.2f}; "
        f"cache budget {report['budget_bytes'] / 2**20:.0f} MB.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| ingest ({ing['mode']}) | {ing['per_s']:,.0f} memories/s ({ing['seconds']:.0f} s) |",
        f"| outcomes | {ing['actions']} |",
        f"| file size | {ing['file_mb']:,.0f} MB |",
        f"| index snapshots saved by the writer | {ing['snapshots']['users']} users, {ing['snapshots']['mb']:,.0f} MB |"
        if "snapshots" in ing
        else "| index snapshots | - |",
        f"| writer RSS start -> end | {ing['rss_start_mb']:.0f} -> {ing['rss_end_mb']:.0f} MB |",
        f"| reader open | {1000 * rec['open_s']:.0f} ms |",
        f"| reader RSS start -> end | {rec['rss_start_mb']:.0f} -> {rec['rss_end_mb']:.0f} MB |",
        f"| cold recall p50 / p95 | {rec['cold_ms']['p50']:.2f} / {rec['cold_ms']['p95']:.2f} ms |",
        f"| warm recall p50 / p95 | {rec['warm_ms']['p50']:.2f} / {rec['warm_ms']['p95']:.2f} ms |"
        if rec["warm_ms"]
        else "| warm recall | - |",
        f"| reader cache at the end | {rec['samples'][-1]['cache'] if rec['samples'] else '-'} |",
        "",
        f"Projection to {pr['users']:,} users: ingest {pr['ingest_hours']:.1f} h, file {pr['file_gb']:.1f} GB, "
        f"reader RSS ~{pr['rss_reader_mb']:.0f} MB, writer RSS ~{pr['rss_writer_mb']:.0f} MB ({pr['note']}).",
        "",
        f"![RSS and recall latency against users touched]({Path('scale-' + str(o['users']) + 'x' + str(o['per_user'])).with_suffix('.png')})",
        "",
    ]
    return "\n".join(lines)


def _plot(report: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ing, rec = report["ingest"]["samples"], report["recall"]["samples"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([s["users"] for s in ing], [s["rss_mb"] for s in ing], label="writer (ingest)", marker="o")
    ax1.plot([s["users"] for s in rec], [s["rss_mb"] for s in rec], label="reader (recall)", marker="o")
    ax1.axhline(report["budget_bytes"] / 2**20, color="grey", linestyle=":", label="cache budget")
    ax1.set_xlabel("users touched")
    ax1.set_ylabel("RSS (MB)")
    ax1.legend()
    ax2.plot([s["users"] for s in rec], [s["cold_ms_p50"] for s in rec], label="cold (first) recall p50", marker="o")
    ax2.plot([s["users"] for s in rec], [s["warm_ms_p50"] for s in rec], label="warm recall p50", marker="o")
    ax2.set_xlabel("users touched")
    ax2.set_ylabel("recall latency (ms)")
    ax2.set_yscale("log")
    ax2.legend()
    o = report["options"]
    fig.suptitle(f"LocalStore, {o['users']} users x {o['per_user']} memories")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def register_scale(subparsers: Any) -> None:
    """Add ``scale`` to the ``bench`` sub-commands."""
    help_text = "one LocalStore file with many users: ingest rate, file size, RSS and cold/warm recall vs users"
    p = subparsers.add_parser("scale", help=help_text, description=help_text)
    p.add_argument("--users", type=_positive, default=ScaleOptions.users)
    p.add_argument("--per-user", type=_positive, default=ScaleOptions.per_user)
    p.add_argument("--dim", type=_positive, default=ScaleOptions.dim)
    p.add_argument("--queries", type=int, default=ScaleOptions.queries, help="warm recalls per user")
    p.add_argument("--ingest", choices=("remember", "upsert"), default="remember")
    p.add_argument("--budget", type=int, default=None, help="cache budget in bytes (default: the configured one)")
    p.add_argument("--sample-every", type=_positive, default=ScaleOptions.sample_every)
    p.add_argument("--workdir", default=None, help="folder of the temporary SQLite file")
    p.add_argument("--out", default=str(_RESULTS), help="folder for scale-<U>x<N>.{json,md,png}")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_scale_cli)


def _options(args: argparse.Namespace) -> ScaleOptions:
    return ScaleOptions(
        users=args.users,
        per_user=args.per_user,
        dim=args.dim,
        queries=args.queries,
        ingest=args.ingest,
        budget=args.budget,
        sample_every=args.sample_every,
        workdir=Path(args.workdir) if args.workdir else None,
        progress=not args.quiet,
    )


def run_scale_cli(args: argparse.Namespace) -> int:
    """Entry point of ``hybrid-memory bench scale``."""
    report = run_scale(_options(args), Path(args.out))
    print(render_markdown(report))
    return 0


if __name__ == "__main__":  # the recall phase runs in a fresh interpreter
    if len(sys.argv) == 4 and sys.argv[1] == "--recall-phase":
        raw = json.loads(sys.argv[3])
        raw["workdir"] = Path(raw["workdir"]) if raw["workdir"] else None
        print(json.dumps(recall(ScaleOptions(**raw), Path(sys.argv[2]))))
    else:
        raise SystemExit("usage: python -m benchmarks.harness.scale --recall-phase FILE OPTIONS_JSON")
