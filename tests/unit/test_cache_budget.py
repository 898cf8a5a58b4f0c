"""The per-process cache budget: LRU eviction at the budget, identical recall after eviction, metrics."""

from __future__ import annotations

import gc
import threading
from collections.abc import Hashable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.observe.metrics import MemoryMetrics
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores import budget as budget_mod
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.stores.budget import CacheBudget
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.neighbours import NeighbourCache

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)


def test_least_recently_used_entries_go_first_and_the_total_stays_within_the_budget() -> None:
    b = CacheBudget(1_000)
    dropped: list[Hashable] = []
    for key in ("a", "b", "c"):
        b.add(dropped.append, key, 300)
    b.hit(dropped.append, "a")  # a is now the most recently used
    b.add(dropped.append, "d", 300)
    assert dropped == ["b"]
    st = b.stats()
    assert (st.bytes, st.entries, st.hits, st.misses, st.evictions) == (900, 3, 1, 4, 1)
    b.resize(dropped.append, "a", 701)  # grew in place: c and d are older than a
    assert dropped == ["b", "c", "d"] and b.stats().bytes == 701
    b.discard(dropped.append, "a")
    assert b.stats().bytes == 0 and b.stats().evictions == 3


def test_an_entry_larger_than_the_budget_stays_alone() -> None:
    b = CacheBudget(100)
    dropped: list[Hashable] = []
    b.add(dropped.append, "small", 50)
    b.add(dropped.append, "huge", 500)
    assert dropped == ["small"] and b.stats().entries == 1


def test_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget_mod, "_default", None)
    monkeypatch.setenv("HYBRID_MEMORY_CACHE_BYTES", "12345")
    assert budget_mod.cache_budget().max_bytes == 12345
    monkeypatch.setattr(budget_mod, "_default", None)
    monkeypatch.delenv("HYBRID_MEMORY_CACHE_BYTES")
    monkeypatch.setenv("HYBRID_MEMORY_CACHE__MAX_BYTES", "777")
    assert budget_mod.cache_budget().max_bytes == 777
    monkeypatch.setattr(budget_mod, "_default", None)
    monkeypatch.delenv("HYBRID_MEMORY_CACHE__MAX_BYTES")
    assert budget_mod.cache_budget().max_bytes == 512 * 1024 * 1024


def _fill(mem: HybridMemory, users: list[str], per_user: int) -> None:
    for u in users:
        mem.remember_many(u, [f"{u} note {i} about topic {i % 7} and thing {i % 11}" for i in range(per_user)])


def test_local_store_partitions_are_evicted_at_the_budget_and_recall_is_identical(tmp_path: Path) -> None:
    users = [f"user{i}" for i in range(6)]
    store = LocalStore(tmp_path / "m.sqlite", budget=CacheBudget(10**9))
    # A fixed clock: recall's recency term would otherwise move the scores between the two passes.
    mem = HybridMemory(store=store, embedder=HashingEmbedder(dim=64), clock=lambda: NOW)
    _fill(mem, users, 40)
    before = {u: [(h.id, round(h.score, 6)) for h in mem.recall("note about topic 3", user_id=u, k=5)] for u in users}
    one = store._partitions[users[0]].nbytes()
    assert one > 0
    small = CacheBudget(int(one * 2.5))  # room for two users' partitions
    store._budget = small
    store._partitions.clear()
    after: dict[str, list[tuple[str, float]]] = {}
    for u in users:
        after[u] = [(h.id, round(h.score, 6)) for h in mem.recall("note about topic 3", user_id=u, k=5)]
        assert small.stats().bytes <= small.max_bytes
        assert len(store._partitions) <= 2
    assert small.stats().evictions == len(users) - 2
    assert after == before
    again = [(h.id, round(h.score, 6)) for h in mem.recall("note about topic 3", user_id=users[0], k=5)]
    assert again == before[users[0]]  # rebuilt from the file after its eviction
    mem.close()


