"""Issue 15, attack 5 (first two edge inputs): typed errors, and the store unchanged after them.

* an embedder whose output size changes between calls raised a raw numpy ``ValueError``
  (broadcast / vstack) from the writer; the error tree promises ``EmbeddingDimensionError``;
* a timestamp in year 9999 was accepted and pinned that memory at recency 1.0, labelled
  "today", forever; timestamps beyond ``writer.max_future_skew_seconds`` are now refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.errors import EmbeddingDimensionError, InvalidInputError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.testing import HashingEmbedder

NOW = datetime(2025, 6, 1, 12, tzinfo=timezone.utc)
FAR = datetime(9999, 1, 1, tzinfo=timezone.utc)


def snapshot(mem: HybridMemory, user: str = "alice", session: str = "s") -> Any:
    """Everything a write could change for ``user``: records (all statuses), vectors, short-term turns."""
    recs = mem.store.list(user, limit=10_000) if hasattr(mem.store, "list") else []
    ids = [r.id for r in recs]
    vecs = mem.store.get_vectors(user, ids) if ids else {}
    return (
        sorted(r.model_dump_json() for r in recs),
        sorted((k, v.tobytes()) for k, v in vecs.items()),
        [t.model_dump_json() for t in mem.short_term(user, session)],
        mem.store.dimension,
    )


# --------------------------------------------------------------------------- an embedder that changes size
class Shifty:
    """A callable embedder whose output width is whatever ``dim`` says at call time."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self._h = HashingEmbedder(dim=128)

    def __call__(self, texts: list[str]) -> Any:
        return self._h.embed_documents(texts)[:, : self.dim] + 0.01


@pytest.fixture
def shifty() -> Iterator[tuple[HybridMemory, Shifty]]:
    emb = Shifty()
    m = HybridMemory(store=LocalStore(":memory:"), embedder=emb, clock=lambda: NOW)
    m.remember("alice", "Alice drinks green tea", importance=0.9)
    m.add_turn("alice", "s", "user", "Remember: I am allergic to peanuts")
    yield m, emb
    m.close()


WRITES = {
    "remember": lambda m: m.remember("alice", "Alice drinks oolong tea too", importance=0.9),
    "remember_many": lambda m: m.remember_many("alice", [f"fact {i} about Alice's garden" for i in range(70)]),
    "add_turn": lambda m: m.add_turn("alice", "s", "user", "Remember: my sister is called Mei"),
    "put": lambda m: m.put(MemoryRecord.create(user_id="alice", content="keyed", id="k1", timestamp=NOW)),
    "aremember": lambda m: asyncio.run(m.aremember("alice", "Alice drinks oolong tea too", importance=0.9)),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_embedder_changing_size_is_a_typed_error_and_writes_nothing(
    shifty: tuple[HybridMemory, Shifty], write: str
) -> None:
    mem, emb = shifty
    before = snapshot(mem)
    emb.dim = 32
    with pytest.raises(EmbeddingDimensionError) as err:
        WRITES[write](mem)
    assert (err.value.expected, err.value.got) == (64, 32)
    after = snapshot(mem)
    if write == "add_turn":
        # Long-term records and vectors are unchanged; the turn itself stays in the short-term
        # window (the conversation did happen; only its key-frame write was refused).
        assert (after[0], after[1], after[3]) == (before[0], before[1], before[3])
    else:
        assert after == before
    emb.dim = 64  # the embedder recovers: writes work again
    assert mem.remember("alice", "Alice drinks oolong tea too", importance=0.9).action == "added"


def test_embedder_changing_size_inside_one_batched_call() -> None:
    calls = {"n": 0}
    h = HashingEmbedder(dim=128)

    def fn(texts: list[str]) -> Any:
        calls["n"] += 1
        return h.embed_documents(texts)[:, : (64 if calls["n"] % 2 else 32)] + 0.01

    mem = HybridMemory(store=LocalStore(":memory:"), embedder=fn, clock=lambda: NOW)
    try:
        with pytest.raises(EmbeddingDimensionError):  # 100 texts = two batches of different widths
            mem.remember_many("bob", [{"content": f"Bob fact {i} about trains", "importance": 0.9} for i in range(100)])
        assert mem.store.count("bob") == 0
    finally:
        mem.close()


class ProtocolEmbedder:
    """A hand-written ``Embedder`` (not one of the library's wrappers) that changes size."""

    name = "protocol-shifty"
    dedup_threshold = 0.92
    stm_threshold = 0.8
    min_similarity = 0.0

    def __init__(self) -> None:
        self.dim = 64
        self._h = HashingEmbedder(dim=128)

    @property
    def dimension(self) -> int:
        return 64

    def embed_documents(self, texts: Sequence[str]) -> Any:
        m = self._h.embed_documents(list(texts))[:, : self.dim] + 0.01
        return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)

    def embed_query(self, text: str) -> Any:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: Sequence[str]) -> Any:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> Any:
        return self.embed_query(text)


