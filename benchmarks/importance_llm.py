"""Agreement of the importance scorers with the 246 + 60 hand-labelled turns: heuristic, LLM, combined.

* **heuristic**: :class:`~hybrid_memory.HeuristicImportanceScorer` (offline default);
* **LLM (raw)**: :class:`~hybrid_memory.LLMImportanceScorer` with ``sanity_checks=False``, every
  valid answer trusted (turns the model could not score at all still fall back, as in production);
* **combined**: the LLM scorer as shipped, whose sanity checks (a call with one score for >= 3
  turns, 6 identical scores in a row, rank agreement with the heuristic below 0.2 over 48 turns, a
  hard signal scored below the key-frame threshold) fall back to the heuristic, with a reason.

Spearman rank correlation with the labels (1-10), per label file. The model is any
OpenAI-compatible server (``--base-url``, e.g. llama.cpp's ``llama_cpp.server``), or the scripted
local server of ``tests/reliability/fake_openai.py`` (``--fake junk``: the same score for every
turn)::

    python -m benchmarks.importance_llm --fake junk
    python -m benchmarks.importance_llm --base-url http://127.0.0.1:18091/v1 --model smollm2
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("importance_labels.jsonl", "importance_labels_holdout.jsonl")


def _rows(name: str) -> list[dict[str, Any]]:
    with (ROOT / "tests" / "data" / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run(base_url: str | None, model: str, fake: str | None, method: str, batch_size: int) -> dict[str, Any]:
    """Score every labelled turn with the three scorers; Spearman per label file."""
    from langchain_openai import ChatOpenAI

    from hybrid_memory import HeuristicImportanceScorer, LLMImportanceScorer
    from hybrid_memory.llm_call import LLMCallPolicy
    from hybrid_memory.write.importance import spearman

    out: dict[str, Any] = {"model": model if fake is None else f"fake:{fake}", "method": method, "sets": {}}
    with ExitStack() as stack:
        if fake is not None:
            from tests.reliability.fake_openai import serve

            base_url = stack.enter_context(serve([fake])).base_url
        from langchain_core.caches import InMemoryCache

        # The raw and the combined scorer send the same calls: the second one replays the first's answers.
        chat = ChatOpenAI(
            base_url=base_url, api_key="sk-local", model=model, temperature=0, max_retries=0, cache=InMemoryCache()
        )
        policy = LLMCallPolicy(timeout=120.0, max_retries=0)
        kw: dict[str, Any] = {"method": method, "batch_size": batch_size, "policy": policy, "cache_size": 0}
        for name in LABELS:
            rows = _rows(name)
            texts, roles = [r["text"] for r in rows], [r["role"] for r in rows]
            labels = [float(r["label"]) for r in rows]
            heuristic = HeuristicImportanceScorer().score(texts, roles=roles)
            raw = LLMImportanceScorer(chat, sanity_checks=False, **kw).score(texts, roles=roles)
            combined = LLMImportanceScorer(chat, **kw).score(texts, roles=roles)
            reasons = Counter(_reason(x.note) for x in combined.items if x.note)
            out["sets"][name] = {
                "turns": len(rows),
                "heuristic": round(spearman(labels, [x.importance for x in heuristic.items]), 3),
                "llm_raw": round(spearman(labels, [x.importance for x in raw.items]), 3),
                "combined": round(spearman(labels, [x.importance for x in combined.items]), 3),
                "raw_unscored_turns": int(raw.details.get("fallback", "0")),
                "combined_fallback_turns": int(combined.details.get("fallback", "0")),
                "combined_reasons": dict(reasons),
                "llm_calls": int(combined.details.get("llm_calls", "0")),
            }
    return out


def _reason(note: str | None) -> str:
    text = note or ""
    for key in ("degenerate answer", "degenerate answers", "rank agreement", "hard signal", "model call failed"):
        if key in text:
            return key
    return "model returned no valid score" if "no valid score" in text else "other"


def main(argv: list[str] | None = None) -> int:
    """Print the agreement table as JSON (and write it to ``--out``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint (…/v1)")
    p.add_argument("--model", default="local")
    p.add_argument("--fake", choices=("ok", "junk"), default=None, help="use the scripted local server instead")
    p.add_argument("--method", choices=("json_mode", "function_calling"), default="json_mode")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out", type=Path, default=None, help="append the result to this JSON list")
    args = p.parse_args(argv)
    if (args.base_url is None) == (args.fake is None):
        p.error("give exactly one of --base-url and --fake")
    result = run(args.base_url, args.model, args.fake, args.method, args.batch_size)
    print(json.dumps(result, ensure_ascii=False, indent=1))
    if args.out is not None:
        old = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps([*old, result], indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
