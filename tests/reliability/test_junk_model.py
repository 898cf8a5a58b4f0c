"""The write path against a too-small model: the scripted ``junk`` server (issue 18).

``tests/reliability/fake_openai.py``'s ``junk`` action answers every request well-formed but
wrong: the same score (5) for every turn, and facts that echo the instruction, are empty
("记住！") or are hallucinated, each citing every turn of the call. These tests run the
benchmarks' own plays (``benchmarks/pollution.py``, ``benchmarks/importance_llm.py``) over real
HTTP and LangChain's ``ChatOpenAI``, so the published rows cannot drift from what the suite checks.
"""

from __future__ import annotations

import pytest

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
