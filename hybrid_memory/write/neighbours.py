"""The writer's per-user neighbour index: ids and unit vectors of each user's active memories.

:class:`NeighbourCache` keeps one :class:`UserIndex` per user so that a batch of drafts is compared
with one matrix product against the user's active vectors, never one search per draft. The cache is
only a cache: :meth:`NeighbourCache.load` rebuilds a user's index from the store when the number of
active memories or the user's forget epoch no longer matches (another process wrote or forgot).

Example:
    >>> import numpy as np
    >>> idx = UserIndex(["a"], np.array([[1.0, 0.0]], dtype=np.float32), 2)
    >>> idx.add(["b"], np.array([[0.0, 1.0]], dtype=np.float32)); idx.remove(["a"])
    >>> idx.count, [round(float(x), 2) for x in idx.sims(np.array([[0.6, 0.8]], dtype=np.float32))[0]]
    (1, [-inf, 0.8])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hybrid_memory.stores.base import MemoryFilter, MemoryStore, Vector

__all__ = ["NeighbourCache", "UserIndex"]


class UserIndex:
    """Ids and unit vectors of one user's active memories, grown in place (capacity doubling)."""

    #: The forget epoch the index was built at (``None``: unknown).
    epoch: int | None = None

    def __init__(self, ids: list[str], matrix: Vector, dim: int) -> None:
        self.dim = dim
        n = len(ids)
        cap = max(64, n * 2)
        self.m = np.zeros((cap, dim), dtype=np.float32)
        if n:
            self.m[:n] = matrix
        self.alive = np.zeros(cap, dtype=bool)
        self.alive[:n] = True
        self.ids: list[str] = list(ids)
        self.pos = {mid: i for i, mid in enumerate(ids)}
        self.n = n

    @property
    def count(self) -> int:
        """Live rows (memories still active)."""
        return int(self.alive[: self.n].sum())

    def add(self, ids: Sequence[str], vectors: Vector) -> None:
        """Add or revive ``ids`` with their unit ``vectors`` (one row each)."""
        for mid, v in zip(ids, vectors, strict=True):
            if mid in self.pos:
                i = self.pos[mid]
                self.m[i] = v
                self.alive[i] = True
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
            self.pos[mid] = self.n
            self.n += 1

    def remove(self, ids: Sequence[str]) -> None:
        """Mark ``ids`` dead (unknown ids are ignored)."""
        for mid in ids:
            i = self.pos.get(mid)
            if i is not None:
                self.alive[i] = False

    def sims(self, vectors: Vector) -> Vector:
        """Cosines ``(len(vectors), n)``; dead rows are -inf."""
        s: Vector = vectors @ self.m[: self.n].T
        dead = ~self.alive[: self.n]
        if dead.any():
            s[:, dead] = -np.inf
        return s


class NeighbourCache:
    """One :class:`UserIndex` per user, loaded from ``store`` on demand.

    One user's index is only used under that user's write lock (:meth:`MemoryWriter.locked`); the
    table itself is a dict whose single operations are atomic, so different users never race.

    Args:
        store: Where the active memories and their vectors are read from.
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._by_user: dict[str, UserIndex] = {}

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._by_user

    def peek(self, user_id: str) -> UserIndex | None:
        """The cached index of ``user_id`` without checking it against the store (``None``: not cached)."""
        return self._by_user.get(user_id)

    def drop(self, user_id: str | None = None) -> None:
        """Forget the index of ``user_id`` (every user when ``None``); rebuilt on the next :meth:`load`."""
        if user_id is None:
            self._by_user.clear()
        else:
            self._by_user.pop(user_id, None)

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
            return idx
        recs = self.store.list(user_id, filter=active) if n_store else []
        ids = [r.id for r in recs]
        vecs = self.store.get_vectors(user_id, ids) if ids else {}
        ids = [i for i in ids if i in vecs]
        m = np.stack([vecs[i] for i in ids]).astype(np.float32) if ids else np.zeros((0, dim), dtype=np.float32)
        idx = self._by_user[user_id] = UserIndex(ids, m, dim)
        idx.epoch = epoch
        return idx
