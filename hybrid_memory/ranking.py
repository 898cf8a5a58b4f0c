"""Weaviate-exact ranking maths: BM25 (BlockMax path), hybrid fusion and autocut.

Pure functions, no IO. :class:`~hybrid_memory.stores.local.LocalStore` ranks with them so that a
search means the same thing on the embedded store as on Weaviate v1.39 (``weaviate.md`` §1, §2):
``alpha`` 1.0 = pure vector, 0.0 = pure keyword (BM25).

**BM25** (``weaviate.md`` §2.2, BlockMax-WAND path, the default for new collections)::

    k1, b     = float64(float32(k1_cfg)), float64(float32(b_cfg))      # 1.2, 0.75 by default
    idf(t)    = ln(1 + (max(N, n) - n + 0.5) / (n + 0.5)) * dup(t)     # dup = count of t in query
    score_p   = sum_t idf(t) * tf / (tf + k1 * ((1 - b) + b * dl / avgdl)) * boost_p   (float64)
    score     = sum_p float32(score_p)                                              (float32)

``N`` counts every live object of the partition (also those without tokens), ``n`` is the
*unfiltered* document frequency, ``dl`` counts every token (stopwords too) and ``avgdl`` is the
mean over documents with at least one token. Filters restrict the candidates, never the
statistics. The operator is OR (a document matching any query term is a hit); results are
ordered by score descending, then id (UUID string) ascending.

**Hybrid fusion** (``weaviate.md`` §1.9): the vector leg (weight ``alpha``) is fused first, the
keyword leg (weight ``1 - alpha``) second; each leg holds at most ``max(100, limit)``
candidates; ``max_vector_distance`` truncates the vector leg and restricts the keyword leg to
the surviving ids; relativeScoreFusion min-max normalises each leg, rankedFusion adds
``w / (rank + 60)``. Every Go ``float32`` operation is emulated with :class:`numpy.float32`
scalars, and ties are broken with Weaviate's epsilon comparator (score, then the secondary sort
value, then the id).

Example:
    >>> from hybrid_memory.ranking import KeywordCandidate, VectorCandidate, hybrid_fuse
    >>> hits = hybrid_fuse(
    ...     alpha=0.5,
    ...     vector_leg=[VectorCandidate("a", 0.1), VectorCandidate("b", 0.3)],
    ...     keyword_leg=[KeywordCandidate("b", 2.0), KeywordCandidate("c", 1.0)],
    ...     limit=3,
    ... )
    >>> [(h.id, h.score) for h in hits]
    [('b', 0.5), ('a', 0.5), ('c', 0.0)]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import InvalidInputError

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "HYBRID_MAXIMUM_RESULTS",
    "QUERY_MAXIMUM_RESULTS",
    "RANKED_FUSION_K",
    "Bm25Params",
    "FusedHit",
    "KeywordCandidate",
    "LegHit",
    "PropertyTokens",
    "VectorCandidate",
    "autocut",
    "average_length",
    "bm25_accumulate",
    "bm25_idf",
    "bm25_multi_property",
    "bm25_scores",
    "bm25_term_score",
    "candidate_limit",
    "cosine_distance",
    "f32",
    "fusion_order",
    "hybrid_fuse",
    "hybrid_fuse_legs",
    "hybrid_weights",
    "order_by_key_then_id",
    "query_term_counts",
    "rank_keyword",
    "ranked_fusion",
    "relative_score_fusion",
]

#: Weaviate's ``QUERY_HYBRID_MAXIMUM_RESULTS`` default: candidates fetched per hybrid leg.
HYBRID_MAXIMUM_RESULTS = 100
#: Weaviate's ``QUERY_MAXIMUM_RESULTS`` default: results after fusion are capped at this.
QUERY_MAXIMUM_RESULTS = 10_000
#: rankedFusion's constant (hard-coded 60 in ``hybrid_fusion.go``).
RANKED_FUSION_K = 60
#: BM25 defaults of a Weaviate collection.
DEFAULT_K1 = 1.2
DEFAULT_B = 0.75
#: Weaviate's tie threshold: two float32 scores are equal when ``(a - b)**2 < 1e-14``.
_TIE_EPSILON_SQ = 1e-14

_F32_ZERO = np.float32(0.0)
_F32_ONE = np.float32(1.0)


def f32(x: float | np.floating[Any]) -> np.float32:
    """Round ``x`` to the nearest float32, like Go's ``float32(x)``.

    Example:
        >>> float(f32(0.1))
        0.10000000149011612
    """
    out: np.float32 = np.float32(float(x))
    return out


# ----------------------------------------------------------------------------------------------
# BM25
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bm25Params:
    """BM25 parameters as Weaviate holds them: configured as float32, used as float64.

    Example:
        >>> Bm25Params().k1
        1.2000000476837158
    """

    k1_config: float = DEFAULT_K1
    b_config: float = DEFAULT_B

    def __post_init__(self) -> None:
        for name in ("k1_config", "b_config"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InvalidInputError(f"{name} must be a finite non-negative number, got {v!r}")

    @property
    def k1(self) -> float:
        """``float64(float32(k1))``."""
        return float(np.float32(self.k1_config))

    @property
    def b(self) -> float:
        """``float64(float32(b))``."""
        return float(np.float32(self.b_config))


_DEFAULT_PARAMS = Bm25Params()


def query_term_counts(tokens: Iterable[str]) -> dict[str, int]:
    """Unique query terms (first-seen order) with their multiplicity in the query.

    Weaviate scores a term once and multiplies its idf by how often it occurs in the query.

    Example:
        >>> query_term_counts(["a", "b", "a"])
        {'a': 2, 'b': 1}
    """
    counts: dict[str, int] = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    return counts


def bm25_idf(n_docs: int, df: int, multiplicity: int = 1) -> float:
    """Inverse document frequency ``ln(1 + (max(N, n) - n + 0.5) / (n + 0.5)) * multiplicity``.

    Args:
        n_docs: ``N``, live objects in the partition (documents without tokens count too).
        df: ``n``, documents containing the term (unfiltered).
        multiplicity: How often the term occurs in the query.

    Example:
        >>> round(bm25_idf(10, 5), 6)
        0.693147
    """
    n_big = max(n_docs, df)
    return math.log(1.0 + (n_big - df + 0.5) / (df + 0.5)) * multiplicity


def bm25_term_score(
    tf: float, dl: float, avgdl: float, idf: float, *, params: Bm25Params = _DEFAULT_PARAMS, boost: float = 1.0
) -> float:
    """One term's contribution to one property of one document (float64, Weaviate's order of ops).

    Example:
        >>> round(bm25_term_score(1, 4, 4.0, 1.0), 6)
        0.454545
    """
    k1, b = params.k1, params.b
    tf_norm = tf / (tf + k1 * ((1 - b) + b * (dl / avgdl)))
    return tf_norm * idf * boost


def average_length(lengths: Iterable[int]) -> float:
    """``avgdl``: mean token count over the documents that have at least one token (0.0 if none)."""
    total = 0
    count = 0
    for n in lengths:
        if n > 0:
            total += n
            count += 1
    return total / count if count else 0.0


def bm25_scores(
    query_tokens: Sequence[str],
    documents: Sequence[Sequence[str] | None],
    *,
    n_docs: int | None = None,
    params: Bm25Params = _DEFAULT_PARAMS,
    boost: float = 1.0,
) -> dict[int, float]:
    """Reference BM25 of one searched property over a whole partition.

    Args:
        query_tokens: Analysed query terms (duplicates count, see :func:`query_term_counts`).
        documents: Every document of the partition as its token list (``None`` or ``[]`` for a
            document without this property). Statistics are computed over all of them.
        n_docs: ``N``; defaults to ``len(documents)``.
        params: k1 and b.
        boost: The property boost (``"content^2"`` → 2).

    Returns:
        ``{document index: float32 score}`` for every document matching at least one term.

    Example:
        >>> docs = [["green", "tea"], ["black", "tea", "tea"], ["coffee"]]
        >>> {i: round(s, 4) for i, s in bm25_scores(["green", "tea"], docs).items()}
        {0: 0.6595, 1: 0.2575}
    """
    return bm25_multi_property(query_tokens, [PropertyTokens(documents, boost)], n_docs=n_docs, params=params)


@dataclass(frozen=True)
class PropertyTokens:
    """One searched property: the token list of every document, a boost and a tokenisation group.

    Properties with the same ``group`` (tokenization + stopword settings in Weaviate) share their
    idf: ``n = floor(sum of df / number of properties where df > 0)``.
    """

    documents: Sequence[Sequence[str] | None]
    boost: float = 1.0
    group: str = "word"


def bm25_multi_property(
    query_tokens: Sequence[str],
    properties: Sequence[PropertyTokens],
    *,
    n_docs: int | None = None,
    params: Bm25Params = _DEFAULT_PARAMS,
) -> dict[int, float]:
    """BM25 over several properties, each scored independently and summed (``weaviate.md`` §2.2).

    Each property has its own ``dl``/``avgdl``; the idf of a term is shared inside a tokenisation
    group; per-property scores are rounded to float32 and summed in float32 (property order).

    Args:
        query_tokens: Analysed query terms.
        properties: The searched properties; all must list the same documents.
        n_docs: ``N``; defaults to the number of documents.
        params: k1 and b.

    Returns:
        ``{document index: float32 score}`` for documents matching any term in any property.

    Raises:
        InvalidInputError: properties of different lengths, or no properties.
    """
    if not properties:
        raise InvalidInputError("at least one property must be searched")
    n_rows = len(properties[0].documents)
    if any(len(p.documents) != n_rows for p in properties):
        raise InvalidInputError("every property must list the same documents")
    big_n = n_rows if n_docs is None else n_docs
    q = query_term_counts(query_tokens)

    # Per-property statistics.
    tfs: list[list[dict[str, int]]] = []
    lengths: list[list[int]] = []
    dfs: list[dict[str, int]] = []
    for prop in properties:
        per_doc = [query_term_counts(toks or ()) for toks in prop.documents]
        tfs.append(per_doc)
        lengths.append([len(toks or ()) for toks in prop.documents])
        dfs.append({t: sum(1 for c in per_doc if t in c) for t in q})

    # Shared idf per tokenisation group: integer mean of the non-zero document frequencies.
    idf: list[dict[str, float]] = []
    for prop in properties:
        members = [i for i, p in enumerate(properties) if p.group == prop.group]
        row: dict[str, float] = {}
        for t, dup in q.items():
            nonzero = [dfs[i][t] for i in members if dfs[i][t] > 0]
            if nonzero:
                row[t] = bm25_idf(big_n, sum(nonzero) // len(nonzero), dup)
        idf.append(row)

    totals: dict[int, np.float32] = {}
    for p_idx, prop in enumerate(properties):
        avgdl = average_length(lengths[p_idx])
        for d in range(n_rows):
            counts = tfs[p_idx][d]
            acc = 0.0
            hit = False
            for t in q:
                tf = counts.get(t, 0)
                if tf == 0 or t not in idf[p_idx]:
                    continue
                hit = True
                acc += bm25_term_score(tf, lengths[p_idx][d], avgdl, idf[p_idx][t], params=params, boost=prop.boost)
            if hit:
                totals[d] = np.float32(totals.get(d, _F32_ZERO) + np.float32(acc))
    return {d: float(s) for d, s in totals.items()}


def bm25_accumulate(
    query_counts: Mapping[str, int],
    postings: Mapping[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]],
    doc_lengths: npt.NDArray[np.float64],
    *,
    n_docs: int,
    avgdl: float,
    params: Bm25Params = _DEFAULT_PARAMS,
    boost: float = 1.0,
    cache: MutableMapping[tuple[str, int], npt.NDArray[np.float64]] | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Vectorised single-property BM25 from postings (the store's fast path).

    Same float64 operations in the same order as :func:`bm25_term_score`, so the result equals
    :func:`bm25_scores` on the same partition.

    Args:
        query_counts: Output of :func:`query_term_counts`.
        postings: ``term -> (rows, term frequencies)``; ``len(rows)`` is the unfiltered df.
        doc_lengths: ``dl`` of every row (float64 array of length = number of rows).
        n_docs: ``N`` (usually the number of rows).
        avgdl: Mean ``dl`` over rows with at least one token.
        params: k1 and b.
        boost: Property boost.
        cache: Per-term contributions ``(term, count in query) -> float64 array`` kept between
            calls; the caller must clear it whenever postings, lengths, ``N``, ``avgdl``,
            ``params`` or ``boost`` change.

    Returns:
        ``(float32 scores per row, hit mask per row)``.
    """
    k1, b = params.k1, params.b
    acc = np.zeros(doc_lengths.shape[0], dtype=np.float64)
    hit = np.zeros(doc_lengths.shape[0], dtype=np.bool_)
    for term, dup in query_counts.items():
        entry = postings.get(term)
        if entry is None or entry[0].size == 0:
            continue
        rows, freqs = entry
        contrib = None if cache is None else cache.get((term, dup))
        if contrib is None:
            idf = bm25_idf(n_docs, int(rows.size), dup)
            norm = freqs / (freqs + k1 * ((1 - b) + b * (doc_lengths[rows] / avgdl)))
            contrib = norm * idf * boost
            if cache is not None:
                cache[(term, dup)] = contrib
        acc[rows] += contrib
        hit[rows] = True
    return acc.astype(np.float32), hit


