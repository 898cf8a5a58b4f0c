"""Date-aware query analysis: the parser, and what ``recall`` does with the periods it finds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore, MemoryFilter
from hybrid_memory.errors import InvalidInputError
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.text.temporal import TimeWindow, find_time_windows

# Sunday 7 May 2023, afternoon (UTC).
NOW = datetime(2023, 5, 7, 15, 30, tzinfo=timezone.utc)


def _days(text: str, now: datetime = NOW) -> list[tuple[str, str]]:
    return [
        (w.start.date().isoformat(), (w.end - timedelta(days=1)).date().isoformat())
        for w in find_time_windows(text, now)
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我曾经在5月2日提到过我去了博物馆", [("2023-05-02", "2023-05-02")]),
        ("在4月27号这天，我在公园里跑了多久？", [("2023-04-27", "2023-04-27")]),
        ("五月二日那天呢", [("2023-05-02", "2023-05-02")]),
        ("12月30日我们聊了什么", [("2022-12-30", "2022-12-30")]),  # no year, in the future: last year's
        ("2021年3月5日", [("2021-03-05", "2021-03-05")]),
        ("2023年4月", [("2023-04-01", "2023-04-30")]),
        ("十二月份的计划", [("2022-12-01", "2022-12-31")]),
        ("2022年我去了哪里", [("2022-01-01", "2022-12-31")]),
        ("昨天", [("2023-05-06", "2023-05-06")]),
        ("前天和今天", [("2023-05-05", "2023-05-05"), ("2023-05-07", "2023-05-07")]),
        ("上周我做了什么菜", [("2023-04-24", "2023-04-30")]),
        ("上上周", [("2023-04-17", "2023-04-23")]),
        ("这周", [("2023-05-01", "2023-05-07")]),
        ("上周三", [("2023-04-26", "2023-04-26")]),
        ("上个月", [("2023-04-01", "2023-04-30")]),
        ("去年", [("2022-01-01", "2022-12-31")]),
        ("3天前", [("2023-05-03", "2023-05-05")]),  # a day of slack either side
        ("两个月前", [("2023-03-01", "2023-03-31")]),
        ("2023-05-02", [("2023-05-02", "2023-05-02")]),
        ("on 2023/5/2", [("2023-05-02", "2023-05-02")]),
        ("What did I say on May 2nd?", [("2023-05-02", "2023-05-02")]),
        ("May 2, 2022", [("2022-05-02", "2022-05-02")]),
        ("the 8th of May", [("2022-05-08", "2022-05-08")]),  # tomorrow's date: the last one that happened
        ("8 May 2023", [("2023-05-08", "2023-05-08")]),  # an explicit year is kept as given
        ("in May", [("2023-05-01", "2023-05-31")]),
        ("June 2022", [("2022-06-01", "2022-06-30")]),
        ("in 2021", [("2021-01-01", "2021-12-31")]),
        ("yesterday", [("2023-05-06", "2023-05-06")]),
        ("the day before yesterday", [("2023-05-05", "2023-05-05")]),
        ("last week", [("2023-04-24", "2023-04-30")]),
        ("this week", [("2023-05-01", "2023-05-07")]),
        ("last weekend", [("2023-05-06", "2023-05-07")]),
        ("last month", [("2023-04-01", "2023-04-30")]),
        ("last year", [("2022-01-01", "2022-12-31")]),
        ("two weeks ago", [("2023-04-17", "2023-04-23")]),
        ("3 days ago", [("2023-05-03", "2023-05-05")]),
        ("last Sunday", [("2023-04-30", "2023-04-30")]),  # said on a Sunday: a week ago
        ("last Monday", [("2023-05-01", "2023-05-01")]),
        # Spans up to today: N units back through today.
        ("How many times did I bake in the past two weeks?", [("2023-04-23", "2023-05-07")]),
        ("the last 3 days", [("2023-05-04", "2023-05-07")]),
        ("over the last few weeks", [("2023-04-16", "2023-05-07")]),
        ("the past couple of months", [("2023-03-07", "2023-05-07")]),
        ("in the past week", [("2023-04-30", "2023-05-07")]),  # the last seven days, not last week
        ("this past week", [("2023-04-30", "2023-05-07")]),
        ("the past year", [("2022-05-07", "2023-05-07")]),
        ("最近两周我做了几次饭", [("2023-04-23", "2023-05-07")]),
        ("过去三天", [("2023-05-04", "2023-05-07")]),
        ("近三个月", [("2023-02-07", "2023-05-07")]),
        ("最近几天", [("2023-05-04", "2023-05-07")]),
        ("过去的一年", [("2022-05-07", "2023-05-07")]),
        ("近两周前", [("2023-04-17", "2023-04-23")]),  # "two weeks ago", not a span
        ("这两天", [("2023-05-05", "2023-05-07")]),
        ("这几天我在忙什么", [("2023-05-04", "2023-05-07")]),
        # 几 ("a few") counts 3, as "a few" does in English.
        ("前几天我去了哪里", [("2023-05-03", "2023-05-05")]),
        ("几天前", [("2023-05-03", "2023-05-05")]),
        ("a few days ago", [("2023-05-03", "2023-05-05")]),
        ("前两天", [("2023-05-04", "2023-05-06")]),
        ("几个月前", [("2023-02-01", "2023-02-28")]),
    ],
)
def test_time_expressions(text: str, expected: list[tuple[str, str]]) -> None:
    assert _days(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "What is my favourite tea?",
        "I may go there",  # "may" the verb
        "We may 2 go",
        "my 3 cats",
        "room 2023",  # a bare number is not a year
        "我喜欢喝乌龙茶",
        "最近我在忙什么",  # "recently" without a length
        "the last two days of the trip",  # a span of something else, not of the calendar
        "",
    ],
)
def test_no_time_named(text: str) -> None:
    assert find_time_windows(text, NOW) == []


def test_windows_are_utc_half_open_and_keep_their_words() -> None:
    (w,) = find_time_windows("我在5月2号买了连衣裙", NOW)
    assert w.text == "5月2号"
    assert w.start == datetime(2023, 5, 2, tzinfo=timezone.utc) and w.end == datetime(2023, 5, 3, tzinfo=timezone.utc)
    assert datetime(2023, 5, 2, 23, 59, tzinfo=timezone.utc) in w
    assert datetime(2023, 5, 3, tzinfo=timezone.utc) not in w
    assert "2023-05-02" not in w  # only datetimes are inside


def test_spans_clamp_to_the_end_of_a_shorter_month() -> None:
    assert _days("the past month", datetime(2023, 3, 31, tzinfo=timezone.utc)) == [("2023-02-28", "2023-03-31")]
    assert _days("the past year", datetime(2024, 2, 29, tzinfo=timezone.utc)) == [("2023-02-28", "2024-02-29")]


def test_now_in_another_zone_is_read_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    # 01:00 on 8 May in Tokyo is still 7 May in UTC: "yesterday" is 6 May.
    assert _days("yesterday", datetime(2023, 5, 8, 1, 0, tzinfo=tokyo)) == [("2023-05-06", "2023-05-06")]


def test_naive_now_is_a_typed_error() -> None:
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        find_time_windows("yesterday", datetime(2023, 5, 7))


def test_impossible_dates_are_ignored() -> None:
    assert find_time_windows("2月30日", NOW) == []
    assert find_time_windows("13月份", NOW) == []


# -- recall -----------------------------------------------------------------------------------


def _diary(config: HybridMemoryConfig | None = None) -> HybridMemory:
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=config, clock=lambda: NOW)
    days = {
        1: "今天去博物馆看了恐龙化石展览",
        2: "今天去博物馆看了印象派画展",
        3: "今天去博物馆看了青铜器展览",
        4: "今天在公园跑步跑了五公里",
    }
    mem.remember_many(
        "u",
        [{"content": text, "timestamp": datetime(2023, 5, d, 20, tzinfo=timezone.utc)} for d, text in days.items()],
    )
    return mem


def test_recall_favours_the_day_the_query_names() -> None:
    mem = _diary()
    try:
        hits = mem.recall("我5月2日在博物馆看了什么展览？", user_id="u", k=3, now=NOW)
        assert hits[0].content == "今天去博物馆看了印象派画展"
        assert hits[0].time_match == 1.0 and all(h.time_match == 0.0 for h in hits[1:])
        assert hits[0].components()["time_match"] == 1.0
        undated = mem.recall("我在博物馆看了什么展览？", user_id="u", k=3, now=NOW)
        assert all(h.time_match == 0.0 for h in undated)
    finally:
        mem.close()


def test_recall_favours_the_span_up_to_today_the_query_names() -> None:
    mem = _diary()
    try:
        # Asked on 7 May: the last four days are 3-7 May, so the visits of 1 and 2 May fall outside.
        hits = mem.recall("最近四天我去博物馆看了什么展览？", user_id="u", k=4, now=NOW)
        assert hits[0].content == "今天去博物馆看了青铜器展览" and hits[0].time_match == 1.0
        museum = [h for h in hits if "博物馆" in h.content]
        assert [h.time_match for h in museum] == [1.0, 0.0, 0.0]
    finally:
        mem.close()


@pytest.mark.parametrize("drop", [True, False])
def test_the_keyword_leg_searches_without_the_periods_words(drop: bool) -> None:
    # "最近四天" is a window (3-7 May); its "天" also matches the "今天" every diary entry starts with.
    mem = _diary(HybridMemoryConfig(retrieval={"drop_period_words": drop}))
    try:
        hits = {h.content: h for h in mem.recall("最近四天我去博物馆看了什么展览？", user_id="u", k=4, now=NOW)}
        run = hits["今天在公园跑步跑了五公里"]  # in the window, no word of the question but the period's
        assert run.time_match == 1.0
        if drop:
            assert run.keyword_score is None and run.relevance == 0.0
        else:
            assert run.keyword_score is not None and run.keyword_score > 0.0
        # the question's other words still match, and the vector leg still embeds the whole question
        assert all(h.keyword_score for c, h in hits.items() if "博物馆" in c)
        q = mem.embedder.embed_query("最近四天我去博物馆看了什么展览？")
        stored = mem.store.get_vectors("u", [run.id])[run.id]
        assert run.vector_similarity == pytest.approx(float(np.dot(q, stored)), abs=1e-5)
    finally:
        mem.close()


def test_the_named_period_is_searched_even_beyond_the_candidates() -> None:
    # One candidate only: without period analysis the single candidate is another day's visit;
    # the period search brings the visit of 3 May, which then wins on its time match.
    query = "5月3日 博物馆 展览"
    off = _diary(HybridMemoryConfig(retrieval={"candidates": 1, "time_windows": False}))
    on = _diary(HybridMemoryConfig(retrieval={"candidates": 1}))
    try:
        before = off.recall(query, user_id="u", k=1, now=NOW)
        assert before and before[0].content != "今天去博物馆看了青铜器展览"
        after = on.recall(query, user_id="u", k=1, now=NOW)
        assert [h.content for h in after] == ["今天去博物馆看了青铜器展览"] and after[0].time_match == 1.0
    finally:
        off.close()
        on.close()


def test_time_windows_can_be_turned_off_and_an_explicit_range_wins() -> None:
    mem = _diary(HybridMemoryConfig(retrieval={"time_windows": False}))
    try:
        hits = mem.recall("我5月2日在博物馆看了什么展览？", user_id="u", k=3, now=NOW)
        assert all(h.time_match == 0.0 for h in hits)
    finally:
        mem.close()
    mem = _diary()
    try:
        only_may_3 = MemoryFilter(
            since=datetime(2023, 5, 3, tzinfo=timezone.utc), until=datetime(2023, 5, 4, tzinfo=timezone.utc)
        )
        hits = mem.recall("我5月2日在博物馆看了什么展览？", user_id="u", k=3, now=NOW, filter=only_may_3)
        assert [h.content for h in hits] == ["今天去博物馆看了青铜器展览"] and hits[0].time_match == 0.0
    finally:
        mem.close()


def test_period_search_never_crosses_users() -> None:
    mem = _diary()
    try:
        mem.remember("other", "5月2日 博物馆 秘密", timestamp=datetime(2023, 5, 2, 9, tzinfo=timezone.utc))
        hits = mem.recall("5月2日 博物馆", user_id="u", k=10, now=NOW)
        assert hits and all(h.record.user_id == "u" for h in hits)
    finally:
        mem.close()


def test_window_order_follows_the_text() -> None:
    ws = find_time_windows("yesterday, then 5月2日", NOW)
    assert [w.text for w in ws] == ["yesterday", "5月2日"]
    assert all(isinstance(w, TimeWindow) for w in ws)
