"""Lifecycle: archive what faded, delete what is gone, merge near-duplicates.

:func:`consolidate` applies the rules of architecture §6 to one user's memories at a given time:

* ``freshness < delete_freshness`` (0.05) → **deleted** (active or archived);
* ``freshness < archive_freshness`` (0.1) → **archived**;
* no activity (update or access) for ``archive_after_days`` (90) and importance below
  ``archive_below_importance`` (0.6) → **archived**;
* active near-duplicates (cosine at or above the embedder's dedup threshold, same numbers and
  negation) are **merged** into the most complete one (longest text, then most important, then
  newest), which inherits the highest importance, the summed access count, and the union of tags
  and provenance; the others are deleted.

``freshness`` is :func:`hybrid_memory.retrieval.freshness`: recency with a half-life stretched by
importance (``half_life · (1 + 9·importance)``), so an important memory fades ten times slower.
Archived memories leave normal recall but are found with ``include_archived=True`` and by the
archive fall-back when active memory has nothing relevant. Superseded memories are left alone so
version chains stay inspectable.

A forget wins over a consolidation (architecture §10): the user's forget epoch is read before the
memories are, every update carries it (the store refuses it once a ``forget_user`` from any
process bumped the epoch), and the epoch is checked again at the end, so a run racing a forget
raises :class:`~hybrid_memory.errors.UserForgottenError` instead of writing a forgotten memory
back, reporting work the forget undid, or failing with a ``NotFoundError`` about an id the
caller never passed. A ``delete`` of some memories by another process wins too: their archive is
dropped, and a merge whose kept memory is gone is not made, so its other members stay (merged
away, their text would be gone with it); a memory merged away that another process deleted
meanwhile still lends its tags and provenance to the kept one (the merge read it first). Any
other change by another process between the read and the writes (a restated memory bumped, an
edit, a touch, a supersede) wins as well: the memories to change are read again just before the
writes, and one that changed is left for the next run, with the merge it belongs to.

Example:
    >>> from datetime import datetime, timedelta, timezone
    >>> from hybrid_memory.stores.local import LocalStore
    >>> from hybrid_memory.records import MemoryRecord
    >>> from hybrid_memory.testing import HashingEmbedder
    >>> store, emb = LocalStore(":memory:"), HashingEmbedder()
    >>> day0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> recs = [MemoryRecord.create(user_id="u", content="I am allergic to peanuts", importance=1.0, timestamp=day0),
    ...         MemoryRecord.create(user_id="u", content="saw a funny cat video", importance=0.1, timestamp=day0)]
    >>> store.upsert(recs, emb.embed_documents([r.content for r in recs]))
    >>> rep = consolidate(store, "u", now=day0 + timedelta(days=45), dedup_threshold=emb.dedup_threshold)
    >>> [store.get("u", [r.id])[0].status for r in recs]
    ['active', 'archived']
    >>> rep = consolidate(store, "u", now=day0 + timedelta(days=120), dedup_threshold=emb.dedup_threshold)
    >>> len(rep.deleted), store.count("u")
    (1, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt

from hybrid_memory.config import LifecycleConfig
from hybrid_memory.errors import InvalidInputError, UserForgottenError
from hybrid_memory.read.rerank import freshness
from hybrid_memory.records import MemoryRecord, check_id, ensure_utc
from hybrid_memory.stores.base import MemoryFilter, MemoryStore, update_present
from hybrid_memory.write.conflict import HeuristicConflictJudge

__all__ = ["ConsolidationReport", "consolidate"]

_BLOCK = 1024


@dataclass(frozen=True)
class ConsolidationReport:
    """What :func:`consolidate` changed for one user (memory ids)."""

    user_id: str
    checked: int
    archived: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    merged: dict[str, list[str]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        """Number of memories archived, deleted or merged away."""
        return len(self.archived) + len(self.deleted)


def _last_activity(r: MemoryRecord) -> datetime:
    last = r.updated_at
    if r.last_accessed_at is not None and r.last_accessed_at > last:
        last = r.last_accessed_at
    return last


def _completeness(r: MemoryRecord) -> tuple[int, float, datetime, str]:
    return (len(" ".join(r.content.split())), r.importance, r.updated_at, r.id)


def _merge_groups(
    records: Sequence[MemoryRecord], vectors: npt.NDArray[np.float32], threshold: float
) -> list[list[int]]:
    """Groups (union-find) of records whose vectors are near-duplicates without a hard conflict."""
    n = len(records)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    judge = HeuristicConflictJudge()
    for start in range(0, n, _BLOCK):
        block = vectors[start : start + _BLOCK] @ vectors.T
        rows, cols = np.nonzero(block >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            i = start + r
            if c <= i:
                continue
            if judge.hard_conflict(records[i].content, records[c].content) is not None:
                continue
            a, b = find(i), find(c)
            if a != b:
                parent[b] = a
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def _unchanged_since_read(
    store: MemoryStore,
    user_id: str,
    records: Sequence[MemoryRecord],
    updates: list[MemoryRecord],
    archived: list[str],
    deleted: list[str],
    merged: dict[str, list[str]],
    reasons: dict[str, str],
) -> list[MemoryRecord]:
    """Drop the plans for memories another process changed since the read; return the updates left.

    The updates are whole records built from the copies read, and the decisions were taken on
    them: writing them over a memory that was restated (bumped), edited, touched or superseded
    meanwhile would undo that change, and a memory the user just restated could be deleted as
    faded. So the planned memories are read again just before the writes, and one that differs
    from its first read is left alone this run (with every member of a merge it belongs to); the
    next run decides on its new state. ``archived``, ``deleted``, ``merged`` and ``reasons`` are
    edited in place. Left: a change landing between this read and the writes (one round trip).
    """
    planned = {*archived, *deleted, *(u.id for u in updates)}
    if not planned:
        return updates
    first = {r.id: r for r in records}
    moved = {r.id for r in store.get(user_id, sorted(planned)) if r != first.get(r.id)}
    if not moved:
        return updates
    dropped = set(moved)
    for keep, others in list(merged.items()):
        if dropped.intersection([keep, *others]):
            dropped.update([keep, *others])
            del merged[keep]
    for i in dropped:
        reasons.pop(i, None)
    archived[:] = [i for i in archived if i not in dropped]
    deleted[:] = [i for i in deleted if i not in dropped]
    return [u for u in updates if u.id not in dropped]


def consolidate(
    store: MemoryStore,
    user_id: str,
    *,
    now: datetime,
    config: LifecycleConfig | None = None,
    half_life_days: float = 7.0,
    dedup_threshold: float = 0.92,
    merge: bool = True,
) -> ConsolidationReport:
    """Archive, delete and merge ``user_id``'s memories as of ``now`` (see the module docs).

    Args:
        store: The store holding the memories.
        user_id: Whose memories.
        now: Reference time (aware).
        config: Thresholds (default :class:`~hybrid_memory.config.LifecycleConfig`).
        half_life_days: Base half-life of freshness (the re-ranker's recency half-life).
        dedup_threshold: Cosine at or above which two memories are near-duplicates.
        merge: Merge near-duplicates.

    Returns:
        What changed.

    Raises:
        InvalidInputError: bad user id, naive ``now`` or non-positive half-life.
        UserForgottenError: the user was forgotten (from any process) while this ran; nothing
            read before the forget was written back.
    """
    check_id(user_id)
    when = ensure_utc(now, name="now")
    if not half_life_days > 0:
        raise InvalidInputError("half_life_days must be positive")
    cfg = config if config is not None else LifecycleConfig()
    epoch = store.user_epoch(user_id)  # before the read: a forget from here on refuses the update
    records = store.list(user_id, filter=MemoryFilter(statuses=("active", "archived")))
    archived: list[str] = []
    deleted: list[str] = []
    reasons: dict[str, str] = {}
    updates: list[MemoryRecord] = []
    survivors: list[MemoryRecord] = []
    for r in records:
        f = freshness(r, when, half_life_days)
        idle_days = (when - _last_activity(r)).total_seconds() / 86400.0
        if f < cfg.delete_freshness:
            deleted.append(r.id)
            reasons[r.id] = f"freshness {f:.3f} < {cfg.delete_freshness}"
        elif r.status == "active" and f < cfg.archive_freshness:
            archived.append(r.id)
            reasons[r.id] = f"freshness {f:.3f} < {cfg.archive_freshness}"
            updates.append(r.evolve(status="archived"))
        elif (
            r.status == "active" and idle_days > cfg.archive_after_days and r.importance < cfg.archive_below_importance
        ):
            archived.append(r.id)
            reasons[r.id] = (
                f"idle {idle_days:.0f} days > {cfg.archive_after_days:g} with importance "
                f"{r.importance:.2f} < {cfg.archive_below_importance}"
            )
            updates.append(r.evolve(status="archived"))
        elif r.status == "active" and r.category != "summary":
            survivors.append(r)

    merged: dict[str, list[str]] = {}
    if merge and len(survivors) > 1:
        vecs = store.get_vectors(user_id, [r.id for r in survivors])
        survivors = [r for r in survivors if r.id in vecs]
        if len(survivors) > 1:
            m = np.stack([vecs[r.id] for r in survivors]).astype(np.float32)
            for group in _merge_groups(survivors, m, dedup_threshold):
                members = [survivors[i] for i in group]
                keep = max(members, key=_completeness)
                others = [r for r in members if r.id != keep.id]
                accessed = [r.last_accessed_at for r in members if r.last_accessed_at is not None]
                updates.append(
                    keep.evolve(
                        importance=max(r.importance for r in members),
                        access_count=sum(r.access_count for r in members),
                        tags=tuple(dict.fromkeys(t for r in members for t in r.tags)),
                        provenance=tuple(dict.fromkeys(p for r in members for p in r.provenance)),
                        updated_at=max(r.updated_at for r in members),
                        last_accessed_at=max(accessed) if accessed else None,
                    )
                )
                merged[keep.id] = [r.id for r in others]
                for r in others:
                    deleted.append(r.id)
                    reasons[r.id] = f"merged into {keep.id}"
    updates = _unchanged_since_read(store, user_id, records, updates, archived, deleted, merged, reasons)
    # Another process may delete some of these memories after the read: the delete wins. Their
    # archive is dropped, and a merge whose kept memory is gone is not made (its other members
    # stay as they are: merged away, their text would be lost with it).
    for _, gone in sorted(update_present(store, updates, epochs={user_id: epoch})):
        reasons.pop(gone, None)
        if gone in archived:
            archived.remove(gone)
        for other in merged.pop(gone, []):
            deleted.remove(other)
            reasons.pop(other, None)
    if deleted:
        store.delete(user_id, deleted)
    if store.user_epoch(user_id) != epoch:  # what this read or reports was deleted by the forget
        raise UserForgottenError(user_id)
    return ConsolidationReport(user_id, len(records), archived, deleted, merged, reasons)
