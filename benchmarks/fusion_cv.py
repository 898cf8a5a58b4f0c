"""Adaptive fusion vs one global alpha, cross-validated across the three dev datasets (issue 17 part 1).

Store level, as :mod:`benchmarks.experiments`: :class:`~benchmarks.harness.pure.PureIndex` (the
stores' Weaviate-exact maths), the keyword leg over the search text with the previous turn as
context (what ``add_turn`` records), the vector leg over the memory itself; no re-rank, no time
windows. Per question both legs are computed once and fused by each variant:

* ``alpha_<a>``: relativeScoreFusion at one alpha (1.0 = pure vector, 0.0 = pure keyword/BM25);
* ``ranked``: Weaviate's rankedFusion (reciprocal ranks, no score scale) at the default alpha;
* ``adaptive_<t>_<lo>_<hi>``: per-query alpha from the keyword leg's evidence: ``lo`` when the
  best keyword hit's own text holds at least a share ``t`` of the query's terms, else ``hi``
  (a weak lexical match, e.g. a question in another language than its memory, leans on vectors).
* ``kwscaled_<t>``: relativeScoreFusion at the default alpha with each memory's normalised keyword
  score multiplied by ``min(1, coverage / t)``, coverage = the share of the query's terms in that
  memory's own text (a keyword match only through the search context or on one common character
  counts less); a re-scoring of the store's legs, not a store change.
* ``dbsf_<a>``: distribution-based score fusion (each leg's scores mapped from mean - 3 sd .. mean
  + 3 sd of its candidates to 0..1, so a flat leg adds little) at weight ``a`` for the vector leg;
* ``zscore_<a>``: each leg's z-scores over its top 50, a memory missing from a leg at that leg's
  lowest; weight ``a`` for the vector leg. Both need the two legs apart (two store queries).

Each dataset is scored by its headline metric (LoCoMo turn Recall@10, LongMemEval session
recall_all@5, MemoryBank-CN Recall@5). Cross-validation: the variant with the best mean on two
datasets is scored on the third. The bilingual probe set is scored too (Recall@1 / @5).

    python -m benchmarks.fusion_cv --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.cache import CachedEmbedder, cached  # noqa: E402
from benchmarks.harness.datasets import Dataset  # noqa: E402
from benchmarks.harness.metrics import Ranking  # noqa: E402
from benchmarks.harness.pure import PureIndex  # noqa: E402
from benchmarks.harness.runner import aggregate, previous_turns, question_metrics  # noqa: E402
from hybrid_memory.read.gate import term_overlap  # noqa: E402
from hybrid_memory.text.analyzer import Analyzer  # noqa: E402

HEADLINE = {"locomo": "recall@10", "longmemeval": "session_recall_all@5", "memorybank": "recall@5"}
PROBE = ROOT / "tests" / "data" / "bilingual_probe.json"
DEFAULT = "alpha_0.4"


def variants() -> list[str]:
    """Every fusion variant of the study."""
    out = [f"alpha_{a:g}" for a in (0.25, 0.3, 0.4, 0.5, 0.6, 0.75)] + ["ranked"]
    for t in (0.3, 0.5, 0.7):
        for lo in (0.25, 0.4):
            for hi in (0.5, 0.6, 0.75):
                out.append(f"adaptive_{t:g}_{lo:g}_{hi:g}")
    out += [f"kwscaled_{t:g}" for t in (0.2, 0.34, 0.5, 0.67, 1.0)]
    out += [f"{kind}_{a:g}" for kind in ("dbsf", "zscore") for a in (0.3, 0.4, 0.5, 0.6)]
    return out


def _minmax(values: dict[str, float]) -> dict[str, float]:
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    span = hi - lo
    return {k: ((v - lo) / span if span > 0 else 1.0) for k, v in values.items()}


def kw_scaled(
    vec_leg: Sequence[Any] | None,
    kw_leg: Sequence[Any],
    coverage: dict[str, float],
    *,
    alpha: float,
    t: float,
    limit: int,
) -> list[str]:
    """relativeScoreFusion with the keyword scores scaled by each memory's term coverage."""
    vec = _minmax({c.id: 1.0 - c.distance for c in (vec_leg or [])[: max(100, limit)]})
    kw = _minmax({c.id: c.score for c in kw_leg[: max(100, limit)]})
    fused: dict[str, float] = {}
    for i, v in vec.items():
        fused[i] = fused.get(i, 0.0) + alpha * v
    for i, v in kw.items():
        fused[i] = fused.get(i, 0.0) + (1 - alpha) * v * min(1.0, coverage.get(i, 0.0) / t)
    return sorted(fused, key=lambda i: (-fused[i], i))[:limit]


