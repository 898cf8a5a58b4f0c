"""SQLite files open while another process writes them (workers started together on a new file).

The memory store, the trace file and the Weaviate store's dead-letter queue switch their file to
WAL when they open it. While another connection holds the file's write lock (another process
creating its tables), SQLite answers that switch with "database is locked" at once instead of
waiting; four workers opening one new ``LocalStore`` file at once failed that way
(``tests/contract/test_embedder_binding_race.py``). Here a plain connection holds the lock of a new
file and lets go a moment later, from a timer thread: every opener waits for it and opens.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory.observe.trace import TraceStore
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.stores.local.connection import enable_wal
from hybrid_memory.stores.weaviate.dead_letters import _DeadLetterQueue


def _dead_letters(path: Path) -> Any:
    queue = _DeadLetterQueue(path)
    assert queue._open(create=True) is not None
    return queue


OPENERS: dict[str, Callable[[Path], Any]] = {
    "memory store": LocalStore,
    "trace file": TraceStore,
    "dead-letter queue": _dead_letters,
}


@pytest.mark.parametrize("opener", list(OPENERS))
def test_a_new_file_opens_while_another_connection_holds_its_write_lock(tmp_path: Path, opener: str) -> None:
    path = tmp_path / "new.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE another_process (a)")
    plain = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):  # what SQLite answers at once
        plain.execute("PRAGMA journal_mode=WAL")
    plain.close()
    timer = threading.Timer(0.2, lambda: other.execute("COMMIT"))
    timer.start()
    try:
        handle = OPENERS[opener](path)
    finally:
        timer.join()
        other.close()
    try:
        check = sqlite3.connect(path)
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert check.execute("SELECT count(*) FROM another_process").fetchone()[0] == 0  # its table is kept
        check.close()
    finally:
        handle.close()


def test_a_file_still_locked_after_the_timeout_raises_the_lock_error(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE another_process (a)")
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.0)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            enable_wal(conn, str(path), timeout_ms=50)
    finally:
        conn.close()
        other.close()
