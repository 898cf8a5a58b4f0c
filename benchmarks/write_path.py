"""Write-path benchmark: importance-scorer agreement, ingest speed with dedup, amnesia rate.

Usage::

    python -m benchmarks.write_path                      # all three, writes results/importance.md
    python -m benchmarks.write_path --skip-amnesia --ingest-n 20000

* **Scorer agreement**: Spearman rank correlation of :class:`HeuristicImportanceScorer` with the
  hand labels in ``tests/data/importance_labels.jsonl`` (246 turns, tuned on) and
  ``tests/data/importance_labels_holdout.jsonl`` (60 turns, not tuned on).
* **Ingest with dedup**: ``HybridMemory.remember_many`` through the public API with precomputed
  vectors (a cached embedder, so only the write path is timed: PII redaction, batch cosine dedup
  against the user's vectors, conflict checks, LocalStore upsert). Real text: every LoCoMo dev
  turn with its USE vector from the bench cache (``benchmarks.harness.cache``); scale: synthetic
  clustered 512-d vectors.
* **Amnesia**: runs ``tests/unit/test_amnesia.py`` and reads the rate it reports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.embeddings import CallableEmbedder
from hybrid_memory.write.importance import HeuristicImportanceScorer, spearman

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10_dev.json"


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (DATA / name).read_text(encoding="utf-8").splitlines() if x.strip()]


def agreement() -> dict[str, Any]:
    s = HeuristicImportanceScorer()
    out: dict[str, Any] = {}
    for name in ("importance_labels.jsonl", "importance_labels_holdout.jsonl"):
        rows = load(name)
        pred = [s.score_one(r["text"], r["role"]).importance for r in rows]
        gold = [float(r["label"]) for r in rows]
        entry: dict[str, Any] = {"n": len(rows), "spearman": spearman(pred, gold)}
        for lang in ("zh", "en"):
            idx = [i for i, r in enumerate(rows) if r["lang"] == lang]
            entry[f"spearman_{lang}"] = spearman([pred[i] for i in idx], [gold[i] for i in idx])
        kinds: dict[str, list[tuple[float, float]]] = {}
        for p, r in zip(pred, rows, strict=True):
            kinds.setdefault(r["kind"], []).append((p, float(r["label"])))
        entry["by_kind"] = {
            k: {
                "n": len(v),
                "label": sum(g for _, g in v) / len(v),
                "predicted_1_10": 1 + 9 * sum(p for p, _ in v) / len(v),
            }
            for k, v in sorted(kinds.items())
        }
        out[name] = entry
    return out


def _ingest(texts: list[str], vectors: np.ndarray, batch: int) -> dict[str, Any]:
    table = {t: v for t, v in zip(texts, vectors, strict=True)}
    dim = vectors.shape[1]
    emb = CallableEmbedder(
        lambda ts: np.stack([table.get(t, np.ones(dim, np.float32)) for t in ts]), name="precomputed"
    )
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    items = [{"content": t, "importance": 0.5, "timestamp": t0 + timedelta(seconds=i)} for i, t in enumerate(texts)]
    start, cpu = time.perf_counter(), time.process_time()
    outcomes = mem.remember_many("bench-user", items, batch_size=batch, progress=False)
    dt, cpu_dt = time.perf_counter() - start, time.process_time() - cpu
    actions = Counter(o.action for o in outcomes)
    stored = mem.store.count("bench-user")
    mem.close()
    return {
        "n": len(texts),
        "seconds": dt,
        "per_second": len(texts) / dt,
        "cpu_seconds": cpu_dt,
        "actions": dict(actions),
        "stored": stored,
    }


def ingest_locomo(batch: int) -> dict[str, Any] | None:
    if not LOCOMO.exists():
        return None
    from benchmarks.harness.cache import CachedEmbedder
    from hybrid_memory.embeddings import UniversalSentenceEncoder

    texts: list[str] = []
    for conv in json.loads(LOCOMO.read_text(encoding="utf-8")):
        c = conv["conversation"]
        for k, v in c.items():
            if k.startswith("session_") and isinstance(v, list):
                texts.extend(f"{turn['speaker']}: {turn['text']}" for turn in v)
    emb = CachedEmbedder(UniversalSentenceEncoder())
    vecs = emb.embed_documents(texts)
    emb.close()
    uniq = dict(zip(texts, vecs, strict=True))
    res = _ingest(list(uniq), np.stack(list(uniq.values())), batch)
    res["source"] = f"LoCoMo dev turns ({len(texts)} turns, {len(uniq)} distinct texts), USE vectors"
    return res


def ingest_synthetic(n: int, batch: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    dim = 512
    centers = rng.standard_normal((max(1, n // 25), dim)).astype(np.float32)
    vecs = centers[rng.integers(0, len(centers), n)] * 0.6 + rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)

    def word(k: int) -> str:
        out = ""
        for _ in range(3):
            out += "bcdfghjklmnpqrstvwz"[k % 19] + "aeiou"[(k // 19) % 5]
            k //= 95
        return out

    # digit-free texts (numbers would make the conflict judge see "changed numbers")
    texts = [" ".join(word(int(x)) for x in rng.integers(0, 95**3, 6)) for _ in range(n)]
    # 5 % of the items restate an earlier one: same words plus a filler, a near-identical vector
    dup = rng.choice(np.arange(n // 2, n), size=n // 20, replace=False)
    reuse: Counter[int] = Counter()
    for d in dup.tolist():
        src = int(rng.integers(0, n // 2))
        reuse[src] += 1
        texts[d] = texts[src] + " (again" + " and again" * (reuse[src] - 1) + ")"
        vecs[d] = vecs[src] + 0.01 * rng.standard_normal(dim).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    res = _ingest(texts, vecs, batch)
    res["source"] = f"synthetic: {n} clustered 512-d vectors, 5 % near-duplicates"
    return res


def amnesia() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "amnesia.json"
        env = {**os.environ, "HYBRID_MEMORY_AMNESIA_REPORT": str(out)}
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_amnesia.py"],
            cwd=ROOT,
            env=env,
            check=False,
            capture_output=True,
        )
        return dict(json.loads(out.read_text(encoding="utf-8")))


def render(report: dict[str, Any]) -> str:
    lines = ["# Write path: importance scoring, ingest with dedup, amnesia", ""]
    lines.append(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average at start "
        f"{report['load']:.1f} (shared with other jobs; speeds are lower bounds). Generated by "
        "`python -m benchmarks.write_path`."
    )
    lines += ["", "## Heuristic importance scorer vs hand labels (Spearman)", ""]
    lines.append("| label set | turns | Spearman | zh | en |")
    lines.append("|---|---|---|---|---|")
    for name, e in report["agreement"].items():
        tag = "tuned on" if "holdout" not in name else "held out"
        lines.append(
            f"| `{name}` ({tag}) | {e['n']} | **{e['spearman']:.3f}** | {e['spearman_zh']:.3f} | {e['spearman_en']:.3f} |"
        )
    lines += [
        "",
        "Labels are 1-10, written for this project by the write-path engineer (preferences, constraints, "
        "facts, plans, decisions, feelings, questions, small talk, pleasantries, assistant chatter; half "
        "Chinese, half English). The rules were adjusted while looking at the first set, so its number is "
        "optimistic; the held-out set was labelled before the last rule changes and never used for tuning.",
        "",
        "Mean label vs mean prediction (1-10 scale) per kind, tuned set:",
        "",
        "| kind | n | label | predicted |",
        "|---|---|---|---|",
    ]
    for k, v in report["agreement"]["importance_labels.jsonl"]["by_kind"].items():
        lines.append(f"| {k} | {v['n']} | {v['label']:.1f} | {v['predicted_1_10']:.1f} |")
    lines += ["", "## Ingest with dedup (`remember_many`, precomputed vectors)", ""]
    lines.append("| data | memories | wall s | memories/s (wall) | CPU s | outcomes | stored |")
    lines.append("|---|---|---|---|---|---|---|")
    for r in report["ingest"]:
        acts = ", ".join(f"{k} {v}" for k, v in sorted(r["actions"].items()))
        lines.append(
            f"| {r['source']} | {r['n']} | {r['seconds']:.2f} | **{r['per_second']:.0f}** | {r['cpu_seconds']:.2f} "
            f"| {acts} | {r['stored']} |"
        )
    lines += [
        "",
        "Each batch (256) is compared with one matrix product against the user's cached active vectors "
        "(no search per item); candidates above the conflict threshold go to the heuristic judge. The "
        "LocalStore upsert (SQLite + analyzer) is included in the time. Wall time on this shared machine "
        "is about three times the CPU time; the ≥ 5,000/s target is not reached: the largest costs are "
        "the LocalStore analyzer (`_is_cjk`, a per-character scan over code-point ranges, about 40 % of "
        "the CPU time) and the dedup matrix product, which grows with the user's memory count "
        "(O(N²) over a whole ingest).",
        "",
        "## Amnesia (tests/unit/test_amnesia.py)",
        "",
    ]
    a = report.get("amnesia")
    if a:
        lines.append(
            f"{a['facts']} bilingual facts, preferences and constraints told through `add_turn` on day 1 with small talk "
            f"around them; a new session on day 3 asks about each. Offline defaults (USE embedder, LocalStore, "
            f"heuristic scorer). **Amnesia rate {a['amnesia_rate']:.1%}** ({len(a['missing'])} missing"
            + (": " + "; ".join(a["missing"]) if a["missing"] else "")
            + ")."
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ingest-n", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--skip-amnesia", action="store_true")
    p.add_argument("--skip-locomo", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "importance.md")
    args = p.parse_args(argv)
    report: dict[str, Any] = {"load": os.getloadavg()[0], "agreement": agreement(), "ingest": []}
    if not args.skip_locomo:
        loc = ingest_locomo(args.batch)
        if loc is not None:
            report["ingest"].append(loc)
    report["ingest"].append(ingest_synthetic(args.ingest_n, args.batch))
    if not args.skip_amnesia:
        report["amnesia"] = amnesia()
    args.out.write_text(render(report), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
