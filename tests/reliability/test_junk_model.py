"""The write path against a too-small model: the scripted ``junk`` server (issue 18).

``tests/reliability/fake_openai.py``'s ``junk`` action answers every request well-formed but
wrong: the same score (5) for every turn, and facts that echo the instruction, are empty
("记住！") or are hallucinated, each citing every turn of the call. These tests run the
benchmarks' own plays (``benchmarks/pollution.py``, ``importance_llm.py``, ``conflict_judge.py``) over real
HTTP and LangChain's ``ChatOpenAI``, so the published rows cannot drift from what the suite checks.
"""

from __future__ import annotations

import pytest

from benchmarks.conflict_judge import llm_run, load_pairs, stratified
from benchmarks.importance_llm import LABELS
from benchmarks.importance_llm import run as importance_run
from benchmarks.pollution import _play

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("path", ["core", "adapter"])
def test_junk_model_pollutes_no_memory_and_every_drop_has_its_reason(path: str) -> None:
    res = _play(path, "junk")

    assert res["stored"] > 0  # the user's own turns are still stored
    assert res["polluted"] == 0, res["polluted_examples"]
    dropped = res["extraction_dropped"]
    # The junk facts are caught by the check that names them, not by a catch-all.
    assert dropped.get("copies the instruction", 0) > 0, dropped
    assert dropped.get("empty of content", 0) > 0, dropped
    assert dropped.get("other", 0) == 0, dropped
    # The constant 5/10 is recognised as degenerate and the turns fall back to the heuristic.
    assert res["scorer_fallback_turns"] > 0
    assert "degenerate" in (res["scorer_last_fallback"] or "")


def test_junk_model_scores_fall_back_to_the_heuristic_agreement() -> None:
    res = importance_run(None, "local", "junk", "json_mode", 8)

    assert set(res["sets"]) == set(LABELS)
    for name, s in res["sets"].items():
        # Combined scoring gives back the heuristic's rank agreement exactly, whatever the junk said.
        assert s["combined"] == s["heuristic"], name
        assert s["llm_raw"] < s["heuristic"], name  # the junk did reach the raw scorer
        assert s["combined_fallback_turns"] > 0
        assert set(s["combined_reasons"]) == {"degenerate answer"}, s["combined_reasons"]


def test_junk_model_conflict_verdicts_all_fall_back_and_are_counted() -> None:
    pairs = stratified(load_pairs(), 30)
    res = llm_run(pairs, 340, base_url=None, model="local", fake="junk", method="json_mode", checkpoint=None)

    # The junk answer has the wrong shape for a verdict: every pair is the heuristic's, and the report says so.
    assert res["model_verdicts"] == 0
    assert res["fallbacks"] == {"heuristic: call failed: reply does not match the schema": 30}
    assert res["runs"]["combined"]["groups"] == res["runs"]["heuristic"]["groups"]
    assert res["runs"]["llm_only"]["groups"] == {}
    assert res["sample"] == "stratified sample of 30 of 340 pairs (seed 0)"
