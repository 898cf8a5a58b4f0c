"""The search-context length study: the live contexts it builds, its runner hook, its report."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from benchmarks import context_cap
from benchmarks.context_cap import (
    SECTION_END,
    SECTION_START,
    WHOLE,
    assistant_replies,
    contexts,
    experiments_section,
    markdown,
    name_of,
)
from benchmarks.harness import runner
from benchmarks.harness.datasets import Doc, Group, load_longmemeval
from benchmarks.rerank_cv import cross_validate

ENTRY = {
    "question_id": "q1",
    "question": "What did I paint?",
    "answer": "the bookshelf",
    "question_type": "single-session-user",
    "question_date": "2023/05/30 (Tue) 10:00",
    "haystack_session_ids": ["s1"],
    "haystack_dates": ["2023/05/20 (Sat) 09:00"],
    "answer_session_ids": ["s1"],
    "haystack_sessions": [
        [
            {"role": "user", "content": "Any tips for painting furniture?"},
            {"role": "assistant", "content": "Sand it first. What are you painting?"},
            {"role": "user", "content": "The old bookshelf, blue.", "has_answer": True},
        ]
    ],
}


def test_the_live_context_of_a_user_turn_is_the_reply_before_it(tmp_path: Path) -> None:
    path = tmp_path / "lme.json.gz"
    path.write_bytes(gzip.compress(json.dumps([ENTRY]).encode()))
    replies = assistant_replies(path)
    assert replies == {("q1", "s1_1"): "", ("q1", "s1_3"): "Sand it first. What are you painting?"}
    # the document ids are the loader's own, so every user turn the runner indexes has its reply
    (group,) = load_longmemeval(path).groups
    assert {("q1", d.id) for d in group.docs} == set(replies)


def test_the_hook_replaces_the_runners_contexts_and_puts_them_back() -> None:
    g = Group(id="g", docs=(Doc("a", "one two three", session_id="s"), Doc("b", "four", session_id="s")), questions=())
    saved = runner.previous_turns
    with contexts(lambda group: ["X"] * len(group.docs)):
        assert runner.previous_turns(g, 45) == ["X", "X"]
        assert context_cap.previous_turns(g, 2) == ["", "two three"]  # the study still reaches the real one
    assert runner.previous_turns is saved and runner.previous_turns(g) == ["", "one two three"]


def _row(head: float, ndcg: float, r1: float = 0.5) -> dict[str, float]:
    return {"headline": head, "ndcg@10": ndcg, "recall@1": r1, "session_recall_all@5": head}


def test_the_report_names_the_default_and_what_the_live_context_gains() -> None:
    default = name_of(45)
    assert default == "45 words (default)" and name_of(None) == WHOLE and name_of(10) == "10 words"
    dev = {
        WHOLE: {d: _row(0.9, 0.8) for d in ("locomo", "longmemeval", "memorybank")},
        default: {d: _row(0.9, 0.81) for d in ("locomo", "longmemeval", "memorybank")},
    }
    live: dict[str, Any] = {
        WHOLE: {**_row(0.9, 0.76, 0.35), "session_recall_all@10": 0.97, "recall@5": 0.8, "recall@10": 0.9},
        default: {**_row(0.9, 0.82, 0.41), "session_recall_all@10": 0.97, "recall@5": 0.9, "recall@10": 0.95},
    }
    res = {
        "dev": dev,
        "live": live,
        "cv": cross_validate({n: {d: v[d]["headline"] for d in v} for n, v in dev.items()}, WHOLE),
    }
    text = markdown(res)
    assert "| 45 words (default) | 0.900 | 0.900 | 0.900 |" in text
    assert "nDCG@10 0.760 -> 0.820 (+0.060)" in text and "cannot tell a cap from the whole turn" in text
    section = experiments_section(res)
    assert section.startswith(SECTION_START) and section.endswith(SECTION_END)
