"""``python -m benchmarks.misses``: the questions the default pipeline misses, with gold and top hits."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from benchmarks.harness.datasets import Dataset, Doc, Group, Question
from benchmarks.harness.metrics import Ranking
from benchmarks.harness.runner import BenchOptions, run_benchmark
from benchmarks.misses import find_misses, gold_depths, render, render_depths
from hybrid_memory.testing import HashingEmbedder

# Six exchanges about tea and one about a cat: "Which tea do I like?" finds a tea exchange first;
# "What is my pet called?" shares no word with its gold exchange, which the tea ones outrank.
_DOCS = (
    *(Doc(f"d{i}", f"I like green tea number {i} with my tea friends", session_id=f"s{i}") for i in range(6)),
    Doc("cat", "Marmalade the kitten sleeps all day", session_id="s6"),
)
_HIT = Question("hit", "Which green tea number 3 do I like?", frozenset({"d3"}), "pref", answer="number 3")
_MISS = Question("miss", "What tea do my tea friends call my pet?", frozenset({"cat"}), "pet", answer="Marmalade")
_DATA = Dataset("memorybank", "mem", (Group("u1", _DOCS, (_HIT, _MISS)),))


def test_the_runner_reports_every_scored_question_with_the_default_ranking() -> None:
    seen: list[tuple[str, int, float]] = []

    def on_question(group: Group, q: Question, ranking: Ranking, metrics: Mapping[str, float]) -> None:
        assert group.id == "u1"
        seen.append((q.id, len(ranking), metrics["recall@5"]))

    report = run_benchmark(
        _DATA,
        embedder=HashingEmbedder(),
        options=BenchOptions(alphas=(0.0,), peers=False, tokens=False, on_question=on_question),
    )
    assert [s[0] for s in seen] == ["hit", "miss"]  # once each: the default pipeline, not the bm25 baseline
    assert seen[0][2] == 1.0 and seen[1][2] == 0.0
    assert report["recall@5"] == 0.5


def test_a_miss_lists_its_gold_and_what_ranked_above_it() -> None:
    headline, misses = find_misses(_DATA, HashingEmbedder(), top=3)
    assert headline == 0.5
    assert [m.question.id for m in misses] == ["miss"]
    (m,) = misses
    assert m.score == 0.0
    assert [(g.id, g.session, g.gold) for g in m.gold] == [("cat", "s6", True)]
    assert len(m.top) == 3 and not any(h.gold for h in m.top)
    assert all(h.id.startswith("d") and "tea" in h.text for h in m.top)
    text = render("memorybank", headline, misses, chars=20)
    lines = text.splitlines()
    assert lines[0] == "memorybank: recall@5 0.500, 1 questions below 1"
    assert "Q [pet] What tea do my tea friends call my pet?  (recall@5 0.000)" in lines
    assert "  answer: Marmalade" in lines
    assert "  gold  cat (s6): Marmalade the kitte…" in lines  # 20 characters in all
    assert sum(1 for line in lines if line.startswith(("   1 ", "   2 ", "   3 "))) == 3
    assert "Which green tea" not in text  # a question scored 1 is not listed


def test_gold_depths_tells_a_gold_memory_below_the_cut_from_one_never_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # The banding is under test, not the re-rank: without the length prior the x turns (the only ones
    # with a search context) rank by their words alone.
    monkeypatch.setenv("HYBRID_MEMORY_RERANK__W_LENGTH", "0")
    docs = (
        *_DOCS,
        *(Doc(f"x{i}", f"tea garden number {i} grows tea", session_id="s7") for i in range(6)),
        Doc("x6", "the kitten is called Marmalade", session_id="s7"),  # next to x5 in the session
    )
    far = Question("far", "Which tea garden number 2 grows tea?", frozenset({"x2", "x6"}), "where")
    data = Dataset("memorybank", "mem", (Group("u1", docs, (_HIT, _MISS, far)),))
    d = gold_depths(data, HashingEmbedder(), depth=11)
    assert (d.cut, d.depth) == (5, 11)  # Recall@5's cut-off
    # d3 and x2 rank inside the cut for their questions; x6, which shares no word with its question, ranks
    # below the cut but sits next to x5, inside it; cat is not among the 11 hits, and no hit of
    # its session is inside the cut
    assert d.ranks == {"1-5": 2, "6-10": 1, "11-11": 0, "> 11": 1}
    assert d.near == {"6-10": {"1": 1, "2": 0, "3": 0, "far": 0}, "> 11": {"1": 0, "2": 0, "3": 0, "far": 1}}
    text = render_depths("memorybank", d)
    assert text.splitlines()[0] == "memorybank: where the 4 gold memories rank in the first 11 hits (cut-off 5)"
    with pytest.raises(ValueError, match="depth must exceed 10"):
        gold_depths(data, HashingEmbedder(), depth=10)
