"""The dev questions the default pipeline misses: each with its gold memories and what ranked above them.

A question is a miss when its headline metric (LoCoMo turn Recall@10, LongMemEval session
recall_all@5, MemoryBank-CN Recall@5) is below 1. The run is the default pipeline of
:func:`benchmarks.harness.runner.run_benchmark` (no baselines, peers or token counts, about a
minute per dataset with a warm embedding cache); settings come from the environment as usual, so
one variable shows what a setting changes:

    python -m benchmarks.misses longmemeval
    HYBRID_MEMORY_RERANK__W_TIME=0.4 python -m benchmarks.misses longmemeval --top 8

``--depth N`` prints instead where every gold memory ranks (:func:`gold_depths`): inside the
headline's cut-off, below it but within the first ``N``, or not among the first ``N`` at all, and
for the ones the cut-off misses, how far they sit from a hit inside it in the same session. It
tells a ranking problem (the gold memory was found, just below the cut) from a retrieval one
(neither leg brought it up):

    python -m benchmarks.misses locomo --depth 50
    python -m benchmarks.misses locomo --depth 50 --embedder use+e5-onnx
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
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


@dataclass(frozen=True)
class Depths:
    """Where a dataset's gold memories rank in the default pipeline's first ``depth`` hits.

    Attributes:
        cut: The headline's cut-off (10 for Recall@10; LongMemEval's session metric: 5, counted in turns).
        depth: How many hits one recall returned.
        ranks: Gold memories per band: ``"1-<cut>"``, ``"<cut+1>-<2 cut>"``, ``"<2 cut+1>-<depth>"``,
            ``"> <depth>"`` (a gold memory of two questions counts twice).
        near: The gold memories below the cut, by band and by how many documents they sit from the
            nearest hit inside the cut in the same session (``"1"``, ``"2"``, ``"3"``, or ``"far"``:
            further, or no hit in that session).
    """

    cut: int
    depth: int
    ranks: dict[str, int]
    near: dict[str, dict[str, int]]


def _bands(cut: int, depth: int) -> list[tuple[str, int]]:
    """``(label, last rank)`` of each band of :class:`Depths`, best first."""
    return [(f"1-{cut}", cut), (f"{cut + 1}-{2 * cut}", 2 * cut), (f"{2 * cut + 1}-{depth}", depth)]


def gold_depths(dataset: Dataset, embedder: Embedder, *, depth: int = 50) -> Depths:
    """Rank every gold memory in one default recall of ``depth`` hits per question (see :class:`Depths`).

    The recall keeps ``depth`` hits, so the re-rank scores at least that many candidates and the
    top of the ranking can differ from the headline run's by a question or two.
    """
    from benchmarks.harness.runner import BenchOptions, run_benchmark

    match = re.search(r"@(\d+)$", PRIMARY[dataset.name])
    cut = int(match.group(1)) if match else 10
    if depth <= 2 * cut:
        raise ValueError(f"depth must exceed {2 * cut} (twice the cut-off of {PRIMARY[dataset.name]})")
    bands = _bands(cut, depth)
    ranks: Counter[str] = Counter()
    near: dict[str, Counter[str]] = {}

    def on_question(group: Group, q: Question, ranking: Ranking, metrics: Mapping[str, float]) -> None:
        first: dict[str, int] = {}
        for r, ids in enumerate(ranking, 1):
            for i in ids:
                first.setdefault(i, r)
        session = group.session_of()
        place = {d.id: n for n, d in enumerate(group.docs)}
        inside = [i for i, r in first.items() if r <= cut]
        for g in sorted(q.gold):
            r = first.get(g)
            band = next((label for label, last in bands if r is not None and r <= last), f"> {depth}")
            ranks[band] += 1
            if r is not None and r <= cut:
                continue
            gaps = [abs(place[i] - place[g]) for i in inside if session.get(i) == session.get(g) and i in place]
            gap = min(gaps, default=0) if g in place else 0
            near.setdefault(band, Counter())[str(gap) if 1 <= gap <= 3 else "far"] += 1

    opts = BenchOptions(baselines=False, peers=False, tokens=False, on_question=on_question, k=depth)
    run_benchmark(dataset, embedder=embedder, options=opts)
    order = [label for label, _ in bands] + [f"> {depth}"]
    return Depths(
        cut,
        depth,
        {b: ranks[b] for b in order},
        {b: {n: near[b][n] for n in ("1", "2", "3", "far")} for b in order[1:] if b in near},
    )


def render_depths(name: str, d: Depths) -> str:
    """Plain text: the gold memories per rank band, then the missed ones by distance to a hit."""
    total = sum(d.ranks.values())
    out = [f"{name}: where the {total} gold memories rank in the first {d.depth} hits (cut-off {d.cut})"]
    out += [
        f"  {band:>9}: {n:5d} ({n / total:.1%})" if total else f"  {band:>9}: {n:5d}" for band, n in d.ranks.items()
    ]
    out.append("below the cut-off, documents from the nearest hit inside it in the same session (1 / 2 / 3 / far):")
    out += [f"  {band:>9}: {' / '.join(str(v) for v in by.values())}" for band, by in d.near.items()]
    return "\n".join(out)


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
    from benchmarks.harness.cli import EMBEDDER_NAMES, make_embedder

    p = argparse.ArgumentParser(prog="python -m benchmarks.misses", description=(__doc__ or "").splitlines()[0])
    p.add_argument("dataset", choices=sorted(PRIMARY))
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--top", type=int, default=6, help="hits shown per miss")
    p.add_argument("--chars", type=int, default=160, help="characters shown per memory")
    p.add_argument("--depth", type=int, default=None, help="print where the gold memories rank in this many hits")
    p.add_argument("--embedder", choices=EMBEDDER_NAMES, default="default", help="as hybrid-memory bench's --embedder")
    args = p.parse_args(argv)
    data = load_all(args.data_dir)
    emb = make_embedder(args.embedder)
    close = getattr(emb, "close", None)  # a ConcatEmbedder's parts keep their caches open until exit, as in bench
    try:
        if args.depth is not None:
            print(render_depths(args.dataset, gold_depths(data[args.dataset], emb, depth=args.depth)))
            return 0
        headline, misses = find_misses(data[args.dataset], emb, top=args.top)
    finally:
        if close is not None:
            close()
    print(render(args.dataset, headline, misses, chars=args.chars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
