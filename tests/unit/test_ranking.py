"""Weaviate's own published numbers, reproduced by :mod:`hybrid_memory.ranking`.

Sources (weaviate/weaviate, read through the project's code search; the v1.39.0 tag itself is not
stored, so these are the stored versions, which weaviate.md §1.9/§2.2 cross-checked):

* ``usecases/traverser/hybrid/fusion_test.go`` (commit 0a1fa502) ``TestFusionRelativeScore``;
* ``entities/autocut/autocut_test.go`` (commit 498e1f4a) ``TestAutoCut``;
* ``adapters/repos/db/bm25f_block_test.go`` (commit 000e76b7): ``TestBM25F_ComplexDocumentsBlock``
  (0.93171, 0.54312956, 0.3794713), ``TestBM25FSinglePropBlock`` (0.6178051),
  ``TestBM25FJourneyBlock`` "With autocut" (0.5253056 … 0.28910512) and
  ``TestBM25FDifferentParamsJourneyBlock`` (title^2 + description, 1.7730504). The corpora are
  those of ``SetupClass`` / ``SetupClassDocuments`` in ``adapters/repos/db/bm25f_test.go``
  (10 "journey" objects, 4 "documents"), tokenised with Weaviate's ``word`` tokenisation.
"""

from __future__ import annotations

import functools
import unicodedata
import uuid

import numpy as np
import pytest

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.ranking import (
    Bm25Params,
    FusedHit,
    KeywordCandidate,
    LegHit,
    PropertyTokens,
    VectorCandidate,
    autocut,
    average_length,
    bm25_accumulate,
    bm25_idf,
    bm25_multi_property,
    bm25_scores,
    candidate_limit,
    fusion_order,
    hybrid_fuse,
    hybrid_weights,
    query_term_counts,
    rank_keyword,
    ranked_fusion,
    relative_score_fusion,
)
from hybrid_memory.text.analyzer import ENGLISH_STOPWORDS, Analyzer


def word_tokens(text: str | None) -> list[str]:
    """Weaviate ``word`` tokenisation: split on runes that are neither letters nor numbers, lower."""
    if text is None:
        return []
    out: list[str] = []
    buf: list[str] = []
    for ch in text:
        if unicodedata.category(ch)[0] in ("L", "N"):
            buf.append(ch)
        elif buf:
            out.append("".join(buf).lower())
            buf = []
    if buf:
        out.append("".join(buf).lower())
    return out


def weaviate_uuid(i: int) -> str:
    """The test objects' ids: ``uuid.MustParse(fmt.Sprintf("%032d", i))``."""
    return str(uuid.UUID(f"{i:032d}"))


def as_f32(x: float) -> np.float32:
    return np.float32(x)


# ---------------------------------------------------------------------------------------------
# relativeScoreFusion: fusion_test.go TestFusionRelativeScore (12 cases)
# ---------------------------------------------------------------------------------------------

FUSION_CASES = [
    ([0.5, 0.5], [[1, 2, 3], [0, 1, 2]], [1, 0.5, 0], [2, 1, 0]),
    ([0.5, 0.5], [[0, 2, 0.1], [0, 0.2, 2]], [0.55, 0.525, 0], [1, 2, 0]),
    ([0.75, 0.25], [[0.5, 0.5, 0], [0, 0.01, 0.001]], [1, 0.75, 0.025], [1, 0, 2]),
    ([0.75, 0.25], [[], []], [], []),
    ([0.75, 0.25], [[1], []], [0.75], [0]),
    ([0.75, 0.25], [[], [1]], [0.25], [0]),
    ([0.75, 0.25], [[1, 2], []], [0.75, 0], [1, 0]),
    ([0.75, 0.25], [[], [1, 2]], [0.25, 0], [1, 0]),
    ([0.75, 0.25], [[1, 1], [1, 2]], [1, 0.75], [1, 0]),
    ([1], [[1, 2, 3]], [1, 0.5, 0], [2, 1, 0]),
    ([0.75, 0.25], [[1, 2, 3, 4], [1, 2, 3]], [0.75, 0.75, 0.375, 0], [3, 2, 1, 0]),
    ([0.75, 0.25, 0.1], [[1, 2, 3, 4], [1, 2, 3], [4, 5]], [0.75, 0.75, 0.475, 0], [3, 2, 1, 0]),
]