def test_writer_checks_dimensions_for_any_embedder() -> None:
    emb = ProtocolEmbedder()
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb, clock=lambda: NOW)
    try:
        mem.remember("alice", "Alice drinks green tea", importance=0.9)
        before = snapshot(mem)
        emb.dim = 32
        with pytest.raises(EmbeddingDimensionError):
            mem.remember("alice", "Alice drinks oolong tea too", importance=0.9)
        with pytest.raises(EmbeddingDimensionError):  # precomputed vectors of the wrong width too
            mem.writer.write(
                [MemoryRecord.create(user_id="alice", content="vectors given", timestamp=NOW)],
                vectors=np.ones((1, 16), dtype=np.float32),
            )
        assert snapshot(mem) == before
    finally:
        mem.close()


# --------------------------------------------------------------------------- timestamps in the future
@pytest.fixture
def mem() -> Iterator[HybridMemory]:
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: NOW)
    m.remember("alice", "Alice drinks green tea", importance=0.9, timestamp=NOW - timedelta(days=3))
    m.add_turn("alice", "s", "user", "Remember: I am allergic to peanuts", timestamp=NOW - timedelta(hours=1))
    yield m
    m.close()


FUTURE_WRITES = {
    "add_turn": lambda m, ts: m.add_turn("alice", "s", "user", "Remember: my sister is called Mei", timestamp=ts),
    "aadd_turn": lambda m, ts: asyncio.run(m.aadd_turn("alice", "s", "user", "Remember: I live in Lyon", timestamp=ts)),
    "remember": lambda m, ts: m.remember("alice", "Alice drinks oolong tea", importance=0.9, timestamp=ts),
    "remember_many": lambda m, ts: m.remember_many(
        "alice", [{"content": "fine one", "timestamp": NOW}, {"content": "pinned forever", "timestamp": ts}]
    ),
    "put": lambda m, ts: m.put(MemoryRecord.create(user_id="alice", content="keyed", id="k1", timestamp=ts)),
}


@pytest.mark.parametrize("write", list(FUTURE_WRITES))
@pytest.mark.parametrize(
    "ts", [FAR, NOW + timedelta(seconds=301), NOW.astimezone(timezone(timedelta(hours=8))) + timedelta(days=1)]
)
def test_future_timestamps_are_refused_and_nothing_is_written(mem: HybridMemory, write: str, ts: datetime) -> None:
    before = snapshot(mem)
    with pytest.raises(InvalidInputError, match="max_future_skew_seconds"):
        FUTURE_WRITES[write](mem, ts)
    assert snapshot(mem) == before


def test_small_clock_skew_is_accepted_and_the_skew_is_configurable() -> None:
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: NOW)
    try:
        assert m.remember("alice", "skewed by a minute", timestamp=NOW + timedelta(seconds=60)).action == "added"
    finally:
        m.close()
    strict = HybridMemoryConfig(writer={"max_future_skew_seconds": 0})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: NOW, config=strict)
    try:
        with pytest.raises(InvalidInputError, match="max_future_skew_seconds"):
            m.remember("alice", "a second late", timestamp=NOW + timedelta(seconds=1))
        assert m.remember("alice", "on time", timestamp=NOW).action == "added"
    finally:
        m.close()
    with pytest.raises(ValueError):
        HybridMemoryConfig(writer={"max_future_skew_seconds": -1})


def test_a_reads_future_now_is_not_refused_but_cannot_pin_recency(mem: HybridMemory) -> None:
    """``now=`` of reads is a reference time (what-if ranking), not a write; its access stamp is capped."""
    hits = mem.recall("green tea", user_id="alice", now=FAR, touch=True)
    assert [h.content for h in hits][:1] == ["Alice drinks green tea"]
    rec = mem.get(hits[0].id, user_id="alice")
    assert rec.last_accessed_at is not None
    assert rec.last_accessed_at <= NOW + timedelta(seconds=300)
    mem.touch("alice", [hits[0].id], now=FAR)
    assert mem.get(hits[0].id, user_id="alice").last_accessed_at <= NOW + timedelta(seconds=300)
    later = mem.recall("green tea", user_id="alice", now=NOW + timedelta(days=30), touch=False)
    assert later[0].recency < 0.1  # a month later, recency has decayed: nothing was pinned


def test_langgraph_store_put_uses_the_memory_clock() -> None:
    pytest.importorskip("langgraph")
    from langchain_hybrid_memory import HybridMemoryStore

    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: NOW)
    try:
        store = HybridMemoryStore(m)
        store.put(("memories", "alice"), "tea", {"content": "Alice drinks green tea"})
        item = store.get(("memories", "alice"), "tea")
        assert item is not None and item.created_at == NOW
    finally:
        m.close()


@pytest.mark.parametrize("bad", [None, {"statuses": ("active",)}, ("active",)])
def test_a_search_request_without_a_memory_filter_is_a_typed_error(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="filter must be a MemoryFilter"):
        SearchRequest(user_id="u", query="tea", vector=None, alpha=0.0, filter=bad)
