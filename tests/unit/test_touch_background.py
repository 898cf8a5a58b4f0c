"""Access touches off the caller's path (``rerank.touch_in_background``): :mod:`hybrid_memory.read.touches`.

A store whose ``touch`` blocks until the test releases it proves what runs on the caller's
thread without timing anything; a store whose ``touch`` fails is a fault that cannot be caused
for real in an in-memory SQLite store, and says so.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.errors import ConfigurationError, StoreUnavailableError
from hybrid_memory.read.touches import TouchQueue, touch_calls
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)


class GatedStore(LocalStore):
    """A LocalStore whose ``touch`` of the users in ``gated`` waits for ``release``; records every touch call."""

    def __init__(self, path: str | Path = ":memory:", *, gated: Sequence[str] = ()) -> None:
        super().__init__(path)
        self.gated = set(gated)
        self.entered = threading.Event()  # a gated touch is waiting
        self.release = threading.Event()
        self.deleted = threading.Event()  # delete_user ran
        self.waited_out = False  # a gated touch gave up waiting (the test never released it)
        self.calls: list[tuple[str, list[str], datetime, int]] = []  # user, ids, when, thread id
        self.fail: Exception | None = None

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        self.calls.append((user_id, list(ids), when, threading.get_ident()))
        if user_id in self.gated:
            self.entered.set()
            if not self.release.wait(30):  # a safety net: the tests release it long before
                self.waited_out = True
        if self.fail is not None:
            raise self.fail
        super().touch(user_id, ids, when)

    def delete_user(self, user_id: str) -> int:
        n = super().delete_user(user_id)
        self.deleted.set()
        return n


def memory(store: LocalStore, **config: Any) -> HybridMemory:
    cfg = HybridMemoryConfig(buffer={"summary_every": 0}, **config)
    return HybridMemory(store=store, embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)


@pytest.fixture
def gated() -> Iterator[tuple[HybridMemory, GatedStore]]:
    store = GatedStore(gated=("blocker",))
    mem = memory(store)
    mem.remember("u", "favourite colour is teal", timestamp=T0)
    mem.remember("blocker", "a memory whose touch holds the background thread", timestamp=T0)
    yield mem, store
    store.release.set()
    mem.close()


def hold_the_worker(mem: HybridMemory, store: GatedStore) -> None:
    """Park the touch thread in a touch of user ``blocker`` until ``store.release`` is set."""
    mem.recall("touch", user_id="blocker", touch=True)
    assert store.entered.wait(30)


def stored(store: LocalStore, user: str) -> list[tuple[str, int, datetime | None]]:
    """What the store holds for ``user`` (read directly: no facade flush in between)."""
    return [(r.content, r.access_count, r.last_accessed_at) for r in store.list(user)]


def test_recall_and_build_context_do_not_wait_for_the_store_touch() -> None:
    store = GatedStore(gated=("u",))
    mem = memory(store)
    try:
        mem.remember("u", "favourite colour is teal", timestamp=T0)
        assert mem.recall("colour", user_id="u", touch=True)
        assert store.entered.wait(30)  # the touch is in the store, held there
        ctx = mem.build_context("what is my favourite colour", user_id="u")
        assert ctx.hits and not store.release.is_set()  # both returned while the touch is held
        assert stored(store, "u")[0][1] == 0
        store.release.set()
        assert mem.flush(timeout=30)
        assert not store.waited_out  # nothing waited for the held touch until the release
        assert stored(store, "u")[0][1] == 2
        assert all(tid != threading.get_ident() for *_, tid in store.calls)
    finally:
        store.release.set()
        mem.close()


def test_counts_arrive_after_flush_and_are_coalesced(gated: tuple[HybridMemory, GatedStore]) -> None:
    mem, store = gated
    hold_the_worker(mem, store)
    mem.recall("colour", user_id="u", touch=True, now=T0 - timedelta(hours=1))
    mem.recall("colour", user_id="u", touch=True, now=T0 - timedelta(hours=2))  # an earlier access time
    assert mem._touches.pending == 1  # one (user, memory) pair, counted twice
    assert stored(store, "u")[0][1] == 0
    store.release.set()
    assert mem.flush(timeout=30)
    assert stored(store, "u") == [("favourite colour is teal", 2, T0 - timedelta(hours=1))]  # latest time wins
    assert [(c[0], c[2]) for c in store.calls if c[0] == "u"] == [("u", T0 - timedelta(hours=1))] * 2


def test_touch_calls_group_by_access_time_and_layer_the_counts() -> None:
    t1, t2 = T0, T0 + timedelta(days=1)
    calls = touch_calls({"a": (3, t2), "b": (1, t2), "c": (2, t1)})
    assert calls == [(["c"], t1), (["c"], t1), (["a", "b"], t2), (["a"], t2), (["a"], t2)]
    assert touch_calls({}) == []
    # Within the window: one group, written at its latest time; exact times with a zero window.
    near = {"a": (1, T0), "b": (2, T0 + timedelta(seconds=59)), "c": (1, T0 + timedelta(seconds=61))}
    assert touch_calls(near) == [
        (["a", "b"], T0 + timedelta(seconds=59)),
        (["b"], T0 + timedelta(seconds=59)),
        (["c"], T0 + timedelta(seconds=61)),
    ]
    assert len(touch_calls(near, window=timedelta(0))) == 4


def test_reads_of_a_user_see_its_own_pending_touches(gated: tuple[HybridMemory, GatedStore]) -> None:
    mem, store = gated
    hold_the_worker(mem, store)  # the background thread is busy with another user
    hit = mem.recall("colour", user_id="u", touch=True)[0]
    assert stored(store, "u")[0][1] == 0
    assert mem.get(hit.id, user_id="u").access_count == 1  # written on the caller's thread first
    mem.touch("u", [hit.id])
    assert mem.list_memories("u")[0].access_count == 2
    assert mem._touches.pending == 0
    store.release.set()


def test_forget_user_drops_pending_touches_and_nothing_comes_back(gated: tuple[HybridMemory, GatedStore]) -> None:
    mem, store = gated
    hold_the_worker(mem, store)
    mem.build_context("what is my favourite colour", user_id="u")
    assert mem._touches.pending == 1
    assert mem.forget_user("u") == 1
    assert mem._touches.pending == 0
    store.release.set()
    assert mem.flush(timeout=30)
    assert [c for c in store.calls if c[0] == "u"] == []
    assert store.list("u") == [] and "u" not in store.users()


def test_a_touch_in_flight_during_forget_user_resurrects_nothing() -> None:
    store = GatedStore(gated=("u",))
    mem = memory(store)
    try:
        mem.remember("u", "favourite colour is teal", timestamp=T0)
        mem.recall("colour", user_id="u", touch=True)
        assert store.entered.wait(30)  # taken for writing: the store touch has not run yet
        # forget_user deletes at once, then waits for the user's write lock (held by the touch).
        forget = threading.Thread(target=mem.forget_user, args=("u",))
        forget.start()
        assert store.deleted.wait(30)
        store.release.set()
        forget.join(30)
        assert not forget.is_alive()
        assert mem.flush(timeout=30)
        assert store.list("u") == [] and store.count("u") == 0 and "u" not in store.users()
    finally:
        store.release.set()
        mem.close()


def test_forgetting_one_memory_drops_its_pending_touch(gated: tuple[HybridMemory, GatedStore]) -> None:
    mem, store = gated
    hold_the_worker(mem, store)
    hit = mem.recall("colour", user_id="u", touch=True)[0]
    assert mem.forget(hit.id, user_id="u")
    assert mem._touches.pending == 0
    store.release.set()
    assert mem.flush(timeout=30)
    assert [c for c in store.calls if c[0] == "u"] == []


def test_close_writes_pending_touches_before_the_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = GatedStore(path, gated=("blocker",))
    mem = memory(store)
    mem.remember("u", "favourite colour is teal", timestamp=T0)
    mem.remember("blocker", "a memory whose touch holds the background thread", timestamp=T0)
    hold_the_worker(mem, store)
    mem.recall("colour", user_id="u", touch=True)
    closing = threading.Thread(target=mem.close)
    closing.start()
    store.release.set()
    closing.join(60)
    assert not closing.is_alive()
    with LocalStore(path) as again:
        assert stored(again, "u")[0][1] == 1
        assert stored(again, "blocker")[0][1] == 1


def test_a_failing_store_touch_is_reported_never_raised(tmp_path: Path) -> None:
    store = GatedStore()
    store.fail = StoreUnavailableError("the cluster lost its quorum")  # a fault SQLite cannot produce
    mem = HybridMemory(
        store=store,
        embedder=HashingEmbedder(),
        config=HybridMemoryConfig(buffer={"summary_every": 0}),
        clock=lambda: T0,
        trace=tmp_path / "t.sqlite",
    )
    try:
        mem.remember("u", "favourite colour is teal", timestamp=T0)
        assert mem.recall("colour", user_id="u", touch=True)
        assert mem.build_context("what is my favourite colour", user_id="u").hits
        assert mem.flush(timeout=30)
        assert mem.get(mem.list_memories("u")[0].id, user_id="u").access_count == 0
        assert mem.background_errors
        assert all(
            e == "touch failed: StoreUnavailableError: the cluster lost its quorum" for e in mem.background_errors
        )
        assert mem.metrics(store_sizes=False).background_errors == {"touch": len(mem.background_errors)}
        steps = [s for s in mem.replay(None, user_id="u") if s.kind == "background_error"]
        assert steps and steps[0].params["job"] == "touch"
    finally:
        mem.close()


def test_the_synchronous_switch_keeps_the_old_behaviour() -> None:
    store = GatedStore()
    mem = memory(store, rerank={"touch_in_background": False})
    try:
        mem.remember("u", "favourite colour is teal", timestamp=T0)
        mem.recall("colour", user_id="u", touch=True)
        assert stored(store, "u")[0][1] == 1  # written before recall returned
        assert [tid for *_, tid in store.calls] == [threading.get_ident()]
        store.fail = StoreUnavailableError("down")
        with pytest.raises(StoreUnavailableError):
            mem.recall("colour", user_id="u", touch=True)
    finally:
        mem.close()


def test_the_switch_is_validated_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert HybridMemoryConfig().rerank.touch_in_background is True
    with pytest.raises((ConfigurationError, ValueError), match="touch_in_background"):
        HybridMemory(embedder=HashingEmbedder(), config={"rerank": {"touch_in_background": "sometimes"}})
    monkeypatch.setenv("HYBRID_MEMORY_RERANK__TOUCH_IN_BACKGROUND", "false")
    assert HybridMemoryConfig().rerank.touch_in_background is False


def test_async_twins_touch_in_the_background(gated: tuple[HybridMemory, GatedStore]) -> None:
    mem, store = gated

    async def turn() -> None:
        await mem.arecall("colour", user_id="u", touch=True)
        await mem.abuild_context("what is my favourite colour", user_id="u")
        assert await mem.aflush(timeout=30)

    asyncio.run(turn())
    assert stored(store, "u")[0][1] == 2


def test_back_pressure_beyond_max_pending_loses_nothing() -> None:
    store = GatedStore(gated=("blocker",))
    store.bind_embedder("hash", 2)
    queue = TouchQueue(store, report_error=lambda *a: None, max_pending=1)
    try:
        queue.record("blocker", ["b"], T0)
        assert store.entered.wait(30)  # taken: the queue is empty again
        queue.record("u", ["x"], T0)  # fills it
        later = threading.Thread(target=queue.record, args=("u", ["y"], T0))
        later.start()  # waits until the thread takes "x"
        store.release.set()
        later.join(30)
        assert not later.is_alive()
        assert queue.flush(timeout=30)
        assert sorted(ids[0] for user, ids, *_ in store.calls if user == "u") == ["x", "y"]
    finally:
        store.release.set()
        queue.close(timeout=30)


def test_a_recall_ranks_with_the_touches_still_pending(gated: tuple[HybridMemory, GatedStore]) -> None:
    mem, store = gated
    hold_the_worker(mem, store)  # u's touches stay pending: the thread is busy with another user
    first = mem.recall("colour", user_id="u", touch=True)[0]
    again = mem.recall("colour", user_id="u")[0]
    assert stored(store, "u")[0][1] == 0  # not written yet ...
    assert (first.record.access_count, again.record.access_count) == (0, 1)  # ... and the second recall counts it
    assert again.heat > first.heat
    store.release.set()
    assert mem.flush(timeout=30)
    after = mem.recall("colour", user_id="u")[0]
    assert (after.record.access_count, after.heat) == (again.record.access_count, again.heat)  # the same once written


def test_a_recall_counts_a_touch_being_written_once() -> None:
    store = GatedStore(gated=("u",))
    mem = memory(store)
    try:
        mem.remember("u", "favourite colour is teal", timestamp=T0)
        mem.recall("colour", user_id="u", touch=True)
        assert store.entered.wait(30)  # the touch is inside the store call, held there
        held = mem.recall("colour", user_id="u")[0]  # returns at once, with the held touch counted
        assert (held.record.access_count, stored(store, "u")[0][1]) == (1, 0)
        store.release.set()
        assert mem.flush(timeout=30)
        after = mem.recall("colour", user_id="u")[0]  # written now: counted once, not twice
        assert (after.record.access_count, after.heat) == (held.record.access_count, held.heat)
    finally:
        store.release.set()
        mem.close()
