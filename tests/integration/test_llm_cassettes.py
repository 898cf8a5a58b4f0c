"""The LLM write-path components over real HTTP, replayed from vcrpy cassettes.

The cassettes under ``cassettes/test_llm_cassettes/`` were recorded once from a real
OpenAI-compatible server: ``llama-cpp-python[server]`` running SmolLM2-135M-Instruct
(models-and-data.md §2)::

    python -m llama_cpp.server --model SmolLM2-135M-Instruct.Q4_1.gguf --model_alias smollm2 \\
        --host 127.0.0.1 --port 18091 --n_ctx 2048
    LLM_BASE_URL=http://127.0.0.1:18091/v1 pytest tests/integration/test_llm_cassettes.py --record-mode=once

CI replays them (pytest-recording's default ``--record-mode=none``); no server, no network.
They prove the plumbing -- request shape (tools / JSON mode, explicit ``max_tokens``), parsing of
what a real server sends back, truncation, retries on HTTP errors, the recorded fallback -- not
quality: a 135M model scores and extracts badly, and several tests assert exactly that the
library notices and falls back instead of trusting garbage. The two ``*_on_a_real_model`` cassettes
(issue 18) show the sanity checks on the answers that issue reported: an allergy scored 5/10 and a
bare "记住！" extracted as a fact.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

import pytest

from hybrid_memory.llm_call import LLMCallPolicy
from hybrid_memory.records import Turn
from hybrid_memory.write.conflict import LLMConflictJudge
from hybrid_memory.write.extraction import FactExtractor
from hybrid_memory.write.importance import HeuristicImportanceScorer, LLMImportanceScorer
from hybrid_memory.write.summary import SessionSummarizer

pytest.importorskip("langchain_openai")
from langchain_openai import ChatOpenAI

BASE_URL = os.environ.get("LLM_BASE_URL", "http://127.0.0.1:18091/v1")
TS = datetime(2025, 5, 1, 12, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    """No ``record_mode`` key (it would beat ``--record-mode``); credentials never recorded."""
    return {
        "filter_headers": [("authorization", "PLACEHOLDER"), ("x-api-key", "PLACEHOLDER"), ("api-key", "PLACEHOLDER")],
        "match_on": ["method", "path"],
        "allow_playback_repeats": False,
        "decode_compressed_response": True,
    }


def model() -> ChatOpenAI:
    return ChatOpenAI(base_url=BASE_URL, api_key="sk-local", model="smollm2", temperature=0, max_retries=0)


def sent(cassette: Any, i: int = 0) -> dict[str, Any]:
    """The JSON body of the i-th request as recorded from the real server exchange."""
    body = cassette.requests[i].body
    return dict(json.loads(body.decode() if isinstance(body, bytes) else body))


TEXTS = ["记住：我对花生过敏", "哈哈今天好开心呀", "I live in Leeds with two roommates"]


@pytest.mark.vcr
def test_scorer_function_calling(vcr: Any) -> None:
    s = LLMImportanceScorer(
        model(), method="function_calling", max_tokens=200, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    b = s.score(TEXTS)
    req = sent(vcr)
    assert req["model"] == "smollm2"
    assert req["tools"][0]["function"]["name"] == "ImportanceScores"
    assert req["tool_choice"] == {"type": "function", "function": {"name": "ImportanceScores"}}
    assert req["max_tokens"] == 200 and "max_completion_tokens" not in req
    assert [m["role"] for m in req["messages"]] == ["system", "user"]
    assert "[2] user: I live in Leeds with two roommates" in req["messages"][1]["content"]
    # SmolLM2 answered with a well-formed tool call holding no scores: every turn falls back, visibly
    assert vcr.play_count == 1 or vcr.record_mode != "none"
    assert b.fallback_reason is not None and "3 of 3 turn(s) scored by heuristic" in b.fallback_reason
    assert [x.importance for x in b.items] == [x.importance for x in HeuristicImportanceScorer().score(TEXTS).items]


@pytest.mark.vcr
def test_scorer_json_mode_partial_answer(vcr: Any) -> None:
    s = LLMImportanceScorer(
        model(), method="json_mode", max_tokens=200, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    b = s.score(TEXTS)
    req = sent(vcr)
    assert req["response_format"] == {"type": "json_object"}
    assert req["max_tokens"] == 200 and "tools" not in req
    # the model answered {"scores":[1, 5]}: two positional scores, the third turn falls back; the
    # 1/10 for an explicit "remember" contradicts a hard signal and is raised to the heuristic floor
    rules = HeuristicImportanceScorer().score(TEXTS).items
    assert b.items[0].importance == rules[0].importance and b.items[1].importance == pytest.approx(4 / 9, abs=1e-4)
    assert b.items[0].note is not None and "model score 0.00 raised to the heuristic floor" in b.items[0].note
    assert b.fallback_reason is not None and "1 of 3 turn(s)" in b.fallback_reason
    assert "1 of 3 turn(s) raised to the heuristic floor (hard signal: explicit remember)" in b.fallback_reason
    assert s.score(TEXTS[:2]).details["cached"] == "2"  # cached: no second request


@pytest.mark.vcr
def test_scorer_truncated_reply_is_reported(vcr: Any) -> None:
    s = LLMImportanceScorer(model(), method="json_mode", max_tokens=5, policy=LLMCallPolicy(timeout=120, max_retries=0))
    b = s.score(["I love long walks on the beach with my dog"])
    assert sent(vcr)["max_tokens"] == 5
    assert b.fallback_reason is not None and "truncated at max_tokens=5" in b.fallback_reason


@pytest.mark.vcr
def test_scorer_retries_http_errors_then_falls_back(vcr: Any) -> None:
    # json_schema response formats get HTTP 500 from llama-cpp's server (models-and-data.md §2)
    bad = {
        "max_tokens": 50,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "S", "strict": True, "schema": {"type": "object", "properties": {}}},
        },
    }
    waits: list[float] = []
    s = LLMImportanceScorer(
        model(),
        method="json_mode",
        model_kwargs={"extra_body": bad},
        policy=LLMCallPolicy(max_retries=2, backoff=0.1, sleep=waits.append),
    )
    b = s.score(["I'm vegetarian"])
    assert len(vcr.requests) == 3
    assert [r["status"]["code"] for r in vcr.responses] == [500, 500, 500]
    assert waits == [0.1, 0.2]
    assert b.fallback_reason is not None
    assert "3 attempt(s)" in b.fallback_reason and "500" in b.fallback_reason
    assert b.items[0].importance == HeuristicImportanceScorer().score_one("I'm vegetarian").importance


@pytest.mark.vcr
async def test_scorer_async_json_mode(vcr: Any) -> None:
    s = LLMImportanceScorer(
        model(), method="json_mode", max_tokens=200, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    b = await s.ascore(["我下个月15号要去东京出差", "ok"])
    assert sent(vcr)["response_format"] == {"type": "json_object"}
    # recorded answer: {"scores": [{"index": 0, "score": 5}, {"index": 1, "score": 4}]} -- index 1 does not exist
    assert b.items[0].importance == pytest.approx(4 / 9, abs=1e-4) and b.fallback_reason is None
    assert b.items[1].importance == 0.0  # the pleasantry never went to the model
    assert "[0] user: 我下个月15号要去东京出差" in sent(vcr)["messages"][1]["content"]
    assert "ok" not in sent(vcr)["messages"][1]["content"].split("\n")[-1]


def turns() -> list[Turn]:
    said = [
        ("user", "I'm allergic to peanuts."),
        ("assistant", "Noted! Any other allergies?"),
        ("user", "No, but I moved to Berlin last month."),
        ("assistant", "How exciting!"),
    ]
    return [
        Turn(id=f"t{i}", user_id="u", session_id="s", role=r, content=c, timestamp=TS) for i, (r, c) in enumerate(said)
    ]


@pytest.mark.vcr
def test_extractor_function_calling(vcr: Any) -> None:
    ex = FactExtractor(
        model(), method="function_calling", max_tokens=300, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    res = ex.extract(turns())
    req = sent(vcr)
    assert req["tools"][0]["function"]["name"] == "FactList"
    assert req["max_tokens"] == 300
    assert "[3] assistant: How exciting!" in req["messages"][1]["content"]
    # recorded: one tool call, one memory citing turn 0 (the tiny model embellished the text)
    assert res.error is None and res.dropped == []
    [m] = res.memories
    assert m.content.startswith("I'm allergic to peanuts.")
    assert (m.category, m.importance, m.provenance, m.user_id, m.session_id) == ("fact", 0.7, ("t0",), "u", "s")
    assert m.to_record().source == "inferred"


@pytest.mark.vcr
def test_extractor_json_mode(vcr: Any) -> None:
    ex = FactExtractor(model(), method="json_mode", max_tokens=300, policy=LLMCallPolicy(timeout=120, max_retries=0))
    res = ex.extract(turns())
    assert sent(vcr)["response_format"] == {"type": "json_object"}
    assert res.turn_ids == ("t0", "t1", "t2", "t3")
    # recorded: JSON with the fields split across two objects -> rejected by the schema, reported
    assert res.memories == []
    assert res.error is not None and "does not match the schema" in res.error and "1 attempt(s)" in res.error


@pytest.mark.vcr
def test_conflict_judge(vcr: Any) -> None:
    judge = LLMConflictJudge(
        model(), method="json_mode", max_tokens=150, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    [v] = judge.judge("我现在改喝咖啡了", ["我喜欢喝茶"])
    req = sent(vcr)
    assert req["response_format"] == {"type": "json_object"} and req["max_tokens"] == 150
    assert "NEW: 我现在改喝咖啡了" in req["messages"][1]["content"]
    # recorded: verdict 0 "contradicts" (plus a verdict for a candidate that does not exist)
    assert (v.relation, v.judge) == ("contradicts", "llm")


@pytest.mark.vcr
def test_session_summarizer(vcr: Any) -> None:
    summ = SessionSummarizer(model(), max_attempts=2, max_tokens=120, policy=LLMCallPolicy(timeout=120, max_retries=0))
    said = ["我叫李雷，在杭州工作", "我不吃香菜", "我的预算是3000元"]
    res = summ.summarize(None, said)
    first = sent(vcr)
    assert first["max_tokens"] == 120 and "tools" not in first
    assert "我的预算是3000元" in first["messages"][1]["content"]
    # recorded: the first summary lost the number, the negation and the name, so it was
    # regenerated with that feedback; the second one (parroting the turns) passes the check
    assert res.attempts == 2 == len(vcr.requests)
    feedback = sent(vcr, 1)["messages"][1]["content"]
    assert "Your last summary lost: number 3000, negation ×1" in feedback and "name 李雷" in feedback
    assert res.check.ok and not res.kept_originals and "3000" in res.text


# ------------------------------------------------------------------ issue 18: the sanity checks on a real model
SANITY_TURNS = [
    ("user", "记住：我对花生严重过敏，吃了会休克"),
    ("user", "I never fly at night, it makes me anxious."),
    ("user", "今天天气不错啊"),
    ("assistant", "Sure, here is a recipe for pancakes."),
    ("user", "My sister Mei is a nurse in Porto."),
    ("user", "lol that's funny"),
    ("user", "我下个月20号要去成都出差"),
    ("user", "What's the capital of Australia?"),
]


@pytest.mark.vcr
def test_scorer_sanity_checks_on_a_real_model(vcr: Any) -> None:
    s = LLMImportanceScorer(
        model(), method="function_calling", max_tokens=300, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    texts, roles = [t for _, t in SANITY_TURNS], [r for r, _ in SANITY_TURNS]
    b = s.score(texts, roles=roles)
    rules = HeuristicImportanceScorer().score(texts, roles=roles).items
    assert sent(vcr)["tools"][0]["function"]["name"] == "ImportanceScores"
    # recorded (SmolLM2-135M, as in issue 18): the peanut allergy got 5/10 and "I never fly at night"
    # 4/10, valid answers that contradict hard signals: both are raised to the heuristic's score
    assert b.items[0].importance == rules[0].importance and b.items[1].importance == rules[1].importance
    assert b.items[0].note == "hard signal (explicit remember): model score 0.44 raised to the heuristic floor 0.95"
    assert b.items[1].note is not None and b.items[1].note.startswith("hard signal (constraint): model score 0.33")
    assert b.items[0].key_frame_reason == "remember" and b.items[1].key_frame_reason == "constraint"
    # the other turns had no valid score and fell back, "lol" never went to the model
    assert b.fallback_reason == (
        "5 of 8 turn(s) scored by heuristic: model returned no valid score for 5 of 7 turn(s); "
        "2 of 8 turn(s) raised to the heuristic floor (hard signal: explicit remember, constraint)"
    )
    assert [x.importance for x in b.items[2:]] == [x.importance for x in rules[2:]]


@pytest.mark.vcr
def test_extractor_grounding_on_a_real_model(vcr: Any) -> None:
    said = [
        ("user", "记住！"),
        ("assistant", "Thought: the user wants me to remember something.\nAnswer: Mia est allergique à l'hæblère."),
        ("user", "My daughter Mia is allergic to peanuts."),
        ("assistant", "Noted. Any other allergies?"),
    ]
    ts = [
        Turn(id=f"t{i}", user_id="u", session_id="s", role=r, content=c, timestamp=TS) for i, (r, c) in enumerate(said)
    ]
    ex = FactExtractor(
        model(), method="function_calling", max_tokens=300, policy=LLMCallPolicy(timeout=120, max_retries=0)
    )
    res = ex.extract(ts)
    assert sent(vcr)["tools"][0]["function"]["name"] == "FactList"
    # recorded (as in issue 18): the model's only memory is the bare cue "记住！", dropped as empty
    assert res.error is None and res.memories == []
    assert res.dropped == ['"记住！" is empty of content']
