"""Incremental session summaries that keep numbers, negations and names.

Every ``summary_every`` turns (default 6) :class:`SessionSummarizer` folds the new turns into the
running summary of the session. With a LangChain chat model it asks the model; without one it
builds an extractive summary from the informative user turns. Either way
:func:`check_summary` verifies that what must not be lost survived:

* **numbers** ("5月20日", "$1,200", "五千元"), compared by value;
* **negations and exceptions** (不要, 不能, 别, 除了, 除非, not, never, don't, unless, except),
  compared per kind and count, across languages (a Chinese "不要" is kept by an English "don't");
* **names** (capitalised words inside English sentences, Chinese names after 叫/名叫, quoted
  titles).

A summary that drops any of them is regenerated with the missing items listed; if it still fails,
the original sentences carrying them are appended verbatim ("originals kept"). The facade stores
each summary as a ``summary`` memory whose provenance is the ids of the turns it covers.

Example:
    >>> check_summary("User likes tea.", ["我不要加糖，预算5000元"]).missing
    ['number 5000', 'negation ×1 (不要/not/never)']
    >>> SessionSummarizer().summarize(None, ["我叫李雷，不要加糖", "哈哈好的"]).text
    '我叫李雷，不要加糖'
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from hybrid_memory.errors import ConfigurationError, ScoringError
from hybrid_memory.llm_call import LLMCallPolicy, call_with_policy, describe_error, model_call_kwargs
from hybrid_memory.text.vocabulary import CJK_COUNTERS, CJK_NUMERAL, cjk_number
from hybrid_memory.write.importance import HeuristicImportanceScorer

__all__ = ["SessionSummarizer", "SummaryCheck", "SummaryResult", "check_summary", "critical_items"]

_NEG_KINDS: Mapping[str, re.Pattern[str]] = {
    "negation": re.compile(
        r"(不要|不能|不会|不可以|不用|不吃|不喝|不喜欢|不再|别|没有|没|\bnot\b|n't\b|\bnever\b|\bno\b|\bnor\b|\bwithout\b|\bavoid)",
        re.I,
    ),
    "except": re.compile(r"(除了|除去|\bexcept\b|\bexcluding\b|\bother than\b|\bapart from\b|\bbesides\b)", re.I),
    "unless": re.compile(r"(除非|\bunless\b|\bonly if\b)", re.I),
}
_NEG_LABEL = {"negation": "不要/not/never", "except": "除了/except", "unless": "除非/unless"}
_NUM = re.compile(rf"\d[\d,]*(?:\.\d+)?|[{CJK_NUMERAL}]{{1,8}}(?=[{CJK_COUNTERS}])")
_EN_NAME = re.compile(r"(?<![.!?。！？]\s)(?<!^)(?<![\"'])\b[A-Z][a-zA-Z]+(?:\s[A-Z][a-zA-Z]+)*\b")
_ZH_NAME = re.compile(r"(?:叫做|名叫|叫)([\u4e00-\u9fff]{2,3}?)(?=[，。,.!！?？\s的是]|$)")
_QUOTED = re.compile(r"[《「“\"]([^》」”\"]{2,40})[》」”\"]")
_NOT_NAMES = frozenset(
    {"I", "I'm", "I've", "I'd", "I'll", "The", "A", "An", "My", "We", "Our", "You", "Your", "It", "He", "She", "They"}
)


def _num_value(s: str) -> float | None:
    if s[0].isdigit():
        try:
            return float(s.replace(",", ""))
        except ValueError:
            return None
    return float(cjk_number(s))


def _numbers(text: str) -> set[float]:
    out = set()
    for m in _NUM.finditer(text):
        v = _num_value(m.group(0))
        if v is not None:
            out.add(v)
    return out


def _names(text: str) -> set[str]:
    names = {m.group(0) for m in _EN_NAME.finditer(text) if m.group(0) not in _NOT_NAMES}
    names |= {m.group(1) for m in _ZH_NAME.finditer(text)}
    names |= {m.group(1).strip() for m in _QUOTED.finditer(text)}
    return names


def critical_items(text: str) -> dict[str, Any]:
    """Numbers (values), negation kinds (counts) and names found in ``text``.

    Example:
        >>> items = critical_items("My dog Biscuit is 3; never feed him chocolate")
        >>> sorted(items["numbers"]), items["negations"]["negation"], sorted(items["names"])
        ([3.0], 1, ['Biscuit'])
    """
    return {
        "numbers": _numbers(text),
        "negations": {k: len(p.findall(text)) for k, p in _NEG_KINDS.items()},
        "names": _names(text),
    }


@dataclass(frozen=True)
class SummaryCheck:
    """What a summary lost, by kind; ``ok`` when nothing."""

    missing_numbers: list[float] = field(default_factory=list)
    missing_negations: dict[str, int] = field(default_factory=dict)
    missing_names: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every number, negation and name survived."""
        return not (self.missing_numbers or self.missing_negations or self.missing_names)

    @property
    def missing(self) -> list[str]:
        """Human-readable list of what is missing (used in the regeneration prompt)."""
        out = [f"number {v:g}" for v in self.missing_numbers]
        out += [f"{k} ×{n} ({_NEG_LABEL[k]})" for k, n in self.missing_negations.items()]
        out += [f"name {n}" for n in self.missing_names]
        return out


