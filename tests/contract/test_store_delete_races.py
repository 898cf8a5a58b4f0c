"""A store's read-modify-write (``update``, ``touch``) racing a delete of one memory by another process.

``update`` and ``touch`` read the stored memory, then write a changed copy. A ``delete`` of that
memory from a second store object on the same data (another process) lands between the read and
the write through a hook, so the race is deterministic. The deleted memory must not come back.

LocalStore changes rows in place (an ``UPDATE`` of a deleted row changes nothing). WeaviateStore
changes objects in place too, with merges (``PATCH``), which the server refuses for an object
that no longer exists (a batch insert, which it used before, re-created it). The hook point there
is the store's private merge (``_merge``), the only place between its read and its write.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.errors import NotFoundError
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder
from tests.contract.test_forget_races import _before


@pytest.mark.parametrize("op", ["update", "touch"])
def test_a_memory_deleted_by_another_process_during_update_or_touch_stays_deleted(
    stores: tuple[MemoryStore, MemoryStore], op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    rec = HybridMemory(app_store, embedder=HashingEmbedder()).remember("u", "I love hiking", importance=0.9).record
    assert rec is not None
    weaviate = hasattr(app_store, "_pending")
    deleted: list[int] = []
    _before(
        app_store, "_merge" if weaviate else op, lambda: deleted.append(other_store.delete("u", [rec.id])), monkeypatch
    )
    if op == "update":
        with pytest.raises(NotFoundError):  # the memory the update read was deleted meanwhile
            app_store.update([rec.evolve(importance=0.5)])
    else:
        app_store.touch("u", [rec.id], datetime.now(timezone.utc))
    if deleted != [1]:  # the race did not happen: a real failure, not the expected one
        pytest.fail(f"the delete of the other process did not land between the read and the write: {deleted}")
    assert other_store.get("u", [rec.id]) == [] and app_store.get("u", [rec.id]) == []


def test_a_memory_deleted_then_put_again_is_updated_and_touched(stores: tuple[MemoryStore, MemoryStore]) -> None:
    """An old delete of an id (a tombstone on Weaviate) never undoes a later update or touch of it."""
    app_store, other_store = stores
    mem = HybridMemory(app_store, embedder=HashingEmbedder())
    rec = mem.remember("u", "I love hiking", importance=0.9).record
    assert rec is not None
    assert other_store.delete("u", [rec.id]) == 1
    mem.put(rec)  # the same id again
    app_store.update([rec.evolve(importance=0.5)])
    app_store.touch("u", [rec.id], datetime.now(timezone.utc))
    (got,) = other_store.get("u", [rec.id])
    assert (got.importance, got.access_count) == (0.5, rec.access_count + 1)
