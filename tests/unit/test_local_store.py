"""LocalStore specifics the store-agnostic contract suite does not cover.

Persistence, crash durability, right-to-be-forgotten on disk, the incremental per-user index
(compared with a freshly built one and with the reference BM25), exactness of the vector leg,
thread safety, and the analyzer/schema checks.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory.errors import SchemaError, StoreUnavailableError
from hybrid_memory.ranking import bm25_scores
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter, SearchRequest
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.stores.local.connection import finish_wal_wipe, record_pending_wipe, rewrite_file, wipe_marker
from hybrid_memory.text.analyzer import Analyzer

T0 = datetime(2025, 5, 1, tzinfo=timezone.utc)
DIM = 16
WORDS = [
    "tea",
    "coffee",
    "green",
    "black",
    "apple",
    "pear",
    "garden",
    "budget",
    "meeting",
    "python",
    "code",
    "苹果",
    "绿茶",
    "天气",
    "the",
    "a",
    "of",
]


def make(user: str, i: int, rng: np.random.Generator, **fields: object) -> MemoryRecord:
    text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 8))))
    return MemoryRecord.create(
        user_id=user,
        content=f"{text} #{i}",
        timestamp=T0 + timedelta(minutes=i),
        **fields,  # type: ignore[arg-type]
    )


def vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(size=(n, DIM)).astype(np.float32)


def snapshot(store: LocalStore, user: str, q: np.ndarray) -> list[tuple[str, float, float | None]]:
    out = []
    for query, alpha in (("green tea", 0.5), ("苹果", 0.0), ("garden budget", 0.0), (None, 1.0), ("code", 0.25)):
        for flt in (MemoryFilter(), MemoryFilter(statuses=("active", "archived"))):
            hits = store.search(SearchRequest(user_id=user, query=query, vector=q, alpha=alpha, limit=20, filter=flt))
            out.extend((h.record.id, h.score, h.keyword_score) for h in hits)
    return out


def test_persists_across_reopen(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "mem.db"
    records = [make("alice", i, rng) for i in range(40)]
    q = vectors(rng, 1)[0]
    with LocalStore(path) as store:
        store.bind_embedder("toy", DIM)
        store.upsert(records, vectors(rng, 40))
        before = snapshot(store, "alice", q)
        listed = store.list("alice")
    with LocalStore(path) as reopened:
        assert reopened.dimension == DIM
        assert reopened.embedder_name == "toy"
        assert reopened.list("alice") == listed
        assert snapshot(reopened, "alice", q) == before
    assert before


def _random_ops(
    store: LocalStore, live: dict[str, MemoryRecord], rng: np.random.Generator, steps: int, start: int = 0
) -> None:
    for step in range(steps):
        op = rng.integers(0, 10)
        if op < 5 or not live:
            recs = [make("alice", start + 1000 * step + j, rng) for j in range(int(rng.integers(1, 4)))]
            store.upsert(recs, vectors(rng, len(recs)))
            live.update({r.id: r for r in recs})
        elif op < 7:
            victim = str(rng.choice(sorted(live)))
            assert store.delete("alice", [victim]) == 1
            del live[victim]
        elif op < 9:
            target = live[str(rng.choice(sorted(live)))]
            changed = target.evolve(
                status=str(rng.choice(["active", "archived", "superseded"])),
                content=target.content if rng.integers(0, 2) else f"{target.content} garden",
                tags=("x",) if rng.integers(0, 2) else (),
            )
            store.update([changed])
            live[changed.id] = changed
        else:
            again = live[str(rng.choice(sorted(live)))]
            store.upsert([again], vectors(rng, 1))  # same id: replace


def test_incremental_index_matches_a_fresh_build(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    path = tmp_path / "mem.db"
    store = LocalStore(path)
    store.bind_embedder("toy", DIM)
    live: dict[str, MemoryRecord] = {}
    q = vectors(rng, 1)[0]
    store.search(SearchRequest(user_id="alice", query="tea", vector=q, alpha=0.5))  # build the (empty) index early
    _random_ops(store, live, rng, 300)
    warm = snapshot(store, "alice", q)
    store.close()
    with LocalStore(path) as fresh:
        assert fresh.count("alice") == len(live)
        assert snapshot(fresh, "alice", q) == warm
    assert len(warm) > 20
    # Second round: the index is bulk-loaded from the file, then changed incrementally.
    store = LocalStore(path)
    assert snapshot(store, "alice", q) == warm
    _random_ops(store, live, rng, 300, start=1_000_000)
    warm2 = snapshot(store, "alice", q)
    store.close()
    with LocalStore(path) as fresh:
        assert fresh.count("alice") == len(live)
        assert snapshot(fresh, "alice", q) == warm2
    assert warm2 != warm


def test_keyword_scores_equal_reference_bm25_over_all_statuses() -> None:
    rng = np.random.default_rng(3)
    analyzer = Analyzer()
    records = [make("alice", i, rng, status=["active", "archived", "superseded"][i % 3]) for i in range(60)]
    with LocalStore(":memory:", analyzer=analyzer) as store:
        store.upsert(records, vectors(rng, 60))
        docs = [analyzer.index_tokens(r.content) for r in records]
        for query in ("green tea", "苹果 天气", "the apple of the garden", "tea tea"):
            ref = bm25_scores(analyzer.query_tokens(query), docs)
            hits = store.search(
                SearchRequest(
                    user_id="alice",
                    query=query,
                    vector=None,
                    alpha=0.0,
                    limit=100,
                    filter=MemoryFilter(statuses=("active", "archived", "superseded")),
                )
            )
            got = {h.record.id: h.keyword_score for h in hits}
            assert got == {records[i].id: s for i, s in ref.items()}
            expected_order = sorted(ref, key=lambda i: (-ref[i], records[i].id))
            assert [h.record.id for h in hits] == [records[i].id for i in expected_order]


def test_vector_leg_is_exact_top_k() -> None:
    rng = np.random.default_rng(4)
    n = 2000
    records = [MemoryRecord.create(user_id="u", content=f"memory {i}", timestamp=T0) for i in range(n)]
    m = vectors(rng, n)
    q = rng.normal(size=DIM).astype(np.float32)
    with LocalStore(":memory:") as store:
        store.upsert(records, m)
        hits = store.search(SearchRequest(user_id="u", query=None, vector=q, alpha=1.0, limit=50))
    unit = m / np.linalg.norm(m, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q)
    dist = 1 - unit @ qn
    order = sorted(range(n), key=lambda i: (dist[i], records[i].id))[:50]
    assert [h.record.id for h in hits] == [records[i].id for i in order]
    np.testing.assert_allclose([h.vector_similarity for h in hits], 1 - dist[order], atol=1e-5)


def test_delete_user_leaves_no_trace_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rtbf.db"
    canary = "CANARY-7f3a9c-secret-peanut-allergy"
    rng = np.random.default_rng(5)
    with LocalStore(path) as store:
        victim = [MemoryRecord.create(user_id="victim", content=f"{canary} note {i}", timestamp=T0) for i in range(50)]
        other = [MemoryRecord.create(user_id="other", content=f"ordinary note {i}", timestamp=T0) for i in range(50)]
        store.upsert(victim + other, vectors(rng, 100))
        store.search(SearchRequest(user_id="victim", query="note", vector=None, alpha=0.0))
        assert canary.encode() in _db_bytes(path)
        assert store.delete_user("victim") == 50
        assert canary.encode() not in _db_bytes(path)
        assert canary.lower().encode() not in _db_bytes(path)  # the analysed copy is gone too
        assert store.count("other") == 50
    assert canary.encode() not in _db_bytes(path)


def test_delete_overwrites_the_text(tmp_path: Path) -> None:
    path = tmp_path / "forget.db"
    canary = "CANARY-single-memory-0042"
    with LocalStore(path) as store:
        r = MemoryRecord.create(user_id="u", content=canary, timestamp=T0)
        keep = MemoryRecord.create(user_id="u", content="keep this one", timestamp=T0)
        store.upsert([r, keep], np.eye(2, DIM, dtype=np.float32))
        assert store.delete("u", [r.id]) == 1
        assert canary.encode() not in _db_bytes(path)
        assert store.count("u") == 1


def test_single_forgets_among_many_pages_leave_no_copy(tmp_path: Path) -> None:
    """Secrets spread over many pages (split while they were written), forgotten one at a time, then in bulk."""
    path = tmp_path / "many-pages.db"
    rng = np.random.default_rng(3)
    with LocalStore(path) as store:
        secrets: list[MemoryRecord] = []
        for batch in range(30):
            filler = [
                MemoryRecord.create(user_id="u", content=f"ordinary {batch}-{i} " + "x" * int(n), timestamp=T0)
                for i, n in enumerate(rng.integers(10, 200, size=20))
            ]
            secret = MemoryRecord.create(user_id="u", content=f"Canaryq{batch}w is my locker code", timestamp=T0)
            secrets.append(secret)
            store.upsert([*filler[:10], secret, *filler[10:]], vectors(rng, 21))
        one_by_one, in_bulk = secrets[:15], secrets[15:]
        for secret in one_by_one:
            assert store.delete("u", [secret.id]) == 1
        assert store.delete("u", [s.id for s in in_bulk]) == 15
        left = _db_bytes(path)
        for secret in secrets:
            token = secret.content.split()[0]
            assert token.encode() not in left and token.lower().encode() not in left, token
        assert store.count("u") == 600


def test_delete_user_leaves_no_copy_in_pages_a_rebalance_rebuilt(tmp_path: Path) -> None:
    """Pages shared with another user keep none of the victim's text after the forget.

    ``secure_delete`` zeroes the cells a delete frees, but when the delete empties pages SQLite
    rebalances them with their siblings and rebuilds the survivors' pages without clearing their
    unallocated gap: copies of the victim's rows that were moved (and deleted later in the same
    statement) stayed in the file. Interleaved writes put both users on every page.
    """
    path = tmp_path / "shared-pages.db"
    canary, victim = "CANARY-5e0c41-rebalanced-page", "victim-3b8f07"
    rng = np.random.default_rng(11)
    with LocalStore(path) as store:
        for batch in range(40):
            mine = [
                MemoryRecord.create(user_id=victim, content=f"{canary} {batch}-{i}", timestamp=T0) for i in range(25)
            ]
            theirs = [
                MemoryRecord.create(user_id="other", content=f"ordinary {batch}-{i}", timestamp=T0) for i in range(25)
            ]
            store.upsert(mine, vectors(rng, 25))
            store.upsert(theirs, vectors(rng, 25))
        assert store.delete_user(victim) == 1000
        assert store.count("other") == 1000
        left = _db_bytes(path)
        assert canary.encode() not in left and victim.encode() not in left
    assert canary.encode() not in _db_bytes(path) and victim.encode() not in _db_bytes(path)


def _db_bytes(path: Path) -> bytes:
    data = b""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal")):
        if p.exists():
            data += p.read_bytes()
    return data


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    script = textwrap.dedent(
        f"""
        import sys, time
        import numpy as np
        from datetime import datetime, timezone
        from hybrid_memory.records import MemoryRecord
        from hybrid_memory.stores.local import LocalStore
        store = LocalStore({str(path)!r})
        for i in range(25):
            r = MemoryRecord.create(user_id="u", content=f"durable note {{i}}",
                                    timestamp=datetime(2025, 1, 1, tzinfo=timezone.utc))
            store.upsert([r], np.ones((1, 4), dtype=np.float32) + i)
        print("acknowledged", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "acknowledged"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    with LocalStore(path) as store:
        assert store.count("u") == 25
        hits = store.search(SearchRequest(user_id="u", query="durable", vector=None, alpha=0.0, limit=100))
        assert len(hits) == 25


def test_wal_and_full_sync(tmp_path: Path) -> None:
    with LocalStore(tmp_path / "p.db") as store:
        conn = store._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "threads.db")
    store.bind_embedder("toy", DIM)
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        rng = np.random.default_rng(100 + t)
        try:
            for i in range(40):
                r = MemoryRecord.create(user_id=f"user{t % 2}", content=f"thread {t} note {i} tea", timestamp=T0)
                store.upsert([r], vectors(rng, 1))
                store.search(SearchRequest(user_id=f"user{t % 2}", query="tea", vector=vectors(rng, 1)[0], alpha=0.5))
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert store.count() == 160
    assert store.count("user0") == 80
    hits = store.search(SearchRequest(user_id="user1", query="tea", vector=None, alpha=0.0, limit=200))
    assert len(hits) == 80
    assert all(h.record.user_id == "user1" for h in hits)
    store.close()


