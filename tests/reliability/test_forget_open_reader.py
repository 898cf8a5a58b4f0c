"""Forget is honest about open readers (issue 15, attack 3).

A reader in another process holding a read transaction on the same SQLite file pins the WAL:
``PRAGMA wal_checkpoint(TRUNCATE)`` cannot finish, so the deleted text stays on disk until that
reader ends. These tests start a real reader process (``BEGIN; SELECT ...`` left open) and check
that forget neither stalls for the 5 s busy timeout nor claims the text is gone: it reports a
pending wipe (``LocalStore.wipe_pending``, ``HybridMemory.forget_user(...).wipe_pending``, the
CLI's exit code 3), persists the fact in the file, and the next write or open after the reader
left finishes the wipe — checked by scanning the bytes of the database, ``-wal`` and ``-shm``.
The same holds for the other SQLite files a forget wipes: the trace file beside the store and a
``WeaviateStore``'s dead-letter queue.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.cli import main
from hybrid_memory.observe.trace import TraceStore
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.weaviate.dead_letters import _DeadLetterQueue, _Failure, _Pending
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
CANARY = "CANARY-5d1e-open-reader-secret"
DIM = 8
#: Below the 5 s busy timeout the old code waited for on every such forget (so the old code fails), and
#: about 8x the 0.5 s wipe timeout the new code gives up after (so a loaded machine does not fail it).
QUICK_S = 4.0

_READER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN")
    print(conn.execute(f"SELECT count(*) FROM {sys.argv[2]}").fetchone()[0], flush=True)
    sys.stdin.readline()                 # "end": finish the read transaction
    conn.execute("COMMIT")
    print("ended", flush=True)
    sys.stdin.readline()                 # "exit": close the connection
    conn.close()
    """
)