@pytest.mark.parametrize(("weights", "inputs", "expected_scores", "expected_order"), FUSION_CASES)
def test_relative_score_fusion_matches_weaviate_table(
    weights: list[float], inputs: list[list[float]], expected_scores: list[float], expected_order: list[int]
) -> None:
    sets = [[LegHit(str(j), s) for j, s in enumerate(scores)] for scores in inputs]
    fused = relative_score_fusion(weights, sets)
    assert [h.id for h in fused] == [str(i) for i in expected_order]
    assert [h.score for h in fused] == pytest.approx(expected_scores, abs=1e-4)


def test_fusion_table_has_all_twelve_cases() -> None:
    assert len(FUSION_CASES) == 12


def test_relative_fusion_scores_are_float32_values() -> None:
    fused = relative_score_fusion([0.5, 0.5], [[LegHit("a", 0), LegHit("b", 2), LegHit("c", 0.1)], []])
    for h in fused:
        assert float(np.float32(h.score)) == h.score
    # 0.5 * (0.1 / 2) in float32 arithmetic, not float64.
    c = next(h for h in fused if h.id == "c")
    assert c.score == float(np.float32(np.float32(0.5) * np.float32(np.float32(0.1) / np.float32(2))))


def test_later_set_object_wins_and_supplies_ssv() -> None:
    fused = relative_score_fusion([0.5, 0.5], [[LegHit("x", 0.9), LegHit("y", 0.1)], [LegHit("x", 7.0)]])
    x = next(h for h in fused if h.id == "x")
    assert x.leg == 1
    assert x.ssv == 7.0
    assert x.score == 1.0  # 0.5 (max of set 0) + 0.5 (single member of set 1 gets the full weight)


def test_tie_breaks_on_ssv_then_id() -> None:
    a = FusedHit("b-id", 0.5, 0.3, 0)
    b = FusedHit("a-id", 0.5, 0.3, 0)
    c = FusedHit("c-id", 0.5, 0.9, 0)
    assert [h.id for h in fusion_order([a, b, c])] == ["c-id", "a-id", "b-id"]


def test_scores_within_epsilon_tie() -> None:
    lower = FusedHit("z", 0.5, 0.9, 0)
    higher = FusedHit("a", float(np.nextafter(np.float32(0.5), np.float32(1))), 0.1, 0)
    assert higher.score > lower.score
    # (Δscore)² < 1e-14, so the scores tie and the larger ssv goes first.
    assert [h.id for h in fusion_order([higher, lower])] == ["z", "a"]
    clearly_higher = FusedHit("a", 0.5001, 0.1, 0)
    assert [h.id for h in fusion_order([lower, clearly_higher])] == ["a", "z"]


def test_relative_fusion_order_is_deterministic_for_equal_inputs() -> None:
    # fusion_test.go TestFusionOrderRelative: identical scores must give a stable order (id asc).
    sets = [[LegHit("2", 0.5), LegHit("1", 0.5)], [LegHit("2", 0.5), LegHit("1", 0.5)]]
    first = relative_score_fusion([0.5, 0.5], sets)
    assert [h.id for h in first] == ["1", "2"]
    for _ in range(10):
        assert relative_score_fusion([0.5, 0.5], sets) == first


def test_fusion_rejects_mismatched_weights() -> None:
    with pytest.raises(InvalidInputError):
        relative_score_fusion([1.0], [[], []])
    with pytest.raises(InvalidInputError):
        ranked_fusion([1.0, 0.5], [[]])


# ---------------------------------------------------------------------------------------------
# rankedFusion
# ---------------------------------------------------------------------------------------------


def test_ranked_fusion_scores() -> None:
    fused = ranked_fusion([0.7, 0.3], [[LegHit("a", 0.9), LegHit("b", 0.8)], [LegHit("b", 3.0), LegHit("c", 1.0)]])
    by_id = {h.id: h for h in fused}
    assert by_id["a"].score == float(np.float32(0.7 / 60))
    assert by_id["b"].score == float(np.float32(np.float32(0.3 / 60) + np.float32(0.7 / 61)))
    assert by_id["c"].score == float(np.float32(0.3 / 61))
    assert [h.id for h in fused] == ["b", "a", "c"]
    assert by_id["b"].ssv == 3.0  # keyword object replaced the vector one


