"""The dev questions the default pipeline misses: each with its gold memories and what ranked above them.

A question is a miss when its headline metric (LoCoMo turn Recall@10, LongMemEval session
recall_all@5, MemoryBank-CN Recall@5) is below 1. The run is the default pipeline of
:func:`benchmarks.harness.runner.run_benchmark` (no baselines, peers or token counts, about a
minute per dataset with a warm embedding cache); settings come from the environment as usual, so
one variable shows what a setting changes:

    python -m benchmarks.misses longmemeval
    HYBRID_MEMORY_RERANK__W_TIME=0.4 python -m benchmarks.misses longmemeval --top 8
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.datasets import Dataset, Group, Question  # noqa: E402
from benchmarks.harness.metrics import PRIMARY, Ranking  # noqa: E402
from hybrid_memory.embeddings import Embedder  # noqa: E402

#: Gold memories listed per miss (a LongMemEval question may have dozens).
GOLD_SHOWN = 6


@dataclass(frozen=True)
class Shown:
    """One memory as a miss lists it: dataset id, session, whether it is gold, its text."""

    id: str
    session: str
    gold: bool
    text: str


@dataclass(frozen=True)
class Miss:
    """A question whose headline metric is below 1.

    Attributes:
        question: The question.
        score: Its headline metric.
        gold: Its gold memories (at most :data:`GOLD_SHOWN`, by id).
        top: The default pipeline's first hits, best first.
    """

    question: Question
    score: float
    gold: tuple[Shown, ...]
    top: tuple[Shown, ...]


def miss_of(group: Group, q: Question, ranking: Ranking, score: float, top: int) -> Miss:
    """The :class:`Miss` of ``q`` (a hit that stands for several documents shows the first by id)."""
    docs = {d.id: d for d in group.docs}
    session = group.session_of()

    def shown(doc_id: str, gold: bool) -> Shown:
        d = docs.get(doc_id)
        return Shown(doc_id, session.get(doc_id, doc_id), gold, d.text if d is not None else "?")

    gold = tuple(shown(i, True) for i in sorted(q.gold)[:GOLD_SHOWN])
    hits = tuple(shown(sorted(ids)[0], bool(ids & q.gold)) for ids in ranking[:top] if ids)
    return Miss(q, score, gold, hits)


def find_misses(dataset: Dataset, embedder: Embedder, *, top: int = 6) -> tuple[float, list[Miss]]:
    """The dataset's headline metric and its misses, in question order."""
    from benchmarks.harness.runner import BenchOptions, run_benchmark

    metric = PRIMARY[dataset.name]
    misses: list[Miss] = []

    def on_question(group: Group, q: Question, ranking: Ranking, metrics: Mapping[str, float]) -> None:
        if metrics.get(metric, 1.0) < 1.0:
            misses.append(miss_of(group, q, ranking, metrics[metric], top))

    opts = BenchOptions(baselines=False, peers=False, tokens=False, on_question=on_question)
    report = run_benchmark(dataset, embedder=embedder, options=opts)
    return float(report[metric]), misses


def _line(text: str, chars: int) -> str:
    flat = " / ".join(part.strip() for part in text.splitlines() if part.strip())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def render(name: str, headline: float, misses: list[Miss], *, chars: int = 160) -> str:
    """Plain text: the headline, then each miss with its gold memories and the first hits."""
    metric = PRIMARY[name]
    out = [f"{name}: {metric} {headline:.3f}, {len(misses)} questions below 1"]
    for m in misses:
        q = m.question
        when = f", asked {q.date:%Y-%m-%d %H:%M}" if q.date is not None else ""
        out += ["", f"Q [{q.category}{when}] {q.text}  ({metric} {m.score:.3f})"]
        if q.answer:
            out.append(f"  answer: {_line(q.answer, chars)}")
        extra = len(q.gold) - len(m.gold)
        out += [f"  gold  {g.id} ({g.session}): {_line(g.text, chars)}" for g in m.gold]
        if extra > 0:
            out.append(f"  ... and {extra} more gold")
        for rank, h in enumerate(m.top, 1):
            mark = "GOLD" if h.gold else "    "
            out.append(f"  {rank:>2} {mark} {h.id} ({h.session}): {_line(h.text, chars)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.__main__ import load_all
    from benchmarks.harness.cache import CachedEmbedder
    from hybrid_memory.embeddings import default_embedder

    p = argparse.ArgumentParser(prog="python -m benchmarks.misses", description=(__doc__ or "").splitlines()[0])
    p.add_argument("dataset", choices=sorted(PRIMARY))
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--top", type=int, default=6, help="hits shown per miss")
    p.add_argument("--chars", type=int, default=160, help="characters shown per memory")
    args = p.parse_args(argv)
    data = load_all(args.data_dir)
    emb = CachedEmbedder(default_embedder())
    try:
        headline, misses = find_misses(data[args.dataset], emb, top=args.top)
    finally:
        emb.close()
    print(render(args.dataset, headline, misses, chars=args.chars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
