"""Cross-validation inside each dataset: folds of whole groups (issue 17 part 6).

The project scores its defaults on held-back conversations, users and questions of the same three
datasets, so besides leaving a whole dataset out, a study can estimate a tuned choice the way that
scoring splits the data: every dataset's groups (a LoCoMo conversation, a MemoryBank-CN user, a
LongMemEval question's haystack) are dealt into :data:`FOLDS` folds; for each fold the setting is
chosen on the other folds of all three datasets and scored on that fold, so every question is held
out once and the questions about one conversation or user are never split between choosing and
scoring.

The per-question scores a study records (``{"questions": {dataset: [[question id, group id], ...]},
"scores": {setting: {dataset: [score, ...]}}}``, in question order) are what
:func:`grouped_cross_validate` reads; :func:`recorder` fills them from the runner's
``on_question`` hook.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

#: Folds (LoCoMo's dev file has 5 conversations: one per fold).
FOLDS = 5

#: ``{setting: {dataset: mean headline on the folds it is chosen on}}`` -> the chosen setting.
Chooser = Callable[[Mapping[str, Mapping[str, float]]], str]


def group_folds(group_ids: Iterable[str], folds: int = FOLDS) -> dict[str, int]:
    """The fold of each group: its index among the sorted group ids, modulo ``folds``.

    Example:
        >>> group_folds(["conv-b", "conv-a", "conv-c"], folds=2)
        {'conv-a': 0, 'conv-b': 1, 'conv-c': 0}
    """
    return {g: i % folds for i, g in enumerate(sorted(set(group_ids)))}


def question_folds(questions: Sequence[Sequence[str]], folds: int = FOLDS) -> list[int]:
    """The fold of each ``(question id, group id)``: its group's fold (:func:`group_folds`)."""
    fold = group_folds((q[1] for q in questions), folds)
    return [fold[q[1]] for q in questions]


def recorder(per_question: dict[str, Any], setting: str, dataset: str, metric: str) -> Callable[..., None]:
    """An ``on_question`` hook that appends each question's ``metric`` to ``per_question`` for ``setting``.

    Raises:
        RuntimeError: (at the end of a run, from :func:`check_order`) when a setting saw the
            questions in another order than the first one.
    """
    asked = per_question.setdefault("_asked", {}).setdefault(setting, {}).setdefault(dataset, [])
    got = per_question.setdefault("scores", {}).setdefault(setting, {}).setdefault(dataset, [])

    def on_question(group: Any, question: Any, _ranking: Any, metrics: Mapping[str, float]) -> None:
        asked.append([question.id, group.id])
        got.append(round(float(metrics[metric]), 6))

    return on_question


def finish(per_question: dict[str, Any]) -> dict[str, Any]:
    """The recorded scores with one question list per dataset (every setting must have asked the same)."""
    asked = per_question.pop("_asked", {})
    questions: dict[str, list[list[str]]] = per_question.setdefault("questions", {})
    for setting, by_dataset in asked.items():
        for dataset, order in by_dataset.items():
            if questions.setdefault(dataset, order) != order:
                raise RuntimeError(f"{dataset}: {setting} saw the questions in another order")
    return per_question


def grouped_cross_validate(
    per_question: Mapping[str, Any], *, choose: Chooser, reference: str, folds: int = FOLDS
) -> dict[str, Any]:
    """For each fold, the setting ``choose`` picks on the other folds, scored on that fold.

    Returns:
        ``{"folds", "chosen": [setting per fold], "datasets": {dataset: {"held_out", "default",
        "wins", "losses", "groups", "questions"}}}``: ``held_out`` is the mean over all questions
        of the score each got from its fold's choice, ``default`` the ``reference`` setting's
        mean on the same questions, ``wins``/``losses`` the questions above/below it.
    """
    questions, scores = per_question["questions"], per_question["scores"]
    fold_of = {n: question_folds(qs, folds) for n, qs in questions.items()}
    held = {n: [0.0] * len(qs) for n, qs in questions.items()}
    chosen = []
    for f in range(folds):
        table = {
            key: {n: fmean([v for v, g in zip(row[n], fold_of[n], strict=True) if g != f] or [0.0]) for n in questions}
            for key, row in scores.items()
        }
        best = choose(table)
        chosen.append(best)
        for n in questions:
            for i, g in enumerate(fold_of[n]):
                if g == f:
                    held[n][i] = scores[best][n][i]
    ref = scores[reference]
    return {
        "folds": folds,
        "chosen": chosen,
        "datasets": {
            n: {
                "held_out": round(fmean(held[n]), 6),
                "default": round(fmean(ref[n]), 6),
                "wins": sum(h > r for h, r in zip(held[n], ref[n], strict=True)),
                "losses": sum(h < r for h, r in zip(held[n], ref[n], strict=True)),
                "groups": len({q[1] for q in questions[n]}),
                "questions": len(questions[n]),
            }
            for n in questions
        },
    }


def fixed_chooser(setting: str) -> Chooser:
    """Always ``setting``: for a method whose every question was already scored by a model fit without its fold."""
    return lambda _table: setting


def mean_chooser(default: str) -> Chooser:
    """Best mean over the datasets, ties to ``default`` (the rule of the leave-one-dataset-out studies)."""

    def choose(table: Mapping[str, Mapping[str, float]]) -> str:
        return max(table, key=lambda s: (fmean(table[s].values()), s == default))

    return choose


def summary(grouped: Mapping[str, Any]) -> str:
    """``"<setting> in k of n folds"`` for the most chosen setting (first chosen on ties)."""
    chosen = list(grouped["chosen"])
    top = max(chosen, key=chosen.count)
    return f"{top} in {chosen.count(top)} of {grouped['folds']} folds"


def table_lines(grouped: Mapping[str, Any], default_label: str = "default") -> list[str]:
    """Markdown table of a within-dataset cross-validation: one row per dataset."""
    lines = [
        f"| dataset | groups | questions | held-out score | {default_label} | questions up / down |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n, d in grouped["datasets"].items():
        lines.append(
            f"| {n} | {d['groups']} | {d['questions']} | {d['held_out']:.3f} | {d['default']:.3f} | "
            f"{d['wins']} / {d['losses']} |"
        )
    return lines


def section_lines(grouped: Mapping[str, Any], *, ties: str, default_label: str = "default") -> list[str]:
    """Markdown lines of a study's within-dataset cross-validation: what was chosen per fold, then the table."""
    return [
        f"Within each dataset ({grouped['folds']} folds of whole LoCoMo conversations, MemoryBank-CN users and "
        "LongMemEval haystacks, the split of the held-back evaluation; per fold the best mean on the other folds, "
        f"{ties}): chosen {summary(grouped)} (per fold: " + ", ".join(f"`{c}`" for c in grouped["chosen"]) + ").",
        "",
        *table_lines(grouped, default_label),
    ]


def write_questions(path: Path, per_question: Mapping[str, Any]) -> None:
    """The per-question scores of a run, compact (they are read by programs, not people)."""
    path.write_text(json.dumps(per_question, separators=(",", ":")) + "\n", encoding="utf-8")
