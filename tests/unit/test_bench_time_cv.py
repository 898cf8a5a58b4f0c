"""The time-window weight study: its grid, its choice and the conclusion it writes."""

from __future__ import annotations

from benchmarks.rerank_cv import cross_validate
from benchmarks.time_cv import DEFAULT, VALUES, conclusion, markdown, table
from hybrid_memory.config import RerankConfig


def _scores(**changed: dict[str, float]) -> dict[str, dict[str, float]]:
    base = {"locomo": 0.7, "longmemeval": 0.9, "memorybank": 0.95}
    return {name: {**base, **changed.get(name, {})} for name in table()}


def test_the_grid_holds_the_library_default_and_sets_only_w_time() -> None:
    assert RerankConfig().w_time in VALUES and f"w_time {RerankConfig().w_time:g} (default)" == DEFAULT
    assert table()["w_time 0.5"] == {"W_TIME": "0.5"} and len(table()) == len(VALUES)


def test_a_value_each_dataset_wants_differently_is_not_kept_and_the_conclusion_names_the_drops() -> None:
    scores = _scores(
        **{
            "w_time 1": {"memorybank": 1.0, "longmemeval": 0.85},  # dates help one dataset, hurt another
            "w_time 0": {"memorybank": 0.9, "locomo": 0.72},
        }
    )
    cv = cross_validate(scores, DEFAULT)
    assert cv["longmemeval"]["chosen"] == "w_time 1" and cv["longmemeval"]["held_out"] == 0.85
    text = conclusion(scores, cv, [])
    assert "longmemeval" in text and "held out" in text and "memorybank 1" in text and "locomo 0" in text
    assert "**kept**" not in markdown(scores, cv)


def test_a_value_better_everywhere_is_kept() -> None:
    scores = _scores(**{"w_time 0.3": {"locomo": 0.72, "longmemeval": 0.92, "memorybank": 0.96}})
    cv = cross_validate(scores, DEFAULT)
    assert {c["chosen"] for c in cv.values()} == {"w_time 0.3"}
    assert "Kept: w_time 0.3." in markdown(scores, cv)
