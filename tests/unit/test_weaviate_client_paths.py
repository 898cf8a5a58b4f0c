"""Client-side paths of WeaviateStore that need no server: call workers, batch window, filters, cosine.

A fake collection handle stands in for ``collection.with_tenant(...)``: it records every
``insert_many`` request, how many ran at once, and fails the requests or objects a test asks for.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("weaviate", reason="the 'weaviate' extra is not installed")

from hybrid_memory.errors import ConfigurationError, StoreError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.stores.weaviate import WeaviateStore, object_uuid, tenant_name
from hybrid_memory.stores.weaviate.mapping import _Cosine

T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)


class FakeData:
    """``handle.data`` with ``insert_many``: sleeps a little, counts concurrency, fails on demand.

    With ``overlap=n`` the first request waits (on a condition, at most 10 s as a hang guard)
    until ``n`` requests run at once, so a test of concurrent requests does not depend on two
    threads happening to overlap within ``delay`` on a loaded machine.
    """

    def __init__(self, *, delay: float = 0.02, overlap: int = 1) -> None:
        self.delay = delay
        self.overlap = overlap
        self.lock = threading.Condition()
        self.running = 0
        self.max_running = 0
        self.requests: list[list[str]] = []
        self.raise_on_request: set[int] = set()  # request numbers (0-based) that raise
        self.hang_on_request: set[int] = set()  # request numbers (0-based) that take 30 s
        self.reject: set[str] = set()  # uuids rejected every time

    def insert_many(self, objs: list[Any]) -> Any:
        with self.lock:
            number = len(self.requests)
            self.requests.append([str(o.uuid) for o in objs])
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.lock.notify_all()
            if number == 0:
                self.lock.wait_for(lambda: self.running >= self.overlap, timeout=10)
        try:
            time.sleep(30.0 if number in self.hang_on_request else self.delay)
            if number in self.raise_on_request:
                raise ConnectionError(f"request {number} lost")
            errors = {i: SimpleNamespace(message="rejected") for i, o in enumerate(objs) if str(o.uuid) in self.reject}
            return SimpleNamespace(errors=errors)
        finally:
            with self.lock:
                self.running -= 1


def make_store(tmp_path: Any, data: FakeData, *, all_data: FakeData | None = None, **kwargs: Any) -> WeaviateStore:
    """A store whose alice handle writes to ``data`` (``all_data``: the handle at level ALL)."""
    kwargs.setdefault("write_all_first", all_data is not None)
    store = WeaviateStore(
        SimpleNamespace(),
        dead_letter_path=tmp_path / "dl.sqlite",
        health_check_interval=None,
        retry_base_delay=0.0,
        retry_max_delay=0.0,
        **kwargs,
    )
    for level in (None, "ONE", "QUORUM", "ALL"):
        target = all_data if level == "ALL" and all_data is not None else data
        store._handles[(store.collection, tenant_name("alice"), level)] = (store._client, SimpleNamespace(data=target))
    store._ensure_dimension = lambda dim: None  # type: ignore[method-assign]
    return store


def records(n: int) -> tuple[list[MemoryRecord], np.ndarray]:
    recs = [MemoryRecord.create(user_id="alice", content=f"memory number {i}", timestamp=T0) for i in range(n)]
    rng = np.random.default_rng(1)
    return recs, rng.normal(size=(n, 8)).astype(np.float32)


def test_upsert_keeps_two_requests_in_flight_and_sends_every_object_once(tmp_path: Any) -> None:
    data = FakeData(overlap=2)
    store = make_store(tmp_path, data, batch_size=10, write_concurrency=2)
    recs, vecs = records(55)
    store.upsert(recs, vecs)
    assert data.max_running == 2
    # Two requests in flight may reach the server in either order: compare the chunks, not the arrival order.
    uuids = [object_uuid(r.id) for r in recs]
    assert sorted(data.requests) == sorted(uuids[k : k + 10] for k in range(0, 55, 10))
    assert store.dead_letter_count() == 0


def test_write_concurrency_one_sends_one_request_at_a_time(tmp_path: Any) -> None:
    data = FakeData()
    store = make_store(tmp_path, data, batch_size=10, write_concurrency=1)
    recs, vecs = records(35)
    store.upsert(recs, vecs)
    assert data.max_running == 1
    assert len(data.requests) == 4


def test_a_lost_request_is_retried_and_nothing_is_dead_lettered(tmp_path: Any) -> None:
    data = FakeData()
    data.raise_on_request = {1}  # the second chunk of the first attempt
    store = make_store(tmp_path, data, batch_size=10)
    recs, vecs = records(30)
    store.upsert(recs, vecs)
    assert len(data.requests) == 4  # 3 chunks, then the lost chunk again
    assert data.requests[3] == data.requests[1]
    assert store.dead_letter_count() == 0


def test_rejected_objects_are_dead_lettered_in_order_and_the_call_raises(tmp_path: Any) -> None:
    data = FakeData(delay=0.0)
    recs, vecs = records(25)
    bad = [recs[3], recs[17], recs[24]]
    data.reject = {object_uuid(r.id) for r in bad}
    store = make_store(tmp_path, data, batch_size=10, max_retries=1)
    with pytest.raises(StoreError, match="3 of 25 memories"):
        store.upsert(recs, vecs)
    assert [r.id for r, _, _ in store.dead_letters("alice")] == [r.id for r in bad]
    assert len(data.requests) == 3 + 1  # one retry of the three failures, in one request


def test_a_write_asks_all_replicas_first_then_falls_back_to_the_write_level(tmp_path: Any) -> None:
    """A replica down: the ALL attempt's failures are sent again at once at QUORUM, not dead-lettered."""
    everywhere = FakeData(delay=0.0)
    quorum = FakeData(delay=0.0)
    recs, vecs = records(25)
    everywhere.reject = {object_uuid(r.id) for r in recs[:12]}  # "cannot reach enough replicas"
    store = make_store(tmp_path, quorum, all_data=everywhere, batch_size=10, max_retries=0)
    store.upsert(recs, vecs)
    assert len(everywhere.requests) == 3
    assert sorted(u for req in quorum.requests for u in req) == sorted(everywhere.reject)
    assert store.dead_letter_count() == 0


