"""Tombstones of deleted memories on a real weaviate-server (:mod:`hybrid_memory.stores.weaviate.tombstones`).

Tombstones guard the dead-letter replay (``test_weaviate_store.py`` and
``tests/reliability/test_weaviate_crash_windows.py``); ``update`` and ``touch`` merge in place and
need none (``tests/contract/test_store_delete_races.py``). Here: the collection's life cycle, the
pruning of old tombstones, and updates of memories deleted meanwhile. Two store objects on one
collection stand for two processes; hooks order their steps, nothing is timed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.errors import NotFoundError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.weaviate import WeaviateStore, tombstones
from hybrid_memory.testing import HashingEmbedder

pytestmark = pytest.mark.weaviate


def _remember(store: WeaviateStore, *texts: str) -> list[MemoryRecord]:
    mem = HybridMemory(store, embedder=HashingEmbedder())
    out = [mem.remember("u", t, importance=0.9).record for t in texts]
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


def test_delete_leaves_a_fresh_tombstone_per_delete_and_the_collection_lives_with_the_store(
    weaviate_store_factory: Callable[..., WeaviateStore],
) -> None:
    store = weaviate_store_factory()
    assert store._client.collections.exists(store.tombstones_collection)
    a, b = _remember(store, "I love hiking", "My sister lives in Lisbon")
    assert store._tombstones("u", [a.id, b.id]) == {}
    assert store.delete("u", [a.id]) == 1
    first = store._tombstones("u", [a.id, b.id])
    assert list(first) == [a.id]
    assert store.delete("u", [a.id]) == 0  # already gone: still a new token (a delete happened)
    assert store._tombstones("u", [a.id])[a.id] != first[a.id]
    assert store._tombstones("v", [a.id]) == {}  # tombstones are per user
    store.drop()
    assert not store._client.collections.exists(store.tombstones_collection)


def test_old_tombstones_are_pruned_by_a_later_delete_at_most_once_per_interval(
    weaviate_store_factory: Callable[..., WeaviateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = weaviate_store_factory()
    a, b, c = _remember(store, "I love hiking", "My sister lives in Lisbon", "I play the cello")
    store.delete("u", [a.id])  # the first delete of this store object prunes (nothing old yet)
    assert list(store._tombstones("u", [a.id])) == [a.id]
    monkeypatch.setattr(tombstones, "TOMBSTONE_TTL", timedelta(0))  # everything before now is old
    store.delete("u", [b.id])  # within the prune interval: nothing pruned
    assert sorted(store._tombstones("u", [a.id, b.id])) == sorted([a.id, b.id])
    monkeypatch.setattr(store, "_last_prune", float("-inf"))
    store.delete("u", [c.id])  # prunes what was written before this delete
    assert list(store._tombstones("u", [a.id, b.id, c.id])) == [c.id]
    store._prune_tombstones(datetime.now(timezone.utc) + timedelta(minutes=1))
    assert store._tombstones("u", [c.id]) == {}


def test_a_store_on_a_schema_from_before_tombstones_touches_and_deletes_without_ensure_schema(
    weaviate_store_factory: Callable[..., WeaviateStore],
) -> None:
    first = weaviate_store_factory()
    a, b = _remember(first, "I love hiking", "My sister lives in Lisbon")
    first._client.collections.delete(first.tombstones_collection)  # as an older version left it
    old = weaviate_store_factory(collection=first.collection, create_schema=False)
    old.touch("u", [a.id], datetime.now(timezone.utc))  # no tombstone collection: nothing deleted since
    assert old.get("u", [a.id])[0].access_count == a.access_count + 1
    assert old.delete("u", [b.id]) == 1  # creates the collection for its tombstone
    assert list(old._tombstones("u", [a.id, b.id])) == [b.id]
    assert first.get("u", [b.id]) == []


def test_an_update_of_two_users_both_deleted_meanwhile_leaves_both_deleted(
    weaviate_store_factory: Callable[..., WeaviateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = weaviate_store_factory()
    other = weaviate_store_factory(collection=app.collection)
    mem = HybridMemory(app, embedder=HashingEmbedder())
    recs = [mem.remember(user, "I love hiking", importance=0.9).record for user in ("u", "v")]
    assert all(r is not None for r in recs)
    u_rec, v_rec = (r for r in recs if r is not None)
    real_merge = app._merge

    def merge_after_the_deletes(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(app, "_merge", real_merge)
        assert other.delete("u", [u_rec.id]) == 1 and other.delete("v", [v_rec.id]) == 1
        return real_merge(*args, **kwargs)

    monkeypatch.setattr(app, "_merge", merge_after_the_deletes)
    with pytest.raises(NotFoundError):
        app.update([u_rec.evolve(importance=0.5), v_rec.evolve(importance=0.5)])
    assert other.get("u", [u_rec.id]) == [] and other.get("v", [v_rec.id]) == []
