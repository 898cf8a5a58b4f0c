"""The BM25 / dense-feedback study's verdicts follow its cross-validation, and its section is replaced in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.feedback_cv import (
    API_DEFAULT,
    BM25_DEFAULT,
    SECTION_END,
    SECTION_START,
    STORE_DEFAULT,
    experiments_section,
    headline,
    markdown,
    verdict,
)
from benchmarks.rerank_cv import cross_validate, update_experiments

BASE = {"locomo": 0.7, "longmemeval": 0.95, "memorybank": 0.98}


def _res(api_locomo: float, api_memorybank: float) -> dict[str, Any]:
    bm25 = {BM25_DEFAULT: dict(BASE), "k1=0.5 b=0.5": {**BASE, "locomo": 0.71}}
    feedback = {STORE_DEFAULT: dict(BASE), "fused top 1, w 1": {**BASE, "locomo": 0.72, "memorybank": 0.99}}

    def rows(values: dict[str, float], r1: float) -> dict[str, dict[str, float]]:
        return {d: {"headline": v, "recall@1": r1} for d, v in values.items()}

    api = {
        "feedback": {
            API_DEFAULT: rows(BASE, 0.4),
            "w 0.6": rows({**BASE, "locomo": api_locomo, "memorybank": api_memorybank}, 0.3),
        },
        "bm25": {
            BM25_DEFAULT: rows(BASE, 0.4),
            "k1=0.5 b=0.5": rows({**BASE, "locomo": 0.69, "memorybank": 0.99}, 0.4),
        },
    }
    return {
        "bm25": bm25,
        "bm25_cv": cross_validate(bm25, BM25_DEFAULT),
        "feedback": feedback,
        "feedback_cv": cross_validate(feedback, STORE_DEFAULT),
        "api": api,
        "api_cv": cross_validate(headline(api["feedback"]), API_DEFAULT),
        "api_bm25_cv": cross_validate(headline(api["bm25"]), BM25_DEFAULT),
    }


def test_a_gain_on_one_dataset_only_is_no_cross_validated_gain() -> None:
    res = _res(api_locomo=0.72, api_memorybank=0.98)
    cv = res["api_cv"]
    assert cv["locomo"]["chosen"] == API_DEFAULT  # tied on the other two: the default
    assert cv["memorybank"]["chosen"] == "w 0.6" and cv["memorybank"]["held_out"] == cv["memorybank"]["default"]
    assert verdict(cv) == "no cross-validated gain: not kept"


def test_a_held_out_drop_is_reported_and_a_clean_gain_is_kept() -> None:
    dropped = _res(api_locomo=0.75, api_memorybank=0.97)["api_cv"]
    assert verdict(dropped) == "a held-out drop on memorybank: not kept"
    better = {"a": dict(BASE), "b": {d: v + 0.01 for d, v in BASE.items()}}
    assert verdict(cross_validate(better, "a")).endswith("**kept**")


def test_the_report_and_the_experiments_section(tmp_path: Path) -> None:
    res = _res(api_locomo=0.72, api_memorybank=0.98)
    text = markdown(res)
    assert "| w 0.6 | 0.720 | 0.950 | 0.980 | 0.300 | 0.300 | 0.300 |" in text
    path = tmp_path / "experiments.md"
    path.write_text("# head\n\nkept text\n", encoding="utf-8")
    for _ in range(2):
        update_experiments(path, experiments_section(res), SECTION_START, SECTION_END)
    out = path.read_text(encoding="utf-8")
    assert out.count(SECTION_START) == 1 and out.startswith("# head\n\nkept text\n")
    assert "Dense feedback through the API" in out and "no cross-validated gain: not kept" in out
    # A store-level gain is never called kept: the API decides.
    assert (
        "store level: " in out
        and "a store-level cross-validated gain on locomo, memorybank: measured through the API" in out
    )
    assert "BM25 k1 / b through the API: " in out and "a held-out drop on locomo: not kept" in out


def test_the_main_report_puts_dev_and_cross_validated_numbers_side_by_side() -> None:
    from benchmarks.report import cv_section

    assert cv_section({}) == []
    res = _res(api_locomo=0.72, api_memorybank=0.98)
    ensemble = {
        "cross_validation": {"longmemeval": {"chosen_share": "0.889", "held_out": 0.935, "use_alone": 0.957}},
        "joint_cross_validation": {
            "locomo": {"chosen_share": "0.800 @ alpha 0.5", "held_out": 0.739, "use_alone": 0.714}
        },
    }
    gate = {
        "old_floor": {"locomo": {"false_skip": 0.0, "false_inject": 0.999}},
        "calibrated_dev": {"locomo": {"false_skip": 0.041, "false_inject": 0.08}},
        "cross_validated": {"locomo": {"false_skip": 0.079, "false_inject": 0.068}},
    }
    text = "\n".join(cv_section({"feedback_cv": res, "ensemble": ensemble, "gate": gate}))
    assert (
        "| dense feedback through the API ([feedback_cv.md](feedback_cv.md)) | memorybank | 0.980 | w 0.6 | 0.980 | +0.000 |"
        in text
    )
    assert (
        "| USE + e5 embedder share ([ensemble.md](ensemble.md)) | longmemeval | 0.957 | e5 share 0.889 | 0.935 | -0.022 |"
        in text
    )
    assert (
        "| USE + e5 embedder share and alpha together ([ensemble.md](ensemble.md)) | locomo | 0.714 | "
        "e5 share 0.800 @ alpha 0.5 | 0.739 | +0.025 |" in text
    )
    assert "| locomo | 0.0 % | 99.9 % | 4.1 % | 8.0 % | 7.9 % | 6.8 % |" in text
