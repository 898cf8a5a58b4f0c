"""WordLlama, a static embedding model whose weights ship in its wheel, alone and beside USE-multilingual.

``models-and-data.md`` §1 lists the embedders that install offline from PyPI; ``wordllama`` (MIT,
a 19 MB wheel, no torch) is one more: its ``l2_supercat`` model is a table of 256-dimensional token
vectors over Llama 2's 32,000 tokens, averaged per text. A static model reads no word order and
aligns no languages, but it embeds tens of thousands of sentences a second, and it matches related
words (``paint`` / ``painted`` / ``sunrise``) that the keyword leg treats as different.

This measures it through the public API with default settings (the runner of ``hybrid-memory
bench``), alone and concatenated with the default USE-multilingual as ``use_e5_pair`` concatenates
e5 (:class:`~hybrid_memory.embeddings.ConcatEmbedder`, ``cross_script=0``: USE judges a memory in
the other script), for each share of WordLlama in :data:`SHARES` and each alpha of :data:`ALPHAS`,
with the same three cross-validations as :mod:`benchmarks.ensemble` (leave one dataset out; the
share alone; within each dataset, five folds of whole groups), the Recall@1 and nDCG@10 test of
``centre_cv.md`` (rule 3), the bilingual probe, and the speed. Each model alone also runs with the
vector leg only (alpha 1.0), outside the choice.

Needs ``pip install wordllama`` (0.4; not an extra of the project: it is measured here, not
used) and the ``local`` extra. About 10 minutes. Reproduce::

    python -m benchmarks.static_model --out benchmarks/results

Writes ``static_model.json``, ``static_model_questions.json``, ``static_model.md`` and its
section of ``experiments.md``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.e5_onnx import HEADLINE, probe  # noqa: E402
from benchmarks.ensemble import (  # noqa: E402
    _parse,
    best_share,
    cross_validate,
    datasets,
    default_alpha,
    point,
    with_questions,
    within_datasets,
    within_datasets_share,
)
from benchmarks.harness.cli import make_embedder  # noqa: E402
from benchmarks.harness.folds import finish, recorder, section_lines, summary  # noqa: E402
from benchmarks.harness.runner import BenchOptions, run_benchmark  # noqa: E402
from benchmarks.harness.tiktoken_files import use_bundled_tiktoken_cache  # noqa: E402
from benchmarks.rerank_cv import study_main  # noqa: E402
from benchmarks.studies import _speed, log, sign_test, speed_texts  # noqa: E402
from hybrid_memory.embeddings import CallableEmbedder, ConcatEmbedder, Embedder  # noqa: E402

#: WordLlama's share of the cosine; 0 is USE alone, 1 is WordLlama alone.
SHARES = (0.0, 0.2, 0.3, 0.5, 1.0)
#: Alphas every share runs at (1.0 = pure vector); the library default is one of them.
ALPHAS = (0.4, 0.45, 0.5)
#: The metrics that must not drop for a tied setting to be kept (``centre_cv.md`` rule 3).
SIDE_METRICS = ("recall@1", "ndcg@10")
SECTION_START = "<!-- static_model: start -->"
SECTION_END = "<!-- static_model: end -->"
MODEL = "wordllama l2_supercat 256"


def wordllama() -> Embedder:
    """WordLlama's ``l2_supercat`` 256-dimensional model, loaded from the wheel without the network.

    ``wordllama`` 0.4.0.post1 looks for its bundled tokenizer under ``tokenizer/`` but ships it under
    ``tokenizers/`` (the name of its cache's folder), so a plain ``WordLlama.load()`` goes to the
    model hub; the package's own folder, given as the cache, holds both files.

    Raises:
        SystemExit: ``wordllama`` is not installed.
    """
    try:
        import wordllama as package
        from wordllama import WordLlama
    except ImportError:  # pragma: no cover - depends on the machine
        raise SystemExit("this study needs WordLlama: pip install wordllama") from None
    logging.getLogger("wordllama").setLevel(logging.WARNING)
    model = WordLlama.load(cache_dir=Path(package.__file__).parent, disable_download=True)
    return CallableEmbedder(model.embed, name="wordllama-l2-supercat-256")


def pair(use: Embedder, static: Embedder, share: float) -> Embedder:
    """USE alone, WordLlama alone, or both at WordLlama's ``share`` (USE judges the other script)."""
    if share <= 0.0:
        return use
    if share >= 1.0:
        return static
    return ConcatEmbedder([(use, 1.0 - share), (static, share)], cross_script=0)


def _run(ds: Any, emb: Embedder, alpha: float, hook: Any = None) -> dict[str, float]:
    opts = BenchOptions(alpha=alpha, baselines=False, peers=False, tokens=True, progress=False, on_question=hook)
    rep = run_benchmark(ds, embedder=emb, options=opts)
    injected = ((rep.get("tokens") or {}).get("injected") or {}).get("median")
    return {
        "value": float(rep[HEADLINE[ds.name]]),
        **{m: float(rep[m]) for m in SIDE_METRICS},
        "median_tokens": injected,
    }


def grid(sets: Mapping[str, Any], use: Embedder, static: Embedder) -> tuple[dict[str, Any], dict[str, Any]]:
    """Headline, Recall@1, nDCG@10 and median injected tokens per (share, alpha) and dataset, through the API."""
    joint: dict[str, Any] = {}
    per_question: dict[str, Any] = {}
    for share in SHARES:
        emb = pair(use, static, share)
        for alpha in ALPHAS:
            key = point(share, alpha)
            joint[key] = {
                name: {
                    "metric": HEADLINE[name],
                    **_run(ds, emb, alpha, recorder(per_question, key, name, HEADLINE[name])),
                }
                for name, ds in sets.items()
            }
            log(f"{key}: " + ", ".join(f"{n} {r['value']:.3f}" for n, r in joint[key].items()))
    return joint, finish(per_question)


def side_metrics(joint: Mapping[str, Any], chosen: str, alpha: float) -> dict[str, Any]:
    """Rule 3 at ``chosen``: each dataset's Recall@1 and nDCG@10 beside USE alone at ``alpha``."""
    ref = joint[point(0.0, alpha)]
    out: dict[str, Any] = {}
    for name, row in joint[chosen].items():
        out[name] = {m: {"default": ref[name][m], "chosen": row[m]} for m in SIDE_METRICS}
    return out


def verdict(res: Mapping[str, Any]) -> str:
    """Kept only as ``centre_cv.md`` keeps a setting: no held-out drop, then its four rules when the datasets tie."""
    loo = res["joint_cross_validation"]
    lower = [n for n, e in loo.items() if e["held_out"] < e["use_alone"] - 1e-12]
    if lower:
        return f"not kept: lower left out on {', '.join(lower)}"
    higher = [n for n, e in loo.items() if e["held_out"] > e["use_alone"] + 1e-12]
    if higher:
        return f"kept: higher left out on {', '.join(higher)} and lower nowhere"
    failed: list[str] = []
    inside = res["grouped_cross_validated"]["datasets"].values()
    if not any(d["held_out"] > d["default"] and _p(d) < 0.05 for d in inside):
        failed.append("(2) no significant rise inside any dataset")
    drops = [
        f"{n} {m} {v['default']:.3f} -> {v['chosen']:.3f}"
        for n, row in res["side_metrics"].items()
        for m, v in row.items()
        if v["chosen"] < v["default"] - 1e-12
    ]
    if drops:
        failed.append("(3) " + ", ".join(drops))
    probe_rows = res["probe"]
    if probe_rows[res["chosen_label"]]["recall@1"] < probe_rows[res["default_label"]]["recall@1"] - 1e-12:
        failed.append("(4) the probe's Recall@1 drops")
    if failed:
        return "not kept: the datasets tie left out, and it fails " + "; ".join(failed)
    return "kept: the datasets tie left out, and rules (2)-(4) hold"


def _p(row: Mapping[str, Any]) -> float:
    """Two-sided sign-test p of a within-dataset row's wins and losses."""
    return sign_test(int(row["wins"]), int(row["losses"]))


def run(data_dir: Path) -> dict[str, Any]:
    """The grid, the cross-validations, the vector-only rows, the probe and the speed."""
    use_bundled_tiktoken_cache()
    sets = datasets(data_dir)
    use, static = make_embedder("use"), wordllama()
    alpha = default_alpha()
    joint, per_question = grid(sets, use, static)
    chosen = best_share(joint, alpha)
    vector_only = {
        label: {name: _run(ds, emb, 1.0) for name, ds in sets.items()}
        for label, emb in (("USE-multilingual v3", use), (MODEL, static))
    }
    default_label, chosen_label = f"share {point(0.0, alpha)}", f"share {chosen}"
    probe_at = {default_label: point(0.0, alpha), chosen_label: chosen, f"share {point(1.0, alpha)}": point(1.0, alpha)}
    probes = probe(
        {
            label: (pair(use, static, _parse(key)[0]), {"retrieval": {"alpha": _parse(key)[1]}})
            for label, key in probe_at.items()
        }
    )
    texts, queries = speed_texts(sets["memorybank"], sets["locomo"])
    speeds = {
        MODEL: _speed(static, texts, 64, 3, queries),
        f"USE + WordLlama at share {_parse(chosen)[0]:.3f}": _speed(
            pair(make_embedder("use", cache=False), static, _parse(chosen)[0]), texts, 64, 3, queries
        ),
    }
    res: dict[str, Any] = {
        "model": MODEL,
        "shares": list(SHARES),
        "alphas": list(ALPHAS),
        "default_alpha": alpha,
        "joint": joint,
        "chosen": chosen,
        "joint_cross_validation": with_questions(cross_validate(joint, alpha=alpha), per_question, alpha),
        "grouped_cross_validated": within_datasets(per_question, alpha),
        "grouped_share_cross_validated": within_datasets_share(per_question, alpha),
        "side_metrics": side_metrics(joint, chosen, alpha),
        "vector_only": vector_only,
        "probe": probes,
        "default_label": default_label,
        "chosen_label": chosen_label,
        "speed": speeds,
        "_questions": per_question,
    }
    res["verdict"] = verdict(res)
    return res


def _cell(row: Mapping[str, Any]) -> str:
    return f"{row['value']:.3f} ({row['recall@1']:.3f} / {row['ndcg@10']:.3f})"


def markdown(res: Mapping[str, Any]) -> str:
    """The full report (``static_model.md``)."""
    names = list(HEADLINE)
    alpha = res["default_alpha"]
    lines = [
        f"# {MODEL} alone and beside USE-multilingual (`python -m benchmarks.static_model`)",
        "",
        "`ConcatEmbedder([(USE, 1 - s), (WordLlama, s)], cross_script=0)`: the cosine is the weighted mean of both "
        "models' cosines, and USE alone judges a memory in the other script. The dev files through the public API "
        f"with default settings, for each share `s` of WordLlama and each alpha (the default is {alpha:g}). Each "
        "cell: the headline metric (Recall@1 / nDCG@10).",
        "",
        "| share | alpha | " + " | ".join(f"{n} {HEADLINE[n]}" for n in names) + " | median injected tokens (LoCoMo) |",
        "|---:|---:|" + "---:|" * (len(names) + 1),
    ]
    for key, row in res["joint"].items():
        share, a = _parse(key)
        mark = " (default)" if share == 0.0 and a == alpha else ""
        lines.append(
            f"| {share:.3f}{mark} | {a:g} | "
            + " | ".join(_cell(row[n]) for n in names)
            + f" | {row['locomo']['median_tokens']:g} |"
        )
    lines += [
        "",
        "The vector leg alone (alpha 1.0), each model by itself:",
        "",
        "| model | " + " | ".join(f"{n} {HEADLINE[n]}" for n in names) + " |",
        "|---|" + "---:|" * len(names),
        *(
            f"| {label} | " + " | ".join(_cell(row[n]) for n in names) + " |"
            for label, row in res["vector_only"].items()
        ),
        "",
        "Leave one dataset out, share and alpha chosen together on the other two (ties: the smaller share, then "
        "the alpha nearest the default):",
        "",
        "| held out | chosen | held-out score | default | questions up / down (sign test) |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {n} | {e['chosen_share']} | {e['held_out']:.3f} | {e['use_alone']:.3f} | "
            f"{e['wins']} / {e['losses']} (p={e['sign_test_p']:.3f}) |"
            for n, e in res["joint_cross_validation"].items()
        ),
        "",
        *section_lines(
            res["grouped_cross_validated"], ties="ties to the smaller share, then the alpha nearest the default"
        ),
        "",
        "The share alone, every setting at the default alpha:",
        "",
        *section_lines(res["grouped_share_cross_validated"], ties="ties to the smaller share"),
        "",
        f"Recall@1 and nDCG@10 at the best setting on all three dev files, {res['chosen']}, against the default:",
        "",
        "| dataset | Recall@1 | nDCG@10 |",
        "|---|---:|---:|",
        *(
            f"| {n} | " + " | ".join(f"{row[m]['default']:.3f} -> {row[m]['chosen']:.3f}" for m in SIDE_METRICS) + " |"
            for n, row in res["side_metrics"].items()
        ),
        "",
        "Bilingual probe (`tests/data/bilingual_probe.json`, default settings):",
        "",
        "| embedder | Recall@1 | Recall@5 | answering memory injected | a block injected when nothing answers |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {label} | {p['recall@1']:.3f} | {p['recall@5']:.3f} | {p['gold_injected']:.3f} | "
            f"{p['injected_when_nothing_answers']:.3f} |"
            for label, p in res["probe"].items()
        ),
        "",
        "Speed on these 2 cores (best of 3 runs; 128 LoCoMo turns + 128 MemoryBank-CN exchanges; the query "
        "latency over every 10th LoCoMo question):",
        "",
        "| embedder | batched sentences/s | query p50 ms | query p95 ms |",
        "|---|---:|---:|---:|",
        *(
            f"| {label} | {s['batched_per_s']:.1f} | {s['query_p50_ms']:.1f} | {s['query_p95_ms']:.1f} |"
            for label, s in res["speed"].items()
        ),
        "",
        "## Verdict",
        "",
        f"Best on all three dev files: {res['chosen']}. Within each dataset: chosen "
        f"{summary(res['grouped_cross_validated'])}. **{res['verdict'][0].upper()}{res['verdict'][1:]}.**",
        "",
    ]
    return "\n".join(lines)


