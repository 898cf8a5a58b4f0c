"""Tombstones of deleted memories on a real weaviate-server (:mod:`hybrid_memory.stores.weaviate.tombstones`).

The delete race of ``tests/contract/test_store_delete_races.py`` covers the leg where the writer
sees the new tombstone after its write. Here: the other leg (the tombstone lands after the
writer's check, so the deleter's second delete removes what the writer re-created), the
collection's life cycle and the pruning of old tombstones. Two store objects on one collection
stand for two processes; events order their steps, nothing is timed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
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


@pytest.mark.parametrize("op", ["update", "touch"])
def test_a_tombstone_landing_after_the_writers_check_still_leaves_the_memory_deleted(
    weaviate_store_factory: Callable[..., WeaviateStore], op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = weaviate_store_factory()
    other = weaviate_store_factory(collection=app.collection)  # another process on the same data
    (rec,) = _remember(app, "I love hiking")
    deleted_once = threading.Event()  # the other process deleted the object, no tombstone yet
    checked = threading.Event()  # the app's update/touch returned (its tombstone check saw nothing)
    result: list[int] = []
    real_bury, real_write = other._bury, app._write

    def held_bury(user_id: str, ids: Sequence[str]) -> None:
        deleted_once.set()
        checked.wait(120)  # a guard against a hang, not a timing: the test sets it right away
        real_bury(user_id, ids)

    def write_after_the_delete(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(app, "_write", real_write)
        deleter.start()
        assert deleted_once.wait(120)
        return real_write(*args, **kwargs)

    deleter = threading.Thread(target=lambda: result.append(other.delete("u", [rec.id])))
    monkeypatch.setattr(other, "_bury", held_bury)
    monkeypatch.setattr(app, "_write", write_after_the_delete)
    try:
        if op == "update":
            app.update([rec.evolve(importance=0.5)])  # no tombstone yet: the update believes it landed
        else:
            app.touch("u", [rec.id], datetime.now(timezone.utc))
        assert [r.id for r in app.get("u", [rec.id])] == [rec.id]  # re-created: the window is real
    finally:
        checked.set()
        if deleter.is_alive() or deleted_once.is_set():
            deleter.join()
    assert result == [1]
    assert app.get("u", [rec.id]) == [] and other.get("u", [rec.id]) == []  # the second delete removed it


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
    real_write = app._write

    def write_after_the_deletes(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(app, "_write", real_write)
        assert other.delete("u", [u_rec.id]) == 1 and other.delete("v", [v_rec.id]) == 1
        return real_write(*args, **kwargs)

    monkeypatch.setattr(app, "_write", write_after_the_deletes)
    with pytest.raises(NotFoundError):
        app.update([u_rec.evolve(importance=0.5), v_rec.evolve(importance=0.5)])
    assert other.get("u", [u_rec.id]) == [] and other.get("v", [v_rec.id]) == []
