"""Cross-validation within each dataset (``benchmarks.harness.folds``) and where studies report it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.harness.folds import finish, grouped_cross_validate, mean_chooser, recorder, summary
from benchmarks.report import cv_section
from benchmarks.rerank_cv import grouped_lines, within_datasets


def _record(per_question: dict[str, Any], setting: str, dataset: str, rows: list[tuple[str, str, float]]) -> None:
    hook = recorder(per_question, setting, dataset, "m")
    for qid, gid, value in rows:
        hook(SimpleNamespace(id=gid), SimpleNamespace(id=qid), None, {"m": value})


def test_the_recorded_scores_share_one_question_list() -> None:
    per_question: dict[str, Any] = {}
    _record(per_question, "a", "locomo", [("q1", "g1", 1.0), ("q2", "g2", 0.5)])
    _record(per_question, "b", "locomo", [("q1", "g1", 0.0), ("q2", "g2", 1.0)])
    done = finish(per_question)
    assert done == {
        "questions": {"locomo": [["q1", "g1"], ["q2", "g2"]]},
        "scores": {"a": {"locomo": [1.0, 0.5]}, "b": {"locomo": [0.0, 1.0]}},
    }


def test_a_setting_that_saw_the_questions_in_another_order_is_refused() -> None:
    per_question: dict[str, Any] = {}
    _record(per_question, "a", "locomo", [("q1", "g1", 1.0), ("q2", "g2", 0.5)])
    _record(per_question, "b", "locomo", [("q2", "g2", 1.0), ("q1", "g1", 0.0)])
    with pytest.raises(RuntimeError, match="another order"):
        finish(per_question)


def test_ties_go_to_the_default() -> None:
    choose = mean_chooser("default")
    assert choose({"x": {"locomo": 0.5}, "default": {"locomo": 0.5}, "y": {"locomo": 0.4}}) == "default"
    assert choose({"x": {"locomo": 0.6}, "default": {"locomo": 0.5}}) == "x"


def _study() -> dict[str, Any]:
    per_question: dict[str, Any] = {}
    # Two LoCoMo conversations (a, b) and two MemoryBank users (m, n); folds=2 puts a, m in fold 0.
    _record(per_question, "default", "locomo", [("q1", "a", 0.0), ("q2", "b", 1.0)])
    _record(per_question, "default", "memorybank", [("m1", "m", 1.0), ("n1", "n", 1.0)])
    _record(per_question, "w 0.3", "locomo", [("q1", "a", 1.0), ("q2", "b", 1.0)])
    _record(per_question, "w 0.3", "memorybank", [("m1", "m", 1.0), ("n1", "n", 0.0)])
    return per_question


def test_a_study_is_chosen_on_the_other_fold_and_scored_on_its_own() -> None:
    per_question = finish(_study())
    res = grouped_cross_validate(per_question, choose=mean_chooser("default"), reference="default", folds=2)
    # fold 0 (a, m), chosen on fold 1 (b, n): default 1.0 beats w 0.3's 0.5; fold 1, chosen on
    # fold 0: w 0.3's 1.0 beats the default's 0.5.
    assert res["chosen"] == ["default", "w 0.3"]
    assert res["datasets"]["locomo"] == {
        "held_out": 0.5,
        "default": 0.5,
        "wins": 0,
        "losses": 0,
        "groups": 2,
        "questions": 2,
    }
    assert (res["datasets"]["memorybank"]["held_out"], res["datasets"]["memorybank"]["losses"]) == (0.5, 1)
    assert summary(res) == "default in 1 of 2 folds"


def test_studies_report_it_in_their_file_and_in_the_report() -> None:
    grouped = within_datasets(_study(), "default")
    # 5 folds: a, m in fold 0 and b, n in fold 1 as above; folds 2-4 hold no question and are chosen
    # on everything, where the two tie (0.75) and the default wins the tie.
    assert grouped["chosen"] == ["default", "w 0.3", "default", "default", "default"]
    text = "\n".join(grouped_lines(grouped))
    assert "chosen default in 4 of 5 folds" in text and "| memorybank | 2 | 2 | 0.500 | 1.000 | 0 / 1 |" in text
    loo = {"chosen": "default", "held_out": 0.5, "default": 0.5}
    report = "\n".join(
        cv_section({"half_life_cv": {"cross_validated": {"locomo": loo}, "grouped_cross_validated": grouped}})
    )
    assert (
        "| recency half-life" in report
        and "| memorybank | 1.000 | default in 4 of 5 folds | 0.500 | -0.500 | 0 / 1 |" in report
    )
