"""The value types the facade and the stores exchange: vectors, filters, search requests and hits.

Plain frozen dataclasses with validation and no IO; :mod:`hybrid_memory.stores.base` re-exports
them next to the store protocol (their documented home until issue 13).

Search semantics are Weaviate's hybrid search (``weaviate.md`` §1.9): ``alpha`` 1.0 = pure
vector, 0.0 = pure keyword (BM25).

Example:
    >>> import numpy as np
    >>> req = SearchRequest(user_id="alice", query="green tea", vector=np.ones(4, dtype=np.float32), alpha=0.5)
    >>> req.effective_alpha, req.filter.statuses
    (0.5, ('active',))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord, Status, Turn, check_id, ensure_utc

__all__ = [
    "HYBRID_MAXIMUM_RESULTS",
    "QUERY_MAXIMUM_RESULTS",
    "FusionType",
    "MemoryFilter",
    "SearchRequest",
    "SessionLog",
    "StoreHit",
    "Vector",
    "as_matrix",
]

Vector = npt.NDArray[np.float32]
FusionType = Literal["relative", "ranked"]

#: Weaviate's QUERY_HYBRID_MAXIMUM_RESULTS default: candidates fetched per leg.
HYBRID_MAXIMUM_RESULTS = 100
#: Weaviate's QUERY_MAXIMUM_RESULTS default.
QUERY_MAXIMUM_RESULTS = 10_000


@dataclass(frozen=True)
class MemoryFilter:
    """Which memories a search or listing may return (all conditions AND-ed).

    Attributes:
        categories: Keep only these categories (``None`` = any).
        tags: Keep memories carrying at least one of these tags (``None`` = any).
        since: ``created_at >= since`` (aware datetime).
        until: ``created_at < until`` (aware datetime).
        session_id: Keep only memories of this session.
        statuses: Allowed statuses; ``("active",)`` by default.

    Example:
        >>> from hybrid_memory import HybridMemory, MemoryFilter
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> mem = HybridMemory(embedder=HashingEmbedder())
        >>> _ = mem.remember("alice", "I am vegetarian", category="preference")
        >>> _ = mem.remember("alice", "My sister lives in Berlin", category="fact")
        >>> prefs = MemoryFilter(categories=("preference",))
        >>> [m.content for m in mem.list_memories("alice", filter=prefs)]
        ['I am vegetarian']
        >>> facts = MemoryFilter(categories=("fact",))
        >>> [h.content for h in mem.recall("vegetarian sister", user_id="alice", filter=facts)]
        ['My sister lives in Berlin']
        >>> mem.close()
    """

    categories: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    session_id: str | None = None
    statuses: tuple[Status, ...] = ("active",)

    def __post_init__(self) -> None:
        if self.since is not None:
            object.__setattr__(self, "since", ensure_utc(self.since, name="since"))
        if self.until is not None:
            object.__setattr__(self, "until", ensure_utc(self.until, name="until"))
        for name in ("categories", "tags", "statuses"):
            v = getattr(self, name)
            if v is not None and isinstance(v, str):
                object.__setattr__(self, name, (v,))
            elif v is not None:
                object.__setattr__(self, name, tuple(v))

    def matches(self, r: MemoryRecord) -> bool:
        """Whether ``r`` passes this filter (the reference semantics for every backend)."""
        if r.status not in self.statuses:
            return False
        if self.categories is not None and r.category not in self.categories:
            return False
        if self.tags is not None and not set(self.tags).intersection(r.tags):
            return False
        if self.since is not None and r.created_at < self.since:
            return False
        if self.until is not None and r.created_at >= self.until:
            return False
        return self.session_id is None or r.session_id == self.session_id


@dataclass(frozen=True)
class SearchRequest:
    """A hybrid search for one user.

    Attributes:
        user_id: Whose memories to search; a store never returns another user's memory.
        query: Raw query text (analysed by the store's analyzer); ``None`` forces alpha = 1
            like the Weaviate client does.
        vector: The query embedding (required when alpha > 0).
        alpha: 1.0 = pure vector, 0.0 = pure keyword (BM25). Always explicit.
        limit: Number of results.
        fusion: ``"relative"`` (relativeScoreFusion, default) or ``"ranked"`` (rankedFusion).
        max_vector_distance: Cosine-distance cut applied to the vector leg; keyword hits not in
            the surviving vector candidates are dropped (Weaviate semantics).
        filter: Which memories qualify.
        auto_limit: Weaviate autocut (0 = off).
        offset: Results to skip.
    """

    user_id: str
    query: str | None
    vector: Vector | None
    alpha: float
    limit: int = 10
    fusion: FusionType = "relative"
    max_vector_distance: float | None = None
    filter: MemoryFilter = field(default_factory=MemoryFilter)
    auto_limit: int = 0
    offset: int = 0

    def __post_init__(self) -> None:
        check_id(self.user_id)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
            raise InvalidInputError("alpha must be a number in [0, 1]")
        if not (0.0 <= float(self.alpha) <= 1.0):
            raise InvalidInputError(f"alpha must be in [0, 1] (1.0 = pure vector, 0.0 = pure BM25), got {self.alpha}")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise InvalidInputError(f"limit must be a positive int, got {self.limit!r}")
        if self.limit > QUERY_MAXIMUM_RESULTS:
            raise InvalidInputError(f"limit must be at most {QUERY_MAXIMUM_RESULTS}")
        if not isinstance(self.offset, int) or self.offset < 0:
            raise InvalidInputError("offset must be a non-negative int")
        if not isinstance(self.auto_limit, int) or self.auto_limit < 0:
            raise InvalidInputError("auto_limit must be a non-negative int")
        if self.fusion not in ("relative", "ranked"):
            raise InvalidInputError(f"fusion must be 'relative' or 'ranked', got {self.fusion!r}")
        if self.max_vector_distance is not None and not (
            isinstance(self.max_vector_distance, (int, float)) and math.isfinite(self.max_vector_distance)
        ):
            raise InvalidInputError("max_vector_distance must be a finite number")
        if self.vector is not None:
            v = np.asarray(self.vector, dtype=np.float32)
            if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
                raise InvalidInputError("query vector must be a non-empty finite 1-D vector")
            object.__setattr__(self, "vector", v)
        if self.query is not None and not isinstance(self.query, str):
            raise InvalidInputError("query must be a str or None")
        if not isinstance(self.filter, MemoryFilter):
            raise InvalidInputError(f"filter must be a MemoryFilter, got {type(self.filter).__name__}")

    @property
    def effective_alpha(self) -> float:
        """Alpha after the client rule (``query is None`` forces 1.0)."""
        return 1.0 if self.query is None else float(self.alpha)


@dataclass(frozen=True)
class StoreHit:
    """One search result: the record, its fused score, the raw leg scores and its stored vector.

    ``keyword_score`` is the BM25 score when the keyword leg returned the memory, else ``None``;
    ``vector_similarity`` is the cosine similarity (1 - cosine distance) of the memory's vector
    to the query vector when a query vector was given. ``vector`` is the memory's stored
    (unit-normalised) vector as the store returned it with the hit -- the same as
    ``store.get_vectors(user, [id])[id]``, without a second request; ``None`` from a backend that
    does not return vectors with hits. It takes no part in ``==`` and ``repr``.
    """

    record: MemoryRecord
    score: float
    keyword_score: float | None = None
    vector_similarity: float | None = None
    vector: Vector | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SessionLog:
    """What a store holds of one session's turn log (:meth:`MemoryStore.load_session`).

    Attributes:
        turns: The session's turns with ``seq > after_seq``, in log order (``Turn.seq`` ascending).
        count: How many turns the session's log holds in all (a cache detects deletions with it).
        epoch: The user's current forget epoch (0 until the user is first forgotten).
    """

    turns: tuple[Turn, ...]
    count: int
    epoch: int


def as_matrix(vectors: Sequence[Sequence[float]] | Vector, n: int, dim: int | None) -> Vector:
    """Validate and return ``vectors`` as a float32 ``(n, dim)`` matrix.

    Raises:
        InvalidInputError: wrong shape, count or non-finite values.
    """
    try:
        m = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"vectors must be numbers: {exc}") from exc
    if m.ndim != 2 or m.shape[0] != n:
        raise InvalidInputError(f"expected {n} vectors as a 2-D array, got shape {m.shape}")
    if dim is not None and m.shape[1] != dim:
        from hybrid_memory.errors import EmbeddingDimensionError

        raise EmbeddingDimensionError(dim, int(m.shape[1]))
    if m.shape[1] == 0 or not np.all(np.isfinite(m)):
        raise InvalidInputError("vectors must be non-empty and finite (no NaN/inf)")
    return m
