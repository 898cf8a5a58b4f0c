"""Two more recall ideas for issue 17, each measured alone and cross-validated: BM25's k1 / b, and dense feedback.

* **BM25 k1 / b** (store level, as :mod:`benchmarks.fusion_cv`): Weaviate lets a collection set
  ``invertedIndexConfig.bm25.k1`` and ``b`` (defaults 1.2 / 0.75); a grid of both, the keyword leg
  over the search text with the previous turn as context, fused at the default alpha 0.4.
* **Dense pseudo-relevance feedback** (``retrieval.feedback_weight``): the query vector plus ``w``
  times the stored vector of the best hit of a first hybrid search, renormalised, searched again.
  Measured at store level (the feedback vector taken from the vector leg's or the fused list's
  top ``m``) and through the public API with everything else at its default (re-rank, time
  windows), where the setting is an environment variable
  (``HYBRID_MEMORY_RETRIEVAL__FEEDBACK_WEIGHT``).

The best BM25 settings are measured through the API too: the stores take no k1 / b setting, so
the benchmark process scores every BM25 term with them (:func:`_bm25`).

Each dataset is scored by its headline metric (LoCoMo turn Recall@10, LongMemEval session
recall_all@5, MemoryBank-CN Recall@5); the variant with the best mean on two datasets is scored
on the third (ties go to the default). The API rows also give Recall@1, which a block's first line
and the injection gate depend on. The API variants are also cross-validated within each dataset
(:mod:`benchmarks.harness.folds`; per-question scores in ``feedback_cv_questions.json``).

    python -m benchmarks.feedback_cv --out benchmarks/results      # ~12 min on 2 cores
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fusion_cv import HEADLINE  # noqa: E402
from benchmarks.harness.cache import CachedEmbedder, cached  # noqa: E402
from benchmarks.harness.datasets import Dataset  # noqa: E402
from benchmarks.harness.folds import recorder  # noqa: E402
from benchmarks.harness.pure import PureIndex  # noqa: E402
from benchmarks.harness.runner import aggregate, previous_turns, question_metrics  # noqa: E402
from benchmarks.rerank_cv import cross_validate, grouped_lines, study_main, within_datasets  # noqa: E402
from hybrid_memory.ranking import DEFAULT_B, DEFAULT_K1, Bm25Params, bm25_scores  # noqa: E402
from hybrid_memory.text.analyzer import Analyzer  # noqa: E402

ALPHA = 0.4
BM25_GRID = [(k1, b) for k1 in (0.5, 0.9, 1.2, 1.6, 2.2) for b in (0.3, 0.5, 0.75, 0.9)]
BM25_DEFAULT = f"k1={DEFAULT_K1:g} b={DEFAULT_B:g}"
#: Store-level feedback variants: (source of the feedback vector, how many top hits, weight).
FEEDBACK_GRID = [(src, m, w) for src in ("vector", "fused") for m in (1, 3) for w in (0.3, 0.6, 1.0, 2.5)]
STORE_DEFAULT = "no feedback"
API_WEIGHTS = (0.0, 0.3, 0.6, 1.0)
#: BM25 settings measured through the API (the best at store level and a middle one).
API_BM25 = ((0.5, 0.5), (0.5, 0.3), (0.9, 0.5))
API_DEFAULT = "off (default)"
ENV = "HYBRID_MEMORY_RETRIEVAL__FEEDBACK_WEIGHT"
SECTION_START = "<!-- feedback_cv: start -->"
SECTION_END = "<!-- feedback_cv: end -->"


class _Bm25Index(PureIndex):
    """A keyword-only :class:`PureIndex` with settable BM25 parameters."""

    params = Bm25Params()

    def keyword_scores(self, query: str) -> dict[str, float]:
        scores = bm25_scores(self.analyzer.query_tokens(query), self.tokens, params=self.params)
        return {self.ids[i]: float(s) for i, s in scores.items()}


def _bm25_name(k1: float, b: float) -> str:
    return f"k1={k1:g} b={b:g}"


def _feedback_name(src: str, m: int, w: float) -> str:
    return f"{src} top {m}, w {w:g}"


def store_level(ds: Dataset, emb: CachedEmbedder) -> dict[str, dict[str, float]]:
    """Headline metric of every BM25 and feedback variant on one dataset: ``{"bm25": ..., "feedback": ...}``."""
    an = Analyzer()
    bm25_rows: dict[str, list[Any]] = {_bm25_name(k1, b): [] for k1, b in BM25_GRID}
    fb_rows: dict[str, list[Any]] = {STORE_DEFAULT: [], **{_feedback_name(*v): [] for v in FEEDBACK_GRID}}
    for g in ds.groups:
        ids = [d.id for d in g.docs]
        texts = [d.text for d in g.docs]
        vecs = np.asarray(emb.embed_documents(texts), dtype=np.float32)
        row_of = {i: n for n, i in enumerate(ids)}
        ctx = [f"{c}\n{t}" if c else t for c, t in zip(previous_turns(g), texts, strict=True)]
        vec_idx, kw_idx = PureIndex(ids, texts, vecs, an), _Bm25Index(ids, ctx, None, an)
        qv = np.asarray(emb.embed_queries([q.text for q in g.questions]), dtype=np.float32)
        depth = len(ids) if ds.name == "longmemeval" else min(50, len(ids))

        def add(rows: list[Any], order: Sequence[str], q: Any, g: Any = g, depth: int = depth) -> None:
            rows.append((q, question_metrics(ds.name, g, q, [frozenset({i}) for i in order], depth)))

        for qi, q in enumerate(g.questions):
            vec_leg, _ = vec_idx.legs(q.text, qv[qi], limit=depth)
            assert vec_leg is not None  # the index has vectors
            for k1, b in BM25_GRID:
                kw_idx.params = Bm25Params(k1, b)
                _, kw_leg = kw_idx.legs(q.text, None, limit=depth)
                add(bm25_rows[_bm25_name(k1, b)], PureIndex.fuse((vec_leg, kw_leg), alpha=ALPHA, limit=depth), q)
            kw_idx.params = Bm25Params()
            _, kw_leg = kw_idx.legs(q.text, None, limit=depth)
            fused = PureIndex.fuse((vec_leg, kw_leg), alpha=ALPHA, limit=depth)
            add(fb_rows[STORE_DEFAULT], fused, q)
            for src, m, w in FEEDBACK_GRID:
                top = [c.id for c in vec_leg[:m]] if src == "vector" else list(fused[:m])
                moved = qv[qi] + np.float32(w) * vecs[[row_of[i] for i in top]].mean(axis=0)
                moved /= np.linalg.norm(moved)
                again, _ = vec_idx.legs(q.text, moved, limit=depth)
                add(fb_rows[_feedback_name(src, m, w)], PureIndex.fuse((again, kw_leg), alpha=ALPHA, limit=depth), q)
    metric = HEADLINE[ds.name]
    return {
        "bm25": {n: float(aggregate(r, dataset=ds.name)[metric]) for n, r in bm25_rows.items()},
        "feedback": {n: float(aggregate(r, dataset=ds.name)[metric]) for n, r in fb_rows.items()},
    }


@contextlib.contextmanager
def _bm25(k1: float, b: float) -> Iterator[None]:
    """Every BM25 score of the process with these parameters (the stores take no k1 / b setting)."""
    saved = Bm25Params.k1, Bm25Params.b
    Bm25Params.k1 = property(lambda self: float(np.float32(k1)))  # type: ignore[assignment,method-assign]
    Bm25Params.b = property(lambda self: float(np.float32(b)))  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        Bm25Params.k1, Bm25Params.b = saved  # type: ignore[method-assign]


def _api_run(
    data: dict[str, Dataset], emb: CachedEmbedder, records: Sequence[tuple[dict[str, Any], str]] = ()
) -> dict[str, dict[str, float]]:
    """Headline and Recall@1 of the default pipeline per dataset.

    ``records``: ``(per_question, name)`` pairs; each question's headline goes into every one of them.
    """
    from benchmarks.harness.runner import BenchOptions, run_benchmark

    out: dict[str, dict[str, float]] = {}
    for d, metric in HEADLINE.items():
        hooks = [recorder(per_question, name, d, metric) for per_question, name in records]

        def hook(*args: Any, hooks: list[Any] = hooks) -> None:
            for h in hooks:
                h(*args)

        opts = BenchOptions(baselines=False, peers=False, tokens=False, on_question=hook if hooks else None)
        res = run_benchmark(data[d], embedder=emb, options=opts)
        out[d] = {"headline": float(res[metric]), "recall@1": float(res["recall@1"])}
    return out


def api_level(
    data: dict[str, Dataset], emb: CachedEmbedder, per_question: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Headline metric and Recall@1 through the public API: ``{"feedback": ..., "bm25": ...}`` by variant, dataset.

    ``per_question`` (``{"feedback": {}, "bm25": {}}``) is filled with each question's headline per
    variant (:mod:`benchmarks.harness.folds`).
    """

    def records(part: str, name: str) -> list[tuple[dict[str, Any], str]]:
        return [(per_question[part], name)] if per_question is not None else []

    saved = os.environ.get(ENV)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {"feedback": {}, "bm25": {}}
    try:
        for w in API_WEIGHTS:
            name = API_DEFAULT if w == 0 else f"w {w:g}"
            os.environ[ENV] = str(w)
            # The default run is also BM25's default (k1 1.2, b 0.75): recorded for both studies.
            both = records("bm25", BM25_DEFAULT) if w == 0 else []
            out["feedback"][name] = _api_run(data, emb, [*records("feedback", name), *both])
            print(name, out["feedback"][name], file=sys.stderr, flush=True)
        os.environ.pop(ENV, None)
        out["bm25"][BM25_DEFAULT] = out["feedback"][API_DEFAULT]
        for k1, b in API_BM25:
            with _bm25(k1, b):
                out["bm25"][_bm25_name(k1, b)] = _api_run(data, emb, records("bm25", _bm25_name(k1, b)))
            print(_bm25_name(k1, b), out["bm25"][_bm25_name(k1, b)], file=sys.stderr, flush=True)
    finally:
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved
    return out


