"""The text analyzer shared by every store.

Both stores index the analyzer's tokens, so BM25 sees identical terms on :class:`LocalStore`
and on Weaviate (where the analysed text lives in a ``whitespace``-tokenised property).

Latin script follows Weaviate's ``word`` tokenisation: NFKC-normalise, split on every rune that
is not a letter or a number, lower-case, then a light English stemmer (on by default: LoCoMo dev
BM25 Recall@10 0.522 → 0.545). Stopwords are removed from *queries only*; documents keep them, so
document length matches Weaviate's ``dl``. The query stopwords are Weaviate's ``en`` preset plus
pronouns, auxiliaries and question words (:data:`QUERY_STOPWORDS`): "What did I do…" otherwise
matches every memory containing "I" (LoCoMo dev BM25 Recall@10 0.545 → 0.608, LongMemEval turn
Recall@10 0.933 → 0.940). Both stores receive the analysed query, so they stay in step.

Chinese and Japanese ideographs/kana have no spaces: Weaviate's ``word`` would make
"我喜欢吃苹果" one token and a query for 苹果 would never match. Runs of those scripts are emitted
as overlapping character bigrams plus single characters (``cjk="bigram+unigram"``, the default,
chosen by measurement on MemoryBank-CN; see ``benchmarks/results/report.md``), bigrams only, or
words from the optional ``jieba`` dictionary segmenter.

Example:
    >>> a = Analyzer()
    >>> a.index_tokens("我喜欢吃苹果，I use Python写代码!")
    ['我', '我喜', '喜', '喜欢', '欢', '欢吃', '吃', '吃苹', '苹', '苹果', '果', 'i', 'use', 'python', '写', '写代', '代', '代码', '码']
    >>> a.query_tokens("What did I say about the apples?")
    ['say', 'apple']
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from typing import Literal

from hybrid_memory.errors import ConfigurationError, InvalidInputError, MissingDependencyError

__all__ = [
    "CJK_QUERY_STOPWORDS",
    "ENGLISH_STOPWORDS",
    "QUERY_STOPWORDS",
    "Analyzer",
    "CjkMode",
    "content_units",
    "last_words",
    "scripts",
]

CjkMode = Literal["bigram+unigram", "bigram", "unigram", "jieba"]

#: Weaviate's ``en`` stopword preset (adapters/repos/db/inverted/stopwords/presets.go).
ENGLISH_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)

#: Default query stopwords: Weaviate's ``en`` preset plus pronouns, auxiliaries, question words
#: and contraction fragments (measured on the dev benchmarks; see the module docstring).
QUERY_STOPWORDS = ENGLISH_STOPWORDS | frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "us",
        "our",
        "ours",
        "ourselves",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "her",
        "hers",
        "herself",
        "its",
        "itself",
        "them",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "do",
        "does",
        "did",
        "doing",
        "done",
        "have",
        "has",
        "had",
        "having",
        "am",
        "were",
        "been",
        "being",
        "would",
        "could",
        "should",
        "can",
        "shall",
        "may",
        "might",
        "must",
        "about",
        "any",
        "some",
        "all",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "just",
        "also",
        "s",
        "t",
        "don",
        "didn",
        "doesn",
        "isn",
        "wasn",
        "aren",
        "weren",
        "won",
        "wouldn",
        "couldn",
        "shouldn",
    ]
)

#: Chinese pronouns, particles and question words, as the CJK tokens a query is cut into (single
#: characters and bigrams). Like :data:`QUERY_STOPWORDS` they are dropped from queries only: "我曾经…
#: 是什么？" otherwise matches every memory that contains 我, 是 or 什么, and a memory indexed with the
#: question it answers (its search context) would match every other question.
_CJK_STOP_TEXT = (
    "我 你 您 他 她 它 们 的 地 得 了 着 过 吗 嗎 呢 吧 啊 呀 么 麼 是 在 有 和 与 及 或 也 都 就 还 这 那 哪 "
    "个 什 怎 谁 几 把 被 给 让 对 从 到 又 很 再 曾 要 想 会 能 "
    "我们 你们 他们 她们 它们 什么 怎么 怎样 为什 哪里 哪些 哪个 哪儿 如何 多少 是否 是不 有没 没有 可以 "
    "一下 一些 这个 那个 这些 那些 这样 那样 时候 的时 我的 你的 他的 她的 了吗 的是 是什 有什 么时"
)
CJK_QUERY_STOPWORDS = frozenset(_CJK_STOP_TEXT.split())

# Han (incl. extensions and compatibility ideographs), Hiragana, Katakana, CJK symbols that are
# letters (e.g. 々). Hangul is space-delimited and handled like Latin.
_CJK_CLASS = "\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
# A word is a run of letters/numbers ([^\W_] = str.isalnum(), i.e. Unicode L* and N*, like Go's
# unicode.IsLetter || unicode.IsNumber in Weaviate's `word`); runs are further split where the
# script switches between CJK and everything else.
_PIECE = re.compile(rf"(?:(?=[^\W_])[{_CJK_CLASS}])+|(?:(?![{_CJK_CLASS}])[^\W_])+")
_CJK_CHAR = re.compile(rf"[{_CJK_CLASS}]")
# ASCII text (NFKC-stable, no CJK, lower-casing maps letters to letters): the same words in one pass.
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


def scripts(text: str) -> frozenset[str]:
    """Which writing systems the words of ``text`` use: ``"cjk"`` and/or ``"other"`` (letters of any other script).

    Numbers alone do not count, so ``"line 2"`` and ``"2号线"`` each use one script. Two texts whose
    sets are single and different share no word a keyword index could match.

    Example:
        >>> sorted(scripts("我明天去 Shanghai 开会")), sorted(scripts("Where do I live?")), sorted(scripts("2024!"))
        (['cjk', 'other'], ['other'], [])
    """
    if text.isascii():  # most texts: one C pass, then one search
        return _OTHER_ONLY if _ASCII_LETTER.search(text) else _NO_SCRIPT
    cjk = _CJK_CHAR.search(text) is not None
    other = _OTHER_LETTER.search(text) is not None
    return _SCRIPT_SETS[cjk, other]


_ASCII_LETTER = re.compile(r"[A-Za-z]")
#: A letter outside the CJK class (digits and marks are not letters; full-width Latin is "other").
_OTHER_LETTER = re.compile(rf"(?![{_CJK_CLASS}])[^\W\d_]")
_NO_SCRIPT: frozenset[str] = frozenset()
_OTHER_ONLY = frozenset({"other"})
_SCRIPT_SETS = {
    (False, False): _NO_SCRIPT,
    (False, True): _OTHER_ONLY,
    (True, False): frozenset({"cjk"}),
    (True, True): frozenset({"cjk", "other"}),
}


# A word for last_words: one CJK character, or a run of anything else up to a space or a CJK character.
_WORD_OR_CJK = re.compile(rf"[{_CJK_CLASS}]|[^\s{_CJK_CLASS}]+")


#: Characters per word in Chinese and Japanese text (a Chinese word is one to three characters,
#: most often two): :func:`content_units` counts a CJK character as 1/1.5 of a word.
CJK_CHARS_PER_WORD = 1.5


@functools.lru_cache(maxsize=1)
def _units_analyzer() -> Analyzer:
    return Analyzer()


def content_units(text: str) -> float:
    """How much ``text`` says, in words: its distinct query terms (stopwords out, stems merged).

    The default :class:`Analyzer` cuts the text; a CJK character counts as 1/1.5 of a word and its
    bigrams not at all, so a Chinese sentence measures about what the same sentence in English
    does. The re-rank's length prior (``rerank.w_length``) reads it.

    Example:
        >>> content_units("Wow, that's great!")
        2.0
        >>> content_units("I went to a pottery class yesterday and made a bowl for my kids")
        7.0
        >>> content_units("我昨天去上了陶艺课，给孩子们做了一个碗")
        8.0
    """
    latin = chars = 0
    for t in set(_units_analyzer().query_tokens(text)):
        if _CJK_CHAR.search(t):
            chars += len(t) == 1
        else:
            latin += 1
    return latin + chars / CJK_CHARS_PER_WORD


def last_words(text: str, n: int | None) -> str:
    """The end of ``text`` from its ``n``-th last word on (all of it when it is shorter, or ``n`` is None).

    A CJK character counts as one word (Chinese has no spaces; a Chinese word is one to three
    characters), a run of other characters up to a space or a CJK character as another, so a
    punctuation mark standing alone is a word too. The cut is at the start of a word: a word, or
    a redaction placeholder such as ``[EMAIL]``, is never split.

    Raises:
        InvalidInputError: ``n`` is below 1.

    Example:
        >>> last_words("Bob: how was the weekend?", 3)
        'was the weekend?'
        >>> last_words("你喜欢文艺作品吗？", 4)
        '作品吗？'
        >>> last_words("short", 45)
        'short'
    """
    if n is None:
        return text
    if n < 1:
        raise InvalidInputError(f"n must be >= 1 or None, got {n}")
    starts = [m.start() for m in _WORD_OR_CJK.finditer(text)]
    return text[starts[-n] :] if len(starts) > n else text


def _is_cjk(ch: str) -> bool:
    # Every range of the class starts at U+3005 or above: most characters are decided by one compare.
    return ch >= "\u3005" and _CJK_CHAR.match(ch) is not None


class Analyzer:
    """Tokeniser producing the terms both stores index and query.

    Args:
        cjk: How runs of Chinese/Japanese characters are tokenised.
        stem: Apply a light English suffix stemmer to Latin tokens (both index and query).
        stopwords: Words removed from queries (not from documents); default :data:`QUERY_STOPWORDS`.

    Raises:
        ConfigurationError: unknown ``cjk`` mode.
        MissingDependencyError: ``cjk="jieba"`` without jieba installed.
    """

    def __init__(
        self,
        *,
        cjk: CjkMode = "bigram+unigram",
        stem: bool = True,
        stopwords: Iterable[str] | None = None,
    ) -> None:
        if cjk not in ("bigram+unigram", "bigram", "unigram", "jieba"):
            raise ConfigurationError(f"unknown cjk mode {cjk!r}")
        self.cjk: CjkMode = cjk
        self.stem = stem
        self.stopwords = frozenset(QUERY_STOPWORDS if stopwords is None else stopwords)
        self.cjk_stopwords = CJK_QUERY_STOPWORDS if stopwords is None else self.stopwords
        self._jieba = None
        if cjk == "jieba":
            try:
                import jieba
            except ImportError as exc:
                raise MissingDependencyError("jieba", "jieba") from exc
            self._jieba = jieba

    @property
    def name(self) -> str:
        """A stable description, stored with an index so a different analyzer is detected."""
        return f"word+cjk:{self.cjk}" + ("+stem" if self.stem else "")

    def index_tokens(self, text: str) -> list[str]:
        """Tokens of a document, stopwords included (they count in the document length)."""
        stem = self.stem
        if text.isascii():
            words = _ASCII_WORD.findall(text.lower())
            return [_light_stem(w) for w in words] if stem else words
        out: list[str] = []
        for piece in _PIECE.findall(unicodedata.normalize("NFKC", text)):
            if _is_cjk(piece[0]):
                out.extend(self._cjk_tokens(piece))
            else:
                word = piece.lower()
                out.append(_light_stem(word) if stem else word)
        return out

    def query_tokens(self, text: str) -> list[str]:
        """Tokens of a query: like :meth:`index_tokens` with English stopwords removed."""
        stem, stopwords, cjk_stopwords = self.stem, self.stopwords, self.cjk_stopwords
        if text.isascii():
            kept = [w for w in _ASCII_WORD.findall(text.lower()) if w not in stopwords]
            return [_light_stem(w) for w in kept] if stem else kept
        out: list[str] = []
        for piece in _PIECE.findall(unicodedata.normalize("NFKC", text)):
            if _is_cjk(piece[0]):
                out.extend(t for t in self._cjk_tokens(piece) if t not in cjk_stopwords)
            else:
                word = piece.lower()
                if word not in stopwords:
                    out.append(_light_stem(word) if stem else word)
        return out

    def analyze(self, text: str) -> str:
        """The document tokens joined by spaces (what Weaviate stores for ``whitespace``)."""
        return " ".join(self.index_tokens(text))

    def analyze_query(self, text: str) -> str:
        """The query tokens joined by spaces."""
        return " ".join(self.query_tokens(text))

    # -- internals -------------------------------------------------------------------------
    # Both token methods: NFKC, then word runs split at CJK / non-CJK boundaries (``_PIECE``);
    # non-CJK runs are lower-cased (after the split: lower-casing can add non-word marks).

    def _cjk_tokens(self, run: str) -> list[str]:
        if self._jieba is not None:
            return [w for w in self._jieba.lcut(run) if w.strip()]
        if len(run) == 1:
            return [run]
        out: list[str] = []
        uni = self.cjk in ("bigram+unigram", "unigram")
        bi = self.cjk in ("bigram+unigram", "bigram")
        for i, ch in enumerate(run):
            if uni:
                out.append(ch)
            if bi and i + 1 < len(run):
                out.append(run[i : i + 2])
        return out


_VOWELS = frozenset("aeiou")


def _short_cvc(base: str) -> bool:
    """A short consonant-vowel-consonant stem whose silent e was dropped (los, mak, hop)."""
    return (
        len(base) <= 4
        and len(base) >= 3
        and base[-1] not in _VOWELS
        and base[-1] not in "wxy"
        and base[-2] in _VOWELS
        and base[-3] not in _VOWELS
    )


@functools.lru_cache(maxsize=1 << 16)
def _light_stem(w: str) -> str:
    """A small English stemmer (plural and common verb suffixes), deterministic and pure (so cached)."""
    if len(w) <= 3 or not w.isascii() or not w.isalpha():
        return w
    for suf, rep, min_len in (
        ("ies", "y", 5),
        ("sses", "ss", 5),
        ("ing", "", 6),
        ("edly", "", 7),
        ("ed", "", 5),
        ("es", "", 5),
        ("s", "", 4),
    ):
        if w.endswith(suf) and len(w) >= min_len:
            if suf == "s" and w.endswith(("ss", "us", "is")):
                return w
            if suf == "es" and not w[:-2].endswith(("s", "x", "z", "ch", "sh")):
                continue  # "apples" -> "apple" (the "s" rule), "boxes" -> "box"
            base = w[: len(w) - len(suf)] + rep
            if suf in ("ing", "ed"):
                if len(base) > 2 and base[-1] == base[-2] and base[-1] not in "lsz":
                    base = base[:-1]  # running -> run, hopped -> hop
                elif _short_cvc(base):
                    base += "e"  # losing -> lose, baked -> bake (Porter step 1b)
            return base
    return w
