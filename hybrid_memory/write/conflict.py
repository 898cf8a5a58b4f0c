"""Conflict judges: does a new memory contradict one the user stated before?

A :class:`ConflictJudge` gives one :class:`Verdict` per existing memory: ``contradicts`` (same
subject, both cannot be true now: the writer supersedes the older memory or demotes the newer one),
``suspected`` (listed for review, both kept), ``compatible`` or ``unrelated``.

* :class:`HeuristicConflictJudge`, the offline default, is tuned for precision: same subject with a
  flipped negation, a new value of the same quantity, or a declared change such as 我喜欢喝茶 →
  我现在改喝咖啡了; identifiers, dates of different events and list items are distinct facts (see
  ``benchmarks/results/conflict_judge.md``). Its cue words come from
  :mod:`hybrid_memory.text.vocabulary`.
* :class:`LLMConflictJudge` asks any LangChain chat model and falls back to the heuristic judge,
  also when a sanity check distrusts a valid answer: a hard signal that the facts are distinct
  (:meth:`HeuristicConflictJudge.distinct_reason`) wins over the model's ``contradicts``, and a
  model that gives one relation for a whole window of pairs is not trusted until it varies.

:class:`ConflictReview` is one entry of the writer's review queue (what was superseded, demoted or
only suspected, and why).

Example:
    >>> j = HeuristicConflictJudge()
    >>> [v.relation for v in j.judge("I no longer eat meat", ["I eat meat", "I live in Lyon"])]
    ['contradicts', 'unrelated']
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from hybrid_memory.errors import ConfigurationError, ScoringError
from hybrid_memory.llm_call import LLMCallPolicy, StructuredCaller, StructuredMethod
from hybrid_memory.text.analyzer import ENGLISH_STOPWORDS
from hybrid_memory.text.vocabulary import (
    CHANGE_DECLARED,
    CJK_COUNTERS,
    CJK_NUMERAL,
    COLLEAGUES_EN,
    COLLEAGUES_ZH,
    FRIENDS_EN,
    FRIENDS_ZH,
    MONTHS,
    PREFERENCE,
    RELATIVES_EN,
    RELATIVES_ZH,
    cjk_number,
)
from hybrid_memory.write.screen import screened

__all__ = [
    "ConflictJudge",
    "ConflictReview",
    "ConflictVerdicts",
    "HeuristicConflictJudge",
    "LLMConflictJudge",
    "Relation",
    "Verdict",
]

Relation = Literal["contradicts", "suspected", "compatible", "unrelated"]


@dataclass(frozen=True)
class Verdict:
    """How a new memory relates to one existing memory."""

    relation: Relation
    reason: str = ""
    judge: str = "heuristic"


@runtime_checkable
class ConflictJudge(Protocol):
    """Decides whether a new memory contradicts existing ones (one verdict per candidate)."""

    name: str

    def judge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
        """Return one :class:`Verdict` per candidate, in order."""
        ...

    async def ajudge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
        """Async twin of :meth:`judge`."""
        ...


_NEGATION = screened(
    re.compile(
        r"(不再|不|没有|没|别|未|戒了|戒掉|讨厌|\bnever\b|\bnot\b|\bno longer\b|\bno\b|n't\b|\bstopped\b|\bquit\b|"
        r"\bhate\b|\bdislike\b)",
        re.I,
    )
)
# Negation words that do not negate a statement ("No worries", "没问题", "不客气", "不错").
_NOT_NEGATION = re.compile(
    r"(\bno (?:worries|problem|prob|way|doubt|kidding|idea|clue)\b|^\W*no\b[,.!]|\bnot (?:only|just|bad|sure)\b|"
    r"\bcan'?t wait\b|\bcannot wait\b|\bdon'?t mention it\b|\bdon'?t worry\b|"
    r"没问题|没事|不客气|不错|不过|不好意思|不用谢|不知道|差不多|不管|不得不|忍不住|别客气|别担心)",
    re.I,
)
# Explicit declarations that something changed (weak cues such as "now" or "new" are not enough).
_NUMBER = re.compile(rf"\d+(?:\.\d+)?|[{CJK_NUMERAL}]+(?=[{CJK_COUNTERS}])")
_DOMAIN_PATTERNS: Mapping[str, str] = {
    "drink": r"(喝|茶|咖啡|奶茶|牛奶|果汁|饮料|饮品|\bdrinks?\b|\bdrinking\b|\btea\b|coffee|latte|espresso|juice|\bmilk\b|\bbeer\b|\bwine\b|\bsoda\b|decaf)",
    "food": r"(吃|菜|辣|肉|素食|口味|料理|\beat\b|\beats\b|\beating\b|cuisine|\bmeat\b|vegetarian|vegan|spicy)",
    "home": r"(住在|我住|搬到|搬去|地址|\bi live\b|\bliving in\b|\bmoved to\b|my address|my apartment)",
    "job": r"(工作是|在.{1,10}(工作|上班)|公司|职位|入职|辞职|\bmy job\b|\bi work (?:at|for|as)\b|\bemployer\b|\bjoined\b)",
    "name": r"(叫我|我的名字|我叫|call me|my name is)",
    "transport": r"(开车|地铁|高铁|火车|骑车|\bi drive\b|\bcommute|\bby (?:car|train|bike|bus)\b)",
    "language": r"(中文|英文|英语|日语|\benglish\b|\bchinese\b|\bmandarin\b|\bspanish\b)",
    "tools": r"(电脑|手机|编辑器|windows|linux|\bmac\b|iphone|android|\bvim\b|emacs|vs ?code|\bide\b)",
    "schedule": r"(起床|睡觉|几点|\bwake up\b|\bgo to bed\b|\bbedtime\b)",
    "seat": r"(座位|靠窗|过道|\bseats?\b|\baisle\b|\bwindow seat)",
}
# One pass over the text finds every domain (named groups).
_DOMAINS = screened(re.compile("|".join(f"(?P<{k}>{p})" for k, p in _DOMAIN_PATTERNS.items()), re.I))
# The judge's copies of the shared cue lists, screened (see :mod:`hybrid_memory.write.screen`): same matches.
_CHANGE_DECLARED = screened(CHANGE_DECLARED)
_PREFERENCE = screened(PREFERENCE)
_STOP_CJK = frozenset("我你他她它们的了是在也都很还就吗呢吧啊哦呀和与及现")
_STOP_EN = frozenset({"i", "im", "my", "me", "we", "our", "am", "have", "has", "do", "does", "m", "s", "ve", "ll", "d"})
_SPEAKER = re.compile(r"^\s*([A-Z][\w .'-]{0,30}|[\u4e00-\u9fff]{1,6})\s*(?::\s|：\s*)")
_WORD = re.compile(r"[a-z0-9]+|[\u3400-\u9fff\uf900-\ufaff]+")
_CJK_NUMBER_TOKEN = re.compile(rf"[{CJK_NUMERAL}]+")
#: Texts longer than this are never judged by the heuristic (long chat turns mix many subjects).
_MAX_JUDGED_CHARS = 280


def _numbers(text: str) -> frozenset[float]:
    out: set[float] = set()
    for m in _NUMBER.finditer(text):
        g = m.group(0)
        out.add(float(g) if g[0].isdigit() else float(cjk_number(g)))
    return frozenset(out)


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


# ----- what a number is about: an identifier, a date or clock time, or a quantity/value of one slot
# Before a number: it is part of a code ("CA981", "#1234", "第3", "2024-03-"), or follows a month or a clock word.
_ID_BEFORE = re.compile(r"(?:[A-Za-z]|#\s*|第\s*|\bno\.\s*)$", re.I)
_DATE_BEFORE = re.compile(
    rf"(?:\d[-/.:]|\b{MONTHS}\.?\s*|\bat\s+|[上下]午\s*|凌晨\s*|晚上\s*|早上\s*|中午\s*|夜里\s*)$", re.I
)
_YEAR_BEFORE = re.compile(r"\b(?:in|since|of|year)\s+$", re.I)
_DATE_AFTER = re.compile(
    rf"^\s*(?:月|日|点|(?:am|pm|a\.m\.|p\.m\.|o'?clock)(?![a-z])|[-/:]\d|(?:st|nd|rd|th)?\s+{MONTHS}\b)", re.I
)
_ID_AFTER = re.compile(r"^\s*(?:号|室|楼|层|章|节|页|路|线|栋|单元|期|座|桌|床|版|届|班)")
_CJK_UNIT = re.compile(
    r"^\s*(个小时|小时|分钟|公里|千米|公斤|平米|个月|个|岁|年|元|块|万|千|只|条|本|台|辆|套|次|天|周|斤|克|口|位|杯|张|盆|步|题|人|倍|米|%)"
)
_ATTACHED_UNIT = re.compile(r"^(km|kg|gb|mb|tb|cm|mm|lbs?|k|m|x|%)(?![a-z])", re.I)
_ATTACHED_LETTER = re.compile(r"^[A-Za-z]")
_EN_BEFORE = re.compile(r"([A-Za-z][A-Za-z'.]*)\s*$")
_EN_AFTER = re.compile(r"^\s*([A-Za-z][A-Za-z'-]*)")
_CURRENCY_BEFORE = re.compile(r"[$¥€£]\s*$")
_CJK_VALUE_BEFORE = re.compile(r"(?:是|为|到|达|约|超过|不到|大概|:|：)\s*$")
#: Nouns whose number names one of many things (room 301, order 1234, topic 3), not an amount.
_LABEL_NOUNS = _wordset(
    "room order ticket flight gate bus line route platform version release chapter page step item note topic task "
    "issue bug pr case unit apartment apt suite building table locker server package invoice sprint episode season "
    "part section lesson level seat lot phase track number nr id ref code"
)
#: Words after which a bare number is the value of the sentence's subject ("my son is 4", "I am 29").
_COPULA = _wordset(
    "is am are was were be been im i'm to of about around approximately most least than over under reached"
)
#: English words after a number that are not its unit.
_NOT_UNIT = ENGLISH_STOPWORDS | _wordset(
    "about after ago again all also am any are around before each every from has have here last more next now "
    "per since so than today too very was were when where which while who yesterday"
)
_HABIT = screened(
    re.compile(
        r"(每天|每周|每晚|每月|每年|平时|通常|一般|总是|\bevery\b|\busually\b|\bdaily\b|\balways\b|\bnormally\b)",
        re.I,
    )
)
# Who a statement is about when it is not the user (my sister, 我妈妈, 小王, "Anna drinks tea").
_HOLDER = screened(
    re.compile(
        rf"\b(?:my|our)\s+({'|'.join((*RELATIVES_EN, *COLLEAGUES_EN, *FRIENDS_EN))})s?\b|"
        rf"({'|'.join((*RELATIVES_ZH, *COLLEAGUES_ZH, *FRIENDS_ZH))}|小[王李张刘陈赵杨黄周吴])",
        re.I,
    )
)
_NAME_FIRST = re.compile(r"^\s*([A-Z][a-z]+)\b")
_NOT_NAME = _wordset(
    "I My Our The A An We This That These Those There Every Since Please It He She They Today Yesterday Now"
)
#: Words that do not change what a statement is about ("I have 3 cats *now*").
_FILLER = _wordset(
    "now currently today still also really just even days anymore again already recently lately more any "
    "目 前 目前 已 经 已经 最 近 最近 如 今 如今 又 还"
)


@dataclass(frozen=True)
class _Num:
    """One number of a text and what it is about.

    ``kind`` is ``id`` (room 301, order #1234, topic 3), ``date`` (5月3日, March 3, 7pm, 七点),
    ``qty`` (2 cats, 5公里, $300: ``slot`` is the unit) or ``value`` (my son is *4*: the subject's
    value, slot ``""``).
    """

    kind: Literal["id", "date", "qty", "value"]
    slot: str
    value: float


def _unit_slot(word: str) -> str:
    w = word.lower()
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


def _classify(body: str, m: re.Match[str]) -> _Num:
    g = m.group(0)
    value = float(g) if g[0].isdigit() else float(cjk_number(g))
    before, after = body[: m.start()], body[m.end() :]
    if re.search(r"\d[-/.:]$", before) or _DATE_AFTER.match(after) or _DATE_BEFORE.search(before):
        return _Num("date", "", value)
    if g.isdigit() and 1900 <= value <= 2099 and (_YEAR_BEFORE.search(before) or after.lstrip().startswith("年")):
        return _Num("date", "", value)
    if _ID_BEFORE.search(before) or _ID_AFTER.match(after):
        return _Num("id", "", value)
    if _ATTACHED_LETTER.match(after) and not _ATTACHED_UNIT.match(after):
        return _Num("id", "", value)  # 5B, 12A
    attached = _ATTACHED_UNIT.match(after)
    if attached:
        return _Num("qty", _unit_slot(attached.group(1)), value)
    cjk = _CJK_UNIT.match(after)
    if cjk:
        unit = cjk.group(1)
        nxt = after[cjk.end() :].lstrip()[:1]
        return _Num("qty", unit + (nxt if "\u4e00" <= nxt <= "\u9fff" and nxt not in _STOP_CJK else ""), value)
    prev = _EN_BEFORE.search(before)
    prev_word = prev.group(1).lower().rstrip(".") if prev else ""
    if prev_word in _LABEL_NOUNS:
        return _Num("id", "", value)
    if prev is not None and not before[: prev.start()].strip() and prev.group(1)[0].isupper() and prev_word != "i":
        return _Num("id", "", value)  # "Server 3 runs ...", "Chapter 4 covers ..."
    if _CURRENCY_BEFORE.search(before):
        return _Num("qty", "$", value)
    word = _EN_AFTER.match(after)
    if word and word.group(1).lower() not in _NOT_UNIT:
        return _Num("qty", _unit_slot(word.group(1)), value)
    if prev_word in _COPULA or _CJK_VALUE_BEFORE.search(before):
        return _Num("value", "", value)
    return _Num("id", "", value)  # a bare number after a noun: note 1, 项目进度 2, 订单1234


def _holders(body: str) -> frozenset[str]:
    out = {(m.group(1) or m.group(2)).lower() for m in _HOLDER.finditer(body)}
    name = _NAME_FIRST.match(body)
    if name and name.group(1) not in _NOT_NAME:
        out.add(name.group(1).lower())
    return frozenset(out)


@dataclass(frozen=True)
class _Features:
    """The rule features of one text; the costly ones are computed on first use (most pairs never need them)."""

    text: str
    body: str
    speaker: str | None
    question: bool

    @functools.cached_property
    def negated(self) -> bool:
        r"""An odd number of negations (interjections such as "no worries" not counted).

        Without a negation cue in the text there is none after removing the interjections either
        (each interjection either contains a cue or is bounded by ``\b`` on both sides, so
        replacing it by a space creates no new match): the common case skips the second pattern.
        """
        if _NEGATION.search(self.body) is None:
            return False
        return len(_NEGATION.findall(_NOT_NEGATION.sub(" ", self.body))) % 2 == 1

    @functools.cached_property
    def numbers(self) -> frozenset[float]:
        """The numeric values of the text."""
        return _numbers(self.body)

    @functools.cached_property
    def change(self) -> bool:
        """It declares a change (改喝, switched to, no longer, ...)."""
        return bool(_CHANGE_DECLARED.search(self.body))

    @functools.cached_property
    def preference(self) -> bool:
        """It states a preference."""
        return bool(_PREFERENCE.search(self.body))

    @functools.cached_property
    def habit(self) -> bool:
        """It states a habit (every day, 每天, ...)."""
        return bool(_HABIT.search(self.body))

    @functools.cached_property
    def domains(self) -> frozenset[str]:
        """Topic domains (drinks, food, home, ...) the text mentions."""
        return frozenset(m.lastgroup for m in _DOMAINS.finditer(self.body) if m.lastgroup)

    @functools.cached_property
    def subject(self) -> frozenset[str]:
        """Content tokens (see :func:`_subject_tokens`)."""
        return _subject_tokens(self.body)

    @functools.cached_property
    def nums(self) -> tuple[_Num, ...]:
        """Every number of the text with its kind and slot."""
        return tuple(_classify(self.body, n) for n in _NUMBER.finditer(self.body))

    @functools.cached_property
    def holders(self) -> frozenset[str]:
        """Whose fact it is (me, my sister, Anna)."""
        return _holders(self.body)


def _subject_tokens(text: str) -> frozenset[str]:
    """Content tokens: Latin words, CJK characters and bigrams, minus function words."""
    bare = _NUMBER.sub(" ", _CHANGE_DECLARED.sub(" ", _NEGATION.sub(" ", text.lower())))
    out: set[str] = set()
    for w in _WORD.findall(bare):
        if w[0].isascii():
            if w not in ENGLISH_STOPWORDS and w not in _STOP_EN:
                out.add(w)
            continue
        out.update(c for c in w if c not in _STOP_CJK)
        out.update(a + b for a, b in itertools.pairwise(w) if a not in _STOP_CJK and b not in _STOP_CJK)
    return frozenset(out)


class HeuristicConflictJudge:
    """Rule-based contradiction check (the offline default), tuned for precision.

    A new memory *contradicts* an existing one when both are short statements (not questions)
    by the same speaker about the same subject (token overlap after removing negations, numbers
    and change words) and

    * the negation flipped ("I eat meat" / "I no longer eat meat", 喜欢 / 不喜欢), or
    * a number changed *in the same slot*: each number is classified as an identifier (room 301,
      order #1234, topic 3, 3号楼, 第3章, a bare number after a noun), a date or clock time
      (5月3日, March 3, 7pm, 七点), a quantity with its unit (2 cats, 5公里, $300) or the value of
      the subject ("my son is 4", 血压是140). It is an update only when a quantity or value of the
      same unit changed ("I have 2 kids" / "I have 3 kids", 五千元 / 八千元) and no identifier
      changed; a changed date or time counts only with a declared change (rescheduled, 改到) or
      for a habit (每天七点起床 → 每天六点起床). Numbers alone never make two facts the same
      subject: the bug templates "note 1 about 项目进度 1" / "note 2 …" stay distinct. Both
      updates also need the same holder (me / my sister / 小王 / Anna) and no content word swapped
      for another (cats → dogs, 周一 → 周二), or
    * the new one explicitly declares a change (改喝, 搬到, 不再, switched to, no longer, moved
      to, ...) in the same domain (drinks, food, home, job, name, tools, ...): 我喜欢喝茶 →
      我现在改喝咖啡了.

    Two preferences in the same domain without a change word ("I like tea" / "I like coffee")
    are only *suspected* (listed for review, both kept). Interjections ("No worries", "没问题")
    are not negations, texts prefixed by different speakers ("Ann: …" / "Bob: …") are about
    different people, and long chat turns are left alone: a wrong supersede hides a true memory,
    so the rules prefer missing a conflict.

    Example:
        >>> j = HeuristicConflictJudge()
        >>> [v.relation for v in j.judge("我现在改喝咖啡了", ["我喜欢喝茶", "我住在上海"])]
        ['contradicts', 'unrelated']
        >>> j.judge("I have 3 kids", ["I have 2 kids"])[0].reason
        'number changed (2 → 3)'
    """

    name = "heuristic"

    def __init__(self, *, min_overlap: float = 0.5, cache_size: int = 20_000) -> None:
        self.min_overlap = min_overlap
        self._cache: OrderedDict[str, _Features] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def features(self, text: str) -> _Features:
        """The cached rule features of ``text``."""
        with self._lock:
            f = self._cache.get(text)
            if f is not None:
                self._cache.move_to_end(text)
                return f
        m = _SPEAKER.match(text)
        body = text[m.end() :] if m else text
        f = _Features(
            text=text,
            body=body,
            speaker=m.group(1).strip() if m else None,
            question=body.rstrip().endswith(("?", "？")),
        )
        with self._lock:
            self._cache[text] = f
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return f

    @staticmethod
    def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
        if not a and not b:
            return 1.0
        if not a or not b:
            return 0.0
        return len(a & b) / len(a | b)

    def _comparable(self, a: _Features, b: _Features) -> bool:
        if a.question or b.question:
            return False
        if len(a.text) > _MAX_JUDGED_CHARS or len(b.text) > _MAX_JUDGED_CHARS:
            return False
        return a.speaker is None or b.speaker is None or a.speaker == b.speaker

    @staticmethod
    def _same_thing(a: _Features, b: _Features) -> bool:
        """Same holder (the user, my sister, Anna) and no word of one swapped for another (cats/dogs)."""
        if a.holders != b.holders:
            return False
        return not ((a.subject - b.subject - _FILLER) and (b.subject - a.subject - _FILLER))

    @staticmethod
    def _number_update(a: _Features, b: _Features) -> tuple[bool, str]:
        """Whether the changed numbers are a new value of one slot; else why the facts are distinct."""
        slots_a: dict[tuple[str, str], set[float]] = {}
        slots_b: dict[tuple[str, str], set[float]] = {}
        for n in a.nums:
            slots_a.setdefault((n.kind, n.slot), set()).add(n.value)
        for n in b.nums:
            slots_b.setdefault((n.kind, n.slot), set()).add(n.value)
        changed = {k for k in slots_a.keys() | slots_b.keys() if slots_a.get(k) != slots_b.get(k)}
        if any(kind == "id" for kind, _ in changed):
            return False, "different identifiers"
        if any(kind == "date" for kind, _ in changed) and not (a.change or (a.habit and b.habit)):
            return False, "different dates or times"
        if not any(k in slots_a and k in slots_b for k in changed):
            return False, "different quantities"
        return True, "number changed"

    def _hard_verdict(self, a: _Features, b: _Features) -> tuple[Verdict | None, bool]:
        """The verdict on numbers and negation, and whether it is final (distinct identifiers or dates)."""
        numbers_changed = bool(a.numbers and b.numbers and a.numbers != b.numbers)
        if not numbers_changed and a.negated == b.negated:
            return None, False
        if self._jaccard(a.subject, b.subject) < self.min_overlap:
            return None, False
        same = self._same_thing(a, b)
        if numbers_changed:
            old = ", ".join(f"{x:g}" for x in sorted(b.numbers - a.numbers) or sorted(b.numbers))
            new = ", ".join(f"{x:g}" for x in sorted(a.numbers - b.numbers) or sorted(a.numbers))
            update, why = self._number_update(a, b)
            if update and same:
                return Verdict("contradicts", f"{why} ({old} → {new})", self.name), True
            if not update:
                return Verdict("compatible", f"{why} ({old} / {new})", self.name), why != "different quantities"
            return Verdict("compatible", f"numbers differ ({old} / {new}) about different things", self.name), False
        if same:
            return Verdict("contradicts", "negation flipped", self.name), True
        return Verdict("compatible", "negation differs about different things", self.name), False

    def _hard(self, a: _Features, b: _Features) -> Verdict | None:
        return self._hard_verdict(a, b)[0]

    def hard_conflict(self, new: str, old: str) -> Verdict | None:
        """How two texts differ on numbers or negation about the same subject, else ``None``.

        ``contradicts`` when it is an update of one fact (a new value of the same slot, a flipped
        negation); ``compatible`` when the numbers are identifiers, dates of different events or
        amounts of different things (order 1234 / 5678, 5月3日 / 6月7日, 2 cats / 2 cats and 1 dog).
        Either way the two texts are not duplicates.
        """
        a, b = self.features(new), self.features(old)
        if a.question != b.question:
            return None
        return self._hard(a, b)

    def distinct_reason(self, new: str, old: str) -> str | None:
        """Why ``new`` and ``old`` are distinct facts for a hard reason, else ``None``.

        Hard reasons: different speakers; numbers that are different identifiers, dates of
        different events or amounts of different things; a different holder (my sister / me,
        Anna / 小王; not in a naming statement such as 叫我小王); a list item (same statement with
        one content word swapped for another, no change declared, no negation flipped, not two
        preferences of one domain). An :class:`LLMConflictJudge` cannot turn such a pair into an
        update.

        Example:
            >>> j = HeuristicConflictJudge()
            >>> j.distinct_reason("I booked room 302", "I booked room 301")
            'different identifiers (301 / 302)'
            >>> j.distinct_reason("I like pears and apples a lot", "I like plums and apples a lot")
            'list item (pears / plums)'
            >>> j.distinct_reason("I have 3 cats", "I have 2 cats") is None
            True
        """
        a, b = self.features(new), self.features(old)
        if a.speaker is not None and b.speaker is not None and a.speaker != b.speaker:
            return f"different speakers ({b.speaker} / {a.speaker})"
        hard, _ = self._hard_verdict(a, b)
        if hard is not None and hard.relation == "compatible" and not hard.reason.startswith("negation"):
            return hard.reason
        if a.holders != b.holders and "name" not in a.domains | b.domains:
            return f"other holder ({'/'.join(sorted(b.holders)) or 'me'} / {'/'.join(sorted(a.holders)) or 'me'})"
        if a.change or b.change or a.negated != b.negated or (a.preference and b.preference and a.domains & b.domains):
            return None
        only_a, only_b = a.subject - b.subject - _FILLER, b.subject - a.subject - _FILLER
        if not (only_a and only_b) or self._jaccard(a.subject, b.subject) < self.min_overlap:
            return None
        if all(_CJK_NUMBER_TOKEN.fullmatch(t) for t in only_a | only_b):
            return None  # a number the rules do not read (一万二 / 一万五)
        return f"list item ({', '.join(sorted(only_a))} / {', '.join(sorted(only_b))})"

    def _one(self, new: str, old: str) -> Verdict:
        a, b = self.features(new), self.features(old)
        if not self._comparable(a, b):
            return Verdict("unrelated", "", self.name)
        hard, final = self._hard_verdict(a, b)
        if hard is not None and (final or hard.relation == "contradicts"):
            return hard
        if not (a.change or (a.preference and b.preference)):  # the domains decide nothing else
            return hard if hard is not None else Verdict("unrelated", "", self.name)
        shared = sorted(a.domains & b.domains)
        if shared and a.change and a.holders == b.holders:
            return Verdict("contradicts", f"declared change ({shared[0]})", self.name)
        if shared and a.preference and b.preference:
            return Verdict("suspected", f"two preferences about {shared[0]}", self.name)
        return hard if hard is not None else Verdict("unrelated", "", self.name)

    def judge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
        """One verdict per candidate (pure CPU)."""
        return [self._one(new, c) for c in candidates]

    async def ajudge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
        """Async twin of :meth:`judge` (runs inline)."""
        await asyncio.sleep(0)
        return self.judge(new, candidates)


class _JudgedPair(BaseModel):
    index: int = Field(description="the [n] index of the existing memory")
    relation: Literal["contradicts", "compatible", "unrelated"] = Field(
        description="contradicts = same subject, cannot both be true now"
    )
    reason: str = Field(default="", description="a few words")


class ConflictVerdicts(BaseModel):
    """Whether a new memory contradicts each numbered existing memory."""

    verdicts: list[_JudgedPair] = Field(description="one entry per existing memory")


_JUDGE_PROMPT = (
    "You maintain an assistant's long-term memory about one user. Decide for each EXISTING memory whether the "
    "NEW memory contradicts it: same subject and both cannot be true now (a changed preference, a changed "
    "number, a negated fact, a move, a new job). Different subjects, or facts that can both hold, are "
    '"compatible" or "unrelated". Answer with JSON only: {"verdicts": [{"index": 0, "relation": '
    '"contradicts", "reason": "..."}]} with one entry per existing memory.'
)


class LLMConflictJudge:
    """Contradiction check by any LangChain chat model, falling back to the heuristic judge.

    The model answers with structured output (``function_calling`` or ``json_mode``, explicit
    ``max_tokens``) under ``policy``; a timeout, retries with backoff and a failed/garbled answer all fall back to
    :class:`HeuristicConflictJudge`, and the verdict's ``reason`` says so.

    Valid answers are sanity-checked too (each override is a fallback with its reason in the
    verdict, ``judge`` ``"heuristic"``):

    * hard signals win: a ``contradicts`` for a pair the heuristic finds distinct for a hard
      reason (:meth:`HeuristicConflictJudge.distinct_reason`: different identifiers, event dates,
      list items, other holders) becomes ``compatible``;
    * a degenerate model, one that answered ``contradicts`` for the last ``degenerate_window``
      pairs (a too-small model answers "contradicts" to everything), is not trusted until it
      varies: the heuristic judges instead. A run of ``compatible`` / ``unrelated`` is what a good
      model says for most pairs, and it only keeps both memories, so it stays trusted.

    Args:
        chat_model: A LangChain chat model.
        method: ``"function_calling"`` or ``"json_mode"``.
        max_tokens: Completion budget per call.
        fallback: Judge used when the model fails.
        model_kwargs: Extra call arguments bound to the model (see ``LLMImportanceScorer``).
        policy: Deadline per call, retries and backoff as one
            :class:`~hybrid_memory.llm_call.LLMCallPolicy` (default ``LLMCallPolicy()``: 30 s, 2
            retries, 0.5 s doubling).
        degenerate_window: Pairs over which ``contradicts`` and nothing else makes the model
            untrusted (``0`` turns the check off).

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> reply = '{"verdicts": [{"index": 0, "relation": "contradicts"}, {"index": 1, "relation": "contradicts"}]}'
        >>> j = LLMConflictJudge(FakeListChatModel(responses=[reply]), method="json_mode")
        >>> [(v.relation, v.judge) for v in j.judge("I have 3 cats", ["I have 2 cats", "My sister has 2 cats"])]
        [('contradicts', 'llm'), ('compatible', 'heuristic')]
    """

    name = "llm"

    def __init__(
        self,
        chat_model: Any,
        *,
        method: StructuredMethod = "function_calling",
        max_tokens: int = 300,
        fallback: ConflictJudge | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        policy: LLMCallPolicy | None = None,
        degenerate_window: int = 8,
    ) -> None:
        if degenerate_window < 0:
            raise ConfigurationError("degenerate_window must be >= 0")
        self.policy = policy if policy is not None else LLMCallPolicy()
        self._caller = StructuredCaller(
            chat_model,
            schema=ConflictVerdicts,
            method=method,
            max_tokens=max_tokens,
            policy=self.policy,
            model_kwargs=model_kwargs,
        )
        self.fallback: ConflictJudge = fallback if fallback is not None else HeuristicConflictJudge()
        self._rules = self.fallback if isinstance(self.fallback, HeuristicConflictJudge) else HeuristicConflictJudge()
        self.degenerate_window = degenerate_window
        self._recent: deque[str] = deque(maxlen=degenerate_window or 1)
        self._lock = threading.Lock()

    @staticmethod
    def messages(new: str, candidates: Sequence[str]) -> list[tuple[str, str]]:
        """The chat messages sent for one judgement."""
        lines = "\n".join(f"[{i}] {' '.join(c.split())}" for i, c in enumerate(candidates))
        return [("system", _JUDGE_PROMPT), ("human", f"NEW: {' '.join(new.split())}\nEXISTING:\n{lines}")]

    def _degenerate(self, relations: Sequence[str]) -> str | None:
        """Record the model's relations; the reason not to trust them when the window holds only ``contradicts``."""
        if not self.degenerate_window or not relations:
            return None
        with self._lock:
            self._recent.extend(relations)
            window = list(self._recent)
        if len(window) == self.degenerate_window and set(window) == {"contradicts"}:
            return f"model degenerate: {window[0]!r} for the last {len(window)} pairs"
        return None

    def _hard_checked(self, model: Verdict, new: str, old: str) -> Verdict:
        """The model's verdict, unless it supersedes a pair that is distinct for a hard reason."""
        if model.relation == "contradicts":
            hard = self._rules.distinct_reason(new, old)
            if hard is not None:
                return Verdict("compatible", f"{hard} (model said contradicts; hard signal wins)", self._rules.name)
        return model

    def _verdicts(self, parsed: BaseModel, new: str, candidates: Sequence[str]) -> list[Verdict]:
        assert isinstance(parsed, ConflictVerdicts)
        got = {v.index: v for v in parsed.verdicts if 0 <= v.index < len(candidates)}
        degenerate = self._degenerate([got[i].relation for i in sorted(got)])
        fb = self.fallback.judge(new, candidates) if degenerate is not None or len(got) < len(candidates) else []
        out: list[Verdict] = []
        for i, old in enumerate(candidates):
            if i not in got:
                out.append(Verdict(fb[i].relation, f"{fb[i].reason} (model gave no verdict; heuristic)", fb[i].judge))
            elif degenerate is not None:
                out.append(
                    Verdict(fb[i].relation, f"{fb[i].reason} ({degenerate}; heuristic used)".strip(), fb[i].judge)
                )
            else:
                out.append(self._hard_checked(Verdict(got[i].relation, got[i].reason, self.name), new, old))
        return out

    def _fallback(self, new: str, candidates: Sequence[str], exc: ScoringError) -> list[Verdict]:
        return [
            Verdict(v.relation, f"{v.reason} (LLM judge failed: {exc}; heuristic used)".strip(), v.judge)
            for v in self.fallback.judge(new, candidates)
        ]

    def judge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
        """One verdict per candidate; model failures fall back to the heuristic (never raise)."""
        if not candidates:
            return []
        try:
            parsed, _ = self._caller.call(self.messages(new, candidates))
        except ScoringError as exc:
            return self._fallback(new, candidates, exc)
        return self._verdicts(parsed, new, candidates)

    async def ajudge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
        """Async twin of :meth:`judge`."""
        if not candidates:
            return []
        try:
            parsed, _ = await self._caller.acall(self.messages(new, candidates))
        except ScoringError as exc:
            return self._fallback(new, candidates, exc)
        return self._verdicts(parsed, new, candidates)


# --------------------------------------------------------------------------- review queue
@dataclass(frozen=True)
class ConflictReview:
    """A detected or suspected conflict, kept for a human (or a later LLM pass) to review.

    ``action`` is what the writer did: ``superseded`` (the old memory was replaced),
    ``demoted`` (the new memory was stored as ``temporary``) or ``suspected`` (both kept).
    """

    user_id: str
    new_id: str
    old_id: str
    new_content: str
    old_content: str
    action: Literal["superseded", "demoted", "suspected"]
    reason: str
    judge: str
    detected_at: datetime