def experiments_section(res: Mapping[str, Any]) -> str:
    """The short form for ``experiments.md``."""
    alpha = res["default_alpha"]
    ref, best = res["joint"][point(0.0, alpha)], res["joint"][res["chosen"]]
    alone = res["joint"][point(1.0, alpha)]
    names = list(HEADLINE)
    vec = res["vector_only"]
    return "\n".join(
        [
            SECTION_START,
            "## A static model beside USE (WordLlama, through the API)",
            "",
            f"{MODEL} (PyPI `wordllama`, weights in the wheel): alone, and concatenated with USE at shares of "
            f"{', '.join(f'{s:g}' for s in res['shares'])} and alphas of {', '.join(f'{a:g}' for a in res['alphas'])}; "
            "details in [static_model.md](static_model.md). Reproduce: `pip install wordllama; python -m "
            "benchmarks.static_model --out benchmarks/results`.",
            "",
            "* Vector leg alone: "
            + "; ".join(
                f"{n} {vec[MODEL][n]['value']:.3f} (USE {vec['USE-multilingual v3'][n]['value']:.3f})" for n in names
            )
            + ".",
            f"* Alone in the pipeline at alpha {alpha:g}: "
            + "; ".join(f"{n} {alone[n]['value']:.3f} (USE {ref[n]['value']:.3f})" for n in names)
            + ".",
            f"* Best on all three, {res['chosen']}: "
            + "; ".join(
                f"{n} {best[n]['value']:.3f}, R@1 {ref[n]['recall@1']:.3f} -> {best[n]['recall@1']:.3f}" for n in names
            )
            + ".",
            "* Left out: "
            + "; ".join(
                f"{n} {e['held_out']:.3f} with {e['chosen_share']} (default {e['use_alone']:.3f})"
                for n, e in res["joint_cross_validation"].items()
            )
            + ".",
            "* Within each dataset (5 folds, share and alpha together): "
            + "; ".join(
                f"{n} {d['held_out']:.3f} (default {d['default']:.3f}, {d['wins']} up / {d['losses']} down)"
                for n, d in res["grouped_cross_validated"]["datasets"].items()
            )
            + ".",
            f"* Bilingual probe Recall@1: {res['probe'][res['chosen_label']]['recall@1']:.3f} at the best share, "
            f"{res['probe'][f'share {point(1.0, alpha)}']['recall@1']:.3f} alone (USE "
            f"{res['probe'][res['default_label']]['recall@1']:.3f}).",
            f"* Verdict: {res['verdict']}.",
            SECTION_END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    return study_main(
        argv,
        doc=__doc__,
        name="static_model",
        run=run,
        markdown=markdown,
        section=experiments_section,
        marks=(SECTION_START, SECTION_END),
    )


if __name__ == "__main__":
    sys.exit(main())
