"""The WordLlama study's decision (``benchmarks.static_model``), on made-up scores: no model is loaded."""

from __future__ import annotations

from typing import Any

from benchmarks.ensemble import cross_validate, point, with_questions, within_datasets, within_datasets_share
from benchmarks.static_model import MODEL, experiments_section, markdown, side_metrics, verdict


def _row(values: tuple[float, float, float], r1: tuple[float, float, float]) -> dict[str, Any]:
    names = ("locomo", "longmemeval", "memorybank")
    return {
        n: {"metric": "m", "value": v, "recall@1": r, "ndcg@10": 0.5, "median_tokens": 250.0}
        for n, v, r in zip(names, values, r1, strict=True)
    }


def _per_question(locomo_better: bool) -> dict[str, Any]:
    """Ten LoCoMo conversations of two questions; the static share wins both of each, or ties."""
    default, mixed = point(0.0, 0.4), point(0.2, 0.4)
    locomo_q = [[f"q{i}", f"c{i // 2}"] for i in range(20)]
    return {
        "questions": {"locomo": locomo_q, "longmemeval": [["x", "x"]], "memorybank": [["m", "m"]]},
        "scores": {
            default: {"locomo": [0.0] * 20, "longmemeval": [1.0], "memorybank": [1.0]},
            mixed: {"locomo": [1.0 if locomo_better else 0.0] * 20, "longmemeval": [1.0], "memorybank": [1.0]},
            point(1.0, 0.4): {"locomo": [0.0] * 20, "longmemeval": [0.0], "memorybank": [1.0]},
        },
    }


def _study(joint: dict[str, Any], per_question: dict[str, Any], probe_r1: float = 0.9) -> dict[str, Any]:
    chosen = point(0.2, 0.4)
    res: dict[str, Any] = {
        "model": MODEL,
        "shares": [0.0, 0.2, 1.0],
        "alphas": [0.4],
        "default_alpha": 0.4,
        "joint": joint,
        "chosen": chosen,
        "joint_cross_validation": with_questions(cross_validate(joint, alpha=0.4), per_question, 0.4),
        "grouped_cross_validated": within_datasets(per_question, 0.4),
        "grouped_share_cross_validated": within_datasets_share(per_question, 0.4),
        "side_metrics": side_metrics(joint, chosen, 0.4),
        "vector_only": {
            "USE-multilingual v3": _row((0.33, 0.9, 0.84), (0.1, 0.3, 0.4)),
            MODEL: _row((0.41, 0.8, 0.72), (0.2, 0.2, 0.3)),
        },
        "probe": {
            f"share {point(0.0, 0.4)}": {
                "recall@1": 0.9,
                "recall@5": 1.0,
                "gold_injected": 0.9,
                "injected_when_nothing_answers": 0.5,
            },
            f"share {chosen}": {
                "recall@1": probe_r1,
                "recall@5": 1.0,
                "gold_injected": 0.9,
                "injected_when_nothing_answers": 0.5,
            },
            f"share {point(1.0, 0.4)}": {
                "recall@1": 0.4,
                "recall@5": 0.9,
                "gold_injected": 0.8,
                "injected_when_nothing_answers": 0.6,
            },
        },
        "default_label": f"share {point(0.0, 0.4)}",
        "chosen_label": f"share {chosen}",
        "speed": {MODEL: {"batched_per_s": 30000.0, "query_p50_ms": 0.1, "query_p95_ms": 0.2}},
    }
    res["verdict"] = verdict(res)
    return res


def _joint(r1_memorybank: float) -> dict[str, Any]:
    # LongMemEval and MemoryBank-CN tie, so every dataset left out keeps its default score.
    return {
        point(0.0, 0.4): _row((0.70, 1.0, 1.0), (0.3, 0.4, 0.6)),
        point(0.2, 0.4): _row((0.70, 1.0, 1.0), (0.35, 0.4, r1_memorybank)),
        point(1.0, 0.4): _row((0.70, 0.5, 1.0), (0.4, 0.3, 0.7)),
    }


def test_a_setting_that_drops_a_dataset_left_out_is_not_kept() -> None:
    joint = _joint(0.6)
    joint[point(0.2, 0.4)]["memorybank"]["value"] = 0.99  # the best on LoCoMo + LongMemEval, lower on MemoryBank-CN
    joint[point(0.2, 0.4)]["locomo"]["value"] = 0.75
    res = _study(joint, _per_question(True))
    assert res["verdict"] == "not kept: lower left out on memorybank"


def test_a_tie_left_out_is_kept_only_when_the_four_rules_hold() -> None:
    res = _study(_joint(0.6), _per_question(True))
    assert res["grouped_cross_validated"]["datasets"]["locomo"]["wins"] == 20
    assert res["verdict"] == "kept: the datasets tie left out, and rules (2)-(4) hold"
    # Rule 3: one dataset's Recall@1 lower at the chosen setting.
    res = _study(_joint(0.55), _per_question(True))
    assert res["verdict"] == (
        "not kept: the datasets tie left out, and it fails (3) memorybank recall@1 0.600 -> 0.550"
    )
    # Rule 2: no dataset rises inside; rule 4: the probe drops.
    res = _study(_joint(0.6), _per_question(False), probe_r1=0.8)
    assert res["verdict"] == (
        "not kept: the datasets tie left out, and it fails (2) no significant rise inside any dataset; "
        "(4) the probe's Recall@1 drops"
    )


def test_the_reports_show_the_numbers_the_verdict_rests_on() -> None:
    res = _study(_joint(0.55), _per_question(True))
    md = markdown(res)
    assert (
        "| 0.000 (default) | 0.4 | 0.700 (0.300 / 0.500) | 1.000 (0.400 / 0.500) | 1.000 (0.600 / 0.500) | 250 |" in md
    )
    assert f"| {MODEL} | 0.410 (0.200 / 0.500) |" in md
    assert "| memorybank | 0.600 -> 0.550 | 0.500 -> 0.500 |" in md
    assert "**Not kept: the datasets tie left out, and it fails (3)" in md
    section = experiments_section(res)
    assert section.startswith("<!-- static_model: start -->") and section.endswith("<!-- static_model: end -->")
    assert "Vector leg alone: locomo 0.410 (USE 0.330)" in section
    assert "memorybank 1.000, R@1 0.600 -> 0.550" in section
    assert "locomo 1.000 (default 0.000, 20 up / 0 down)" in section
    assert "Bilingual probe Recall@1: 0.900 at the best share, 0.400 alone (USE 0.900)" in section