def _three_sigma(values: dict[str, float]) -> dict[str, float]:
    """Scores mapped from ``mean - 3 sd .. mean + 3 sd`` to ``0..1`` (distribution-based score fusion)."""
    if not values:
        return {}
    arr = np.fromiter(values.values(), dtype=float)
    mu, sd = float(arr.mean()), float(arr.std())
    if sd == 0:
        return dict.fromkeys(values, 0.5)
    return {k: (v - mu + 3 * sd) / (6 * sd) for k, v in values.items()}


def _zscores(values: dict[str, float], top: int = 50) -> dict[str, float]:
    """Z-scores against the ``top`` best scores of the leg."""
    if not values:
        return {}
    arr = np.array(sorted(values.values(), reverse=True)[:top])
    mu, sd = float(arr.mean()), float(arr.std())
    return {k: ((v - mu) / sd if sd > 0 else 0.0) for k, v in values.items()}


def distribution_fused(vec_leg: Sequence[Any] | None, kw_leg: Sequence[Any], *, name: str, limit: int) -> list[str]:
    """``dbsf_<a>`` / ``zscore_<a>``: each leg normalised by its own score distribution, then weighted."""
    kind, a = name.split("_")[0], float(name.split("_")[1])
    depth = max(100, limit)
    raw_v = {c.id: 1.0 - c.distance for c in (vec_leg or [])[:depth]}
    raw_k = {c.id: c.score for c in kw_leg[:depth]}
    fused: dict[str, float] = {}
    if kind == "dbsf":  # a memory missing from a leg gets nothing from it
        for weight, leg in ((a, _three_sigma(raw_v)), (1 - a, _three_sigma(raw_k))):
            for i, v in leg.items():
                fused[i] = fused.get(i, 0.0) + weight * v
    else:  # a memory missing from a leg counts at that leg's lowest
        zv, zk = _zscores(raw_v), _zscores(raw_k)
        floor_v, floor_k = min(zv.values(), default=0.0), min(zk.values(), default=0.0)
        for i in set(zv) | set(zk):
            fused[i] = a * zv.get(i, floor_v) + (1 - a) * zk.get(i, floor_k)
    return sorted(fused, key=lambda i: (-fused[i], i))[:limit]


def alpha_for(name: str, coverage: float) -> tuple[float, str]:
    """The alpha and fusion a variant uses for a query whose best keyword hit covers ``coverage``."""
    if name == "ranked":
        return 0.4, "ranked"
    if name.startswith("alpha_"):
        return float(name.split("_")[1]), "relative"
    _, t, lo, hi = name.split("_")
    return (float(lo) if coverage >= float(t) else float(hi)), "relative"


def _coverage(an: Analyzer, query: str, kw_leg: Sequence[Any], text_of: dict[str, str]) -> float:
    return term_overlap(an, query, text_of[kw_leg[0].id]) if kw_leg else 0.0


def _order(
    name: str, an: Analyzer, query: str, legs: tuple[Any, Any], text_of: dict[str, str], limit: int
) -> list[str]:
    vec_leg, kw_leg = legs
    if name.startswith("kwscaled_"):
        cov = {c.id: term_overlap(an, query, text_of[c.id]) for c in kw_leg[: max(100, limit)]}
        return kw_scaled(vec_leg, kw_leg, cov, alpha=0.4, t=float(name.split("_")[1]), limit=limit)
    if name.startswith(("dbsf_", "zscore_")):
        return distribution_fused(vec_leg, kw_leg, name=name, limit=limit)
    alpha, fusion = alpha_for(name, _coverage(an, query, kw_leg, text_of))
    return PureIndex.fuse(legs, alpha=alpha, limit=limit, fusion=fusion)


