"""The store protocol every backend implements, and the request/result types it speaks.

A store is deliberately small: upsert records with their vectors, hybrid search, get, touch,
update, delete, per-user delete, count and list (with ``a``-prefixed async twins). Everything
else (re-ranking, fusion into a prompt, the write policy) lives above it in pure code.

A store is also the single source of truth for conversation state (architecture §10): the turns
``add_turn`` accepted (a durable, ordered log per user and session, read back with
:meth:`MemoryStore.load_session`) and each user's *forget epoch*. :meth:`MemoryStore.delete_user`
bumps the epoch in the same step as it deletes; a write that carries ``epochs={user: e}`` is
refused with :class:`~hybrid_memory.errors.UserForgottenError` when the user's epoch is no longer
``e``, so nothing a process read or buffered before a forget can be written back after it.

Search semantics are Weaviate's hybrid search (``weaviate.md`` §1.9): ``alpha`` 1.0 = pure
vector, 0.0 = pure keyword (BM25); the vector leg is fused first, the keyword leg second; each
leg fetches ``max(100, limit)`` candidates; relativeScoreFusion (default) or rankedFusion.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from hybrid_memory.analyzer import Analyzer
from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord, Status, Turn, check_id, ensure_utc

__all__ = [
    "AsyncFromSyncStore",
    "FusionType",
    "MemoryFilter",
    "MemoryStore",
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

    @property
    def effective_alpha(self) -> float:
        """Alpha after the client rule (``query is None`` forces 1.0)."""
        return 1.0 if self.query is None else float(self.alpha)


@dataclass(frozen=True)
class StoreHit:
    """One search result: the record, its fused score and the raw leg scores.

    ``keyword_score`` is the BM25 score when the keyword leg returned the memory, else ``None``;
    ``vector_similarity`` is the cosine similarity (1 - cosine distance) of the memory's vector
    to the query vector when a query vector was given.
    """

    record: MemoryRecord
    score: float
    keyword_score: float | None = None
    vector_similarity: float | None = None


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


def check_ids(ids: object) -> builtins.list[str]:
    """Memory ids as a de-duplicated list in the order given (shared input check of the backends).

    Raises:
        InvalidInputError: ``ids`` is a single str or not a sequence of valid (encodable) str.
    """
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidInputError("ids must be a sequence of str (not a single str)")
    for i in ids:
        if not isinstance(i, str):
            raise InvalidInputError(f"memory ids must be str, got {type(i).__name__}")
        try:
            i.encode("utf-8")
        except UnicodeEncodeError as exc:  # neither SQLite nor gRPC can carry it
            raise InvalidInputError("memory ids must be valid Unicode (lone surrogate?)") from exc
    return builtins.list(dict.fromkeys(ids))


def user_hash(user_id: str) -> str:
    """SHA-256 hex digest of a user id: how backends key per-user state without the id in clear."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()


