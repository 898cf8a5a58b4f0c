"""``remember`` racing a ``forget(memory_id)`` of another process whose memory it deduplicates into.

The writer reads a near-duplicate (or the same id) it will bump, then updates it. A forget of that
one memory from a second store object on the same data (another process) lands right before the
update through a hook on the first store, so the race is deterministic. The writer treats the
vanished memory as absent and plans the write again once without it: the new text is added (was
a ``NotFoundError`` about an id the caller never passed), the deleted memory stays deleted.
LocalStore on a file and a real Weaviate server (``tests/weaviate_fixtures.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.writer import BULK_MIN_ITEMS
from tests.contract.test_forget_races import _EVERY, _HIKE, _before


@pytest.mark.parametrize("again", ["a near-duplicate", "the same text"])
def test_remember_whose_dedup_target_is_forgotten_by_another_process_adds_the_new_memory(
    stores: tuple[MemoryStore, MemoryStore], again: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    app = HybridMemory(app_store, embedder=HashingEmbedder())
    other = HybridMemory(other_store, embedder=HashingEmbedder())
    first = app.remember("u", _HIKE, importance=0.9).record
    assert first is not None
    app.remember("u", "My sister lives in Lisbon", importance=0.9)
    deleted: list[bool] = []
    _before(app_store, "update", lambda: deleted.append(other.forget(first.id, user_id="u")), monkeypatch)
    text = _HIKE + "!" if again == "a near-duplicate" else _HIKE
    out = app.remember("u", text, importance=0.8)
    assert deleted == [True]
    assert out.action == "added" and out.record is not None and out.record.content == text
    left = sorted((r.content, r.access_count) for r in other_store.list("u", filter=_EVERY))
    assert left == sorted([("My sister lives in Lisbon", 0), (text, 0)])  # nothing of the deleted one came back
    if again == "a near-duplicate":
        assert other_store.get("u", [first.id]) == []


def test_remember_whose_superseded_target_is_forgotten_by_another_process_keeps_the_new_memory(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    app = HybridMemory(app_store, embedder=HashingEmbedder())
    other = HybridMemory(other_store, embedder=HashingEmbedder())
    old = app.remember("u", "I eat meat", importance=0.8).record
    assert old is not None
    _before(app_store, "update", lambda: other.forget(old.id, user_id="u"), monkeypatch)
    out = app.remember("u", "I no longer eat meat", importance=0.8)
    assert out.action == "superseded" and out.related_id == old.id  # decided while the old one was there
    assert [r.content for r in other_store.list("u", filter=_EVERY)] == ["I no longer eat meat"]
    assert other_store.get("u", [old.id]) == []


def test_mark_superseded_of_a_memory_deleted_by_another_process_returns_none(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next session summary supersedes the previous one; a delete of that one meanwhile wins."""
    app_store, other_store = stores
    app = HybridMemory(app_store, embedder=HashingEmbedder())
    old = app.remember("u", "Summary: we planned a trip to Lisbon", importance=0.8).record
    new = app.remember("u", "Summary: the trip to Lisbon is booked for May", importance=0.8).record
    assert old is not None and new is not None
    _before(app_store, "update", lambda: other_store.delete("u", [old.id]), monkeypatch)
    assert app.writer.mark_superseded("u", old.id, new, epoch=app_store.user_epoch("u")) is None
    assert [r.id for r in other_store.list("u", filter=_EVERY)] == [new.id]


@pytest.mark.weaviate
def test_a_bulk_remember_many_whose_held_bump_target_is_deleted_meanwhile_does_not_fail(
    weaviate_contract_store: MemoryStore,
    weaviate_contract_twin: Callable[[MemoryStore], MemoryStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk write (Weaviate: held records, flushed when the call ends) bumps a memory deleted before the flush."""
    app_store = weaviate_contract_store
    other_store = weaviate_contract_twin(app_store)
    try:
        app = HybridMemory(app_store, embedder=HashingEmbedder())
        first = app.remember("u", _HIKE, importance=0.9).record
        assert first is not None
        items = [_HIKE, *(f"Fact number {n}: my locker code is {n * 7919}" for n in range(BULK_MIN_ITEMS))]
        _before(app_store, "update", lambda: other_store.delete("u", [first.id]), monkeypatch)
        outcomes = app.remember_many("u", items)
        assert outcomes[0].action == "deduplicated" and outcomes[0].related_id == first.id
        assert other_store.get("u", [first.id]) == []  # the held bump did not bring it back
        assert other_store.count("u") == BULK_MIN_ITEMS
    finally:
        other_store.close()