def _mean(scores: dict[str, float]) -> float:
    return float(np.mean([scores[d] for d in HEADLINE]))


def _table(scores: dict[str, dict[str, float]], default: str, top: int) -> list[str]:
    shown = [default, *sorted((n for n in scores if n != default), key=lambda n: -_mean(scores[n]))[: top - 1]]
    lines = ["| variant | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | mean |", "|---|---|---|---|---|"]
    for n in shown:
        s = scores[n]
        lines.append(f"| {n} | " + " | ".join(f"{s[d]:.3f}" for d in HEADLINE) + f" | {_mean(s):.3f} |")
    return lines


def _cv_table(cv: dict[str, Any], default: str, *, store_level: bool = False) -> list[str]:
    lines = ["| held out | chosen on the other two | held-out score | default on it |", "|---|---|---|---|"]
    for d, c in cv.items():
        lines.append(f"| {d} | {c['chosen']} | {c['held_out']:.3f} | {c['default']:.3f} |")
    return [*lines, "", f"Verdict ({default} is the default): {verdict(cv, store_level=store_level)}."]


def verdict(cv: dict[str, Any], *, store_level: bool = False) -> str:
    """What the cross-validation says: a change is kept only with a held-out gain and no held-out drop.

    A store-level gain decides nothing on its own (the re-rank and time windows come after the
    store): it only makes the idea worth measuring through the API.
    """
    up = [d for d, c in cv.items() if c["held_out"] > c["default"]]
    down = [d for d, c in cv.items() if c["held_out"] < c["default"]]
    if down:
        return "a held-out drop on " + ", ".join(down) + ": not kept"
    if not up:
        return "no cross-validated gain: not kept"
    if store_level:
        return "a store-level cross-validated gain on " + ", ".join(up) + ": measured through the API below"
    return "a cross-validated gain on " + ", ".join(up) + " and no held-out drop: **kept**"


