from __future__ import annotations

import pytest

from hybrid_memory.errors import ConfigurationError, InvalidInputError
from hybrid_memory.text.analyzer import ENGLISH_STOPWORDS, Analyzer, last_words
from hybrid_memory.text.tokens import TokenCounter


def test_latin_follows_weaviate_word_tokenisation() -> None:
    # Split on every non-letter/non-number rune, lower-case (weaviate.md §2.6).
    assert Analyzer().index_tokens("Hello, World! don't e-mail x_y 3.14") == [
        "hello",
        "world",
        "don",
        "t",
        "e",
        "mail",
        "x",
        "y",
        "3",
        "14",
    ]


def test_stopwords_are_removed_from_queries_only() -> None:
    a = Analyzer()
    assert a.index_tokens("the cat is on the mat") == ["the", "cat", "is", "on", "the", "mat"]
    assert a.query_tokens("the cat is on the mat") == ["cat", "mat"]
    assert len(ENGLISH_STOPWORDS) == 33


def test_chinese_query_matches_inside_a_clause() -> None:
    a = Analyzer()
    doc = set(a.index_tokens("我喜欢吃苹果"))
    assert set(a.query_tokens("苹果")) <= doc
    assert "苹果" in doc and "苹" in doc


def test_mixed_script_and_fullwidth_are_normalised() -> None:
    a = Analyzer()
    assert a.index_tokens("Python写代码") == ["python", "写", "写代", "代", "代码", "码"]
    assert a.index_tokens("ＧＰＴ４") == ["gpt4"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("bigram", ["苹果", "果汁"]),
        ("unigram", ["苹", "果", "汁"]),
        ("bigram+unigram", ["苹", "苹果", "果", "果汁", "汁"]),
    ],
)
def test_cjk_modes(mode: str, expected: list[str]) -> None:
    assert Analyzer(cjk=mode).index_tokens("苹果汁") == expected  # type: ignore[arg-type]


def test_jieba_mode_segments_words() -> None:
    pytest.importorskip("jieba")
    toks = Analyzer(cjk="jieba").index_tokens("我喜欢吃苹果")
    assert "苹果" in toks and "喜欢" in toks


def test_stemming_is_applied_to_index_and_query() -> None:
    a = Analyzer(stem=True)
    assert a.index_tokens("journeys running played") == ["journey", "run", "play"]
    assert a.query_tokens("journey") == ["journey"]
    assert a.name.endswith("+stem")


def test_unknown_cjk_mode_is_rejected() -> None:
    with pytest.raises(ConfigurationError):
        Analyzer(cjk="trigram")  # type: ignore[arg-type]


def test_token_counter_is_exact_offline_and_truncates() -> None:
    c = TokenCounter("gpt-4o-mini")
    assert c.exact, c.fallback_reason  # tests/conftest.py points TIKTOKEN_CACHE_DIR at the bundled files
    assert c.name == "tiktoken:o200k_base"
    assert c.count("hello world") == 2
    text = "我喜欢喝茶。" * 50
    cut = c.truncate(text, 10)
    assert c.count(cut) <= 10 and text.startswith(cut)


def test_approximate_counter() -> None:
    c = TokenCounter(encoding="approx")
    assert not c.exact
    assert c.count("") == 0
    assert c.count("我喜欢") == 3
    assert c.truncate("abcdefgh", 1) == "abc"  # 3.7 characters per token


def test_word_characters_are_exactly_weaviate_letters_and_numbers() -> None:
    import unicodedata

    from hybrid_memory.text.analyzer import _PIECE

    mismatches = [
        cp
        for cp in range(0x30000)
        if not 0xD800 <= cp <= 0xDFFF and (unicodedata.category(chr(cp))[0] in "LN") != bool(_PIECE.fullmatch(chr(cp)))
    ]
    assert mismatches == []


def test_cjk_punctuation_inside_kana_splits() -> None:
    # U+30FB (katakana middle dot) is punctuation: Weaviate's `word` splits on it.
    assert Analyzer(cjk="unigram").index_tokens("カタ・カナ") == ["カ", "タ", "カ", "ナ"]


def test_cjk_boundary_and_cached_stemming_are_exact() -> None:
    from hybrid_memory.text.analyzer import _is_cjk, _light_stem

    assert _is_cjk("\u3005") and _is_cjk("中") and _is_cjk("\U00020000")
    assert not _is_cjk("\u3004") and not _is_cjk("a") and not _is_cjk("가")  # Hangul is space-delimited
    an = Analyzer()
    # "İ" lower-cases to "i" + a combining dot: the split happens before lower-casing, as in Weaviate.
    assert an.index_tokens("İstanbul 々木 running") == ["i\u0307stanbul", "々", "々木", "木", "run"]
    # the stemmer is cached; the same word always gives the same stem
    assert [_light_stem(w) for w in ("losing", "losing", "boxes", "apples")] == ["lose", "lose", "box", "apple"]


def test_chinese_question_words_and_pronouns_are_dropped_from_queries_only() -> None:
    an = Analyzer()
    q = an.query_tokens("早上给我准备什么饮品？")
    assert "我" not in q and "什么" not in q and "什" not in q and "么" not in q
    assert {"早上", "准备", "饮品", "给我"} <= set(q)  # content words and bigrams across a stopword stay
    doc = an.index_tokens("我问你什么时候去")
    assert "我" in doc and "什么" in doc  # documents keep every token (lengths match Weaviate's)
    assert Analyzer(stopwords=()).query_tokens("我什么") == ["我", "我什", "什", "什么", "么"]


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("Call me at [PHONE] or mail [EMAIL] today", 3, "mail [EMAIL] today"),  # a placeholder stays whole
        ("I like 绘画 and tea", 3, "画 and tea"),  # a CJK character is a word, next to a Latin one
        ("好的。\n你呢？", 4, "。\n你呢？"),  # full-width marks standing alone are words too
        ("  leading and trailing  ", 2, "and trailing  "),
        ("one two", 2, "one two"),
        ("one two", None, "one two"),
        ("", 5, ""),
    ],
)
def test_last_words_cuts_at_the_start_of_a_word(text: str, n: int | None, expected: str) -> None:
    assert last_words(text, n) == expected


def test_last_words_refuses_a_count_below_one() -> None:
    with pytest.raises(InvalidInputError, match="n must be"):
        last_words("text", 0)
