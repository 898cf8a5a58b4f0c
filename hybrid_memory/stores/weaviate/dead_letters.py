"""The dead-letter queue: writes that failed after every retry, kept in a local SQLite file.

Nothing acknowledged is lost: :meth:`WeaviateStore.replay_dead_letters` writes them again.

Every row carries the time its write was asked for (``queued_at``, the failing call's time) and a
random ``stamp``, both new when a caller's write fails again and kept when a replay's write fails
again: a replay compares deletes with the time of the write it replays, and it updates or removes
a row only if its stamp is unchanged, so a newer version queued meanwhile (by this or another
process sharing the file) is neither lost nor overwritten.

A forget removes the user's rows and wipes their text from the file and its WAL the way
:class:`~hybrid_memory.stores.local.LocalStore` does (:class:`~hybrid_memory.stores.local.connection.WalWiper`):
a reader of another connection that pins the WAL makes the wipe pending (recorded in the file's
``dead_letter_meta`` table), finished by the next write, open or close once it has left.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.local.connection import WalWiper, connect_owned, enable_wal
from hybrid_memory.values import Vector


@dataclass(frozen=True)
class _Pending:
    """One record waiting to be written (in a batch or in the dead-letter queue)."""

    record: MemoryRecord
    vector: Vector
    uuid: str
    tenant: str

    @property
    def key(self) -> tuple[str, str]:
        """``(user id, record id)``."""
        return self.record.user_id, self.record.id


@dataclass(frozen=True)
class _Failure:
    """One object a write could not store: the server's or the client's reason, and whether it is transient.

    ``transient`` is decided by exception type where there was an exception, by the message only
    for the per-object errors of a batch (:mod:`hybrid_memory.stores.weaviate.errors`);
    ``unreachable`` marks objects not sent because the liveness probe failed.
    """

    pending: _Pending
    message: str
    transient: bool
    unreachable: bool = False


@dataclass(frozen=True)
class _Letter:
    """One queued row: the record, its vector and the bookkeeping of its write."""

    record: MemoryRecord
    vector: Vector
    error: str
    attempts: int
    #: The user's forget epoch the write carried (``None``: none).
    epoch: int | None
    #: When the write was asked for (UTC; the last failure for a row from before this column).
    queued_at: datetime
    #: Changes whenever a newer version of the memory is queued (``None`` for an older row).
    stamp: str | None

    @property
    def key(self) -> tuple[str, str]:
        """``(user id, record id)``."""
        return self.record.user_id, self.record.id


class _DeadLetterQueue:
    """Records whose write failed after all retries, in a SQLite file (created on first use).

    ``epoch`` is the user's forget epoch the write carried (``NULL``: none); a replay drops the
    record when the user was forgotten since.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._wiper: WalWiper | None = None
        self._lock = threading.Lock()

    def _open(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if self.path is None:
            if not create:
                return None
            target = ":memory:"
        else:
            if not create and not self.path.exists():
                return None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target = str(self.path)
        conn = connect_owned(target, self)
        try:
            self._set_up(conn, memory=target == ":memory:")
        except BaseException:
            self._wiper = None
            conn.close()
            raise
        self._conn = conn
        return conn

    def _set_up(self, conn: sqlite3.Connection, *, memory: bool) -> None:
        conn.execute("PRAGMA secure_delete=ON")  # deleted memories are overwritten, not left in free pages
        if not memory:
            enable_wal(conn, str(self.path), required=False)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS dead_letters ("
            " user_id TEXT NOT NULL, record_id TEXT NOT NULL, record_json TEXT NOT NULL,"
            " vector BLOB NOT NULL, error TEXT NOT NULL, attempts INTEGER NOT NULL,"
            " first_failed_at TEXT NOT NULL, last_failed_at TEXT NOT NULL, epoch INTEGER,"
            " PRIMARY KEY (user_id, record_id))"
        )
        columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(dead_letters)")}
        for column in ("epoch INTEGER", "queued_at TEXT", "stamp TEXT"):  # a queue from before these columns
            if column.split()[0] not in columns:
                conn.execute(f"ALTER TABLE dead_letters ADD COLUMN {column}")
        conn.execute("CREATE TABLE IF NOT EXISTS dead_letter_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._wiper = WalWiper(conn, table="dead_letter_meta", memory=memory)
        self._wiper.opened()  # a forget left text behind a reader: finish it if the reader has left

    def add(self, items: Sequence[_Failure], epochs: Mapping[str, int] | None = None) -> None:
        """Queue the failed writes of a caller (a newer version replaces a queued one, with a new stamp)."""
        if not items:
            return
        now = datetime.now(timezone.utc).isoformat()
        with self._writing(create=True) as conn:
            assert conn is not None
            for p, err in ((f.pending, f.message) for f in items):
                conn.execute(
                    "INSERT INTO dead_letters (user_id, record_id, record_json, vector, error, attempts,"
                    " first_failed_at, last_failed_at, epoch, queued_at, stamp)"
                    " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)"
                    " ON CONFLICT(user_id, record_id) DO UPDATE SET record_json=excluded.record_json,"
                    " vector=excluded.vector, error=excluded.error, attempts=attempts+1,"
                    " last_failed_at=excluded.last_failed_at, epoch=excluded.epoch,"
                    " queued_at=excluded.queued_at, stamp=excluded.stamp",
                    (
                        p.record.user_id,
                        p.record.id,
                        json.dumps(p.record.to_json_dict(), ensure_ascii=False),
                        np.asarray(p.vector, dtype="<f4").tobytes(),
                        err[:2000],
                        now,
                        now,
                        None if epochs is None else epochs.get(p.record.user_id),
                        now,
                        secrets.token_hex(8),
                    ),
                )

    def pending(self, user_id: str | None = None) -> list[_Letter]:
        """Queued rows, oldest failure first."""
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return []
            sql = (
                "SELECT record_json, vector, error, attempts, epoch, COALESCE(queued_at, last_failed_at), stamp"
                " FROM dead_letters"
            )
            args: tuple[str, ...] = ()
            if user_id is not None:
                sql += " WHERE user_id = ?"
                args = (user_id,)
            rows = conn.execute(sql + " ORDER BY last_failed_at, rowid", args).fetchall()
        return [
            _Letter(
                record=MemoryRecord.from_json_dict(json.loads(rec_json)),
                vector=np.frombuffer(blob, dtype="<f4").astype(np.float32),
                error=str(err),
                attempts=int(attempts),
                epoch=None if epoch is None else int(epoch),
                queued_at=datetime.fromisoformat(str(queued_at)),
                stamp=None if stamp is None else str(stamp),
            )
            for rec_json, blob, err, attempts, epoch, queued_at, stamp in rows
        ]

    def unchanged(self, letters: Sequence[_Letter]) -> set[tuple[str, str]]:
        """``(user id, record id)`` of the letters still queued with the stamp :meth:`pending` read."""
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return set()
            return {
                x.key
                for x in letters
                if conn.execute(
                    "SELECT 1 FROM dead_letters WHERE user_id = ? AND record_id = ? AND stamp IS ?",
                    (x.record.user_id, x.record.id, x.stamp),
                ).fetchone()
            }

    def settle(self, done: Sequence[_Letter], failed: Sequence[tuple[_Letter, str]]) -> None:
        """After a replay: remove the rows it wrote, count another attempt on those that failed again.

        Only rows whose stamp is unchanged since :meth:`pending` read them are touched: a newer
        version queued meanwhile stays as it is, and a row removed meanwhile (a newer write
        succeeded, a forget) is not brought back. A failed row keeps the time its write was asked for.
        """
        if not done and not failed:
            return
        now = datetime.now(timezone.utc).isoformat()
        with self._writing(create=False) as conn:
            if conn is None:
                return
            conn.executemany(
                "DELETE FROM dead_letters WHERE user_id = ? AND record_id = ? AND stamp IS ?",
                [(x.record.user_id, x.record.id, x.stamp) for x in done],
            )
            conn.executemany(
                "UPDATE dead_letters SET error = ?, attempts = attempts + 1, last_failed_at = ?"
                " WHERE user_id = ? AND record_id = ? AND stamp IS ?",
                [(err[:2000], now, x.record.user_id, x.record.id, x.stamp) for x, err in failed],
            )

    def remove(self, user_id: str, record_ids: Iterable[str]) -> None:
        """Delete the rows of these memories (a delete); their text is wiped from the file and its WAL."""
        ids = list(record_ids)
        if not ids:
            return
        with self._writing(create=False, wipe=True) as conn:
            if conn is not None:
                conn.executemany(
                    "DELETE FROM dead_letters WHERE user_id = ? AND record_id = ?", [(user_id, i) for i in ids]
                )

    def blank_contexts(self, user_id: str, turn_ids: Collection[str]) -> int:
        """Blank the search context of queued records cut from one of these turns; return how many.

        The turns left their session's log (a forget, an edit): a replay must not write their text
        back as the next turn's context, and the file keeps no copy of it (wiped as :meth:`remove`
        does). The row keeps its stamp and time: it is the same write, without those words.
        """
        if not turn_ids:
            return 0
        with self._writing(create=False, wipe=True) as conn:
            if conn is None:
                return 0
            rows = conn.execute("SELECT record_id, record_json FROM dead_letters WHERE user_id = ?", (user_id,))
            blanked = [
                (json.dumps(record.evolve(context="").to_json_dict(), ensure_ascii=False), user_id, record_id)
                for record_id, rec_json in rows.fetchall()
                for record in [MemoryRecord.from_json_dict(json.loads(rec_json))]
                if record.context_source in turn_ids
            ]
            conn.executemany("UPDATE dead_letters SET record_json = ? WHERE user_id = ? AND record_id = ?", blanked)
        return len(blanked)

    @contextmanager
    def _writing(self, *, create: bool, wipe: bool = False) -> Iterator[sqlite3.Connection | None]:
        """The open file (``None``: there is none and ``create`` is false), in one transaction under the lock.

        One transaction: in autocommit mode every row would be its own fsync (``synchronous=FULL``).
        ``wipe``: the rows it deletes or rewrites hold text that must leave the file, so a commit that
        changed any wipes the freed pages and the WAL (a forget's wipe) instead of the usual check.
        """
        with self._lock:
            conn = self._open(create=create)
            if conn is None:
                yield None
                return
            before = conn.total_changes
            with _transaction(conn):
                yield conn
            if wipe and conn.total_changes != before:
                assert self._wiper is not None
                self._wiper.after_delete()
            else:
                self._after_write()

    def _after_write(self) -> None:
        if self._wiper is not None:
            self._wiper.after_write()  # the next write after a reader left finishes a pending forget

    def remove_user(self, user_id: str) -> int:
        """Delete the user's rows and wipe their text from the file (see the module docstring)."""
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return 0
            n = int(conn.execute("DELETE FROM dead_letters WHERE user_id = ?", (user_id,)).rowcount)
            assert self._wiper is not None
            # bounded: a reader pinning the WAL makes the wipe pending; the rewrite clears copies a
            # rebalance left in pages that stay
            self._wiper.after_delete(rewrite=n > 0)
            return n

    def wipe_pending(self) -> bool:
        """Whether a forget's text may still be in the file because a reader pinned its WAL."""
        with self._lock:
            if self._open(create=False) is None or self._wiper is None:
                return False
            return self._wiper.is_pending()

    def finish_wipe(self, timeout: float | None = None) -> bool:
        """Finish a pending wipe, waiting up to ``timeout`` s; True when no forgotten text is left."""
        with self._lock:
            if self._open(create=False) is None or self._wiper is None:
                return True
            return self._wiper.finish(timeout)

    def count(self) -> int:
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return 0
            return int(conn.execute("SELECT COUNT(*) FROM dead_letters").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    if self._wiper is not None:
                        self._wiper.close()  # one bounded try; a pending wipe stays recorded otherwise
                except sqlite3.Error:  # pragma: no cover - best effort on close
                    pass
                finally:
                    self._conn.close()
                    self._conn = None
                    self._wiper = None


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One transaction on an autocommit connection (one fsync for all its rows, ``synchronous=FULL``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _default_dead_letter_path(label: str) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return Path(base) / "hybrid-memory" / "dead-letters" / f"{safe}.sqlite"