def _api_table(rows: dict[str, dict[str, dict[str, float]]], label: str) -> list[str]:
    lines = [
        f"| {label} | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | LoCoMo R@1 | LongMemEval R@1 "
        "| MemoryBank-CN R@1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, v in rows.items():
        head = " | ".join(f"{v[d]['headline']:.3f}" for d in HEADLINE)
        r1 = " | ".join(f"{v[d]['recall@1']:.3f}" for d in HEADLINE)
        lines.append(f"| {n} | {head} | {r1} |")
    return lines


def headline(rows: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The headline metric alone, by variant and dataset."""
    return {n: {d: v[d]["headline"] for d in HEADLINE} for n, v in rows.items()}


def markdown(res: dict[str, Any]) -> str:
    """The study's report."""
    lines = [
        "# BM25 k1 / b and dense feedback, cross-validated (`python -m benchmarks.feedback_cv`)",
        "",
        "* **BM25 k1 / b**: Weaviate lets a collection set `invertedIndexConfig.bm25.k1` and `b` (defaults 1.2 / "
        "0.75). A grid at store level (the keyword leg over the search text with the previous turn as context, fused "
        "at the default alpha 0.4), then the best settings through the public API (the stores take no k1 / b "
        "setting: the benchmark process scores every BM25 term with them).",
        "* **Dense pseudo-relevance feedback** (`retrieval.feedback_weight`): the query vector plus `w` times the "
        "stored vector of the best hit of a first hybrid search, renormalised, searched again. At store level the "
        "feedback vector comes from the vector leg's or the fused list's top `m`; through the API from the fused "
        "top hit, with the re-rank and time windows on.",
        "",
        "Headline metric per dataset (LoCoMo turn Recall@10, LongMemEval session recall_all@5, MemoryBank-CN "
        "Recall@5); the variant with the best mean on two datasets is scored on the third (ties go to the default). "
        "The API tables also give Recall@1, which a block's first line and the injection gate depend on.",
        "",
        "## BM25 k1 / b at store level (alpha 0.4, keyword leg with the previous turn as context)",
        "",
        *_table(res["bm25"], BM25_DEFAULT, 8),
        "",
        *_cv_table(res["bm25_cv"], BM25_DEFAULT, store_level=True),
        "",
        "## BM25 k1 / b through the API (re-rank, time windows on)",
        "",
        *_api_table(res["api"]["bm25"], "k1 / b"),
        "",
        *_cv_table(res["api_bm25_cv"], BM25_DEFAULT),
        "",
        *_grouped(res.get("api_bm25_grouped")),
        "## Dense feedback at store level (alpha 0.4, no re-rank)",
        "",
        *_table(res["feedback"], STORE_DEFAULT, 8),
        "",
        *_cv_table(res["feedback_cv"], STORE_DEFAULT, store_level=True),
        "",
        "## Dense feedback through the API (`retrieval.feedback_weight`; re-rank, time windows on)",
        "",
        *_api_table(res["api"]["feedback"], "weight"),
        "",
        *_cv_table(res["api_cv"], API_DEFAULT),
        "",
        *_grouped(res.get("api_grouped")),
    ]
    return "\n".join(lines)


def _grouped(grouped: dict[str, Any] | None) -> list[str]:
    """The within-dataset cross-validation's lines and a blank line (none for a run saved before it)."""
    return [*grouped_lines(grouped), ""] if grouped else []


def experiments_section(res: dict[str, Any]) -> str:
    """The short form of the study for ``experiments.md``."""

    def best(cv: dict[str, Any]) -> str:
        return "; ".join(
            f"{d} held out: {c['chosen']} {c['held_out']:.3f} (default {c['default']:.3f})" for d, c in cv.items()
        )

    lines = [
        SECTION_START,
        "## BM25 k1 / b and dense feedback (cross-validated)",
        "",
        "Each measured alone, chosen on two datasets and scored on the third; details in "
        "[feedback_cv.md](feedback_cv.md). Reproduce: `python -m benchmarks.feedback_cv`.",
        "",
        f"* BM25 k1 / b, store level: {best(res['bm25_cv'])}. Verdict: {verdict(res['bm25_cv'], store_level=True)}.",
        f"* BM25 k1 / b through the API: {best(res['api_bm25_cv'])}. Verdict: {verdict(res['api_bm25_cv'])}.",
        f"* Dense feedback, store level: {best(res['feedback_cv'])}. "
        f"Verdict: {verdict(res['feedback_cv'], store_level=True)}.",
        f"* Dense feedback through the API (`retrieval.feedback_weight`): {best(res['api_cv'])}. "
        f"Verdict: {verdict(res['api_cv'])}.",
        SECTION_END,
    ]
    return "\n".join(lines)


def run(data_dir: Path) -> dict[str, Any]:
    """The whole study (store level, then through the API)."""
    from benchmarks.__main__ import load_all
    from hybrid_memory.embeddings import default_embedder

    data = load_all(data_dir)
    emb = cached(default_embedder())
    per_question: dict[str, dict[str, Any]] = {"feedback": {}, "bm25": {}}
    try:
        per = {d: store_level(data[d], emb) for d in HEADLINE}
        api = api_level(data, emb, per_question)
    finally:
        emb.close()
    res: dict[str, Any] = {"_questions": per_question}
    for part in ("bm25", "feedback"):
        res[part] = {n: {d: per[d][part][n] for d in HEADLINE} for n in per["locomo"][part]}
    res["bm25_cv"] = cross_validate(res["bm25"], BM25_DEFAULT)
    res["feedback_cv"] = cross_validate(res["feedback"], STORE_DEFAULT)
    res["api"] = api
    res["api_cv"] = cross_validate(headline(api["feedback"]), API_DEFAULT)
    res["api_bm25_cv"] = cross_validate(headline(api["bm25"]), BM25_DEFAULT)
    res["api_grouped"] = within_datasets(per_question["feedback"], API_DEFAULT)
    res["api_bm25_grouped"] = within_datasets(per_question["bm25"], BM25_DEFAULT)
    return res


def main(argv: list[str] | None = None) -> int:
    return study_main(
        argv,
        doc=__doc__,
        name="feedback_cv",
        run=run,
        markdown=markdown,
        section=experiments_section,
        marks=(SECTION_START, SECTION_END),
    )


if __name__ == "__main__":
    sys.exit(main())
