"""How much of the previous turn a turn's search context keeps (``writer.context_words``), through the API.

``add_turn`` indexes a turn for keyword search together with the turn before it (the search
context). In the dev files that turn is short: the other speaker's line (LoCoMo), the previous
exchange (MemoryBank-CN) or, as the benchmark indexes LongMemEval (user turns only, the official
protocol), the user's previous turn. In a live chat it is usually the assistant's reply, which can
run to hundreds of words, and then the reply's words outweigh the user's own short turn in the
keyword index. The context keeps the reply's last ``n`` words (a CJK character counts as one):
the part the user's turn answers.

Measured through the API (the ``hybrid-memory bench`` runner, default configuration), for each
``n`` and for the whole turn:

* the three dev files as the benchmark indexes them (headline metric, Recall@1, nDCG@10), chosen
  on two and scored on the third (:func:`benchmarks.rerank_cv.cross_validate`, ties go to the
  whole turn);
* **LongMemEval with a live chat's context**: the same questions and user turns, each indexed with
  the assistant reply before it, as ``add_turn`` records it in a conversation.

    python -m benchmarks.context_cap --out benchmarks/results      # ~15 min on 2 cores

Writes ``context_cap.json``, ``context_cap.md`` and its section of ``experiments.md``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.feedback_cv import headline  # noqa: E402
from benchmarks.fusion_cv import HEADLINE  # noqa: E402
from benchmarks.harness import runner  # noqa: E402
from benchmarks.harness.datasets import Group, load_json  # noqa: E402
from benchmarks.harness.runner import previous_turns  # noqa: E402  (the function itself: run() patches the name)
from benchmarks.rerank_cv import cross_validate, study_main  # noqa: E402
from hybrid_memory.config import WriterConfig  # noqa: E402
from hybrid_memory.text.analyzer import last_words  # noqa: E402

SECTION_START = "<!-- context_cap: start -->"
SECTION_END = "<!-- context_cap: end -->"
WHOLE = "whole turn"
CAPS: tuple[int, ...] = (10, 20, 30, 45, 60)
LME_FILE = Path("longmemeval") / "longmemeval_s_dev60.json.gz"
METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10")


def name_of(n: int | None) -> str:
    """The row label of a cap (``None`` = the whole turn)."""
    if n is None:
        return WHOLE
    return f"{n} words (default)" if n == WriterConfig().context_words else f"{n} words"


def assistant_replies(path: Path) -> dict[tuple[str, str], str]:
    """``(question id, document id) -> the turn before that user turn`` (the assistant's reply; "" first)."""
    out: dict[tuple[str, str], str] = {}
    for entry in load_json(path):
        qid = str(entry["question_id"])
        for sid, session in zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=False):
            for i, turn in enumerate(session):
                if turn.get("role") == "user":
                    out[(qid, f"{sid}_{i + 1}")] = str(session[i - 1].get("content") or "") if i > 0 else ""
    return out


@contextlib.contextmanager
def contexts(fn: Callable[[Group], list[str]]) -> Iterator[None]:
    """Make the runner index each document with ``fn(group)`` as its search context."""
    saved = runner.previous_turns
    runner.previous_turns = lambda group, words=None: fn(group)  # type: ignore[assignment]
    try:
        yield
    finally:
        runner.previous_turns = saved


def _run(ds: Any, emb: Any) -> dict[str, float]:
    res = runner.run_benchmark(
        ds, embedder=emb, options=runner.BenchOptions(baselines=False, peers=False, tokens=False)
    )
    out = {"headline": float(res[HEADLINE[ds.name]])}
    out.update({k: float(res[k]) for k in METRICS})
    if ds.name == "longmemeval":
        out.update({k: float(res[k]) for k in ("session_recall_all@5", "session_recall_all@10")})
    return out


def run(data_dir: Path, caps: Sequence[int | None] = (None, *CAPS)) -> dict[str, Any]:
    """Every cap on the three dev files and on LongMemEval with the live context."""
    from benchmarks.__main__ import load_all
    from benchmarks.harness.cache import cached
    from hybrid_memory.embeddings import default_embedder

    data = load_all(data_dir)
    replies = assistant_replies(data_dir / LME_FILE)
    emb = cached(default_embedder())
    res: dict[str, Any] = {"dev": {}, "live": {}}
    try:
        for n in caps:
            name = name_of(n)
            with contexts(lambda g, n=n: previous_turns(g, n)):
                res["dev"][name] = {d: _run(data[d], emb) for d in HEADLINE}
            with contexts(lambda g, n=n: [last_words(replies[(g.id, d.id)], n) for d in g.docs]):
                res["live"][name] = _run(data["longmemeval"], emb)
            print(name, res["dev"][name], res["live"][name], file=sys.stderr, flush=True)
    finally:
        emb.close()
    res["cv"] = cross_validate(headline(res["dev"]), WHOLE)
    return res


def _f(v: float) -> str:
    return f"{v:.3f}"


