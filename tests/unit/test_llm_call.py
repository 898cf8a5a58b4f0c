"""LLMCallPolicy and the one deadline/retry helper shared by every LLM component (issue 14).

No wall-clock assertion anywhere: waits go through a recording ``sleep``/``asleep``, and a call
that must miss its deadline blocks on an event that is only set after the test has checked the
outcome, so it times out however slow the machine is. Over real HTTP the same policy is
exercised in ``tests/reliability/test_llm_faults.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel

from hybrid_memory.errors import ConfigurationError, ScoringError
from hybrid_memory.llm_call import LLMCallPolicy, acall_with_policy, call_with_deadline, call_with_policy
from hybrid_memory.write.conflict import LLMConflictJudge
from hybrid_memory.write.extraction import FactExtractor
from hybrid_memory.write.importance import LLMImportanceScorer
from hybrid_memory.write.summary import SessionSummarizer


class Recorder:
    """``sleep`` and ``asleep`` that only record the requested delays."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.delays.append(seconds)


def failing(n: int, answer: str = "fine") -> Any:
    """A callable failing ``n`` times with ConnectionError, then returning ``answer``; counts calls."""
    calls = {"n": 0}

    def invoke() -> str:
        calls["n"] += 1
        if calls["n"] <= n:
            raise ConnectionError(f"down {calls['n']}")
        return answer

    invoke.calls = calls  # type: ignore[attr-defined]
    return invoke


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event a blocked call waits on; set at teardown so no thread outlives the test by long."""
    ev = threading.Event()
    yield ev
    ev.set()


# ------------------------------------------------------------------------------- the policy
def test_defaults_and_the_backoff_sequence() -> None:
    p = LLMCallPolicy()
    assert (p.timeout, p.max_retries, p.backoff, p.max_backoff, p.attempts) == (30.0, 2, 0.5, None, 3)
    assert LLMCallPolicy(backoff=0.1, max_retries=4).delays() == (0.1, 0.2, 0.4, 0.8)
    assert LLMCallPolicy(backoff=1.0, max_retries=5, max_backoff=4.0).delays() == (1.0, 2.0, 4.0, 4.0, 4.0)
    assert LLMCallPolicy(max_retries=0).delays() == ()
    with pytest.raises(ValueError):
        p.delay(0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": -1.0},
        {"max_retries": -1},
        {"max_retries": True},
        {"max_retries": 1.5},
        {"backoff": -0.1},
        {"max_backoff": -1.0},
        {"timeout": float("nan")},
    ],
)
def test_out_of_range_values_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        LLMCallPolicy(**kwargs)


def test_policy_is_frozen_keyword_only_and_replace_keeps_none_fields() -> None:
    p = LLMCallPolicy(timeout=5.0, max_retries=1, backoff=0.2)
    with pytest.raises(AttributeError):
        p.timeout = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        LLMCallPolicy(5.0)  # type: ignore[call-arg]
    assert p.replace() is p
    q = p.replace(max_retries=0, backoff=0.0)  # 0 is a value, not "unset"
    assert (q.timeout, q.max_retries, q.backoff) == (5.0, 0, 0.0)
    assert (p.max_retries, p.backoff) == (1, 0.2)
    rec = Recorder()
    assert p.replace(sleep=rec).sleep is rec


# ------------------------------------------------------------------------------- the helper
def test_retries_wait_the_requested_backoff_then_succeed() -> None:
    rec = Recorder()
    invoke = failing(2)
    policy = LLMCallPolicy(timeout=30.0, max_retries=3, backoff=0.1, sleep=rec)
    assert call_with_policy(policy, invoke, str.upper) == ("FINE", 3)
    assert rec.delays == [0.1, 0.2]
    assert invoke.calls["n"] == 3


def test_exhausted_retries_raise_scoring_error_with_the_last_cause() -> None:
    rec = Recorder()
    policy = LLMCallPolicy(timeout=30.0, max_retries=2, backoff=0.25, max_backoff=0.3, sleep=rec)
    with pytest.raises(ScoringError, match=r"ConnectionError: down 3 after 3 attempt\(s\)") as err:
        call_with_policy(policy, failing(99))
    assert isinstance(err.value.__cause__, ConnectionError)
    assert rec.delays == [0.25, 0.3]  # capped by max_backoff


def test_parse_failures_are_retried_and_configuration_errors_are_not() -> None:
    rec = Recorder()
    replies = iter(["garbled", "42"])
    assert call_with_policy(LLMCallPolicy(sleep=rec), lambda: next(replies), int) == (42, 2)
    assert rec.delays == [0.5]

    def misconfigured() -> str:
        raise ConfigurationError("no tools")

    rec.delays.clear()
    with pytest.raises(ConfigurationError):
        call_with_policy(LLMCallPolicy(sleep=rec), misconfigured)
    assert rec.delays == []


def test_a_call_that_misses_its_deadline_is_abandoned_and_retried(gate: threading.Event) -> None:
    rec = Recorder()
    started: list[int] = []

    def hangs() -> str:
        started.append(1)
        gate.wait(60)  # released at teardown, after the deadline has fired
        return "too late"

    policy = LLMCallPolicy(timeout=0.05, max_retries=1, backoff=0.1, sleep=rec)
    with pytest.raises(ScoringError, match=r"timed out after 2 attempt\(s\)") as err:
        call_with_policy(policy, hangs)
    assert isinstance(err.value.__cause__, TimeoutError)
    assert rec.delays == [0.1]
    with pytest.raises(TimeoutError):
        call_with_deadline(hangs, 0.05)


def test_call_with_deadline_returns_and_reraises_in_the_caller() -> None:
    assert call_with_deadline(threading.get_ident, 30) != threading.get_ident()
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 30)


async def test_async_twin_uses_the_injected_asleep_and_its_deadline() -> None:
    rec = Recorder()
    calls = {"n": 0}

    async def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError("down")
        return "ok"

    policy = LLMCallPolicy(timeout=30.0, max_retries=2, backoff=0.1, sleep=rec, asleep=rec.asleep)
    assert await acall_with_policy(policy, flaky) == ("ok", 3)
    assert rec.delays == [0.1, 0.2]

    never = asyncio.Event()  # nobody sets it: every attempt times out
    rec.delays.clear()
    with pytest.raises(ScoringError, match=r"timed out after 3 attempt\(s\)"):
        await acall_with_policy(policy.replace(timeout=0.05), never.wait)
    assert rec.delays == [0.1, 0.2]


# -------------------------------------------------------------------- the four components
COMPONENTS = (LLMImportanceScorer, FactExtractor, LLMConflictJudge, SessionSummarizer)


def test_every_component_takes_one_shared_policy() -> None:
    llm = FakeListChatModel(responses=["{}"])
    shared = LLMCallPolicy(timeout=7.0, max_retries=4, backoff=0.05)
    scorer = LLMImportanceScorer(llm, method="json_mode", policy=shared)
    extractor = FactExtractor(llm, method="json_mode", policy=shared)
    judge = LLMConflictJudge(llm, method="json_mode", policy=shared)
    summarizer = SessionSummarizer(llm, policy=shared)
    assert scorer.policy is shared and extractor.policy is shared and judge.policy is shared
    assert summarizer.policy is shared and summarizer.timeout == 7.0


@pytest.mark.parametrize("cls", COMPONENTS)
@pytest.mark.parametrize("loose", ["timeout", "max_retries", "backoff", "sleep"])
def test_the_call_settings_are_only_taken_as_a_policy(cls: Any, loose: str) -> None:
    # One LLMCallPolicy instead of the same keyword arguments repeated on four classes (issue 13).
    assert loose not in inspect.signature(cls).parameters
    assert inspect.signature(cls).parameters["policy"].default is None


def test_defaults_without_a_policy_are_unchanged() -> None:
    llm = FakeListChatModel(responses=["{}"])
    expected = {
        LLMImportanceScorer: (30.0, 2, 0.5),
        FactExtractor: (60.0, 2, 0.5),
        LLMConflictJudge: (30.0, 2, 0.5),
    }
    for cls, values in expected.items():
        p = cls(llm).policy
        assert (p.timeout, p.max_retries, p.backoff) == values, cls
    s = SessionSummarizer(llm).policy
    assert (s.timeout, s.max_retries) == (60.0, 0)  # a failing summary model falls back at once
    with pytest.raises(ConfigurationError):
        LLMCallPolicy(timeout=0)
    with pytest.raises(ConfigurationError):
        LLMCallPolicy(max_retries=-1)


def test_the_summarizer_retries_under_its_policy() -> None:
    class Flaky(FakeListChatModel):
        fail: int = 1
        seen: int = 0

        def _call(self, *a: Any, **k: Any) -> str:
            self.seen += 1
            if self.seen <= self.fail:
                raise ConnectionError("down")
            return super()._call(*a, **k)

    rec = Recorder()
    good = "Has 2 cats named Tom and Jerry."
    res = SessionSummarizer(Flaky(responses=[good]), policy=LLMCallPolicy(max_retries=1, backoff=0.3, sleep=rec))
    out = res.summarize(None, ["I have 2 cats named Tom and Jerry"])
    assert (out.text, out.attempts, out.fallback_reason) == (good, 2, None)
    assert rec.delays == [0.3]
    rec.delays.clear()
    down = SessionSummarizer(Flaky(responses=[good], fail=99), policy=LLMCallPolicy(max_retries=2, sleep=rec))
    out = down.summarize(None, ["I have 2 cats"])
    assert out.attempts == 3 and rec.delays == [0.5, 1.0]
    assert (
        out.fallback_reason == "summary model failed: ConnectionError: down after 3 attempt(s); extractive summary used"
    )


async def test_async_scoring_waits_through_the_policys_asleep() -> None:
    class Flaky(FakeListChatModel):
        seen: int = 0

        def _call(self, *a: Any, **k: Any) -> str:  # ainvoke runs it too
            self.seen += 1
            if self.seen == 1:
                raise ConnectionError("down")
            return '{"scores": [{"index": 0, "score": 10}]}'

    rec = Recorder()
    s = LLMImportanceScorer(
        Flaky(responses=["x"]), method="json_mode", policy=LLMCallPolicy(backoff=0.2, sleep=rec, asleep=rec.asleep)
    )
    batch = await s.ascore(["I have type 1 diabetes"])
    assert batch.fallback_reason is None and batch.details["attempts"] == "2"
    assert rec.delays == [0.2]
