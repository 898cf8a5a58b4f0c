"""Benchmark metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.metrics import (
    all_at_k,
    bootstrap_ci,
    flatten,
    lme_dcg,
    lme_evaluate,
    lme_session,
    lme_turn2session,
    mean,
    ndcg_at_k,
    recall_at_k,
    session_recall_at_k,
)

# ranking: a, x, b, y, c  (gold a, b, c)
RANKING = [{"a"}, {"x"}, {"b"}, {"y"}, {"c"}]
GOLD = {"a", "b", "c"}


def test_recall_at_k_hand_values() -> None:
    assert recall_at_k(RANKING, GOLD, 1) == pytest.approx(1 / 3)
    assert recall_at_k(RANKING, GOLD, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKING, GOLD, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RANKING, GOLD, 5) == pytest.approx(1.0)
    assert recall_at_k(RANKING, GOLD, 50) == pytest.approx(1.0)
    assert recall_at_k([], GOLD, 10) == 0.0


def test_all_at_k() -> None:
    assert all_at_k(RANKING, GOLD, 4) == 0.0
    assert all_at_k(RANKING, GOLD, 5) == 1.0
    assert all_at_k(RANKING, {"a"}, 1) == 1.0


def test_ndcg_at_k_hand_values() -> None:
    # DCG@5 = 1/log2(2) + 1/log2(4) + 1/log2(6); IDCG@5 = 1 + 1/log2(3) + 1/log2(4)
    dcg = 1.0 + 0.5 + 1 / math.log2(6)
    idcg = 1.0 + 1 / math.log2(3) + 0.5
    assert ndcg_at_k(RANKING, GOLD, 5) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(RANKING, GOLD, 5) == pytest.approx(0.8854598815714874)
    # k=1: one relevant hit at rank 1, ideal also one
    assert ndcg_at_k(RANKING, GOLD, 1) == pytest.approx(1.0)
    # k=2: DCG 1, IDCG 1 + 1/log2(3)
    assert ndcg_at_k(RANKING, GOLD, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    # single gold at rank 3
    assert ndcg_at_k([{"x"}, {"y"}, {"g"}], {"g"}, 10) == pytest.approx(0.5)
    assert ndcg_at_k([{"x"}], {"g"}, 10) == 0.0


def test_multi_id_hits_count_once() -> None:
    # a derived memory with provenance {a, b} covers both gold ids at rank 1
    ranking = [{"a", "b"}, {"a"}, {"c"}]
    assert recall_at_k(ranking, GOLD, 1) == pytest.approx(2 / 3)
    assert all_at_k(ranking, GOLD, 3) == 1.0
    # gains: rank1 = 1 (new gold), rank2 = 0 (a already covered), rank3 = 1
    assert ndcg_at_k(ranking, GOLD, 3) == pytest.approx((1 + 0.5) / (1 + 1 / math.log2(3) + 0.5))
    assert ndcg_at_k(ranking, GOLD, 3) <= 1.0
    assert flatten(ranking) == ["a", "b", "c"]


def test_session_recall() -> None:
    session_of = {"a": "s1", "x": "s1", "b": "s2", "y": "s3", "c": "s4"}
    assert session_recall_at_k(RANKING, {"s1", "s2"}, session_of, 1) == 0.5
    assert session_recall_at_k(RANKING, {"s1", "s2"}, session_of, 3) == 1.0
    # x is not gold but lives in a gold session
    assert session_recall_at_k([{"x"}], {"s1"}, session_of, 1) == 1.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(RANKING, GOLD, 0)
    with pytest.raises(ValueError, match="gold set is empty"):
        ndcg_at_k(RANKING, set(), 3)


def test_lme_dcg_matches_official_formula() -> None:
    # official: rel[0] + sum(rel[1:] / log2(arange(2, n + 1)))
    assert lme_dcg([1, 1, 1], 3) == pytest.approx(1 + 1 / math.log2(2) + 1 / math.log2(3))
    assert lme_dcg([0, 1], 10) == pytest.approx(1.0)
    assert lme_dcg([], 5) == 0.0
    assert lme_dcg([1, 0, 0, 1], 3) == pytest.approx(1.0)


def test_lme_evaluate_hand_values() -> None:
    corpus = ["t1", "t2", "t3", "t4", "t5"]
    gold = {"t2", "t4"}
    ranked = ["t3", "t2", "t1", "t4", "t5"]
    any1, all1, nd1 = lme_evaluate(ranked, gold, corpus, 1)
    assert (any1, all1, nd1) == (0.0, 0.0, 0.0)
    any2, all2, nd2 = lme_evaluate(ranked, gold, corpus, 2)
    # actual rel [0, 1] -> 0 + 1/log2(2) = 1; ideal [1, 1] -> 2
    assert (any2, all2) == (1.0, 0.0)
    assert nd2 == pytest.approx(0.5)
    any4, all4, nd4 = lme_evaluate(ranked, gold, corpus, 4)
    # actual [0,1,0,1] -> 1 + 1/log2(4) = 1.5; ideal [1,1,0,0] -> 2
    assert (any4, all4) == (1.0, 1.0)
    assert nd4 == pytest.approx(0.75)


def test_lme_turn2session_effective_k() -> None:
    # turns t1..t4 in session A, t5 in B, t6 in C. Gold turn t5 (session B).
    session = {"t1": "A", "t2": "A", "t3": "A", "t4": "A", "t5": "B", "t6": "C"}
    corpus = list(session)
    ranked = ["t1", "t2", "t3", "t5", "t4", "t6"]
    # k=2 distinct sessions needs the first 4 turns (A, A, A, B): effective_k = 4
    any2, all2, nd2 = lme_turn2session(ranked, {"t5"}, corpus, 2, session.__getitem__)
    assert (any2, all2) == (1.0, 1.0)
    # mapped ranked [A, A, A, B] vs gold {B}: B at index 3 -> 1/log2(4) = 0.5; ideal = 1
    assert nd2 == pytest.approx(0.5)
    any1, all1, _ = lme_turn2session(ranked, {"t5"}, corpus, 1, session.__getitem__)
    assert (any1, all1) == (0.0, 0.0)


def test_lme_session_dedups() -> None:
    session = {"t1": "A", "t2": "A", "t3": "B", "t4": "C"}
    ranked = ["t1", "t2", "t4", "t3"]
    any1, all1, nd1 = lme_session(ranked, {"B"}, list(session), 1, session)
    assert (any1, all1, nd1) == (0.0, 0.0, 0.0)
    # sessions in order: A, C, B -> B at rank 3: dcg = 1/log2(3), ideal = 1
    any3, all3, nd3 = lme_session(ranked, {"B"}, list(session), 3, session)
    assert (any3, all3) == (1.0, 1.0)
    assert nd3 == pytest.approx(1 / math.log2(3))


def test_mean() -> None:
    assert mean([1.0, 0.0, 0.5]) == pytest.approx(0.5)
    assert math.isnan(mean([]))


def test_bootstrap_interval_holds_the_mean_narrows_with_more_questions_and_repeats() -> None:
    few = [1.0, 0.0] * 23  # 46 questions, as LongMemEval's dev file
    many = [1.0, 0.0] * 230
    lo, hi = bootstrap_ci(few)
    assert lo < 0.5 < hi and hi - lo > 0.2
    lo2, hi2 = bootstrap_ci(many)
    assert lo2 < 0.5 < hi2 and hi2 - lo2 < (hi - lo) / 2
    assert bootstrap_ci(few) == (lo, hi)  # seeded
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    with pytest.raises(ValueError):
        bootstrap_ci(few, level=1.0)
