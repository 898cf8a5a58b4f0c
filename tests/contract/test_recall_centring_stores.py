"""Query centring (``retrieval.centre_weight``) ranks the same on a LocalStore file and a real Weaviate server."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.means import MeanCache
from hybrid_memory.stores.weaviate import WeaviateStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.testing.store_contract import rec, seed, vec
from tests.unit.test_mean_cache import _Spawn
from tests.unit.test_recall_centring import MEMORIES, QUERY, T0


@pytest.mark.parametrize("one_read", [True, False], ids=["one read", "cursor"])
@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_centring_reorders_the_vector_leg_and_keeps_query_cosines(
    either_store: MemoryStore, weight: float, one_read: bool
) -> None:
    if isinstance(either_store, WeaviateStore) and not one_read:
        either_store._mean_fetch_limit = 2  # the user is too large for one read: its mean comes from the cursor
        either_store._means.background_above = None  # read by the recall (a first read is bounded by 1,000 else)
    mem = HybridMemory(
        either_store,
        embedder=HashingEmbedder(),
        config={"retrieval": {"centre_weight": weight, "time_windows": False, "archive_fallback": False}},
    )
    for i, text in enumerate(MEMORIES):
        mem.remember("u", text, importance=0.5, timestamp=T0.replace(hour=9 + i))
    hits = mem.recall(QUERY, user_id="u", k=5, alpha=1.0, touch=False)
    order = [h.content for h in hits]
    assert order[0] == MEMORIES[0]
    assert order.index(MEMORIES[1]) == (1 if weight else 4)
    q = np.asarray(mem.embedder.embed_query(QUERY), dtype=np.float32)
    vectors = either_store.get_vectors("u", [h.id for h in hits])
    for h in hits:
        assert h.vector_similarity == pytest.approx(float(vectors[h.id] @ q), abs=1e-4)


def test_a_user_too_large_for_one_read_is_centred_over_every_active_memory(either_store: MemoryStore) -> None:
    """Weaviate reads such a user's vectors with the cursor API, a page at a time; the local store has no limit."""
    store = either_store
    weaviate = isinstance(store, WeaviateStore)
    if weaviate:
        store._mean_fetch_limit = 4  # one read returns at most 4 memories: "u" has 10
        store._means.background_above = None  # every read by the caller, the first one too
    memories = [rec("u", f"memory {i}", minutes=i) for i in range(10)]
    vectors = [vec(1.0, float(i), float(i % 3)) for i in range(10)]
    seed(store, [*memories, rec("v", "another user's memory")], [*vectors, vec(0, 0, 0, 1)])
    units = np.stack([v / np.linalg.norm(v) for v in vectors])
    store.update([memories[0].evolve(status="archived"), memories[1].evolve(status="superseded")])
    got = store.mean_vector("u")
    assert got is not None
    np.testing.assert_allclose(got, units[2:].mean(axis=0), atol=1e-6)  # 8 active, over the limit of one read
    np.testing.assert_allclose(store.mean_vector("v"), vec(0, 0, 0, 1), atol=1e-6)  # isolation
    if weaviate:
        assert store._means._entries["u"].count == 8  # over the limit: its next reads go to the cursor at once
    store.update([m.evolve(status="archived") for m in memories[2:7]])
    np.testing.assert_allclose(store.mean_vector("u"), units[7:].mean(axis=0), atol=1e-6)  # 3 active
    if weaviate:
        assert store._means._entries["u"].count == 3  # small again: one read
    np.testing.assert_allclose(store.mean_vector("u"), units[7:].mean(axis=0), atol=1e-6)


def test_a_failed_cursor_scan_leaves_the_user_uncentred_until_the_next_read(
    weaviate_contract_store: WeaviateStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A scan cut short (here every request's deadline already passed) costs the centring, never the recall."""
    store = weaviate_contract_store
    store._mean_fetch_limit = 2
    store._means.background_above = None
    vectors = [vec(1.0, float(i)) for i in range(5)]
    seed(store, [rec("u", f"memory {i}", minutes=i) for i in range(5)], vectors)
    units = np.stack([v / np.linalg.norm(v) for v in vectors])
    np.testing.assert_allclose(store.mean_vector("u"), units.mean(axis=0), atol=1e-6)  # 5 > 2: by the cursor
    store._means.wrote("u")  # stale: the next read goes straight to the scan (the last mean was over the limit)
    monkeypatch.setattr(store, "_request_timeout", lambda kind="query": 1e-4)
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.stores.weaviate"):
        assert store.mean_vector("u") is None
    assert "query centring is off for one user until the next read" in caplog.text
    monkeypatch.undo()
    assert store.mean_vector("u") is None  # cached until the next read (ttl or writes)
    store._means.forget("u")  # that next read, now
    np.testing.assert_allclose(store.mean_vector("u"), units.mean(axis=0), atol=1e-6)


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("background", [False, True], ids=["read by the recall", "read in the background"])
def test_another_process_sees_the_writes_and_the_forget_in_its_mean(
    stores: tuple[MemoryStore, MemoryStore], background: bool
) -> None:
    """LocalStore at once (its index follows the file); Weaviate once its cached mean is older than the ttl.

    With ``background``, Weaviate's stale mean is served once more while a background read (run
    here when the test says) replaces it, as it is for users of more than 1,000 memories.
    """
    a, b = stores
    clock, spawn = _Clock(), _Spawn()
    weaviate = isinstance(b, WeaviateStore)
    if weaviate:  # the other process's cache, on a clock the test moves
        b._means = MeanCache(ttl=300.0, clock=clock, background_above=20 if background else None, spawn=spawn)
    seed(a, [rec("u", f"first {i}", minutes=i) for i in range(30)], [vec(1)] * 30)
    if weaviate and background:  # 30 > 20: the first read finds the user large and reads its mean in the background
        assert b.mean_vector("u") is None and b.mean_vector("u") is None  # uncentred until it is in
        assert len(spawn.jobs) == 1
        spawn.run()
    np.testing.assert_allclose(b.mean_vector("u"), vec(1), atol=1e-6)
    seed(a, [rec("u", f"then {i}", minutes=30 + i) for i in range(10)], [vec(0, 1)] * 10)
    clock.now = 301.0
    if weaviate and background:
        np.testing.assert_allclose(b.mean_vector("u"), vec(1), atol=1e-6)  # served stale, once more
        assert len(spawn.jobs) == 1
        spawn.run()
    np.testing.assert_allclose(b.mean_vector("u"), vec(0.75, 0.25), atol=1e-6)
    a.delete_user("u")
    clock.now = 602.0
    if weaviate and background:  # another process forgot the user: this one learns it at the next read
        np.testing.assert_allclose(b.mean_vector("u"), vec(0.75, 0.25), atol=1e-6)
        spawn.run()
    assert b.mean_vector("u") is None
    assert spawn.jobs == []
