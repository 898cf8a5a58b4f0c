"""Retrieval metrics: Recall@k, all@k, nDCG@k, session recall, and LongMemEval's official metrics.

A *ranking* is the list of hits a method returned, best first; each hit is the set of dataset ids
it stands for (one id for a stored turn; several for a memory derived from several turns, which
counts as a hit when its provenance intersects the gold set).

LoCoMo / MemoryBank (``docs/models-and-data.md``), for gold set ``G``:

* ``recall@k`` = |G ∩ ids(top-k)| / |G|;
* ``all@k`` = 1 if every gold id is in the top k, else 0;
* ``ndcg@k`` with binary gains: a hit gains 1 when it covers a gold id no earlier hit covered,
  ``DCG = Σ gain_i / log2(i + 1)`` (1-based rank i), normalised by the ideal DCG of
  ``min(k, |G|)`` gold hits;
* ``session_recall@k`` = recall of the gold *sessions* among the sessions of the top-k hits.

LongMemEval: :func:`lme_evaluate` and :func:`lme_turn2session` reproduce
``src/retrieval/eval_utils.py`` of the official repository (xiaowu0162/LongMemEval), including
its DCG (the first two ranks are both undiscounted) and the growing ``effective_k`` of the
turn-to-session mapping. :func:`lme_session` is the plain session-level variant (gold sessions =
``answer_session_ids``, every turn maps to its session, duplicates removed).

Example:
    >>> r = [{"a"}, {"x"}, {"b"}]
    >>> recall_at_k(r, {"a", "b"}, 1), all_at_k(r, {"a", "b"}, 3)
    (0.5, 1.0)
    >>> round(ndcg_at_k(r, {"a", "b"}, 3), 4)
    0.9197
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

__all__ = [
    "LME_KS",
    "PRIMARY",
    "Ranking",
    "all_at_k",
    "bootstrap_ci",
    "flatten",
    "lme_dcg",
    "lme_evaluate",
    "lme_session",
    "lme_turn2session",
    "mean",
    "ndcg_at_k",
    "recall_at_k",
    "session_recall_at_k",
]

#: The cut-offs of LongMemEval's official retrieval metrics.
LME_KS = (1, 3, 5, 10, 30, 50)

Ranking = Sequence[AbstractSet[str]]


def _check(gold: AbstractSet[str], k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not gold:
        raise ValueError("the gold set is empty")


def _covered(ranking: Ranking, k: int) -> set[str]:
    out: set[str] = set()
    for ids in ranking[:k]:
        out.update(ids)
    return out


def recall_at_k(ranking: Ranking, gold: AbstractSet[str], k: int) -> float:
    """Fraction of the gold ids covered by the top ``k`` hits.

    Raises:
        ValueError: ``k < 1`` or an empty gold set.
    """
    _check(gold, k)
    return len(_covered(ranking, k) & gold) / len(gold)


def all_at_k(ranking: Ranking, gold: AbstractSet[str], k: int) -> float:
    """1.0 when every gold id is covered by the top ``k`` hits, else 0.0."""
    _check(gold, k)
    return 1.0 if gold <= _covered(ranking, k) else 0.0


def ndcg_at_k(ranking: Ranking, gold: AbstractSet[str], k: int) -> float:
    """nDCG@k with binary gains (a hit gains 1 when it covers a not yet covered gold id)."""
    _check(gold, k)
    seen: set[str] = set()
    dcg = 0.0
    for i, ids in enumerate(ranking[:k]):
        new = (set(ids) & gold) - seen
        if new:
            dcg += 1.0 / math.log2(i + 2)
            seen |= new
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(gold))))
    return dcg / ideal


def session_recall_at_k(
    ranking: Ranking, gold_sessions: AbstractSet[str], session_of: Mapping[str, str], k: int
) -> float:
    """Fraction of the gold sessions holding at least one of the top ``k`` hits.

    ``session_of`` maps a document id to its session id; ids it does not know map to themselves.
    """
    _check(gold_sessions, k)
    sessions = {session_of.get(i, i) for i in _covered(ranking, k)}
    return len(sessions & gold_sessions) / len(gold_sessions)


def flatten(ranking: Ranking) -> list[str]:
    """The ranked dataset ids of a ranking (ids of one hit in sorted order, duplicates dropped)."""
    out: list[str] = []
    seen: set[str] = set()
    for ids in ranking:
        for i in sorted(ids):
            if i not in seen:
                seen.add(i)
                out.append(i)
    return out


# -- LongMemEval (official eval_utils.py) ---------------------------------------------------


def lme_dcg(relevances: Sequence[float], k: int) -> float:
    """LongMemEval's DCG: ``rel[0] + Σ_{i>=1} rel[i] / log2(i + 1)`` over the first ``k``."""
    rel = list(relevances)[:k]
    if not rel:
        return 0.0
    return rel[0] + sum(r / math.log2(i + 1) for i, r in enumerate(rel[1:], start=1))


