"""Time expressions in a query: "5月2日", "上周", "May 2nd", "last week", "3 days ago".

:func:`find_time_windows` turns the dates a query names into half-open UTC windows
``[start, end)``. :meth:`HybridMemory.recall <hybrid_memory.HybridMemory.recall>` uses them to
search the named period as well and to favour memories created inside it (date-aware query
analysis; ``retrieval.time_windows``, ``rerank.w_time``), and its keyword leg searches the query
without the words that named them (:func:`without_periods`; ``retrieval.drop_period_words``).
Pure functions, no IO.

Rules:

* Explicit dates: ``2023-05-02``, ``2023/5/2``, ``2023年5月2日``, ``5月2号``, ``五月二日``,
  ``May 2``, ``May 2nd, 2023``, ``2 May 2023``, ``the 2nd of May``; months: ``2023年5月``,
  ``May 2023``, ``in May``; years: ``2023年``, ``in 2023``.
* Relative: 今天/昨天/前天, 上周/本周/这周, 上个月/这个月, 去年/今年/前年, ``N天前``,
  ``N周前``, ``N个月前``, 几天前/前几天/前两天, 上周三; ``today``, ``yesterday``, ``the day before yesterday``,
  ``last night``, ``this/last week``, ``last weekend``, ``this/last month``, ``this/last year``,
  ``N days/weeks/months/years ago``, ``last Monday``.
* Spans up to today: ``最近N天``, ``过去两周``, ``近三个月``, ``最近几天``, ``这两天``; ``the past/last N
  days/weeks/months/years``, ``the last few days``, ``the past week/month/year``. They run from N
  units before today through today ("last week" is the calendar week before this one; "the past
  week" is the last seven days). A bare 最近 ("recently") names no period.
* A date without a year is the latest such date not after ``now``. Weeks start on Monday.
  Relative expressions resolve against ``now`` (the time of the question) in UTC.
* "May" counts as a month only when capitalised and next to a day, a year or "in/during/since
  /last/early/late" (it is also a modal verb).

Example:
    >>> from datetime import datetime, timezone
    >>> now = datetime(2023, 5, 7, 15, 0, tzinfo=timezone.utc)
    >>> [str(w) for w in find_time_windows("我曾经在5月2日提到过我去了博物馆", now)]
    ['2023-05-02..2023-05-03 (5月2日)']
    >>> [str(w) for w in find_time_windows("What did I cook last week?", now)]
    ['2023-04-24..2023-05-01 (last week)']
    >>> find_time_windows("What is my favourite tea?", now)
    []
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from hybrid_memory.errors import InvalidInputError

__all__ = ["TimeWindow", "find_time_windows", "without_periods"]


@dataclass(frozen=True, order=True)
class TimeWindow:
    """A period named by a query: ``start <= t < end`` (UTC).

    Attributes:
        start: First instant inside (inclusive, UTC).
        end: First instant after (exclusive, UTC).
        text: The words of the query that named it.
    """

    start: datetime
    end: datetime
    text: str = ""

    def __contains__(self, t: object) -> bool:
        return isinstance(t, datetime) and self.start <= t < self.end

    def __str__(self) -> str:
        return f"{self.start.date()}..{self.end.date()} ({self.text})"


_MONTHS = {
    name.lower(): i
    for i in range(1, 13)
    for name in (calendar.month_name[i], calendar.month_abbr[i], "sept" if i == 9 else calendar.month_abbr[i])
}
_MONTH_RE = (
    r"(?P<mon>Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_WEEKDAYS_EN = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_WEEKDAYS_ZH = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_ZH_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_EN_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
    "several": 3,
    "few": 3,
    "couple of": 2,
}
_ZH_NUM = r"[0-9]{1,4}|[零〇一二两三四五六七八九十]{1,3}"
_EN_NUM = r"\d{1,3}|a couple of|a few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"


# Every rule below needs one of these; a query without any is answered without running the rules.
_MAY_NAME_TIME = re.compile(
    r"[0-9天周月年号號日前今昨]|星期|礼拜|today|tonight|yesterday|ago|days?\b|week|month|year|night|morning|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday",
    re.IGNORECASE,
)
_MAY_NAME_MONTH = re.compile(r"Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec")


def _zh_int(s: str) -> int:
    """``"12"``, ``"十二"``, ``"二十"``, ``"三十一"`` → int."""
    if s.isdigit():
        return int(s)
    if "十" in s:
        head, _, tail = s.partition("十")
        tens = _ZH_DIGITS.get(head, 1) if head else 1
        return tens * 10 + (_ZH_DIGITS.get(tail, 0) if tail else 0)
    value = 0
    for ch in s:
        value = value * 10 + _ZH_DIGITS[ch]
    return value


def _zh_count(s: str) -> int:
    """A count as :func:`_zh_int` reads it; 几 ("a few") is 3, as "a few" is in English."""
    return 3 if s == "几" else _zh_int(s)


def _en_int(s: str) -> int:
    s = " ".join(s.lower().split())
    return int(s) if s.isdigit() else _EN_NUMBERS[s]


def _at(d: date) -> datetime:
    return datetime.combine(d, time(0), tzinfo=timezone.utc)


def _day(d: date, text: str) -> TimeWindow:
    return TimeWindow(_at(d), _at(d + timedelta(days=1)), text)


def _days(first: date, last: date, text: str) -> TimeWindow:
    return TimeWindow(_at(first), _at(last + timedelta(days=1)), text)


def _month(y: int, m: int, text: str) -> TimeWindow:
    last = calendar.monthrange(y, m)[1]
    return _days(date(y, m, 1), date(y, m, last), text)


def _year(y: int, text: str) -> TimeWindow:
    return _days(date(y, 1, 1), date(y, 12, 31), text)


def _add_months(y: int, m: int, delta: int) -> tuple[int, int]:
    n = y * 12 + (m - 1) + delta
    return n // 12, n % 12 + 1


def _week(today: date, weeks_back: int, text: str) -> TimeWindow:
    monday = today - timedelta(days=today.weekday()) - timedelta(weeks=weeks_back)
    return _days(monday, monday + timedelta(days=6), text)


def _span(today: date, n: int, unit: str, text: str) -> TimeWindow:
    """From ``n`` days, weeks (周, 星期, 礼拜), months or years before ``today`` through ``today``."""
    u = unit.lower()
    if u.startswith("day") or u == "天":
        return _days(today - timedelta(days=n), today, text)
    if u.startswith("week") or u in ("周", "期", "拜"):
        return _days(today - timedelta(weeks=n), today, text)
    y, m = _add_months(today.year, today.month, -n if u.startswith("month") or u == "月" else -12 * n)
    return _days(date(y, m, min(today.day, calendar.monthrange(y, m)[1])), today, text)


def _latest(today: date, m: int, d: int, y: int | None) -> date | None:
    """The date ``y-m-d``, or the latest ``m-d`` not after ``today`` when the year is missing."""
    try:
        if y is not None:
            return date(y, m, d)
        cand = date(today.year, m, d)
        return cand if cand <= today else date(today.year - 1, m, d)
    except ValueError:
        return None


def _latest_month(today: date, m: int) -> int:
    return today.year if m <= today.month else today.year - 1


class _Finder:
    def __init__(self, text: str, now: datetime) -> None:
        self.text = text
        self.today = now.astimezone(timezone.utc).date()
        self.taken: list[tuple[int, int]] = []
        self.found: list[tuple[int, TimeWindow]] = []

    def free(self, m: re.Match[str]) -> bool:
        a, b = m.span()
        return all(b <= s or a >= e for s, e in self.taken)

    def add(self, m: re.Match[str], w: TimeWindow | None) -> None:
        if w is None:
            return
        self.taken.append(m.span())
        self.found.append((m.start(), w))

    def scan(self, pattern: str, build: object, flags: int = 0) -> None:
        for m in re.finditer(pattern, self.text, flags):
            if self.free(m):
                self.add(m, build(m))  # type: ignore[operator]


def find_time_windows(text: str, now: datetime) -> list[TimeWindow]:
    """The periods ``text`` names, in the order they appear (UTC, half-open).

    Args:
        text: A query or message (Chinese, English or mixed).
        now: The time of the question (aware); relative expressions and dates without a year
            resolve against it.

    Returns:
        One window per expression (at most one per span of text; longest patterns first);
        empty when the text names no time.

    Raises:
        InvalidInputError: ``now`` is naive.

    Example:
        >>> from datetime import datetime, timezone
        >>> now = datetime(2023, 5, 7, tzinfo=timezone.utc)
        >>> [str(w) for w in find_time_windows("上周三和 May 2nd, 2022 呢？", now)]
        ['2023-04-26..2023-04-27 (上周三)', '2022-05-02..2022-05-03 (May 2nd, 2022)']
    """
    if now.tzinfo is None or now.tzinfo.utcoffset(now) is None:
        raise InvalidInputError("now must be timezone-aware (UTC)")
    if _MAY_NAME_TIME.search(text) is None and _MAY_NAME_MONTH.search(text) is None:
        return []
    f = _Finder(text, now)
    today = f.today

    def iso(m: re.Match[str]) -> TimeWindow | None:
        d = _latest(today, int(m["m"]), int(m["d"]), int(m["y"]))
        return _day(d, m[0]) if d else None

    f.scan(r"(?<!\d)(?P<y>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})(?!\d)", iso)

    # -- Chinese -----------------------------------------------------------------------------
    def zh_day(m: re.Match[str]) -> TimeWindow | None:
        y = int(m["y"]) if m["y"] else None
        d = _latest(today, _zh_int(m["m"]), _zh_int(m["d"]), y)
        return _day(d, m[0]) if d else None

    f.scan(rf"(?:(?P<y>\d{{4}})\s*年\s*)?(?P<m>{_ZH_NUM})\s*月\s*(?P<d>{_ZH_NUM})\s*[日号號]", zh_day)

    def zh_month(m: re.Match[str]) -> TimeWindow | None:
        mon = _zh_int(m["m"])
        if not 1 <= mon <= 12:
            return None
        y = int(m["y"]) if m["y"] else _latest_month(today, mon)
        return _month(y, mon, m[0])

    f.scan(rf"(?:(?P<y>\d{{4}})\s*年\s*)(?P<m>{_ZH_NUM})\s*月(?!份?\s*[0-9零〇一二两三四五六七八九十])", zh_month)
    f.scan(rf"(?P<y>)(?<![0-9零〇一二两三四五六七八九十个])(?P<m>{_ZH_NUM})\s*月份", zh_month)
    f.scan(r"(?P<y>\d{4})\s*年(?!\s*[0-9零〇一二两三四五六七八九十])", lambda m: _year(int(m["y"]), m[0]))

    def zh_week_day(m: re.Match[str]) -> TimeWindow:
        back = 1 if m["w"] in ("上", "上个") else 0
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
        return _day(monday + timedelta(days=_WEEKDAYS_ZH[m["d"]]), m[0])

    f.scan(r"(?P<w>上个?|这个?|本)(?:周|星期|礼拜)(?P<d>[一二三四五六日天])", zh_week_day)

    def zh_ago(m: re.Match[str]) -> TimeWindow | None:
        n = _zh_count(m["n"])
        unit = m["u"]
        if unit == "天":
            d = today - timedelta(days=n)
            return _days(d - timedelta(days=1), d + timedelta(days=1), m[0])
        if unit in ("周", "星期", "礼拜"):
            return _week(today, n, m[0])
        if unit in ("个月", "月"):
            y, mo = _add_months(today.year, today.month, -n)
            return _month(y, mo, m[0])
        return _year(today.year - n, m[0])

    f.scan(rf"(?P<n>{_ZH_NUM}|几)\s*(?P<u>天|个?星期|个?礼拜|周|个月|年)(?:以)?前", zh_ago)
    f.scan(r"前(?P<n>[几两])(?P<u>天)", zh_ago)  # 前几天 / 前两天: a few / a couple of days ago

    def zh_span(m: re.Match[str]) -> TimeWindow:
        return _span(today, _zh_count(m["n"]), m["u"][-1], m[0])

    f.scan(
        rf"(?:过去|最近|近)\s*的?\s*(?P<n>{_ZH_NUM}|几)\s*(?P<u>天|个?星期|个?礼拜|周|个月|年)(?!\s*(?:以)?前)", zh_span
    )
    f.scan(r"这(?P<n>[几两])(?P<u>天)", zh_span)  # 这几天 / 这两天: these last few days
    fixed_zh: list[tuple[str, TimeWindow]] = [
        ("大前天", _day(today - timedelta(days=3), "大前天")),
        ("前天", _day(today - timedelta(days=2), "前天")),
        ("昨天|昨日|昨晚", _day(today - timedelta(days=1), "昨天")),
        ("今天|今日|今晚", _day(today, "今天")),
        ("上上(?:个)?(?:周|星期|礼拜)", _week(today, 2, "上上周")),
        ("上(?:个)?(?:周|星期|礼拜)", _week(today, 1, "上周")),
        ("(?:这|本)(?:个)?(?:周|星期|礼拜)", _week(today, 0, "本周")),
        ("上(?:个)?月", _month(*_add_months(today.year, today.month, -1), "上个月")),
        ("(?:这|本)(?:个)?月", _month(today.year, today.month, "本月")),
        ("前年", _year(today.year - 2, "前年")),
        ("去年", _year(today.year - 1, "去年")),
        ("今年", _year(today.year, "今年")),
    ]
    for pattern, window in fixed_zh:
        f.scan(pattern, lambda m, w=window: TimeWindow(w.start, w.end, m[0]))

    # -- English -----------------------------------------------------------------------------
    def en_mdy(m: re.Match[str]) -> TimeWindow | None:
        d = _latest(today, _MONTHS[m["mon"].lower().rstrip(".")], int(m["d"]), int(m["y"]) if m["y"] else None)
        return _day(d, m[0]) if d else None

    ordinal = r"(?:st|nd|rd|th)?"
    f.scan(rf"\b{_MONTH_RE}\s+(?P<d>\d{{1,2}}){ordinal}\b(?:,?\s+(?P<y>\d{{4}})\b)?", en_mdy)
    f.scan(rf"\b(?:the\s+)?(?P<d>\d{{1,2}}){ordinal}\s+(?:of\s+)?{_MONTH_RE}(?:,?\s+(?P<y>\d{{4}})\b)?", en_mdy)

    def en_month(m: re.Match[str]) -> TimeWindow:
        mon = _MONTHS[m["mon"].lower().rstrip(".")]
        y = int(m["y"]) if m.groupdict().get("y") else _latest_month(today, mon)
        return _month(y, mon, m[0].strip())

    f.scan(rf"\b{_MONTH_RE}(?:\s+of)?,?\s+(?P<y>\d{{4}})\b", en_month)
    f.scan(rf"(?:\b(?:[Ii]n|[Dd]uring|[Ss]ince|[Ll]ast|[Ee]arly|[Ll]ate|[Mm]id-?)\s+){_MONTH_RE}\b", en_month)
    f.scan(
        r"\b(?:in|during|since|of|from)\s+(?:the\s+year\s+)?(?P<y>(?:19|20)\d{2})\b(?!\s*[-/])",
        lambda m: _year(int(m["y"]), m[0]),
        re.IGNORECASE,
    )

    def en_ago(m: re.Match[str]) -> TimeWindow:
        n = _en_int(m["n"])
        unit = m["u"].lower()
        if unit.startswith("day"):
            d = today - timedelta(days=n)
            return _days(d - timedelta(days=1), d + timedelta(days=1), m[0])
        if unit.startswith("week"):
            return _week(today, n, m[0])
        if unit.startswith("month"):
            return _month(*_add_months(today.year, today.month, -n), m[0])
        return _year(today.year - n, m[0])

    f.scan(rf"\b(?P<n>{_EN_NUM})\s+(?P<u>days?|weeks?|months?|years?)\s+ago\b", en_ago, re.IGNORECASE)

    def en_span(m: re.Match[str]) -> TimeWindow:
        return _span(today, _en_int(m["n"]) if m["n"] else 1, m["u"].lower(), m[0])

    f.scan(
        rf"\b(?:the\s+)?(?:past|last|previous)\s+(?P<n>{_EN_NUM}|few|couple of)\s+(?P<u>days|weeks|months|years)\b(?!\s+of\b)",
        en_span,
        re.IGNORECASE,
    )
    f.scan(r"\b(?:the\s+|this\s+)?past\s+(?P<n>)(?P<u>week|month|year)\b", en_span, re.IGNORECASE)

    def en_weekday(m: re.Match[str]) -> TimeWindow:
        wd = _WEEKDAYS_EN[m["d"].lower()]
        back = (today.weekday() - wd) % 7 or 7  # "last Monday" on a Monday is a week ago
        return _day(today - timedelta(days=back), m[0])

    days = "|".join(calendar.day_name)
    f.scan(rf"\b(?:last|this\s+past|on)\s+(?P<d>{days})\b", en_weekday, re.IGNORECASE)
    sat = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
    fixed_en: list[tuple[str, TimeWindow]] = [
        (r"\bthe\s+day\s+before\s+yesterday\b", _day(today - timedelta(days=2), "")),
        (r"\byesterday\b|\blast\s+night\b", _day(today - timedelta(days=1), "")),
        (r"\btoday\b|\btonight\b|\bthis\s+morning\b", _day(today, "")),
        (r"\blast\s+weekend\b|\bthis\s+past\s+weekend\b", _days(sat, sat + timedelta(days=1), "")),
        (r"\b(?:last|previous)\s+week\b", _week(today, 1, "")),
        (r"\bthis\s+week\b", _week(today, 0, "")),
        (r"\b(?:last|previous)\s+month\b", _month(*_add_months(today.year, today.month, -1), "")),
        (r"\bthis\s+month\b", _month(today.year, today.month, "")),
        (r"\blast\s+year\b", _year(today.year - 1, "")),
        (r"\bthis\s+year\b", _year(today.year, "")),
    ]
    for pattern, window in fixed_en:
        f.scan(pattern, lambda m, w=window: TimeWindow(w.start, w.end, m[0]), re.IGNORECASE)
    return [w for _, w in sorted(f.found, key=lambda t: t[0])]


def without_periods(text: str, windows: Sequence[TimeWindow]) -> str:
    """``text`` with the words that named each of ``windows`` replaced by a space.

    What the keyword leg of a recall searches once those periods are time windows: the windows
    already select and favour the memories created in them, while the words themselves ("past",
    "two", "weeks", "上周") would match any memory that happens to use them, and a relative
    expression inside a memory counts from when that memory was written, not from the question.

    Args:
        text: The query the windows were found in.
        windows: Periods :func:`find_time_windows` found in ``text``.

    Example:
        >>> now = datetime(2023, 5, 30, tzinfo=timezone.utc)
        >>> q = "How many times did I bake something in the past two weeks?"
        >>> without_periods(q, find_time_windows(q, now))
        'How many times did I bake something in  ?'
        >>> without_periods("我5月2日去了哪里？", find_time_windows("我5月2日去了哪里？", now))
        '我 去了哪里？'
    """
    for w in windows:
        if w.text:
            text = text.replace(w.text, " ", 1)
    return text
