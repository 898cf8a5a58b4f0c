"""LLM scorer / extractor / judge / summarizer faults over real HTTP (issue 8, fault 4).

``langchain_openai.ChatOpenAI(base_url=...)`` talks to a loopback OpenAI-compatible server
(:mod:`tests.reliability.fake_openai`) that times out, answers 429/500/503, cuts or truncates
its reply, or sends malformed JSON. The server is ours because a real provider cannot be made to
fail on demand; the client stack (ChatOpenAI, openai, httpx) is real. ChatOpenAI's own retries
are off (``max_retries=0``) so the attempts counted are the library's.

Expected: bounded retries with exponential backoff, then the heuristic fallback, recorded in
the outcome (``ScoreBatch.fallback_reason`` / ``ExtractionResult.error`` /
``HybridMemory.background_errors``); no exception reaches the agent; the API key never appears
in a log record or an error text.

Timing is asserted on what the code *asked for*, never on wall time (issue 14): the
:class:`~hybrid_memory.llm_call.LLMCallPolicy` gets a recording ``sleep``, and the tests check
the requested backoff sequence (0.1 s, 0.2 s) and the number of requests the server saw. A
``"timeout"`` request is held by the server until the test ends, so a deadline always fires
however loaded the machine is; where an answer must arrive in time the deadline is generous.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.llm_call import LLMCallPolicy
from hybrid_memory.records import Turn
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.conflict import LLMConflictJudge
from hybrid_memory.write.extraction import FactExtractor
from hybrid_memory.write.importance import HeuristicImportanceScorer, LLMImportanceScorer
from hybrid_memory.write.summary import SessionSummarizer
from tests.reliability.fake_openai import FakeOpenAI, serve

pytest.importorskip("langchain_openai")

API_KEY = "sk-reliability-CANARY-3f9c1e7a5b2d4c6e8f0a"
T0 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
TEXTS = ["Remember: I am allergic to peanuts", "ok thanks"]
RETRIES, BACKOFF = 2, 0.1
#: The delays the client must ask for between its attempts: 0.1 s, then doubled.
BACKOFFS = [0.1, 0.2]
#: Deadline of an attempt the server holds ("timeout"): it only bounds how long the test waits.
TIMEOUT = 0.4
#: Deadline when an answer must arrive in time (a loopback reply takes milliseconds; this leaves
#: room for a loaded machine without making a test that waits through a held request slow).
ANSWER_TIMEOUT = 2.0
#: Deadline when no request is held: large, so load can never turn a fast fault into a timeout.
NO_HOLD_TIMEOUT = 30.0
FAULTS = ["timeout", "429", "500", "503", "truncated", "malformed", "wrong_schema", "bad_body", "cut"]


class Sleeps:
    """A recording ``sleep`` / ``asleep``: the delays asked for and how many requests preceded each."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.delays: list[float] = []
        self.requests_before: list[int] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.requests_before.append(len(self.fake.requests))

    async def asleep(self, seconds: float) -> None:
        self(seconds)


def deadline(script: list[str]) -> float:
    """The per-attempt timeout for a server script (see the constants)."""
    if set(script) == {"timeout"}:
        return TIMEOUT
    return ANSWER_TIMEOUT if "timeout" in script else NO_HOLD_TIMEOUT


def chat(fake: FakeOpenAI, **kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="gpt-4o-mini", base_url=fake.base_url, api_key=API_KEY, max_retries=0, timeout=60, **kwargs)


def policy(fake: FakeOpenAI, sleeps: Sleeps | None = None) -> LLMCallPolicy:
    sleeps = sleeps if sleeps is not None else Sleeps(fake)
    return LLMCallPolicy(
        timeout=deadline(fake.script), max_retries=RETRIES, backoff=BACKOFF, sleep=sleeps, asleep=sleeps.asleep
    )


def scorer(fake: FakeOpenAI, sleeps: Sleeps | None = None, **kwargs: Any) -> LLMImportanceScorer:
    return LLMImportanceScorer(chat(fake, **kwargs), cache_size=0, policy=policy(fake, sleeps))


def extractor(fake: FakeOpenAI, sleeps: Sleeps | None = None) -> FactExtractor:
    return FactExtractor(chat(fake), batch_turns=3, policy=policy(fake, sleeps))


def turns(user: str = "alice") -> list[Turn]:
    return [
        Turn(id=f"t{i}", user_id=user, session_id="s1", role=r, content=c, timestamp=T0)
        for i, (r, c) in enumerate(
            [("user", "I am allergic to peanuts"), ("assistant", "Noted."), ("user", "Thanks a lot")]
        )
    ]


def assert_backoff(fake: FakeOpenAI, sleeps: Sleeps, attempts: int) -> None:
    """``attempts`` requests reached the server, and the client asked to wait 0.1 s, 0.2 s, ... between them.

    An attempt abandoned at its deadline may reach the server late on a loaded machine (its
    thread is still sending), so the count is awaited; nothing sends more than ``attempts``.
    """
    assert fake.wait_for_requests(attempts, timeout=60), f"{len(fake.requests)} of {attempts} requests arrived"
    assert len(fake.requests) == attempts
    assert sleeps.delays == BACKOFFS[: attempts - 1]
    if "timeout" not in fake.script:  # a reply was read, so its request was recorded before the wait
        assert sleeps.requests_before == list(range(1, attempts))


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
    with serve([fault]) as fake:
        sleeps = Sleeps(fake)
        batch = scorer(fake, sleeps).score(TEXTS, roles=["user", "user"])
        assert_backoff(fake, sleeps, RETRIES + 1)
        assert fake.requests[0].headers.get("authorization") == f"Bearer {API_KEY}"
    heuristic = HeuristicImportanceScorer().score(TEXTS, roles=["user", "user"])
    assert batch.fallback_reason is not None and "heuristic" in batch.fallback_reason
    assert f"after {RETRIES + 1} attempt" in batch.fallback_reason
    assert batch.details["attempts"] == str(RETRIES + 1)
    if fault == "timeout":
        assert "timed out" in batch.fallback_reason
    assert [x.importance for x in batch.items] == [x.importance for x in heuristic.items]
    assert batch.items[0].key_frame_reason is not None  # "remember" still pins the turn
    assert_key_never_logged(caplog, batch.fallback_reason)