def check_summary(summary: str, sources: Sequence[str]) -> SummaryCheck:
    """Check that ``summary`` keeps the numbers, negations and names of ``sources``.

    Numbers are compared by value (``5000`` = ``5,000`` = ``五千``); each negation kind must
    appear in the summary at least as many times as there are source texts containing it; each
    name must appear verbatim.
    """
    have = critical_items(summary)
    need_numbers: set[float] = set()
    need_neg: dict[str, int] = dict.fromkeys(_NEG_KINDS, 0)
    need_names: set[str] = set()
    for s in sources:
        it = critical_items(s)
        need_numbers |= it["numbers"]
        for k, n in it["negations"].items():
            if n:
                need_neg[k] += 1
        need_names |= it["names"]
    return SummaryCheck(
        missing_numbers=sorted(need_numbers - have["numbers"]),
        missing_negations={k: n - have["negations"][k] for k, n in need_neg.items() if have["negations"][k] < n},
        missing_names=sorted(n for n in need_names if n not in summary),
    )


@dataclass(frozen=True)
class SummaryResult:
    """A session summary and how it was made.

    ``attempts`` counts model calls; ``kept_originals`` is true when the model's summary kept
    failing the check and the source sentences carrying the missing items were appended;
    ``fallback_reason`` says why the model was not (fully) used.
    """

    text: str
    check: SummaryCheck
    attempts: int = 0
    kept_originals: bool = False
    fallback_reason: str | None = None


_PROMPT = (
    "You keep a running summary of a conversation for an assistant's memory. Merge the PREVIOUS SUMMARY "
    "and the NEW TURNS into one concise summary of what the user said about themselves: facts, preferences, "
    "constraints, plans, decisions. Keep every number, date, amount and name exactly, and keep every negation "
    "or exception (not, never, don't, unless, except, 不要, 除了, 除非) with what it applies to. Skip small "
    "talk. Write plain sentences in the user's language, no preamble."
)


def _split_sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[。！？!?；;])\s*|(?<=[.])\s+", text)
    return [p.strip() for p in parts if p and p.strip()]


def _reply_text(out: Any) -> str:
    return str(getattr(out, "content", out)).strip()