@runtime_checkable
class MemoryStore(Protocol):
    """What every backend implements (sync methods plus ``a``-prefixed async twins).

    All methods are scoped by ``user_id``. An operation a backend cannot do raises a typed
    :class:`~hybrid_memory.errors.StoreError`; none returns ``None`` to mean failure.
    """

    analyzer: Analyzer

    @property
    def dimension(self) -> int | None:
        """Vector dimension of the stored memories (``None`` while the store is empty/new)."""
        ...

    def bind_embedder(self, name: str, dimension: int) -> None:
        """Record (first use) or check the embedder; raise EmbeddingDimensionError on mismatch."""
        ...

    def upsert(
        self, records: Sequence[MemoryRecord], vectors: Vector, *, epochs: Mapping[str, int] | None = None
    ) -> None:
        """Insert or replace ``records`` (all of one or several users) with their vectors.

        With ``epochs``, refuse the whole write (UserForgottenError) if a listed user's forget
        epoch is no longer the given one.
        """
        ...

    def update(self, records: Sequence[MemoryRecord], *, epochs: Mapping[str, int] | None = None) -> None:
        """Replace stored records' fields, keeping their vectors. Missing ids raise NotFoundError.

        ``epochs`` as in :meth:`upsert` (checked before the missing-id check).
        """
        ...

    def user_epoch(self, user_id: str) -> int:
        """The user's forget epoch: 0 until the first :meth:`delete_user`, then bumped by each."""
        ...

    def append_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]:
        """Durably append turns (any sessions of one user) to their sessions' logs.

        Returns the stored turns with ``seq`` set (increasing in append order). Refused with
        UserForgottenError (nothing written) when the user's epoch is no longer ``epoch``.
        """
        ...

    def load_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:
        """The session's turns after ``after_seq``, its total turn count and the user's epoch."""
        ...

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the session's turn log (long-term memories stay); return how many turns it held."""
        ...

    def search(self, request: SearchRequest) -> builtins.list[StoreHit]:
        """Hybrid search within ``request.user_id``'s memories."""
        ...

    def get(self, user_id: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]:
        """The records with these ids that exist for ``user_id`` (missing ids skipped), in order."""
        ...

    def get_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """Stored (unit-normalised) vectors by id for ``user_id``."""
        ...

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        """``access_count += 1`` and ``last_accessed_at = when`` for these memories."""
        ...

    def list(
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        """Records of ``user_id`` passing ``filter``, oldest first."""
        ...

    def delete(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete these memories of ``user_id``; return how many existed. Missing ids are fine."""
        ...

    def delete_user(self, user_id: str) -> int:
        """Delete everything of ``user_id`` (memories and turn logs) and bump its forget epoch.

        Returns the number of memories deleted.
        """
        ...

    def count(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:
        """Number of memories (of one user, or all users when ``user_id`` is None)."""
        ...

    def users(self) -> builtins.list[str]:
        """Ids of the users that have memories."""
        ...

    def close(self) -> None:
        """Release resources. Idempotent."""
        ...

    async def aupsert(  # noqa: D102
        self, records: Sequence[MemoryRecord], vectors: Vector, *, epochs: Mapping[str, int] | None = None
    ) -> None: ...
    async def aupdate(  # noqa: D102
        self, records: Sequence[MemoryRecord], *, epochs: Mapping[str, int] | None = None
    ) -> None: ...
    async def asearch(self, request: SearchRequest) -> builtins.list[StoreHit]: ...  # noqa: D102
    async def aget(self, user_id: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]: ...  # noqa: D102
    async def aget_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]: ...  # noqa: D102
    async def atouch(self, user_id: str, ids: Sequence[str], when: datetime) -> None: ...  # noqa: D102
    async def alist(  # noqa: D102
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[MemoryRecord]: ...
    async def adelete(self, user_id: str, ids: Sequence[str]) -> int: ...  # noqa: D102
    async def adelete_user(self, user_id: str) -> int: ...  # noqa: D102
    async def acount(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int: ...  # noqa: D102
    async def aclose(self) -> None: ...  # noqa: D102
    async def auser_epoch(self, user_id: str) -> int: ...  # noqa: D102
    async def aappend_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]: ...  # noqa: D102
    async def aload_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog: ...  # noqa: D102
    async def adelete_session(self, user_id: str, session_id: str) -> int: ...  # noqa: D102


class AsyncFromSyncStore:
    """Mixin giving a blocking store its async twins through :func:`asyncio.to_thread`."""

    @property
    def _sync(self) -> MemoryStore:
        return cast("MemoryStore", self)

    async def aupsert(  # noqa: D102
        self, records: Sequence[MemoryRecord], vectors: Vector, *, epochs: Mapping[str, int] | None = None
    ) -> None:
        store = self._sync
        await asyncio.to_thread(lambda: store.upsert(records, vectors, epochs=epochs))

    async def aupdate(  # noqa: D102
        self, records: Sequence[MemoryRecord], *, epochs: Mapping[str, int] | None = None
    ) -> None:
        store = self._sync
        await asyncio.to_thread(lambda: store.update(records, epochs=epochs))

    async def asearch(self, request: SearchRequest) -> builtins.list[StoreHit]:  # noqa: D102
        return await asyncio.to_thread(self._sync.search, request)

    async def aget(self, user_id: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]:  # noqa: D102
        return await asyncio.to_thread(self._sync.get, user_id, ids)

    async def aget_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:  # noqa: D102
        return await asyncio.to_thread(self._sync.get_vectors, user_id, ids)

    async def atouch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:  # noqa: D102
        await asyncio.to_thread(self._sync.touch, user_id, ids, when)

    async def alist(  # noqa: D102
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        store = self._sync
        return await asyncio.to_thread(lambda: store.list(user_id, filter=filter, limit=limit, offset=offset))

    async def adelete(self, user_id: str, ids: Sequence[str]) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete, user_id, ids)

    async def adelete_user(self, user_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete_user, user_id)

    async def acount(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.count(user_id, filter=filter))

    async def aclose(self) -> None:  # noqa: D102
        await asyncio.to_thread(self._sync.close)

    async def auser_epoch(self, user_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.user_epoch, user_id)

    async def aappend_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.append_turns(turns, epoch=epoch))

    async def aload_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.load_session(user_id, session_id, after_seq=after_seq))

    async def adelete_session(self, user_id: str, session_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete_session, user_id, session_id)
