"""Weaviate faults with real processes and real signals (issue 8, faults 1 and 2).

Each test starts its OWN ``weaviate-server`` (``private_weaviate``) so it can ``kill -9``,
``SIGSTOP`` and restart it. Nothing here is mocked.

* A server killed in the middle of a batched ingest of 5,000 memories: every acknowledged write
  is in Weaviate (it survives the kill) or in the dead-letter queue; after a restart the same
  store object recovers and ``replay_dead_letters()`` brings every memory in exactly once
  (count, ids, content, metadata and vectors checked).
* The same through the facade (``HybridMemory.remember_many``): every call either returns or
  raises a typed ``StoreUnavailableError``; nothing is lost silently.
* A server that is down (``kill -9``) or hanging (``SIGSTOP``) during ``recall`` /
  ``build_context``: a typed ``StoreUnavailableError`` within the configured query timeout;
  ``build_context`` degrades to short-term memory only when configured to and says so.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig
from hybrid_memory.errors import HybridMemoryError, StoreError, StoreUnavailableError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.testing import HashingEmbedder
from tests.reliability.conftest import report, runs
from tests.reliability.load import WORDS

pytestmark = [pytest.mark.weaviate, pytest.mark.slow]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
DIM = 32
#: Query timeout given to WeaviateStore.connect in these tests (seconds).
QUERY_TIMEOUT = 3.0
#: Allowed overshoot of that timeout (thread wake-ups, one probe round trip, a busy 2-core CI box).
#: Generous on purpose: the bound proves the call gives up after its own timeout rather than the
#: client's built-in retries (45-63 s), and must hold on a loaded machine.
SLACK = QUERY_TIMEOUT

_WORDS = [w for w in WORDS if w.isascii()]  # the shared workload words, Latin only


def connect(server: Any, tmp_path: Path, **kwargs: Any) -> Any:
    from hybrid_memory.stores.weaviate import WeaviateStore

    kwargs.setdefault("collection", "Rel")
    kwargs.setdefault("timeout", QUERY_TIMEOUT)
    kwargs.setdefault("insert_timeout", 10.0)
    kwargs.setdefault("dead_letter_path", tmp_path / "dead-letters.sqlite")
    store = WeaviateStore.connect(server.url, grpc_port=server.grpc_port, **kwargs)
    # Short backoff so the outage part of a test does not dominate its duration.
    store.retry_base_delay = 0.05
    store.retry_max_delay = 0.2
    return store


def make_records(n: int, users: int, seed: int) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        words = " ".join(rng.choice(_WORDS, size=6))
        recs.append(
            MemoryRecord.create(
                user_id=f"user-{i % users:02d}",
                content=f"memory {i:05d} of run {seed}: {words} 中文 {i}",
                category="fact",
                importance=float(rng.uniform(0.1, 0.9)),
                metadata={"n": i, "run": seed, "nested": {"w": words}},
                timestamp=T0,
            )
        )
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    return recs, vectors


class Killer:
    """A thread that sends ``sig`` to the server as soon as ``condition()`` holds; ``fired`` is set after.

    The kill lands whenever the thread gets to it, often in the middle of a request. A test that
    needs the kill to happen before its workload ends waits on ``fired`` at a later point of
    the workload, so a loaded machine that is slow to schedule this thread cannot let the
    workload run to completion first.
    """

    def __init__(self, server: Any, condition: Callable[[], bool], sig: int = signal.SIGKILL) -> None:
        self.fired = threading.Event()

        def run() -> None:
            while not condition():
                time.sleep(0.001)
            os.kill(server.pid, sig)
            self.fired.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def hold_until_fired(self) -> None:
        """Block the workload until the signal was sent (at most 60 s, a hang guard)."""
        assert self.fired.wait(60), "the killer thread never fired"

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    def is_alive(self) -> bool:
        return self.thread.is_alive()


def kill_when(server: Any, condition: Callable[[], bool], sig: int = signal.SIGKILL) -> Killer:
    """Start a :class:`Killer`."""
    return Killer(server, condition, sig)


def wait_until_usable(store: Any, user_id: str, limit: float = 120.0) -> float:
    """Seconds until the *same* store object answers again after a restart."""
    t0 = time.monotonic()
    while True:
        try:
            store.count(user_id)
            return time.monotonic() - t0
        except StoreUnavailableError:
            if time.monotonic() - t0 > limit:
                raise
            time.sleep(0.2)


def restart(server: Any) -> None:
    proc = server._proc  # the killed process: reap it before starting on the same data and ports
    if proc is not None:
        proc.wait(timeout=30)
    server.start()


def cleanup(server: Any, store: Any, mem: HybridMemory | None = None) -> None:
    """Bring the server back (SIGCONT or restart), drop the test collection, close everything."""
    if server.pid is not None:
        os.kill(server.pid, signal.SIGCONT)
    else:
        restart(server)
    try:
        if store.closed:
            return
        wait_until_usable(store, "alice", limit=120)
        store.drop()
    finally:
        if mem is not None:
            mem.close()
        store.close()


def stored_state(store: Any, users: Sequence[str]) -> dict[str, MemoryRecord]:
    out: dict[str, MemoryRecord] = {}
    for u in users:
        listed = store.list(u, filter=None)
        ids = [r.id for r in listed]
        assert len(ids) == len(set(ids)), f"duplicate objects for {u}"
        out.update({r.id: r for r in listed})
    return out


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# ------------------------------------------------------------------------------------- fault 1
@pytest.mark.parametrize("run", range(runs(1)))
def test_kill9_mid_batched_ingest_then_replay_brings_all_5000_exactly_once(
    private_weaviate: Callable[..., Any], tmp_path: Path, run: int
) -> None:
    server = private_weaviate()
    store = connect(server, tmp_path, max_retries=2)
    try:
        n, users = 5000, 10
        recs, vectors = make_records(n, users, seed=run)
        expected = {r.id: (r, vectors[i]) for i, r in enumerate(recs)}
        assert len(expected) == n
        acked: list[str] = []
        failed: list[str] = []
        errors: list[BaseException] = []
        killer = kill_when(server, lambda: len(acked) >= 3000)
        for i in range(0, n, 100):
            if len(acked) >= 4000:  # the kill must land mid-ingest however slow the killer is scheduled
                killer.hold_until_fired()
            batch = recs[i : i + 100]
            try:
                store.upsert(batch, vectors[i : i + 100])
                acked.extend(r.id for r in batch)
            except HybridMemoryError as exc:  # typed: the batch is in the dead-letter queue
                errors.append(exc)
                failed.extend(r.id for r in batch)
        killer.join(timeout=5)
        assert not killer.is_alive()
        assert 3000 <= len(acked) < n, "the kill did not happen in the middle of the ingest"
        assert errors and all(isinstance(e, StoreError) for e in errors)
        assert set(acked) | set(failed) == set(expected)
        dead = {r.id: r for r, _err, _attempts in store.dead_letters()}
        assert set(dead) == set(failed), "every write that raised is in the dead-letter queue"
        assert store.dead_letter_count() == len(failed)

        restart(server)
        recovery = wait_until_usable(store, "user-00")

        # Before the replay: acknowledged writes survived kill -9 (or are queued).
        before = stored_state(store, [f"user-{u:02d}" for u in range(users)])
        lost = [i for i in acked if i not in before and i not in dead]
        assert lost == [], f"{len(lost)} acknowledged writes lost"

        replayed = store.replay_dead_letters()
        assert replayed == len(failed)
        assert store.dead_letter_count() == 0
        assert store.replay_dead_letters() == 0  # idempotent

        after = stored_state(store, [f"user-{u:02d}" for u in range(users)])
        assert store.count() == n
        assert set(after) == set(expected)
        for mid, (rec, _vec) in expected.items():
            got = after[mid]
            assert (got.user_id, got.content, got.metadata, got.importance) == (
                rec.user_id,
                rec.content,
                rec.metadata,
                rec.importance,
            )
        report(
            "weaviate kill -9 mid-ingest (store batches)",
            memories=n,
            acknowledged=len(acked),
            dead_lettered=len(failed),
            replayed=replayed,
            final=store.count(),
            lost=len(lost),
            duplicates=store.count() - len(set(after)),
            recovery_s=round(recovery, 1),
        )
        sample = [r.id for r in recs if r.user_id == "user-03"]
        got_vecs = store.get_vectors("user-03", sample)
        for mid in sample:
            np.testing.assert_allclose(got_vecs[mid], unit(expected[mid][1]), atol=1e-5)
    finally:
        cleanup(server, store)


def test_kill9_during_facade_ingest_nothing_lost_silently(private_weaviate: Callable[..., Any], tmp_path: Path) -> None:
    """``remember_many`` in batches while the server dies: each call returns or raises typed.

    A batch whose dedup read fails before the write raises ``StoreUnavailableError`` without
    being queued (the caller still holds it); a batch whose write fails is dead-lettered. After
    the restart, replaying the queue and re-submitting the failed calls stores every memory once.
    """
    server = private_weaviate()
    store = connect(server, tmp_path, max_retries=1)
    mem = HybridMemory(store=store, embedder=HashingEmbedder(dim=DIM), config=HybridMemoryConfig())
    try:
        recs, _ = make_records(1000, 1, seed=7)
        items = [{"content": r.content, "importance": r.importance, "metadata": r.metadata} for r in recs]
        acked: dict[str, str] = {}
        raised: list[list[dict[str, Any]]] = []
        killer = kill_when(server, lambda: len(acked) >= 300)
        for i in range(0, len(items), 50):
            if len(acked) >= 600:  # the kill must interrupt the ingest however slow the killer is scheduled
                killer.hold_until_fired()
            batch = items[i : i + 50]
            try:
                outs = mem.remember_many("user-00", batch)
            except StoreUnavailableError:
                raised.append(batch)
                continue
            for o in outs:
                assert o.record is not None and o.action in ("added", "deduplicated", "demoted", "superseded")
                acked[o.record.content] = o.record.id
        killer.join(timeout=5)
        assert raised, "the kill did not interrupt the ingest"
        assert len(acked) + 50 * len(raised) == len(items)

        restart(server)
        wait_until_usable(store, "user-00")
        dead = {r.id for r, _e, _n in store.dead_letters()}
        present = {r.id for r in store.list("user-00", filter=None)}
        assert [c for c, mid in acked.items() if mid not in present | dead] == []

        store.replay_dead_letters()
        for batch in raised:  # what an application does with a call that raised: submit it again
            mem.remember_many("user-00", batch)
        final = store.list("user-00", filter=None)
        report(
            "weaviate kill -9 mid-ingest (facade remember_many)",
            memories=len(items),
            acknowledged=len(acked),
            raised=50 * len(raised),
            dead_lettered=len(dead),
            final=len(final),
            lost=len(items) - len({r.content for r in final}),
        )
        assert sorted(r.content for r in final) == sorted(it["content"] for it in items)
        assert len({r.id for r in final}) == len(items)
        assert store.dead_letter_count() == 0
    finally:
        cleanup(server, store, mem)


def test_kill9_during_a_bulk_remember_many_nothing_lost(private_weaviate: Callable[..., Any], tmp_path: Path) -> None:
    """Calls of 200 items (a bulk write: records held back, written 1,024 at a time) while the server dies.

    A call either returns (everything it wrote is stored) or raises typed; what it held back is
    written or dead-lettered, never dropped. After the restart, replaying the queue and re-submitting
    the failed calls stores every memory exactly once.
    """
    server = private_weaviate()
    store = connect(server, tmp_path, max_retries=1)
    mem = HybridMemory(store=store, embedder=HashingEmbedder(dim=DIM), config=HybridMemoryConfig())
    size = 200
    try:
        recs, _ = make_records(1000, 1, seed=11)
        items: list[dict[str, Any]] = [
            {"content": r.content, "importance": r.importance, "metadata": r.metadata} for r in recs
        ]
        acked: dict[str, str] = {}
        raised: list[list[dict[str, Any]]] = []
        killer = kill_when(server, lambda: len(acked) >= 200)
        for i in range(0, len(items), size):
            if len(acked) >= 600:
                killer.hold_until_fired()
            batch = items[i : i + size]
            try:
                outs = mem.remember_many("user-00", batch)
            except StoreUnavailableError:
                raised.append(batch)
                continue
            acked.update((o.record.content, o.record.id) for o in outs if o.record is not None)
        killer.join(timeout=5)
        assert raised, "the kill did not interrupt the ingest"
        restart(server)
        wait_until_usable(store, "user-00")
        present = {r.id for r in store.list("user-00", filter=None)}
        dead = {r.id for r, _e, _n in store.dead_letters()}
        assert [c for c, mid in acked.items() if mid not in present] == []  # a returned call wrote everything
        store.replay_dead_letters()
        for batch in raised:
            mem.remember_many("user-00", batch)
        final = store.list("user-00", filter=None)
        assert sorted(r.content for r in final) == sorted(it["content"] for it in items)
        assert len({r.id for r in final}) == len(items) and store.dead_letter_count() == 0
        assert dead <= {r.id for r in final}
    finally:
        cleanup(server, store, mem)


# ------------------------------------------------------------------------------------- fault 2
def _memory(server: Any, tmp_path: Path, *, degrade: bool) -> HybridMemory:
    """A facade on its own client (the strict and the degrading one share the server and data).

    The session's turn log is in the store, so one ``add_turn`` (by the strict facade) is in both
    facades' window.
    """
    store = connect(server, tmp_path, collection="Outage", dead_letter_path=tmp_path / f"dl-{degrade}.sqlite")
    cfg = HybridMemoryConfig(fuser={"degrade_on_store_error": degrade, "min_similarity": 0.0})
    mem = HybridMemory(store=store, embedder=HashingEmbedder(dim=DIM), config=cfg)
    if not degrade:
        mem.add_turn("alice", "s1", "user", "I'm planning dinner for Saturday", timestamp=T0)
    return mem


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.monotonic()
    try:
        out: Any = fn()
    except Exception as exc:
        out = exc
    return time.monotonic() - t0, out


@pytest.mark.parametrize("fault", ["kill9", "sigstop"])
def test_store_down_or_hanging_during_recall_and_build_context(
    private_weaviate: Callable[..., Any], tmp_path: Path, fault: str
) -> None:
    server = private_weaviate()
    strict = _memory(server, tmp_path, degrade=False)
    lenient = _memory(server, tmp_path, degrade=True)
    strict.remember_many(
        "alice", ["Alice is allergic to peanuts", "Alice prefers green tea", "Alice works on the Apollo project"]
    )
    try:
        assert strict.recall("peanuts allergy", user_id="alice")
        ok = lenient.build_context("Can I eat peanuts?", user_id="alice", session_id="s1")
        assert not ok.degraded and "peanuts" in ok.text
        os.kill(server.pid, signal.SIGKILL if fault == "kill9" else signal.SIGSTOP)
        # First calls right after the fault (both stores have just had a successful call),
        # then later ones: each fails typed and within the configured query timeout.
        worst = 0.0
        for call in (
            lambda: strict.recall("peanuts", user_id="alice"),
            lambda: strict.build_context("Can I eat peanuts?", user_id="alice", session_id="s1"),
            lambda: strict.recall("green tea", user_id="alice", alpha=0.0),
            lambda: lenient.recall("peanuts", user_id="alice"),  # recall never degrades silently
        ):
            elapsed, out = _timed(call)
            worst = max(worst, elapsed)
            assert isinstance(out, StoreUnavailableError), f"{fault}: got {out!r}"
            assert elapsed <= QUERY_TIMEOUT + SLACK, f"{fault}: took {elapsed:.1f}s"
        # degrade_on_store_error=True: build_context returns short-term only and says so.
        elapsed, ctx = _timed(lambda: lenient.build_context("Can I eat peanuts?", user_id="alice", session_id="s1"))
        assert not isinstance(ctx, BaseException), f"degrade_on_store_error=True must not raise: {ctx!r}"
        assert elapsed <= QUERY_TIMEOUT + SLACK
        assert ctx.degraded is True
        assert ctx.skipped is True and ctx.text == "" and ctx.hits == ()
        assert ctx.skipped_reason is not None and "unavailable" in ctx.skipped_reason
        # The window each facade last read from the store still answers for the prompt.
        for mem in (strict, lenient):
            assert [t.content for t in mem.short_term("alice", "s1")] == ["I'm planning dinner for Saturday"]
        # The same store objects recover once the server is back.
        if fault == "sigstop":
            os.kill(server.pid, signal.SIGCONT)
        else:
            restart(server)
        assert wait_until_usable(strict.store, "alice", limit=60) <= 10.0
        assert strict.recall("peanuts allergy", user_id="alice")[0].record.content == "Alice is allergic to peanuts"
        assert not lenient.build_context("Can I eat peanuts?", user_id="alice", session_id="s1").degraded
        report(
            f"weaviate {fault} during recall/build_context",
            typed_errors=4,
            slowest_error_s=round(worst, 2),
            timeout_s=QUERY_TIMEOUT,
            degraded_context=True,
            lost=0,
        )
    finally:
        lenient.close()
        cleanup(server, strict.store, strict)