def markdown(res: dict[str, Any]) -> str:
    """The study's report."""
    dev, live = res["dev"], res["live"]
    lines = [
        "# The search context's length (`python -m benchmarks.context_cap`)",
        "",
        (__doc__ or "").split("\n\n")[1].replace("\n", " "),
        "",
        "## The dev files as the benchmark indexes them",
        "",
        "| context | LoCoMo R@10 | LongMemEval s-all@5 | MemoryBank-CN R@5 | LoCoMo R@1 / nDCG@10 "
        "| LongMemEval R@1 / nDCG@10 | MemoryBank-CN R@1 / nDCG@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, v in dev.items():
        head = " | ".join(_f(v[d]["headline"]) for d in HEADLINE)
        fine = " | ".join(f"{_f(v[d]['recall@1'])} / {_f(v[d]['ndcg@10'])}" for d in HEADLINE)
        lines.append(f"| {name} | {head} | {fine} |")
    lines += [
        "",
        "Chosen on two datasets by the mean headline (ties go to the whole turn), scored on the third:",
        "",
        "| held out | chosen on the other two | held-out score | whole turn on it |",
        "|---|---|---|---|",
        *(f"| {d} | {c['chosen']} | {_f(c['held_out'])} | {_f(c['default'])} |" for d, c in res["cv"].items()),
        "",
        "## LongMemEval with a live chat's context (the assistant reply before each user turn)",
        "",
        "| context | s-all@5 | s-all@10 | R@1 | R@5 | R@10 | nDCG@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = ("session_recall_all@5", "session_recall_all@10", *METRICS)
    lines += [f"| {name} | " + " | ".join(_f(v[k]) for k in keys) + " |" for name, v in live.items()]
    lines += ["", "## Verdict", "", *conclusion(res), ""]
    return "\n".join(lines)


def conclusion(res: dict[str, Any]) -> list[str]:
    """What the numbers say about the default (``writer.context_words``)."""
    n = WriterConfig().context_words
    default = name_of(n)
    dev, live = res["dev"], res["live"]
    if default not in dev:
        return [f"The default ({default}) was not measured."]
    moved = max(abs(dev[default][d]["headline"] - dev[WHOLE][d]["headline"]) for d in HEADLINE)
    fine = max(abs(dev[default][d][k] - dev[WHOLE][d][k]) for d in HEADLINE for k in ("recall@1", "ndcg@10"))
    gain = live[default]["ndcg@10"] - live[WHOLE]["ndcg@10"]
    held = ", ".join(f"{d} {c['held_out']:.3f} with {c['chosen']}" for d, c in res["cv"].items())
    base = ", ".join(f"{c['default']:.3f}" for c in res["cv"].values())
    return [
        f"* Dev files, as the benchmark indexes them: the default ({n} words) keeps every headline metric within "
        f"{moved:.3f} of the whole turn, and Recall@1 and nDCG@10 within {fine:.3f}. Chosen on two and scored on the "
        f"third: {held}, against the whole turn's {base}: "
        "the dev files cannot tell a cap from the whole turn.",
        f"* LongMemEval with a live chat's context: nDCG@10 {_f(live[WHOLE]['ndcg@10'])} -> "
        f"{_f(live[default]['ndcg@10'])} ({gain:+.3f}), R@1 {_f(live[WHOLE]['recall@1'])} -> "
        f"{_f(live[default]['recall@1'])}, R@5 {_f(live[WHOLE]['recall@5'])} -> {_f(live[default]['recall@5'])}, "
        f"s-all@5 {_f(live[WHOLE]['session_recall_all@5'])} -> {_f(live[default]['session_recall_all@5'])}.",
        f"* Verdict: **kept**, at {n} words, the cap at which the dev files score as with the whole turn. Shorter "
        "caps, live s-all@5 / dev LoCoMo R@10 / dev MemoryBank-CN nDCG@10: "
        + "; ".join(
            f"{name} {_f(live[name]['session_recall_all@5'])} / {_f(dev[name]['locomo']['headline'])} / "
            f"{_f(dev[name]['memorybank']['ndcg@10'])}"
            for name in dev
            if name not in (WHOLE, default) and int(name.split()[0]) < (n or 0)
        )
        + ".",
    ]


def experiments_section(res: dict[str, Any]) -> str:
    """The short form of the study for ``experiments.md``."""
    return "\n".join(
        [
            SECTION_START,
            "## The search context's length (through the API)",
            "",
            "`writer.context_words`: the last n words of the previous turn as a turn's search context; details in "
            "[context_cap.md](context_cap.md). Reproduce: `python -m benchmarks.context_cap`.",
            "",
            *conclusion(res),
            SECTION_END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    return study_main(
        argv,
        doc=__doc__,
        name="context_cap",
        run=run,
        markdown=markdown,
        section=experiments_section,
        marks=(SECTION_START, SECTION_END),
    )


if __name__ == "__main__":
    sys.exit(main())
