"""Metrics: latency histograms, hit rate, write outcomes, scorer fallbacks, store sizes, Prometheus."""

from __future__ import annotations

import json
import sys
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore, MemoryRecord
from hybrid_memory.errors import ConfigurationError, MissingDependencyError, StoreUnavailableError
from hybrid_memory.observe.metrics import WRITE_ACTIONS, MemoryMetrics, prometheus_registry, serve_prometheus
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def mem() -> Iterator[HybridMemory]:
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0)
    yield m
    m.close()


def test_snapshot_counts_operations_with_a_consistent_histogram(mem: HybridMemory) -> None:
    mem.remember("alice", "Alice drinks green tea", importance=0.8, timestamp=T0)
    for _ in range(7):
        mem.recall("green tea", user_id="alice", now=T0)
    snap = mem.metrics()
    rec = snap.operations["recall"]
    assert rec.count == 7 and rec.errors == 0
    assert snap.recall_latency == rec
    counts = [n for _, n in rec.buckets]
    assert counts == sorted(counts) and counts[-1] <= rec.count  # cumulative; the rest is in +Inf
    assert [le for le, _ in rec.buckets] == list(mem.config.metrics.latency_buckets)
    assert rec.sum_seconds > 0 and rec.p50 is not None and rec.p99 is not None and rec.p50 <= rec.p99
    assert rec.mean == pytest.approx(rec.sum_seconds / 7)
    assert snap.operations["remember"].count == 1
    assert "remember_many" not in snap.operations  # remember -> remember_many is one operation
    assert snap.recall.calls == 7 and snap.recall.hit_rate == 1.0


def test_hit_rate_counts_context_builds_that_injected(mem: HybridMemory) -> None:
    mem.remember("alice", "Alice is allergic to peanuts", importance=0.9, timestamp=T0)
    assert mem.build_context("peanuts allergy", user_id="alice", now=T0).text
    assert not mem.build_context("quantum chromodynamics", user_id="alice", now=T0).text
    assert not mem.build_context("anything", user_id="nobody", now=T0).text
    ctx = mem.metrics().context
    assert (ctx.calls, ctx.injected, ctx.skipped) == (3, 1, 2)
    assert ctx.hit_rate == pytest.approx(1 / 3)
    assert ctx.skip_reasons == {"no recalled memory is relevant enough": 1, "no memories recalled": 1}


def test_write_outcomes_are_counted_by_action() -> None:
    cfg = HybridMemoryConfig(writer={"min_importance": 0.3})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg, clock=lambda: T0)
    try:
        m.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0 - timedelta(days=2))
        m.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0 - timedelta(days=2))
        out = m.remember("alice", "I moved to Munich, I live in Munich now", importance=0.8, timestamp=T0)
        m.remember("alice", "meh", importance=0.1, timestamp=T0 - timedelta(days=2))
        assert out.action == "superseded"
        w = m.metrics().writes
        assert set(w) == set(WRITE_ACTIONS)
        assert (w["added"], w["deduplicated"], w["superseded"], w["rejected"]) == (1, 1, 1, 1)
        assert w["dead_lettered"] == 0
    finally:
        m.close()


