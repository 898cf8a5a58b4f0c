"""LocalStore snapshots: a cold process loads a user's index from one row, never a stale one.

A snapshot is the user's partition as contiguous arrays (table ``snapshots``), saved when the
partition leaves the process (budget eviction, close) and valid only at the user's change counter
it was saved at. These tests check that a loaded partition ranks exactly like one rebuilt from the
rows (also after writes to it), that every write, a write of another process and a forget make the
snapshot go, that a crash-like stale row is not served, that the vectors (table ``snapshot_vectors``,
in parts) load exactly or not at all, and that schema-1 and schema-2 files are migrated (a schema-2
snapshot, vectors inside its row, still loads and is saved again in the new form).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import SearchRequest, user_hash
from hybrid_memory.stores.budget import CacheBudget
from hybrid_memory.stores.local import SCHEMA_VERSION, LocalStore
from hybrid_memory.stores.local import cache as cache_module
from hybrid_memory.stores.local.partition import _Partition
from tests.unit.test_local_search_fast_paths import FILTERS, corpus, reference


def _snapshots(path: Path) -> list[tuple[str, int, int]]:
    conn = sqlite3.connect(path)
    try:
        return [(str(h), int(v), int(n)) for h, v, n in conn.execute("SELECT user_hash, version, rows FROM snapshots")]
    finally:
        conn.close()


def _vector_parts(path: Path) -> list[tuple[int, int, int]]:
    conn = sqlite3.connect(path)
    try:
        return [
            (int(p), int(v), int(n))
            for p, v, n in conn.execute("SELECT part, version, length(vectors) FROM snapshot_vectors ORDER BY part")
        ]
    finally:
        conn.close()


def _drop_snapshot_vectors(conn: sqlite3.Connection) -> None:
    """Undo schema 3 (what schema 2 added stays)."""
    conn.execute("DROP TABLE snapshot_vectors")
    conn.execute("DROP TRIGGER snapshot_vectors_stale_on_update")
    conn.execute("DROP TRIGGER snapshot_vectors_stale_on_insert")


def _requests(rng: np.random.Generator, vectors: np.ndarray) -> list[SearchRequest]:
    out = []
    for flt in FILTERS:
        for alpha in (0.0, 0.5, 1.0):
            q = vectors[int(rng.integers(0, len(vectors)))] + rng.normal(scale=0.01, size=16).astype(np.float32)
            out.append(
                SearchRequest(user_id="u", query="green tea likes 3", vector=q, alpha=alpha, limit=25, filter=flt)
            )
    return out


def _ranked(store: LocalStore, req: SearchRequest) -> list[tuple[str, float, float | None, float | None]]:
    return [(h.record.id, h.score, h.keyword_score, h.vector_similarity) for h in store.search(req)]


def test_snapshot_round_trip_ranks_exactly_like_the_rows_also_after_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    recs, vectors = corpus(rng, 240)
    path = tmp_path / "snap.db"
    with LocalStore(path) as store:
        store.upsert(recs[:200], vectors[:200])
        store.search(SearchRequest(user_id="u", query="tea", vector=vectors[0], alpha=0.5))  # partition cached
    [(hashed, version, rows)] = _snapshots(path)  # saved on close
    assert (hashed, rows) == (user_hash("u"), 200)
    reqs = _requests(rng, vectors)
    with LocalStore(path) as store:
        part = store._partition("u")
        assert part.saved == part.version == version and not part.matrix.flags.writeable  # loaded, not rebuilt
        for req in reqs:
            assert [h[:3] for h in _ranked(store, req)] == reference(store, recs[:200], vectors[:200], req)
        # writes to a loaded partition: new rows, a replaced row, removed rows, a changed text
        store.upsert(recs[200:], vectors[200:])
        store.upsert([recs[5]], vectors[6:7])
        store.delete("u", [recs[0].id, recs[199].id, recs[17].id])
        changed = recs[30].model_copy(update={"content": "black coffee evening 9", "tags": ("home",)})
        store.update([changed])
        assert _snapshots(path) == []  # the first write dropped it in its transaction
        after = [_ranked(store, req) for req in reqs]
    with LocalStore(path, budget=CacheBudget(0)) as fresh:  # rebuilt from the rows: nothing cached
        for req, expected in zip(reqs, after, strict=True):
            assert _ranked(fresh, req) == expected
            fresh._drop_partition("u")
    with LocalStore(path) as store:  # saved again on close: loaded, same answers
        assert store._partition("u").saved == store._partition("u").version
        for req, expected in zip(reqs, after, strict=True):
            assert _ranked(store, req) == expected


def test_partition_snapshot_equals_bulk_load_field_by_field() -> None:
    rng = np.random.default_rng(5)
    recs, vectors = corpus(rng, 90)
    with LocalStore(":memory:") as store:
        store.upsert(recs, vectors)
        built = store._partition("u")
        loaded = _Partition.from_snapshot(built.snapshot())
    n = built.n
    assert loaded.n == n and loaded.ids == built.ids and loaded.row_of == built.row_of
    for name in ("matrix", "dl", "status", "category", "created", "session"):
        assert np.array_equal(getattr(loaded, name), getattr(built, name)[:n]), name
    assert loaded.session_codes == built.session_codes and loaded.tags == built.tags
    assert loaded.tag_rows == built.tag_rows
    assert (loaded.entries, loaded.total_tokens, loaded.docs_with_tokens) == (
        built.entries,
        built.total_tokens,
        built.docs_with_tokens,
    )
    assert loaded.term_counts == built.term_counts  # derived from the postings
    for term in {t for c in built.term_counts for t in c} | {"no-such-term"}:
        a, b = loaded._posting_arrays(term), built._posting_arrays(term)
        assert (a is None) == (b is None), term
        if a is not None and b is not None:
            assert dict(zip(a[0].tolist(), a[1].tolist(), strict=True)) == dict(
                zip(b[0].tolist(), b[1].tolist(), strict=True)
            ), term


def test_a_write_of_another_process_drops_the_snapshot_and_the_reader_rebuilds(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    recs, vectors = corpus(rng, 60)
    path = tmp_path / "two.db"
    with LocalStore(path) as store:
        store.upsert(recs[:50], vectors[:50])
        store._partition("u")
    assert len(_snapshots(path)) == 1
    reader, writer = LocalStore(path), LocalStore(path)
    try:
        reader._partition("u")  # loaded from the snapshot
        writer.upsert(recs[50:], vectors[50:])
        assert _snapshots(path) == []
        hits = reader.search(SearchRequest(user_id="u", query=recs[55].content, vector=None, alpha=0.0, limit=60))
        assert recs[55].id in {h.record.id for h in hits}
        assert reader._partition("u").n == 60
    finally:
        reader.close()
        writer.close()


def test_a_stale_snapshot_is_never_served(tmp_path: Path) -> None:
    """A snapshot row whose counter is behind (as after a crash between two lines) is ignored."""
    rng = np.random.default_rng(9)
    recs, vectors = corpus(rng, 40)
    path = tmp_path / "stale.db"
    with LocalStore(path) as store:
        store.upsert(recs[:30], vectors[:30])
        store._partition("u")
    conn = sqlite3.connect(path)
    saved = conn.execute("SELECT * FROM snapshots").fetchone()
    conn.close()
    with LocalStore(path) as store:
        store.upsert(recs[30:], vectors[30:])
    conn = sqlite3.connect(path)
    conn.execute(f"INSERT INTO snapshots VALUES ({', '.join('?' * len(saved))})", saved)  # the old one, back
    conn.commit()
    conn.close()
    with LocalStore(path, budget=CacheBudget(0)) as store:
        part = store._partition("u")
        assert part.n == 40 and part.saved == -1 and part.matrix.flags.writeable  # rebuilt from the rows


def test_forget_deletes_the_snapshot_and_eviction_saves_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    recs, vectors = corpus(rng, 30)
    others = [r.model_copy(update={"user_id": "w"}) for r in recs]
    path = tmp_path / "forget.db"
    with LocalStore(path, budget=CacheBudget(1)) as store:  # one partition at a time
        store.upsert(recs, vectors)
        store._partition("u")
        store._partition("w")  # evicts u, whose snapshot is saved
        assert [h for h, _, _ in _snapshots(path)] == [user_hash("u")]
        assert len(_vector_parts(path)) == 1
        store.upsert(others, vectors)
        assert store.delete_user("u") == 30
        assert _snapshots(path) == [] and _vector_parts(path) == []  # w written (stale), u forgotten
    assert [h for h, _, _ in _snapshots(path)] == [user_hash("w")]
    conn = sqlite3.connect(path)
    assert [r[0] for r in conn.execute("SELECT user_hash FROM snapshot_vectors")] == [user_hash("w")]
    conn.close()


def test_a_schema_1_file_is_migrated_in_place(tmp_path: Path) -> None:
    rng = np.random.default_rng(17)
    recs, vectors = corpus(rng, 20)
    path = tmp_path / "v1.db"
    with LocalStore(path) as store:
        store.upsert(recs, vectors)
    conn = sqlite3.connect(path)  # what schema 1 looked like: no snapshot tables, no triggers
    _drop_snapshot_vectors(conn)
    conn.execute("DROP TABLE snapshots")
    conn.execute("DROP TRIGGER snapshots_stale_on_update")
    conn.execute("DROP TRIGGER snapshots_stale_on_insert")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.commit()
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'").fetchone()[0] == 0
    conn.close()
    with LocalStore(path) as store:
        assert store.count("u") == 20
        req = SearchRequest(user_id="u", query="green tea", vector=vectors[0], alpha=0.5)
        assert [h[:3] for h in _ranked(store, req)] == reference(store, recs, vectors, req)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION == "3"
    conn.close()
    assert len(_snapshots(path)) == 1


@pytest.mark.parametrize("memory", [True, False])
def test_nothing_is_saved_for_an_empty_user_or_an_in_memory_store(tmp_path: Path, memory: bool) -> None:
    path = ":memory:" if memory else str(tmp_path / "empty.db")
    store = LocalStore(path)
    store.upsert([MemoryRecord.create(user_id="x", content="green tea")], np.ones((1, 4), dtype=np.float32))
    store._partition("nobody")
    store._partition("x")
    saved = store._conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
    store._save_all()
    assert store._conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] == saved + (0 if memory else 1)
    store.close()


def test_a_schema_2_file_serves_its_snapshot_and_saves_it_again_in_the_new_form(tmp_path: Path) -> None:
    rng = np.random.default_rng(19)
    recs, vectors = corpus(rng, 120)
    path = tmp_path / "v2.db"
    with LocalStore(path) as store:
        store.upsert(recs, vectors)
        built = store._partition("u")
        old_vectors = bytes(built.snapshot().vectors)
        version = built.version
    conn = sqlite3.connect(path)  # schema 2: the vectors inside the snapshots row, no snapshot_vectors
    conn.execute("UPDATE snapshots SET vectors = ?", (old_vectors,))
    _drop_snapshot_vectors(conn)
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    reqs = _requests(rng, vectors)
    with LocalStore(path) as store:
        part = store._partition("u")
        assert not part.matrix.flags.writeable and part.version == version  # loaded from the old row
        assert part.saved == -1  # to be saved again in the new form
        assert _vector_parts(path) == []
        expected = [_ranked(store, req) for req in reqs]
        for req, ranked in zip(reqs, expected, strict=True):
            assert [h[:3] for h in ranked] == reference(store, recs, vectors, req)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "3"
    assert conn.execute("SELECT version, length(vectors) FROM snapshots").fetchall() == [(version, 0)]
    conn.close()
    assert [(p, v) for p, v, _ in _vector_parts(path)] == [(0, version)]
    with LocalStore(path) as store:
        part = store._partition("u")
        assert part.saved == part.version == version and not part.matrix.flags.writeable
        assert np.array_equal(part.matrix, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        assert [_ranked(store, req) for req in reqs] == expected


@pytest.mark.parametrize("large", [0, 1 << 23], ids=["mapped", "unmapped"])
def test_vectors_saved_in_parts_load_exactly_and_a_missing_part_means_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large: int
) -> None:
    rng = np.random.default_rng(23)
    recs, vectors = corpus(rng, 100)
    path = tmp_path / "parts.db"
    monkeypatch.setattr(cache_module, "_PART_BYTES", 7 * 16 * 4)  # 7 rows of 16 float32 per part
    monkeypatch.setattr(cache_module, "_LARGE", large)  # 0: read through the file map, as large users are
    with LocalStore(path) as store:
        store.upsert(recs, vectors)
        built = store._partition("u").matrix.copy()
    parts = _vector_parts(path)
    assert [p for p, _, _ in parts] == list(range(15)) and [n for _, _, n in parts] == [7 * 64] * 14 + [2 * 64]
    reqs = _requests(rng, vectors)
    with LocalStore(path) as store:
        part = store._partition("u")
        assert part.saved == part.version and np.array_equal(part.matrix, built[:100])
        assert store._conn.execute("PRAGMA mmap_size").fetchone()[0] == 0  # the file map is gone again
        expected = [_ranked(store, req) for req in reqs]
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM snapshot_vectors WHERE part = 3")
    conn.commit()
    conn.close()
    with LocalStore(path, budget=CacheBudget(0)) as store:
        part = store._partition("u")
        assert part.saved == -1 and part.matrix.flags.writeable  # rebuilt from the rows
        assert [_ranked(store, req) for req in reqs] == expected


def test_a_forgotten_users_snapshot_vectors_leave_no_bytes_in_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(29)
    recs, vectors = corpus(rng, 50)
    path = tmp_path / "gone.db"
    with LocalStore(path) as store:
        store.upsert(recs, vectors)
        unit = store._partition("u").matrix[:50].copy()
    assert len(_vector_parts(path)) == 1
    marks = [unit[i].tobytes()[:32] for i in range(0, 50, 7)]
    assert all(m in path.read_bytes() for m in marks)  # in the rows and the snapshot
    with LocalStore(path) as store:
        store._partition("u")
        assert store.delete_user("u") == 50
    data = b"".join(p.read_bytes() for p in tmp_path.glob("gone.db*"))
    assert not any(m in data for m in marks)  # zeroed (secure_delete), the WAL truncated
