"""LLMImportanceScorer logic against LangChain's own fake chat models (no network).

The wire format against a real OpenAI-compatible server is covered by the recorded cassettes in
tests/integration/test_llm_cassettes.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pytest
from langchain_core.language_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage

from hybrid_memory.errors import ConfigurationError
from hybrid_memory.llm_call import LLMCallPolicy, parse_json_object
from hybrid_memory.write.importance import (
    HeuristicImportanceScorer,
    ImportanceScorer,
    LLMImportanceScorer,
    content_key,
)


class ToolFake(GenericFakeChatModel):
    """GenericFakeChatModel that accepts bind_tools (frameworks.md §2.4), recording its arguments."""

    bound: ClassVar[list[dict[str, Any]]] = []

    def bind_tools(self, tools: Sequence[Any], **kw: Any) -> Any:
        self.bound.append({"tools": list(tools), **kw})
        return self


def scores_json(*pairs: tuple[int, int]) -> str:
    return json.dumps({"scores": [{"index": i, "score": s} for i, s in pairs]})


def tool_msg(args: dict[str, Any], name: str = "ImportanceScores") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call_1"}])


class Failing(FakeListChatModel):
    """Raises on the first ``fail`` calls, then answers like FakeListChatModel."""

    fail: int = 1
    seen: int = 0

    def _call(self, *args: Any, **kwargs: Any) -> str:
        self.seen += 1
        if self.seen <= self.fail:
            raise ConnectionError("server went away")
        return super()._call(*args, **kwargs)


def no_sleep(_: float) -> None:
    return None


class Hung(FakeListChatModel):
    """Never answers until ``release`` is set: a deadline always fires first, however loaded the machine."""

    release: Any = None

    def _call(self, *args: Any, **kwargs: Any) -> str:  # also what ainvoke runs (in an executor thread)
        self.release.wait(60)
        return super()._call(*args, **kwargs)


def test_protocol_and_json_mode_mapping() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 10), (1, 1), (2, 5))])
    s = LLMImportanceScorer(llm, method="json_mode")
    assert isinstance(s, ImportanceScorer)
    b = s.score(["记住：我对花生过敏", "lol what", "I live in Leeds"], roles=["user", "user", "user"])
    assert [x.importance for x in b.items] == [1.0, 0.0, pytest.approx(4 / 9, abs=1e-4)]
    assert b.fallback_reason is None
    assert b.scorer == "llm"
    assert b.items[0].key_frame_reason == "remember"
    assert b.items[1].key_frame_reason is None
    assert b.details["llm_calls"] == "1"


def test_function_calling_reads_the_named_tool_call() -> None:
    model = ToolFake(messages=iter([tool_msg({"scores": [{"index": 0, "score": 9}, {"index": 1, "score": 2}]})]))
    model.bound.clear()
    s = LLMImportanceScorer(model, method="function_calling", max_tokens=123)
    b = s.score(["I'm allergic to penicillin", "haha nice one"])
    assert [round(x.importance, 3) for x in b.items] == [round(8 / 9, 3), round(1 / 9, 3)]
    assert b.fallback_reason is None
    assert model.bound[0]["tool_choice"] == "ImportanceScores"
    assert model.bound[0]["max_tokens"] == 123  # explicit budget on non-OpenAI models


def test_function_calling_accepts_json_in_text_when_no_tool_call() -> None:
    model = ToolFake(messages=iter([AIMessage(content="```json\n" + scores_json((0, 7)) + "\n```")]))
    b = LLMImportanceScorer(model).score(["We decided to use AWS"])
    assert b.items[0].importance == pytest.approx(6 / 9, abs=1e-4)
    assert b.fallback_reason is None


def test_model_without_tools_is_a_configuration_error_not_a_silent_fallback() -> None:
    with pytest.raises(ConfigurationError, match="json_mode"):
        LLMImportanceScorer(FakeListChatModel(responses=["{}"]), method="function_calling").score(["I like tea"])


def test_batches_several_turns_per_call_and_caches_by_content_hash() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 8), (1, 6)), scores_json((0, 3))])
    s = LLMImportanceScorer(llm, method="json_mode", batch_size=2)
    texts = ["I prefer aisle seats", "My sister lives in Lyon", "Traffic was bad today"]
    b1 = s.score(texts)
    assert s.calls == 2  # 3 turns, batch of 2 -> two calls
    assert b1.fallback_reason is None
    b2 = s.score(["My sister lives in Lyon", "I prefer  aisle seats "])  # normalised text hits the cache
    assert s.calls == 2
    assert b2.details["cached"] == "2"
    assert [x.importance for x in b2.items] == [b1.items[1].importance, b1.items[0].importance]
    # the cache key is a hash, the text itself is not kept
    assert content_key("I prefer aisle seats") in s._cache
    assert all("aisle" not in k for k in s._cache)
    s.clear_cache()
    assert not s._cache


def test_pleasantries_are_not_sent_to_the_model() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 9))])
    s = LLMImportanceScorer(llm, method="json_mode")
    b = s.score(["好的", "谢谢！", "我对猫毛过敏"])
    assert s.calls == 1
    assert b.items[0].importance == 0.0 and b.items[1].importance == 0.0
    assert b.items[2].importance == pytest.approx(8 / 9, abs=1e-4)


def test_retries_with_exponential_backoff_then_succeeds() -> None:
    waits: list[float] = []
    llm = Failing(responses=[scores_json((0, 8))], fail=2)
    s = LLMImportanceScorer(
        llm, method="json_mode", policy=LLMCallPolicy(max_retries=2, backoff=0.25, sleep=waits.append)
    )
    b = s.score(["My budget is 5000 yuan"])
    assert waits == [0.25, 0.5]
    assert b.fallback_reason is None
    assert b.details["attempts"] == "3"


def test_failure_falls_back_to_heuristic_and_says_so() -> None:
    llm = Failing(responses=[scores_json((0, 8))], fail=99)
    s = LLMImportanceScorer(llm, method="json_mode", policy=LLMCallPolicy(max_retries=1, sleep=no_sleep))
    texts = ["记住：我对花生过敏", "今天天气真好啊"]
    b = s.score(texts)
    expected = HeuristicImportanceScorer().score(texts).items
    assert [x.importance for x in b.items] == [x.importance for x in expected]
    assert b.fallback_reason is not None
    assert "2 of 2 turn(s) scored by heuristic" in b.fallback_reason
    assert "ConnectionError" in b.fallback_reason and "2 attempt(s)" in b.fallback_reason
    assert not s._cache  # fallback scores are not cached as model scores


def test_timeout_is_enforced_and_reported() -> None:
    release = threading.Event()
    hung = Hung(responses=[scores_json((0, 9))], release=release)
    s = LLMImportanceScorer(hung, method="json_mode", policy=LLMCallPolicy(timeout=0.2, max_retries=0))
    try:
        b = s.score(["I have type 1 diabetes"])
    finally:
        release.set()
    assert b.fallback_reason is not None and "timed out" in b.fallback_reason
    assert b.items[0].importance == HeuristicImportanceScorer().score_one("I have type 1 diabetes").importance


def test_malformed_and_partial_replies_fall_back_only_for_missing_turns() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 10), (5, 3), (1, 42))])  # index 5 unknown, 42 out of range
    s = LLMImportanceScorer(llm, method="json_mode", policy=LLMCallPolicy(max_retries=0))
    b = s.score(["Remember my PIN hint is 'blue'", "I live in Oslo"])
    assert b.items[0].importance == 1.0
    assert b.fallback_reason is not None and "1 of 2" in b.fallback_reason
    assert "no valid score for 1 of 2" in b.fallback_reason


def test_truncated_reply_is_reported_as_truncated() -> None:
    truncated = AIMessage(content='{"scores": [{"index": 0, "sc', response_metadata={"finish_reason": "length"})
    model = ToolFake(messages=iter([truncated]))
    s = LLMImportanceScorer(model, max_tokens=8, policy=LLMCallPolicy(max_retries=0))
    b = s.score(["I run a bakery called Crumbs"])
    assert b.fallback_reason is not None and "truncated at max_tokens=8" in b.fallback_reason


def test_one_based_complete_answers_are_accepted() -> None:
    llm = FakeListChatModel(responses=[scores_json((1, 9), (2, 2))])
    b = LLMImportanceScorer(llm, method="json_mode").score(["I'm vegan", "ok cool then"])
    assert b.fallback_reason is None
    assert b.items[0].importance > b.items[1].importance


def test_bare_list_reply_is_accepted() -> None:
    llm = FakeListChatModel(responses=['[{"index": 0, "score": 6}]'])
    b = LLMImportanceScorer(llm, method="json_mode").score(["I speak Spanish"])
    assert b.items[0].importance == pytest.approx(5 / 9, abs=1e-4)


async def test_async_scoring_uses_ainvoke_and_falls_back() -> None:
    good = FakeListChatModel(responses=[scores_json((0, 9))])
    b = await LLMImportanceScorer(good, method="json_mode").ascore(["我有高血压，在吃药"])
    assert b.items[0].importance == pytest.approx(8 / 9, abs=1e-4)
    release = threading.Event()
    hung = Hung(responses=[scores_json((0, 9))], release=release)
    try:
        b2 = await LLMImportanceScorer(
            hung, method="json_mode", policy=LLMCallPolicy(timeout=0.1, max_retries=0)
        ).ascore(["I'm vegan"])
    finally:
        release.set()  # before the loop closes: its executor waits for the hung call's thread
    assert b2.fallback_reason is not None and "timed out" in b2.fallback_reason


def test_messages_number_every_turn_with_its_role() -> None:
    msgs = LLMImportanceScorer.messages(["a  b", "c"], ["user", "assistant"])
    assert msgs[0][0] == "system" and "1 to 10" in msgs[0][1]
    assert msgs[1][1].splitlines()[1:] == ["[0] user: a b", "[1] assistant: c"]


def test_parse_json_object_rejects_text_without_json() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        parse_json_object("I would rate these highly.")


def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError):
        LLMImportanceScorer(object())
    with pytest.raises(ConfigurationError):
        LLMImportanceScorer(FakeListChatModel(responses=["x"]), method="json_schema")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        LLMImportanceScorer(FakeListChatModel(responses=["x"]), batch_size=0)


def _iter(xs: list[AIMessage]) -> Iterator[AIMessage]:
    return iter(xs)


def test_generic_fake_chat_model_streaming_source_is_consumed_once_per_call() -> None:
    model = ToolFake(messages=_iter([tool_msg({"scores": [{"index": 0, "score": 4}]}), tool_msg({"scores": []})]))
    s = LLMImportanceScorer(model, policy=LLMCallPolicy(max_retries=0))
    assert s.score(["I work at a bank"]).items[0].importance == pytest.approx(3 / 9, abs=1e-4)
    second = s.score(["I drive a Civic"])
    assert second.fallback_reason is not None and "no valid score" in second.fallback_reason


# ------------------------------------------------------------------ sanity checks on valid answers
SANITY_TEXTS = ["记住：我对花生过敏", "I prefer aisle seats on planes", "今天天气不错啊", "My sister is called Mei"]


def test_a_batch_with_one_score_for_every_turn_falls_back_and_is_not_cached() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 5), (1, 5), (2, 5), (3, 5))])
    s = LLMImportanceScorer(llm, method="json_mode", min_rank_agreement=None)
    b = s.score(SANITY_TEXTS)
    heuristic = HeuristicImportanceScorer().score(SANITY_TEXTS)
    assert [x.importance for x in b.items] == [x.importance for x in heuristic.items]
    assert b.fallback_reason is not None and "degenerate answer" in b.fallback_reason and "(5/10)" in b.fallback_reason
    assert all(x.note is not None and "degenerate" in x.note for x in b.items)
    assert b.details["fallback"] == "4"
    assert not s._cache


def test_two_turns_with_one_score_are_not_degenerate() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 7), (1, 7))])
    b = LLMImportanceScorer(llm, method="json_mode").score(["I prefer aisle seats", "My sister is called Mei"])
    assert b.fallback_reason is None and [x.note for x in b.items] == [None, None]


def test_a_model_contradicting_a_hard_signal_is_raised_to_the_heuristic_floor() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 5), (1, 2), (2, 9))])
    s = LLMImportanceScorer(llm, method="json_mode", min_rank_agreement=None)
    texts = ["Remember: I am allergic to peanuts", "I never eat pork", "I prefer aisle seats"]
    b = s.score(texts)
    rules = HeuristicImportanceScorer().score(texts).items
    assert b.items[0].importance == rules[0].importance and b.items[1].importance == rules[1].importance
    assert b.items[0].note is not None and "explicit remember" in b.items[0].note
    assert b.items[1].note is not None and "constraint" in b.items[1].note
    assert b.items[2].importance == pytest.approx(8 / 9, abs=1e-4) and b.items[2].note is None
    assert (
        b.fallback_reason == "2 of 3 turn(s) raised to the heuristic floor (hard signal: explicit remember, constraint)"
    )
    assert b.details["floored"] == "2"


def test_a_model_scoring_a_hard_signal_high_is_not_floored() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 8))])
    b = LLMImportanceScorer(llm, method="json_mode").score(["记住：我对花生过敏"])
    assert b.fallback_reason is None and b.items[0].importance == pytest.approx(7 / 9, abs=1e-4)


def test_a_model_that_ranks_against_the_heuristic_over_the_window_is_not_trusted() -> None:
    texts = ["记住：我对花生过敏", "lol what", "I prefer aisle seats on planes", "今天天气不错啊"]
    inverted = scores_json((0, 2), (1, 9), (2, 3), (3, 8))  # high for small talk, low for the facts
    llm = FakeListChatModel(responses=[inverted] * 4)
    s = LLMImportanceScorer(llm, method="json_mode", cache_size=0, agreement_window=10, min_rank_agreement=0.2)
    first = s.score(texts)  # 4 pairs < half the window (5): not judged yet
    assert first.fallback_reason is None or "rank agreement" not in first.fallback_reason
    second = s.score(texts)
    assert second.fallback_reason is not None and "rank agreement with the heuristic" in second.fallback_reason
    heuristic = HeuristicImportanceScorer().score(texts)
    assert [x.importance for x in second.items] == [x.importance for x in heuristic.items]


def test_a_model_that_agrees_with_the_heuristic_keeps_its_scores() -> None:
    texts = ["记住：我对花生过敏", "lol what", "I prefer aisle seats on planes", "今天天气不错啊"]
    agreeing = scores_json((0, 10), (1, 2), (2, 7), (3, 3))
    llm = FakeListChatModel(responses=[agreeing] * 3)
    s = LLMImportanceScorer(llm, method="json_mode", cache_size=0, agreement_window=8)
    for _ in range(3):
        b = s.score(texts)
        assert b.fallback_reason is None
    assert [x.importance for x in b.items][2] == pytest.approx(6 / 9, abs=1e-4)


def test_the_same_score_over_several_small_calls_is_degenerate() -> None:
    llm = FakeListChatModel(responses=[scores_json((0, 5), (1, 5))] * 3)
    s = LLMImportanceScorer(llm, method="json_mode", cache_size=0, min_rank_agreement=None)
    pairs = [["I prefer aisle seats", "My sister is called Mei"], ["I live in Leeds", "I work as a nurse"]]
    assert s.score(pairs[0]).fallback_reason is None and s.score(pairs[1]).fallback_reason is None
    third = s.score(["I drive a blue Renault", "My cat is called Pixel"])  # six 5/10 in a row
    assert third.fallback_reason is not None and "last 6 user-turn scores are all the same" in third.fallback_reason
    rules = HeuristicImportanceScorer().score(["I drive a blue Renault", "My cat is called Pixel"]).items
    assert [x.importance for x in third.items] == [x.importance for x in rules]
