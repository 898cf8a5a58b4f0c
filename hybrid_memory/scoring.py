"""Importance scoring: how much a turn or memory is worth keeping (0..1).

:class:`HeuristicImportanceScorer` is the offline default: bilingual (Chinese/English) rules for
explicit "remember"/"记住" requests, declared preferences, constraints and goals, names, dates,
numbers and money, with user-stated text weighted above assistant chatter. It also tells whether
a turn is a *key frame* that the short-term buffer pins.

Example:
    >>> s = HeuristicImportanceScorer()
    >>> batch = s.score(["记住：我对花生过敏", "哈哈好的", "I always prefer window seats"])
    >>> [round(x.importance, 2) >= 0.7 for x in batch.items]
    [True, False, True]
    >>> batch.items[0].key_frame_reason
    'remember'
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from hybrid_memory.errors import InvalidInputError

__all__ = [
    "HeuristicImportanceScorer",
    "ImportanceScorer",
    "ScoreBatch",
    "ScoredText",
    "infer_category",
]


@dataclass(frozen=True)
class ScoredText:
    """The score of one text: importance in 0..1 and, for key frames, why it is one."""

    importance: float
    key_frame_reason: str | None = None
    category: str | None = None


@dataclass(frozen=True)
class ScoreBatch:
    """Scores for a batch, with the scorer that produced them and any fallback that happened."""

    items: list[ScoredText]
    scorer: str
    fallback_reason: str | None = None
    details: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class ImportanceScorer(Protocol):
    """Scores texts for importance; sync and async."""

    name: str

    def score(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Score ``texts`` (optionally with the speaker role of each)."""
        ...

    async def ascore(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Async twin of :meth:`score`."""
        ...


_REMEMBER = re.compile(
    r"(记住|记得|别忘|不要忘|牢记|remember|don'?t forget|do not forget|keep in mind|note that)", re.I
)
_PREFERENCE = re.compile(
    r"(喜欢|不喜欢|偏好|爱吃|爱喝|讨厌|最爱|习惯|口味|改喝|改吃|prefer|favou?rite|\blove\b|\bhate\b|\blike\b|\bdislike\b|enjoy|allerg|过敏)",
    re.I,
)
_CONSTRAINT = re.compile(
    r"(不要|不能|不可以|别|必须|一定要|只能|除了|除非|禁止|never|always|must|can'?t|cannot|don'?t|do not|unless|except|only|avoid)",
    re.I,
)
_GOAL = re.compile(
    r"(目标|计划|打算|准备|想要|要在|deadline|截止|goal|plan|planning|going to|want to|need to|intend)", re.I
)
_FACT = re.compile(
    r"(我是|我叫|我的|我在|我住|我们|工作|生日|家人|孩子|老婆|老公|妈妈|爸爸|my |i am|i'm|i live|i work|my name|birthday|wife|husband|son|daughter|kids?\b)",
    re.I,
)
_NUMBER = re.compile(r"\d")
_MONEY = re.compile(r"([$¥￥€£]\s?\d|\d+\s?(元|块|万|美元|dollars?|usd|rmb))", re.I)
_DATE = re.compile(
    r"(\d{1,2}月\d{1,2}[日号]|星期|周[一二三四五六日末]|明天|后天|下周|下个月|今年|明年|monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|next week|next month|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b)",
    re.I,
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_PLEASANTRY = re.compile(
    r"^\W*(好的|嗯+|哈+|谢谢|多谢|不客气|你好|早上好|晚安|拜拜|再见|ok(ay)?|thanks?( you)?|thx|hi|hello|hey|bye|good (morning|night)|lol|haha|cool|great|sure|yes|no|yeah|nice)\W*$",
    re.I,
)

_CATEGORY_ORDER = ("preference", "project", "fact")


def infer_category(text: str) -> str:
    """A best-effort category for a memory text (``preference``, ``project`` or ``fact``).

    Example:
        >>> infer_category("I prefer tea"), infer_category("计划下个月去东京"), infer_category("我住在上海")
        ('preference', 'project', 'fact')
    """
    if _PREFERENCE.search(text):
        return "preference"
    if _GOAL.search(text):
        return "project"
    return "fact"


class HeuristicImportanceScorer:
    """Bilingual rule-based importance scorer (offline default).

    Args:
        key_frame_threshold: Importance at or above which a text is a key frame.
    """

    name = "heuristic"

    def __init__(self, *, key_frame_threshold: float = 0.7) -> None:
        self.key_frame_threshold = key_frame_threshold

    def score_one(self, text: str, role: str = "user") -> ScoredText:
        """Score a single text."""
        if not isinstance(text, str):
            raise InvalidInputError("text must be a str")
        t = text.strip()
        if not t or _PLEASANTRY.match(t):
            return ScoredText(0.05)
        s = 0.2
        reason: str | None = None
        if _REMEMBER.search(t):
            s += 0.5
            reason = "remember"
        if _PREFERENCE.search(t):
            s += 0.3
            reason = reason or "preference"
        if _CONSTRAINT.search(t):
            s += 0.25
            reason = reason or "constraint"
        if _GOAL.search(t):
            s += 0.2
            reason = reason or "goal"
        if _FACT.search(t):
            s += 0.15
        if _MONEY.search(t) or _DATE.search(t):
            s += 0.1
        elif _NUMBER.search(t):
            s += 0.05
        if _NAME.search(t):
            s += 0.05
        if len(t) < 8:
            s -= 0.1
        if role == "assistant":
            s *= 0.5
            reason = None
        elif role in ("system", "tool"):
            s *= 0.6
            reason = None
        s = min(1.0, max(0.0, s))
        if reason is None and s >= self.key_frame_threshold:
            reason = "importance"
        elif reason is not None and s < self.key_frame_threshold and reason != "remember":
            reason = None
        return ScoredText(round(s, 4), reason, infer_category(t))

    def score(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Score several texts (roles default to ``"user"``)."""
        items = list(texts)
        rs = list(roles) if roles is not None else ["user"] * len(items)
        if len(rs) != len(items):
            raise InvalidInputError("roles must have one entry per text")
        return ScoreBatch([self.score_one(t, r) for t, r in zip(items, rs, strict=True)], scorer=self.name)

    async def ascore(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Async twin of :meth:`score` (pure CPU, runs inline)."""
        await asyncio.sleep(0)
        return self.score(texts, roles=roles)
