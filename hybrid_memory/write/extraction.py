"""LLM fact extraction: one-sentence memories from batches of 3-5 conversation turns.

:class:`FactExtractor` asks any LangChain chat model for the facts, preferences, plans and
temporary notes *the user stated* in a few turns, each with a category and a 1-10 importance, and
the indexes of the turns it came from. Only memories grounded in the *user's own words* are
kept: a memory must cite at least one user turn (assistant suggestions are dropped; a user turn
that is agent scaffolding, such as the ``Observation:`` text a ReAct loop sends with the user role,
see :func:`hybrid_memory.write.sources.scaffolding_role`, neither counts as one nor grounds it), must have
content beyond "the user"/"remember" (an empty "记住！" is dropped), must not copy the instruction,
and at least half of its key words (analyzer terms: English stems, Chinese bigrams) must occur in
the user turns it cites (a hallucinated "Mia est allergique à l'hæblère." is dropped); category
``none`` is dropped. Every drop is explained in :attr:`ExtractionResult.dropped` (and, through
:class:`HybridMemory <hybrid_memory.HybridMemory>`, in an ``extract`` trace step). Every kept
memory carries its provenance (the source turn ids). A model failure never raises: the batch
yields no memories and :attr:`ExtractionResult.error` says why (the raw turns still reach
long-term memory through the normal write path, so nothing is lost).

:class:`HybridMemory <hybrid_memory.HybridMemory>` runs the extractor off the hot path: the pending
turns are the session's turn log above the store's extraction watermark (so any process, or a
restart, picks them up) and are extracted in a background thread once a batch is full; ``flush()``
/ ``aflush()`` process partial batches and wait, after which every extracted memory is recallable.

Example:
    >>> from datetime import datetime, timezone
    >>> from langchain_core.language_models import FakeListChatModel
    >>> from hybrid_memory.records import Turn
    >>> reply = ('{"memories": [{"content": "用户对花生过敏", "category": "fact", '
    ...          '"importance": 10, "source_turns": [0]}, {"content": "The assistant likes jazz.", '
    ...          '"category": "preference", "importance": 3, "source_turns": [1]}, '
    ...          '{"content": "The user plays the cello.", "category": "fact", "importance": 5, "source_turns": [0]}]}')
    >>> ex = FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode")
    >>> ts = datetime(2024, 5, 1, tzinfo=timezone.utc)
    >>> turns = [Turn(id="t1", user_id="u", session_id="s", role="user", content="我对花生过敏", timestamp=ts),
    ...          Turn(id="t2", user_id="u", session_id="s", role="assistant", content="I like jazz", timestamp=ts)]
    >>> res = ex.extract(turns)
    >>> [(m.content, m.category, m.importance, m.provenance) for m in res.memories]
    [('用户对花生过敏', 'fact', 1.0, ('t1',))]
    >>> for reason in res.dropped:
    ...     print(reason)
    "The assistant likes jazz." not stated by the user
    "The user plays the cello." not supported by the user's words (0 of 2 key words)
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from hybrid_memory.errors import ConfigurationError, InvalidInputError, ScoringError
from hybrid_memory.llm_call import LLMCallPolicy, StructuredCaller, StructuredMethod
from hybrid_memory.records import MemoryRecord, Turn
from hybrid_memory.text.analyzer import Analyzer
from hybrid_memory.text.vocabulary import MEMORY_FRAME_EN, MEMORY_FRAME_ZH
from hybrid_memory.write.sources import scaffolding_role

__all__ = [
    "MIN_SUPPORT",
    "BackgroundWorker",
    "ExtractedFact",
    "ExtractedMemory",
    "ExtractionResult",
    "FactExtractor",
    "FactList",
    "grounding_problem",
    "key_terms",
]


class ExtractedFact(BaseModel):
    """One memory as the model reports it."""

    content: str = Field(description="one self-contained sentence about the user")
    category: Literal["fact", "preference", "project", "temporary", "none"] = Field(
        description="fact, preference, project (plans/goals/work), temporary (short-lived), or none"
    )
    importance: int = Field(description="1 (trivial) to 10 (must remember)")
    source_turns: list[int] = Field(description="the [n] indexes of the turns that state it")


class FactList(BaseModel):
    """Memories worth keeping from the numbered turns (empty when there are none)."""

    memories: list[ExtractedFact] = Field(description="memories stated by the user; may be empty")


@dataclass(frozen=True)
class ExtractedMemory:
    """An extracted memory ready for the writer (importance in 0..1, provenance = turn ids)."""

    content: str
    category: str
    importance: float
    provenance: tuple[str, ...]
    user_id: str
    session_id: str
    timestamp: datetime

    def to_record(self) -> MemoryRecord:
        """A draft :class:`~hybrid_memory.records.MemoryRecord` (source ``inferred``)."""
        return MemoryRecord.create(
            user_id=self.user_id,
            content=self.content,
            session_id=self.session_id,
            category=self.category,
            importance=self.importance,
            source="inferred",
            timestamp=self.timestamp,
            provenance=self.provenance,
            metadata={"extracted": True},
        )


@dataclass(frozen=True)
class ExtractionResult:
    """What one extraction call produced.

    ``dropped`` explains every item the model returned but the extractor refused (category
    ``none``, not grounded in a user turn, empty); ``error`` is set when the model failed.
    """

    memories: list[ExtractedMemory]
    dropped: list[str] = field(default_factory=list)
    error: str | None = None
    turn_ids: tuple[str, ...] = ()


_PROMPT = (
    "Extract long-term memories about the USER from the numbered conversation turns. Rules:\n"
    "- Only what the user stated about themselves (facts, preferences, constraints, plans, decisions). "
    "Never the assistant's suggestions, never guesses, never small talk.\n"
    "- Each memory is one self-contained sentence in the user's language, reusing the user's own words; "
    "it keeps numbers, dates, names and negations exactly.\n"
    "- category: fact, preference, project (plans, goals, work), temporary (true only for a short time), "
    "or none.\n"
    "- importance: 1 (trivial) to 10 (health, safety, explicit 'remember').\n"
    "- source_turns: the [n] indexes of the turns that state it.\n"
    'Answer with JSON only: {"memories": [{"content": "...", "category": "fact", "importance": 7, '
    '"source_turns": [0]}]}; use {"memories": []} when there is nothing to keep.'
)


_ANALYZER = Analyzer(cjk="bigram")
_FRAME_ZH = re.compile("|".join(MEMORY_FRAME_ZH))
_FRAME_EN = frozenset(MEMORY_FRAME_EN)
_PROMPT_TERMS = frozenset(_ANALYZER.index_tokens(_PROMPT))
#: Share of a memory's key words that must occur in the user turns it cites.
MIN_SUPPORT = 0.5


def key_terms(text: str) -> list[str]:
    """The key words of a memory: analyzer query terms without the framing ("the user", "记住").

    Example:
        >>> key_terms("The user is allergic to peanuts."), key_terms("记住！"), key_terms("用户现在改喝咖啡")
        (['allergic', 'peanut'], [], ['现在', '在改', '改喝', '喝咖', '咖啡'])
    """
    return [t for t in _ANALYZER.query_tokens(_FRAME_ZH.sub(" ", text)) if t not in _FRAME_EN]


def grounding_problem(text: str, user_turns: Sequence[str]) -> str | None:
    """Why the memory ``text`` is not grounded in ``user_turns`` (``None`` when it is).

    Empty of content, a copy of the extraction instruction, or fewer than :data:`MIN_SUPPORT` of
    its key words in the user's own words.

    Example:
        >>> grounding_problem("The user lives in Lyon with two roommates", ["I live in Lyon with 2 roommates"])
        >>> grounding_problem("记住！", ["记住！"])
        'is empty of content'
        >>> grounding_problem("Mia est allergique à l'hæblère.", ["Mia is my sister"])
        "not supported by the user's words (1 of 6 key words)"
    """
    terms = list(dict.fromkeys(key_terms(text)))
    if not terms:
        return "is empty of content"
    said = {t for u in user_turns for t in _ANALYZER.index_tokens(u)}
    found = sum(t in said for t in terms)
    if sum(t in _PROMPT_TERMS for t in terms) >= 0.6 * len(terms) and found < MIN_SUPPORT * len(terms):
        return "copies the instruction"
    if found < MIN_SUPPORT * len(terms):
        return f"not supported by the user's words ({found} of {len(terms)} key words)"
    return None


class FactExtractor:
    """Extracts one-sentence memories from a few turns with any LangChain chat model.

    Args:
        chat_model: A LangChain chat model.
        method: ``"function_calling"`` (default) or ``"json_mode"`` (see ``LLMImportanceScorer``).
        batch_turns: Turns per extraction call (3-5).
        max_tokens: Completion budget per call.
        max_memories: Cap on memories kept per call.
        model_kwargs: Extra call arguments bound to the model.
        policy: Deadline per call, retries and backoff as one
            :class:`~hybrid_memory.llm_call.LLMCallPolicy` (default ``LLMCallPolicy(timeout=60.0)``:
            60 s, 2 retries, 0.5 s doubling).
    """

    def __init__(
        self,
        chat_model: Any,
        *,
        method: StructuredMethod = "function_calling",
        batch_turns: int = 4,
        max_tokens: int = 600,
        max_memories: int = 10,
        model_kwargs: Mapping[str, Any] | None = None,
        policy: LLMCallPolicy | None = None,
    ) -> None:
        if not 3 <= batch_turns <= 5:
            raise ConfigurationError(f"batch_turns must be between 3 and 5, got {batch_turns}")
        if max_memories < 1:
            raise ConfigurationError("max_memories must be >= 1")
        self.policy = policy if policy is not None else LLMCallPolicy(timeout=60.0)
        self._caller = StructuredCaller(
            chat_model,
            schema=FactList,
            method=method,
            max_tokens=max_tokens,
            policy=self.policy,
            model_kwargs=model_kwargs,
        )
        self.batch_turns = batch_turns
        self.max_memories = max_memories

    @staticmethod
    def messages(turns: Sequence[Turn]) -> list[tuple[str, str]]:
        """The chat messages for one extraction call."""
        lines = [f"[{i}] {t.role}: {' '.join(t.content.split())}" for i, t in enumerate(turns)]
        return [("system", _PROMPT), ("human", "Turns:\n" + "\n".join(lines))]

    def _check(self, turns: Sequence[Turn]) -> list[Turn]:
        items = list(turns)
        if not items:
            raise InvalidInputError("extract needs at least one turn")
        users = {(t.user_id, t.session_id) for t in items}
        if len(users) != 1:
            raise InvalidInputError("all turns of one extraction must belong to one user and session")
        return items

    def _result(self, turns: list[Turn], parsed: BaseModel) -> ExtractionResult:
        assert isinstance(parsed, FactList)
        kept: list[ExtractedMemory] = []
        dropped: list[str] = []
        seen: set[str] = set()
        for f in parsed.memories:
            text = " ".join(f.content.split())
            if not text:
                dropped.append("empty content")
                continue
            if f.category == "none":
                dropped.append(f'"{text}" has category none')
                continue
            src = [turns[i] for i in dict.fromkeys(f.source_turns) if 0 <= i < len(turns)]
            users = [t for t in src if t.role == "user" and scaffolding_role(t.content) is None]
            if not users:
                why = " (cites only agent scaffolding)" if any(t.role == "user" for t in src) else ""
                dropped.append(f'"{text}" not stated by the user{why}')
                continue
            problem = grounding_problem(text, [t.content for t in users])
            if problem is not None:
                dropped.append(f'"{text}" {problem}')
                continue
            if text in seen:
                dropped.append(f'"{text}" repeated')
                continue
            if len(kept) >= self.max_memories:
                dropped.append(f'"{text}" over max_memories')
                continue
            seen.add(text)
            kept.append(
                ExtractedMemory(
                    content=text,
                    category=f.category,
                    importance=round(min(10, max(1, f.importance)) / 10.0, 4),
                    provenance=tuple(t.id for t in users),
                    user_id=users[0].user_id,
                    session_id=users[0].session_id,
                    timestamp=max(t.timestamp for t in users),
                )
            )
        return ExtractionResult(kept, dropped, None, tuple(t.id for t in turns))

    def extract(self, turns: Sequence[Turn]) -> ExtractionResult:
        """Extract memories from ``turns`` (one user and session). Never raises for model errors.

        Raises:
            InvalidInputError: no turns, or turns of several users/sessions.
        """
        items = self._check(turns)
        try:
            parsed, _ = self._caller.call(self.messages(items))
        except ScoringError as exc:
            return ExtractionResult([], [], f"extraction failed: {exc}", tuple(t.id for t in items))
        return self._result(items, parsed)

    async def aextract(self, turns: Sequence[Turn]) -> ExtractionResult:
        """Async twin of :meth:`extract` (native ``ainvoke``)."""
        items = self._check(turns)
        try:
            parsed, _ = await self._caller.acall(self.messages(items))
        except ScoringError as exc:
            return ExtractionResult([], [], f"extraction failed: {exc}", tuple(t.id for t in items))
        return self._result(items, parsed)


class BackgroundWorker:
    """One daemon thread running submitted jobs in order, off the caller's hot path.

    Jobs never take the worker down: an exception is recorded in :attr:`errors` (bounded) and
    the next job runs. :meth:`join` waits until every submitted job has finished.

    Example:
        >>> w = BackgroundWorker()
        >>> out = []
        >>> w.submit(lambda: out.append(1)); w.submit(lambda: 1 / 0)
        >>> w.join(timeout=5), out, w.errors[0].startswith("ZeroDivisionError")
        (True, [1], True)
        >>> w.close(timeout=5)
        True
    """

    def __init__(self, *, name: str = "hybrid-memory-background", max_errors: int = 100) -> None:
        self.name = name
        self._jobs: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._unfinished = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self.errors: deque[str] = deque(maxlen=max_errors)

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished yet."""
        with self._cond:
            return self._unfinished

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job``; the thread starts on first use.

        Raises:
            RuntimeError: the worker was closed.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError("the background worker is closed")
            self._jobs.append(job)
            self._unfinished += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            try:
                job()
            except Exception as exc:  # recorded, never fatal for the worker
                self.errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._unfinished -= 1
                    self._cond.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job has finished; ``False`` if ``timeout`` expired first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._unfinished == 0, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the thread; return whether it finished in time."""
        done = self.join(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and done:
            thread.join(timeout)
        return done
