"""Cross-validation within each dataset (``benchmarks.harness.folds``) and where studies report it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.harness.folds import (
    finish,
    fixed_chooser,
    group_folds,
    grouped_cross_validate,
    mean_chooser,
    question_folds,
    recorder,
    summary,
)
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


def test_a_question_is_in_its_groups_fold() -> None:
    questions = [["q1", "conv-b"], ["q2", "conv-a"], ["q3", "conv-b"], ["q4", "conv-c"]]
    assert question_folds(questions, folds=2) == [1, 0, 1, 0]
    assert group_folds(["conv-b", "conv-a", "conv-c", "conv-b"], folds=2) == {"conv-a": 0, "conv-b": 1, "conv-c": 0}


def test_a_method_fit_per_fold_is_scored_as_recorded() -> None:
    # Every score of "learned" was made by a model fit without its fold: nothing is chosen, the
    # held-out score is the setting's own mean even where another setting is better on the other folds.
    per_question = finish(_study())
    res = grouped_cross_validate(per_question, choose=fixed_chooser("default"), reference="w 0.3", folds=2)
    assert res["chosen"] == ["default", "default"]
    assert res["datasets"]["locomo"]["held_out"] == 0.5
    assert (res["datasets"]["memorybank"]["held_out"], res["datasets"]["memorybank"]["wins"]) == (1.0, 1)


def test_the_report_finds_the_folds_of_every_study_with_its_own_key() -> None:
    grouped = within_datasets(_study(), "default")
    loo = {"locomo": {"chosen": "default", "held_out": 0.5, "default": 0.5}}
    extra = {
        "feedback_cv": {"api_cv": loo, "api_bm25_cv": loo, "api_grouped": grouped, "api_bm25_grouped": grouped},
        "query_cv": {
            "statement_cv": loo,
            "statement_grouped": grouped,
            "learned_grouped": {"score components": grouped},
        },
        "alpha_cv": {"cross_validated": loo, "grouped_cross_validated": grouped},
    }
    report = "\n".join(cv_section(extra))
    row = "| memorybank | 1.000 | default in 4 of 5 folds | 0.500 | -0.500 | 0 / 1 |"
    for title in (
        "dense feedback",
        "BM25 k1 / b",
        "statement-form query",
        "learned linear re-rank",
        "one global alpha",
    ):
        assert f"| {title}" in report
        assert any(line.startswith(f"| {title}") and line.endswith(row) for line in report.splitlines()), title
