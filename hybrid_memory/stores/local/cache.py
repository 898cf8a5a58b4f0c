"""Which per-user search indexes (:class:`~.partition._Partition`) a local store keeps, and when they are stale.

Partitions are loaded lazily, registered with the process's memory budget
(:mod:`hybrid_memory.stores.budget`, least recently used users evicted) and kept current by the
store's own writes (:meth:`_PartitionCache._current`, :meth:`_PartitionCache._resized`). When
another connection commits (``PRAGMA data_version``), a cached partition is checked against its
user's change counter (``user_versions``) before its next use and rebuilt only if that user changed.

Cold users are cheap: a partition is loaded from its user's *snapshot* (table ``snapshots``:
contiguous arrays read with one query, and table ``snapshot_vectors``: the vector matrix in
parts, read with the blob API, a large one through a memory map of the file, into one buffer;
:meth:`~.partition._Partition.from_snapshot`) when the snapshot was saved at the user's current
change counter, and rebuilt from the rows otherwise. A partition that no snapshot matches is
saved when it leaves the process (evicted by the budget, or the store closes;
:meth:`_PartitionCache._save`), in a transaction that first checks the counter. Any write of the
user bumps the counter, and triggers delete the snapshot and its vectors in the same transaction
(:mod:`.schema`), so a stale snapshot is never served.
"""

from __future__ import annotations

import builtins
import mmap
import sqlite3
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import StoreError
from hybrid_memory.stores.base import user_hash
from hybrid_memory.stores.budget import CacheBudget, Evict
from hybrid_memory.stores.local.connection import _WIPE_KEY, _Connection
from hybrid_memory.stores.local.partition import _Partition, _Snapshot

#: Largest ``snapshot_vectors`` part (whole rows; SQLite refuses values over 1 GB).
_PART_BYTES = 1 << 26
#: Bytes copied per blob read when loading vectors (fits the CPU cache; see :func:`_read_blobs`).
_READ_CHUNK = 1 << 20
#: Snapshot vectors from this size on are read through a file map into a populated buffer (below,
#: setting both up costs more than it saves: ~1.3 ms more for 1k memories).
_LARGE = 1 << 23


