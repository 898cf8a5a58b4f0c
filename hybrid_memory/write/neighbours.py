"""Where the writer finds each draft's nearest active memories: the store's own index, or a fallback cache.

A store that can answer "the active memories of this user most similar to each of these
vectors" implements :class:`NeighbourSource` (``LocalStore`` does, from the same in-process index
its searches use, kept current across processes by a per-user change counter). The writer then
keeps no vectors of its own and needs no per-write count: the store's index is the one index.

A store whose neighbour queries are network round trips (``WeaviateStore``: one query per row)
also implements :class:`SnapshotSource`: for a large ``remember_many`` the writer copies the
user's active vectors once (bounded) into a :class:`UserIndex`, keeps it current with its own
writes for the duration of the call (:meth:`MemoryWriter.bulk`) and checks each batch with one
matrix product.

For a store without either, :class:`NeighbourCache` keeps one :class:`UserIndex` per user (ids,
categories and unit vectors of the user's active memories), accounted in the process's cache
budget (:mod:`hybrid_memory.stores.budget`, least recently used users evicted first). It is only
a cache: :meth:`NeighbourCache.load` rebuilds a user's index when the number of active memories
or the user's forget epoch no longer matches the store (another process wrote or forgot).

Example:
    >>> import numpy as np
    >>> idx = UserIndex(["a"], np.array([[1.0, 0.0]], dtype=np.float32), 2, ["fact"])
    >>> idx.add(["b"], np.array([[0.0, 1.0]], dtype=np.float32), ["preference"]); idx.remove(["a"])
    >>> idx.count, idx.neighbours(np.array([[0.6, 0.8]], dtype=np.float32), 0.5, 3)
    (1, [[('b', 0.800000011920929, 'preference')]])
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from hybrid_memory.stores.base import MemoryFilter, MemoryStore, Vector
from hybrid_memory.stores.budget import CacheBudget, cache_budget
from hybrid_memory.stores.nearest import Neighbour, NeighbourSource, nearest

__all__ = ["Neighbour", "NeighbourCache", "NeighbourSource", "SnapshotSource", "UserIndex", "nearest"]


@runtime_checkable
class SnapshotSource(Protocol):
    """A store that can hand over a user's active vectors in one request (optional store capability)."""

    def active_vectors(self, user_id: str, *, limit: int) -> tuple[list[str], list[str], Vector] | None:
        """``(ids, categories, unit vectors)`` of the user's active memories; ``None`` when more than ``limit``."""
        ...


class UserIndex:
    """Ids, categories and unit vectors of one user's active memories, grown in place (capacity doubling)."""

    #: The forget epoch the index was built at (``None``: unknown).
    epoch: int | None = None

    def __init__(self, ids: list[str], matrix: Vector, dim: int, categories: Sequence[str]) -> None:
        self.dim = dim
        n = len(ids)
        cap = max(64, n * 2)
        self.m = np.zeros((cap, dim), dtype=np.float32)
        if n:
            self.m[:n] = matrix
        self.alive = np.zeros(cap, dtype=bool)
        self.alive[:n] = True
        self.ids: list[str] = list(ids)
        self.categories: list[str] = list(categories)
        self.pos = {mid: i for i, mid in enumerate(ids)}
        self.n = n

    @property
    def count(self) -> int:
        """Live rows (memories still active)."""
        return int(self.alive[: self.n].sum())

    @property
    def nbytes(self) -> int:
        """Estimated bytes held (the matrix at capacity plus ~200 bytes of Python objects per row)."""
        return int(self.m.nbytes + self.alive.nbytes) + 200 * self.n

    def add(self, ids: Sequence[str], vectors: Vector, categories: Sequence[str]) -> None:
        """Add or revive ``ids`` with their unit ``vectors`` (one row each) and categories."""
        for mid, v, cat in zip(ids, vectors, categories, strict=True):
            if mid in self.pos:
                i = self.pos[mid]
                self.m[i] = v
                self.alive[i] = True
                self.categories[i] = cat
                continue
            if self.n == len(self.m):
                grow = len(self.m) * 2
                m = np.zeros((grow, self.dim), dtype=np.float32)
                m[: self.n] = self.m[: self.n]
                a = np.zeros(grow, dtype=bool)
                a[: self.n] = self.alive[: self.n]
                self.m, self.alive = m, a
            self.m[self.n] = v
            self.alive[self.n] = True
            self.ids.append(mid)
            self.categories.append(cat)
            self.pos[mid] = self.n
            self.n += 1

    def remove(self, ids: Sequence[str]) -> None:
        """Mark ``ids`` dead (unknown ids are ignored)."""
        for mid in ids:
            i = self.pos.get(mid)
            if i is not None:
                self.alive[i] = False

    def neighbours(self, vectors: Vector, threshold: float, top: int) -> list[list[Neighbour]]:
        """Per row of ``vectors``: the live rows with cosine >= ``threshold`` (see :func:`nearest`)."""
        if not self.n:
            return [[] for _ in range(len(vectors))]
        s: Vector = vectors @ self.m[: self.n].T
        dead = ~self.alive[: self.n]
        if dead.any():
            s[:, dead] = -np.inf
        return nearest(s, self.ids, self.categories, threshold, top)


