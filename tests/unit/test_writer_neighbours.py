"""The writer's neighbour lookups: the store's own index, kept current across processes without a per-write count."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory.errors import StoreUnavailableError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter, SearchRequest
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.neighbours import NeighbourSource
from hybrid_memory.write.writer import MemoryWriter

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
TEXTS = [
    "I have 2 kids",
    "I have 3 kids",
    "I live in Paris",
    "I live in Paris",
    "我喜欢喝茶",
    "我现在改喝咖啡了",
    "My sister Anna is a nurse",
    "I drink green tea every morning",
    "I no longer drink green tea every morning",
    "Project Falcon ships in May",
    "Project Falcon ships in June",
]


class _NoIndexStore:
    """Forwards to a LocalStore but hides its ``neighbours`` (a store without the capability)."""

    def __init__(self, inner: LocalStore) -> None:
        self._inner = inner
        self.counts = 0

    def count(self, *args: Any, **kwargs: Any) -> int:
        self.counts += 1
        return self._inner.count(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "neighbours":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _drafts(user: str) -> list[MemoryRecord]:
    return [
        MemoryRecord.create(user_id=user, content=t, importance=0.7, timestamp=T0 + timedelta(days=i))
        for i, t in enumerate(TEXTS)
    ]


def _summary(outcomes: list[Any]) -> list[tuple[str, str | None]]:
    return [(o.action, o.reason) for o in outcomes]


def test_store_index_and_fallback_cache_give_the_same_outcomes() -> None:
    emb = HashingEmbedder(dim=64)
    fast_store, slow_store = LocalStore(":memory:"), LocalStore(":memory:")
    slow = _NoIndexStore(slow_store)
    fast_w = MemoryWriter(fast_store, emb)
    slow_w = MemoryWriter(slow, emb)
    assert isinstance(fast_store, NeighbourSource) and not isinstance(slow, NeighbourSource)
    got_fast, got_slow = [], []
    for batch in (_drafts("u")[:5], _drafts("u")[5:], _drafts("u")):
        got_fast.append(_summary(fast_w.write(list(batch))))
        got_slow.append(_summary(slow_w.write([d.model_copy() for d in batch])))
    assert got_fast == got_slow
    assert {a for run in got_fast for a, _ in run} >= {"added", "deduplicated", "superseded"}
    assert slow.counts > 0  # the fallback checks the store; the store-index path never counts
    assert "u" not in fast_w._neighbours


def test_store_neighbours_are_active_only_most_similar_first() -> None:
    store = LocalStore(":memory:")
    recs = [MemoryRecord.create(user_id="u", content=f"m{i}") for i in range(3)]
    store.upsert(recs, np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0]], dtype=np.float32))
    store.update([recs[0].evolve(status="superseded")])
    q = np.array([[1, 0, 0], [0, 0, 1]], dtype=np.float32)
    found = store.neighbours("u", q, threshold=0.5, top=5)
    assert [[(m, c) for m, _s, c in row] for row in found] == [[(recs[1].id, "fact")], []]


def test_another_process_write_is_seen_and_other_users_partitions_survive(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    a, b = LocalStore(path), LocalStore(path)
    v = np.array([[1.0, 0.0]], dtype=np.float32)
    for user in ("u", "w"):
        a.upsert([MemoryRecord.create(user_id=user, content=f"{user} first")], v)
    req = SearchRequest(user_id="u", query="first", vector=v[0], alpha=0.5)
    assert (
        len(a.search(req)) == 1
        and len(a.search(SearchRequest(user_id="w", query="first", vector=v[0], alpha=0.5))) == 1
    )
    part_u, part_w = a._partitions["u"], a._partitions["w"]
    later = MemoryRecord.create(user_id="u", content="u second")
    b.upsert([later], v)  # another connection: only u changed
    assert {h.record.id for h in a.search(req)} >= {later.id}
    assert a.neighbours("u", v, threshold=0.5, top=5)[0][0][0] in {later.id, *(r.id for r in a.list("u"))}
    assert a._partitions["u"] is not part_u  # rebuilt: u changed elsewhere
    a.search(SearchRequest(user_id="w", query="first", vector=v[0], alpha=0.5))
    assert a._partitions["w"] is part_w  # kept: w did not change
    b.update([later.evolve(status="superseded")])
    assert later.id not in {m for m, _s, _c in a.neighbours("u", v, threshold=0.5, top=5)[0]}
    assert a.count("u", filter=MemoryFilter()) == 1
    a.close()
    b.close()


def test_own_writes_keep_the_partition_in_place(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "m.sqlite")
    v = np.array([[1.0, 0.0]], dtype=np.float32)
    store.upsert([MemoryRecord.create(user_id="u", content="one")], v)
    store.search(SearchRequest(user_id="u", query="one", vector=v[0], alpha=0.5))
    part = store._partitions["u"]
    store.upsert([MemoryRecord.create(user_id="u", content="two")], v)
    assert store._partitions["u"] is part and part.n == 2
    store.close()


class _SnapshotStore(_NoIndexStore):
    """A LocalStore offering ``active_vectors`` (like WeaviateStore) and counting its ``neighbours`` queries."""

    def __init__(self, inner: LocalStore) -> None:
        super().__init__(inner)
        self.queries = 0
        self.snapshots = 0
        self.gets = 0
        self.writes: list[int] = []

    def upsert(self, records: Any, vectors: Any, **kwargs: Any) -> None:
        self.writes.append(len(records))
        self._inner.upsert(records, vectors, **kwargs)

    def get(self, user_id: str, ids: Any) -> Any:
        self.gets += 1
        return self._inner.get(user_id, ids)

    def neighbours(self, user_id: str, vectors: Any, *, threshold: float, top: int) -> Any:
        self.queries += len(vectors)
        return self._inner.neighbours(user_id, vectors, threshold=threshold, top=top)

    def active_vectors(self, user_id: str, *, limit: int) -> Any:
        self.snapshots += 1
        recs = self._inner.list(user_id, filter=MemoryFilter())
        if len(recs) > limit:
            return None
        vecs = self._inner.get_vectors(user_id, [r.id for r in recs])
        m = np.stack([vecs[r.id] for r in recs]) if recs else np.zeros((0, 64), dtype=np.float32)
        return [r.id for r in recs], [r.category for r in recs], m


def _many(user: str) -> list[MemoryRecord]:
    topics = ["tea", "coffee", "Paris", "Berlin", "my sister", "project Falcon", "running"]
    extra = [f"I talked about {topics[i % 7]} on day {i % 9} with note {i % 5}" for i in range(70)]
    return [
        MemoryRecord.create(user_id=user, content=t, importance=0.7, timestamp=T0 + timedelta(hours=i))
        for i, t in enumerate([*TEXTS, *extra, *TEXTS[:4]])
    ]


def _bulk_run(store: Any, writer: MemoryWriter, size: int = 8) -> list[tuple[str, str | None]]:
    writer.write(_drafts("u")[:3])  # stored before the bulk write: the copy must hold them
    drafts = _many("u")
    out: list[tuple[str, str | None]] = []
    with writer.bulk("u", len(drafts)):
        for k in range(0, len(drafts), size):
            out += _summary(writer.write([d.model_copy() for d in drafts[k : k + size]]))
    return out


def _stored(store: Any) -> list[dict[str, Any]]:
    every = MemoryFilter(statuses=("active", "superseded", "archived"))
    return sorted((r.model_dump() for r in store.list("u", filter=every)), key=lambda r: str(r["id"]))


def _writer(store: Any) -> MemoryWriter:
    return MemoryWriter(store, HashingEmbedder(dim=64), clock=lambda: T0 + timedelta(days=30))


def test_bulk_snapshot_gives_the_store_index_outcomes_without_per_item_queries() -> None:
    plain = LocalStore(":memory:")
    snap = _SnapshotStore(LocalStore(":memory:"))
    expected = _bulk_run(plain, _writer(plain))
    w = _writer(snap)
    assert _bulk_run(snap, w) == expected
    assert {a for a, _ in expected} >= {"added", "deduplicated", "superseded"}
    assert _stored(snap) == _stored(plain)  # the same records, versions, counts and statuses
    assert snap.snapshots == 1 and snap.queries == 3  # the 3 drafts before the bulk asked the store
    batches = -(-len(_many("u")) // 8)
    assert snap.gets <= 2 + batches  # the write before the bulk, then one read per batch (ids and candidates)
    assert len(snap.writes) == 2  # the write before the bulk, then the held records in one write at its end
    assert "u" not in w._neighbours  # the copy is dropped when the bulk write ends


def test_bulk_write_sends_held_records_every_bulk_flush_and_before_other_lock_holders(monkeypatch: Any) -> None:
    import hybrid_memory.write.writer as writer_mod

    monkeypatch.setattr(writer_mod, "BULK_FLUSH", 20)
    plain = LocalStore(":memory:")
    snap = _SnapshotStore(LocalStore(":memory:"))
    expected = _bulk_run(plain, _writer(plain))
    assert _bulk_run(snap, _writer(snap)) == expected
    assert _stored(snap) == _stored(plain)
    assert len(snap.writes) > 3 and max(snap.writes[1:]) <= 20 + 8  # flushed once 20 are held (a batch adds <= 8)
    w = _writer(snap)
    with w.bulk("v", 100):
        w.write([MemoryRecord.create(user_id="v", content=f"fact number {i} about v") for i in range(3)])
        assert snap.count("v") == 0  # held back
        with w.locked(["v"]):  # e.g. a delete by the facade: it must see what was held back
            assert snap.count("v") == 3


def test_a_held_write_failing_for_another_lock_holder_is_raised_by_the_bulk_call() -> None:
    class _Failing(_SnapshotStore):
        fail = False

        def upsert(self, records: Any, vectors: Any, **kwargs: Any) -> None:
            if self.fail:
                raise StoreUnavailableError("store down")
            super().upsert(records, vectors, **kwargs)

    snap = _Failing(LocalStore(":memory:"))
    w = _writer(snap)
    went_on = []
    with pytest.raises(StoreUnavailableError, match="store down"), w.bulk("v", 100):
        w.write([MemoryRecord.create(user_id="v", content=f"fact number {i} about v") for i in range(3)])
        snap.fail = True
        with w.locked(["v"]):  # another holder (a delete, a touch): not its records, not its error
            went_on.append("holder")
        snap.fail = False
        went_on.append("bulk")
    assert went_on == ["holder", "bulk"]  # raised where the records came from, when that call ends
    assert snap.count("v") == 0  # never written: the bulk call did not return normally
    assert "v" not in w._held


def test_bulk_snapshot_over_its_limit_asks_the_store_per_item(monkeypatch: Any) -> None:
    import hybrid_memory.write.writer as writer_mod

    monkeypatch.setattr(writer_mod, "BULK_SNAPSHOT_MAX", 1)  # the user has 2 active memories
    plain = LocalStore(":memory:")
    snap = _SnapshotStore(LocalStore(":memory:"))
    expected = _bulk_run(plain, _writer(plain))
    assert _bulk_run(snap, _writer(snap)) == expected
    assert _stored(snap) == _stored(plain)
    assert len(snap.writes) > 5  # no copy, nothing held back: one write per batch
    assert snap.snapshots == 1 and snap.queries > 70  # every new draft (not the repeated ids) asked the store
