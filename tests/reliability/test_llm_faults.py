"""LLM scorer / extractor faults over real HTTP (issue 8, fault 4).

``langchain_openai.ChatOpenAI(base_url=...)`` talks to a loopback OpenAI-compatible server
(:mod:`tests.reliability.fake_openai`) that times out, answers 429/500/503, cuts or truncates
its reply, or sends malformed JSON. The server is ours because a real provider cannot be made to
fail on demand; the client stack (ChatOpenAI, openai, httpx) is real. ChatOpenAI's own retries
are off (``max_retries=0``) so the attempts counted are the library's.

Expected: bounded retries with exponential backoff, then the heuristic fallback, recorded in
the outcome (``ScoreBatch.fallback_reason`` / ``ExtractionResult.error`` /
``HybridMemory.background_errors``); no exception reaches the agent; the API key never appears
in a log record or an error text.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.extraction import FactExtractor
from hybrid_memory.records import Turn
from hybrid_memory.scoring import HeuristicImportanceScorer, LLMImportanceScorer
from hybrid_memory.testing import HashingEmbedder
from tests.reliability.fake_openai import FakeOpenAI, serve

pytest.importorskip("langchain_openai")

API_KEY = "sk-reliability-CANARY-3f9c1e7a5b2d4c6e8f0a"
T0 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
TEXTS = ["Remember: I am allergic to peanuts", "ok thanks"]
RETRIES, BACKOFF, TIMEOUT = 2, 0.1, 0.4
FAULTS = ["timeout", "429", "500", "503", "truncated", "malformed", "wrong_schema", "bad_body", "cut"]


def chat(fake: FakeOpenAI) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="gpt-4o-mini", base_url=fake.base_url, api_key=API_KEY, max_retries=0, timeout=10)


def scorer(fake: FakeOpenAI, **kwargs: Any) -> LLMImportanceScorer:
    kwargs.setdefault("timeout", TIMEOUT)
    return LLMImportanceScorer(chat(fake), max_retries=RETRIES, backoff=BACKOFF, cache_size=0, **kwargs)


def extractor(fake: FakeOpenAI) -> FactExtractor:
    return FactExtractor(chat(fake), batch_turns=3, timeout=TIMEOUT, max_retries=RETRIES, backoff=BACKOFF)


def turns(user: str = "alice") -> list[Turn]:
    return [
        Turn(id=f"t{i}", user_id=user, session_id="s1", role=r, content=c, timestamp=T0)
        for i, (r, c) in enumerate(
            [("user", "I am allergic to peanuts"), ("assistant", "Noted."), ("user", "Thanks a lot")]
        )
    ]


def assert_backoff(fake: FakeOpenAI, attempts: int) -> None:
    """``attempts`` requests, spaced by at least the exponential backoff (0.1 s, 0.2 s, ...)."""
    times = [r.at for r in fake.requests]
    assert len(times) == attempts
    for k in range(1, attempts):
        assert times[k] - times[k - 1] >= BACKOFF * 2 ** (k - 1) * 0.95


def assert_key_never_logged(caplog: pytest.LogCaptureFixture, *texts: str | None) -> None:
    for rec in caplog.records:
        assert API_KEY not in rec.getMessage()
        assert API_KEY not in str(rec.args)
    for t in texts:
        assert t is None or API_KEY not in t


# --------------------------------------------------------------------------------- scorer
@pytest.mark.parametrize("fault", FAULTS)
def test_scorer_retries_with_backoff_then_falls_back_and_records_it(
    fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with serve([fault], slow_seconds=TIMEOUT * 3) as fake:
        batch = scorer(fake).score(TEXTS, roles=["user", "user"])
        assert_backoff(fake, RETRIES + 1)
        assert fake.requests[0].headers.get("authorization") == f"Bearer {API_KEY}"
    heuristic = HeuristicImportanceScorer().score(TEXTS, roles=["user", "user"])
    assert batch.fallback_reason is not None and "heuristic" in batch.fallback_reason
    assert f"after {RETRIES + 1} attempt" in batch.fallback_reason
    if fault == "timeout":
        assert "timed out" in batch.fallback_reason
    assert [x.importance for x in batch.items] == [x.importance for x in heuristic.items]
    assert batch.items[0].key_frame_reason is not None  # "remember" still pins the turn
    assert_key_never_logged(caplog, batch.fallback_reason)


@pytest.mark.parametrize("script", [["429", "ok"], ["500", "timeout", "ok"], ["truncated", "malformed", "ok"]])
def test_scorer_recovers_within_its_retries(script: list[str]) -> None:
    with serve(script, slow_seconds=TIMEOUT * 3) as fake:
        batch = scorer(fake).score(TEXTS, roles=["user", "user"])
        assert_backoff(fake, len(script))
    assert batch.fallback_reason is None
    assert [x.importance for x in batch.items] == [
        round(8 / 9, 4),
        0.0,
    ]  # "ok thanks" is a pleasantry: 0 without a call


async def test_async_scorer_falls_back_too() -> None:
    with serve(["500"]) as fake:
        batch = await scorer(fake).ascore(TEXTS, roles=["user", "user"])
        assert len(fake.requests) == RETRIES + 1
    assert batch.fallback_reason is not None


# ------------------------------------------------------------------------------ extractor
@pytest.mark.parametrize("fault", FAULTS)
def test_extractor_retries_then_reports_the_error_without_raising(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with serve([fault], slow_seconds=TIMEOUT * 3) as fake:
        result = extractor(fake).extract(turns())
        assert_backoff(fake, RETRIES + 1)
    assert result.memories == []
    assert result.error is not None and "extraction failed" in result.error
    assert result.turn_ids == ("t0", "t1", "t2")
    assert_key_never_logged(caplog, result.error)


def test_extractor_recovers_within_its_retries() -> None:
    with serve(["503", "cut", "ok"]) as fake:
        result = extractor(fake).extract(turns())
        assert len(fake.requests) == 3
    assert result.error is None
    assert [m.content for m in result.memories] == ["The user is allergic to peanuts"]


# --------------------------------------------------------------------------------- facade
@pytest.mark.parametrize("fault", ["timeout", "bad_body"])
def test_no_llm_fault_reaches_the_agent_through_the_facade(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with serve([fault], slow_seconds=TIMEOUT * 3) as fake:
        mem = HybridMemory(
            store=LocalStore(":memory:"),
            embedder=HashingEmbedder(),
            scorer=scorer(fake),
            extractor=extractor(fake),
            config=HybridMemoryConfig(buffer={"summary_every": 0}),
        )
        try:
            for i, (role, text) in enumerate(
                [("user", "Remember: I am allergic to peanuts"), ("assistant", "Noted."), ("user", "I live in Lyon")]
            ):
                mem.add_turn("alice", "s1", role, text, timestamp=T0.replace(minute=i))
            out = mem.remember("alice", "My sister is called Mei")
            assert out.action == "added"
            assert mem.flush(timeout=60)
            # The key frame was written with the heuristic importance.
            hits = mem.recall("peanuts allergy", user_id="alice")
            assert hits and hits[0].record.content == "Remember: I am allergic to peanuts"
            # The extraction failure is recorded, not raised.
            assert any("extraction failed" in e for e in mem.background_errors)
            ctx = mem.build_context("what am I allergic to?", user_id="alice", session_id="s1")
            assert ctx is not None
            assert_key_never_logged(caplog, *mem.background_errors)
        finally:
            mem.close()


def test_scorer_fallback_is_visible_in_the_facade_outcome() -> None:
    with serve(["500"]) as fake:
        mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), scorer=scorer(fake))
        try:
            out = mem.remember("alice", "My sister is called Mei")
            turn = mem.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts", timestamp=T0)
            assert any("scorer fallback" in n for n in out.notes), out
            assert turn.scoring_note is not None and "scorer fallback" in turn.scoring_note
            logged = [n for o in mem.write_log("alice") for n in o.notes]
            assert sum("scorer fallback" in n for n in logged) == 2  # the remember and the key-frame turn
        finally:
            mem.close()