def test_changed_analyzer_reindexes(tmp_path: Path) -> None:
    path = tmp_path / "an.db"
    r = MemoryRecord.create(user_id="li", content="我喜欢吃苹果", timestamp=T0)
    with LocalStore(path) as store:
        store.upsert([r], np.ones((1, DIM), dtype=np.float32))
        assert len(store.search(SearchRequest(user_id="li", query="苹", vector=None, alpha=0.0))) == 1
    with LocalStore(path, analyzer=Analyzer(cjk="bigram")) as store:
        # Bigram-only analysis has no single-character tokens any more.
        assert store.search(SearchRequest(user_id="li", query="苹", vector=None, alpha=0.0)) == []
        assert len(store.search(SearchRequest(user_id="li", query="苹果", vector=None, alpha=0.0))) == 1


def test_file_from_before_search_context_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    old = MemoryRecord.create(user_id="li", content="green tea in the garden", timestamp=T0)
    with LocalStore(path) as store:
        store.upsert([old], np.ones((1, DIM), dtype=np.float32))
    conn = sqlite3.connect(path)  # the layout written before memories had a search context
    conn.execute("ALTER TABLE memories DROP COLUMN context")
    conn.commit()
    conn.close()
    new = MemoryRecord.create(user_id="li", content="black coffee", context="what about the budget", timestamp=T0)
    with LocalStore(path) as store:
        assert store.get("li", [old.id]) == [old]
        store.upsert([new], np.ones((1, DIM), dtype=np.float32))
        hits = store.search(SearchRequest(user_id="li", query="budget", vector=None, alpha=0.0))
        assert [h.record for h in hits] == [new]
    with LocalStore(path) as store:  # and it stays readable
        assert store.get("li", [new.id])[0].context == "what about the budget"


