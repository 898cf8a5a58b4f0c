"""``python -m benchmarks.misses``: the questions the default pipeline misses, with gold and top hits."""

from __future__ import annotations

from collections.abc import Mapping

from benchmarks.harness.datasets import Dataset, Doc, Group, Question
from benchmarks.harness.metrics import Ranking
from benchmarks.harness.runner import BenchOptions, run_benchmark
from benchmarks.misses import find_misses, render
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