def test_ranked_fusion_order_is_deterministic() -> None:
    # fusion_test.go TestFusionOrderRanked: doc 1 and 2 get identical sums and ssv.
    sets = [[LegHit("1", 0.5), LegHit("2", 0.5)], [LegHit("2", 0.5), LegHit("1", 0.5)]]
    first = ranked_fusion([0.5, 0.5], sets)
    assert [h.id for h in first] == ["1", "2"]
    assert first[0].score == first[1].score
    for _ in range(10):
        assert ranked_fusion([0.5, 0.5], sets) == first


# ---------------------------------------------------------------------------------------------
# autocut: autocut_test.go TestAutoCut
# ---------------------------------------------------------------------------------------------

AUTOCUT_CASES = [
    ([2, 1.95, 1.9, 0.2, 0.1, 0.1, -1], 1, 3),
    ([2, 1.95, 1.9, 0.2, 0.1, 0.1, -2], 2, 6),
    ([5, 1, 1, 1, 1, 0, 0], 1, 1),
    ([5, 1, 1, 1, 1, 0, 0], 2, 5),
    ([0.298, 0.260, 0.169, 0.108, 0.108, 0.104, 0.093], 1, 3),
    ([0.5, 0.32, 0.31, 0.30, 0.29, 0.15], 1, 1),
    ([0.5, 0.32, 0.31, 0.30, 0.29, 0.15, 0.15, 0.15], 2, 5),
    ([1.0, 0.98, 0.95, 0.9, 0.88, 0.87, 0.80, 0.79], 1, 3),
    ([1.0, 0.98, 0.95, 0.9, 0.88, 0.87, 0.80, 0.79], 2, 6),
    ([1.0, 0.98, 0.95, 0.9, 0.88, 0.87, 0.80, 0.79], 3, 8),
    ([0.586835, 0.5450372, 0.34137487, 0.30482167, 0.2753393], 1, 2),
    ([0.36663342, 0.33818772, 0.045160502, 0.045160501], 1, 2),
]


@pytest.mark.parametrize(("values", "cutoff", "expected"), AUTOCUT_CASES)
def test_autocut_matches_weaviate_table(values: list[float], cutoff: int, expected: int) -> None:
    assert autocut(values, cutoff) == expected


@pytest.mark.parametrize(("values", "expected"), [([], 0), ([0.3], 1), ([0.5, 0.1], 2), ([0.2, 0.2, 0.2], 3)])
def test_autocut_degenerate_inputs(values: list[float], expected: int) -> None:
    assert autocut(values, 1) == expected


# ---------------------------------------------------------------------------------------------
# BM25 (BlockMax path): bm25f_block_test.go
# ---------------------------------------------------------------------------------------------

COMPLEX_DOCUMENTS = [
    'No matter what you do, the question of ""what is income"" is *always* going to be an extremely complex '
    "question.   To use this particular example, is paying a royalty fee to an external party a legitimate "
    'business expense that is part of the cost of doing business and which subtracts from your ""income""?',
    "test",
    'As long as the losing business is not considered ""passive activity"" or ""hobby"", then yes. Passive '
    "Activity is an activity where you do not have to actively do anything to generate income. For example - "
    "royalties or rentals. Hobby is an activity that doesn't generate profit. Generally, if your business "
    "doesn't consistently generate profit (the IRS looks at 3 out of the last 5 years), it may be "
    "characterized as hobby. For hobby, loss deduction is limited by the hobby income and the 2% AGI threshold.",
    "So you're basically saying that average market fluctuations have an affect on individual stocks, because "
    "individual stocks are often priced in relation to the growth of the market as a whole?  Also, what kinds "
    'of investments would be considered ""risk free"" in this nomenclature?',
]

JOURNEY_TITLES = [
    "Our journey to BM25F",
    "Why I dont like journey",
    "My journeys in Journey",
    "An unrelated title",
    "journey journey",
    "journey",
    "JOURNEY",
    "An unrelated title",
    "none",
    "something",
]
JOURNEY_DESCRIPTIONS = [
    "This is how we get to BM25F",
    "This is about how we get somewhere",
    "A journey story about journeying",
    "Actually all about journey",
    "journey journey journey",
    "journey journey",
    "A LOUD JOURNEY",
    "Absolutely nothing to do with the topic",
    "other",
    "none none",
]


def ranked(scores: dict[int, float]) -> list[KeywordCandidate]:
    return rank_keyword({weaviate_uuid(i): s for i, s in scores.items()})


def doc_no(c: KeywordCandidate) -> int:
    return int(c.id.replace("-", ""))


