"""The SQLite connection of the local store: transactions, ``meta`` access and the wipe after a forget.

Right to be forgotten: the connection runs with ``PRAGMA secure_delete=ON`` and a forget then
checkpoints and truncates the WAL (:meth:`_Connection._forget_traces`), so no copy of the deleted
text stays in the file or its WAL. A reader of another connection that pins the WAL makes the
wipe *pending* (recorded in ``meta``); every later commit (:meth:`_Connection._tx`), open or
close of the file tries to finish it.

``secure_delete`` zeroes the cells a delete frees and the pages it frees, but not every old copy:
when a delete (or an insert) rebalances a B-tree page with its siblings, SQLite rebuilds the pages
that stay without clearing their unallocated gap, so a copy of a row that was moved and deleted
later stays in a live page of another user (SQLite 3.40: ``rebuildPage``). Forgetting a whole
user therefore also *rewrites* the file (``VACUUM``, :func:`finish_wal_wipe` with ``rewrite``):
every page is rebuilt from the rows that remain, so the cost follows the size of what is kept.
A rewrite that cannot run (another writer holds the file) is recorded as a pending wipe of the
rewrite kind and redone by whoever finishes it.

The same bounded checkpoint and pending marker serve the other SQLite files a forget must wipe
(the trace file, the Weaviate store's dead-letter queue): :func:`checkpoint_wal`,
:func:`record_pending_wipe`, :func:`finish_wal_wipe` and :func:`wipe_marker` take the connection
and the name of the file's key/value table.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone

from hybrid_memory.errors import InvalidInputError, StoreError, StoreUnavailableError
from hybrid_memory.stores.local.schema import _BUSY_TIMEOUT_MS, _read_meta, _write_meta

#: ``meta`` key present while a forget's text may still be on disk (a reader pinned the WAL).
_WIPE_KEY = "wipe_pending"
#: Prefix of a pending-wipe marker whose finish must rewrite the file (``VACUUM``) before the checkpoint.
_REWRITE = "rewrite "
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
        if self._wipe_pending:
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

    def _forget_traces(self, *, rewrite: bool = False) -> None:
        """Move the WAL into the file and truncate it, so zeroed pages replace deleted text.

        Waits at most ``wipe_timeout`` for readers of other connections that pin the WAL; if one
        still does, records a pending wipe in ``meta`` (finished by the next write or open).

        Args:
            rewrite: Rebuild every page first (``VACUUM``), for copies a rebalance left in the
                unallocated gap of live pages (see the module docstring); a whole user's forget.
        """
        if self._memory or self._wipe(self._wipe_timeout, rewrite=rewrite):
            return
        record_pending_wipe(self._conn)  # keeps the rewrite kind finish_wal_wipe recorded
        self._wipe_pending = True

    def _checkpoint(self, timeout: float) -> bool:
        """:func:`checkpoint_wal` on this connection; True when the WAL is empty."""
        return checkpoint_wal(self._conn, timeout)

    def _wipe(self, timeout: float, *, rewrite: bool = False) -> bool:
        """:func:`finish_wal_wipe` on this connection; keeps ``_wipe_pending`` in step with the file.

        Args:
            timeout: Seconds to wait for readers of other connections that pin the WAL.
            rewrite: Rewrite the file (``VACUUM``) before the checkpoint.

        Returns:
            True when no copy of deleted text is left in the WAL or behind it.
        """
        done = finish_wal_wipe(self._conn, timeout, rewrite=rewrite)
        self._wipe_pending = not done and self._meta(_WIPE_KEY) is not None
        return done


def checkpoint_wal(conn: sqlite3.Connection, timeout: float, *, busy_timeout_ms: int = _BUSY_TIMEOUT_MS) -> bool:
    """``wal_checkpoint(TRUNCATE)`` retried for up to ``timeout`` s; True when the WAL is empty.

    The checkpoint returns ``(busy, log, checkpointed)``: ``(0, 0, 0)`` means every frame was
    copied into the file and the WAL truncated. ``busy`` means a reader (or a writer) of
    another connection holds it back; each attempt waits at most 50 ms for it (a short busy
    timeout for this call only, then the connection's ``busy_timeout_ms`` again).

    Args:
        conn: A connection in autocommit mode, outside a transaction.
        timeout: Seconds to keep retrying; 0 = one attempt.
        busy_timeout_ms: The connection's usual busy timeout, restored afterwards.
    """
    deadline = time.monotonic() + timeout
    conn.execute(f"PRAGMA busy_timeout={max(0, min(50, int(timeout * 1000)))}")
    try:
        while True:
            busy, log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0 and log == 0:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(0.02, left))
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")


def rewrite_file(conn: sqlite3.Connection, timeout: float, *, busy_timeout_ms: int = _BUSY_TIMEOUT_MS) -> bool:
    """``VACUUM``: rebuild every page from the rows that remain; False when it could not run.

    Clears the copies of deleted rows that ``secure_delete`` leaves in the unallocated gap of
    pages a rebalance rebuilt (see the module docstring). The new pages go through the WAL, so a
    checkpoint must follow. Readers of other connections do not block it; another writer does,
    for at most ``timeout`` s (the busy timeout of this call, then ``busy_timeout_ms`` again).

    Args:
        conn: A connection in autocommit mode, outside a transaction.
        timeout: Seconds to wait for another connection's write transaction.
        busy_timeout_ms: The connection's usual busy timeout, restored afterwards.
    """
    conn.execute(f"PRAGMA busy_timeout={max(0, int(timeout * 1000))}")
    try:
        conn.execute("VACUUM")
    except sqlite3.OperationalError:  # busy or locked: recorded as a pending rewrite by the caller
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    return True


def wipe_marker(conn: sqlite3.Connection, table: str = "meta") -> str | None:
    """The pending-wipe marker recorded in the key/value ``table`` (``None``: nothing pending)."""
    row = conn.execute(f"SELECT value FROM {_table(table)} WHERE key = ?", (_WIPE_KEY,)).fetchone()
    return None if row is None else str(row[0])


def record_pending_wipe(conn: sqlite3.Connection, table: str = "meta", *, rewrite: bool = False) -> None:
    """Record in the key/value ``table`` that deleted text may still be on disk (who and when).

    Args:
        conn: A connection in autocommit mode, outside a transaction.
        table: The key/value table holding the marker (``key``, ``value`` columns).
        rewrite: The finish must rewrite the file (``VACUUM``) first; kept when a marker of that
            kind is already recorded (a later plain forget does not make the rewrite unnecessary).
    """
    if not rewrite:
        rewrite = (wipe_marker(conn, table) or "").startswith(_REWRITE)
    token = f"{_REWRITE if rewrite else ''}{datetime.now(timezone.utc).isoformat()} pid {os.getpid()}"
    conn.execute(f"INSERT OR REPLACE INTO {_table(table)} (key, value) VALUES (?, ?)", (_WIPE_KEY, token))


def finish_wal_wipe(
    conn: sqlite3.Connection,
    timeout: float,
    *,
    table: str = "meta",
    busy_timeout_ms: int = _BUSY_TIMEOUT_MS,
    rewrite: bool = False,
) -> bool:
    """Checkpoint and truncate the WAL (:func:`checkpoint_wal`); on success clear the pending marker.

    Only the marker read before the checkpoint is cleared: another connection may have recorded
    a newer one meanwhile, whose text this checkpoint did not necessarily wipe.

    Args:
        conn: A connection in autocommit mode, outside a transaction.
        timeout: Seconds to wait for readers of other connections that pin the WAL.
        table: The key/value table holding the marker (``key``, ``value`` columns).
        busy_timeout_ms: The connection's usual busy timeout, restored afterwards.
        rewrite: Rewrite the file first (:func:`rewrite_file`); also done when the recorded
            marker asks for it. A rewrite that cannot run is recorded as a pending wipe of the
            rewrite kind; once it ran, the marker asks for the checkpoint only.

    Returns:
        True when no copy of deleted text is left in the WAL or behind it and no wipe is pending.
    """
    marker = wipe_marker(conn, table)
    if rewrite or (marker is not None and marker.startswith(_REWRITE)):
        if not rewrite_file(conn, timeout, busy_timeout_ms=busy_timeout_ms):
            record_pending_wipe(conn, table, rewrite=True)
            return False
        if marker is not None and marker.startswith(_REWRITE):  # done: only the checkpoint is left
            plain = marker[len(_REWRITE) :]
            conn.execute(
                f"UPDATE {_table(table)} SET value = ? WHERE key = ? AND value = ?", (plain, _WIPE_KEY, marker)
            )
            marker = plain
    if not checkpoint_wal(conn, timeout, busy_timeout_ms=busy_timeout_ms):
        return False
    if marker is not None:
        conn.execute(f"DELETE FROM {_table(table)} WHERE key = ? AND value = ?", (_WIPE_KEY, marker))
        checkpoint_wal(conn, 0.0, busy_timeout_ms=busy_timeout_ms)  # the delete left one frame in the WAL
    return wipe_marker(conn, table) is None


def _close_quietly(conn: sqlite3.Connection) -> None:
    with suppress(sqlite3.Error):
        conn.close()


def enable_wal(
    conn: sqlite3.Connection, path: str, *, required: bool = True, timeout_ms: int = _BUSY_TIMEOUT_MS
) -> None:
    """Put ``conn``'s file in WAL mode, waiting up to ``timeout_ms`` for other processes opening it too.

    While another connection writes the file (another process creating the tables of the same
    fresh file), SQLite answers ``PRAGMA journal_mode=WAL`` with "database is locked" at once,
    without waiting in its busy handler; workers started together on a new file then failed to open
    it. The switch is tried again, with growing pauses, until the timeout.

    Args:
        conn: An open connection (autocommit).
        path: The file, for the error message.
        required: Raise when the file system keeps another journal mode (else keep that mode).
        timeout_ms: How long other connections may hold the file.

    Raises:
        sqlite3.OperationalError: still locked after ``timeout_ms``, or another error.
        StoreUnavailableError: ``required`` and the file cannot be put in WAL mode.

    Example:
        >>> import tempfile, pathlib
        >>> path = str(pathlib.Path(tempfile.mkdtemp()) / "f.db")
        >>> conn = sqlite3.connect(path, isolation_level=None)
        >>> enable_wal(conn, path)
        >>> conn.execute("PRAGMA journal_mode").fetchone()[0]
        'wal'
        >>> conn.close()
    """
    deadline = time.monotonic() + timeout_ms / 1000
    pause = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "database is locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 0.1)
            continue
        if required and str(mode).lower() != "wal":
            raise StoreUnavailableError(f"cannot enable WAL on {path!r} (journal mode {mode})")
        return


def connect_owned(target: str, owner: object) -> sqlite3.Connection:
    """Open ``target`` (autocommit, usable from any thread); the connection closes when ``owner`` is collected.

    The owner's ``close()`` stays the way to close it (it finishes wipes first; closing twice is
    harmless). A store or queue dropped without ``close()`` still releases its file handle, and
    Python 3.13+ has no unclosed connection to warn about. Not at interpreter exit: a daemon
    thread may still be using the connection then.

    Example:
        >>> class Owner: ...
        >>> owner = Owner()
        >>> conn = connect_owned(":memory:", owner)
        >>> del owner
        >>> conn.execute("SELECT 1")
        Traceback (most recent call last):
        ...
        sqlite3.ProgrammingError: Cannot operate on a closed database.
    """
    conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
    weakref.finalize(owner, _close_quietly, conn).atexit = False
    return conn


class WalWiper:
    """The wipe after a forget for another SQLite file in WAL mode (the trace file, the dead letters).

    What :class:`_Connection` does for the store's own file, for a connection its owner keeps:
    :meth:`after_delete` wipes within ``timeout`` or records a pending wipe in the file's
    key/value ``table``; :meth:`after_write` (after each commit), :meth:`opened` and
    :meth:`close` finish it once the reader has left. The owner serialises the calls (its lock).

    Args:
        conn: The owner's connection (autocommit mode, ``secure_delete`` on).
        table: The file's key/value table (``key``, ``value`` columns) that holds the marker.
        timeout: Seconds a forget waits for readers that pin the WAL (the store's ``wipe_timeout``).
        busy_timeout_ms: The connection's usual busy timeout, restored after each checkpoint.
        memory: An in-memory database (nothing to wipe: every call is a no-op).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        table: str,
        timeout: float = DEFAULT_WIPE_TIMEOUT,
        busy_timeout_ms: int = _BUSY_TIMEOUT_MS,
        memory: bool = False,
    ) -> None:
        self._conn = conn
        self._table = _table(table)
        self.timeout = float(timeout)
        self._busy_ms = int(busy_timeout_ms)
        self._memory = memory
        self._data_version = -1
        #: Whether this file may still hold deleted text (as last seen by this connection).
        self.pending = False

    def opened(self) -> None:
        """On open: finish a wipe a forget of any process left pending, if its reader has left."""
        if not self._memory and wipe_marker(self._conn, self._table) is not None:
            self.finish(0.0)

    def after_delete(self, *, rewrite: bool = False) -> bool:
        """After deleting forgotten rows: wipe within ``timeout``, else record a pending wipe.

        Args:
            rewrite: Rewrite the file first (:func:`rewrite_file`): a whole user's forget, whose
                rows a rebalance may have copied into the gap of pages that stay.

        Returns:
            True when the deleted text is gone from disk; False when the wipe is pending.
        """
        if self._memory or self.finish(self.timeout, rewrite=rewrite):
            return True
        record_pending_wipe(self._conn, self._table)  # keeps the rewrite kind finish_wal_wipe recorded
        self.pending = True
        return False

    def after_write(self) -> None:
        """After a commit: finish a pending wipe (of this or, seen by ``data_version``, another process)."""
        if self._memory:
            return
        version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        if version != self._data_version:
            if self._data_version != -1:
                self.pending = wipe_marker(self._conn, self._table) is not None
            self._data_version = version
        if self.pending:
            self.finish(0.0)

    def is_pending(self) -> bool:
        """Whether a wipe is recorded in the file (by any process) and not finished yet."""
        if self._memory:
            return False
        self.pending = wipe_marker(self._conn, self._table) is not None
        return self.pending

    def finish(self, timeout: float | None = None, *, rewrite: bool = False) -> bool:
        """:func:`finish_wal_wipe`, waiting up to ``timeout`` s (default: the forget's ``timeout``).

        Args:
            timeout: Seconds to wait for readers that pin the WAL.
            rewrite: Rewrite the file (``VACUUM``) before the checkpoint.

        Returns:
            True when no deleted text is left on disk; False while a reader still pins the WAL.

        Raises:
            InvalidInputError: a negative or non-numeric timeout.
        """
        wait = self.timeout if timeout is None else wipe_seconds(timeout, name="timeout")
        if self._memory:
            return True
        done = finish_wal_wipe(self._conn, wait, table=self._table, busy_timeout_ms=self._busy_ms, rewrite=rewrite)
        self.pending = not done and wipe_marker(self._conn, self._table) is not None
        return done

    def close(self) -> None:
        """Before the connection closes: one bounded try (``timeout`` if a wipe is pending, else none)."""
        if not self._memory:
            self.finish(self.timeout if self.pending else 0.0)


def wipe_seconds(value: object, *, name: str = "wipe_timeout", most: float | None = None) -> float:
    """``value`` as a number of seconds to wait for readers, checked.

    Raises:
        InvalidInputError: not a number, negative, or above ``most``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value >= 0
        or (most is not None and not value <= most)
    ):
        what = f"a number of seconds in [0, {most:g}]" if most is not None else "a non-negative number of seconds"
        raise InvalidInputError(f"{name} must be {what}, got {value!r}")
    return float(value)


def _table(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not a table name: {name!r}")
    return name