def test_changed_analyzer_reindexes_the_context_too(tmp_path: Path) -> None:
    path = tmp_path / "ctx.db"
    r = MemoryRecord.create(user_id="li", content="我喜欢吃苹果", context="你喜欢什么水果", timestamp=T0)
    with LocalStore(path) as store:
        store.upsert([r], np.ones((1, DIM), dtype=np.float32))
    with LocalStore(path, analyzer=Analyzer(cjk="bigram")) as store:
        hits = store.search(SearchRequest(user_id="li", query="水果", vector=None, alpha=0.0))
        assert [h.record.id for h in hits] == [r.id]


def test_schema_version_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    LocalStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaError):
        LocalStore(path)


def test_unopenable_path(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        LocalStore(tmp_path)  # a directory, not a file


def test_sees_writes_of_another_connection(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    a = LocalStore(path)
    b = LocalStore(path)
    try:
        first = MemoryRecord.create(user_id="u", content="first tea note", timestamp=T0)
        a.upsert([first], np.ones((1, DIM), dtype=np.float32))
        assert len(a.search(SearchRequest(user_id="u", query="tea", vector=None, alpha=0.0))) == 1  # index built
        second = MemoryRecord.create(user_id="u", content="second tea note", timestamp=T0)
        b.upsert([second], np.ones((1, DIM), dtype=np.float32))
        hits = a.search(SearchRequest(user_id="u", query="tea", vector=None, alpha=0.0))
        assert {h.record.id for h in hits} == {first.id, second.id}
        assert b.delete_user("u") == 2
        assert a.search(SearchRequest(user_id="u", query="tea", vector=None, alpha=0.0)) == []
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("deletes", [1, 3])
def test_a_hit_another_connection_deletes_during_the_search_is_not_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deletes: int
) -> None:
    path = tmp_path / "shared.db"
    a = LocalStore(path)
    b = LocalStore(path)
    try:
        notes = [MemoryRecord.create(user_id="u", content=f"tea note {'x' * i}", timestamp=T0) for i in range(6)]
        a.upsert(notes, np.ones((6, DIM), dtype=np.float32))
        request = SearchRequest(user_id="u", query="tea", vector=None, alpha=0.0, limit=4)
        first = [h.record.id for h in a.search(request)]  # the index is built and current
        assert len(first) == 4
        fetch = a._fetch
        deleted: list[str] = []

        def racing_fetch(user_id: str, ids: list[str]) -> dict[str, MemoryRecord]:
            # another process deletes the best hit after this one checked its index, before it reads the rows
            if len(deleted) < deletes:
                assert b.delete("u", [ids[0]]) == 1
                deleted.append(ids[0])
            return fetch(user_id, ids)

        monkeypatch.setattr(a, "_fetch", racing_fetch)
        hits = [h.record.id for h in a.search(request)]
        assert len(deleted) == deletes
        assert not set(hits) & set(deleted)
        # searched again on the current index: still the best 4 of those left; the last attempt leaves the
        # hit deleted during it out instead of searching a fourth time
        left = [n.id for n in notes if n.id not in deleted]
        assert len(hits) == (4 if deletes == 1 else 3) and set(hits) <= set(left)
    finally:
        a.close()
        b.close()


def test_a_rewrite_another_writer_blocks_is_recorded_and_done_by_the_next_finish(tmp_path: Path) -> None:
    path = tmp_path / "rewrite.db"
    canary = "CANARY-2c77e1-blocked-rewrite"
    with LocalStore(path) as store:
        rng = np.random.default_rng(3)
        for batch in range(20):
            mine = [MemoryRecord.create(user_id="v", content=f"{canary} {batch}-{i}", timestamp=T0) for i in range(25)]
            keep = [MemoryRecord.create(user_id="k", content=f"kept {batch}-{i}", timestamp=T0) for i in range(25)]
            store.upsert(mine, vectors(rng, 25))
            store.upsert(keep, vectors(rng, 25))
    conn = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("DELETE FROM memories WHERE user_id = 'v'")
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file: no rewrite now
        assert rewrite_file(conn, 0.0) is False
        other.execute("ROLLBACK")
        record_pending_wipe(conn, rewrite=True)
        record_pending_wipe(conn)  # a later plain forget keeps the rewrite pending
        assert (wipe_marker(conn) or "").startswith("rewrite ")
        assert finish_wal_wipe(conn, 0.0) is True
        assert wipe_marker(conn) is None
        assert conn.execute("SELECT COUNT(*) FROM memories WHERE user_id = 'k'").fetchone()[0] == 500
    finally:
        other.close()
        conn.close()
    assert canary.encode() not in _db_bytes(path)


def test_a_store_opened_before_another_process_bound_its_embedder_sees_its_memories(tmp_path: Path) -> None:
    from hybrid_memory.testing.store_contract import DIM, rec, seed, vec

    late = LocalStore(tmp_path / "m.db")  # a worker that opened the empty file first
    first = LocalStore(tmp_path / "m.db")
    seed(first, [rec("u", "green tea every morning")], [vec(1)])
    try:
        assert late.dimension == DIM  # was None: the first operation did not look at the file again
        hits = late.search(SearchRequest(user_id="u", query="tea", vector=vec(1), alpha=0.5, limit=5))
        assert [h.record.content for h in hits] == ["green tea every morning"]
        np.testing.assert_allclose(late.mean_vector("u"), vec(1), atol=1e-6)
    finally:
        late.close()
        first.close()
