"""Sanity checks on LLMConflictJudge's valid answers (issue 18): hard signals win, a degenerate model is not trusted."""

from __future__ import annotations

import json

import pytest
from langchain_core.language_models import FakeListChatModel

from hybrid_memory.errors import ConfigurationError
from hybrid_memory.write.conflict import HeuristicConflictJudge, LLMConflictJudge


def reply(*relations: str) -> str:
    return json.dumps({"verdicts": [{"index": i, "relation": r, "reason": "r"} for i, r in enumerate(relations)]})


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("I booked room 301", "I booked room 302", "different identifiers"),
        ("note 3 about 项目进度 3", "note 4 about 项目进度 4", "different identifiers"),
        ("The dentist appointment is on 5月3日", "The dentist appointment is on 6月7日", "different dates"),
        ("I am allergic to peanuts and to dust", "I am allergic to shellfish and to dust", "list item"),
        ("I am vegetarian", "My sister is vegetarian", "other holder"),
    ],
)
def test_hard_signals_win_over_a_models_contradicts(old: str, new: str, why: str) -> None:
    j = LLMConflictJudge(FakeListChatModel(responses=[reply("contradicts")]), method="json_mode")
    [v] = j.judge(new, [old])
    assert (v.relation, v.judge) == ("compatible", "heuristic")
    assert why in v.reason and "model said contradicts; hard signal wins" in v.reason


def test_an_update_the_model_finds_is_kept() -> None:
    # The heuristic misses this one (no number, no declared change word it knows); the model may supersede.
    j = LLMConflictJudge(FakeListChatModel(responses=[reply("contradicts", "compatible")]), method="json_mode")
    vs = j.judge("I commute by train", ["I drive to work", "I live in Lyon"])
    assert [(v.relation, v.judge) for v in vs] == [("contradicts", "llm"), ("compatible", "llm")]
    assert HeuristicConflictJudge().judge("I commute by train", ["I drive to work"])[0].relation == "unrelated"


def test_distinct_reason_leaves_updates_alone() -> None:
    j = HeuristicConflictJudge()
    for new, old in [
        ("I have 3 cats", "I have 2 cats"),
        ("我现在改喝咖啡了", "我喜欢喝茶"),
        ("我的月薪是一万五", "我的月薪是一万二"),
        ("以后叫我王老师", "叫我小王"),
        ("I no longer eat meat", "I eat meat"),
    ]:
        assert j.distinct_reason(new, old) is None, (new, old)


def test_a_degenerate_model_is_not_trusted_until_it_varies() -> None:
    # The same answer for every pair, as SmolLM2-135M gave: after `degenerate_window` pairs the heuristic judges.
    answers = [reply("contradicts")] * 3 + [reply("contradicts", "contradicts")] + [reply("compatible")]
    j = LLMConflictJudge(FakeListChatModel(responses=answers), method="json_mode", degenerate_window=4)
    pairs = [("I like tea", "I like jazz"), ("I run", "I swim")] * 2
    first = [j.judge(new, [old])[0] for new, old in pairs[:3]]
    assert [(v.relation, v.judge) for v in first] == [("contradicts", "llm")] * 3
    fourth = j.judge("I walk", ["I cycle", "I run"])  # the window is full of 'contradicts' now
    assert [v.judge for v in fourth] == ["heuristic", "heuristic"]
    assert all("model degenerate: 'contradicts' for the last 4 pairs; heuristic used" in v.reason for v in fourth)
    assert [v.relation for v in fourth] == [
        v.relation for v in HeuristicConflictJudge().judge("I walk", ["I cycle", "I run"])
    ]
    [varied] = j.judge("I commute by train", ["I drive to work"])  # it varies: trusted again
    assert (varied.relation, varied.judge) == ("compatible", "llm")


def test_a_run_of_unrelated_or_compatible_answers_stays_trusted() -> None:
    # What a good model says for most pairs: it keeps both memories, so it is not a reason for distrust.
    for relation in ("unrelated", "compatible"):
        j = LLMConflictJudge(
            FakeListChatModel(responses=[reply(relation)] * 6), method="json_mode", degenerate_window=4
        )
        verdicts = [j.judge("I have 3 cats", ["I have 2 cats"])[0] for _ in range(6)]
        assert [(v.relation, v.judge) for v in verdicts] == [(relation, "llm")] * 6


async def test_async_judge_applies_the_same_checks() -> None:
    j = LLMConflictJudge(
        FakeListChatModel(responses=[reply("contradicts")] * 3), method="json_mode", degenerate_window=2
    )
    [a] = await j.ajudge("I booked room 302", ["I booked room 301"])
    assert (a.relation, a.judge) == ("compatible", "heuristic")
    [b] = await j.ajudge("I have 3 cats", ["I have 2 cats"])
    assert b.judge == "heuristic" and "model degenerate" in b.reason and b.relation == "contradicts"


def test_the_check_can_be_turned_off_and_is_validated() -> None:
    j = LLMConflictJudge(FakeListChatModel(responses=[reply("unrelated")] * 3), method="json_mode", degenerate_window=0)
    assert [j.judge("I run", ["I swim"])[0].judge for _ in range(3)] == ["llm"] * 3
    with pytest.raises(ConfigurationError):
        LLMConflictJudge(FakeListChatModel(responses=[]), degenerate_window=-1)
