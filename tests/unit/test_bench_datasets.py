"""Dataset loaders on tiny synthetic files written in each dataset's original schema."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from benchmarks.harness.datasets import (
    limit_questions,
    load_json,
    load_locomo,
    load_longmemeval,
    load_memorybank,
    normalize_locomo_evidence,
    parse_locomo_datetime,
    parse_longmemeval_datetime,
)
from hybrid_memory.errors import InvalidInputError

UTC = timezone.utc

LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                {
                    "speaker": "Bo",
                    "dia_id": "D1:2",
                    "text": "Look at this!",
                    "img_url": ["http://example.invalid/x.jpg"],
                    "blip_caption": "a photo of a red bike",
                    "query": "red bike",
                },
            ],
            "session_2_date_time": "10:05 am on 30 June, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "The cat is named Tom."}],
            # a date without a session list must not create a session
            "session_3_date_time": "9:00 am on 1 July, 2023",
        },
        "qa": [
            {"question": "What pet?", "answer": "cat", "evidence": ["D1:1"], "category": 4},
            {"question": "Name and bike?", "answer": "Tom", "evidence": ["D1:2; D2:1"], "category": 1},
            {"question": "Padded", "answer": "x", "evidence": ["D:2:01"], "category": 2},
            {"question": "No evidence", "answer": "x", "evidence": [], "category": 3},
            {"question": "Broken", "answer": "x", "evidence": ["D"], "category": 3},
            {"question": "Missing turn", "answer": "x", "evidence": ["D9:9"], "category": 3},
            {"question": "Adversarial", "adversarial_answer": "dog", "evidence": ["D1:1"], "category": 5},
        ],
    }
]


def _write(path: Path, obj: object, *, gz: bool = False) -> Path:
    raw = json.dumps(obj, ensure_ascii=False).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def test_parse_locomo_datetime() -> None:
    assert parse_locomo_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_locomo_datetime("12:09 am on 1 January, 2024") == datetime(2024, 1, 1, 0, 9, tzinfo=UTC)
    assert parse_locomo_datetime("12:30 pm on 15 Sept, 2023") == datetime(2023, 9, 15, 12, 30, tzinfo=UTC)
    with pytest.raises(InvalidInputError):
        parse_locomo_datetime("yesterday")


def test_normalize_locomo_evidence() -> None:
    assert normalize_locomo_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D", 7, "D8:6"]) == [
        "D8:6",
        "D9:17",
        "D11:26",
        "D30:5",
    ]


def test_load_locomo(tmp_path: Path) -> None:
    ds = load_locomo(_write(tmp_path / "locomo10_tiny.json", LOCOMO))
    assert ds.name == "locomo"
    (g,) = ds.groups
    assert g.id == "conv-x"
    assert [d.id for d in g.docs] == ["D1:1", "D1:2", "D2:1"]
    assert g.docs[0].text == "Ann: I adopted a cat."
    assert g.docs[1].text == "Bo: Look at this! [image: a photo of a red bike]"
    assert g.docs[0].timestamp == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert g.docs[2].timestamp == datetime(2023, 6, 30, 10, 5, tzinfo=UTC)
    assert g.docs[2].session_id == "session_2"
    assert [q.text for q in g.questions] == ["What pet?", "Name and bike?", "Padded"]
    assert g.questions[1].gold == {"D1:2", "D2:1"}
    assert g.questions[1].gold_sessions == {"session_1", "session_2"}
    assert g.questions[2].gold == {"D2:1"}
    assert g.questions[0].category == "4"
    assert [q.text for q in g.apart] == ["Adversarial"]
    assert g.apart[0].answer == "dog"
    assert ds.skipped["no_usable_evidence"] == 3
    assert ds.skipped["evidence_ids_not_in_conversation"] == 1
    assert g.now is not None and g.now > g.docs[-1].timestamp  # type: ignore[operator]


def test_load_locomo_rejects_other_formats(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="LoCoMo"):
        load_locomo(_write(tmp_path / "x.json", [{"question_id": "q"}]))
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_locomo(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        load_locomo(tmp_path / "bad.json")


LME = [
    {
        "question_id": "q1",
        "question_type": "multi-session",
        "question": "How many fish did I catch?",
        "question_date": "2023/12/06 (Wed) 11:18",
        "answer": 7,
        "answer_session_ids": ["answer_s1", "answer_s2"],
        "haystack_dates": [
            "2023/07/23 (Sun) 05:30",
            "2023/08/04 (Fri) 15:56",
            "2023/08/05 (Sat) 09:00",
            "2023/07/24 (Mon) 05:30",
        ],
        "haystack_session_ids": ["noise_1", "answer_s1", "answer_s2", "noise_1"],
        "haystack_sessions": [
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            [
                {"role": "user", "content": "I went fishing", "has_answer": False},
                {"role": "assistant", "content": "nice", "has_answer": False},
                {"role": "user", "content": "I caught 3 bass", "has_answer": True},
            ],
            [
                {"role": "user", "content": "", "has_answer": False},
                {"role": "user", "content": "More fishing talk", "has_answer": False},
                {"role": "assistant", "content": "You caught 4 more", "has_answer": True},
            ],
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
        ],
    },
    {
        "question_id": "q2_abs",
        "question_type": "temporal-reasoning",
        "question": "?",
        "question_date": "2023/12/06 (Wed) 11:18",
        "answer": "n/a",
        "answer_session_ids": ["answer_z"],
        "haystack_dates": ["2023/07/23 (Sun) 05:30"],
        "haystack_session_ids": ["answer_z"],
        "haystack_sessions": [[{"role": "user", "content": "x", "has_answer": True}]],
    },
    {
        "question_id": "q3",
        "question_type": "single-session-assistant",
        "question": "What did you say?",
        "question_date": "2023/12/06 (Wed) 11:18",
        "answer": "x",
        "answer_session_ids": ["answer_a"],
        "haystack_dates": ["2023/07/23 (Sun) 05:30"],
        "haystack_session_ids": ["answer_a"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "tell me", "has_answer": False},
                {"role": "assistant", "content": "x", "has_answer": True},
            ]
        ],
    },
]


@pytest.mark.parametrize("gz", [False, True])
def test_load_longmemeval(tmp_path: Path, gz: bool) -> None:
    name = "longmemeval_s_tiny.json.gz" if gz else "longmemeval_s_tiny.json"
    ds = load_longmemeval(_write(tmp_path / name, LME, gz=gz))
    (g,) = ds.groups
    assert g.id == "q1"
    assert [d.id for d in g.docs] == ["noise_1_1", "answer_s1_1", "answer_s1_3", "answer_s2_2"]
    assert g.docs[2].text == "I caught 3 bass"
    assert g.docs[1].timestamp == datetime(2023, 8, 4, 15, 56, tzinfo=UTC)
    (q,) = g.questions
    assert q.gold == {"answer_s1_3"}
    assert q.gold_sessions == {"answer_s1", "answer_s2"}
    assert q.category == "multi-session"
    assert q.answer == "7"
    assert g.now == datetime(2023, 12, 6, 11, 18, tzinfo=UTC)
    assert ds.skipped == {
        "abstention": 1,
        "no_user_side_gold": 1,
        "empty_user_turns": 1,
        "repeated_haystack_sessions": 1,
    }


def test_parse_longmemeval_datetime() -> None:
    assert parse_longmemeval_datetime("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21, tzinfo=UTC)
    assert parse_longmemeval_datetime("2023/05/20") == datetime(2023, 5, 20, tzinfo=UTC)
    assert parse_longmemeval_datetime("soon") is None


def test_load_json_detects_gzip_by_content(tmp_path: Path) -> None:
    assert load_json(_write(tmp_path / "plain_name.json", {"a": 1}, gz=True)) == {"a": 1}


BANK = {
    "小明": {
        "name": "小明",
        "summary": {},
        "personality": {},
        "overall_history": "",
        "history": {
            "2023-05-02": [
                {"query": "我喜欢吃苹果", "response": "苹果很健康！"},
                {"query": "推荐一本书", "response": "《百年孤独》"},
            ],
            "2023-04-30": [{"query": "你好", "response": "你好，小明"}],
        },
        "meta_information": {"name": "小明"},
    },
    "小红": {"name": "小红", "history": {"2023-05-01": [{"query": "我住在上海", "response": "上海很好"}]}},
}
LABELS = [
    {
        "user": "小明",
        "qid": "小明#0",
        "question": "我曾经在5月2日提到过喜欢吃什么？",
        "evidence": ["2023-05-02#0"],
        "answer": "苹果",
    },
    {
        "user": "小明",
        "qid": "小明#1",
        "question": "你推荐过什么书？",
        "evidence": ["2023-05-02#1", "2023-05-09#0"],
        "answer": "x",
    },
    {"user": "小红", "qid": "小红#0", "question": "我住在哪里？", "evidence": ["2023-05-01#0"], "answer": "上海"},
    {"user": "小刚", "qid": "小刚#0", "question": "?", "evidence": ["2023-05-01#0"], "answer": "?"},
]


def test_load_memorybank(tmp_path: Path) -> None:
    ds = load_memorybank(_write(tmp_path / "memory_bank_cn_tiny.json", BANK), _write(tmp_path / "labels.json", LABELS))
    assert [g.id for g in ds.groups] == ["小明", "小红"]
    g = ds.groups[0]
    assert [d.id for d in g.docs] == ["2023-04-30#0", "2023-05-02#0", "2023-05-02#1"]
    assert g.docs[1].text == "我喜欢吃苹果\n苹果很健康！"
    assert g.docs[1].timestamp == datetime(2023, 5, 2, tzinfo=UTC)
    assert [q.id for q in g.questions] == ["小明#0", "小明#1"]
    assert g.questions[0].category == "dated"
    assert g.questions[1].category == "undated"
    assert g.questions[1].gold == {"2023-05-02#1"}
    assert ds.skipped == {"evidence_ids_not_in_bank": 1, "labels_for_unknown_users": 1}
    assert ds.n_questions == 3


def test_limit_questions(tmp_path: Path) -> None:
    ds = load_memorybank(_write(tmp_path / "b.json", BANK), _write(tmp_path / "l.json", LABELS))
    one = limit_questions(ds, 1)
    assert one.n_questions == 1 and [g.id for g in one.groups] == ["小明"]
    three = limit_questions(ds, 3)
    assert three.n_questions == 3
    assert limit_questions(ds, None) is ds
    with pytest.raises(InvalidInputError):
        limit_questions(ds, 0)
