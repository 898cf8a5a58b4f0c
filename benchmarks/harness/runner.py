"""Score the default memory pipeline and the comparison methods on a loaded dataset.

For every group (a LoCoMo conversation, a LongMemEval haystack, a MemoryBank user) the runner

1. stores the documents through the public API, ``HybridMemory.remember_many``, each with its
   timestamp, ``metadata={"bench_id": <dataset id>, "bench_session": <session>}`` and
   ``provenance=(<dataset id>,)`` and ``context=<the previous document of the session>`` as
   ``add_turn`` would record it (the embedding of each text is computed once and cached on
   disk, see :mod:`benchmarks.harness.cache`);
2. runs the comparison methods: store-level hybrid search (``alpha`` 1.0 = pure vector, 0.0 =
   pure keyword/BM25) over every stored turn, superseded ones included, in a copy of the store
   without the search context (one plain document per turn): BM25 only, vector only and hybrid
   at the other alphas; plus, on the same store, the API with a relevance-only profile and the
   default profile without access bumps;
3. runs the **default configuration** last: ``HybridMemory.recall(question, user_id=..., k=K,
   now=<time of the question>)`` with default settings, question after question, so access
   bumps of earlier recalls count as they would for a real user;
4. measures tokens: the whole group as one prompt (full context), and what
   ``HybridMemory.build_context`` injects per question (on its own facade over the same store,
   after step 3, so its access bumps cannot change the headline numbers);
5. runs the peer baselines of :mod:`benchmarks.harness.peers` (LangChain's
   ``VectorStoreRetrieverMemory``, LlamaIndex's ``VectorMemoryBlock``) on the same documents with
   the same embedder, and counts the tokens of their top-k text.

A hit stands for the dataset ids in its metadata and provenance, and for every document the
writer folded into it (an exact duplicate of an earlier turn is stored once). The headline
numbers are those of step 3.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np
from hybrid_memory.embeddings import Embedder
from hybrid_memory.records import FusedContext, MemoryRecord
from hybrid_memory.text.analyzer import last_words
from hybrid_memory.text.tokens import TokenCounter

from benchmarks.harness.datasets import LOCOMO_CATEGORIES, Dataset, Group, Question
from benchmarks.harness.metrics import (
    LME_KS,
    PRIMARY,
    Ranking,
    all_at_k,
    bootstrap_ci,
    flatten,
    lme_evaluate,
    lme_session,
    lme_turn2session,
    mean,
    ndcg_at_k,
    recall_at_k,
    session_recall_at_k,
)
from benchmarks.harness.peers import (
    LANGCHAIN,
    LLAMAINDEX,
    LLAMAINDEX_FLUSH_TOKENS,
    PeerRun,
    missing_requirement,
    run_langchain,
    run_llamaindex,
)

__all__ = [
    "DEFAULT_ALPHAS",
    "GENERIC_KS",
    "BenchOptions",
    "aggregate",
    "previous_turns",
    "question_metrics",
    "run_benchmark",
]

#: Cut-offs of Recall@k / all@k / nDCG@k for LoCoMo and MemoryBank.
GENERIC_KS = (1, 3, 5, 10, 20, 50)
#: Store-level alphas compared in one run (1.0 = pure vector, 0.0 = pure keyword/BM25).
DEFAULT_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: ``token_flush_size`` values of the LlamaIndex ``VectorMemoryBlock`` baseline: the library
#: default (3,000 tokens per node) and a small batch closer to a turn-level index.
DEFAULT_FLUSH_TOKENS = (LLAMAINDEX_FLUSH_TOKENS, 300)
#: Cut-offs at which the tokens of a peer's top-k text are counted.
TOKEN_KS = (5, 10)


@dataclass(frozen=True)
class BenchOptions:
    """What to run.

    Attributes:
        alpha: Alpha for the default pipeline (``None`` = the library default; 1.0 = pure
            vector, 0.0 = pure keyword/BM25).
        alphas: Store-level alphas to compare (0 is reported as ``bm25``, 1 as ``vector``).
        baselines: Run the comparison methods.
        api_alphas: Also run the default profile without access bumps at these alphas.
        k: Hits requested from ``recall`` (default: 50 for LongMemEval, 10 otherwise).
        depth: Hits requested from store-level searches (default: the whole corpus for
            LongMemEval, 50 otherwise).
        peers: Also run the LangChain / LlamaIndex peer baselines (needs ``baselines``).
        peer_flush_tokens: ``token_flush_size`` values of the LlamaIndex baseline (one method each).
        tokens: Count full-context and injected tokens (runs ``build_context`` per question).
        progress: Print progress to stderr.
        on_question: Called with the group, the question, the default pipeline's ranking and
            its metrics for every scored question (e.g. to list the misses:
            ``python -m benchmarks.misses``).
    """

    alpha: float | None = None
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    baselines: bool = True
    api_alphas: tuple[float, ...] = ()
    k: int | None = None
    depth: int | None = None
    peers: bool = True
    peer_flush_tokens: tuple[int, ...] = DEFAULT_FLUSH_TOKENS
    tokens: bool = True
    progress: bool = False
    on_question: Callable[[Group, Question, Ranking, Mapping[str, float]], None] | None = None


@dataclass
class _Method:
    name: str
    depth: int
    rankings: dict[str, Ranking] = field(default_factory=dict)
    alpha: float | None = None
    latencies: list[float] = field(default_factory=list)
    profile: str | None = None  # None = store-level search; else "relevance_only" / "no_touch"


def _method_key(alpha: float) -> str:
    if alpha == 0.0:
        return "bm25"
    if alpha == 1.0:
        return "vector"
    return f"hybrid_alpha_{alpha:g}"


def _ids_of(record: MemoryRecord, alias: Mapping[str, set[str]]) -> frozenset[str]:
    ids: set[str] = set(record.provenance)
    bid = record.metadata.get("bench_id")
    if isinstance(bid, str):
        ids.add(bid)
    ids |= alias.get(record.id, set())
    return frozenset(ids)


def previous_turns(group: Group, words: int | None = None) -> list[str]:
    """The search context of each document: the previous document of its session ("" for the first).

    This is what :meth:`HybridMemory.add_turn` records for a conversation turn (with ``words``,
    ``writer.context_words``: the previous document's last ``words`` words), so turns stored with
    ``remember_many`` are indexed as a live conversation would index them.
    """
    out: list[str] = []
    last: dict[str | None, str] = {}
    for d in group.docs:
        out.append(last_words(last.get(d.session_id, ""), words) if d.session_id is not None else "")
        last[d.session_id] = d.text
    return out


def plain_copy(store: Any, user_id: str, which: Any, factory: Callable[[], Any]) -> Any:
    """A new store holding ``user_id``'s memories of ``store`` (with their vectors) without search context."""
    records = store.list(user_id, filter=which)
    vectors = store.get_vectors(user_id, [r.id for r in records])
    out = factory()
    if records:
        out.upsert([r.evolve(context="") for r in records], np.stack([vectors[r.id] for r in records]))
    return out


def _log(opts: BenchOptions, msg: str) -> None:
    if opts.progress:
        print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# metrics per question and aggregation
# ------------------------------------------------------------------------------------------


def question_metrics(dataset: str, group: Group, q: Question, ranking: Ranking, depth: int) -> dict[str, float]:
    """Every metric of one question for one method (cut-offs above ``depth`` are left out).

    All datasets get ``recall@k``, ``all@k``, ``ndcg@k`` and ``session_recall@k``; LongMemEval
    also gets the official ``turn_*``, ``session_*`` (gold = ``answer_session_ids``) and
    ``session_official_*`` (the official script's turn-to-session mapping) metrics.
    """
    out: dict[str, float] = {}
    session_of = group.session_of()
    ks = [k for k in GENERIC_KS if k <= depth]
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(ranking, q.gold, k)
        out[f"all@{k}"] = all_at_k(ranking, q.gold, k)
        out[f"ndcg@{k}"] = ndcg_at_k(ranking, q.gold, k)
        if q.gold_sessions:
            out[f"session_recall@{k}"] = session_recall_at_k(ranking, q.gold_sessions, session_of, k)
    if dataset == "longmemeval":
        corpus = [d.id for d in group.docs]
        ranked = flatten(ranking)

        def official(doc_id: str) -> str:
            s = session_of.get(doc_id, doc_id)
            return s if doc_id in q.gold or s not in q.gold_sessions else f"noans:{s}"

        for k in (k for k in LME_KS if k <= depth):
            for prefix, vals in (
                ("turn", lme_evaluate(ranked, q.gold, corpus, k)),
                ("session", lme_session(ranked, q.gold_sessions, corpus, k, session_of)),
                ("session_official", lme_turn2session(ranked, q.gold, corpus, k, official)),
            ):
                out[f"{prefix}_recall_any@{k}"] = vals[0]
                out[f"{prefix}_recall_all@{k}"] = vals[1]
                out[f"{prefix}_ndcg_any@{k}"] = vals[2]
    return out


def _sort_key(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (10_000, name)


def aggregate(rows: Sequence[tuple[Question, Mapping[str, float]]], *, dataset: str = "") -> dict[str, Any]:
    """Macro-average per-question metrics: overall and per category.

    Returns:
        ``{"questions": n, <metric>: mean, ..., "per_category": {cat: {"questions": n, ...}}}``.
    """

    def avg(sub: Sequence[tuple[Question, Mapping[str, float]]]) -> dict[str, Any]:
        keys: list[str] = []
        for _, m in sub:
            keys.extend(k for k in m if k not in keys)
        res: dict[str, Any] = {"questions": len(sub)}
        for key in keys:
            res[key] = round(mean(m[key] for _, m in sub if key in m), 6)
        return res

    out = avg(rows)
    cats: dict[str, list[tuple[Question, Mapping[str, float]]]] = {}
    for q, m in rows:
        cats.setdefault(q.category, []).append((q, m))
    per: dict[str, Any] = {}
    for cat in sorted(cats, key=_sort_key):
        entry = avg(cats[cat])
        if dataset == "locomo" and cat in LOCOMO_CATEGORIES:
            entry = {"name": LOCOMO_CATEGORIES[cat], **entry}
        per[cat] = entry
    out["per_category"] = per
    return out


# ------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------


def _percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values), p)) * 1000.0, 3)