class KeywordCandidate(NamedTuple):
    """A keyword-leg result: id and BM25 score."""

    id: str
    score: float


class VectorCandidate(NamedTuple):
    """A vector-leg result: id and cosine distance (``max(0, 1 - cos)``)."""

    id: str
    distance: float


def rank_keyword(scores: Mapping[str, float]) -> list[KeywordCandidate]:
    """Order BM25 hits like Weaviate: score descending, then id (UUID string) ascending.

    Example:
        >>> rank_keyword({"b": 1.0, "a": 1.0, "c": 2.0})
        [KeywordCandidate(id='c', score=2.0), KeywordCandidate(id='a', score=1.0), KeywordCandidate(id='b', score=1.0)]
    """
    return [KeywordCandidate(i, s) for i, s in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def cosine_distance(similarity: float) -> float:
    """Weaviate's cosine distance of two unit vectors: ``max(0, 1 - dot)`` in float32."""
    return float(np.maximum(_F32_ZERO, _F32_ONE - np.float32(similarity)))


# ----------------------------------------------------------------------------------------------
# Fusion
# ----------------------------------------------------------------------------------------------


class LegHit(NamedTuple):
    """One entry of a result set given to a fusion function: id and secondary sort value."""

    id: str
    ssv: float


@dataclass(frozen=True)
class FusedHit:
    """A fused result.

    Attributes:
        id: The document id.
        score: The fused score (a float32 value).
        ssv: The secondary sort value of the object kept in the fusion map (the later leg's,
            i.e. the BM25 score when both legs found the document).
        leg: Index of the result set whose object was kept.
        keyword_score: BM25 score when the keyword leg returned the document (hybrid only).
        vector_distance: Cosine distance when the vector leg returned it (hybrid only).
    """

    id: str
    score: float
    ssv: float
    leg: int
    keyword_score: float | None = None
    vector_distance: float | None = None


@dataclass(frozen=True)
class _Fused:
    """Fusion output in map-insertion order: ids, float32 scores and ssv, winning leg."""

    ids: list[str]
    score: npt.NDArray[np.float32]
    ssv: npt.NDArray[np.float32]
    leg: npt.NDArray[np.intp]


def _before(a: tuple[float, float, str], b: tuple[float, float, str]) -> bool:
    """Weaviate's ``sort.Slice`` less function on ``(score, ssv, id)`` (descending, epsilon ties)."""
    d = float(np.float32(b[0]) - np.float32(a[0]))
    if d * d < _TIE_EPSILON_SQ:
        d2 = float(np.float32(b[1]) - np.float32(a[1]))
        if d2 * d2 < _TIE_EPSILON_SQ:
            return a[2] < b[2]
        return a[1] > b[1]
    return a[0] > b[0]


def _compare(a: tuple[float, float, str], b: tuple[float, float, str]) -> int:
    if _before(a, b):
        return -1
    if _before(b, a):
        return 1
    return 0


def _compare_matrix(
    ids: Sequence[str], score: npt.NDArray[np.float32], ssv: npt.NDArray[np.float32]
) -> list[list[int]]:
    """:func:`_compare` of every pair of positions at once (``[i][j]`` is -1, 0 or 1).

    The same float32 differences, float64 squares and comparisons as :func:`_before`, done on
    ``n x n`` arrays, so a sort fed with this table orders exactly like one fed with
    :func:`_compare` (same answer for every pair, same input order, same algorithm). Ids must
    be distinct.
    """
    s = np.asarray(score, dtype=np.float32)
    v = np.asarray(ssv, dtype=np.float32)
    ds = (s[None, :] - s[:, None]).astype(np.float64)  # [a][b] = float32(score_b - score_a)
    dv = (v[None, :] - v[:, None]).astype(np.float64)
    rank = np.empty(len(ids), dtype=np.intp)
    rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    before = np.where(
        ds * ds < _TIE_EPSILON_SQ,
        np.where(dv * dv < _TIE_EPSILON_SQ, rank[:, None] < rank[None, :], v[:, None] > v[None, :]),
        s[:, None] > s[None, :],
    )
    table: list[list[int]] = (before.T.astype(np.int8) - before.astype(np.int8)).tolist()
    return table


def _sort_runs(order: list[int], starts: Sequence[int], ids: Sequence[str]) -> None:
    """Sort each run of equal keys in ``order`` by ``(ids[p], p)``, in place.

    ``order`` holds positions sorted by a key; ``starts`` lists, ascending, every index ``i``
    of ``order`` whose key equals the key at ``i + 1``.
    """
    if not starts:
        return
    begin = prev = starts[0]
    for i in (*starts[1:], -1):
        if i != prev + 1:
            run = sorted(order[begin : prev + 2])
            run.sort(key=ids.__getitem__)
            order[begin : prev + 2] = run
            begin = i
        prev = i


def order_by_key_then_id(key: npt.NDArray[Any], ids: Sequence[str]) -> list[int]:
    """Positions sorted by ``key`` ascending, then by ``ids[position]`` ascending.

    Equal to ``sorted(range(len(ids)), key=lambda i: (key[i], ids[i]))`` for keys without NaN;
    numpy sorts the numbers and only runs of equal keys are sorted in Python.

    Example:
        >>> order_by_key_then_id(np.array([2.0, 1.0, 2.0, 0.5]), ["b", "x", "a", "y"])
        [3, 1, 2, 0]
    """
    o = np.argsort(key, kind="stable")
    order: list[int] = o.tolist()
    if o.size > 1:
        k = key[o]
        _sort_runs(order, np.flatnonzero(k[1:] == k[:-1]).tolist(), ids)
    return order


def _has_near_ties(score: npt.NDArray[np.float32], ssv: npt.NDArray[np.float32]) -> bool:
    """Whether two different scores (or, at equal scores, two different ssv) are within 1e-7.

    Without such pairs Weaviate's epsilon comparator is the plain lexicographic order
    (score desc, ssv desc, id asc). Checking neighbours in sorted order is enough because
    rounding is monotone.
    """
    if score.size < 2:
        return False
    o = np.lexsort((ssv, score))
    return _near_ties_sorted(score[o], ssv[o])


def _near_ties_sorted(s: npt.NDArray[np.float32], v: npt.NDArray[np.float32]) -> bool:
    """:func:`_has_near_ties` on arrays already sorted by ``(score, ssv)`` ascending."""
    ds = (s[1:] - s[:-1]).astype(np.float64)
    if bool(np.any((ds != 0) & (ds * ds < _TIE_EPSILON_SQ))):
        return True
    dv = (v[1:] - v[:-1]).astype(np.float64)
    return bool(np.any((ds == 0) & (dv != 0) & (dv * dv < _TIE_EPSILON_SQ)))


def _order(ids: Sequence[str], score: npt.NDArray[np.float32], ssv: npt.NDArray[np.float32]) -> list[int]:
    """Positions sorted with Weaviate's comparator.

    Without near ties the comparator is the lexicographic order (score desc, ssv desc, id asc):
    numpy sorts the numbers and only runs of equal ``(score, ssv)`` are sorted by id. With near
    ties the positions (in insertion order) go through Python's sort with the comparator itself,
    looked up in a table precomputed by :func:`_compare_matrix` when the ids are distinct.
    """
    n = int(score.size)
    if n < 2:
        return list(range(n))
    o = np.lexsort((ssv, score))
    s, v = score[o], ssv[o]
    if _near_ties_sorted(s, v):
        if len(set(ids)) == n:
            table = _compare_matrix(ids, score, ssv)

            def cmp(i: int, j: int) -> int:
                return table[i][j]

        else:  # duplicate ids (fusion_order on arbitrary hits): compare tuples
            sc = score.tolist()
            sv = ssv.tolist()
            items = [(sc[i], sv[i], ids[i]) for i in range(n)]

            def cmp(i: int, j: int) -> int:
                return _compare(items[i], items[j])

        return sorted(range(n), key=functools.cmp_to_key(cmp))
    order: list[int] = o[::-1].tolist()
    equal = np.flatnonzero((s[1:] == s[:-1]) & (v[1:] == v[:-1]))
    if equal.size:  # ascending neighbours (i, i+1) are descending neighbours (n-2-i, n-1-i)
        _sort_runs(order, (n - 2 - equal[::-1]).tolist(), ids)
    return order


def _fuse(
    kind: Literal["relative", "ranked"],
    weights: Sequence[float],
    sets: Sequence[tuple[Sequence[str], npt.NDArray[np.float32]]],
) -> _Fused:
    """Sum the legs' float32 contributions per id; the later leg's object (ssv, leg) wins."""
    if len(weights) != len(sets):
        raise InvalidInputError(f"{len(weights)} weights for {len(sets)} result sets")
    pos: dict[str, int] = {}
    ids: list[str] = []
    positions: list[npt.NDArray[np.intp]] = []
    unique: list[bool] = []
    for leg_ids, _ in sets:
        if not pos and len(set(leg_ids)) == len(leg_ids):  # first leg, distinct ids: 0..n-1
            ids = list(leg_ids)
            pos = dict(zip(ids, range(len(ids)), strict=True))
            positions.append(np.arange(len(ids), dtype=np.intp))
            unique.append(True)
            continue
        p: list[int] = []
        for mid in leg_ids:
            k = pos.get(mid)
            if k is None:
                k = pos[mid] = len(ids)
                ids.append(mid)
            p.append(k)
        positions.append(np.array(p, dtype=np.intp))
        unique.append(len(set(p)) == len(p))
    score = np.zeros(len(ids), dtype=np.float32)
    ssv = np.zeros(len(ids), dtype=np.float32)
    leg = np.full(len(ids), -1, dtype=np.intp)
    for i, ((_, values), p_arr) in enumerate(zip(sets, positions, strict=True)):
        if values.size == 0:
            continue
        if kind == "relative":
            weight = np.float32(weights[i])
            hi, lo = np.max(values), np.min(values)
            contrib: npt.NDArray[np.float32]
            if hi == lo:
                contrib = np.full(values.size, weight, dtype=np.float32)
            else:
                contrib = weight * ((values - lo) / np.float32(hi - lo))
        else:
            ranks = np.arange(values.size, dtype=np.float64) + RANKED_FUSION_K
            contrib = (float(weights[i]) / ranks).astype(np.float32)
        if unique[i]:
            score[p_arr] += contrib.astype(np.float32)  # float32 sums, in leg order
        else:
            np.add.at(score, p_arr, contrib.astype(np.float32))
        ssv[p_arr] = values
        leg[p_arr] = i
    return _Fused(ids, score, ssv, leg)


def _leg_arrays(results: Sequence[LegHit]) -> tuple[list[str], npt.NDArray[np.float32]]:
    return [r.id for r in results], np.array([r.ssv for r in results], dtype=np.float32)


def _hits(fused: _Fused, order: Sequence[int]) -> list[FusedHit]:
    return [FusedHit(fused.ids[i], float(fused.score[i]), float(fused.ssv[i]), int(fused.leg[i])) for i in order]


def _relative_is_empty(sizes: Sequence[int]) -> bool:
    return not sizes or (sizes[0] == 0 and (len(sizes) == 1 or sizes[1] == 0))


def fusion_order(hits: Iterable[FusedHit]) -> list[FusedHit]:
    """Sort fused hits with Weaviate's comparator.

    Score descending; scores closer than 1e-7 tie and fall back to the secondary sort value
    (descending, same epsilon), then to the id ascending.
    """
    items = list(hits)
    score = np.array([h.score for h in items], dtype=np.float32)
    ssv = np.array([h.ssv for h in items], dtype=np.float32)
    return [items[i] for i in _order([h.id for h in items], score, ssv)]


def relative_score_fusion(weights: Sequence[float], result_sets: Sequence[Sequence[LegHit]]) -> list[FusedHit]:
    """Weaviate's relativeScoreFusion (``hybrid_fusion.go`` ``FusionRelativeScore``).

    Each set's secondary sort values are min-max normalised and multiplied by the set's weight
    (all in float32; a set whose values are all equal gives every member the full weight); the
    per-id sums are sorted with :func:`fusion_order`. The later set's object replaces the
    earlier one for an id found in both.

    Example:
        >>> hits = relative_score_fusion([0.5, 0.5], [[LegHit("0", 1), LegHit("1", 2), LegHit("2", 3)],
        ...                                            [LegHit("0", 0), LegHit("1", 1), LegHit("2", 2)]])
        >>> [(h.id, h.score) for h in hits]
        [('2', 1.0), ('1', 0.5), ('0', 0.0)]
    """
    if len(weights) != len(result_sets):
        raise InvalidInputError(f"{len(weights)} weights for {len(result_sets)} result sets")
    if _relative_is_empty([len(r) for r in result_sets]):
        return []
    fused = _fuse("relative", weights, [_leg_arrays(r) for r in result_sets])
    return _hits(fused, _order(fused.ids, fused.score, fused.ssv))


def ranked_fusion(weights: Sequence[float], result_sets: Sequence[Sequence[LegHit]]) -> list[FusedHit]:
    """Weaviate's rankedFusion (reciprocal rank fusion, ``hybrid_fusion.go`` ``FusionRanked``).

    The document at 0-based rank ``j`` of set ``i`` gets ``float32(w_i / (j + 60))``; sums are
    float32 and sorted with :func:`fusion_order`.

    Example:
        >>> hits = ranked_fusion([1.0], [[LegHit("a", 0.9), LegHit("b", 0.8)]])
        >>> [(h.id, round(h.score, 6)) for h in hits]
        [('a', 0.016667), ('b', 0.016393)]
    """
    fused = _fuse("ranked", weights, [_leg_arrays(r) for r in result_sets])
    return _hits(fused, _order(fused.ids, fused.score, fused.ssv))


def autocut(scores: Sequence[float], cutoff: int) -> int:
    """Weaviate's autocut (``entities/autocut/autocut.go``): how many results to keep.

    The scores are normalised to [0, 1] and compared with a straight line; the result is cut
    before the ``cutoff``-th local maximum of the difference (float32 throughout).

    Example:
        >>> autocut([2, 1.95, 1.9, 0.2, 0.1, 0.1, -1], 1)
        3
    """
    n = len(scores)
    if n <= 1:
        return n
    y = [np.float32(v) for v in scores]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        step = np.float32(_F32_ONE / np.float32(np.float32(n) - _F32_ONE))
        span = np.float32(y[-1] - y[0])
        diff = [
            np.float32(
                np.float32(np.float32(y[i] - y[0]) / span) - np.float32(_F32_ZERO + np.float32(np.float32(i) * step))
            )
            for i in range(n)
        ]
    extrema = 0
    for i in range(1, n):
        if i == n - 1:  # the last point has no successor: compare with the two before it
            is_max = bool(diff[i] > diff[i - 1]) and i >= 2 and bool(diff[i] > diff[i - 2])
        else:
            is_max = bool(diff[i] > diff[i - 1]) and bool(diff[i] > diff[i + 1])
        if is_max:
            extrema += 1
            if extrema >= cutoff:
                return i
    return n


# ----------------------------------------------------------------------------------------------
# Hybrid search (weaviate.md §1.9)
# ----------------------------------------------------------------------------------------------


def candidate_limit(limit: int) -> int:
    """Candidates fetched per leg: ``max(QUERY_HYBRID_MAXIMUM_RESULTS, limit)`` (offset not added)."""
    return max(HYBRID_MAXIMUM_RESULTS, limit)


def hybrid_weights(alpha: float) -> tuple[float | None, float | None]:
    """Leg weights for ``alpha`` (1.0 = pure vector, 0.0 = pure keyword/BM25).

    Alpha travels as a float32 on Weaviate's gRPC API: ``a = float64(float32(alpha))``. The
    vector leg runs when ``a > 0`` with weight ``a``; the keyword leg when ``1 - a > 0`` with
    weight ``1 - a``.

    Returns:
        ``(vector weight or None, keyword weight or None)``.

    Example:
        >>> hybrid_weights(0.0), hybrid_weights(1.0)
        ((None, 1.0), (1.0, None))
    """
    a64 = float(np.float32(alpha))
    return (a64 if a64 > 0 else None, (1 - a64) if 1 - a64 > 0 else None)


def hybrid_fuse(
    *,
    alpha: float,
    vector_leg: Sequence[VectorCandidate] | None,
    keyword_leg: Sequence[KeywordCandidate] | None,
    fusion: Literal["relative", "ranked"] = "relative",
    limit: int = 10,
    offset: int = 0,
    max_vector_distance: float | None = None,
    auto_limit: int = 0,
) -> list[FusedHit]:
    """Fuse the two legs of a hybrid search exactly like Weaviate's ``Explorer.Hybrid``.

    Args:
        alpha: 1.0 = pure vector, 0.0 = pure keyword (BM25). Taken as given (0.0 stays 0.0).
        vector_leg: Candidates by cosine distance ascending (required when alpha > 0); only
            the first ``max(100, limit)`` are used.
        keyword_leg: Candidates by BM25 score descending, id ascending (``None`` = no hits);
            only the first ``max(100, limit)`` are used.
        fusion: ``"relative"`` (relativeScoreFusion) or ``"ranked"`` (rankedFusion).
        limit: Results to return.
        offset: Results to skip (applied after fusion; candidates are not widened by it).
        max_vector_distance: Keep the vector leg up to the first distance above this value and
            drop keyword hits that are not among the surviving vector candidates.
        auto_limit: Autocut: cut after this many score jumps (0 = off).

    Returns:
        The page of fused hits, best first.

    Raises:
        InvalidInputError: alpha outside [0, 1], bad limit/offset, or no vector leg with alpha > 0.
    """
    k = candidate_limit(limit)
    vec_ids: list[str] | None = None
    dist: npt.NDArray[np.float32] | None = None
    if vector_leg is not None:
        vec = vector_leg[:k]
        vec_ids = [c.id for c in vec]
        dist = np.array([c.distance for c in vec], dtype=np.float32)
    kw = (keyword_leg or [])[:k]
    return hybrid_fuse_legs(
        alpha=alpha,
        vector_ids=vec_ids,
        vector_distances=dist,
        keyword_ids=[c.id for c in kw],
        keyword_scores=np.array([c.score for c in kw], dtype=np.float32),
        fusion=fusion,
        limit=limit,
        offset=offset,
        max_vector_distance=max_vector_distance,
        auto_limit=auto_limit,
    )


def hybrid_fuse_legs(
    *,
    alpha: float,
    vector_ids: Sequence[str] | None,
    vector_distances: npt.NDArray[np.float32] | None,
    keyword_ids: Sequence[str],
    keyword_scores: npt.NDArray[np.float32],
    fusion: Literal["relative", "ranked"] = "relative",
    limit: int = 10,
    offset: int = 0,
    max_vector_distance: float | None = None,
    auto_limit: int = 0,
) -> list[FusedHit]:
    """:func:`hybrid_fuse` on legs given as arrays (the stores' fast path, same result).

    Args:
        vector_ids: Vector-leg ids by distance ascending (``None``: no vector leg).
        vector_distances: Their float32 cosine distances (same length as ``vector_ids``).
        keyword_ids: Keyword-leg ids by BM25 descending, id ascending (may be empty).
        keyword_scores: Their float32 BM25 scores.
        alpha: As for :func:`hybrid_fuse`.
        fusion: As for :func:`hybrid_fuse`.
        limit: As for :func:`hybrid_fuse`.
        offset: As for :func:`hybrid_fuse`.
        max_vector_distance: As for :func:`hybrid_fuse`.
        auto_limit: As for :func:`hybrid_fuse`.

    Returns:
        The page of fused hits, best first.

    Raises:
        InvalidInputError: As for :func:`hybrid_fuse`, or ids and scores of different lengths.

    Example:
        >>> hits = hybrid_fuse_legs(alpha=0.5, vector_ids=["a", "b"],
        ...     vector_distances=np.array([0.1, 0.3], dtype=np.float32),
        ...     keyword_ids=["b", "c"], keyword_scores=np.array([2.0, 1.0], dtype=np.float32), limit=3)
        >>> [(h.id, h.score) for h in hits]
        [('b', 0.5), ('a', 0.5), ('c', 0.0)]
    """
    if not (0.0 <= alpha <= 1.0):
        raise InvalidInputError(f"alpha must be in [0, 1] (1.0 = pure vector, 0.0 = pure BM25), got {alpha}")
    if limit < 1 or offset < 0 or auto_limit < 0:
        raise InvalidInputError("limit must be >= 1, offset and auto_limit >= 0")
    k = candidate_limit(limit)
    w_vec, w_kw = hybrid_weights(alpha)
    weights: list[float] = []
    sets: list[tuple[Sequence[str], npt.NDArray[np.float32]]] = []
    vec_ids: Sequence[str] = []
    dist: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
    kw_ids: Sequence[str] = []
    kw_scores: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
    if w_vec is not None:
        if vector_ids is None or vector_distances is None:
            raise InvalidInputError("a query vector is required when alpha > 0")
        if len(vector_ids) != vector_distances.shape[0]:
            raise InvalidInputError("vector_ids and vector_distances differ in length")
        vec_ids = vector_ids[:k]
        dist = np.asarray(vector_distances[:k], dtype=np.float32)
        if max_vector_distance is not None:
            over = np.flatnonzero(dist > np.float32(max_vector_distance))
            if over.size:  # keep the prefix up to the first distance above the cut
                vec_ids, dist = vec_ids[: over[0]], dist[: over[0]]
        weights.append(w_vec)
        sets.append((vec_ids, _F32_ONE - dist))  # ssv = 1 - distance, float32
    if w_kw is not None:
        if len(keyword_ids) != keyword_scores.shape[0]:
            raise InvalidInputError("keyword_ids and keyword_scores differ in length")
        kw_ids = keyword_ids[:k]
        kw_scores = np.asarray(keyword_scores[:k], dtype=np.float32)
        if max_vector_distance is not None and w_vec is not None:
            allowed = set(vec_ids)
            keep = [i for i, mid in enumerate(kw_ids) if mid in allowed]
            if len(keep) != len(kw_ids):
                kw_ids = [kw_ids[i] for i in keep]
                kw_scores = kw_scores[np.array(keep, dtype=np.intp)]
        weights.append(w_kw)
        sets.append((kw_ids, kw_scores))

    if fusion == "relative" and _relative_is_empty([len(ids) for ids, _ in sets]):
        return []
    fused = _fuse(fusion, weights, sets)
    order = _order(fused.ids, fused.score, fused.ssv)[: min(offset + limit, QUERY_MAXIMUM_RESULTS)]
    if auto_limit > 0:
        order = order[: autocut(fused.score[order].tolist(), auto_limit)]
    page = order[offset : offset + limit]
    if not page:
        return []
    distances = dict(zip(vec_ids, dist.tolist(), strict=True))
    bm25 = dict(zip(kw_ids, kw_scores.tolist(), strict=True))
    score = fused.score[page].tolist()
    ssv = fused.ssv[page].tolist()
    leg = fused.leg[page].tolist()
    out: list[FusedHit] = []
    for j, i in enumerate(page):
        mid = fused.ids[i]
        out.append(FusedHit(mid, score[j], ssv[j], leg[j], bm25.get(mid), distances.get(mid)))
    return out
