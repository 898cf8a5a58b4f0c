"""Importance scoring: how much a turn or memory is worth keeping (0..1).

Two scorers implement the :class:`ImportanceScorer` protocol:

* :class:`HeuristicImportanceScorer`, the offline default: bilingual (Chinese/English) rules for
  explicit "remember"/"记住" requests, health and safety facts, declared preferences,
  constraints, goals and plans, personal facts (identity, family, home, work), changes
  ("我现在改喝咖啡了", "no longer"), decisions, dates, numbers and money; questions, requests,
  small talk and assistant chatter score low. Its rank agreement with a hand-labelled set of
  246 turns (``tests/data/importance_labels.jsonl``) is reported in
  ``benchmarks/results/importance.md``.
* :class:`LLMImportanceScorer`, over any LangChain chat model: a 1-10 score per turn (mapped to
  0..1), several turns per call, a cache by content hash, a timeout and retries with backoff,
  and a fallback to the heuristic scorer that is recorded in :attr:`ScoreBatch.fallback_reason`
  (never silent, never raised to the agent). Valid but implausible answers are not trusted
  either: a batch where every turn got the same score, a model whose rank agreement with the
  heuristic over a rolling window falls below ``min_rank_agreement``, and a score below the
  key-frame threshold for a turn with a hard signal (an explicit "remember"/"记住", a health or
  safety fact, a constraint) each fall back or are raised to the heuristic's score, with the reason
  in :attr:`ScoreBatch.fallback_reason`
  and in the item's :attr:`ScoredText.note`.

:class:`HybridMemory <hybrid_memory.HybridMemory>` keeps an LLM scorer off the hot path:
``add_turn`` stores the heuristic score and the LLM refines it in the background (see
:mod:`hybrid_memory.write.refine`).

Both also tell whether a turn is a *key frame* (pinned by the short-term buffer) and why.

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
import hashlib
import math
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, Field

from hybrid_memory.errors import ConfigurationError, InvalidInputError, ScoringError
from hybrid_memory.llm_call import LLMCallPolicy, StructuredCaller, StructuredMethod
from hybrid_memory.records import Role, normalize_content
from hybrid_memory.text.vocabulary import (
    CHANGE,
    CJK_MEASURES,
    CJK_NUMERAL,
    COLLEAGUES_EN,
    COLLEAGUES_ZH,
    MONTHS,
    PETS_EN,
    PETS_ZH,
    PREFERENCE,
    RELATIVES_EN,
    RELATIVES_ZH,
    english_words,
)

__all__ = [
    "HeuristicImportanceScorer",
    "ImportanceScorer",
    "LLMImportanceScorer",
    "ScoreBatch",
    "ScoredText",
    "infer_category",
    "spearman",
]


@dataclass(frozen=True)
class ScoredText:
    """The score of one text: importance in 0..1 and, for key frames, why it is one.

    ``note`` says why the score is not the named scorer's own answer (a fallback, a sanity check
    that rejected or floored it); ``None`` when it is.
    """

    importance: float
    key_frame_reason: str | None = None
    category: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class ScoreBatch:
    """Scores for a batch, with the scorer that produced them and any fallback that happened.

    ``fallback_reason`` is set whenever some or all scores did not come from the named scorer
    (for example the LLM timed out and the heuristic scored instead); ``details`` carries
    counters such as ``cached``, ``llm`` and ``fallback``.
    """

    items: list[ScoredText]
    scorer: str
    fallback_reason: str | None = None
    details: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class ImportanceScorer(Protocol):
    """Scores texts for importance; sync and async.

    A scorer with a true ``background`` attribute (the LLM scorer) is kept off ``add_turn``'s hot
    path by :class:`~hybrid_memory.HybridMemory`: the turn gets the heuristic score at once and
    this scorer refines it in the background.
    """

    name: str

    def score(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Score ``texts`` (optionally with the speaker role of each)."""
        ...

    async def ascore(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Async twin of :meth:`score`."""
        ...


# --------------------------------------------------------------------------- heuristic rules
def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


_REMEMBER = _rx(
    r"(记住|记得|别忘|不要忘|牢记|提醒我|remember|don'?t forget|do not forget|keep in mind|note that|make a note|remind me)"
)
_HEALTH = _rx(
    r"(过敏|糖尿病|高血压|心脏病|哮喘|怀孕|孕期|手术|吃药|服药|药物|癫痫|抑郁|失眠|血型|乳糖不耐|不耐受|晕车|素食|吃素|清真|宗教|"
    r"allerg|intoleran|diabet|blood pressure|asthma|pregnan|surgery|medication|epilep|depress|insomnia|"
    r"alzheimer|blood type|colou?r-?blind|gluten|celiac|coeliac|disabilit|wheelchair|\bknee\b|\bback pain|"
    r"vegetarian|\bvegan\b|halal|kosher|motion sick|religio)"
)
_CONSTRAINT = _rx(
    r"(不要|不能|不可以|别再|千万别|必须|一定要|只能|只用|除了|除非|禁止|不允许|不吃|不喝|不会|尽量|超过|"
    r"\bnever\b|\balways\b|\bmust\b|can'?t|cannot|\bdon'?t\b|\bdo not\b|\bunless\b|\bexcept\b|\bavoid\b|"
    r"\bno more than\b|\bat most\b|\bmax\b|\bno longer\b|\bonly\b|\bplease don'?t\b|\bnot allowed\b)"
)
# Standing instructions to the assistant about how to answer (language, length, format, tone).
_STYLE = _rx(
    r"((回答|回复|答复|说话|解释).{0,12}(用|请|要|别|不要|简短|详细|中文|英文)|(用|请用).{0,6}(中文|英文|简体|繁体)(回答|回复)|"
    r"(keep|make) (your )?(answers?|replies|responses) |\b(answer|reply|respond|write) (me )?(in|with|using)\b|"
    r"bullet points|\bno emojis?\b|(short|brief|concise|detailed) (answers|replies|responses))"
)
_GOAL = _rx(
    r"(目标|计划|打算|准备(?!好)|想要|想在|要去|要在|截止|deadline|面试|考研|考试|结婚|出差|预约|备考|备赛|争取|"
    r"\bgoal\b|\bplan\b|\bplans\b|planning|going to|want to|need to|intend|aim to|\baiming\b|\bdue\b|appointment|"
    r"interview|presenting|wedding|\btraining for\b|\bpreparing for\b|\bsaving (?:up )?for\b)"
)
# A goal or plan the user states about themselves: always a key frame (the architecture pins "task goals").
_STATED_GOAL = _rx(
    r"(我的目标|目标是|(?:^|我|我们|咱们)(?:打算|计划|准备(?!好))(?=\S{2})|计划(?:在|于|下个?|明年|今年|年底|月底|这周|本周)|争取在|备考|备赛|"
    r"\bmy (?:goal|aim|target|plan)s? (?:is|are|for)\b|\bour (?:goal|plan) is\b|"
    r"\bi'?m (?:training|preparing|saving up|saving) for\b|\bi (?:plan|aim|intend) to\b|\bi'?m (?:planning|aiming) to\b|"
    r"\bi (?:want|need|hope) to\b.{1,60}\b(?:by|before)\b)"
)
_IDENTITY = _rx(
    r"(我叫|我的名字|名叫|我是.{0,8}(的|人|师|员|生|者|家)|我住|住在|老家|我在.{0,12}(工作|上班|做|读|学)|"
    r"做.{0,4}(开发|设计|老师|医生|护士|工程师)|工资|收入|"
    r"\bmy name\b|\bcall me\b|\bi'?m a\b|\bi am a\b|\bi live\b|\bi work\b|\bi'?m (?:studying|learning)|"
    r"\bi run\b|\bi speak\b|\bi grew up\b|\bi earn\b|\bi have\b|\bi don'?t have\b|\bi'?m \d+|i'?ve been a)"
)
# Family, colleagues and pets (friends and neighbours are not family facts: see the vocabulary).
_FAMILY = _rx(
    "|".join((*RELATIVES_ZH, *COLLEAGUES_ZH, *PETS_ZH, english_words((*RELATIVES_EN, *COLLEAGUES_EN, *PETS_EN))))
)
_LIFE_EVENT = _rx(
    r"(去世|离婚|分手|生病|住院|升职|辞职|被裁|怀孕|出生|毕业|失业|"
    r"passed away|\bdied\b|divorc|broke up|hospital|promoted|\bquit\b|laid off|\bborn\b|graduat|pregnant)"
)
_DECISION = _rx(r"(决定|确定|定了|就按|就用|选定|\bdecided\b|\bdecide\b|let'?s go with|we'?ll use|\bagreed\b)")
_FIRST_PERSON = _rx(r"(我|我们|咱们|\bi\b|\bi'?m\b|\bi'?ve\b|\bi'?d\b|\bmy\b|\bmine\b|\bwe\b|\bour\b|\bwe'?re\b)")
_QUESTION = _rx(
    r"([?？]\s*$|^(怎么|如何|为什么|什么|哪|谁|是否|能不能|可不可以|有没有|要不要)|吗[?？]?\s*$|"
    r"^(how|what|why|which|who|where|when|is|are|can|could|should|would|do|does|did|any)\b)"
)
_REQUEST = _rx(
    r"^(请)?(帮我|给我|替我|推荐|写|翻译|解释|总结|告诉我|讲|说说)|"
    r"^(please\s+)?(can you|could you|tell me|explain|summari[sz]e|write|translate|give me|show me|help me)\b"
)
_SMALLTALK = _rx(
    r"(天气|下雨|下雪|好累|有点困|无聊|搞笑|地铁好挤|周末过得|好听|好吃|随便聊|"
    r"weather|\braining\b|traffic|bored|\bjoke\b|long day|\bfunny\b|trailer|finally friday|checking in|"
    r"\bthe game\b|pretty good|say that again|\bbrb\b)"
)
_ASSISTANT_ACTION = _rx(
    r"(已经帮你|帮你(定|订|约|改|更新)|定在|订好|更新为|记住了|提前|航班|"
    r"i'?ve (booked|scheduled|updated|set|added|saved|moved)|has shipped|will arrive|your (flight|order|booking)|i'?ll remember)"
)
_NUMBER = re.compile(rf"\d|[{CJK_NUMERAL}]+(?=[{CJK_MEASURES}])")
_MONEY = _rx(r"([$¥￥€£]\s?\d|\d+\s?(元|块|万|美元|dollars?|usd|rmb|k\b)|[" + CJK_NUMERAL + "]+(元|块|万))")
_DATE = _rx(
    r"(\d{1,2}月\d{1,2}[日号]?|\d{1,2}[日号]|星期|周[一二三四五六日末]|明天|后天|下周|下个月|今年|明年|年底|上个月|"
    r"\d{1,2}点|monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|next (week|month|year|spring|summer)|"
    rf"\b{MONTHS}\b|"
    r"\b\d{1,2}(:\d{2})?\s?(am|pm)\b|\b(19|20)\d{2}\b)"
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
# Greetings, thanks and acknowledgements and nothing else (the whole text): never kept.
_PLEASANTRY = _rx(
    r"^\W*((好的|好滴|好嘞|好哒|好吧|嗯+|哦+|噢+|喔+|哈+|谢谢|谢啦|谢了|多谢|不客气|不用谢|你好|您好|大家好|哈喽|嗨|早上好|早安|"
    r"中午好|下午好|晚上好|晚安|拜拜|再见|回头见|下次见|下次再聊|回头聊|没问题|没事|辛苦了|在吗|收到|明白了?|知道了|懂了|了解|"
    r"行|可以|太棒了|不用了|好呀|好啊|啦|呀|你|的|帮助|，|,|\s)+|"
    r"(ok(ay)?|thanks?|thank you|thx|ty|hi|hiya|hello|hey|howdy|bye|goodbye|good ?bye|good (morning|afternoon|evening|night)|"
    r"morning|evening|there|everyone|everybody|all|guys|folks|again|lol|haha+|hmm+|cool|great|sure|yes|no|yeah|nice|"
    r"awesome|perfect|alright|all right|cheers|got it|noted|understood|will do|sounds good|no (worries|problem)|np|"
    r"you'?re welcome|welcome|appreciate it|see you( later| soon)?|you too|very much|so much|a lot|for now|to me|"
    r"that'?s (all|funny)|brb|\s|,|!|\.)+)\W*$"
)

_CATEGORY_ORDER = ("preference", "project", "fact")


def infer_category(text: str) -> str:
    """A best-effort category for a memory text (``preference``, ``project`` or ``fact``).

    Example:
        >>> infer_category("I prefer tea"), infer_category("计划下个月去东京"), infer_category("我住在上海")
        ('preference', 'project', 'fact')
    """
    if PREFERENCE.search(text) or _STYLE.search(text):
        return "preference"
    if _GOAL.search(text):
        return "project"
    return "fact"


class HeuristicImportanceScorer:
    """Bilingual rule-based importance scorer (offline default).

    Each rule adds points on the 1-10 scale that human labellers use; the sum saturates
    smoothly (``1 + 9·(1 - e^(-points/6))``) and is mapped to 0..1. Questions, requests, small
    talk and assistant turns are damped; pleasantries score the minimum.

    Args:
        key_frame_threshold: Importance at or above which a text is a key frame.
    """

    name = "heuristic"

    #: Points per rule (on the 1-10 label scale, before saturation).
    WEIGHTS: Mapping[str, float] = {
        "content": 1.5,
        "remember": 7.0,
        "health": 8.0,
        "constraint": 3.5,
        "preference": 3.5,
        "style": 3.0,
        "goal": 3.0,
        "change": 2.0,
        "identity": 3.0,
        "family": 2.5,
        "life_event": 3.5,
        "decision": 2.5,
        "date": 1.0,
        "money": 1.0,
        "number": 0.5,
        "name": 0.5,
        "first_person": 1.5,
    }

    def __init__(self, *, key_frame_threshold: float = 0.7) -> None:
        if not 0.0 <= key_frame_threshold <= 1.0:
            raise ConfigurationError("key_frame_threshold must be in [0, 1]")
        self.key_frame_threshold = key_frame_threshold

    def features(self, text: str, role: str = "user") -> dict[str, bool]:
        """Which rules fire for ``text`` (for inspection and tests)."""
        t = text.strip()
        return {
            "content": True,
            "remember": bool(_REMEMBER.search(t)),
            "health": bool(_HEALTH.search(t)),
            "constraint": bool(_CONSTRAINT.search(t)),
            "preference": bool(PREFERENCE.search(t)),
            "style": bool(_STYLE.search(t)),
            "goal": bool(_GOAL.search(t)),
            "stated_goal": bool(_STATED_GOAL.search(t)),
            "change": bool(CHANGE.search(t)),
            "identity": bool(_IDENTITY.search(t)),
            "family": bool(_FAMILY.search(t)),
            "life_event": bool(_LIFE_EVENT.search(t)),
            "decision": bool(_DECISION.search(t)),
            "date": bool(_DATE.search(t)),
            "money": bool(_MONEY.search(t)),
            "number": bool(_NUMBER.search(t)),
            "name": bool(_NAME.search(t)),
            "first_person": bool(_FIRST_PERSON.search(t)),
            "question": bool(_QUESTION.search(t)),
            "request": bool(_REQUEST.search(t)),
            "smalltalk": bool(_SMALLTALK.search(t)),
            "assistant_action": role == "assistant" and bool(_ASSISTANT_ACTION.search(t)),
        }

    def score_one(self, text: str, role: str = "user") -> ScoredText:
        """Score a single text."""
        if not isinstance(text, str):
            raise InvalidInputError("text must be a str")
        t = text.strip()
        if not t or _PLEASANTRY.match(t):
            return ScoredText(0.0, None, None)
        f = self.features(t, role)
        w = self.WEIGHTS
        pts = sum(w[k] for k in w if f[k])
        if f["number"] and (f["money"] or f["date"]):
            pts -= w["number"]
        if f["question"] or f["request"]:
            # Asking is not telling: keep only what the question discloses about the user.
            pts *= 0.45
        if f["smalltalk"] and not (f["remember"] or f["health"] or f["preference"] or f["constraint"]):
            pts *= 0.4
        if len(t) < 6 and not (f["remember"] or f["health"]):
            pts *= 0.6
        label = 1.0 + 9.0 * (1.0 - math.exp(-max(0.0, pts) / 6.0))
        if role == "assistant":
            label = 1.0 + (label - 1.0) * 0.25 + (2.5 if f["assistant_action"] else 0.0)
        elif role in ("system", "tool"):
            label = 1.0 + (label - 1.0) * 0.5
        imp = min(1.0, max(0.0, (label - 1.0) / 9.0))
        return ScoredText(round(imp, 4), self._reason(f, imp, role), infer_category(t))

    def _reason(self, f: Mapping[str, bool], imp: float, role: str) -> str | None:
        if role != "user":
            return None
        if f["remember"]:
            return "remember"
        telling = not (f["question"] or f["request"])
        if telling and imp >= 0.45:
            for k, reason in (
                ("health", "constraint"),
                ("constraint", "constraint"),
                ("preference", "preference"),
                ("style", "preference"),
                ("goal", "goal"),
                ("change", "change"),
            ):
                if f[k]:
                    return reason
        if telling and f["stated_goal"]:  # "my goal is …", "我打算…": pinned however short
            return "goal"
        return "importance" if imp >= self.key_frame_threshold else None

    def score(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Score several texts (roles default to ``"user"``)."""
        items = list(texts)
        rs = _check_roles(items, roles)
        return ScoreBatch([self.score_one(t, r) for t, r in zip(items, rs, strict=True)], scorer=self.name)

    async def ascore(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Async twin of :meth:`score` (pure CPU, runs inline)."""
        await asyncio.sleep(0)
        return self.score(texts, roles=roles)


def _check_roles(items: Sequence[str], roles: Sequence[str] | None) -> list[str]:
    rs = list(roles) if roles is not None else ["user"] * len(items)
    if len(rs) != len(items):
        raise InvalidInputError("roles must have one entry per text")
    for t in items:
        if not isinstance(t, str):
            raise InvalidInputError(f"texts must be str, got {type(t).__name__}")
    return rs


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation of two equally long sequences (average ranks for ties).

    Example:
        >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
        (1.0, -1.0)
    """
    if len(a) != len(b) or len(a) < 2:
        raise InvalidInputError("spearman needs two sequences of the same length >= 2")

    def ranks(xs: Sequence[float]) -> list[float]:
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        r = [0.0] * len(xs)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return 0.0
    return round(cov / math.sqrt(va * vb), 12)


# --------------------------------------------------------------------------- LLM scorer
class TurnScore(BaseModel):
    """One scored turn in the LLM's answer."""

    index: int = Field(description="the [n] index of the turn")
    score: int = Field(description="importance from 1 (forget) to 10 (must remember)")


class ImportanceScores(BaseModel):
    """Importance scores for the numbered conversation turns, one entry per turn."""

    scores: list[TurnScore] = Field(description="one entry per turn, in order")


_SYSTEM_PROMPT = (
    "You rate how important each conversation turn is for an assistant to remember about the user "
    "in future conversations. Score every turn from 1 to 10:\n"
    "9-10: explicit 'remember this', health, allergies, safety, hard constraints.\n"
    "7-8: stable preferences, personal facts (name, family, home, job), plans with dates, decisions, changes.\n"
    "4-6: situational details, feelings, task context.\n"
    "1-3: small talk, pleasantries, generic questions, assistant chatter.\n"
    "Only what the user states about themselves counts; assistant turns are usually 1-3.\n"
    'Answer with JSON only, exactly: {"scores": [{"index": 0, "score": 5}, ...]} with one entry per turn.'
)


#: Consecutive identical model scores of user turns (over any number of calls) that are degenerate.
_DEGENERATE_RUN = 6


def content_key(text: str, role: str = "user") -> str:
    """Cache key of a turn: SHA-256 of the role and the normalised text (the text is not kept)."""
    return hashlib.sha256(f"{role}\x1f{normalize_content(text)}".encode()).hexdigest()


def forget_scores(scorer: object, texts: Sequence[str]) -> None:
    """Drop ``scorer``'s cached scores of forgotten or edited texts (when it caches: ``forget_texts``)."""
    drop = getattr(scorer, "forget_texts", None)
    if texts and callable(drop):
        drop(texts)


def _coerce_scores(value: Any) -> Any:
    """Accept the shapes small models produce: ``{"scores": [7, 3]}`` or ``[7, 3]`` (positional)."""
    items = value.get("scores") if isinstance(value, dict) else value
    if (
        isinstance(items, list)
        and items
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items)
    ):
        return {"scores": [{"index": i, "score": round(x)} for i, x in enumerate(items)]}
    return value


class LLMImportanceScorer:
    """Importance from any LangChain chat model: 1-10 per turn, mapped to 0..1.

    Several turns are scored per call (``batch_size``); results are cached by a hash of role and
    normalised text; each call runs under ``policy`` (a deadline per attempt, retries with
    exponential backoff). Turns the model could not score (error, timeout, truncated or
    malformed reply) are scored by ``fallback`` (the heuristic scorer by default) and
    :attr:`ScoreBatch.fallback_reason` says so; the scorer never raises because of the model.

    Sanity checks on valid answers (each a fallback reason, see the module docstring): a call
    that gave every one of its ``>= 3`` turns the same score falls back, and so do the scores of
    a call that ends a run of 6 identical user-turn scores over several calls; while the rank agreement
    (Spearman) with the heuristic over the last ``agreement_window`` user turns is below
    ``min_rank_agreement`` the model's scores are not used; a turn with a hard signal that the
    model scores below both the heuristic and ``key_frame_threshold`` gets the heuristic's score. Rejected answers are not cached.

    Structured output uses ``method="function_calling"`` (tool calls) or ``"json_mode"`` (JSON
    in the reply, ``response_format=json_object`` on OpenAI-compatible servers), both with an
    explicit ``max_tokens``; the default ``json_schema`` method of ``ChatOpenAI`` is avoided
    because local OpenAI-compatible servers reject it.

    Args:
        chat_model: A LangChain chat model, e.g. ``ChatOpenAI(model="gpt-4o-mini")``.
        method: ``"function_calling"`` (default) or ``"json_mode"``.
        batch_size: Turns per model call.
        max_tokens: Completion budget per call.
        cache_size: Scores kept in the LRU cache (0 disables it).
        key_frame_threshold: Importance at or above which a turn is a key frame.
        fallback: Scorer used when the model fails (default :class:`HeuristicImportanceScorer`).
        model_kwargs: Extra call arguments bound to the model, replacing the automatic ones
            (``extra_body={"max_tokens": ...}`` for OpenAI-style models, ``max_tokens=...`` else).
        policy: Deadline per call, retries and backoff as one
            :class:`~hybrid_memory.llm_call.LLMCallPolicy` (shareable between components; default
            ``LLMCallPolicy()``: 30 s, 2 retries, 0.5 s doubling).
        min_rank_agreement: Spearman correlation with the heuristic below which the model is
            not trusted (``None`` disables the check).
        agreement_window: User turns in the rolling agreement window; the check starts once
            half of it is filled.
        sanity_checks: ``False`` trusts every valid answer (no degenerate, agreement or floor
            check): for measuring the model itself, not for production.

    Example:
        >>> from langchain_core.language_models import FakeListChatModel
        >>> llm = FakeListChatModel(responses=['{"scores": [{"index": 0, "score": 10}, {"index": 1, "score": 1}]}'])
        >>> s = LLMImportanceScorer(llm, method="json_mode")
        >>> b = s.score(["记住：我对花生过敏", "哈哈"])
        >>> [x.importance for x in b.items], b.fallback_reason
        ([1.0, 0.0], None)
    """

    name = "llm"
    #: Refine ``add_turn`` scores in the background instead of scoring on the caller's thread.
    background = True

    def __init__(
        self,
        chat_model: Any,
        *,
        method: StructuredMethod = "function_calling",
        batch_size: int = 8,
        max_tokens: int = 400,
        cache_size: int = 10_000,
        key_frame_threshold: float = 0.7,
        fallback: ImportanceScorer | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        policy: LLMCallPolicy | None = None,
        min_rank_agreement: float | None = 0.2,
        agreement_window: int = 48,
        sanity_checks: bool = True,
    ) -> None:
        if batch_size < 1 or cache_size < 0:
            raise ConfigurationError("batch_size must be >= 1 and cache_size >= 0")
        if agreement_window < 4:
            raise ConfigurationError("agreement_window must be >= 4")
        self.policy = policy if policy is not None else LLMCallPolicy()
        self._caller = StructuredCaller(
            chat_model,
            schema=ImportanceScores,
            method=method,
            max_tokens=max_tokens,
            policy=self.policy,
            model_kwargs=model_kwargs,
            coerce=_coerce_scores,
        )
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.key_frame_threshold = key_frame_threshold
        self._rules = HeuristicImportanceScorer(key_frame_threshold=key_frame_threshold)
        self.fallback: ImportanceScorer = fallback if fallback is not None else self._rules
        self._cache: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self.calls = 0
        self.min_rank_agreement = min_rank_agreement
        self.sanity_checks = sanity_checks
        #: Recent (heuristic, model) score pairs of user turns, for the rank-agreement check.
        self._agreement: deque[tuple[float, float]] = deque(maxlen=agreement_window)

    # ---------------------------------------------------------------- cache
    def _cached(self, key: str) -> float | None:
        with self._lock:
            v = self._cache.get(key)
            if v is not None:
                self._cache.move_to_end(key)
            return v

    def _store(self, key: str, value: float) -> None:
        if self.cache_size == 0:
            return
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        """Drop every cached score."""
        with self._lock:
            self._cache.clear()

    def forget_texts(self, texts: Iterable[str]) -> int:
        """Drop the cached scores of ``texts`` under every role; return how many were cached.

        ``HybridMemory.forget``, ``forget_turn`` and ``edit`` call it, so a forgotten turn leaves no key (a
        hash of its text, which a guess could be checked against) behind in this process.

        Example:
            >>> from langchain_core.language_models import FakeListChatModel
            >>> model = FakeListChatModel(responses=['{"scores": [{"index": 0, "score": 9}]}'])
            >>> s = LLMImportanceScorer(model, method="json_mode")
            >>> s.score(["My locker code is 7731"]).items[0].importance > 0.8
            True
            >>> s.forget_texts(["My locker code is 7731"]), s.forget_texts(["My locker code is 7731"])
            (1, 0)
        """
        keys = {content_key(t, role) for t in texts for role in get_args(Role)}
        with self._lock:
            return sum(self._cache.pop(k, None) is not None for k in keys)

    # ---------------------------------------------------------------- prompting
    @staticmethod
    def messages(texts: Sequence[str], roles: Sequence[str]) -> list[tuple[str, str]]:
        """The chat messages sent for one batch (system rubric + numbered turns)."""
        lines = [f"[{i}] {r}: {' '.join(t.split())}" for i, (t, r) in enumerate(zip(texts, roles, strict=True))]
        return [("system", _SYSTEM_PROMPT), ("human", "Turns:\n" + "\n".join(lines))]

    def _hard_signal(self, text: str, role: str) -> str | None:
        """The hard signal of a user turn that no model score may go below (``None``: none)."""
        if role != "user":
            return None
        f = self._rules.features(text.strip(), role)
        if f["remember"]:
            return "explicit remember"
        if f["health"]:
            return "health or safety"
        if f["constraint"] and not (f["question"] or f["request"]):
            return "constraint"
        return None

    def _agreement_note(self, fresh: list[tuple[float, float]]) -> str | None:
        """Add this call's (heuristic, model) pairs to the window; a note when agreement is too low."""
        with self._lock:
            self._agreement.extend(fresh)
            pairs = list(self._agreement)
        recent = [b for _, b in pairs[-_DEGENERATE_RUN:]]
        if fresh and len(recent) == _DEGENERATE_RUN and len(set(recent)) == 1:  # across small calls too
            return f"degenerate answers: the model's last {_DEGENERATE_RUN} user-turn scores are all the same"
        if self.min_rank_agreement is None:
            return None
        if len(pairs) < max(4, (self._agreement.maxlen or 0) // 2):
            return None
        rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
        if rho >= self.min_rank_agreement:
            return None
        return (
            f"rank agreement with the heuristic {rho:.2f} < {self.min_rank_agreement:g} "
            f"over the last {len(pairs)} user turns"
        )

    def _finish(
        self,
        texts: list[str],
        roles: list[str],
        imps: list[float | None],
        stats: dict[str, int],
        notes: list[str],
        fresh: set[int],
    ) -> ScoreBatch:
        rules = [self._rules.score_one(t, r) for t, r in zip(texts, roles, strict=True)]
        pairs = [(rules[i].importance, v) for i in sorted(fresh) if roles[i] == "user" and (v := imps[i]) is not None]
        distrust = self._agreement_note(pairs) if self.sanity_checks else None
        if distrust is not None:
            notes.append(distrust)
            for i in fresh:
                imps[i] = None
        for i in fresh:
            v = imps[i]
            if v is not None:
                self._store(content_key(texts[i], roles[i]), v)
        missing = [i for i, v in enumerate(imps) if v is None]
        fb_items: dict[int, ScoredText] = {}
        if missing:
            fb = self.fallback.score([texts[i] for i in missing], roles=[roles[i] for i in missing])
            fb_items = dict(zip(missing, fb.items, strict=True))
        fb_note = f"scored by {self.fallback.name}: " + "; ".join(notes) if missing else None
        items: list[ScoredText] = []
        floored: list[str] = []
        for i, (t, r) in enumerate(zip(texts, roles, strict=True)):
            imp = imps[i]
            if imp is None:
                item = fb_items[i]
                items.append(ScoredText(item.importance, item.key_frame_reason, item.category, fb_note))
                continue
            rule = rules[i]
            note: str | None = None
            # A contradiction, not noise: the model would not even keep the turn a key frame.
            contradicts = self.sanity_checks and imp < min(rule.importance, self.key_frame_threshold)
            signal = self._hard_signal(t, r) if contradicts else None
            if signal is not None:
                note = (
                    f"hard signal ({signal}): model score {imp:.2f} raised to the heuristic floor {rule.importance:.2f}"
                )
                floored.append(signal)
                imp = rule.importance
            reason: str | None
            if rule.key_frame_reason == "remember":
                reason = "remember"
            elif imp >= self.key_frame_threshold:
                reason = "importance"
            elif rule.key_frame_reason in ("preference", "constraint", "goal") and imp >= 0.5:
                reason = rule.key_frame_reason
            else:
                reason = None
            items.append(ScoredText(imp, reason, rule.category, note))
        reasons: list[str] = []
        if missing:
            reasons.append(f"{len(missing)} of {len(texts)} turn(s) {fb_note}")
        if floored:
            reasons.append(
                f"{len(floored)} of {len(texts)} turn(s) raised to the heuristic floor (hard signal: "
                + ", ".join(dict.fromkeys(floored))
                + ")"
            )
        details = {k: str(v) for k, v in stats.items()}
        details["fallback"] = str(len(missing) + len(floored))
        details["floored"] = str(len(floored))
        return ScoreBatch(items, scorer=self.name, fallback_reason="; ".join(reasons) or None, details=details)

    def _apply(
        self,
        chunk: list[int],
        texts: list[str],
        roles: list[str],
        parsed: BaseModel,
        imps: list[float | None],
        fresh: set[int],
    ) -> str | None:
        assert isinstance(parsed, ImportanceScores)
        n = len(chunk)
        # Some models number from 1: shift a complete 1..n answer.
        shift = 1 if sorted(x.index for x in parsed.scores) == list(range(1, n + 1)) else 0
        got: dict[int, int] = {}
        for x in parsed.scores:
            j = x.index - shift
            if 0 <= j < n and 1 <= x.score <= 10:
                got[j] = x.score
        if self.sanity_checks and len(got) >= 3 and len(set(got.values())) == 1:
            return f"degenerate answer: the model gave all {len(got)} turns of a call the same score ({next(iter(got.values()))}/10)"
        for j, i in enumerate(chunk):
            if j in got:
                imps[i] = round((got[j] - 1) / 9.0, 4)
                fresh.add(i)
        lost = len(chunk) - len(got)
        return f"model returned no valid score for {lost} of {len(chunk)} turn(s)" if lost else None

    def _plan(
        self, texts: Sequence[str], roles: Sequence[str] | None
    ) -> tuple[list[str], list[str], list[float | None], list[list[int]], dict[str, int]]:
        items = list(texts)
        rs = _check_roles(items, roles)
        imps: list[float | None] = [None] * len(items)
        stats = {"cached": 0, "llm_calls": 0, "attempts": 0}
        todo: list[int] = []
        for i, (t, r) in enumerate(zip(items, rs, strict=True)):
            hit = self._cached(content_key(t, r))
            if hit is not None:
                imps[i] = hit
                stats["cached"] += 1
            elif not t.strip() or _PLEASANTRY.match(t.strip()):
                imps[i] = 0.0
            else:
                todo.append(i)
        chunks = [todo[k : k + self.batch_size] for k in range(0, len(todo), self.batch_size)]
        return items, rs, imps, chunks, stats

    def score(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Score ``texts``; failures fall back per batch and are reported, never raised."""
        items, rs, imps, chunks, stats = self._plan(texts, roles)
        notes: list[str] = []
        fresh: set[int] = set()
        for chunk in chunks:
            stats["llm_calls"] += 1
            self.calls += 1
            try:
                parsed, attempts = self._caller.call(self.messages([items[i] for i in chunk], [rs[i] for i in chunk]))
            except ScoringError as exc:
                stats["attempts"] += self.policy.attempts
                notes.append(f"model call failed: {exc}")
                continue
            stats["attempts"] += attempts
            lost = self._apply(chunk, items, rs, parsed, imps, fresh)
            if lost:
                notes.append(lost)
        return self._finish(items, rs, imps, stats, notes, fresh)

    async def ascore(self, texts: Sequence[str], *, roles: Sequence[str] | None = None) -> ScoreBatch:
        """Async twin of :meth:`score` (native ``ainvoke``)."""
        items, rs, imps, chunks, stats = self._plan(texts, roles)
        notes: list[str] = []
        fresh: set[int] = set()
        for chunk in chunks:
            stats["llm_calls"] += 1
            self.calls += 1
            try:
                parsed, attempts = await self._caller.acall(
                    self.messages([items[i] for i in chunk], [rs[i] for i in chunk])
                )
            except ScoringError as exc:
                stats["attempts"] += self.policy.attempts
                notes.append(f"model call failed: {exc}")
                continue
            stats["attempts"] += attempts
            lost = self._apply(chunk, items, rs, parsed, imps, fresh)
            if lost:
                notes.append(lost)
        return await asyncio.to_thread(self._finish, items, rs, imps, stats, notes, fresh)