def test_eviction_of_a_user_being_written_keeps_writes_correct(tmp_path: Path) -> None:
    b = CacheBudget(1)  # every new partition evicts the previous one
    store = LocalStore(tmp_path / "m.sqlite", budget=b)
    v = np.eye(4, dtype=np.float32)
    a1 = MemoryRecord.create(user_id="a", content="alpha one")
    store.upsert([a1], v[:1])
    store.search(SearchRequest(user_id="a", query="alpha", vector=v[0], alpha=0.5))
    store.search(SearchRequest(user_id="b", query="alpha", vector=v[0], alpha=0.5))  # evicts a
    assert "a" not in store._partitions
    a2 = MemoryRecord.create(user_id="a", content="alpha two")
    store.upsert([a2], v[1:2])
    hits = store.search(SearchRequest(user_id="a", query="alpha", vector=v[1], alpha=0.5))
    assert hits[0].record.id == a2.id and {h.record.id for h in hits} == {a1.id, a2.id}
    store.close()
    assert b.stats().entries == 0  # a closed store leaves nothing accounted


def test_writer_fallback_index_counts_against_the_budget() -> None:
    store = LocalStore(":memory:")
    v = np.eye(8, dtype=np.float32)
    for u in ("a", "b", "c"):
        store.upsert([MemoryRecord.create(user_id=u, content=f"{u} {i}") for i in range(8)], v)
    b = CacheBudget(1)
    cache = NeighbourCache(store, budget=b)
    for u in ("a", "b", "c"):
        assert cache.load(u, 8, None).count == 8
    assert "c" in cache and "a" not in cache and b.stats().evictions == 2
    assert cache.load("a", 8, None).neighbours(v[:1], 0.9, 3)[0][0][1] == pytest.approx(1.0)


class _Owner:
    """A cache owner in a reference cycle: only the cyclic garbage collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_an_owner_never_closed_is_forgotten_once_collected() -> None:
    budget = CacheBudget(10_000)
    gone, kept = _Owner(), _Owner()
    budget.add(budget.owner(gone, lambda owner, key: None), "alice", 600)
    budget.add(budget.owner(kept, lambda owner, key: None), "bob", 400)
    del gone
    gc.collect()
    stats = budget.stats()
    assert (stats.entries, stats.bytes) == (1, 400)


def test_an_owner_collected_while_its_thread_holds_the_budget_does_not_deadlock() -> None:
    """The GC may free an owner at any allocation, also one inside the budget's own lock."""
    budget = CacheBudget(10_000)
    owner = _Owner()
    budget.add(budget.owner(owner, lambda o, key: None), "alice", 600)
    del owner
    done = threading.Event()

    def busy() -> None:
        with budget._lock:  # where resize() is when one of its allocations starts a collection
            gc.collect()
        done.set()

    threading.Thread(target=busy, daemon=True).start()
    assert done.wait(30), "the collected owner's finalizer waited for the lock its own thread held"
    stats = budget.stats()
    assert (stats.entries, stats.bytes) == (0, 0)


def test_metrics_report_the_cache() -> None:
    snap = MemoryMetrics().snapshot()
    assert snap.cache is not None and snap.cache.max_bytes >= 0
    assert set(snap.to_dict()["cache"]) == {"max_bytes", "bytes", "entries", "hits", "misses", "evictions"}


def test_write_logs_of_least_recently_written_users_are_evicted() -> None:
    from collections import deque

    from hybrid_memory.write.outcome_log import OUTCOME_BYTES, UserWriteLogs

    b = CacheBudget(8 * OUTCOME_BYTES)
    logs = UserWriteLogs(b)
    for u in ("a", "b", "c"):
        logs[u] = deque(maxlen=500)
        for i in range(3):
            log = logs.get(u)
            assert log is not None
            log.append(i)
    assert "a" not in logs and list(logs["c"]) == [0, 1, 2]  # a was written least recently
    assert b.stats().bytes <= b.max_bytes
    assert logs.pop("c") is not None and logs.pop("c") is None
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(dim=32))
    mem.remember("u", "I like green tea")
    assert [o.action for o in mem.write_log("u")] == ["added"]
    mem.close()