class SessionSummarizer:
    """Incremental summaries of a session, verified by :func:`check_summary`.

    Args:
        chat_model: Any LangChain chat model; ``None`` makes extractive summaries (no LLM).
        max_attempts: Model summaries tried before the originals are appended.
        max_chars: Cap of an extractive summary (the model is asked to be concise).
        min_importance: Extractive mode keeps user sentences scoring at least this.
        max_tokens: Completion budget per model call.
        model_kwargs: Extra call arguments bound to the model (``extra_body`` for OpenAI-style
            models is chosen automatically, as in ``LLMImportanceScorer``).
        policy: Deadline, retries and backoff of each model call as one
            :class:`~hybrid_memory.llm_call.LLMCallPolicy` (default: 60 s, no retry, so a failing
            model falls back to the extractive summary at once).
    """

    def __init__(
        self,
        chat_model: Any = None,
        *,
        max_attempts: int = 2,
        max_chars: int = 1200,
        min_importance: float = 0.15,
        max_tokens: int = 400,
        model_kwargs: Mapping[str, Any] | None = None,
        policy: LLMCallPolicy | None = None,
    ) -> None:
        if max_attempts < 1 or max_chars < 50:
            raise ConfigurationError("max_attempts must be >= 1 and max_chars >= 50")
        if chat_model is not None and not hasattr(chat_model, "invoke"):
            raise ConfigurationError("chat_model must be a LangChain chat model")
        self.model = chat_model
        self.max_attempts = max_attempts
        self.max_chars = max_chars
        self.min_importance = min_importance
        self.max_tokens = max_tokens
        self.policy = policy if policy is not None else LLMCallPolicy(timeout=60.0, max_retries=0)
        self._scorer = HeuristicImportanceScorer()
        self._model_kwargs = dict(model_kwargs) if model_kwargs is not None else None

    @property
    def timeout(self) -> float:
        """Seconds per model call (``policy.timeout``)."""
        return self.policy.timeout

    @property
    def uses_llm(self) -> bool:
        """Whether summaries come from a chat model."""
        return self.model is not None

    def _bound(self) -> Any:
        kw = model_call_kwargs(self.model, self.max_tokens, self._model_kwargs)
        return self.model.bind(**kw) if kw else self.model

    @staticmethod
    def messages(previous: str | None, turns: Sequence[str], feedback: str | None = None) -> list[tuple[str, str]]:
        """The chat messages for one summary call."""
        body = f"PREVIOUS SUMMARY:\n{previous or '(none)'}\n\nNEW TURNS:\n" + "\n".join(
            f"- {' '.join(t.split())}" for t in turns
        )
        if feedback:
            body += f"\n\nYour last summary lost: {feedback}. Include them."
        return [("system", _PROMPT), ("human", body)]

    def _extractive(self, previous: str | None, turns: Sequence[str], roles: Sequence[str]) -> str:
        kept: list[str] = _split_sentences(previous) if previous else []
        seen = set(kept)
        for t, r in zip(turns, roles, strict=True):
            if r != "user":
                continue
            for s in _split_sentences(t) or [t.strip()]:
                if s in seen:
                    continue
                items = critical_items(s)
                informative = self._scorer.score_one(s, r).importance >= self.min_importance
                if informative or items["numbers"] or items["names"] or any(items["negations"].values()):
                    kept.append(s)
                    seen.add(s)
        text = "\n".join(kept)
        while len(text) > self.max_chars and len(kept) > 1:
            kept.pop(0)  # oldest first: the newest facts matter most for the next turns
            text = "\n".join(kept)
        return text

    def _finish(self, text: str, sources: list[str], attempts: int, reason: str | None) -> SummaryResult:
        check = check_summary(text, sources)
        if check.ok:
            return SummaryResult(text, check, attempts, False, reason)
        # Keep the originals: append every source sentence that carries a missing item.
        extra: list[str] = []
        for s in sources:
            for sent in _split_sentences(s) or [s]:
                if not check_summary(text, [sent]).ok and sent not in extra:
                    extra.append(sent)
        merged = (text + "\n" + "\n".join(extra)).strip()
        return SummaryResult(merged, check_summary(merged, sources), attempts, True, reason)

    def summarize(
        self, previous: str | None, turns: Sequence[str], *, roles: Sequence[str] | None = None
    ) -> SummaryResult:
        """Fold ``turns`` into ``previous`` (``None`` for the first summary of a session).

        Never raises because of the model: a failing model falls back to an extractive summary
        and says so in ``fallback_reason``.
        """
        rs = list(roles) if roles is not None else ["user"] * len(turns)
        user_turns = [t for t, r in zip(turns, rs, strict=True) if r == "user"]
        sources = ([previous] if previous else []) + user_turns
        if self.model is None:
            return self._finish(self._extractive(previous, turns, rs), sources, 0, None)
        feedback: str | None = None
        text = ""
        attempts = 0
        runnable = self._bound()
        for _ in range(self.max_attempts):
            messages = self.messages(previous, turns, feedback)
            try:
                text, used = call_with_policy(self.policy, partial(runnable.invoke, messages), _reply_text)
            except ScoringError as exc:  # the model failed: extractive summary, recorded
                attempts += self.policy.attempts
                why = describe_error(exc.__cause__) if self.policy.attempts == 1 else str(exc)
                reason = f"summary model failed: {why}; extractive summary used"
                return self._finish(self._extractive(previous, turns, rs), sources, attempts, reason)
            attempts += used
            check = check_summary(text, sources)
            if check.ok:
                return SummaryResult(text, check, attempts)
            feedback = ", ".join(check.missing)
        return self._finish(text, sources, attempts, None)

    async def asummarize(
        self, previous: str | None, turns: Sequence[str], *, roles: Sequence[str] | None = None
    ) -> SummaryResult:
        """Async twin of :meth:`summarize` (runs in a worker thread)."""
        return await asyncio.to_thread(lambda: self.summarize(previous, turns, roles=roles))
