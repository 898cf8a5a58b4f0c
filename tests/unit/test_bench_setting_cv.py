"""The one-setting studies: their grids, their choice and the conclusion they write."""

from __future__ import annotations

import pytest

from benchmarks.rerank_cv import cross_validate
from benchmarks.setting_cv import STUDIES, conclusion, experiments_section, markdown, table
from hybrid_memory.config import HybridMemoryConfig

W_TIME = STUDIES["w_time"]


def _scores(**changed: dict[str, float]) -> dict[str, dict[str, float]]:
    base = {"locomo": 0.7, "longmemeval": 0.9, "memorybank": 0.95}
    return {name: {**base, **changed.get(name, {})} for name in table(W_TIME)}


@pytest.mark.parametrize("short", sorted(STUDIES))
def test_each_grid_holds_the_library_default_and_sets_only_its_setting(
    short: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = STUDIES[short]
    section, field = study.dotted.split(".")
    assert getattr(getattr(HybridMemoryConfig(), section), field) == study.default in study.values
    rows = table(study)
    assert len(rows) == len(study.values) and study.default_name in rows
    for env in rows.values():
        assert list(env) == [study.field]
        # The value the study sets is the one the library reads from the environment (a switch
        # such as retrieval.drop_period_words reads "0" / "1" as false / true).
        monkeypatch.setenv(f"HYBRID_MEMORY_{study.section}__{study.field}", env[study.field])
        assert float(getattr(getattr(HybridMemoryConfig(), section), field)) == float(env[study.field])


def test_the_w_time_grid_keeps_its_labels() -> None:
    assert W_TIME.default_name == "w_time 0.2 (default)"
    assert table(W_TIME)["w_time 0.5"] == {"W_TIME": "0.5"}
    assert table(STUDIES["candidates"])["candidates 10"] == {"CANDIDATES": "10"}


def test_a_value_each_dataset_wants_differently_is_not_kept_and_the_conclusion_names_the_drops() -> None:
    scores = _scores(
        **{
            "w_time 1": {"memorybank": 1.0, "longmemeval": 0.85},  # dates help one dataset, hurt another
            "w_time 0": {"memorybank": 0.9, "locomo": 0.72},
        }
    )
    cv = cross_validate(scores, W_TIME.default_name)
    assert cv["longmemeval"]["chosen"] == "w_time 1" and cv["longmemeval"]["held_out"] == 0.85
    text = conclusion(W_TIME, scores, cv, [])
    assert "longmemeval" in text and "held out" in text and "memorybank 1" in text and "locomo 0" in text
    assert "**kept**" not in markdown(W_TIME, scores, cv)


def test_a_flat_grid_keeps_the_default_and_says_nothing_beats_it() -> None:
    scores = _scores()
    cv = cross_validate(scores, W_TIME.default_name)
    assert {c["chosen"] for c in cv.values()} == {W_TIME.default_name}
    assert conclusion(W_TIME, scores, cv, []).endswith("no value scores above it on a dataset left out.")


def test_a_value_better_everywhere_is_kept() -> None:
    scores = _scores(**{"w_time 0.3": {"locomo": 0.72, "longmemeval": 0.92, "memorybank": 0.96}})
    cv = cross_validate(scores, W_TIME.default_name)
    assert {c["chosen"] for c in cv.values()} == {"w_time 0.3"}
    assert "Kept: w_time 0.3." in markdown(W_TIME, scores, cv)


def test_the_experiments_section_is_marked_with_the_study_file_and_names_its_command() -> None:
    study = STUDIES["candidates"]
    scores = {name: {"locomo": 0.7, "longmemeval": 0.9, "memorybank": 0.95} for name in table(study)}
    text = experiments_section(study, scores, cross_validate(scores, study.default_name))
    start, end = study.marks
    assert text.startswith(start) and text.endswith(end) and start == "<!-- candidates_cv: start -->"
    assert "`python -m benchmarks.setting_cv candidates`" in text and "[candidates_cv.md](candidates_cv.md)" in text
