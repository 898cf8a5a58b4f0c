"""The numpy fast paths of :mod:`hybrid_memory.ranking` order exactly like the plain Python sorts.

Each test compares a fast path with a straightforward reference written here (the formulation
the module used before the fast paths): Python's ``sorted`` on ``(key, id)`` tuples, and Python's
``sorted`` with Weaviate's epsilon comparator (:func:`hybrid_memory.ranking._compare`) when near
ties exist. Inputs are built to contain exact ties, 1-ulp neighbours (near ties) and duplicates.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence

import numpy as np
import pytest

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.ranking import (
    FusedHit,
    KeywordCandidate,
    VectorCandidate,
    _compare,
    _compare_matrix,
    _has_near_ties,
    _order,
    fusion_order,
    hybrid_fuse,
    hybrid_fuse_legs,
    order_by_key_then_id,
)


def reference_order(ids: Sequence[str], score: np.ndarray, ssv: np.ndarray) -> list[int]:
    """Weaviate's comparator order as the module computed it before the numpy fast path."""
    sc = score.tolist()
    sv = ssv.tolist()
    if _has_near_ties(score, ssv):
        items = [(sc[i], sv[i], ids[i]) for i in range(len(sc))]
        return sorted(range(len(items)), key=functools.cmp_to_key(lambda i, j: _compare(items[i], items[j])))
    return sorted(range(len(sc)), key=lambda i: (-sc[i], -sv[i], ids[i]))


