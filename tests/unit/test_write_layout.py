"""The write path lives in ``hybrid_memory.write``; the documented old module paths re-export it (issue 13)."""

from __future__ import annotations

import importlib

import pytest

from hybrid_memory import llm_call

MOVED = {
    "hybrid_memory.buffer": "hybrid_memory.write.buffer",
    "hybrid_memory.extraction": "hybrid_memory.write.extraction",
    "hybrid_memory.lifecycle": "hybrid_memory.write.lifecycle",
    "hybrid_memory.scoring": "hybrid_memory.write.importance",
    "hybrid_memory.summary": "hybrid_memory.write.summary",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_path_re_exports_every_public_name_of_the_new_home(old: str, new: str) -> None:
    before, after = importlib.import_module(old), importlib.import_module(new)
    assert set(after.__all__) <= set(before.__all__)
    for name in before.__all__:
        home = llm_call if name in llm_call.__all__ else after  # the LLM plumbing moved to llm_call
        assert getattr(before, name) is getattr(home, name), name


def test_old_writer_path_re_exports_the_writer_and_the_judges() -> None:
    from hybrid_memory import writer
    from hybrid_memory.write import conflict
    from hybrid_memory.write.writer import MemoryWriter

    assert writer.MemoryWriter is MemoryWriter
    for name in ("ConflictJudge", "ConflictReview", "HeuristicConflictJudge", "LLMConflictJudge", "Verdict"):
        assert getattr(writer, name) is getattr(conflict, name), name


def test_the_scorer_the_judge_and_the_summary_share_one_vocabulary() -> None:
    from hybrid_memory.text import vocabulary
    from hybrid_memory.write import conflict, importance, summary

    assert importance.PREFERENCE is conflict.PREFERENCE is vocabulary.PREFERENCE
    assert conflict.CHANGE_DECLARED is vocabulary.CHANGE_DECLARED
    assert importance.CHANGE is vocabulary.CHANGE
    assert vocabulary.CHANGE_DECLARED.pattern.strip("()") in vocabulary.CHANGE.pattern  # declared ⊂ hints
    # Chinese numbers: one parser and one counter list for the judge and the summary check.
    assert summary.critical_items("我养了两只猫，存了三千五百元")["numbers"] == {2.0, 3500.0}
    assert [n.value for n in conflict.HeuristicConflictJudge().features("我养了两只猫，存了三千五百元").nums] == [
        2.0,
        3500.0,
    ]
