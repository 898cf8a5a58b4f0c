"""Which per-user search indexes (:class:`~.partition._Partition`) a local store keeps, and when they are stale.

Partitions are built lazily from SQLite, registered with the process's memory budget
(:mod:`hybrid_memory.stores.budget`, least recently used users evicted) and kept current by the
store's own writes (:meth:`_PartitionCache._current`, :meth:`_PartitionCache._resized`). When
another connection commits (``PRAGMA data_version``), a cached partition is checked against its
user's change counter (``user_versions``) before its next use and rebuilt only if that user changed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from hybrid_memory.errors import StoreError
from hybrid_memory.stores.base import user_hash
from hybrid_memory.stores.budget import CacheBudget, Evict
from hybrid_memory.stores.local.connection import _WIPE_KEY, _Connection
from hybrid_memory.stores.local.partition import _Partition


class _PartitionCache(_Connection):
    """The per-user search indexes a store keeps, checked against the file and the memory budget.

    Attributes are set by ``LocalStore.__init__``.
    """

    _partitions: dict[str, _Partition]
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
        part = _Partition(self._dim)
        part.version = self._user_version(user_id)  # read before the rows: a later commit only forces a rebuild
        part.checked = self._data_version
        rows = self._conn.execute(
            "SELECT id, analyzed, status, category, created_us, session_id, tags, vector "
            "FROM memories WHERE user_id = ? ORDER BY created_us, id",
            (user_id,),
        ).fetchall()
        if rows:
            part.bulk_load(rows)
        self._partitions[user_id] = part
        self._budget.add(self._evict, user_id, part.nbytes())
        return part


def _drop_partition(store: _PartitionCache, user_id: Hashable) -> None:
    """The cache budget's eviction of one user's partition."""
    store._partitions.pop(str(user_id), None)