def run_dataset(ds: Dataset, emb: CachedEmbedder, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Aggregated metrics of every variant on one dataset."""
    an = Analyzer()
    rows: dict[str, list[Any]] = {n: [] for n in names}
    for g in ds.groups:
        ids = [d.id for d in g.docs]
        texts = [d.text for d in g.docs]
        text_of = dict(zip(ids, texts, strict=True))
        vecs = emb.embed_documents(texts)
        ctx = [f"{c}\n{t}" if c else t for c, t in zip(previous_turns(g), texts, strict=True)]
        vec_idx, kw_idx = PureIndex(ids, texts, vecs, an), PureIndex(ids, ctx, None, an)
        qv = emb.embed_queries([q.text for q in g.questions])
        depth = len(ids) if ds.name == "longmemeval" else min(50, len(ids))
        for qi, q in enumerate(g.questions):
            vec_leg, _ = vec_idx.legs(q.text, qv[qi], limit=depth)
            _, kw_leg = kw_idx.legs(q.text, None, limit=depth)
            for n in names:
                order = _order(n, an, q.text, (vec_leg, kw_leg), text_of, depth)
                ranking: Ranking = [frozenset({i}) for i in order]
                rows[n].append((q, question_metrics(ds.name, g, q, ranking, depth)))
    return {n: aggregate(rows[n], dataset=ds.name) for n in names}


def run_probe(emb: CachedEmbedder, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Recall@1 / @5 of each variant on the bilingual probe set (one store, no context)."""
    probe = json.loads(PROBE.read_text(encoding="utf-8"))
    an = Analyzer()
    ids = [f"m{i}" for i in range(len(probe["memories"]))]
    text_of = dict(zip(ids, probe["memories"], strict=True))
    idx = PureIndex(ids, probe["memories"], emb.embed_documents(probe["memories"]), an)
    answered = [q for q in probe["questions"] if q["gold"] is not None]
    qv = emb.embed_queries([q["text"] for q in answered])
    out: dict[str, dict[str, float]] = {}
    for n in names:
        r1 = r5 = 0
        for qi, q in enumerate(answered):
            legs = idx.legs(q["text"], qv[qi], limit=len(ids))
            order = _order(n, an, q["text"], legs, text_of, 5)
            gold = f"m{q['gold']}"
            r1 += order[:1] == [gold]
            r5 += gold in order
        out[n] = {"recall@1": round(r1 / len(answered), 3), "recall@5": round(r5 / len(answered), 3)}
    return out


def cross_validate(scores: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Choose on two datasets (best mean headline), score the third."""
    out: dict[str, Any] = {}
    for held in HEADLINE:
        train = [d for d in HEADLINE if d != held]
        best = max(scores, key=lambda n: (float(np.mean([scores[n][d] for d in train])), n == DEFAULT))
        out[held] = {"chosen": best, "held_out": scores[best][held], "default": scores[DEFAULT][held]}
    return out


#: The API-level alpha sweep of ``python -m benchmarks --only main`` (default profile, no access bumps).
API_ALPHAS = {
    "alpha_0": "default_no_touch_alpha_0",
    "alpha_0.25": "default_no_touch_alpha_0.25",
    "alpha_0.4": "default_no_touch",
    "alpha_0.5": "default_no_touch_alpha_0.5",
    "alpha_0.75": "default_no_touch_alpha_0.75",
    "alpha_1": "default_no_touch_alpha_1",
}


def api_alpha_scores(results: Path) -> dict[str, dict[str, float]] | None:
    """Headline metrics of the API alpha sweep in ``results/<dataset>.json`` (None when missing)."""
    out: dict[str, dict[str, float]] = {n: {} for n in API_ALPHAS}
    for d, metric in HEADLINE.items():
        path = results / f"{d}.json"
        if not path.exists():
            return None
        baselines = json.loads(path.read_text(encoding="utf-8"))["baselines"]
        for n, key in API_ALPHAS.items():
            out[n][d] = float(baselines[key][metric])
    return out


def markdown(res: dict[str, Any]) -> str:
    scores, cv, probe = res["scores"], res["cross_validated"], res["probe"]
    top = sorted(scores, key=lambda n: -float(np.mean(list(scores[n].values()))))[:12]
    shown = [DEFAULT, *[n for n in top if n != DEFAULT]]
    lines = [
        "# Fusion: one alpha vs adaptive, cross-validated (`python -m benchmarks.fusion_cv`)",
        "",
        "Store level (Weaviate-exact maths, keyword leg with the previous turn as context, no re-rank, no time "
        "windows), default embedder; headline metric per dataset: LoCoMo turn Recall@10, LongMemEval session "
        "recall_all@5, MemoryBank-CN Recall@5. `adaptive_t_lo_hi`: alpha `lo` when the best keyword hit's own text "
        "holds at least a share `t` of the query's terms, else `hi` (1.0 = pure vector, 0.0 = pure BM25). "
        "`kwscaled_t`: keyword scores scaled by the memory's own share of the query's terms. `dbsf_a` "
        "(distribution-based, mean ± 3 sd) and `zscore_a`: each leg normalised by its own score distribution, "
        "weight `a` on the vector leg. Only the 12 best means are listed; every variant is in `fusion_cv.json`.",
        "",
        "| variant | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | mean | probe R@1 | probe R@5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in shown:
        s = scores[n]
        lines.append(
            f"| {n}{' (default)' if n == DEFAULT else ''} | {s['locomo']:.3f} | {s['longmemeval']:.3f} | "
            f"{s['memorybank']:.3f} | {np.mean(list(s.values())):.3f} | {probe[n]['recall@1']:.3f} | "
            f"{probe[n]['recall@5']:.3f} |"
        )
    lines += [
        "",
        "Cross-validation (the best mean on two datasets, scored on the third):",
        "",
        "| held out | chosen on the other two | held-out score | default (alpha 0.4) on it |",
        "|---|---|---|---|",
    ]
    for d, c in cv.items():
        lines.append(f"| {d} | {c['chosen']} | {c['held_out']:.3f} | {c['default']:.3f} |")
    api = res.get("api")
    if api:
        lines += [
            "",
            "Through the API (re-rank, time windows; the alpha sweep in `benchmarks/results/<dataset>.json`, "
            "`default_no_touch*`), the same cross-validation of one global alpha:",
            "",
            "| variant | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | mean |",
            "|---|---|---|---|---|",
        ]
        for n, s in api["scores"].items():
            lines.append(
                f"| {n} | {s['locomo']:.3f} | {s['longmemeval']:.3f} | {s['memorybank']:.3f} | "
                f"{np.mean(list(s.values())):.3f} |"
            )
        lines += [
            "",
            "| held out | chosen on the other two | held-out score | default (alpha 0.4) on it |",
            "|---|---|---|---|",
        ]
        for d, c in api["cross_validated"].items():
            lines.append(f"| {d} | {c['chosen']} | {c['held_out']:.3f} | {c['default']:.3f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from benchmarks.__main__ import load_all
    from hybrid_memory.embeddings import default_embedder

    names = variants()
    emb = cached(default_embedder())
    try:
        data = load_all(args.data_dir)
        agg = {d: run_dataset(data[d], emb, names) for d in HEADLINE}
        probe = run_probe(emb, names)
    finally:
        emb.close()
    scores = {n: {d: float(agg[d][n][HEADLINE[d]]) for d in HEADLINE} for n in names}
    res: dict[str, Any] = {"scores": scores, "cross_validated": cross_validate(scores), "probe": probe}
    api = api_alpha_scores(ROOT / "benchmarks" / "results")
    if api is not None:
        res["api"] = {"scores": api, "cross_validated": cross_validate(api)}
    text = markdown(res)
    print(text)
    if args.out is not None:
        (args.out / "fusion_cv.json").write_text(json.dumps(res, indent=2) + "\n")
        (args.out / "fusion_cv.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