def test_bm25_complex_documents_single_term() -> None:
    # TestBM25F_ComplexDocumentsBlock "single term": k1=0.5, b=0.75, preset none, query "considered a".
    docs = [word_tokens(d) for d in COMPLEX_DOCUMENTS]
    res = ranked(bm25_scores(word_tokens("considered a"), docs, params=Bm25Params(0.5, 0.75)))
    assert [doc_no(c) for c in res] == [3, 0, 2]
    assert [as_f32(c.score) for c in res] == [as_f32(0.93171), as_f32(0.54312956), as_f32(0.3794713)]


def test_bm25_stopwords_only_leave_the_query() -> None:
    # "Results without stopwords": preset none + "example losing business" equals preset en +
    # "an example on losing the business" (and the duplicated-stopword variant).
    docs = [word_tokens(d) for d in COMPLEX_DOCUMENTS]
    params = Bm25Params(0.5, 0.75)
    plain = ranked(bm25_scores(word_tokens("example losing business"), docs, params=params))
    analyzer = Analyzer(stem=False, stopwords=sorted(ENGLISH_STOPWORDS))  # Weaviate `word` + `en` preset
    for query in ("an example on losing the business", "on an example on losing the business on"):
        tokens = analyzer.query_tokens(query)
        assert tokens == ["example", "losing", "business"]
        assert ranked(bm25_scores(tokens, docs, params=params)) == plain
    assert len(plain) >= 2


def test_bm25_single_property_b1() -> None:
    # TestBM25FSinglePropBlock: k1=0.5, b=1, description, "journey".
    docs = [word_tokens(d) for d in JOURNEY_DESCRIPTIONS]
    res = ranked(bm25_scores(["journey"], docs, params=Bm25Params(0.5, 1)))
    assert doc_no(res[0]) == 4
    assert doc_no(res[3]) == 3
    assert as_f32(res[0].score) == as_f32(0.6178051)
    assert as_f32(res[1].score) == as_f32(0.6178051)


JOURNEY_AUTOCUT_SCORES = [0.5253056, 0.50612706, 0.35391074, 0.31824225, 0.28910512]


def test_bm25_journey_default_params_and_autocut() -> None:
    # TestBM25FJourneyBlock "With autocut": k1=1.2, b=0.75, description, "journey".
    docs = [word_tokens(d) for d in JOURNEY_DESCRIPTIONS]
    res = ranked(bm25_scores(["journey"], docs))
    assert [as_f32(c.score) for c in res] == [as_f32(s) for s in JOURNEY_AUTOCUT_SCORES]
    assert [doc_no(c) for c in res] == [4, 5, 6, 3, 2]
    assert autocut([c.score for c in res], 1) == 2


def test_bm25_multi_property_boosted() -> None:
    # TestBM25FDifferentParamsJourneyBlock: k1=0.5, b=1, properties title^2 + description.
    props = [
        PropertyTokens([word_tokens(t) for t in JOURNEY_TITLES], boost=2.0),
        PropertyTokens([word_tokens(d) for d in JOURNEY_DESCRIPTIONS]),
    ]
    res = ranked(bm25_multi_property(["journey"], props, params=Bm25Params(0.5, 1)))
    assert doc_no(res[0]) == 4
    assert doc_no(res[2]) == 6
    assert as_f32(res[0].score) == as_f32(1.7730504)
    assert as_f32(res[1].score) == as_f32(1.7730504)


def test_multi_property_idf_is_shared_within_a_group_only() -> None:
    titles = [word_tokens(t) for t in JOURNEY_TITLES]
    descs = [word_tokens(d) for d in JOURNEY_DESCRIPTIONS]
    shared = bm25_multi_property(["journey"], [PropertyTokens(titles), PropertyTokens(descs)])
    split = bm25_multi_property(["journey"], [PropertyTokens(titles, group="x"), PropertyTokens(descs, group="y")])
    # df: title 6, description 5 -> shared n = (6 + 5) // 2 = 5; split uses 6 for titles.
    assert shared[4] != split[4]
    only_desc = bm25_scores(["journey"], descs)
    only_title_shared_idf = bm25_multi_property(
        ["journey"], [PropertyTokens(titles), PropertyTokens([[] for _ in descs])]
    )
    assert only_title_shared_idf[4] == bm25_scores(["journey"], titles)[4]
    assert shared[3] == only_desc[3]  # doc 3 has no "journey" in its title; idf of n=5 as description alone


