"""Re-rank weights and guard through the API, cross-validated across the three dev datasets (issue 17 part 1).

Each variant sets ``rerank`` weights (relevance / importance / recency / heat) and the guard
(``guard_margin`` / ``guard_gap``: clearly relevant candidates stay in the top k) through the
environment (``HYBRID_MEMORY_RERANK__*``, which the runner's configuration reads) and runs the
default pipeline of :func:`benchmarks.harness.runner.run_benchmark` without baselines, peers or
token counts. Headline metric per dataset (LoCoMo turn Recall@10, LongMemEval session
recall_all@5, MemoryBank-CN Recall@5); the variant with the best mean on two datasets is scored
on the third.

    python -m benchmarks.rerank_cv --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fusion_cv import HEADLINE  # noqa: E402
from benchmarks.harness.folds import (  # noqa: E402
    finish,
    grouped_cross_validate,
    mean_chooser,
    recorder,
    section_lines,
    write_questions,
)

#: name -> (w_relevance, w_importance, w_recency, w_heat)
WEIGHTS = {
    "0.6/0.2/0.1/0.1 (default)": (0.6, 0.2, 0.1, 0.1),
    "0.5/0.2/0.2/0.1": (0.5, 0.2, 0.2, 0.1),
    "0.7/0.15/0.1/0.05": (0.7, 0.15, 0.1, 0.05),
    "0.8/0.1/0.05/0.05": (0.8, 0.1, 0.05, 0.05),
    "0.9/0.05/0.025/0.025": (0.9, 0.05, 0.025, 0.025),
    "1/0/0/0": (1.0, 0.0, 0.0, 0.0),
    "0.6/0.3/0.05/0.05": (0.6, 0.3, 0.05, 0.05),
}
#: name -> (weights, guard_margin, guard_gap): the guard on top of a weight variant.
GUARDS = {
    "default + margin 0.05": ("0.6/0.2/0.1/0.1 (default)", 0.05, None),
    "default + margin 0.1": ("0.6/0.2/0.1/0.1 (default)", 0.1, None),
    "default + margin 0.2": ("0.6/0.2/0.1/0.1 (default)", 0.2, None),
    "default + gap 0.1": ("0.6/0.2/0.1/0.1 (default)", None, 0.1),
    "default + gap 0.2": ("0.6/0.2/0.1/0.1 (default)", None, 0.2),
    "0.6/0.3/0.05/0.05 + margin 0.1": ("0.6/0.3/0.05/0.05", 0.1, None),
}
DEFAULT = "0.6/0.2/0.1/0.1 (default)"
_KEYS = ("W_RELEVANCE", "W_IMPORTANCE", "W_RECENCY", "W_HEAT", "GUARD_MARGIN", "GUARD_GAP")


def variants() -> dict[str, dict[str, str]]:
    """Every variant as the ``HYBRID_MEMORY_RERANK__*`` settings it makes (unset keys: defaults)."""
    out: dict[str, dict[str, str]] = {
        name: {key: str(w) for key, w in zip(_KEYS, weights, strict=False)} for name, weights in WEIGHTS.items()
    }
    for name, (base, margin, gap) in GUARDS.items():
        env = dict(out[base])
        if margin is not None:
            env["GUARD_MARGIN"] = str(margin)
        if gap is not None:
            env["GUARD_GAP"] = str(gap)
        out[name] = env
    return out


def run(
    data_dir: Path,
    names: list[str] | None = None,
    *,
    table: dict[str, dict[str, str]] | None = None,
    keys: tuple[str, ...] = _KEYS,
    section: str = "RERANK",
    per_question: dict[str, Any] | None = None,
) -> dict[str, dict[str, float]]:
    """Headline metric of every variant (or of ``names``) on every dataset.

    ``table``: the variants as ``HYBRID_MEMORY_<section>__<key>`` settings (default :func:`variants`);
    ``keys``: the settings a variant may make (the others are unset, i.e. the defaults);
    ``per_question``: filled with each question's headline per variant (:mod:`benchmarks.harness.folds`).
    """
    from benchmarks.__main__ import load_all
    from benchmarks.harness.cache import cached
    from benchmarks.harness.runner import BenchOptions, run_benchmark
    from hybrid_memory.embeddings import default_embedder

    data = load_all(data_dir)
    emb = cached(default_embedder())
    opts = BenchOptions(baselines=False, peers=False, tokens=False)
    var = {k: f"HYBRID_MEMORY_{section}__{k}" for k in keys}
    saved = {k: os.environ.get(v) for k, v in var.items()}
    scores: dict[str, dict[str, float]] = {}
    try:
        for name, env in (variants() if table is None else table).items():
            if names is not None and name not in names:
                continue
            for key in keys:
                if key in env:
                    os.environ[var[key]] = env[key]
                else:
                    os.environ.pop(var[key], None)
            scores[name] = {}
            for d, metric in HEADLINE.items():
                hook = recorder(per_question, name, d, metric) if per_question is not None else None
                report = run_benchmark(data[d], embedder=emb, options=replace(opts, on_question=hook))
                scores[name][d] = float(report[metric])
            print(name, scores[name], file=sys.stderr, flush=True)
    finally:
        emb.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(var[key], None)
            else:
                os.environ[var[key]] = value
    return scores


def cross_validate(scores: dict[str, dict[str, float]], default: str = DEFAULT) -> dict[str, Any]:
    """Choose on two datasets (best mean headline, ties to ``default``), score the third."""
    out: dict[str, Any] = {}
    for held in HEADLINE:
        train = [d for d in HEADLINE if d != held]
        best = max(scores, key=lambda n: (sum(scores[n][d] for d in train), n == default))
        out[held] = {"chosen": best, "held_out": scores[best][held], "default": scores[default][held]}
    return out


def within_datasets(per_question: dict[str, Any], default: str = DEFAULT) -> dict[str, Any]:
    """The variants cross-validated within each dataset (best mean on the other folds, ties to ``default``)."""
    return grouped_cross_validate(finish(per_question), choose=mean_chooser(default), reference=default)


def grouped_lines(grouped: dict[str, Any]) -> list[str]:
    """Markdown lines: the within-dataset cross-validation of a study, and what it does not decide."""
    return [
        *section_lines(grouped, ties="ties to the default"),
        "",
        "A default changes by the leave-one-dataset-out rule above (no held-out drop, one rise); these folds are the "
        "second estimate, reported beside it.",
    ]


def cv_tables(
    scores: dict[str, dict[str, float]], cv: dict[str, Any], label: str, verdict_of: Callable[[str], str] | None = None
) -> list[str]:
    """Markdown lines: every variant's headline scores and mean (and ``verdict_of`` it), then the cross-validation."""
    extra = (" verdict |", "---|") if verdict_of is not None else ("", "")
    lines = [
        f"| {label} | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | mean |{extra[0]}",
        f"|---|---|---|---|---|{extra[1]}",
    ]
    for n, s in scores.items():
        mean = sum(s.values()) / len(s)
        tail = f" {verdict_of(n)} |" if verdict_of is not None else ""
        lines.append(f"| {n} | {s['locomo']:.3f} | {s['longmemeval']:.3f} | {s['memorybank']:.3f} | {mean:.3f} |{tail}")
    lines += ["", "| held out | chosen on the other two | held-out score | default on it |", "|---|---|---|---|"]
    for d, c in cv.items():
        lines.append(f"| {d} | {c['chosen']} | {c['held_out']:.3f} | {c['default']:.3f} |")
    return lines


