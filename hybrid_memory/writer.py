"""The long-term write path: gate, embed, deduplicate and store memories.

Every write returns a :class:`~hybrid_memory.records.WriteOutcome` (added / deduplicated /
superseded / demoted / rejected, with the reason): nothing is dropped silently.

Example:
    >>> from hybrid_memory.stores.local import LocalStore
    >>> from hybrid_memory.records import MemoryRecord
    >>> from hybrid_memory.testing import HashingEmbedder
    >>> w = MemoryWriter(LocalStore(":memory:"), HashingEmbedder())
    >>> r = MemoryRecord.create(user_id="u", content="I like tea", importance=0.6)
    >>> [o.action for o in w.write([r, r])]
    ['added', 'deduplicated']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from hybrid_memory.config import WriterConfig
from hybrid_memory.embeddings import Embedder
from hybrid_memory.records import MemoryRecord, WriteOutcome, utcnow
from hybrid_memory.stores.base import MemoryStore

__all__ = ["MemoryWriter"]


class MemoryWriter:
    """Applies the write policy and stores memories with their embeddings.

    Args:
        store: Where memories go.
        embedder: Embeds memory text.
        config: Write policy settings.
        clock: Returns "now" (UTC); injectable for tests and replays.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: WriterConfig | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.config = config if config is not None else WriterConfig()
        self.clock = clock

    def write(self, drafts: Sequence[MemoryRecord]) -> list[WriteOutcome]:
        """Write ``drafts`` (any users) and return one outcome per draft, in order."""
        outcomes: list[WriteOutcome | None] = [None] * len(drafts)
        todo: list[int] = []
        for i, d in enumerate(drafts):
            if d.importance < self.config.min_importance:
                outcomes[i] = WriteOutcome(
                    action="rejected",
                    record=d,
                    reason=f"importance {d.importance:.2f} below min_importance {self.config.min_importance:.2f}",
                )
            else:
                todo.append(i)

        # Exact duplicates (same deterministic id) inside the batch or already stored.
        first_of: dict[tuple[str, str], int] = {}
        fresh: list[int] = []
        for i in todo:
            key = (drafts[i].user_id, drafts[i].id)
            if key in first_of:
                outcomes[i] = WriteOutcome(
                    action="deduplicated",
                    record=drafts[first_of[key]],
                    reason="same content in this batch",
                    related_id=drafts[i].id,
                )
                continue
            first_of[key] = i
            fresh.append(i)

        by_user: dict[str, list[int]] = {}
        for i in fresh:
            by_user.setdefault(drafts[i].user_id, []).append(i)
        now = self.clock()
        bumps: list[MemoryRecord] = []
        new: list[int] = []
        for user, idxs in by_user.items():
            existing = {r.id: r for r in self.store.get(user, [drafts[i].id for i in idxs])}
            for i in idxs:
                old = existing.get(drafts[i].id)
                if old is not None and old.status == "active":
                    bumped = old.evolve(
                        updated_at=max(now, old.updated_at),
                        access_count=old.access_count + 1,
                        importance=max(old.importance, drafts[i].importance),
                    )
                    bumps.append(bumped)
                    outcomes[i] = WriteOutcome(
                        action="deduplicated", record=bumped, reason="already stored", related_id=old.id
                    )
                else:
                    new.append(i)
        if bumps:
            self.store.update(bumps)
        if new:
            vectors = self.embedder.embed_documents([drafts[i].content for i in new])
            self.store.upsert([drafts[i] for i in new], vectors)
            for i in new:
                outcomes[i] = WriteOutcome(action="added", record=drafts[i])
        return [o for o in outcomes if o is not None]
