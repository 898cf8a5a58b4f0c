"""Query centring (``retrieval.centre_weight``): the vector leg searches with ``q - w·mean``, cosines stay to ``q``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.errors import ConfigurationError
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, tzinfo=timezone.utc)
#: Two memories on the query's topic; "weather talk lunch" is what every memory of this user says.
MEMORIES = [
    "weather talk lunch apples",
    "apples orchard",
    "weather talk lunch sunny",
    "weather talk lunch rain",
    "weather talk lunch snow",
]
QUERY = "weather talk lunch apples orchard"


def _memory(weight: float, store: Any = None) -> tuple[HybridMemory, list[SearchRequest]]:
    store = store if store is not None else LocalStore(":memory:")
    searches: list[SearchRequest] = []
    search = store.search

    def counted(request: SearchRequest) -> Any:
        searches.append(request)
        return search(request)

    store.search = counted
    mem = HybridMemory(
        store=store,
        embedder=HashingEmbedder(),
        config={"retrieval": {"centre_weight": weight, "time_windows": False, "archive_fallback": False}},
    )
    for i, text in enumerate(MEMORIES):
        mem.remember("u", text, importance=0.5, timestamp=T0.replace(hour=9 + i))
    return mem, searches


def _unit(v: Any) -> Any:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def test_on_by_default_and_off_at_zero() -> None:
    assert HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder()).config.retrieval.centre_weight == 0.75
    mem, searches = _memory(0.0)
    with mem:
        mem.recall(QUERY, user_id="u", k=3, touch=False)
        q = mem.embedder.embed_query(QUERY)
    assert len(searches) == 1
    np.testing.assert_allclose(searches[0].vector, q, atol=1e-7)


def test_the_search_uses_the_query_minus_the_weighted_mean_of_the_active_memories() -> None:
    mem, searches = _memory(0.75)
    with mem:
        archived = mem.recall("snow", user_id="u", k=1, touch=False)[0]
        assert archived.content == MEMORIES[4]
        [record] = mem.store.get("u", [archived.id])
        mem.store.update([record.evolve(status="archived")])
        searches.clear()
        mem.recall(QUERY, user_id="u", k=3, touch=False)
        q = np.asarray(mem.embedder.embed_query(QUERY), dtype=np.float32)
        active = [r.id for r in mem.store.list("u") if r.status == "active"]
        vectors = mem.store.get_vectors("u", active)
    assert len(active) == 4
    mean = np.mean([vectors[i] for i in active], axis=0)
    assert len(searches) == 1
    np.testing.assert_allclose(searches[0].vector, _unit(q - 0.75 * mean), atol=1e-6)


def test_centring_lifts_the_on_topic_memory_above_the_ones_that_say_what_every_memory_says() -> None:
    def vector_order(weight: float) -> list[str]:
        mem, _ = _memory(weight)
        with mem:
            hits = mem.recall(QUERY, user_id="u", k=5, alpha=1.0, touch=False)
        return [h.content for h in hits]

    # By cosine, "weather talk lunch rain/sunny/snow" (3 of the query's 5 words) beat "apples orchard" (2).
    assert vector_order(0.0)[0] == MEMORIES[0] and vector_order(0.0)[-1] == MEMORIES[1]
    assert vector_order(0.5)[:2] == MEMORIES[:2]  # centred, the words every memory has count for less
    assert vector_order(1.0)[:2] == [MEMORIES[1], MEMORIES[0]]


def test_hits_keep_their_cosine_to_the_query_itself() -> None:
    mem, _ = _memory(1.0)
    with mem:
        hits = mem.recall(QUERY, user_id="u", k=5, touch=False)
        q = np.asarray(mem.embedder.embed_query(QUERY), dtype=np.float32)
        vectors = mem.store.get_vectors("u", [h.id for h in hits])
    assert len(hits) == 5
    for h in hits:
        assert h.vector_similarity == pytest.approx(float(vectors[h.id] @ q), abs=1e-5)


def test_a_user_without_memories_is_searched_with_the_query_itself() -> None:
    mem, searches = _memory(1.0)
    with mem:
        assert mem.recall(QUERY, user_id="nobody", k=3, touch=False) == []
        q = mem.embedder.embed_query(QUERY)
    np.testing.assert_allclose(searches[-1].vector, q, atol=1e-7)


class _NoMean:
    """A LocalStore seen through a proxy that lacks ``mean_vector``."""

    def __init__(self) -> None:
        self._inner = LocalStore(":memory:")

    def __getattr__(self, name: str) -> Any:
        if name == "mean_vector":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_without_mean_vector_is_refused_when_centring_is_asked_for() -> None:
    with pytest.raises(ConfigurationError, match="MeanSource"):
        HybridMemory(store=_NoMean(), embedder=HashingEmbedder(), config={"retrieval": {"centre_weight": 0.5}})


def test_left_at_its_default_centring_is_off_for_a_store_without_mean_vector(caplog: pytest.LogCaptureFixture) -> None:
    store = _NoMean()
    searches: list[SearchRequest] = []
    search = store._inner.search

    def counted(request: SearchRequest) -> Any:
        searches.append(request)
        return search(request)

    store._inner.search = counted  # type: ignore[method-assign]
    with caplog.at_level("INFO", logger="hybrid_memory.read"):
        mem = HybridMemory(store=store, embedder=HashingEmbedder())  # a third-party store keeps working
    assert "query centring is off" in caplog.text
    with mem:
        mem.remember("u", MEMORIES[0], importance=0.5, timestamp=T0)
        mem.remember("u", MEMORIES[1], importance=0.5, timestamp=T0.replace(hour=10))
        assert mem.recall(QUERY, user_id="u", k=2, touch=False)
        q = mem.embedder.embed_query(QUERY)
    np.testing.assert_allclose(searches[-1].vector, q, atol=1e-7)


@pytest.mark.parametrize("bad", [-0.1, 2.5, "x"])
def test_a_bad_weight_is_a_typed_error(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        HybridMemory(
            store=LocalStore(":memory:"), embedder=HashingEmbedder(), config={"retrieval": {"centre_weight": bad}}
        )


def test_localstore_recomputes_the_mean_after_a_tenth_of_the_memories_changed() -> None:
    from hybrid_memory.records import MemoryRecord

    store = LocalStore(":memory:")
    store.bind_embedder("test", 4)
    e1, e2 = np.eye(4, dtype=np.float32)[:2]

    def add(n: int, v: Any, start: int) -> None:
        records = [MemoryRecord.create(user_id="u", content=f"memory {start + i}", timestamp=T0) for i in range(n)]
        store.upsert(records, np.stack([v] * n))

    add(30, e1, 0)
    np.testing.assert_allclose(store.mean_vector("u"), e1, atol=1e-6)
    add(2, e2, 30)
    np.testing.assert_allclose(store.mean_vector("u"), e1, atol=1e-6)  # 2 of 30 changed: kept
    add(1, e2, 32)
    np.testing.assert_allclose(store.mean_vector("u"), (30 * e1 + 3 * e2) / 33, atol=1e-6)
    store.close()