def test_bm25_n_counts_documents_without_tokens_but_avgdl_does_not() -> None:
    docs: list[list[str] | None] = [["tea"], ["tea", "green"], ["coffee"]]
    with_empty = [*docs, None, []]
    base = bm25_scores(["tea"], docs)
    grown = bm25_scores(["tea"], with_empty)
    assert set(grown) == {0, 1}
    assert grown[0] > base[0]  # larger N -> larger idf, same avgdl
    assert average_length([1, 2, 1, 0, 0]) == average_length([1, 2, 1]) == 4 / 3
    assert bm25_scores(["tea"], docs, n_docs=5) == grown


def test_bm25_query_multiplicity_multiplies_idf() -> None:
    docs = [word_tokens(d) for d in JOURNEY_DESCRIPTIONS]
    once = bm25_scores(["journey"], docs)
    twice = bm25_scores(["journey", "journey"], docs)
    assert query_term_counts(["journey", "x", "journey"]) == {"journey": 2, "x": 1}
    for d, s in once.items():
        assert twice[d] == float(np.float32(2 * s))


def test_bm25_idf_formula() -> None:
    assert bm25_idf(10, 5) == pytest.approx(np.log(1 + 5.5 / 5.5))
    assert bm25_idf(3, 7) == pytest.approx(np.log(1 + 0.5 / 7.5))  # max(N, n)
    assert bm25_idf(10, 5, 3) == pytest.approx(3 * bm25_idf(10, 5))
    assert Bm25Params().k1 == 1.2000000476837158
    assert Bm25Params().b == 0.75


def test_bm25_operator_is_or_and_empty_query_has_no_hits() -> None:
    docs = [["apple"], ["pear"], ["plum"]]
    assert set(bm25_scores(["apple", "pear", "kiwi"], docs)) == {0, 1}
    assert bm25_scores([], docs) == {}


def test_bm25_accumulate_equals_reference() -> None:
    docs = [word_tokens(d) for d in JOURNEY_DESCRIPTIONS + COMPLEX_DOCUMENTS]
    query = word_tokens("journey about the business journey")
    ref = bm25_scores(query, docs)
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for term in set(query):
        rows = [i for i, d in enumerate(docs) if term in d]
        postings[term] = (np.array(rows, dtype=np.int64), np.array([docs[i].count(term) for i in rows], dtype=float))
    lengths = np.array([len(d) for d in docs], dtype=np.float64)
    scores, hit = bm25_accumulate(
        query_term_counts(query), postings, lengths, n_docs=len(docs), avgdl=average_length(len(d) for d in docs)
    )
    assert set(np.flatnonzero(hit).tolist()) == set(ref)
    for i, s in ref.items():
        assert float(scores[i]) == s


def test_rank_keyword_orders_by_score_then_id() -> None:
    res = rank_keyword({"b": 1.0, "a": 1.0, "c": 3.0})
    assert [c.id for c in res] == ["c", "a", "b"]


# ---------------------------------------------------------------------------------------------
# Hybrid pipeline (weaviate.md §1.9)
# ---------------------------------------------------------------------------------------------

VEC = [VectorCandidate("v1", 0.1), VectorCandidate("both", 0.2), VectorCandidate("v3", 0.6)]
KW = [KeywordCandidate("k1", 5.0), KeywordCandidate("both", 3.0), KeywordCandidate("k3", 1.0)]


def test_alpha_zero_is_pure_bm25() -> None:
    hits = hybrid_fuse(alpha=0.0, vector_leg=VEC, keyword_leg=KW, limit=10)
    assert [h.id for h in hits] == ["k1", "both", "k3"]
    assert [h.score for h in hits] == [1.0, 0.5, 0.0]
    assert all(h.vector_distance is None for h in hits)
    # Never silently turned into a default alpha: 0.0 differs from Weaviate's 0.75 default.
    default = hybrid_fuse(alpha=0.75, vector_leg=VEC, keyword_leg=KW, limit=10)
    assert [h.id for h in default] != [h.id for h in hits]
    assert hybrid_weights(0.0) == (None, 1.0)


def test_alpha_zero_needs_no_vector() -> None:
    hits = hybrid_fuse(alpha=0.0, vector_leg=None, keyword_leg=KW, limit=2)
    assert [h.id for h in hits] == ["k1", "both"]


