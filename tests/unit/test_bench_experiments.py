"""The answer follow-up, MMR, context-property, word-pair, sentence-vector, keyword-feedback and word-vector expansion variants of ``benchmarks/experiments.py`` and its report writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.experiments import (
    PairAnalyzer,
    WordVectors,
    _answer_follow,
    _doc_freq,
    _field_scores,
    _is_question,
    _maxvec_scores,
    _mix_legs,
    _mmr,
    _rm3_scores,
    _sentences,
    _sentmax_scores,
    _spread,
    write_markdown,
)
from benchmarks.harness.cache import CachedEmbedder
from benchmarks.harness.datasets import Doc, Group
from benchmarks.harness.pure import PureIndex
from hybrid_memory.embeddings import CallableEmbedder
from hybrid_memory.text.analyzer import Analyzer

GROUP = Group(
    id="g",
    docs=(
        Doc("d1", "Caroline: You play any instruments?", session_id="s1"),
        Doc("d2", "Melanie: Yes, the violin, every evening.", session_id="s1"),
        Doc("d3", "Melanie: Do you?", session_id="s1"),
        Doc("d4", "Caroline: 我不会。", session_id="s2"),  # another session: not the reply
        Doc("d5", "好的，谢谢你。\n你今天吃了什么？", session_id="s3"),  # an exchange, not one utterance
        Doc("d6", "我吃了面条。", session_id="s3"),
    ),
    questions=(),
)


def test_a_question_is_one_utterance_ending_in_a_question_mark() -> None:
    assert _is_question("Melanie: Do you?  ") and _is_question("你呢？")
    assert not _is_question("I do.") and not _is_question("好的。\n你呢？")


def test_a_question_passes_part_of_its_score_to_the_reply_in_its_session() -> None:
    scores = {"d1": 1.0, "d3": 0.5, "d5": 0.8, "d6": 0.1}
    out = _answer_follow(GROUP, scores, 0.3, 0.7)
    assert out["d1"] == 0.7 and out["d2"] == 0.3  # the reply had no score of its own
    assert out["d3"] == 0.35 and "d4" not in out  # the next memory is in another session
    assert out["d5"] == 0.8 and out["d6"] == 0.1  # an exchange passes nothing on
    assert _answer_follow(GROUP, scores, 0.0, 1.0) == scores


def test_mmr_lets_a_different_memory_past_a_near_duplicate_of_the_first() -> None:
    unit = np.array([[1, 0], [1, 0], [0, 1], [0, 1], [1, 0], [0, 1]], dtype=np.float32)
    scores = {"d1": 1.0, "d2": 0.95, "d3": 0.9, "d4": 0.1}
    rank = lambda out: sorted(out, key=lambda i: -out[i])  # noqa: E731
    assert rank(_mmr(GROUP, scores, unit, 0.0)) == ["d1", "d2", "d3", "d4"]
    # d2 repeats d1 (cosine 1): 0.95 - 0.2 < 0.9, so d3 comes second; d4 repeats d3 as well
    assert rank(_mmr(GROUP, scores, unit, 0.2)) == ["d1", "d3", "d2", "d4"]
    # beyond the pool the order is the score order
    assert rank(_mmr(GROUP, scores, unit, 0.2, pool=1)) == ["d1", "d2", "d3", "d4"]


def test_the_context_property_is_searched_and_the_content_boost_weighs_the_memory_words_k_times() -> None:
    an = Analyzer()
    texts = ["I play the violin at night", "Yes, every evening after dinner", "We bought a new car"]
    contexts = ["", "Do you play the violin?", ""]
    vecs = np.eye(3, dtype=np.float32)
    base = PureIndex(["a", "b", "c"], texts, vecs, an)
    fields = (base.tokens, [an.index_tokens(c) for c in contexts])
    q_vec = np.array([0, 0, 1], dtype=np.float32)  # the vector leg favours "c"; alpha 0 ignores it
    one = _field_scores(fields, 1, base, "violin", q_vec, 0.0, 3)
    four = _field_scores(fields, 4, base, "violin", q_vec, 0.0, 3)
    rank = lambda out: sorted(out, key=lambda i: (-out[i], i))  # noqa: E731
    # "b" has the word only in its context, whose own (short) length normalisation outweighs "a"'s match
    assert rank(one)[:2] == ["b", "a"]
    assert rank(four)[:2] == ["a", "b"]  # content^4: the memory's own words win
    assert one.get("c", 0.0) == four.get("c", 0.0) == 0.0  # no keyword match, and alpha 0 ignores the vectors


def test_the_report_keeps_the_sections_other_studies_wrote(tmp_path: Path) -> None:
    path = tmp_path / "experiments.md"
    write_markdown(path, "# first\n")
    assert path.read_text(encoding="utf-8") == "# first\n"
    path.write_text("# first\n\n<!-- other: start -->\nkept\n<!-- other: end -->\n", encoding="utf-8")
    write_markdown(path, "# second\n")
    assert path.read_text(encoding="utf-8") == "# second\n\n<!-- other: start -->\nkept\n<!-- other: end -->\n"


def test_word_pairs_join_adjacent_latin_terms_once_stopwords_are_gone_and_rank_the_phrase_first() -> None:
    pairs = PairAnalyzer()
    assert pairs.query_tokens("When did she go to the support group?") == [
        "go",
        "support",
        "group",
        "go_support",
        "support_group",
    ]
    assert "我喜" in pairs.index_tokens("我喜欢 support groups") and "support_group" in pairs.index_tokens(
        "我喜欢 support groups"
    )
    texts = ["my group gave support at work", "my support group met on Tuesday"]
    plain = PureIndex(["apart", "phrase"], texts, None, Analyzer()).keyword_scores("support group")
    paired = PureIndex(["apart", "phrase"], texts, None, pairs).keyword_scores("support group")
    assert plain["apart"] >= plain["phrase"] - 0.05  # the same words, so nearly the same score
    assert paired["phrase"] > paired["apart"] + 0.3  # the pair decides


def test_the_two_vector_leg_scores_a_memory_by_the_better_of_its_two_cosines() -> None:
    texts = ["it was great", "I play the violin"]
    own = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]], dtype=np.float32)  # what each memory says
    with_context = np.array([[0.0, 0.0, 1.0], [0.6, 0.8, 0.0]], dtype=np.float32)  # and what it answers
    kw = PureIndex(["reply", "violin"], texts, own, Analyzer())
    query = np.array([0.0, 0.28, 0.96], dtype=np.float32)
    one = _maxvec_scores(kw, (own, own), "concert", query, 1.0, 10)
    two = _maxvec_scores(kw, (own, with_context), "concert", query, 1.0, 10)
    assert max(one, key=one.__getitem__) == "violin"
    assert max(two, key=two.__getitem__) == "reply"  # found by what it answers


def test_sentences_split_latin_and_han_text_and_leave_one_sentence_alone() -> None:
    assert _sentences("I moved to Paris. The job is great! Do you like it?") == [
        "I moved to Paris.",
        "The job is great!",
        "Do you like it?",
    ]
    assert _sentences("好的，谢谢你。\n你今天吃了什么？") == ["好的，谢谢你。", "你今天吃了什么？"]
    assert _sentences("Version 1.2 is out, see v1.2.3.") == []  # no space after a dot: one sentence
    assert _sentences("Ok. I play the violin.") == ["Ok.", "I play the violin."]
    assert _sentences("Hi. Hi") == []  # a piece under three characters is dropped


def test_a_memory_is_found_by_its_best_sentence_and_the_mean_weighs_the_whole_too() -> None:
    texts = ["Long day. I play the violin.", "music music", "a concert"]
    # the turn's whole vector is mostly not what the query asks; "a concert" has no sentences of its own
    whole = np.array([[0.6, 0.8, 0.0], [0.0, 0.995, -0.1], [0.0, 0.714, 0.7]], dtype=np.float32)
    sents = (np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32), np.array([0, 0]))  # the turn's two
    kw = PureIndex(["turn", "other", "concert"], texts, whole, Analyzer())
    query = np.array([0.0, 0.0, 1.0], dtype=np.float32)  # what the turn's second sentence says
    none = (np.zeros((0, 3), dtype=np.float32), np.zeros(0, dtype=np.int64))

    def order(scores: dict[str, float]) -> list[str]:
        return sorted(scores, key=lambda i: -scores[i])

    assert order(_sentmax_scores(kw, whole, none, "x", query, 1.0, 10, mix=False)) == ["concert", "turn", "other"]
    assert order(_sentmax_scores(kw, whole, sents, "x", query, 1.0, 10, mix=False)) == ["turn", "concert", "other"]
    # the mean of the whole (0.0) and the best sentence (1.0) is 0.5, below the concert's 0.7
    assert order(_sentmax_scores(kw, whole, sents, "x", query, 1.0, 10, mix=True)) == ["concert", "turn", "other"]


def test_the_session_spread_lets_a_second_session_ahead_of_a_third_memory_of_the_first() -> None:
    scores = {"d1": 1.0, "d2": 0.9, "d3": 0.8, "d5": 0.6, "d6": 0.1}  # d1-d3 session s1, d5/d6 session s3
    ranked = _spread(GROUP, scores, 0.5)
    order = sorted(ranked, key=lambda i: -ranked[i])
    assert order == ["d1", "d5", "d2", "d3", "d6"]  # 0.6 > 0.9 * 0.5; then 0.9 * 0.5 > 0.8 * 0.5 > 0.1 * 0.5
    same = _spread(GROUP, scores, 1.0)
    assert sorted(same, key=lambda i: -same[i]) == ["d1", "d2", "d3", "d5", "d6"]  # f = 1: the order as it was


def test_keyword_feedback_finds_a_memory_through_the_words_it_shares_with_the_first_hits() -> None:
    ids = ["violin", "rehearsal", "weather", "lunch"]
    texts = [
        "I play the violin in the city orchestra",
        "orchestra rehearsal moved to Friday",
        "the weather was cold on Friday",
        "we had noodles for lunch",
    ]
    vecs = np.eye(4, dtype=np.float32)
    idx = PureIndex(ids, texts, vecs, Analyzer())
    query = np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32)  # the vector leg favours lunch
    plain = _mix_legs(idx, idx, "violin", query, 0.0, 10)  # the first search
    fed = _rm3_scores(idx, _doc_freq(idx.tokens), plain, "violin", 0.0, "rm3_1_5_0.5")
    assert plain == {"violin": 1.0}  # the keyword leg alone (alpha 0): no other memory has the query word
    # "orchestra" is the one expansion term: "the" is a stopword, "play" and "city" are in one memory only
    # BM25 of "orchestra" is higher in the shorter memory; min-max normalised like a leg, so the first hit gets 0
    assert fed == {"violin": 1.0, "rehearsal": 0.5}


def test_word_vector_expansion_searches_the_memory_words_nearest_to_each_question_word(tmp_path: Path) -> None:
    toy = {  # unit vectors: "pottery" is near "activities" (cosine 0.8), nothing else is
        "activities": [1.0, 0.0, 0.0, 0.0],
        "pottery": [0.8, 0.6, 0.0, 0.0],
        "class": [0.0, 1.0, 0.0, 0.0],
        "noodles": [0.0, 0.0, 1.0, 0.0],
        "lunch": [0.0, 0.0, 1.0, 0.0],
    }
    emb = CachedEmbedder(
        CallableEmbedder(lambda ts: [toy.get(t, [0.0, 0.0, 0.0, 1.0]) for t in ts], name="toy-words"),
        cache_dir=tmp_path,
    )
    ids = ["pottery", "noodles", "plain"]
    texts = ["I signed up for a pottery class", "noodles for lunch", "we talked about activities"]
    idx = PureIndex(ids, texts, np.eye(3, 4, dtype=np.float32), Analyzer())
    words = WordVectors(emb, texts, idx)  # "for", "about", "we" are stopwords
    assert words.words == ["activities", "class", "lunch", "noodles", "pottery", "signed", "talked"]
    first = _mix_legs(idx, idx, "Which activities?", np.zeros(4, dtype=np.float32), 0.0, 10)
    assert first == {"plain": 1.0}  # the keyword leg alone: only one memory says "activities"
    grown = words.expanded("Which activities?", first, 0.0, "wexp_2_0.5_0.5")
    # "pottery" (cosine 0.8) is the one word at 0.5 or more; "activities" itself is the question's own term
    assert grown == {"plain": 1.0, "pottery": 0.5}  # one expanded memory: min-max gives it the whole leg
    assert words.expanded("Which activities?", first, 0.0, "wexp_2_0.9_0.5") == first  # no word at 0.9
    assert words.expanded("好吗？", first, 0.0, "wexp_2_0.5_0.5") == first  # Han text is not expanded
    emb.close()
