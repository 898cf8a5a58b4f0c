"""A store-free hybrid index for parameter sweeps (analyzer modes, embedders, fine alpha grids).

It ranks with the same Weaviate-exact maths as :class:`~hybrid_memory.stores.local.LocalStore`
(:mod:`hybrid_memory.ranking`: BM25 with per-corpus statistics, exact cosine top-K, fusion with
``alpha`` 1.0 = pure vector, 0.0 = pure keyword/BM25) but keeps everything in memory keyed by the
dataset's own ids, so a sweep does not rebuild a store per setting. Ties are broken by dataset
id rather than by memory UUID, the only difference from a store search.

Example:
    >>> import numpy as np
    >>> from hybrid_memory.text.analyzer import Analyzer
    >>> idx = PureIndex(["a", "b"], ["green tea", "black coffee"], np.eye(2, dtype=np.float32), Analyzer())
    >>> idx.search("tea", np.array([0.0, 1.0], dtype=np.float32), alpha=0.0, limit=2)
    ['a']
    >>> idx.search("tea", np.array([0.0, 1.0], dtype=np.float32), alpha=1.0, limit=2)
    ['b', 'a']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hybrid_memory.ranking import (
    KeywordCandidate,
    VectorCandidate,
    bm25_scores,
    candidate_limit,
    cosine_distance,
    hybrid_fuse,
    rank_keyword,
)
from hybrid_memory.stores.base import Vector
from hybrid_memory.text.analyzer import Analyzer

__all__ = ["PureIndex"]


class PureIndex:
    """Hybrid search over one corpus held in memory.

    Args:
        ids: Document ids (unique).
        texts: Document texts (analysed with ``analyzer``).
        vectors: Unit-norm document vectors, one row per id (``None`` for BM25 only).
        analyzer: The tokeniser for documents and queries.
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str], vectors: Vector | None, analyzer: Analyzer) -> None:
        if len(set(ids)) != len(ids) or len(ids) != len(texts):
            raise ValueError("ids must be unique and match texts")
        self.ids = list(ids)
        self.analyzer = analyzer
        self.tokens = [analyzer.index_tokens(t) for t in texts]
        self.vectors = None if vectors is None else np.asarray(vectors, dtype=np.float32)

    def keyword_scores(self, query: str) -> dict[str, float]:
        """BM25 score of every matching document."""
        scores = bm25_scores(self.analyzer.query_tokens(query), self.tokens)
        return {self.ids[i]: float(s) for i, s in scores.items()}

    def vector_leg(self, vector: Vector, k: int) -> list[VectorCandidate]:
        """The exact top-``k`` by cosine distance (ties by id)."""
        if self.vectors is None:
            raise ValueError("this index has no vectors")
        sims = self.vectors @ np.asarray(vector, dtype=np.float32)
        order = sorted(range(len(self.ids)), key=lambda i: (-float(sims[i]), self.ids[i]))[:k]
        return [VectorCandidate(self.ids[i], cosine_distance(float(sims[i]))) for i in order]

    def legs(
        self, query: str, vector: Vector | None, *, limit: int = 10
    ) -> tuple[list[VectorCandidate] | None, list[KeywordCandidate]]:
        """Both legs of a hybrid search, alpha-independent (fuse them with :meth:`fuse`)."""
        k = candidate_limit(limit)
        vec_leg = self.vector_leg(vector, k) if vector is not None and self.vectors is not None else None
        return vec_leg, rank_keyword(self.keyword_scores(query))

    @staticmethod
    def fuse(
        legs: tuple[list[VectorCandidate] | None, list[KeywordCandidate]],
        *,
        alpha: float,
        limit: int = 10,
        fusion: str = "relative",
    ) -> list[str]:
        """Ids of the top ``limit`` after fusing precomputed legs (1.0 = pure vector, 0.0 = pure BM25)."""
        vec_leg, kw_leg = legs
        hits = hybrid_fuse(
            alpha=alpha,
            vector_leg=vec_leg if alpha > 0 else None,
            keyword_leg=kw_leg if alpha < 1 else None,
            fusion="ranked" if fusion == "ranked" else "relative",
            limit=limit,
        )
        return [h.id for h in hits]

    def search(
        self,
        query: str,
        vector: Vector | None,
        *,
        alpha: float,
        limit: int = 10,
        fusion: str = "relative",
    ) -> list[str]:
        """Ids of the top ``limit`` documents (``alpha`` 1.0 = pure vector, 0.0 = pure BM25)."""
        k = candidate_limit(limit)
        vec_leg = self.vector_leg(vector, k) if alpha > 0 and vector is not None else None
        kw_leg = rank_keyword(self.keyword_scores(query)) if alpha < 1 else []
        return self.fuse((vec_leg, kw_leg), alpha=alpha, limit=limit, fusion=fusion)