def test_alpha_one_is_pure_vector() -> None:
    hits = hybrid_fuse(alpha=1.0, vector_leg=VEC, keyword_leg=KW, limit=10)
    assert [h.id for h in hits] == ["v1", "both", "v3"]
    assert hits[0].score == 1.0
    assert hits[-1].score == 0.0
    assert all(h.keyword_score is None for h in hits)
    assert hybrid_weights(1.0) == (1.0, None)


def test_alpha_above_zero_requires_vector() -> None:
    with pytest.raises(InvalidInputError):
        hybrid_fuse(alpha=0.5, vector_leg=None, keyword_leg=KW)
    with pytest.raises(InvalidInputError):
        hybrid_fuse(alpha=1.5, vector_leg=VEC, keyword_leg=KW)


def test_alpha_travels_as_float32() -> None:
    w_vec, w_kw = hybrid_weights(0.7)
    assert w_vec == float(np.float32(0.7)) == 0.699999988079071
    assert w_kw == 1 - float(np.float32(0.7))


def test_hybrid_both_legs_scores_and_ssv() -> None:
    hits = hybrid_fuse(alpha=0.5, vector_leg=VEC, keyword_leg=KW, limit=10)
    by_id = {h.id: h for h in hits}
    # vector ssv = 1 - dist: 0.9, 0.8, 0.4 -> normalised 1, 0.8, 0; keyword 5, 3, 1 -> 1, 0.5, 0.
    assert by_id["both"].score == pytest.approx(0.5 * 0.8 + 0.5 * 0.5, abs=1e-6)
    assert by_id["both"].ssv == 3.0  # BM25 object replaced the vector object
    assert by_id["both"].leg == 1
    assert by_id["both"].keyword_score == 3.0
    assert by_id["both"].vector_distance == float(np.float32(0.2))
    assert [h.id for h in hits][:2] == ["both", "k1"]  # 0.65 > 0.5 (v1 and k1 tie at 0.5)
    # v1 (ssv 0.9) vs k1 (ssv 5.0) tie on score 0.5: larger ssv first.
    assert [h.id for h in hits][1:3] == ["k1", "v1"]


def test_empty_keyword_leg_scales_vector_by_alpha() -> None:
    hits = hybrid_fuse(alpha=0.3, vector_leg=VEC, keyword_leg=[], limit=10)
    assert max(h.score for h in hits) == float(np.float32(np.float32(0.3) * np.float32(1.0)))
    assert [h.id for h in hits] == ["v1", "both", "v3"]


def test_no_candidates_gives_nothing() -> None:
    assert hybrid_fuse(alpha=0.5, vector_leg=[], keyword_leg=[], limit=10) == []
    assert hybrid_fuse(alpha=0.5, vector_leg=[], keyword_leg=[], fusion="ranked", limit=10) == []


def test_max_vector_distance_truncates_and_intersects() -> None:
    hits = hybrid_fuse(alpha=0.5, vector_leg=VEC, keyword_leg=KW, limit=10, max_vector_distance=0.2)
    # Vector leg keeps v1 and both (dist <= 0.2); keyword-only hits k1 and k3 are dropped.
    assert {h.id for h in hits} == {"v1", "both"}
    cut_all = hybrid_fuse(alpha=0.5, vector_leg=VEC, keyword_leg=KW, limit=10, max_vector_distance=0.05)
    assert cut_all == []
    # With alpha 0 there is no vector leg, so the threshold does not filter BM25 hits.
    kw_only = hybrid_fuse(alpha=0.0, vector_leg=VEC, keyword_leg=KW, limit=10, max_vector_distance=0.05)
    assert [h.id for h in kw_only] == ["k1", "both", "k3"]


def test_max_vector_distance_is_a_prefix_cut() -> None:
    unsorted_tail = [VectorCandidate("a", 0.1), VectorCandidate("b", 0.5), VectorCandidate("c", 0.2)]
    hits = hybrid_fuse(alpha=1.0, vector_leg=unsorted_tail, keyword_leg=None, limit=10, max_vector_distance=0.3)
    assert [h.id for h in hits] == ["a"]


def test_per_leg_candidate_limit_and_offset() -> None:
    kw = [KeywordCandidate(f"d{i:03d}", 1000.0 - i) for i in range(150)]
    assert candidate_limit(10) == 100
    assert candidate_limit(120) == 120
    # Offset is not added to the candidate limit: only 100 candidates exist for limit 10.
    page = hybrid_fuse(alpha=0.0, vector_leg=None, keyword_leg=kw, limit=10, offset=95)
    assert [h.id for h in page] == [f"d{i:03d}" for i in range(95, 100)]
    # The minimum of the leg (rank 99) normalises to 0.
    assert page[-1].score == 0.0
    wide = hybrid_fuse(alpha=0.0, vector_leg=None, keyword_leg=kw, limit=120)
    assert len(wide) == 120
    assert wide[-1].id == "d119"