def _stats(values: Sequence[float]) -> dict[str, Any]:
    """Count, median, mean, p95 and max of token counts (``None`` without values)."""
    if not values:
        return {"n": 0, "median": None, "mean": None, "p95": None, "max": None}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "n": len(values),
        "median": round(float(np.median(arr)), 1),
        "mean": round(float(arr.mean()), 1),
        "p95": round(float(np.percentile(arr, 95)), 1),
        "max": round(float(np.max(arr)), 1),
    }


@dataclass
class _TokenLog:
    """Per-question token counts and what ``build_context`` injected."""

    full: list[int] = field(default_factory=list)
    injected: list[int] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    any_gold: list[float] = field(default_factory=list)
    memories: list[int] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    def add_context(self, q: Question, ctx: FusedContext, alias: Mapping[str, set[str]]) -> None:
        ids: set[str] = set()
        for h in ctx.hits:
            ids |= _ids_of(h.record, alias)
        found = len(ids & q.gold)
        self.injected.append(ctx.token_count)
        self.skipped.append(ctx.skipped)
        self.recall.append(found / len(q.gold))
        self.any_gold.append(1.0 if found else 0.0)
        self.memories.append(len(ctx.hits))
        if ctx.skipped:
            self.reasons[ctx.skipped_reason or "?"] += 1

    def summary(self, counter: TokenCounter) -> dict[str, Any]:
        injected = _stats(self.injected)
        injected["injected_only"] = _stats([t for t, s in zip(self.injected, self.skipped, strict=True) if not s])
        injected["skipped_fraction"] = round(mean(float(s) for s in self.skipped), 6)
        injected["skipped_reasons"] = dict(self.reasons)
        injected["recall"] = round(mean(self.recall), 6)
        injected["any_gold"] = round(mean(self.any_gold), 6)
        injected["memories_mean"] = round(mean(float(m) for m in self.memories), 3)
        return {
            "encoding": counter.encoding_name,
            "exact": counter.exact,
            "full_context": _stats(self.full),
            "injected": injected,
        }


