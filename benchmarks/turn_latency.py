"""The cost of a conversation turn as an app pays it: ``build_context`` then ``add_turn`` (user + reply).

A scripted bilingual conversation (facts, small talk, questions) is played through one
``HybridMemory`` on a ``LocalStore`` file (WAL, ``synchronous=FULL``: every acknowledged turn is
fsynced) with the default embedder (``--embedder hashing`` takes the model out of the picture;
``--embedder use+e5:0.8`` plays it with :func:`~hybrid_memory.embeddings.use_e5_pair` at e5's share 0.8).
Reports p50/p95 per call and the whole turn. Use it to compare two versions of the library on the
same machine::

    python -m benchmarks.turn_latency --turns 200 --out benchmarks/results/turn_latency.json
    PYTHONPATH=/path/to/other/checkout python -m benchmarks.turn_latency --label before ...

``--scorer llm`` configures an :class:`~hybrid_memory.LLMImportanceScorer` over LangChain's
``ChatOpenAI`` talking to a local OpenAI-compatible server (``tests/reliability/fake_openai.py``)
that answers after ``--llm-latency`` seconds, like a small local model: ``add_turn`` keeps the
heuristic score on the caller's thread and the LLM refines it in background batches; the report
adds how long the refinements took to land after the last turn (``flush``) and what they did.
``--scorer llm-sync`` scores on the caller's thread instead (the behaviour before issue 18; use
few ``--turns``, every turn waits for the model)::

    python -m benchmarks.turn_latency --embedder hashing --scorer llm --llm-latency 1.5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

LINES = [
    "记住：我对花生过敏，任何菜都不要放花生。",
    "I prefer aisle seats on planes.",
    "今天天气不错啊",
    "My flight to Berlin is next Tuesday at 9am.",
    "What should I cook tonight?",
    "我下个月20号要去成都出差",
    "lol ok",
    "I started learning the cello last month.",
    "帮我订下周去北京的高铁票，座位怎么选？",
    "My manager Priya wants the slides by Thursday.",
]


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


@contextmanager
def _scorer(kind: str, latency: float) -> Iterator[tuple[Any, Any]]:
    """``(scorer, fake server)`` for ``kind``: ``offline`` (the default heuristic), ``llm``, ``llm-sync``."""
    if kind == "offline":
        yield None, None
        return
    from langchain_openai import ChatOpenAI

    from hybrid_memory import LLMImportanceScorer
    from hybrid_memory.llm_call import LLMCallPolicy
    from tests.reliability.fake_openai import serve

    with serve(["ok"], latency=latency) as fake:
        chat = ChatOpenAI(base_url=fake.base_url, api_key="sk-local", model="local", temperature=0, max_retries=0)
        # The fake answers 9 for the first turn of a call and 2 for the others, which the rank-agreement
        # check would (rightly) distrust: switched off so that every refinement is written (the worst case).
        scorer = LLMImportanceScorer(chat, policy=LLMCallPolicy(timeout=60.0, max_retries=0), min_rank_agreement=None)
        scorer.background = kind == "llm"
        yield scorer, fake


def run(turns: int, embedder: str, scorer: str = "offline", llm_latency: float = 1.5) -> dict[str, Any]:
    """Play ``turns`` turns with the given embedder and scorer; p50/p95 per call (see the module docstring)."""
    with _scorer(scorer, llm_latency) as (sc, fake):
        out = _run(turns, embedder, sc)
        if fake is not None:
            out.update(scorer=scorer, llm_latency_s=llm_latency, llm_requests=len(fake.requests))
        else:
            out["scorer"] = scorer
    return out


def _run(turns: int, embedder: str, scorer: Any) -> dict[str, Any]:
    from hybrid_memory import HybridMemory, LocalStore

    emb: Any = None
    if embedder == "hashing":
        from hybrid_memory.testing import HashingEmbedder

        emb = HashingEmbedder()
    elif embedder.startswith("use+e5"):  # "use+e5" (e5 at 6/7) or "use+e5:0.8"
        from hybrid_memory.embeddings import use_e5_pair

        share = embedder.partition(":")[2]
        emb = use_e5_pair(float(share)) if share else use_e5_pair()
    t0 = datetime(2025, 5, 1, 9, tzinfo=timezone.utc)
    times: dict[str, list[float]] = {"build_context": [], "add_turn": [], "turn": []}
    with tempfile.TemporaryDirectory() as d:
        mem = HybridMemory(store=LocalStore(Path(d) / "m.db"), embedder=emb, scorer=scorer, trace=False)
        mem.add_turn("warm", "w", "user", "warm up the embedder and the store")  # not timed
        mem.flush()
        for i in range(turns):
            now = t0 + timedelta(minutes=i)
            text = f"{LINES[i % len(LINES)]} ({i})"
            a = time.perf_counter()
            mem.build_context(text, user_id="u", session_id="s", now=now)
            b = time.perf_counter()
            mem.add_turn("u", "s", "user", text, timestamp=now)
            mem.add_turn("u", "s", "assistant", f"Noted ({i}).", timestamp=now)
            c = time.perf_counter()
            times["build_context"].append((b - a) * 1000)
            times["add_turn"].append((c - b) * 500)  # per add_turn call
            times["turn"].append((c - a) * 1000)
        a = time.perf_counter()
        mem.flush()  # the background refinements (LLM scorer) land
        flush_s = time.perf_counter() - a
        refined = mem.metrics(store_sizes=False).refinement
        memories = mem.store.count("u")
        mem.close()
    return {
        "turns": turns,
        "embedder": embedder,
        "memories": memories,
        "flush_after_last_turn_s": round(flush_s, 2),
        "refinement": {k: getattr(refined, k) for k in ("batches", "turns", "changed", "promoted", "fallback")},
        **{f"{k}_p50_ms": round(statistics.median(v), 2) for k, v in times.items()},
        **{f"{k}_p95_ms": round(_pct(v, 0.95), 2) for k, v in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=200)
    p.add_argument(
        "--embedder",
        default="default",
        help="default, hashing, or use+e5 / use+e5:<e5 share> (the USE + e5-small pair, use_e5_pair)",
    )
    p.add_argument("--scorer", choices=("offline", "llm", "llm-sync"), default="offline")
    p.add_argument("--llm-latency", type=float, default=1.5, help="seconds the fake model takes per call")
    p.add_argument("--label", default="this checkout")
    p.add_argument("--out", type=Path, default=None, help="append the result to this JSON list")
    args = p.parse_args(argv)
    result = {"label": args.label, **run(args.turns, args.embedder, args.scorer, args.llm_latency)}
    print(json.dumps(result))
    if args.out is not None:
        old = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps([*old, result], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
