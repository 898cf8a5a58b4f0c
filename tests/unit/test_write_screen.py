"""The screened cue regexes of the conflict judge find exactly what the original patterns find."""

from __future__ import annotations

import random
import re

import pytest

from hybrid_memory.text.vocabulary import CHANGE_DECLARED, PREFERENCE
from hybrid_memory.write import conflict
from hybrid_memory.write.screen import screened

# Fragments that start, end or break matches: cue words, case variants, case-folding specials
# (Kelvin sign, long s, dotted/dotless i), CJK cues, word characters that kill a \b.
_FRAGMENTS = [
    "not",
    "NOT",
    "Not",
    "no",
    "No longer",
    "never",
    "n't",
    "don't",
    "stopped",
    "quit",
    "hate",
    "dislike",
    "switched to",
    "moved to",
    "now I",
    "instead of",
    "any more",
    "prefer",
    "favourite",
    "love",
    "like",
    "can't stand",
    "every",
    "usually",
    "my sister",
    "our boss",
    "tea",
    "coffee",
    "I live",
    "my job",
    "不再",
    "不",
    "没有",
    "没问题",
    "讨厌",
    "改喝",
    "喜欢",
    "每天",
    "我妈妈",
    "小王",
    "咖啡",
    "住在",
    "在公司工作",
    "no worries",
    "not only",
    "can't wait",
    "cannot wait",
    "cant wait",
    "don't mention it",
    "dont worry",
    "不客气",
    "差不多",
    "忍不住",
    "没事",
    "Ann: ",
    "\u212a",
    "\u017f",
    "\u0130",
    "\u0131",
    "x",
    "_",
    "9",
    " ",
    ", ",
    "! ",
    "?",
    "'",
    "-",
    "题",
]


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def _unscreened(fast: re.Pattern[str]) -> re.Pattern[str]:
    """The pattern without its lookahead (``(?=[...])(?:original)`` -> ``original``)."""
    assert fast.pattern.startswith("(?=[")
    return re.compile(fast.pattern.split(")(?:", 1)[1][:-1], fast.flags)


_JUDGE_PATTERNS = {
    "negation": (conflict._NEGATION, _unscreened(conflict._NEGATION)),
    "change": (conflict._CHANGE_DECLARED, CHANGE_DECLARED),
    "preference": (conflict._PREFERENCE, PREFERENCE),
    "domains": (conflict._DOMAINS, _unscreened(conflict._DOMAINS)),
    "habit": (conflict._HABIT, _unscreened(conflict._HABIT)),
    "holder": (conflict._HOLDER, _unscreened(conflict._HOLDER)),
}


@pytest.mark.parametrize("name", sorted(_JUDGE_PATTERNS))
def test_judge_patterns_are_screened_and_match_the_same(name: str) -> None:
    fast, original = _JUDGE_PATTERNS[name]
    assert fast.pattern.startswith("(?=[")  # the screen applies (else no speed-up)
    for text in _texts(3000, seed=len(name)):
        got = [(m.span(), m.lastgroup, m.groups()) for m in fast.finditer(text)]
        assert got == [(m.span(), m.lastgroup, m.groups()) for m in original.finditer(text)], text
        assert fast.sub(" ", text) == original.sub(" ", text)


def test_screened_keeps_groups_and_names() -> None:
    rx = re.compile(r"(?P<drink>\btea\b|咖啡)|(?P<home>\bi live\b|住在)", re.I)
    fast = screened(rx)
    assert fast is not rx
    for text in [*_texts(2000, seed=3), "I LIVE on tea", "我住在上海，爱喝咖啡"]:
        assert [(m.span(), m.lastgroup, m.groups()) for m in fast.finditer(text)] == [
            (m.span(), m.lastgroup, m.groups()) for m in rx.finditer(text)
        ]


@pytest.mark.parametrize(
    "pattern",
    [r"a*b", r"(?<=x)y", r"(?i:a)b", r".b", r"[^a]b", r"\wb", r"(a|)b", r"(?=a)a"],
)
def test_unknown_first_characters_leave_the_pattern_alone(pattern: str) -> None:
    rx = re.compile(pattern)
    assert screened(rx) is rx


def test_case_folding_specials_match_like_the_original() -> None:
    rx = re.compile(r"(\bks\b|\bis\b)", re.I)
    fast = screened(rx)
    for text in ["\u212a\u017f", "\u0130S", "\u0131s", "KS is", "x ks"]:
        assert fast.findall(text) == rx.findall(text)


def test_negated_shortcut_agrees_with_the_full_count() -> None:
    judge = conflict.HeuristicConflictJudge(cache_size=10)
    extra = ["cannot waitnever", "no,never", "题cannot wait never", "cant wait", "dont worry 不", "没问题never"]
    for text in _texts(4000, seed=11) + extra:
        f = judge.features(text)
        full = len(conflict._NEGATION.findall(conflict._NOT_NEGATION.sub(" ", f.body))) % 2 == 1
        assert f.negated is full, text


def test_a_verbose_pattern_ending_in_a_comment_stays_closed() -> None:
    rx = re.compile("(tea | coffee)  # drinks", re.X | re.I)
    fast = screened(rx)
    assert fast is not rx
    assert fast.findall("Tea, then COFFEE") == rx.findall("Tea, then COFFEE") == ["Tea", "COFFEE"]
