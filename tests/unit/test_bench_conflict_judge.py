"""The conflict-judge benchmark's stratified sample and tally (``benchmarks/conflict_judge.py``)."""

from __future__ import annotations

from collections import Counter

from benchmarks.conflict_judge import load_pairs, replayed, stratified, tally
from hybrid_memory.write.conflict import Verdict


def test_every_prefix_of_the_stratified_order_is_a_stratified_sample() -> None:
    pairs = load_pairs()
    strata = Counter((p["category"], p["lang"]) for p in pairs)
    order = stratified(pairs)

    assert sorted(p["id"] for p in order) == sorted(p["id"] for p in pairs)  # a permutation
    assert stratified(pairs, 120) == order[:120]
    assert stratified(pairs, 120, seed=1) != order[:120]
    assert set(Counter((p["category"], p["lang"]) for p in order[: len(strata)])) == set(strata)  # each once
    for n in (60, 120, 200, 300):
        got = Counter((p["category"], p["lang"]) for p in order[:n])
        for k, size in strata.items():
            assert abs(got[k] - n * size / len(pairs)) < 1  # in proportion


def test_tally_counts_false_supersedes_and_missed_updates() -> None:
    pairs = [
        {"label": "update", "category": "numeric", "lang": "en", "old": "a", "new": "b"},
        {"label": "update", "category": "numeric", "lang": "en", "old": "c", "new": "d"},
        {"label": "distinct", "category": "identifier", "lang": "zh", "old": "e", "new": "f"},
    ]
    verdicts = [Verdict("contradicts"), Verdict("unrelated"), Verdict("contradicts")]
    res = tally(pairs, verdicts)

    overall = res["groups"]["overall"]
    assert (overall["missed_updates"], overall["updates"]) == (1, 2)
    assert (overall["false_supersedes"], overall["non_updates"]) == (1, 1)
    assert [e["new"] for e in res["errors"]] == ["d", "f"]


def test_replay_puts_recorded_model_answers_through_the_sanity_checks() -> None:
    pairs = [
        {"old": "I booked room 301", "new": "I booked room 302"},
        {"old": "I have 2 cats", "new": "I have 3 cats"},
        {"old": "I eat meat", "new": "I no longer eat meat"},
    ]
    recorded = [
        Verdict("contradicts", "...", "llm"),
        Verdict("compatible", "x (LLM judge failed: timeout; heuristic used)", "heuristic"),
        Verdict("contradicts", "...", "llm"),
    ]
    out = replayed(pairs, recorded)
    assert (out[0].relation, out[0].judge) == ("compatible", "heuristic")  # hard signal: different identifiers
    assert out[1] == recorded[1]  # not answered by the model: the recorded fallback
    assert (out[2].relation, out[2].judge) == ("contradicts", "llm")
