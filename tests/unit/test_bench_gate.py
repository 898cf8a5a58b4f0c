"""The gate study's rules: the floor as the library applies it, and the rules tried beside the calibrated gate."""

from __future__ import annotations

from benchmarks.gate import (
    Case,
    Hit,
    context_only,
    floor_bonus_rule,
    floor_rule,
    gap_variant,
    preference_variant,
    score,
    score_cases,
)

CHOSEN = (0.44, 0.4, 0.3, 0.15)


def hit(cos: float, *, bm25: float = 0.0, overlap: float = 0.0, gold: bool = False, pref: bool = False) -> Hit:
    return (cos, bm25, overlap, False, gold, 0.5, pref)


def test_the_floor_counts_bm25_only_with_a_query_term_in_the_memory_itself() -> None:
    rule = floor_rule(0.2, 0.5)
    assert rule(hit(0.25)) and rule(hit(0.1, bm25=0.9, overlap=0.5))
    assert not rule(hit(0.1, bm25=0.9, overlap=0.0))  # its search context matched, not the memory
    cases = [Case("locomo", True, (hit(0.1, bm25=0.9), hit(0.1, bm25=0.9, gold=True), hit(0.5, bm25=0.9)))]
    assert context_only(cases) == {"candidates": 2, "gold": 1}


def test_a_top_hit_that_stands_out_passes_and_one_in_a_crowd_does_not() -> None:
    rule = gap_variant(CHOSEN, 0.15, 0.1)
    alone = Case("probe", True, (hit(0.2, gold=True), *(hit(0.01) for _ in range(9))))
    crowd = Case("probe", False, (hit(0.2), *(hit(0.15) for _ in range(9))))
    assert any(rule(alone)(h) for h in alone.hits)
    assert not any(rule(crowd)(h) for h in crowd.hits)
    assert score_cases([alone, crowd], rule) == {
        "relevant_top": 1,
        "false_skip": 0.0,
        "no_relevant": 1,
        "false_inject": 0.0,
    }
    # The calibrated gate alone skips the first question (cosine 0.2 < 0.44).
    assert score([alone, crowd], lambda h: h[0] >= 0.44)["false_skip"] == 1.0


def test_preferences_get_the_lower_bar() -> None:
    case = Case("probe", True, (hit(0.35, pref=True, gold=True), hit(0.35)))
    rule = preference_variant(CHOSEN, 0.3)(case)
    assert rule(case.hits[0]) and not rule(case.hits[1])


def test_the_cross_lingual_bonus_lifts_only_memories_in_the_other_language() -> None:
    other_language = (0.13, 0.0, 0.0, True, True, 0.5, False)
    same_language = (0.13, 0.0, 0.0, False, False, 0.5, False)
    assert not floor_bonus_rule(0.0)(other_language)
    assert floor_bonus_rule(0.1)(other_language) and not floor_bonus_rule(0.1)(same_language)


def test_the_study_scores_the_shipped_gate_beside_the_tuned_one_and_names_the_embedder() -> None:
    from benchmarks.gate import markdown, study

    cases = [
        Case(name, own, (hit(0.6 if own else 0.1, gold=own), hit(0.05)))
        for name in ("locomo", "longmemeval", "memorybank", "probe")
        for own in (True, False)
    ]
    res = study(cases, {"recall@5": 1.0, "questions_with_answer": 1}, embedder="use+e5", library=(0.9, 0.5, 0.8, 0.0))
    lib = res["library_gate"]
    assert lib["params"] == [0.9, 0.5, 0.8, 0.0]
    assert all(lib[n]["false_skip"] == 1.0 and lib[n]["false_inject"] == 0.0 for n in ("locomo", "probe"))
    assert res["calibrated_dev"]["locomo"]["false_skip"] == 0.0  # the tuned rule injects the 0.6 hit
    text = markdown(res)
    assert "the USE + e5-small pair" in text and "| 100.0% / 0.0% / 0.0% |" in text
    same = study(cases, None, library=tuple(res["chosen"].values()))  # type: ignore[arg-type]
    assert "library_gate" not in same and "the default embedder (`default_embedder()`)" in markdown(same)