def test_scorer_fallbacks_are_counted(tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.language_models import FakeListChatModel

    from hybrid_memory import LLMImportanceScorer
    from hybrid_memory.llm_call import LLMCallPolicy

    # A model that answers with something that is not the requested JSON: the scorer falls back.
    scorer = LLMImportanceScorer(
        FakeListChatModel(responses=["sorry, I cannot score that"]),
        method="json_mode",
        policy=LLMCallPolicy(max_retries=0),
    )
    m = HybridMemory(
        store=LocalStore(":memory:"),
        embedder=HashingEmbedder(),
        scorer=scorer,
        clock=lambda: T0,
        trace=tmp_path / "t.sqlite",
    )
    try:
        m.add_turn("alice", "s1", "user", "I prefer window seats on long flights", timestamp=T0)
        # add_turn scored with the heuristic on the caller's thread; the LLM runs in the background.
        sc = m.metrics().scorer
        assert (sc.calls, sc.items, sc.fallback_items) == (1, 1, 0)
        assert m.flush(timeout=30)
        sc = m.metrics().scorer
        assert (sc.calls, sc.items, sc.fallback_items, sc.fallback_calls) == (2, 2, 1, 1)
        assert sc.fallbacks_by_scorer == {"llm": 1}
        assert sc.last_fallback_reason is not None and "heuristic" in sc.last_fallback_reason
        assert m.metrics().refinement.fallback == 1
        turn_step, refine_step = m.replay("s1")
        assert turn_step.scorer == "heuristic" and turn_step.scorer_fallback is None
        assert refine_step.kind == "refine_importance"
        assert refine_step.scorer == "llm" and refine_step.scorer_fallback == sc.last_fallback_reason
    finally:
        m.close()


class _OutageStore(LocalStore):
    """Fault injection: a store whose writes fail and land in a dead-letter list.

    A real Weaviate outage is exercised by the Weaviate store's own tests; here we need the
    facade's side of it (the metric) without taking a server down.
    """

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.letters: list[str] = []
        self.down = False

    def dead_letter_count(self) -> int:
        return len(self.letters)

    def upsert(self, records: Sequence[MemoryRecord], vectors: Any, *, epochs: Any = None) -> None:
        if self.down:
            self.letters.extend(r.id for r in records)
            raise StoreUnavailableError(f"{len(records)} memories kept in the dead-letter queue")
        super().upsert(records, vectors, epochs=epochs)


def test_dead_lettered_writes_are_counted_and_the_queue_is_reported() -> None:
    store = _OutageStore()
    m = HybridMemory(store=store, embedder=HashingEmbedder(), clock=lambda: T0)
    try:
        m.remember("alice", "first memory while the store is up", timestamp=T0)
        store.down = True
        with pytest.raises(StoreUnavailableError):
            m.remember_many("alice", ["one thing about sailing", "another about chess"])
        snap = m.metrics()
        assert snap.writes["dead_lettered"] == 2
        assert snap.operations["remember_many"].errors == 1
        assert snap.store is not None and snap.store.dead_letters == 2
    finally:
        store.down = False
        m.close()


def test_store_sizes_per_user_cover_every_status(mem: HybridMemory) -> None:
    mem.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0 - timedelta(days=1))
    mem.remember("alice", "I moved to Munich, I live in Munich now", importance=0.8, timestamp=T0)
    mem.remember("李雷", "我喜欢喝乌龙茶", importance=0.8, timestamp=T0)
    st = mem.metrics().store
    assert st is not None
    assert st.users == {"alice": 2, "李雷": 1} and st.total == 3 and st.dead_letters is None
    assert mem.metrics(store_sizes=False).store is None


def test_metrics_can_be_disabled() -> None:
    cfg = HybridMemoryConfig(metrics={"enabled": False})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg)
    try:
        m.remember("alice", "tea")
        assert [h.content for h in m.recall("tea", user_id="alice")] == ["tea"]
        with pytest.raises(ConfigurationError, match="disabled"):
            m.metrics()
    finally:
        m.close()


def test_snapshot_is_json_ready_and_reset_zeroes(mem: HybridMemory) -> None:
    mem.remember("alice", "tea", timestamp=T0)
    mem.build_context("tea", user_id="alice", now=T0)
    d = json.loads(json.dumps(mem.metrics().to_dict()))
    assert d["writes"]["added"] == 1 and d["context"]["hit_rate"] == 1.0
    assert d["operations"]["build_context"]["count"] == 1
    assert d["operations"]["build_context"]["mean"] > 0
    assert d["store"]["users"] == {"alice": 1}
    assert mem._obs.metrics is not None
    mem._obs.metrics.reset()
    snap = mem.metrics()
    assert snap.operations == {} and snap.writes["added"] == 0 and snap.context.hit_rate is None


