"""How hybrid-memory calls a chat model: a deadline per attempt, bounded retries, backoff.

:class:`LLMCallPolicy` holds the settings shared by every component that calls a model; each takes
it as its one ``policy=`` argument (:class:`~hybrid_memory.write.importance.LLMImportanceScorer`,
:class:`~hybrid_memory.write.extraction.FactExtractor`, :class:`~hybrid_memory.write.summary.SessionSummarizer`,
:class:`~hybrid_memory.write.conflict.LLMConflictJudge`); :func:`call_with_policy` and
:func:`acall_with_policy` apply it, and :class:`StructuredCaller` asks a model for a pydantic schema under it. Each attempt gets ``timeout``
seconds (a synchronous call runs in a daemon thread that is abandoned when the deadline passes);
a failed attempt is retried after ``backoff``, ``2 * backoff``, ``4 * backoff``, ... seconds,
each capped at ``max_backoff``; when every attempt failed, :class:`~hybrid_memory.errors.ScoringError`
says why and after how many attempts.

The waits go through ``policy.sleep`` / ``policy.asleep`` (default :func:`time.sleep` /
:func:`asyncio.sleep`), so a test can record the delays the code asked for instead of
measuring wall time.

Example:
    >>> slept = []
    >>> policy = LLMCallPolicy(timeout=5.0, max_retries=3, backoff=0.1, sleep=slept.append)
    >>> policy.delays()
    (0.1, 0.2, 0.4)
    >>> replies = iter([ValueError("garbled"), ValueError("garbled"), "fine"])
    >>> def invoke() -> str:
    ...     reply = next(replies)
    ...     if isinstance(reply, Exception):
    ...         raise reply
    ...     return reply
    >>> call_with_policy(policy, invoke, str.upper)
    ('FINE', 3)
    >>> slept
    [0.1, 0.2]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from hybrid_memory import threads
from hybrid_memory.errors import ConfigurationError, InvalidInputError, ScoringError

__all__ = [
    "LLMCallPolicy",
    "StructuredCaller",
    "StructuredMethod",
    "acall_with_policy",
    "call_with_deadline",
    "call_with_policy",
    "describe_error",
    "model_call_kwargs",
    "parse_json_object",
]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class LLMCallPolicy:
    """Deadline, retries and backoff of one model call (immutable; share it freely).

    Args:
        timeout: Seconds one attempt may take before it is abandoned (> 0).
        max_retries: Retries after the first attempt (>= 0); ``attempts = max_retries + 1``.
        backoff: Delay before the first retry in seconds (>= 0); doubles for each further retry.
        max_backoff: Upper bound of one delay (``None`` = no bound).
        sleep: Waits between synchronous attempts (default :func:`time.sleep`); tests pass a
            recorder to assert the requested delays without waiting.
        asleep: Async twin of ``sleep`` (default :func:`asyncio.sleep`).

    Raises:
        ConfigurationError: a value out of range.

    Example:
        >>> LLMCallPolicy(backoff=1.0, max_retries=4, max_backoff=3.0).delays()
        (1.0, 2.0, 3.0, 3.0)
        >>> LLMCallPolicy(timeout=0)
        Traceback (most recent call last):
        ...
        hybrid_memory.errors.ConfigurationError: timeout must be > 0, got 0
    """

    timeout: float = 30.0
    max_retries: int = 2
    backoff: float = 0.5
    max_backoff: float | None = None
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    asleep: Callable[[float], Awaitable[Any]] = field(default=asyncio.sleep, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigurationError(f"timeout must be > 0, got {self.timeout!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ConfigurationError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        if not self.backoff >= 0:
            raise ConfigurationError(f"backoff must be >= 0, got {self.backoff!r}")
        if self.max_backoff is not None and not self.max_backoff >= 0:
            raise ConfigurationError(f"max_backoff must be >= 0 or None, got {self.max_backoff!r}")

    @property
    def attempts(self) -> int:
        """Model calls at most: ``max_retries + 1``."""
        return self.max_retries + 1

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based): ``backoff * 2 ** (retry - 1)``, capped.

        Raises:
            InvalidInputError: ``retry`` < 1.
        """
        if retry < 1:
            raise InvalidInputError(f"retry numbers start at 1, got {retry}")
        d = self.backoff * 2.0 ** (retry - 1)
        return d if self.max_backoff is None else min(d, self.max_backoff)

    def delays(self) -> tuple[float, ...]:
        """Every delay a call that keeps failing waits, in order (``max_retries`` of them)."""
        return tuple(self.delay(k) for k in range(1, self.max_retries + 1))

    def replace(
        self,
        *,
        timeout: float | None = None,
        max_retries: int | None = None,
        backoff: float | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> LLMCallPolicy:
        """A copy with the given fields replaced (``None`` keeps the field).

        Example:
            >>> LLMCallPolicy(timeout=60.0).replace(max_retries=0)
            LLMCallPolicy(timeout=60.0, max_retries=0, backoff=0.5, max_backoff=None)
        """
        changes: dict[str, Any] = {}
        if timeout is not None:
            changes["timeout"] = timeout
        if max_retries is not None:
            changes["max_retries"] = max_retries
        if backoff is not None:
            changes["backoff"] = backoff
        if sleep is not None:
            changes["sleep"] = sleep
        return dataclasses.replace(self, **changes) if changes else self


def describe_error(exc: BaseException | None) -> str:
    """A short, key-free description of why an attempt failed ("timed out", "ValueError: ...")."""
    if exc is None:
        return "unknown error"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def call_with_deadline(fn: Callable[[], T], timeout: float) -> T:
    """Run ``fn()`` (a model call) in a daemon thread and wait at most ``timeout`` seconds for it.

    :func:`hybrid_memory.threads.call_with_deadline` with the model's wording: a call that misses
    the deadline is abandoned (its thread is a daemon, so it never blocks interpreter exit, and
    what it returns later is dropped).

    Raises:
        TimeoutError: ``fn`` did not return within ``timeout`` seconds.

    Example:
        >>> call_with_deadline(lambda: 42, timeout=5)
        42
    """
    return threads.call_with_deadline(fn, timeout, name="hybrid-memory-llm", what="the model")


def _identity(out: Any) -> Any:
    return out


def call_with_policy(
    policy: LLMCallPolicy, invoke: Callable[[], Any], parse: Callable[[Any], T] = _identity
) -> tuple[T, int]:
    """Call ``invoke()`` under ``policy``; return ``(parse(reply), attempts used)``.

    Each attempt runs ``invoke`` under :func:`call_with_deadline` and ``parse`` in the calling
    thread; an exception from either is retried after ``policy.delay(n)`` (waited through
    ``policy.sleep``), except :class:`~hybrid_memory.errors.ConfigurationError`, which is a bug
    in the set-up and raised at once.

    Raises:
        ScoringError: every attempt failed (the last failure is its ``__cause__``).
    """
    last: BaseException | None = None
    for attempt in range(policy.attempts):
        if attempt:
            policy.sleep(policy.delay(attempt))
        try:
            return parse(call_with_deadline(invoke, policy.timeout)), attempt + 1
        except ConfigurationError:
            raise
        except Exception as exc:  # any model or parse failure is retried, then reported
            last = exc
    raise ScoringError(f"{describe_error(last)} after {policy.attempts} attempt(s)") from last


async def acall_with_policy(
    policy: LLMCallPolicy, ainvoke: Callable[[], Awaitable[Any]], parse: Callable[[Any], T] = _identity
) -> tuple[T, int]:
    """Async twin of :func:`call_with_policy`: ``asyncio.wait_for`` per attempt, ``policy.asleep`` between.

    Raises:
        ScoringError: every attempt failed (the last failure is its ``__cause__``).
    """
    last: BaseException | None = None
    for attempt in range(policy.attempts):
        if attempt:
            await policy.asleep(policy.delay(attempt))
        try:
            return parse(await asyncio.wait_for(ainvoke(), policy.timeout)), attempt + 1
        except ConfigurationError:
            raise
        except Exception as exc:  # retried, then reported
            last = exc
    raise ScoringError(f"{describe_error(last)} after {policy.attempts} attempt(s)") from last


# --------------------------------------------------------------------------- structured calls
#: How a component asks for structured output: tool calls or JSON in the reply.
StructuredMethod = Literal["function_calling", "json_mode"]


def parse_json_object(text: str) -> Any:
    r"""Parse the first JSON object or array in an LLM reply (tolerates code fences and chatter).

    Raises:
        ValueError: no JSON value could be parsed.

    Example:
        >>> parse_json_object('Sure! ```json {"scores": [{"index": 0, "score": 7}]} ```')
        {'scores': [{'index': 0, 'score': 7}]}
    """
    s = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", s, re.S)
    if fence:
        s = fence.group(1).strip()
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[{\[]", s):
        try:
            value, _ = decoder.raw_decode(s[m.start() :])
            return value
        except json.JSONDecodeError:
            continue
    raise ValueError(f"no JSON object in the model's reply: {text[:120]!r}")


def model_call_kwargs(
    model: Any, max_tokens: int, model_kwargs: Mapping[str, Any] | None, *, json_mode: bool = False
) -> dict[str, Any]:
    """The call arguments bound to ``model``: ``model_kwargs`` when given, else the completion limit.

    OpenAI-compatible models (a pydantic ``extra_body`` field) get ``extra_body={"max_tokens": ...}``
    (plus ``response_format={"type": "json_object"}`` in JSON mode): langchain-openai would rename a
    plain ``max_tokens`` to ``max_completion_tokens``, which some local servers ignore. Other models
    get ``max_tokens=...``.

    Example:
        >>> model_call_kwargs(object(), 400, None)
        {'max_tokens': 400}
        >>> model_call_kwargs(object(), 400, {"temperature": 0})
        {'temperature': 0}
    """
    if model_kwargs is not None:
        return dict(model_kwargs)
    if "extra_body" in getattr(type(model), "model_fields", {}):
        body: dict[str, Any] = {"max_tokens": max_tokens}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        return {"extra_body": body}
    return {"max_tokens": max_tokens}


class StructuredCaller:
    """A chat model asked for one pydantic ``schema`` (tools or JSON mode), called under an :class:`LLMCallPolicy`.

    The shared plumbing of the importance scorer, the fact extractor and the conflict judge.

    Args:
        chat_model: A LangChain chat model (with ``invoke``/``ainvoke``).
        schema: The pydantic model the reply must match.
        method: ``"function_calling"`` (tool calls) or ``"json_mode"`` (JSON in the reply).
        max_tokens: Completion budget per call.
        policy: Deadline, retries and backoff of each call.
        model_kwargs: Call arguments bound to the model instead of the automatic ones (see
            :func:`model_call_kwargs`).
        coerce: Turns a parsed reply of another shape into the schema's shape first.

    Raises:
        ConfigurationError: not a chat model, an unknown method or ``max_tokens`` < 1.
    """

    def __init__(
        self,
        chat_model: Any,
        *,
        schema: type[BaseModel],
        method: StructuredMethod,
        max_tokens: int,
        policy: LLMCallPolicy,
        model_kwargs: Mapping[str, Any] | None,
        coerce: Callable[[Any], Any] | None = None,
    ) -> None:
        if chat_model is None or not hasattr(chat_model, "invoke"):
            raise ConfigurationError("chat_model must be a LangChain chat model (with invoke/ainvoke)")
        if method not in ("function_calling", "json_mode"):
            raise ConfigurationError(f"method must be 'function_calling' or 'json_mode', got {method!r}")
        if max_tokens < 1:
            raise ConfigurationError("max_tokens >= 1 is required")
        self.model = chat_model
        self.schema = schema
        self.method: StructuredMethod = method
        self.max_tokens = max_tokens
        self.policy = policy
        self._kwargs = dict(model_kwargs) if model_kwargs is not None else None
        self._coerce = coerce
        self._runnable: Any = None

    def runnable(self) -> Any:
        """The model with tools (function calling) or JSON mode and ``max_tokens`` bound."""
        if self._runnable is None:
            kw = model_call_kwargs(self.model, self.max_tokens, self._kwargs, json_mode=self.method == "json_mode")
            if self.method == "function_calling":
                try:
                    self._runnable = self.model.bind_tools([self.schema], tool_choice=self.schema.__name__, **kw)
                except (NotImplementedError, TypeError, ValueError) as exc:
                    raise ConfigurationError(
                        f"{type(self.model).__name__} cannot do function calling ({exc}); use method='json_mode'"
                    ) from exc
            else:
                self._runnable = self.model.bind(**kw) if kw else self.model
        return self._runnable

    def parse(self, out: Any) -> BaseModel:
        """Turn the model's message into the schema; raise ValueError on anything unusable.

        Function calling reads the tool call named like the schema (or the only one); a reply
        that carries the JSON in its text instead is accepted too. A reply cut off by the token
        limit (``finish_reason == "length"``) that does not parse is reported as truncated.
        """
        finish = _finish_reason(out)
        if self.method == "function_calling":
            calls = list(getattr(out, "tool_calls", None) or [])
            named = [c for c in calls if c.get("name") == self.schema.__name__] or calls[:1]
            if named:
                return self._validate(named[0].get("args"), finish)
        content = getattr(out, "content", out)
        if isinstance(content, list):  # content blocks
            content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
        if not isinstance(content, str):
            content = json.dumps(content) if isinstance(content, dict) else str(content)
        try:
            return self._validate(parse_json_object(content), finish)
        except ValueError as exc:
            if finish == "length":
                raise ValueError(f"reply truncated at max_tokens={self.max_tokens}: {exc}") from exc
            raise

    def _validate(self, value: Any, finish: str | None) -> BaseModel:
        if self._coerce is not None:
            value = self._coerce(value)
        if isinstance(value, list):
            value = {next(iter(self.schema.model_fields)): value}
        try:
            return self.schema.model_validate(value)
        except ValidationError as exc:
            raise ValueError(f"reply does not match the schema (finish_reason={finish}): {exc}") from exc

    def call(self, messages: list[tuple[str, str]]) -> tuple[BaseModel, int]:
        """Invoke under the policy (deadline, retries, backoff); return (parsed, attempts). Raises ScoringError."""
        runnable = self.runnable()
        return call_with_policy(self.policy, partial(runnable.invoke, messages), self.parse)

    async def acall(self, messages: list[tuple[str, str]]) -> tuple[BaseModel, int]:
        """Async twin of :meth:`call` (native ``ainvoke`` with ``asyncio.wait_for``)."""
        runnable = self.runnable()
        return await acall_with_policy(self.policy, partial(runnable.ainvoke, messages), self.parse)


def _finish_reason(msg: Any) -> str | None:
    meta = getattr(msg, "response_metadata", None)
    if isinstance(meta, dict):
        fr = meta.get("finish_reason")
        return str(fr) if fr is not None else None
    return None