def lme_evaluate(
    ranked: Sequence[str], gold: AbstractSet[str], corpus: Sequence[str], k: int
) -> tuple[float, float, float]:
    """``(recall_any@k, recall_all@k, ndcg_any@k)`` exactly as LongMemEval's ``evaluate_retrieval``.

    Args:
        ranked: Retrieved ids, best first (ids of ``corpus``; may repeat after session mapping).
        gold: The correct ids.
        corpus: Every id of the corpus (gives the ideal DCG), duplicates included.
        k: The cut-off.
    """
    top = set(ranked[:k])
    recall_any = float(any(g in top for g in gold))
    recall_all = float(all(g in top for g in gold))
    actual = lme_dcg([1.0 if r in gold else 0.0 for r in ranked[:k]], k)
    ideal = lme_dcg(sorted((1.0 if c in gold else 0.0 for c in corpus), reverse=True), k)
    return recall_any, recall_all, (actual / ideal if ideal else 0.0)


def lme_turn2session(
    ranked: Sequence[str],
    gold: AbstractSet[str],
    corpus: Sequence[str],
    k: int,
    session_of: Callable[[str], str],
) -> tuple[float, float, float]:
    """LongMemEval's ``evaluate_retrieval_turn2session``: turn rankings scored at session level.

    Turn ids are mapped to sessions with ``session_of``, and ``k`` grows until the first
    ``effective_k`` turns hold ``k`` distinct sessions (or the corpus ends).
    """
    gold_s = {session_of(g) for g in gold}
    corpus_s = [session_of(c) for c in corpus]
    ranked_s = [session_of(r) for r in ranked]
    eff = k
    while eff <= len(corpus_s) and len(set(ranked_s[:eff])) < k:
        eff += 1
    return lme_evaluate(ranked_s, gold_s, corpus_s, eff)


def lme_session(
    ranked: Sequence[str],
    gold_sessions: AbstractSet[str],
    corpus: Sequence[str],
    k: int,
    session_of: Mapping[str, str],
) -> tuple[float, float, float]:
    """Session-level metrics from a turn ranking: sessions in order of first appearance.

    Gold = ``gold_sessions`` (``answer_session_ids``); any turn of a session retrieves it.
    """
    sessions = _unique(session_of.get(r, r) for r in ranked)
    all_sessions = _unique(session_of.get(c, c) for c in corpus)
    return lme_evaluate(sessions, gold_sessions, all_sessions, k)


def _unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean (``nan`` for no values)."""
    vals = list(values)
    return sum(vals) / len(vals) if vals else math.nan


#: The headline metric of each dataset (the one its targets are set on).
PRIMARY = {"locomo": "recall@10", "memorybank": "recall@5", "longmemeval": "session_recall_all@5"}


def bootstrap_ci(
    values: Sequence[float], *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-question ``values`` (questions resampled).

    It says how far a mean over this many questions moves with the sample of questions alone:
    a difference inside it, e.g. between a dev file and held-back questions, may be chance.
    Deterministic for a given ``seed``.

    Example:
        >>> lo, hi = bootstrap_ci([1.0] * 44 + [0.0] * 2)
        >>> round(lo, 3), round(hi, 3)
        (0.891, 1.0)
        >>> bootstrap_ci([0.5, 0.5])
        (0.5, 0.5)
    """
    if not values:
        return (math.nan, math.nan)
    if not 0.0 < level < 1.0:
        raise ValueError("level must be in (0, 1)")
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return (float(lo), float(hi))