def markdown(scores: dict[str, dict[str, float]], cv: dict[str, Any], grouped: dict[str, Any] | None = None) -> str:
    lines = [
        "# Re-rank weights and guard through the API, cross-validated (`python -m benchmarks.rerank_cv`)",
        "",
        "Default pipeline (`HybridMemory.recall`, alpha 0.4, query centring 0.75, search context, time windows), "
        "default embedder; "
        "weights relevance / importance / recency / heat; guard: `margin m` keeps every candidate whose "
        "relevance is within m of the best one in the top k, `gap g` keeps the store's own top k candidates "
        "whose relevance exceeds candidate k + 1's by g (`rerank.guard_margin` / `rerank.guard_gap`); "
        "headline metric per dataset.",
        "",
        *cv_tables(scores, cv, "weights"),
        *(["", *grouped_lines(grouped)] if grouped else []),
    ]
    kept = [n for n in scores if "**kept**" in verdict(n, scores, cv)]
    lines += [
        "",
        f"Kept: {', '.join(kept)}."
        if kept
        else "Kept: nothing. No variant scores above the default on a dataset left out, so the defaults stay "
        "(weights 0.6/0.2/0.1/0.1, guard off); the guard remains an option (`rerank.guard_margin` / "
        "`rerank.guard_gap`).",
        "",
    ]
    return "\n".join(lines)


#: Markers of the section this script keeps in experiments.md (the rest of that file is ``benchmarks.experiments``').
SECTION_START = "<!-- rerank_cv: start -->"
SECTION_END = "<!-- rerank_cv: end -->"


def verdict(name: str, scores: dict[str, dict[str, float]], cv: dict[str, Any], default: str = DEFAULT) -> str:
    """What became of a variant: kept only if chosen and its held-out scores gain and never drop."""
    chosen_in = [d for d, c in cv.items() if c["chosen"] == name]
    drops = [d for d in chosen_in if cv[d]["held_out"] < cv[d]["default"]]
    gains = [d for d in chosen_in if cv[d]["held_out"] > cv[d]["default"]]
    if name == default:
        return "reference (the default)"
    if gains and not drops:
        return f"chosen when {', '.join(chosen_in)} is held out, held-out gain on {', '.join(gains)}: **kept**"
    if chosen_in and not drops:
        return (
            f"chosen when {', '.join(chosen_in)} is held out, but scores there as the default does "
            "(no cross-validated gain): not kept"
        )
    if chosen_in:
        return f"chosen when {', '.join(chosen_in)} is held out, held-out drop on {', '.join(drops)}: not kept"
    worse = [d for d in HEADLINE if scores[name][d] < scores[default][d]]
    if worse:
        return f"below the default on {', '.join(worse)}: not kept"
    if all(scores[name][d] == scores[default][d] for d in HEADLINE):
        return "same scores as the default on every dataset: not kept"
    return "not chosen on any two datasets: not kept"


