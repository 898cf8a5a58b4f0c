"""build_context reuses the vectors the store returned with the hits: no second read for the window dedup."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.stores.base import Vector
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 6, 1, 9, tzinfo=timezone.utc)


class CountingStore(LocalStore):
    def __init__(self) -> None:
        super().__init__(":memory:")
        self.vector_reads: list[list[str]] = []

    def get_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        self.vector_reads.append(list(ids))
        return super().get_vectors(user_id, ids)


def test_window_dedup_uses_the_hits_vectors() -> None:
    store = CountingStore()
    mem = HybridMemory(store=store, embedder=HashingEmbedder(), clock=lambda: T0)
    mem.remember("alice", "My corgi Mochi is allergic to chicken.", importance=0.9)
    mem.remember("alice", "I drink oolong tea every morning.", importance=0.7)
    mem.add_turn("alice", "s1", "user", "Let us plan the weekend.")
    mem.add_turn("alice", "s1", "assistant", "Sure, what do you have in mind?")
    store.vector_reads.clear()

    ctx = mem.build_context("What is Mochi allergic to?", user_id="alice", session_id="s1")

    assert [h.content for h in ctx.hits][:1] == ["My corgi Mochi is allergic to chicken."]
    assert store.vector_reads == [], "build_context read the hits' vectors again"
    mem.close()