_PeerFn = Callable[[Group, Sequence[Question], Embedder, int], PeerRun]


def _peer_plan(opts: BenchOptions) -> tuple[dict[str, _PeerFn], dict[str, str]]:
    """The peer baselines to run, and those skipped with the reason."""
    plan: dict[str, _PeerFn] = {}
    skipped: dict[str, str] = {}
    if not (opts.baselines and opts.peers):
        return plan, skipped
    reason = missing_requirement(LANGCHAIN)
    if reason is not None:
        skipped[LANGCHAIN] = reason
    else:
        plan[LANGCHAIN] = lambda g, qs, e, d: run_langchain(g.docs, qs, e, d)
    reason = missing_requirement(LLAMAINDEX)
    for flush in opts.peer_flush_tokens:
        name = LLAMAINDEX if flush == LLAMAINDEX_FLUSH_TOKENS else f"{LLAMAINDEX}_flush{flush}"
        if reason is not None:
            skipped[name] = reason
        else:
            plan[name] = partial(_llama_peer, flush_tokens=flush)
    return plan, skipped


def _llama_peer(g: Group, qs: Sequence[Question], e: Embedder, d: int, *, flush_tokens: int) -> PeerRun:
    return run_llamaindex(g.docs, qs, e, d, flush_tokens=flush_tokens)