@pytest.mark.parametrize("script", [["429", "ok"], ["500", "timeout", "ok"], ["truncated", "malformed", "ok"]])
def test_scorer_recovers_within_its_retries(script: list[str]) -> None:
    with serve(script) as fake:
        sleeps = Sleeps(fake)
        batch = scorer(fake, sleeps).score(TEXTS, roles=["user", "user"])
        assert_backoff(fake, sleeps, len(script))
    assert batch.fallback_reason is None
    assert batch.details["attempts"] == str(len(script))
    assert [x.importance for x in batch.items] == [
        round(8 / 9, 4),
        0.0,
    ]  # "ok thanks" is a pleasantry: 0 without a call


@pytest.mark.parametrize("script", [["500"], ["timeout"]])
async def test_async_scorer_backs_off_then_falls_back_too(script: list[str]) -> None:
    import httpx

    # Its own client, closed on this test's event loop: langchain-openai's default async client is
    # cached process-wide, and the keep-alive connection it pools here would outlive this loop
    # (Python 3.13 then warns about an unclosed transport at interpreter exit).
    async with httpx.AsyncClient() as client:
        with serve(script) as fake:
            sleeps = Sleeps(fake)
            batch = await scorer(fake, sleeps, http_async_client=client).ascore(TEXTS, roles=["user", "user"])
            assert_backoff(fake, sleeps, RETRIES + 1)
    assert batch.fallback_reason is not None and f"after {RETRIES + 1} attempt" in batch.fallback_reason


# ------------------------------------------------------------------------------ extractor
@pytest.mark.parametrize("fault", FAULTS)
def test_extractor_retries_then_reports_the_error_without_raising(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with serve([fault]) as fake:
        sleeps = Sleeps(fake)
        result = extractor(fake, sleeps).extract(turns())
        assert_backoff(fake, sleeps, RETRIES + 1)
    assert result.memories == []
    assert result.error is not None and "extraction failed" in result.error
    assert result.turn_ids == ("t0", "t1", "t2")
    assert_key_never_logged(caplog, result.error)


def test_extractor_recovers_within_its_retries() -> None:
    with serve(["503", "cut", "ok"]) as fake:
        sleeps = Sleeps(fake)
        result = extractor(fake, sleeps).extract(turns())
        assert_backoff(fake, sleeps, 3)
    assert result.error is None
    assert [m.content for m in result.memories] == ["The user is allergic to peanuts"]


# ------------------------------------------------------------------ one policy, every component
def test_judge_and_summarizer_follow_the_same_policy() -> None:
    """The conflict judge and the summarizer take the same policy object: same attempts, same waits."""
    with serve(["500"]) as fake:
        sleeps = Sleeps(fake)
        shared = policy(fake, sleeps)
        verdicts = LLMConflictJudge(chat(fake), policy=shared).judge("I drink coffee now", ["I drink tea"])
        assert_backoff(fake, sleeps, RETRIES + 1)
        summary = SessionSummarizer(chat(fake), policy=shared).summarize(None, ["I have 2 cats named Tom and Jerry"])
        assert fake.wait_for_requests(2 * (RETRIES + 1), timeout=60)
        assert len(fake.requests) == 2 * (RETRIES + 1)
        assert sleeps.delays == BACKOFFS + BACKOFFS
    assert len(verdicts) == 1 and "LLM judge failed" in verdicts[0].reason
    assert f"after {RETRIES + 1} attempt" in verdicts[0].reason
    assert summary.attempts == RETRIES + 1
    assert summary.fallback_reason is not None and "extractive summary used" in summary.fallback_reason
    assert summary.text == "I have 2 cats named Tom and Jerry"


# --------------------------------------------------------------------------------- facade
@pytest.mark.parametrize("fault", ["timeout", "bad_body"])
def test_no_llm_fault_reaches_the_agent_through_the_facade(fault: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with serve([fault]) as fake:
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
            # add_turn scores with the heuristic; the LLM's refinement fails in the background.
            assert turn.scoring_note is None
            assert mem.flush(timeout=60)
            logged = [n for o in mem.write_log("alice") for n in o.notes]
            assert sum("scorer fallback" in n for n in logged) == 1  # the remember
            snap = mem.metrics()
            assert (snap.refinement.turns, snap.refinement.fallback, snap.refinement.changed) == (1, 1, 0)
            reason = snap.scorer.last_fallback_reason
            assert reason is not None and "model call failed" in reason
            (kept,) = [r for r in mem.list_memories("alice") if "peanuts" in r.content]
            assert kept.importance == turn.importance and "importance_refined" not in kept.metadata
        finally:
            mem.close()
