"""The study of how the re-rank scores memories in the other script (benchmarks/cross_script.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import hybrid_memory.read.rerank as rerank
from benchmarks.cross_script import (
    DEFAULT,
    experiments_section,
    markdown,
    other_script_scaled,
    partial_credit,
    scoring,
    verdict,
)
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import StoreHit

NOW = datetime(2024, 5, 4, tzinfo=timezone.utc)


def _hits() -> list[StoreHit]:
    # An English question's candidates: two English memories, two Chinese ones with low cosines.
    rows = [("I live in Lyon", 0.60), ("I walk to work", 0.50), ("我住在杭州", 0.30), ("我喜欢乌龙茶", 0.20)]
    return [
        StoreHit(MemoryRecord.create(user_id="u", content=text, timestamp=NOW), 0.5, vector_similarity=sim)
        for text, sim in rows
    ]


def test_the_alternatives_rescale_or_discount_the_default_rule() -> None:
    hits, query = _hits(), "Which city do I live in?"
    default = rerank._cross_script_relevance(hits, query)
    # The default: each Chinese memory's cosine rescaled over all four candidates (0.2 .. 0.6).
    assert default == pytest.approx({2: 0.25, 3: 0.0})
    # Over the Chinese memories alone, the best of them gets 1.0 whatever its cosine.
    assert other_script_scaled(rerank._cross_script_relevance)(hits, query) == pytest.approx({2: 1.0, 3: 0.0})
    half = partial_credit(rerank._cross_script_relevance, 0.5, alpha=0.4)(hits, query)
    assert half == pytest.approx({2: 0.4 * 0.25 + 0.6 * 0.5 * 0.25, 3: 0.0})
    assert other_script_scaled(rerank._cross_script_relevance)(hits[:2], query) == {}


def test_the_rule_is_swapped_for_the_block_only() -> None:
    original = rerank._cross_script_relevance
    with scoring(lambda hits, query: {0: 0.5}):
        assert rerank._cross_script_relevance(_hits(), "q") == {0: 0.5}
    assert rerank._cross_script_relevance is original
    with scoring(None):
        assert rerank._cross_script_relevance is original


def _res(same_use: float, cross_e5: float) -> dict[str, Any]:
    def row(cross: float, same: float) -> dict[str, float]:
        return {
            "recall@1": cross,
            "recall@5": 1.0,
            "gold_injected": 0.9,
            "injected_when_nothing_answers": 0.5,
            "same_language_recall@1": same,
            "same_language_recall@5": 1.0,
        }

    return {
        "USE": {DEFAULT: row(0.9, 0.95), "new": row(0.9, same_use)},
        "e5": {DEFAULT: row(0.4, 0.9), "new": row(cross_e5, 0.9)},
    }


def test_a_rule_is_kept_only_without_a_drop_for_any_embedder() -> None:
    assert verdict(_res(1.0, 0.4), "new") == "**kept**: raises USE same-language R@1 +0.050"
    assert verdict(_res(1.0, 0.35), "new") == "not kept: lowers e5 cross-lingual R@1 -0.050"
    assert verdict(_res(0.95, 0.4), "new") == "not kept: no change"
    assert verdict(_res(1.0, 0.4), DEFAULT) == "reference (the default)"


def test_the_report_and_the_experiments_row() -> None:
    res = _res(1.0, 0.35)
    text = markdown(res)
    assert "| USE | new | 0.900 | 1.000 | 0.900 | 0.500 | 1.000 | 1.000 |" in text
    assert "| new | not kept: lowers e5 cross-lingual R@1 -0.050 |" in text
    assert text.rstrip().endswith("Kept: none; the default rule stays.")
    assert "``" not in text and ":mod:" not in text and "(`rerank.cross_script`, `hybrid_memory.read.rerank`)" in text
    assert markdown(_res(1.0, 0.4)).rstrip().endswith("Kept: new.")
    section = experiments_section(res)
    assert "| `new` | 0.900 | 1.000 | not kept: lowers e5 cross-lingual R@1 -0.050 |" in section


def test_the_probe_asks_the_same_language_questions_without_touching_the_memories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmarks.e5_onnx as e5_onnx
    from hybrid_memory.testing import HashingEmbedder

    full = e5_onnx.probe({"hashing": (HashingEmbedder(dim=64), {})})["hashing"]
    assert full["same_language_questions"] == 24
    assert 0.0 <= full["same_language_recall@1"] <= full["same_language_recall@5"] <= 1.0
    data = json.loads(e5_onnx.PROBE.read_text(encoding="utf-8"))
    del data["same_language_questions"]
    cross_only = tmp_path / "probe.json"
    cross_only.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(e5_onnx, "PROBE", cross_only)
    alone = e5_onnx.probe({"hashing": (HashingEmbedder(dim=64), {})})["hashing"]
    assert "same_language_recall@1" not in alone
    assert alone == {k: v for k, v in full.items() if not k.startswith("same_language")}


def test_the_command_line_renders_a_saved_run_into_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.cross_script import SECTION_START, main

    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(_res(1.0, 0.35)), encoding="utf-8")
    (tmp_path / "experiments.md").write_text("# Recall experiments\n", encoding="utf-8")
    assert main(["--render", str(saved), "--out", str(tmp_path)]) == 0
    assert "Kept: none" in capsys.readouterr().out
    assert json.loads((tmp_path / "cross_script.json").read_text()) == _res(1.0, 0.35)
    assert (tmp_path / "cross_script.md").read_text() == markdown(_res(1.0, 0.35))
    experiments = (tmp_path / "experiments.md").read_text(encoding="utf-8")
    assert experiments.startswith("# Recall experiments") and experiments.count(SECTION_START) == 1


def test_every_swapped_rule_runs_inside_a_real_recall() -> None:
    # The re-rank calls the rule with the cross-script cosines as a third argument; a rule that
    # took (hits, query) only failed there, not in the calls above.
    from benchmarks.cross_script import rules
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.testing import HashingEmbedder

    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), trace=False)
    try:
        for text in ("我住在杭州", "我喜欢乌龙茶", "I walk to work"):
            mem.remember("u", text, importance=0.5)
        for name, (rule, _) in rules(0.4).items():
            with scoring(rule):
                found = {h.content for h in mem.recall("Which city do I live in?", user_id="u", k=3, touch=False)}
            assert found == {"我住在杭州", "我喜欢乌龙茶", "I walk to work"}, name
    finally:
        mem.close()