class Reader:
    """A process holding ``BEGIN; SELECT count(*) FROM <table>`` open on ``path``."""

    def __init__(self, path: Path, table: str = "memories") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _READER, str(path), table],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.rows = int(self.proc.stdout.readline())

    def end_transaction(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("end\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ended"

    def exit(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("end\nexit\n")
                self.proc.stdin.close()
            except BrokenPipeError:  # pragma: no cover - already gone
                pass
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def reader_factory() -> Iterator[list[Reader]]:
    started: list[Reader] = []
    yield started
    for r in started:
        r.exit()


def on_disk(path: Path, text: str = CANARY) -> list[str]:
    """Names of the SQLite files (db, -wal, -shm, -journal) that hold ``text``."""
    hits = []
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        if p.exists() and text.encode() in p.read_bytes():
            hits.append(p.name)
    return hits


def fill(store: LocalStore) -> None:
    rng = np.random.default_rng(7)
    victim = [MemoryRecord.create(user_id="victim", content=f"{CANARY} note {i}", timestamp=T0) for i in range(20)]
    other = [MemoryRecord.create(user_id="other", content=f"ordinary note {i}", timestamp=T0) for i in range(20)]
    store.upsert(victim + other, rng.normal(size=(40, DIM)).astype(np.float32))


def vec() -> np.ndarray:
    return np.ones((1, DIM), dtype=np.float32)


def test_forget_with_a_reader_in_another_process_is_pending_not_stalled_then_finished_by_the_next_write(
    tmp_path: Path, reader_factory: list[Reader]
) -> None:
    path = tmp_path / "m.db"
    store = LocalStore(path)
    try:
        fill(store)
        assert on_disk(path)
        reader = Reader(path)
        reader_factory.append(reader)
        assert reader.rows == 40

        t = time.monotonic()
        assert store.delete_user("victim") == 20  # the count, as before
        elapsed = time.monotonic() - t
        assert elapsed < QUICK_S, f"forget stalled {elapsed:.2f} s behind the reader"
        assert store.wipe_pending is True  # honest: the text is still on disk
        assert on_disk(path), "the reader pins an old copy; if this fails the test proves nothing"
        with LocalStore(path) as other_process_view:  # the fact is in the file, not only in this object
            assert other_process_view.wipe_pending is True
        assert store.finish_wipe(timeout=0.2) is False  # still pinned: bounded wait, honest answer

        reader.end_transaction()
        store.upsert([MemoryRecord.create(user_id="other", content="a later write", timestamp=T0)], vec())
        assert store.wipe_pending is False
        assert on_disk(path) == []
        assert on_disk(path, CANARY.lower()) == []  # the analysed copy too
        assert store.count("victim") == 0 and store.count("other") == 21
    finally:
        store.close()
    assert on_disk(path) == []


def test_a_pending_wipe_is_finished_by_the_next_open(tmp_path: Path, reader_factory: list[Reader]) -> None:
    path = tmp_path / "m.db"
    with LocalStore(path) as store:
        fill(store)
        reader = Reader(path)
        reader_factory.append(reader)
        t = time.monotonic()
        store.delete("victim", [MemoryRecord.create(user_id="victim", content=f"{CANARY} note 3").id])
        assert time.monotonic() - t < QUICK_S
        assert store.wipe_pending is True
        t = time.monotonic()
    assert time.monotonic() - t < QUICK_S  # close does not stall behind the reader either
    assert on_disk(path, f"{CANARY} note 3")
    # The reader ends its transaction but keeps its connection, so SQLite's own
    # last-connection checkpoint cannot be what removes the text.
    reader.end_transaction()
    assert on_disk(path, f"{CANARY} note 3")
    with LocalStore(path) as store:
        assert store.wipe_pending is False
        assert on_disk(path, f"{CANARY} note 3") == []
        assert store.count("victim") == 19


def test_no_reader_no_wait_no_pending(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with LocalStore(path) as store:
        fill(store)
        t = time.monotonic()
        assert store.delete_user("victim") == 20
        assert time.monotonic() - t < QUICK_S
        assert store.wipe_pending is False
        assert on_disk(path) == []


def test_facade_and_cli_tell_the_caller_the_wipe_is_pending(
    tmp_path: Path, reader_factory: list[Reader], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.db"
    mem = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(), clock=lambda: T0)
    try:
        mem.remember("victim", f"{CANARY} I am allergic to peanuts", importance=0.9, timestamp=T0)
        mem.remember("bob", f"{CANARY}-bob I like tea", importance=0.9, timestamp=T0)
        mem.remember("carol", "I like coffee", importance=0.9, timestamp=T0)
        reader = Reader(path)
        reader_factory.append(reader)
        t = time.monotonic()
        n = mem.forget_user("victim")
        assert time.monotonic() - t < QUICK_S
        assert n == 1 and isinstance(n, int)  # still the count
        assert n.wipe_pending is True and mem.wipe_pending() is True

        # The CLI in the same situation: exit code 3 and a message that says the text is still on disk.
        code = main(["forget", "--store", str(path), "--user", "bob", "--yes"])
        out, err = capsys.readouterr()
        assert code == 3, (out, err)
        assert "forgot user 'bob': 1 memories" in out
        assert "not yet wiped" in err and "finish" in err
        assert main(["forget", "--store", str(path), "--finish-wipe", "--wait", "0.1"]) == 3
        capsys.readouterr()

        reader.end_transaction()
        assert main(["forget", "--store", str(path), "--finish-wipe", "--wait", "0"]) == 0
        assert "no forgotten text left on disk" in capsys.readouterr().out
        assert mem.finish_wipe() is True
        assert mem.wipe_pending() is False
        assert on_disk(path) == []
        assert main(["forget", "--store", str(path), "--user", "carol", "--yes"]) == 0
        assert "not yet wiped" not in capsys.readouterr().err
    finally:
        mem.close()


def test_a_reader_of_the_trace_file_makes_the_forget_pending_not_stalled_then_the_next_step_finishes_it(
    tmp_path: Path, reader_factory: list[Reader]
) -> None:
    path = tmp_path / "m.db"
    traces = Path(f"{path}.traces.sqlite")
    mem = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(), clock=lambda: T0, trace=True)
    try:
        mem.remember("victim", f"{CANARY} I am allergic to peanuts", importance=0.9, timestamp=T0)
        mem.recall(f"{CANARY} peanuts", user_id="victim")
        assert on_disk(traces)
        reader = Reader(traces, "trace_steps")  # pins the trace file only; the store's file is free
        reader_factory.append(reader)
        assert reader.rows == 2

        t = time.monotonic()
        n = mem.forget_user("victim")
        assert time.monotonic() - t < QUICK_S  # not the 5 s busy timeout
        assert n == 1 and n.wipe_pending is True and mem.wipe_pending() is True
        assert on_disk(path) == []  # the store itself was wiped
        assert on_disk(traces), "the reader pins an old copy; if this fails the test proves nothing"
        assert mem.replay(None, user_id="victim") == []  # deleted, only not yet wiped
        other_process_view = TraceStore(traces)  # the fact is in the trace file itself
        try:
            assert other_process_view.wipe_pending is True
        finally:
            other_process_view.close()
        assert mem.finish_wipe(timeout=0.2) is False

        reader.end_transaction()
        mem.recall("tea", user_id="other")  # the next trace step's write finishes the wipe
        assert mem.wipe_pending() is False
        assert on_disk(traces) == []
    finally:
        mem.close()
    assert on_disk(traces) == [] and on_disk(path) == []


def test_a_pending_trace_wipe_is_finished_by_the_next_open(tmp_path: Path, reader_factory: list[Reader]) -> None:
    traces = tmp_path / "t.sqlite"
    ts = TraceStore(traces)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: T0, trace=ts)
    mem.remember("victim", f"{CANARY} my PIN is the year I was born", timestamp=T0)
    reader = Reader(traces, "trace_steps")
    reader_factory.append(reader)
    assert mem.forget_user("victim").wipe_pending is True
    mem.close()
    t = time.monotonic()
    ts.close()
    assert time.monotonic() - t < QUICK_S  # closing does not stall behind the reader either
    assert on_disk(traces)
    reader.end_transaction()  # keeps its connection: SQLite's last-connection checkpoint cannot be what wipes
    assert on_disk(traces)
    ts = TraceStore(traces)
    try:
        assert ts.wipe_pending is False
        assert on_disk(traces) == []
        assert ts.count() == 0
    finally:
        ts.close()


def test_a_reader_of_the_dead_letter_file_makes_the_forget_pending_then_the_next_write_finishes_it(
    tmp_path: Path, reader_factory: list[Reader]
) -> None:
    path = tmp_path / "dead.sqlite"

    def failure(user: str, content: str) -> _Failure:
        rec = MemoryRecord.create(user_id=user, content=content, timestamp=T0)
        return _Failure(_Pending(rec, vec()[0], rec.id, user), "server unreachable", transient=True)

    dlq = _DeadLetterQueue(path)
    try:
        dlq.add([failure("victim", f"{CANARY} queued {i}") for i in range(5)] + [failure("other", "kept")])
        reader = Reader(path, "dead_letters")
        reader_factory.append(reader)
        assert reader.rows == 6
        t = time.monotonic()
        assert dlq.remove_user("victim") == 5
        assert time.monotonic() - t < QUICK_S
        assert dlq.wipe_pending() is True and on_disk(path)
        assert dlq.finish_wipe(0.1) is False

        reader.end_transaction()
        dlq.add([failure("other", "a later failure")])
        assert dlq.wipe_pending() is False
        assert on_disk(path) == []
        assert sorted(x.record.content for x in dlq.pending()) == ["a later failure", "kept"]
    finally:
        dlq.close()
