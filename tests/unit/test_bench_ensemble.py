"""The USE + e5 study's choice of share and alpha (``benchmarks.ensemble``), on made-up scores."""

from __future__ import annotations

from typing import Any

from benchmarks.ensemble import (
    DECISION,
    at_default_alpha,
    best_share,
    cross_validate,
    grouped_summary,
    point,
    render,
    verdict,
    with_questions,
    within_datasets,
    within_datasets_share,
)
from benchmarks.harness.folds import question_folds


def _row(locomo: float, longmemeval: float, memorybank: float) -> dict[str, Any]:
    values = {"locomo": locomo, "longmemeval": longmemeval, "memorybank": memorybank}
    return {n: {"metric": "m", "value": v, "median_tokens": 250.0} for n, v in values.items()}


def _joint() -> dict[str, Any]:
    return {
        point(0.0, 0.4): _row(0.71, 0.95, 0.98),
        point(0.0, 0.5): _row(0.69, 0.97, 0.98),
        point(0.8, 0.4): _row(0.74, 0.95, 0.98),
        point(0.8, 0.5): _row(0.74, 0.97, 0.98),
        point(1.0, 0.25): _row(0.74, 0.93, 0.99),
    }


def test_the_share_grid_is_the_joint_grid_at_the_default_alpha() -> None:
    assert at_default_alpha(_joint(), 0.4) == {"0.000": _row(0.71, 0.95, 0.98), "0.800": _row(0.74, 0.95, 0.98)}


def test_share_and_alpha_are_chosen_on_two_datasets_and_scored_on_the_third() -> None:
    cv = cross_validate(_joint(), alpha=0.4)
    # LongMemEval + MemoryBank-CN: USE at 0.5 and the pair at 0.5 tie; the smaller share wins.
    assert cv["locomo"] == {"chosen_share": point(0.0, 0.5), "held_out": 0.69, "use_alone": 0.71}
    # LoCoMo + MemoryBank-CN: e5 alone at 0.25 has the best mean and loses LongMemEval held out.
    assert cv["longmemeval"] == {"chosen_share": point(1.0, 0.25), "held_out": 0.93, "use_alone": 0.95}
    assert cv["memorybank"]["chosen_share"] == point(0.8, 0.5)


def test_ties_go_to_the_alpha_nearest_the_default() -> None:
    joint = {point(0.0, 0.4): _row(0.7, 0.9, 0.9), point(0.0, 0.25): _row(0.8, 0.9, 0.9)}
    joint[point(0.0, 0.6)] = joint[point(0.0, 0.25)]
    assert best_share(joint, 0.4) == point(0.0, 0.25)  # 0.25 and 0.6 tie, 0.25 is nearer 0.4
    assert cross_validate(joint, alpha=0.4)["longmemeval"]["chosen_share"] == point(0.0, 0.25)


def test_the_verdict_keeps_use_when_a_dataset_drops_held_out() -> None:
    joint = _joint()
    probe = {
        f"e5 share {k}": {"recall@1": 0.9, "recall@5": 1.0, "gold_injected": 0.9, "injected_when_nothing_answers": 0.5}
        for k in joint
    }
    res: dict[str, Any] = {
        "alphas": [0.25, 0.4, 0.5],
        "default_alpha": 0.4,
        "repeats": 1,
        "grid": at_default_alpha(joint, 0.4),
        "joint": joint,
        "cross_validation": cross_validate(at_default_alpha(joint, 0.4), alpha=0.4),
        "joint_cross_validation": cross_validate(joint, alpha=0.4),
        "probe": probe,
        "speed": {
            "concatenation": {
                "batched_per_s": 150.0,
                "batched_per_cpu_s": 75.0,
                "query_p50_ms": 5.0,
                "query_p95_ms": 9.0,
                "loadavg_before": [0.5],
            }
        },
    }
    text = verdict(res)
    assert "Best share and alpha on all three dev files: **0.800 @ alpha 0.5**" in text
    assert "higher on memorybank" not in text and "lower on locomo, longmemeval" in text
    assert "So this rule alone does not make it a candidate: a dataset scores lower left out." in text
    assert text.rstrip().endswith(DECISION)  # the decision, with the measurements the rule does not take
    res["speed"]["concatenation"].update(batched_per_s=50.0)
    res["verdict"] = verdict(res)
    md = render(res)
    assert "| 0.000 (USE alone) | 0.4 | 0.710 | 0.950 | 0.980 | 0.880 | 250 | 0.900 |" in md
    assert "| longmemeval | 1.000 @ alpha 0.25 | 0.930 | 0.950 |" in md
    assert "it misses the speed bar" in md
    assert "a block for 0.500 of the questions nothing answers (0.500)" in text