def section_rows(
    scores: dict[str, dict[str, float]],
    cv: dict[str, Any],
    names: list[str],
    default: str,
    verdict_of: Callable[[str], str] | None = None,
) -> list[str]:
    """The experiments.md table of ``names`` (those scored): headline per dataset and the verdict.

    ``verdict_of``: a study's own verdict per name (default :func:`verdict` against ``default``).
    """
    lines = [
        "| variant | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | verdict |",
        "|---|---:|---:|---:|---|",
    ]
    for name in names:
        if name in scores:
            s = scores[name]
            lines.append(
                f"| `{name}` | {s['locomo']:.3f} | {s['longmemeval']:.3f} | {s['memorybank']:.3f} | "
                f"{(verdict_of or (lambda n: verdict(n, scores, cv, default)))(name)} |"
            )
    return lines


def experiments_section(scores: dict[str, dict[str, float]], cv: dict[str, Any]) -> str:
    """The guard rows for experiments.md (each idea measured alone, with its cross-validated fate)."""
    lines = [
        SECTION_START,
        "## Re-rank guard (through the API, cross-validated)",
        "",
        "Default pipeline with the default weights and one guard each (`rerank.guard_margin` / `guard_gap`: the "
        "clearly relevant candidates rank first, at most k); headline metric per dataset; chosen on two datasets, "
        "scored on the third; details in [rerank_cv.md](rerank_cv.md). Reproduce: `python -m benchmarks.rerank_cv`.",
        "",
        *section_rows(scores, cv, [DEFAULT, *GUARDS], DEFAULT),
    ]
    return "\n".join([*lines, SECTION_END])


def update_experiments(path: Path, section: str, start: str = SECTION_START, end: str = SECTION_END) -> None:
    """Replace the section between the markers ``start`` and ``end`` of ``path`` (or append it)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def study_main(
    argv: list[str] | None,
    *,
    doc: str | None,
    name: str,
    run: Callable[..., Any],
    markdown: Callable[[Any], str],
    section: Callable[[Any], str],
    marks: tuple[str, str],
    data_dir: bool = True,
) -> int:
    """The command line of a study: run it (or ``--render`` a saved ``<name>.json``), print its report.

    With ``--out``, writes ``<name>.json`` and ``<name>.md`` there and replaces the study's section
    (between ``marks``) of ``experiments.md``; a run's per-question scores (its result's
    ``"_questions"``, :mod:`benchmarks.harness.folds`) go to ``<name>_questions.json``, not into
    ``<name>.json``. ``run`` takes ``--data-dir`` when ``data_dir``.
    """
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    if data_dir:
        p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--render", type=Path, default=None, help=f"no run: render this {name}.json")
    args = p.parse_args(argv)
    run_args = (args.data_dir,) if data_dir else ()
    res = json.loads(args.render.read_text()) if args.render is not None else run(*run_args)
    per_question = res.pop("_questions", None)
    text = markdown(res)
    print(text)
    if args.out is not None:
        (args.out / f"{name}.json").write_text(json.dumps(res, indent=2) + "\n")
        if per_question:
            write_questions(args.out / f"{name}_questions.json", per_question)
        (args.out / f"{name}.md").write_text(text)
        update_experiments(args.out / "experiments.md", section(res), *marks)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument(
        "--only", choices=("all", "weights", "guards"), default="all", help="run these variants only (a part of a run)"
    )
    p.add_argument(
        "--scores",
        type=Path,
        nargs="+",
        default=None,
        help="no run: merge the scores of these rerank_cv.json files (parts run with --only) and cross-validate "
        "(one file: re-render it, its within-dataset folds included)",
    )
    args = p.parse_args(argv)
    grouped: dict[str, Any] | None = None
    per_question: dict[str, Any] = {}
    if args.scores is not None:
        scores = {}
        for path in args.scores:
            saved = json.loads(path.read_text())
            scores.update(saved["scores"])
            if len(args.scores) == 1:  # one complete run: its within-dataset folds still hold
                grouped = saved.get("grouped_cross_validated")
        scores = {n: scores[n] for n in variants() if n in scores}
    else:
        names = {"all": None, "weights": list(WEIGHTS), "guards": [DEFAULT, *GUARDS]}[args.only]
        scores = run(args.data_dir, names, per_question=per_question)
        grouped = within_datasets(per_question)
    cv = cross_validate(scores)
    text = markdown(scores, cv, grouped)
    print(text)
    if args.out is not None:
        result = {"scores": scores, "cross_validated": cv, "grouped_cross_validated": grouped}
        (args.out / "rerank_cv.json").write_text(json.dumps(result, indent=2) + "\n")
        if per_question:
            write_questions(args.out / "rerank_cv_questions.json", per_question)
        (args.out / "rerank_cv.md").write_text(text)
        update_experiments(args.out / "experiments.md", experiments_section(scores, cv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