def _peer_tokens(run: PeerRun, questions: Sequence[Question], counter: TokenCounter) -> dict[str, Any]:
    return {f"top{k}": _stats([counter.count(run.injected(q.id, k)) for q in questions]) for k in TOKEN_KS}


def run_benchmark(
    dataset: Dataset,
    *,
    embedder: Embedder | None = None,
    options: BenchOptions | None = None,
    store_factory: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Run the default pipeline and (optionally) the comparison methods; return the report dict.

    Args:
        dataset: A loaded dataset.
        embedder: The embedder (default: the library's default model behind the disk cache).
        options: What to run.
        store_factory: Builds an empty store per group (default ``LocalStore(":memory:")``).

    Returns:
        A JSON-ready dict: ``questions``, the default pipeline's metrics (``recall@1`` ...),
        ``per_category``, ``baselines`` (store-level, API profiles and ``level="peer"`` entries),
        ``peers_skipped`` (peer name -> why it could not run), ``tokens`` (``full_context``,
        ``injected`` by ``build_context`` and the peers' top-k text) and run information.
    """
    from hybrid_memory.config import HybridMemoryConfig, WriterConfig
    from hybrid_memory.embeddings import default_embedder
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.stores.base import MemoryFilter, SearchRequest

    from benchmarks.harness.cache import CachedConcat, CachedEmbedder, cached

    opts = options if options is not None else BenchOptions()
    emb: Embedder = embedder if embedder is not None else cached(default_embedder())
    if store_factory is None:
        from hybrid_memory.stores.local import LocalStore

        def store_factory() -> Any:
            return LocalStore(":memory:")

    # Store-level baselines search every stored turn, whatever the write path decided about it
    # (superseded or archived memories included), like a plain one-document-per-turn index.
    every_turn = MemoryFilter(statuses=("active", "superseded", "archived"))
    lme = dataset.name == "longmemeval"
    k = opts.k if opts.k is not None else (50 if lme else 10)
    # The runner replays each dataset under a simulated clock at question time, and LongMemEval dates
    # some haystack sessions after its question (516 of the dev60 documents): allow them, as before
    # the future-timestamp check existed, so the published numbers stay reproducible.
    base_cfg = HybridMemoryConfig(writer=WriterConfig(max_future_skew_seconds=100 * 366 * 86400.0))
    default_alpha = base_cfg.retrieval.alpha if opts.alpha is None else opts.alpha
    relevance_cfg = base_cfg.model_copy(
        update={
            "rerank": base_cfg.rerank.model_copy(
                update={
                    "w_relevance": 1.0,
                    "w_importance": 0.0,
                    "w_recency": 0.0,
                    "w_heat": 0.0,
                    "touch_on_recall": False,
                }
            )
        }
    )
    no_touch_cfg = base_cfg.model_copy(update={"rerank": base_cfg.rerank.model_copy(update={"touch_on_recall": False})})

    default = _Method("default", depth=k, alpha=opts.alpha)
    methods: list[_Method] = []
    if opts.baselines:
        for a in opts.alphas:
            methods.append(_Method(_method_key(a), depth=0, alpha=a))
        methods.append(_Method("relevance_only", depth=k, alpha=opts.alpha, profile="relevance_only"))
        methods.append(_Method("default_no_touch", depth=k, alpha=opts.alpha, profile="no_touch"))
        for a in opts.api_alphas:
            methods.append(_Method(f"default_no_touch_alpha_{a:g}", depth=k, alpha=a, profile="no_touch"))

    peer_plan, peers_skipped = _peer_plan(opts)
    peer_runs: dict[str, PeerRun] = {name: PeerRun() for name in peer_plan}
    counter = TokenCounter(base_cfg.tokenizer_model)  # the fuser's counter (tiktoken, offline)
    tokens = _TokenLog()

    # Warm the embedding cache in a few big batches (one pass over the corpus).
    t0 = time.perf_counter()
    disk = emb if isinstance(emb, (CachedEmbedder, CachedConcat)) else None  # the benchmark's disk cache
    if disk is not None:
        disk.embed_documents([d.text for g in dataset.groups for d in g.docs])
        disk.embed_queries([q.text for g in dataset.groups for q in (*g.questions, *g.apart)])
    embed_s = time.perf_counter() - t0

    outcomes: Counter[str] = Counter()
    ingest_s = 0.0
    rows: dict[str, list[tuple[Question, dict[str, float]]]] = {m.name: [] for m in [default, *methods]}
    rows.update({name: [] for name in peer_plan})
    peer_depth: dict[str, int] = {}
    apart_rows: list[tuple[Question, dict[str, float]]] = []
    for gi, group in enumerate(dataset.groups):
        _log(opts, f"[{dataset.name}] group {gi + 1}/{len(dataset.groups)} {group.id}: {len(group.docs)} docs")
        now = group.now

        def clock(now: datetime | None = now) -> datetime:
            from hybrid_memory.records import utcnow

            return now if now is not None else utcnow()

        store = store_factory()
        plain: Any = None
        mem = HybridMemory(store=store, embedder=emb, config=base_cfg, clock=clock)
        facades: list[HybridMemory] = []  # more facades over the same store, closed with it
        try:
            t1 = time.perf_counter()
            items = [
                {
                    "content": d.text,
                    "timestamp": d.timestamp,
                    "metadata": {"bench_id": d.id, "bench_session": d.session_id},
                    "provenance": (d.id,),
                    "context": context,
                }
                for d, context in zip(group.docs, previous_turns(group, base_cfg.writer.context_words), strict=True)
            ]
            res = mem.remember_many(group.id, items, progress=False)
            ingest_s += time.perf_counter() - t1
            alias: dict[str, set[str]] = {}
            for d, o in zip(group.docs, res, strict=True):
                outcomes[o.action] += 1
                if o.record is not None and o.action != "rejected":
                    alias.setdefault(o.record.id, set()).add(d.id)
            questions = list(group.questions)
            asked = questions + list(group.apart)
            qvecs = disk.embed_queries([q.text for q in asked]) if disk is not None else None
            depth = opts.depth if opts.depth is not None else (max(len(group.docs), 1) if lme else 50)
            depth = min(depth, 10_000)
            if any(m.profile is None for m in methods):
                # Store-level baselines index each turn alone, like a plain one-document-per-turn
                # index: the same records and vectors, without the search context.
                plain = plain_copy(store, group.id, every_turn, store_factory)
            for m in methods:
                if m.profile is not None:
                    cfg = relevance_cfg if m.profile == "relevance_only" else no_touch_cfg
                    side = HybridMemory(store=store, embedder=emb, config=cfg, clock=clock)
                    facades.append(side)
                    for q in questions:
                        t2 = time.perf_counter()
                        hits = side.recall(q.text, user_id=group.id, k=k, alpha=m.alpha, now=q.date or now)
                        m.latencies.append(time.perf_counter() - t2)
                        m.rankings[q.id] = [_ids_of(h.record, alias) for h in hits]
                    continue
                assert m.alpha is not None
                m.depth = max(m.depth, depth)
                for qi, q in enumerate(questions):
                    vec = qvecs[qi] if qvecs is not None else emb.embed_query(q.text)
                    t2 = time.perf_counter()
                    shits = plain.search(
                        SearchRequest(
                            user_id=group.id,
                            query=q.text,
                            vector=vec,
                            alpha=m.alpha,
                            limit=depth,
                            filter=every_turn,
                        )
                    )
                    m.latencies.append(time.perf_counter() - t2)
                    m.rankings[q.id] = [_ids_of(h.record, alias) for h in shits]
            # The default configuration, last: its access bumps must not leak into the baselines.
            for q in asked:
                t2 = time.perf_counter()
                hits = mem.recall(q.text, user_id=group.id, k=k, alpha=opts.alpha, now=q.date or now)
                if q in group.questions:
                    default.latencies.append(time.perf_counter() - t2)
                default.rankings[q.id] = [_ids_of(h.record, alias) for h in hits]
            if opts.tokens:
                # build_context counts what it injects as used (config.rerank.touch_on_inject), so it
                # would change later recalls. It runs on its own facade over the same store AFTER the
                # default pass, when nothing else reads this store: the headline numbers cannot move.
                # recall() does not touch by default (touch_on_recall=False), so build_context sees
                # the store the default pass saw, and its own bumps accumulate question after
                # question as they would for a real user.
                ctx_mem = HybridMemory(store=store, embedder=emb, config=base_cfg, clock=clock)
                facades.append(ctx_mem)
                full = counter.count("\n".join(d.text for d in group.docs))
                for q in questions:
                    tokens.full.append(full)
                    tokens.add_context(q, ctx_mem.build_context(q.text, user_id=group.id, now=q.date or now), alias)
                    ctx_mem.flush()  # its touch is written in the background: the next question sees it
        finally:
            for facade in facades:  # their background threads end; nothing of theirs is pending
                facade.flush()
            mem.close()
            for facade in facades:
                facade.close()  # the store is closed already (closing it again is a no-op)
            for st in (store, plain):
                close = getattr(st, "close", None)
                if callable(close):
                    close()
        for m in [default, *methods]:
            for q in group.questions:
                metrics = question_metrics(dataset.name, group, q, m.rankings[q.id], m.depth)
                rows[m.name].append((q, metrics))
                if m is default and opts.on_question is not None:
                    opts.on_question(group, q, m.rankings[q.id], metrics)
        for name, fn in peer_plan.items():
            _log(opts, f"[{dataset.name}]   peer {name}")
            got = fn(group, questions, emb, depth)
            peer_runs[name].extend(got)
            peer_depth[name] = max(peer_depth.get(name, 0), depth)
            for q in group.questions:
                rows[name].append((q, question_metrics(dataset.name, group, q, got.rankings[q.id], depth)))
        for q in group.apart:
            apart_rows.append((q, question_metrics(dataset.name, group, q, default.rankings[q.id], default.depth)))

    report: dict[str, Any] = {
        "dataset": dataset.name,
        "data": dataset.path,
        "groups": len(dataset.groups),
        "documents": dataset.n_docs,
    }
    report.update(aggregate(rows["default"], dataset=dataset.name))
    headline = PRIMARY.get(dataset.name, "")
    per_question = [m[headline] for _, m in rows["default"] if headline in m]
    if per_question:
        lo, hi = bootstrap_ci(per_question)
        report["ci95"] = {headline: [round(lo, 6), round(hi, 6)], "resampled": "questions"}
    report["config"] = {
        "api": "HybridMemory.remember_many + HybridMemory.recall (default settings)",
        "embedder": emb.name,
        "alpha": default_alpha,
        "alpha_note": "1.0 = pure vector, 0.0 = pure keyword (BM25)",
        "recall_k": k,
        "candidates": max(k, base_cfg.retrieval.candidates),
        "centre_weight": base_cfg.retrieval.centre_weight,
        "rerank": base_cfg.rerank.model_dump(),
        "fusion": base_cfg.retrieval.fusion,
    }
    if apart_rows:
        report["apart"] = {"category_5_adversarial": aggregate(apart_rows, dataset=dataset.name)}
    peer_tokens: dict[str, Any] = {}
    if methods:
        baselines: dict[str, Any] = {}
        for m in methods:
            entry = aggregate(rows[m.name], dataset=dataset.name)
            entry["alpha"] = default_alpha if m.alpha is None else m.alpha
            entry["level"] = "store" if m.profile is None else "api"
            entry["depth"] = m.depth
            entry["search_ms_p50"] = _percentile(m.latencies, 50)
            baselines[m.name] = entry
        for name, run in peer_runs.items():
            entry = aggregate(rows[name], dataset=dataset.name)
            entry["alpha"] = 1.0  # dense only
            entry["level"] = "peer"
            entry["depth"] = peer_depth.get(name, 0)
            entry["units"] = run.units
            entry["search_ms_p50"] = _percentile(run.latencies, 50)
            entry["note"] = run.note
            entry["tokens"] = peer_tokens[name] = _peer_tokens(run, [q for q, _ in rows[name]], counter)
            baselines[name] = entry
        report["baselines"] = baselines
    if peers_skipped:
        report["peers_skipped"] = peers_skipped
    if opts.tokens:
        report["tokens"] = tokens.summary(counter)
        report["tokens"]["peers"] = peer_tokens
    report["write_outcomes"] = dict(outcomes)
    report["skipped"] = dataset.skipped
    report["notes"] = list(dataset.notes)
    report["timing"] = {
        "embed_s": round(embed_s, 3),
        "ingest_s": round(ingest_s, 3),
        "recall_ms_p50": _percentile(default.latencies, 50),
        "recall_ms_p95": _percentile(default.latencies, 95),
    }
    if disk is not None:
        report["timing"]["embedding_cache"] = {"hits": disk.hits, "misses": disk.misses}
    cleaned: dict[str, Any] = _clean(report)
    return cleaned


def _clean(obj: Any) -> Any:
    """Replace NaN by None so the report is strict JSON."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj
