"""Optional store capabilities over a user's vectors: nearest memories, and their mean.

A store that implements :class:`NeighbourSource` answers the writer's dedup and conflict lookups
from its own index (``LocalStore`` does), so the writer keeps no second copy of the vectors. A
store that implements :class:`MeanSource` gives query centring (``retrieval.centre_weight``) the
mean of a user's active vectors (``LocalStore`` and ``WeaviateStore`` do); without it, centring is
off for that store.

Example:
    >>> import numpy as np
    >>> nearest(np.array([[0.9, 0.95, 0.1]], dtype=np.float32), ["a", "b", "c"], ["f"] * 3, 0.5, 1)
    [[('b', 0.949999988079071, 'f')]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from hybrid_memory.values import Vector

__all__ = ["MeanSource", "Neighbour", "NeighbourSource", "nearest"]

#: ``(memory id, cosine similarity, category)`` of one neighbour.
Neighbour = tuple[str, float, str]


@runtime_checkable
class NeighbourSource(Protocol):
    """A store that finds a user's nearest active memories in its own index (optional store capability)."""

    def neighbours(self, user_id: str, vectors: Vector, *, threshold: float, top: int) -> list[list[Neighbour]]:
        """Per row of ``vectors`` (unit): at most ``top`` active memories with cosine >= ``threshold``.

        Most similar first, ties by id.
        """
        ...


@runtime_checkable
class MeanSource(Protocol):
    """A store that can give the mean of a user's active vectors (optional capability; ``retrieval.centre_weight``)."""

    def mean_vector(self, user_id: str) -> Vector | None:
        """The mean of ``user_id``'s active unit vectors (not renormalised); ``None`` when there is none."""
        ...


def nearest(
    sims: Vector, ids: Sequence[str], categories: Sequence[str], threshold: float, top: int
) -> list[list[Neighbour]]:
    """Per row of ``sims`` (``-inf`` for rows to skip): the ``top`` columns at or above ``threshold``.

    Each neighbour is ``(ids[j], sims[row, j], categories[j])``, most similar first, ties by id.
    """
    out: list[list[Neighbour]] = [[] for _ in range(len(sims))]
    hit = sims >= np.float32(threshold)
    for a in np.flatnonzero(hit.any(axis=1)).tolist():
        row = sims[a]
        js = np.flatnonzero(hit[a])
        if js.size > top:
            js = js[np.argpartition(-row[js], top - 1)[:top]]
        found = sorted((-float(row[j]), ids[j], categories[j]) for j in js.tolist())
        out[a] = [(mid, -neg, cat) for neg, mid, cat in found]
    return out