def test_a_write_that_outlives_the_insert_timeout_is_dead_lettered(tmp_path: Any) -> None:
    """A request that does not answer (a cluster without Raft quorum) is abandoned at the deadline."""
    data = FakeData(delay=30.0)
    store = make_store(tmp_path, data, batch_size=10, max_retries=3)
    store._request_timeout = lambda kind="query": 0.5  # type: ignore[method-assign]
    recs, vecs = records(5)
    with pytest.raises(StoreError, match="5 of 5 memories"):
        store.upsert(recs, vecs)
    assert len(data.requests) == 1  # no retry past the deadline
    assert store.dead_letter_count() == 5


def test_a_hung_batch_request_is_abandoned_and_sent_again(tmp_path: Any) -> None:
    """The first write after Weaviate's Raft leader died hangs server-side; the resent one goes through."""
    data = FakeData(delay=0.0)
    data.hang_on_request = {0}
    store = make_store(tmp_path, data, batch_size=10, batch_timeout=0.3)
    recs, vecs = records(5)
    store.upsert(recs, vecs)
    assert len(data.requests) == 2 and data.requests[0] == data.requests[1]
    assert store.dead_letter_count() == 0


def test_write_concurrency_is_checked() -> None:
    with pytest.raises(ConfigurationError):
        WeaviateStore(SimpleNamespace(), write_concurrency=0, health_check_interval=None)
    with pytest.raises(ConfigurationError):
        WeaviateStore(SimpleNamespace(), write_concurrency=99, health_check_interval=None)


def test_cosine_with_the_query_prepared_once_equals_the_plain_formula() -> None:
    rng = np.random.default_rng(2)
    q = rng.normal(size=64).astype(np.float32)
    cos = _Cosine(q)
    for _ in range(20):
        a = rng.normal(size=64).astype(np.float32)
        a64, q64 = a.astype(np.float64), q.astype(np.float64)
        expected = float(np.dot(a64, q64) / (float(np.linalg.norm(a64)) * float(np.linalg.norm(q64))))
        assert cos(a) == expected
    assert cos(np.zeros(64, dtype=np.float32)) == 0.0
    assert _Cosine(np.zeros(64, dtype=np.float32))(q) == 0.0


def test_filters_are_built_once_per_filter(tmp_path: Any) -> None:
    store = make_store(tmp_path, FakeData())
    f = MemoryFilter(categories=("fact",), since=T0)
    first = store._filters(f)
    assert store._filters(MemoryFilter(categories=("fact",), since=T0)) is first
    assert store._filters(MemoryFilter(categories=("preference",))) is not first
    assert store._filters(None) is None
    assert store._filters(MemoryFilter(statuses=())) is store._filters(MemoryFilter(statuses=()))


def test_seq_clock_orders_one_session_strictly_and_after_what_it_loaded() -> None:
    from hybrid_memory.stores.weaviate.runtime import SEQ_TIE_BREAK_BITS, _SeqClock

    clock = _SeqClock()
    key = ("C", "alice", "s1")
    seqs = [clock.next(key) for _ in range(2000)]  # far more than one per millisecond
    assert seqs == sorted(set(seqs))
    assert {s & ((1 << SEQ_TIE_BREAK_BITS) - 1) for s in seqs} == {clock.tie_break}
    assert abs((seqs[0] >> SEQ_TIE_BREAK_BITS) - time.time() * 1000) < 60_000
    ahead = ((seqs[-1] >> SEQ_TIE_BREAK_BITS) + 3_600_000) << SEQ_TIE_BREAK_BITS  # a process an hour ahead
    clock.observe(key, ahead)
    assert ahead < clock.next(key) < 2**53
    assert clock.next(("C", "alice", "s2")) < ahead  # the floor is per session