def test_concurrent_recalls_are_all_counted(mem: HybridMemory) -> None:
    mem.remember("alice", "green tea", timestamp=T0)

    def work() -> None:
        for _ in range(25):
            mem.recall("tea", user_id="alice", now=T0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mem.metrics().operations["recall"].count == 100


async def test_async_twins_are_measured(mem: HybridMemory) -> None:
    await mem.aremember("alice", "tea", timestamp=T0)
    await mem.arecall("tea", user_id="alice", now=T0)
    snap = await mem.ametrics()
    assert snap.operations["recall"].count == 1 and snap.operations["remember"].count == 1


def test_histogram_buckets_place_values_at_their_upper_bound() -> None:
    m = MemoryMetrics(HybridMemoryConfig(metrics={"latency_buckets": (0.01, 0.1, 1.0)}).metrics)
    for s in (0.01, 0.02, 0.5, 3.0):
        m.observe_op("recall", s)
    st = m.snapshot().operations["recall"]
    assert st.buckets == [(0.01, 1), (0.1, 2), (1.0, 3)]
    assert st.count == 4 and st.sum_seconds == pytest.approx(3.53)
    assert st.p50 == pytest.approx(0.26)


def test_prometheus_exposition(mem: HybridMemory) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    mem.remember("alice", "Alice is allergic to peanuts", importance=0.9, timestamp=T0)
    mem.remember("bob", "Bob plays chess", importance=0.9, timestamp=T0)
    mem.build_context("peanuts", user_id="alice", now=T0)
    mem.recall("chess", user_id="bob", now=T0)
    text = generate_latest(prometheus_registry(mem)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("hybrid_memory_operation_duration_seconds_count", (("op", "recall"),))] == 1.0
    assert (
        samples[("hybrid_memory_operation_duration_seconds_bucket", (("le", "+Inf"), ("op", "build_context")))] == 1.0
    )
    assert samples[("hybrid_memory_writes_total", (("action", "added"),))] == 2.0
    assert samples[("hybrid_memory_context_builds_total", (("outcome", "injected"),))] == 1.0
    assert samples[("hybrid_memory_context_hit_rate", ())] == 1.0
    assert samples[("hybrid_memory_store_memories", (("user", "alice"),))] == 1.0
    assert samples[("hybrid_memory_store_memories_all", ())] == 2.0
    assert samples[("hybrid_memory_store_users", ())] == 2.0


def test_prometheus_user_series_are_capped() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    cfg = HybridMemoryConfig(metrics={"max_user_series": 1})
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), config=cfg)
    try:
        m.remember_many("big", ["sailing boats", "chess openings", "green tea"])
        m.remember("small", "one memory")
        text = generate_latest(prometheus_registry(m)).decode()
        assert 'hybrid_memory_store_memories{user="big"} 3.0' in text
        assert 'user="small"' not in text
        assert "hybrid_memory_store_memories_all 4.0" in text
    finally:
        m.close()


def test_serve_prometheus_on_loopback(mem: HybridMemory) -> None:
    pytest.importorskip("prometheus_client")
    mem.remember("alice", "tea", timestamp=T0)
    server = serve_prometheus(mem, port=0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'hybrid_memory_writes_total{action="added"} 1.0' in body
    finally:
        server.shutdown()
        server.server_close()


def test_missing_prometheus_client_names_the_extra(mem: HybridMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # makes `import prometheus_client` fail
    with pytest.raises(MissingDependencyError, match=r"hybrid-memory\[prometheus\]"):
        prometheus_registry(mem)


def test_metrics_hooks_do_not_change_results() -> None:
    on = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0)
    off = HybridMemory(
        store=LocalStore(":memory:"),
        embedder=HashingEmbedder(),
        clock=lambda: T0,
        config=HybridMemoryConfig(metrics={"enabled": False}),
    )
    try:
        for m in (on, off):
            m.remember_many("u", ["green tea in the morning", "black coffee at noon", "oolong tea at night"])
        a = on.recall("tea", user_id="u", now=T0)
        b = off.recall("tea", user_id="u", now=T0)
        assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b]
        assert np.isclose(a[0].score, b[0].score)
    finally:
        on.close()
        off.close()


def test_listing_counting_and_forgetting_are_counted_without_trace_steps() -> None:
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0, trace=True)
    try:
        rec = m.remember("u", "I live in Lisbon", importance=0.7, timestamp=T0).record
        assert rec is not None
        m.list_memories("u")
        m.count_memories("u")
        assert m.forget(rec.id, user_id="u")
        with pytest.raises(Exception, match="memory_id"):
            m.forget("", user_id="u")  # a refused call counts as an error
        m.forget_user("u")
        ops = m.metrics().operations
        assert (ops["list_memories"].count, ops["count_memories"].count, ops["forget_user"].count) == (1, 1, 1)
        assert (ops["forget"].count, ops["forget"].errors) == (2, 1)
        m.remember("v", "I like oolong tea", importance=0.7, timestamp=T0)
        m.list_memories("v")
        assert [s.kind for s in m.replay(None, user_id="v")] == ["remember"]  # listing leaves no step
    finally:
        m.close()