class NeighbourCache:
    """One :class:`UserIndex` per user, loaded from ``store`` on demand, within the cache budget.

    One user's index is only used under that user's write lock (:meth:`MemoryWriter.locked`); the
    table itself is a dict whose single operations are atomic, so different users never race.

    Args:
        store: Where the active memories and their vectors are read from.
        budget: The cache budget (default: the process's).
    """

    def __init__(self, store: MemoryStore, budget: CacheBudget | None = None) -> None:
        self.store = store
        self._budget = budget if budget is not None else cache_budget()
        self._by_user: dict[str, UserIndex] = {}
        self._evict = self._budget.owner(self, NeighbourCache._evicted)

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._by_user

    def _evicted(self, user_id: Hashable) -> None:
        self._by_user.pop(str(user_id), None)

    def peek(self, user_id: str) -> UserIndex | None:
        """The cached index of ``user_id`` without checking it against the store (``None``: not cached)."""
        return self._by_user.get(user_id)

    def resized(self, user_id: str) -> None:
        """Re-account the size of ``user_id``'s index after the writer changed it in place."""
        idx = self._by_user.get(user_id)
        if idx is not None:
            self._budget.resize(self._evict, user_id, idx.nbytes)

    def drop(self, user_id: str | None = None) -> None:
        """Forget the index of ``user_id`` (every user when ``None``); rebuilt on the next :meth:`load`."""
        if user_id is None:
            self._by_user.clear()
            self._budget.discard_owner(self._evict)
        else:
            self._by_user.pop(user_id, None)
            self._budget.discard(self._evict, user_id)

    def put(self, user_id: str, idx: UserIndex) -> None:
        """Cache ``idx`` as ``user_id``'s index (replacing any), accounted in the budget."""
        self._by_user[user_id] = idx
        self._budget.add(self._evict, user_id, idx.nbytes)

    def load(self, user_id: str, dim: int, epoch: int | None) -> UserIndex:
        """The index of ``user_id``'s active memories, rebuilt from the store when it may be stale.

        The cached index is reused when its dimension, its number of live rows and the forget
        ``epoch`` it was built at match the store (``epoch=None``: not checked).
        """
        active = MemoryFilter()
        idx = self._by_user.get(user_id)
        n_store = self.store.count(user_id, filter=active)
        # A forget in another process bumps the epoch: the cached neighbours may be gone.
        if idx is not None and idx.dim == dim and idx.count == n_store and (epoch is None or idx.epoch == epoch):
            self._budget.hit(self._evict, user_id)
            return idx
        recs = self.store.list(user_id, filter=active) if n_store else []
        cats = {r.id: r.category for r in recs}
        ids = [r.id for r in recs]
        vecs = self.store.get_vectors(user_id, ids) if ids else {}
        ids = [i for i in ids if i in vecs]
        m = np.stack([vecs[i] for i in ids]).astype(np.float32) if ids else np.zeros((0, dim), dtype=np.float32)
        idx = UserIndex(ids, m, dim, [cats[i] for i in ids])
        idx.epoch = epoch
        self.put(user_id, idx)
        return idx