class _PartitionCache(_Connection):
    """The per-user search indexes a store keeps, checked against the file and the memory budget.

    Attributes are set by ``LocalStore.__init__``.
    """

    _partitions: dict[str, _Partition]
    #: Partitions the budget evicted before a snapshot matched them (see :meth:`_save_evicted`).
    _unsaved: list[tuple[str, _Partition]]
    _budget: CacheBudget
    _evict: Evict
    _data_version: int
    _dim: int | None

    @contextmanager
    def _guard(self) -> Iterator[None]:
        with self._lock:
            self._check_open()
            try:
                self._sync_external()
                yield
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite error: {exc}") from exc

    def _sync_external(self) -> None:
        """Note whether another connection (process, CLI) committed since the last operation.

        ``PRAGMA data_version`` changes only on other connections' commits, so this store's own
        writes keep its incrementally maintained indexes. After another connection's commit, a
        cached partition is checked against its user's change counter (``user_versions``, bumped
        by every write of that user in the same transaction) before its next use, and rebuilt
        only when that user changed (see :meth:`_partition`).
        """
        version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        if version != self._data_version:
            if self._data_version != -1:
                dim = self._meta("embedder_dimension")
                new_dim = int(dim) if dim is not None else None
                if new_dim != self._dim:  # re-embedded elsewhere: no cached vector is valid
                    self._drop_partitions()
                self._dim = new_dim
                self._wipe_pending = self._meta(_WIPE_KEY) is not None  # set or finished by another process
            self._data_version = version

    def _drop_partitions(self) -> None:
        self._partitions.clear()
        self._budget.discard_owner(self._evict)

    def _drop_partition(self, user_id: str) -> None:
        self._partitions.pop(user_id, None)
        self._budget.discard(self._evict, user_id)

    def _user_version(self, user_id: str) -> int:
        row = self._conn.execute(
            "SELECT version FROM user_versions WHERE user_hash = ?", (user_hash(user_id),)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _bump_versions(self, users: Iterable[str]) -> dict[str, int]:
        """Inside a write transaction: bump the change counter of each user; the new values."""
        out: dict[str, int] = {}
        for user in dict.fromkeys(users):
            row = self._conn.execute(
                "INSERT INTO user_versions (user_hash, version) VALUES (?, 1) "
                "ON CONFLICT (user_hash) DO UPDATE SET version = version + 1 RETURNING version",
                (user_hash(user),),
            ).fetchone()
            out[user] = int(row[0])
        return out

    def _current(self, versions: Mapping[str, int]) -> dict[str, _Partition]:
        """After this store's own write: the cached partitions to change in place.

        A partition is kept when it reflected the user's state just before the write (its
        version is one less than the new one); otherwise another process wrote the user in
        between and the partition is dropped (rebuilt on its next use).
        """
        out: dict[str, _Partition] = {}
        for user, version in versions.items():
            part = self._partitions.get(user)
            if part is None:
                continue
            if part.version == version - 1:
                part.version = version
                out[user] = part
            else:
                self._drop_partition(user)
        return out

    def _resized(self, parts: Mapping[str, _Partition]) -> None:
        for user, part in parts.items():
            if self._partitions.get(user) is part:
                self._budget.resize(self._evict, user, part.nbytes())
        self._save_evicted()

    def _partition(self, user_id: str) -> _Partition:
        """The user's in-process index: cached (checked against the file) or built from SQLite.

        A cached partition is reused without a query while no other connection committed; after
        one did, one indexed lookup of the user's change counter decides whether it is still
        current. Building one registers it with the process's cache budget, which may evict the
        least recently used partitions (of any store in the process).
        """
        part = self._partitions.get(user_id)
        if part is not None:
            if part.checked != self._data_version:
                if self._user_version(user_id) == part.version:
                    part.checked = self._data_version
                else:
                    self._drop_partition(user_id)
                    part = None
            if part is not None:
                self._budget.hit(self._evict, user_id)
                return part
        part = self._load(user_id)
        self._partitions[user_id] = part
        self._budget.add(self._evict, user_id, part.nbytes())
        self._save_evicted()
        return part

    def _load(self, user_id: str) -> _Partition:
        """The user's partition from its snapshot when one matches the change counter, else from the rows.

        One read transaction covers the counter, the snapshot (its vectors read straight into one
        array, :func:`_read_vectors`; through a memory map of the file, :meth:`_mapped`, when they
        are :data:`_LARGE`) or the rows, so all come from the same commit. A schema-2 snapshot
        (vectors inside its row) is served and marked unsaved, so it is saved again in the
        current form.
        """
        c = self._conn
        own = not c.in_transaction
        hashed = user_hash(user_id)
        hint = c.execute("SELECT rows * dim FROM snapshots WHERE user_hash = ?", (hashed,)).fetchone() if own else None
        with self._mapped(hint is not None and 4 * int(hint[0]) >= _LARGE):  # the hint only sizes the read
            if own:
                c.execute("BEGIN")
            try:
                row = c.execute(
                    "SELECT v.version, s.version, s.rowid, length(s.vectors), s.rows, s.dim, s.columns, s.postings, "
                    "s.ids, s.terms, s.sessions, s.tags "
                    "FROM user_versions AS v LEFT JOIN snapshots AS s ON s.user_hash = v.user_hash "
                    "WHERE v.user_hash = ?",
                    (hashed,),
                ).fetchone()
                version = 0 if row is None else int(row[0])
                vectors = None
                if row is not None and row[1] == version and row[5] == self._dim:
                    size = int(row[4]) * int(row[5]) * 4
                    vectors = _read_vectors(c, hashed, version, int(row[2]), int(row[3]), size)
                if row is not None and vectors is not None:
                    part = _Partition.from_snapshot(_Snapshot(row[4], row[5], vectors, *row[6:]))
                    part.saved = version if row[3] == 0 else -1
                else:
                    part = _Partition(self._dim)
                    rows = c.execute(
                        "SELECT id, analyzed, status, category, created_us, session_id, tags, vector "
                        "FROM memories WHERE user_id = ? ORDER BY created_us, id",
                        (user_id,),
                    ).fetchall()
                    if rows:
                        part.bulk_load(rows)
            finally:
                if own and c.in_transaction:
                    c.execute("COMMIT")
        part.version = version
        part.checked = self._data_version
        return part

    def _save(self, user_id: str, part: _Partition) -> None:
        """Save a snapshot of ``part`` if it is the user's current state and no snapshot matches it yet.

        Best effort (the rows stay the truth): a failed write is skipped. The change counter is
        checked again inside the write transaction, so a partition made stale by another
        connection is never saved; the arrays are assembled before it, not while holding the lock.
        The vectors go to ``snapshot_vectors`` in parts of whole rows (at most :data:`_PART_BYTES`
        each) written from views of the matrix; a schema-2 row of the same state is replaced.
        """
        if self._memory or self._closed or part.n == 0 or part.saved == part.version:
            return
        hashed = user_hash(user_id)
        try:
            row = self._conn.execute(
                "SELECT v.version, s.version, length(s.vectors) FROM user_versions AS v "
                "LEFT JOIN snapshots AS s ON s.user_hash = v.user_hash WHERE v.user_hash = ?",
                (hashed,),
            ).fetchone()
            if row is None or row[0] != part.version:
                return  # stale: another connection wrote the user since
            if row[1] == part.version and row[2] == 0:
                part.saved = part.version  # another connection saved this state already
                return
            snap = part.snapshot()
            matrix = np.frombuffer(snap.vectors, dtype="<f4").reshape(snap.rows, snap.dim)
            step = max(1, _PART_BYTES // max(1, 4 * snap.dim))
            parts = [
                (hashed, i, part.version, matrix[lo : lo + step].data.cast("B"))
                for i, lo in enumerate(range(0, snap.rows, step))
            ]
            with self._tx() as c:
                if self._user_version(user_id) != part.version:
                    return
                c.execute(
                    "INSERT OR REPLACE INTO snapshots (user_hash, version, rows, dim, vectors, columns, postings, "
                    "ids, terms, sessions, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (hashed, part.version, snap.rows, snap.dim, b"", *snap[3:]),
                )
                c.execute("DELETE FROM snapshot_vectors WHERE user_hash = ?", (hashed,))
                c.executemany(
                    "INSERT INTO snapshot_vectors (user_hash, part, version, vectors) VALUES (?, ?, ?, ?)", parts
                )
        except (StoreError, sqlite3.Error):  # pragma: no cover - contention or a full disk: the rows stay the truth
            return
        part.saved = part.version

    def _save_evicted(self) -> None:
        """Save the partitions the budget evicted since the last call (no snapshot matched them).

        Inside an open transaction (a caller's write) they wait for the next call instead.
        """
        while self._unsaved and not self._conn.in_transaction:
            user_id, part = self._unsaved.pop()
            self._save(user_id, part)

    def _save_all(self) -> None:
        """Before close: save every partition still held that no snapshot matches."""
        self._save_evicted()
        for user_id, part in builtins.list(self._partitions.items()):
            self._save(user_id, part)


def _read_vectors(
    c: sqlite3.Connection, hashed: str, version: int, rowid: int, inline: int, size: int
) -> npt.NDArray[np.uint8] | None:
    """A snapshot's ``size`` bytes of vectors (read-only), or ``None`` when they are not all there.

    ``inline`` is the length of the ``snapshots`` row's own ``vectors`` (``rowid``): non-zero in a
    schema-2 row, which holds them. Otherwise they are the ``snapshot_vectors`` parts saved with
    the snapshot at ``version``, concatenated.
    """
    if inline:
        return _read_blobs(c, "snapshots", [(rowid, inline)]) if inline == size else None
    parts = [
        (int(r[0]), int(r[1]))
        for r in c.execute(
            "SELECT rowid, length(vectors) FROM snapshot_vectors WHERE user_hash = ? AND version = ? ORDER BY part",
            (hashed, version),
        )
    ]
    return _read_blobs(c, "snapshot_vectors", parts) if sum(n for _, n in parts) == size else None


def _read_blobs(c: sqlite3.Connection, table: str, parts: Sequence[tuple[int, int]]) -> npt.NDArray[np.uint8]:
    """The ``vectors`` of ``table``'s rows ``(rowid, length)``, concatenated into one read-only array.

    Read with the blob API (Python 3.11+): a value under :data:`_LARGE` in one read (its
    ``bytes`` are the array); larger ones in pieces of :data:`_READ_CHUNK` bytes (the allocator
    reuses each piece's buffer) copied into one buffer mapped in whole (:func:`_fresh_buffer`).
    """
    blobopen = getattr(c, "blobopen", None)
    if len(parts) == 1 and parts[0][1] < _LARGE and blobopen is not None:  # one small value: one read, no copy
        with blobopen(table, "vectors", parts[0][0], readonly=True) as blob:
            return np.frombuffer(blob.read(), dtype=np.uint8)
    out = np.frombuffer(_fresh_buffer(sum(n for _, n in parts)), dtype=np.uint8)
    at = 0
    for rowid, n in parts:
        if blobopen is None:  # pragma: no cover - Python 3.10
            value = c.execute(f"SELECT vectors FROM {table} WHERE rowid = ?", (rowid,)).fetchone()[0]
            out[at : at + n] = np.frombuffer(value, dtype=np.uint8)
        else:
            with blobopen(table, "vectors", rowid, readonly=True) as blob:
                for lo in range(0, n, _READ_CHUNK):
                    piece = blob.read(_READ_CHUNK)
                    out[at + lo : at + lo + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
        at += n
    out.flags.writeable = False
    return out


def _fresh_buffer(size: int) -> mmap.mmap | bytearray:
    """``size`` writable bytes for a snapshot's vectors, their pages mapped in one call where possible.

    On Linux an anonymous map with ``MAP_POPULATE``: the kernel maps every page at once, about a
    third cheaper than faulting 4 KB at a time while copying (a ``bytes`` of 150 MB) and far
    cheaper than numpy's large arrays on machines where its huge-page hint makes each 2 MB fault
    slow (measured 90 / 140 / 500+ ms for 154 MB on a loaded 2-core VM).
    """
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if size and populate:
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    return bytearray(size)


def _drop_partition(store: _PartitionCache, user_id: Hashable) -> None:
    """The cache budget's eviction of one user's partition (saved later if no snapshot matches it).

    May run in another store's thread, so it does no I/O: it hands the partition to the owning
    store's next :meth:`_PartitionCache._save_evicted`.
    """
    part = store._partitions.pop(str(user_id), None)
    if part is not None and part.saved != part.version and not store._memory:
        store._unsaved.append((str(user_id), part))