def test_the_load_cost_of_a_fresh_process_is_reported() -> None:
    joint = _joint()
    res = _study(joint, cross_validate(at_default_alpha(joint, 0.4), alpha=0.4), cross_validate(joint, alpha=0.4))
    load = {
        "USE-multilingual v3": {
            "first_seconds": 1.6,
            "first_peak_rss_mb": 160,
            "seconds": 1.5,
            "peak_rss_mb": 150,
            "seconds_runs": [1.6, 1.5],
        },
        "use_e5_pair()": {
            "first_seconds": 4.0,
            "first_peak_rss_mb": 900,
            "seconds": 2.0,
            "peak_rss_mb": 400,
            "seconds_runs": [2.1, 2.0],
        },
    }
    md = render({**res, "load": load})
    assert "then the best of 2 more (they read it back)" in md
    assert "| USE-multilingual v3 | 1.6 | 160 | 1.5 | 150 |" in md and "| use_e5_pair() | 4.0 | 900 | 2.0 | 400 |" in md
    assert "peak resident" not in render(res)


def test_a_fold_holds_whole_groups() -> None:
    questions = [["q1", "g2"], ["q2", "g1"], ["q3", "g2"], ["q4", "g7"]]
    # sorted groups g1, g2, g7 -> folds 0, 1, 0
    assert question_folds(questions, 2) == [1, 0, 1, 0]


def _per_question() -> dict[str, Any]:
    default, pair = point(0.0, 0.4), point(0.8, 0.5)
    return {
        "questions": {
            "locomo": [["q1", "a"], ["q2", "a"], ["q3", "b"], ["q4", "b"]],
            "longmemeval": [["x", "x"], ["y", "y"]],
            "memorybank": [["m1", "m"], ["n1", "n"]],
        },
        "scores": {
            default: {"locomo": [1.0, 0.0, 1.0, 1.0], "longmemeval": [1.0, 0.0], "memorybank": [1.0, 1.0]},
            pair: {"locomo": [1.0, 1.0, 0.0, 1.0], "longmemeval": [0.0, 1.0], "memorybank": [1.0, 1.0]},
        },
    }


def test_each_fold_is_scored_by_the_setting_chosen_on_the_other_folds() -> None:
    res = within_datasets(_per_question(), 0.4, folds=2)
    # fold 0 (groups a, x, m) is chosen on fold 1: the pair's mean 0.833 beats the default's 0.667;
    # fold 1 (b, y, n) on fold 0: the default's 0.833 beats the pair's 0.667.
    assert res["chosen"] == [point(0.8, 0.5), point(0.0, 0.4)]
    locomo, lme, mb = (res["datasets"][n] for n in ("locomo", "longmemeval", "memorybank"))
    assert locomo == {"held_out": 1.0, "default": 0.75, "wins": 1, "losses": 0, "groups": 2, "questions": 4}
    assert (lme["held_out"], lme["default"], lme["wins"], lme["losses"]) == (0.0, 0.5, 0, 1)
    assert (mb["held_out"], mb["wins"], mb["losses"]) == (1.0, 0, 0)


def test_the_share_alone_is_cross_validated_at_the_default_alpha_only() -> None:
    per_question = _per_question()
    # Best in both folds, but at another alpha: the share-alone folds never see it.
    per_question["scores"][point(1.0, 0.25)] = {"locomo": [1.0] * 4, "longmemeval": [1.0] * 2, "memorybank": [1.0] * 2}
    per_question["scores"][point(0.8, 0.4)] = {
        "locomo": [1.0, 1.0, 1.0, 0.5],
        "longmemeval": [1.0, 1.0],
        "memorybank": [1.0, 1.0],
    }
    res = within_datasets_share(per_question, 0.4, folds=2)
    assert res["chosen"] == [point(0.8, 0.4), point(0.8, 0.4)]
    assert res["datasets"]["locomo"] == {
        "held_out": 0.875,
        "default": 0.75,
        "wins": 1,
        "losses": 1,
        "groups": 2,
        "questions": 4,
    }
    assert within_datasets(per_question, 0.4, folds=2)["chosen"][0] == point(1.0, 0.25)  # share and alpha together
    md = _rendered_with("grouped_share_cross_validated", res)
    assert "The share alone, every setting at the default alpha 0.4:" in md
    assert "ties to the smaller share): chosen 0.800 @ alpha 0.4 in 2 of 2 folds" in md