def test_ranked_fusion_in_hybrid() -> None:
    hits = hybrid_fuse(alpha=0.5, vector_leg=VEC, keyword_leg=KW, fusion="ranked", limit=10)
    by_id = {h.id: h for h in hits}
    assert by_id["both"].score == float(np.float32(np.float32(0.5 / 61) + np.float32(0.5 / 61)))
    assert hits[0].id == "both"
    assert len(hits) == 5


def test_autocut_in_hybrid() -> None:
    vec = [VectorCandidate(f"d{i}", d) for i, d in enumerate([0.0, 0.01, 0.02, 0.5, 0.51, 0.52])]
    hits = hybrid_fuse(alpha=1.0, vector_leg=vec, keyword_leg=None, limit=10, auto_limit=1)
    assert [h.id for h in hits] == ["d0", "d1", "d2"]
    assert len(hybrid_fuse(alpha=1.0, vector_leg=vec, keyword_leg=None, limit=10)) == 6


# ---------------------------------------------------------------------------------------------
# The vectorised fusion equals a literal scalar transcription of hybrid_fusion.go
# ---------------------------------------------------------------------------------------------


def _scalar_less(a: tuple[np.float32, np.float32, str], b: tuple[np.float32, np.float32, str]) -> bool:
    d = float(np.float32(b[0] - a[0]))
    if d * d < 1e-14:
        d2 = float(np.float32(b[1] - a[1]))
        if d2 * d2 < 1e-14:
            return a[2] < b[2]
        return bool(a[1] > b[1])
    return bool(a[0] > b[0])


def _scalar_fusion(kind: str, weights: list[float], sets: list[list[LegHit]]) -> list[tuple[str, float, float]]:
    fused: dict[str, tuple[np.float32, np.float32, str]] = {}
    for i, results in enumerate(sets):
        ssvs = [np.float32(r.ssv) for r in results]
        hi = max(ssvs) if ssvs else np.float32(0)
        lo = min(ssvs) if ssvs else np.float32(0)
        w = np.float32(weights[i])
        for j, (r, v) in enumerate(zip(results, ssvs, strict=True)):
            if kind == "relative":
                s = w if hi == lo else np.float32(w * np.float32(np.float32(v - lo) / np.float32(hi - lo)))
            else:
                s = np.float32(weights[i] / float(j + 60))
            if r.id in fused:
                s = np.float32(s + fused[r.id][0])
            fused[r.id] = (s, v, r.id)
    items = list(fused.values())

    def cmp(a: tuple[np.float32, np.float32, str], b: tuple[np.float32, np.float32, str]) -> int:
        return -1 if _scalar_less(a, b) else (1 if _scalar_less(b, a) else 0)

    return [(i, float(s), float(v)) for s, v, i in sorted(items, key=functools.cmp_to_key(cmp))]


@pytest.mark.parametrize("kind", ["relative", "ranked"])
def test_vectorised_fusion_equals_scalar_transcription(kind: str) -> None:
    rng = np.random.default_rng(11)
    base = np.float32(0.4)
    palette = [0.1, 0.25, 0.5, 0.75, 1.0, float(base), float(np.nextafter(base, np.float32(1))), 3.0, 7.5]
    for _ in range(400):
        n_sets = int(rng.integers(1, 4))
        weights = [float(w) for w in rng.uniform(0.05, 1.0, size=n_sets)]
        pool = [f"id{j:02d}" for j in range(int(rng.integers(1, 25)))]
        sets = []
        for _s in range(n_sets):
            chosen = rng.choice(pool, size=int(rng.integers(0, len(pool) + 1)), replace=False)
            sets.append([LegHit(str(c), float(rng.choice(palette))) for c in chosen])
        fusion = relative_score_fusion if kind == "relative" else ranked_fusion
        got = [(h.id, h.score, h.ssv) for h in fusion(weights, sets)]
        if kind == "relative" and (not sets[0] and (len(sets) == 1 or not sets[1])):
            assert got == []
            continue
        assert got == _scalar_fusion(kind, weights, sets)