def tricky_scores(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 scores and ssv with exact ties, 1-ulp neighbours and ordinary values."""
    base = rng.choice(np.linspace(0, 1, 7, dtype=np.float32), size=n).astype(np.float32)
    kind = rng.integers(0, 3, size=n)
    score = np.where(kind == 0, base, np.where(kind == 1, np.nextafter(base, np.float32(2)), rng.random(n)))
    ssv = rng.choice(np.array([0.5, 1.0, 2.0, 3.25], dtype=np.float32), size=n)
    ssv = np.where(rng.random(n) < 0.2, np.nextafter(ssv, np.float32(9)), ssv)
    return score.astype(np.float32), ssv.astype(np.float32)


def ids_for(rng: np.random.Generator, n: int) -> list[str]:
    return [str(uuid.UUID(int=int(x))) for x in rng.integers(0, 2**62, size=n)]


@pytest.mark.parametrize("seed", range(40))
def test_order_by_key_then_id_equals_tuple_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 150))
    key = rng.integers(0, 6, size=n).astype(np.float32) / np.float32(3)
    ids = [f"id-{int(x):03d}" for x in rng.integers(0, 40, size=n)]  # duplicates included
    expected = sorted(range(n), key=lambda i: (float(key[i]), ids[i]))
    assert order_by_key_then_id(key, ids) == expected


def test_order_by_key_then_id_keeps_position_order_for_equal_key_and_id() -> None:
    key = np.array([1.0, 0.0, 1.0, 1.0], dtype=np.float32)
    assert order_by_key_then_id(key, ["b", "z", "a", "b"]) == [1, 2, 0, 3]


@pytest.mark.parametrize("seed", range(60))
def test_order_equals_reference_with_ties_and_near_ties(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(0, 220))
    score, ssv = tricky_scores(rng, n)
    ids = ids_for(rng, n)
    assert _order(ids, score, ssv) == reference_order(ids, score, ssv)


def test_order_takes_both_paths() -> None:
    """The fixtures exercise the comparator path and the lexicographic path."""
    rng = np.random.default_rng(7)
    near = 0
    for _ in range(40):
        score, ssv = tricky_scores(rng, 120)
        near += _has_near_ties(score, ssv)
    assert near > 0
    score = np.array([0.5, 0.5, 0.25, 0.25], dtype=np.float32)
    ssv = np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32)
    assert not _has_near_ties(score, ssv)
    assert _order(["d", "c", "b", "a"], score, ssv) == [1, 0, 3, 2]


@pytest.mark.parametrize("seed", range(10))
def test_order_with_duplicate_ids_equals_reference(seed: int) -> None:
    rng = np.random.default_rng(500 + seed)
    n = 80
    score, ssv = tricky_scores(rng, n)
    ids = [f"dup-{int(x)}" for x in rng.integers(0, 20, size=n)]
    assert _order(ids, score, ssv) == reference_order(ids, score, ssv)


@pytest.mark.parametrize("seed", range(5))
def test_compare_matrix_equals_pairwise_compare(seed: int) -> None:
    rng = np.random.default_rng(900 + seed)
    n = 60
    score, ssv = tricky_scores(rng, n)
    ids = ids_for(rng, n)
    table = _compare_matrix(ids, score, ssv)
    sc, sv = score.tolist(), ssv.tolist()
    for i in range(n):
        for j in range(n):
            assert table[i][j] == _compare((sc[i], sv[i], ids[i]), (sc[j], sv[j], ids[j]))


def test_fusion_order_public_wrapper_uses_the_same_order() -> None:
    rng = np.random.default_rng(3)
    score, ssv = tricky_scores(rng, 50)
    ids = ids_for(rng, 50)
    hits = [FusedHit(ids[i], float(score[i]), float(ssv[i]), 0) for i in range(50)]
    assert [h.id for h in fusion_order(hits)] == [ids[i] for i in reference_order(ids, score, ssv)]


def random_legs(
    rng: np.random.Generator, n_docs: int
) -> tuple[list[VectorCandidate], list[KeywordCandidate], list[str]]:
    ids = ids_for(rng, n_docs)
    vec_rows = rng.permutation(n_docs)[: int(rng.integers(0, min(n_docs, 130) + 1))]
    dist = np.sort(rng.choice(np.linspace(0.1, 1.2, 30, dtype=np.float32), size=vec_rows.size)).astype(np.float32)
    vec = sorted(
        (VectorCandidate(ids[r], float(d)) for r, d in zip(vec_rows.tolist(), dist.tolist(), strict=True)),
        key=lambda c: (c.distance, c.id),
    )
    kw_rows = rng.permutation(n_docs)[: int(rng.integers(0, min(n_docs, 130) + 1))]
    bm25 = rng.choice(np.array([0.7, 1.3, 2.2, 4.1], dtype=np.float32), size=kw_rows.size)
    kw = sorted(
        (KeywordCandidate(ids[r], float(s)) for r, s in zip(kw_rows.tolist(), bm25.tolist(), strict=True)),
        key=lambda c: (-c.score, c.id),
    )
    return vec, kw, ids


@pytest.mark.parametrize("seed", range(30))
def test_hybrid_fuse_legs_equals_hybrid_fuse(seed: int) -> None:
    rng = np.random.default_rng(2000 + seed)
    vec, kw, _ = random_legs(rng, int(rng.integers(1, 260)))
    alpha = float(rng.choice([0.0, 0.25, 0.4, 0.75, 1.0]))
    fusion = "ranked" if seed % 4 == 0 else "relative"
    limit = int(rng.integers(1, 40))
    offset = int(rng.integers(0, 5))
    mvd = None if seed % 3 else 0.7
    auto = 1 if seed % 5 == 0 else 0
    expected = hybrid_fuse(
        alpha=alpha,
        vector_leg=vec,
        keyword_leg=kw,
        fusion=fusion,
        limit=limit,
        offset=offset,
        max_vector_distance=mvd,
        auto_limit=auto,
    )
    got = hybrid_fuse_legs(
        alpha=alpha,
        vector_ids=[c.id for c in vec],
        vector_distances=np.array([c.distance for c in vec], dtype=np.float32),
        keyword_ids=[c.id for c in kw],
        keyword_scores=np.array([c.score for c in kw], dtype=np.float32),
        fusion=fusion,
        limit=limit,
        offset=offset,
        max_vector_distance=mvd,
        auto_limit=auto,
    )
    assert got == expected


def test_hybrid_fuse_legs_checks_lengths_and_vector() -> None:
    f32 = np.array([0.1], dtype=np.float32)
    with pytest.raises(InvalidInputError):
        hybrid_fuse_legs(alpha=0.5, vector_ids=None, vector_distances=None, keyword_ids=["a"], keyword_scores=f32)
    with pytest.raises(InvalidInputError):
        hybrid_fuse_legs(alpha=0.5, vector_ids=["a", "b"], vector_distances=f32, keyword_ids=[], keyword_scores=f32[:0])
    with pytest.raises(InvalidInputError):
        hybrid_fuse_legs(alpha=0.0, vector_ids=None, vector_distances=None, keyword_ids=["a", "b"], keyword_scores=f32)


def test_hybrid_fuse_legs_same_id_twice_in_a_leg_sums_like_the_reference() -> None:
    vec = [VectorCandidate("a", 0.1), VectorCandidate("a", 0.2), VectorCandidate("b", 0.3)]
    kw = [KeywordCandidate("b", 2.0), KeywordCandidate("b", 1.0), KeywordCandidate("c", 0.5)]
    got = hybrid_fuse_legs(
        alpha=0.5,
        vector_ids=["a", "a", "b"],
        vector_distances=np.array([0.1, 0.2, 0.3], dtype=np.float32),
        keyword_ids=["b", "b", "c"],
        keyword_scores=np.array([2.0, 1.0, 0.5], dtype=np.float32),
        limit=5,
    )
    assert got == hybrid_fuse(alpha=0.5, vector_leg=vec, keyword_leg=kw, limit=5)
    assert [h.id for h in got] == ["a", "b", "c"]
    assert got[0].score == pytest.approx(0.75)  # 0.5 * 1.0 + 0.5 * 0.5 (both entries of "a")


@pytest.mark.parametrize("seed", range(30))
def test_order_equals_reference_with_exact_ties_only(seed: int) -> None:
    """The lexicographic fast path (no near ties) with many exactly equal (score, ssv) runs."""
    rng = np.random.default_rng(3000 + seed)
    n = int(rng.integers(2, 220))
    score = rng.choice(np.linspace(0, 1, 9, dtype=np.float32), size=n).astype(np.float32)
    ssv = rng.choice(np.array([0.5, 1.0, 2.0], dtype=np.float32), size=n).astype(np.float32)
    ids = ids_for(rng, n)
    assert not _has_near_ties(score, ssv)
    assert _order(ids, score, ssv) == reference_order(ids, score, ssv)