def _study(joint: dict[str, Any], cv: dict[str, Any], joint_cv: dict[str, Any]) -> dict[str, Any]:
    """A study result to render: the grid and its two leave-one-out tables, no probe or speed."""
    return {
        "alphas": [0.4, 0.5],
        "default_alpha": 0.4,
        "repeats": 1,
        "joint": joint,
        "cross_validation": cv,
        "joint_cross_validation": joint_cv,
        "probe": {},
        "speed": {},
    }


def _rendered_with(key: str, grouped: dict[str, Any]) -> str:
    """``ensemble.md`` of the made-up grid with one within-dataset result under ``key``."""
    joint = _joint()
    res = _study(joint, cross_validate(at_default_alpha(joint, 0.4), alpha=0.4), cross_validate(joint, alpha=0.4))
    return render({**res, key: grouped})


def test_the_grouped_result_is_reported() -> None:
    grouped = within_datasets(_per_question(), 0.4, folds=2)
    line = grouped_summary(grouped)
    assert "(2 folds): chosen 0.800 @ alpha 0.5 in 1 of 2 folds" in line
    assert "locomo 1.000 vs 0.750 (questions up / down: 1 / 0)" in line
    md = _rendered_with("grouped_cross_validated", grouped)
    assert "| longmemeval | 2 | 2 | 0.000 | 0.500 | 0 / 1 |" in md
    assert "(per fold: `0.800 @ alpha 0.5`, `0.000 @ alpha 0.4`)." in md


def test_the_leave_one_out_choice_counts_the_questions_it_moves_with_a_sign_test() -> None:
    per_question = _per_question()
    cv = {
        "locomo": {"chosen_share": point(0.8, 0.5), "held_out": 0.75, "use_alone": 0.75},
        "longmemeval": {"chosen_share": "0.800", "held_out": 0.5, "use_alone": 0.5},  # the share-only table
        "memorybank": {"chosen_share": point(0.0, 0.4), "held_out": 1.0, "use_alone": 1.0},
    }
    per_question["scores"][point(0.8, 0.4)] = {"longmemeval": [0.0, 0.0]}
    counted = with_questions(cv, per_question, 0.4)
    assert {k: counted["locomo"][k] for k in ("wins", "losses", "sign_test_p")} == {
        "wins": 1,
        "losses": 1,
        "sign_test_p": 1.0,
    }
    assert (counted["longmemeval"]["wins"], counted["longmemeval"]["losses"]) == (0, 1)  # share 0.8 at alpha 0.4
    assert (counted["memorybank"]["wins"], counted["memorybank"]["losses"]) == (0, 0)
    assert counted["locomo"]["held_out"] == 0.75  # the rest of the entry is kept
    joint = _joint()
    res = _study(joint, counted, counted)
    md = render(res)
    assert (
        "| held out | chosen | held-out score | default (USE, default alpha) | questions up / down (sign test) |" in md
    )
    assert "| locomo | 0.800 @ alpha 0.5 | 0.750 | 0.750 | 1 / 1 (p=1.000) |" in md
    res["probe"] = {
        f"e5 share {k}": {"recall@1": 0.9, "recall@5": 1.0, "injected_when_nothing_answers": 0.5} for k in joint
    }
    res["speed"] = {"concatenation": {"batched_per_s": 150.0, "query_p95_ms": 9.0, "loadavg_before": [0.5]}}
    res["joint_cross_validation"] = {**counted, "longmemeval": {**counted["longmemeval"], "held_out": 0.4}}
    assert "lower on longmemeval (0 up / 1 down, sign test p=1.000)." in verdict(res)
