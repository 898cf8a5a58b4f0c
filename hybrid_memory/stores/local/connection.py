"""The SQLite connection of the local store: transactions, ``meta`` access and the wipe after a forget.

Right to be forgotten: the connection runs with ``PRAGMA secure_delete=ON`` and a forget then
checkpoints and truncates the WAL (:meth:`_Connection._forget_traces`), so no copy of the deleted
text stays in the file or its WAL. A reader of another connection that pins the WAL makes the
wipe *pending* (recorded in ``meta``); every later commit (:meth:`_Connection._tx`), open or
close of the file tries to finish it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from hybrid_memory.errors import StoreError, StoreUnavailableError
from hybrid_memory.stores.local.schema import _BUSY_TIMEOUT_MS, _read_meta, _write_meta

#: ``meta`` key present while a forget's text may still be on disk (a reader pinned the WAL).
_WIPE_KEY = "wipe_pending"
#: Default seconds a forget waits for readers that pin the WAL before reporting a pending wipe.
DEFAULT_WIPE_TIMEOUT = 0.5
#: ``PRAGMA mmap_size`` while :meth:`_Connection._mapped` reads (SQLite caps it: 2 GB by default).
_MMAP_BYTES = 1 << 40


class _Connection:
    """The SQLite connection of a :class:`~hybrid_memory.stores.local.LocalStore`: transactions and wipes.

    Attributes are set by ``LocalStore.__init__``.
    """

    _conn: sqlite3.Connection
    _lock: threading.RLock
    _memory: bool
    _path: str
    _closed: bool
    _wipe_timeout: float
    _wipe_pending: bool
    _wiping: bool

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("the LocalStore is closed")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        c = self._conn
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot start a transaction: {exc}") from exc
        try:
            yield c
        except BaseException:
            self._rollback()
            raise
        try:
            c.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise StoreError(f"commit failed: {exc}") from exc
        if self._wipe_pending and not self._wiping:
            self._wipe(0.0)  # the next write after a reader left finishes a pending forget

    @contextmanager
    def _mapped(self, enabled: bool = True) -> Iterator[None]:
        """Reads inside go through a memory map of the file (when ``enabled``), then the map is dropped.

        A large value is a chain of overflow pages; without a map SQLite reads each page with
        its own ``pread`` (37,500 calls for the 150 MB of a 100k-memory snapshot's vectors), with
        one it copies them out of the map. Pages in the WAL are still read from the WAL. The map
        is set up only around a read that owns its transaction (no statement of a caller holds a
        mapped page while it changes) and dropped afterwards (``mmap_size`` 0), so the file's
        pages do not stay in this process's RSS, which the memory budget is meant to bound.
        """
        c = self._conn
        if not enabled or self._memory or c.in_transaction:
            yield
            return
        c.execute(f"PRAGMA mmap_size={_MMAP_BYTES}")
        try:
            yield
        finally:
            c.execute("PRAGMA mmap_size=0")

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _meta(self, key: str) -> str | None:
        return _read_meta(self._conn, key)

    def _set_meta(self, key: str, value: str) -> None:
        _write_meta(self._conn, key, value)

    def _forget_traces(self) -> None:
        """Move the WAL into the file and truncate it, so zeroed pages replace deleted text.

        Waits at most ``wipe_timeout`` for readers of other connections that pin the WAL; if one
        still does, records a pending wipe in ``meta`` (finished by the next write or open).
        """
        if self._memory or self._wipe(self._wipe_timeout):
            return
        token = f"{datetime.now(timezone.utc).isoformat()} pid {os.getpid()}"
        self._wiping = True
        try:
            with self._tx():
                self._set_meta(_WIPE_KEY, token)
        finally:
            self._wiping = False
        self._wipe_pending = True

    def _checkpoint(self, timeout: float) -> bool:
        """``wal_checkpoint(TRUNCATE)`` retried for up to ``timeout`` s; True when the WAL is empty.

        The checkpoint returns ``(busy, log, checkpointed)``: ``(0, 0, 0)`` means every frame was
        copied into the file and the WAL truncated. ``busy`` means a reader (or a writer) of
        another connection holds it back; each attempt waits at most 50 ms for it (a short busy
        timeout for this call only, instead of the connection's 5 s).
        """
        c = self._conn
        deadline = time.monotonic() + timeout
        c.execute(f"PRAGMA busy_timeout={max(0, min(50, int(timeout * 1000)))}")
        try:
            while True:
                busy, log, _done = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if busy == 0 and log == 0:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(0.02, left))
        finally:
            c.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")

    def _wipe(self, timeout: float) -> bool:
        """Checkpoint and truncate the WAL; on success also clear a recorded pending wipe.

        Returns:
            True when no copy of deleted text is left in the WAL or behind it.
        """
        marker = self._meta(_WIPE_KEY)
        if not self._checkpoint(timeout):
            return False
        if marker is not None:
            self._wiping = True
            try:
                with self._tx() as c:  # only this marker: another process may have set a newer one meanwhile
                    c.execute("DELETE FROM meta WHERE key = ? AND value = ?", (_WIPE_KEY, marker))
            finally:
                self._wiping = False
            self._checkpoint(0.0)  # the marker's delete left one frame of the meta table in the WAL
        self._wipe_pending = self._meta(_WIPE_KEY) is not None
        return not self._wipe_pending
