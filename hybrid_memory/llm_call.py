"""How hybrid-memory calls a chat model: a deadline per attempt, bounded retries, backoff.

:class:`LLMCallPolicy` holds the settings shared by every component that calls a model
(:class:`~hybrid_memory.write.importance.LLMImportanceScorer`, :class:`~hybrid_memory.write.extraction.FactExtractor`,
:class:`~hybrid_memory.write.summary.SessionSummarizer`, :class:`~hybrid_memory.write.conflict.LLMConflictJudge`);
:func:`call_with_policy` and :func:`acall_with_policy` apply it. Each attempt gets ``timeout``
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
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hybrid_memory.errors import ConfigurationError, InvalidInputError, ScoringError

__all__ = ["LLMCallPolicy", "acall_with_policy", "call_with_deadline", "call_with_policy", "describe_error"]

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

        This is how the components' own keyword arguments (``timeout=``, ``max_retries=``,
        ``backoff=``, ``sleep=``) are applied on top of a ``policy=``.
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
    """Run ``fn()`` in a daemon thread and wait at most ``timeout`` seconds for it.

    A call that misses the deadline is abandoned: its thread is a daemon, so it never blocks
    interpreter exit, and what it returns later is dropped.

    Raises:
        TimeoutError: ``fn`` did not return within ``timeout`` seconds.

    Example:
        >>> call_with_deadline(lambda: 42, timeout=5)
        42
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # re-raised in the caller thread
            box["err"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="hybrid-memory-llm", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"the model did not answer within {timeout:g}s")
    if "err" in box:
        raise box["err"]
    out: T = box["out"]
    return out


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
