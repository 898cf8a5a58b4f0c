"""Background access touches (``rerank.touch_in_background``) through the facade on a real weaviate-server.

On Weaviate a touch is a read-modify-write of whole objects, so this is where writing it off the
caller's path matters (:mod:`hybrid_memory.read.touches`). A wrapper whose ``touch`` waits until
the test releases it holds a touch in flight without timing anything.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig
from hybrid_memory.stores.weaviate import WeaviateStore
from hybrid_memory.testing import HashingEmbedder
from tests.weaviate_fixtures import WeaviateEndpoint, connect

pytestmark = pytest.mark.weaviate

T0 = datetime(2025, 5, 1, 8, 0, tzinfo=timezone.utc)


class Held:
    """A WeaviateStore whose ``touch`` of ``user`` waits for ``release`` (everything else passes through)."""

    def __init__(self, store: WeaviateStore, user: str) -> None:
        self._store = store
        self.user = user
        self.entered = threading.Event()
        self.release = threading.Event()
        self.deleted = threading.Event()
        self.touched: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        self.touched.append(user_id)
        if user_id == self.user:
            self.entered.set()
            self.release.wait(60)  # a safety net: the test releases it
        self._store.touch(user_id, ids, when)

    def delete_user(self, user_id: str) -> int:
        n = self._store.delete_user(user_id)
        self.deleted.set()
        return n


def memory(store: Any) -> HybridMemory:
    return HybridMemory(
        store=store,
        embedder=HashingEmbedder(),
        config=HybridMemoryConfig(buffer={"summary_every": 0}),
        clock=lambda: T0,
    )


def test_touches_add_up_after_flush_and_close_drains(
    weaviate_store: WeaviateStore, weaviate_endpoint: WeaviateEndpoint
) -> None:
    mem = memory(weaviate_store)
    mem.remember("alice", "Alice drinks green tea every morning", timestamp=T0)
    hit = mem.recall("green tea", user_id="alice", touch=True)[0]
    mem.recall("green tea", user_id="alice", touch=True)
    assert mem.build_context("what does Alice drink?", user_id="alice").hits
    assert mem.flush(timeout=60)
    assert weaviate_store.get("alice", [hit.id])[0].access_count == 3
    mem.touch("alice", [hit.id])
    mem.close()  # writes the pending touch, then closes the store
    again = connect(weaviate_endpoint, collection=weaviate_store.collection, create_schema=False)
    try:
        assert again.get("alice", [hit.id])[0].access_count == 4
    finally:
        again.close()


def test_forget_user_with_touches_pending_and_in_flight_leaves_nothing(weaviate_store: WeaviateStore) -> None:
    held = Held(weaviate_store, "alice")
    mem = memory(held)
    try:
        mem.remember("alice", "Alice drinks green tea every morning", timestamp=T0)
        mem.remember("bob", "Bob drinks black coffee", timestamp=T0)
        assert mem.recall("green tea", user_id="alice", touch=True)
        assert held.entered.wait(60)  # alice's touch is in flight (taken, not written)
        assert mem.build_context("what does Alice drink?", user_id="alice").hits  # pending behind it
        forget = threading.Thread(target=mem.forget_user, args=("alice",))
        forget.start()
        assert held.deleted.wait(60)
        held.release.set()
        forget.join(60)
        assert not forget.is_alive()
        assert mem.flush(timeout=60)
        assert held.touched == ["alice"]  # the pending touch was dropped by the forget
        assert weaviate_store.list("alice") == [] and weaviate_store.count("alice") == 0
        assert "alice" not in weaviate_store.users()
        assert [r.content for r in weaviate_store.list("bob")] == ["Bob drinks black coffee"]
        assert mem.background_errors == []
    finally:
        held.release.set()
        mem.close()
