"""The :class:`LocalStore` class: its public methods, delegating to the rest of the package.

Construction and lifecycle, the embedder binding, writes (memories), reads, the writer's
neighbours check and hybrid search. The SQLite plumbing and the wipe after a forget live in
:mod:`.connection`, the per-user index cache in :mod:`.cache`, the turn log in :mod:`.turns`
(all mixed in), the schema in :mod:`.schema` and the index itself in :mod:`.partition`.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import (
    EmbedderMismatchError,
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)
from hybrid_memory.ranking import candidate_limit, hybrid_fuse_legs, hybrid_weights, query_term_counts
from hybrid_memory.records import MemoryRecord, check_id, check_text, ensure_utc
from hybrid_memory.stores.base import AsyncFromSyncStore, check_ids, user_hash
from hybrid_memory.stores.budget import CacheBudget, cache_budget
from hybrid_memory.stores.local.cache import _drop_partition
from hybrid_memory.stores.local.connection import (
    _WIPE_KEY,
    DEFAULT_WIPE_TIMEOUT,
    connect_owned,
    enable_wal,
    wipe_seconds,
)
from hybrid_memory.stores.local.partition import _NO_SCORES, _FilterFields, _similarities, _unit_rows, _unit_vector
from hybrid_memory.stores.local.rows import _RECORD_COLUMNS, _chunks, _iso, _marks, _record, _row, _where
from hybrid_memory.stores.local.schema import _BUSY_TIMEOUT_MS, _create_or_migrate
from hybrid_memory.stores.local.turns import _retire, _TurnLog
from hybrid_memory.stores.nearest import Neighbour
from hybrid_memory.text.analyzer import Analyzer
from hybrid_memory.values import MemoryFilter, SearchRequest, StoreHit, Vector, as_matrix

#: Searches of one call: a hit another process deleted between the index check and the read of
#: the rows makes the search run again (the last attempt leaves such hits out).
_SEARCH_ATTEMPTS = 3
_REEMBED_HINT = "run `hybrid-memory reembed` to re-embed the store with the new embedder, or use another store"


class LocalStore(_TurnLog, AsyncFromSyncStore):
    """Embedded memory store: one SQLite file, Weaviate-exact hybrid search, per-user partitions.

    Search semantics are Weaviate's hybrid search (``weaviate.md`` §1.9) with per-user BM25
    statistics, as with one Weaviate tenant per user: ``alpha`` 1.0 = pure vector, 0.0 = pure
    keyword (BM25); each leg fetches ``max(100, limit)`` candidates; relativeScoreFusion by
    default. A search never returns another user's memory.

    Vectors are stored unit-normalised (float32). The embedder's name and dimension are recorded
    on first use (:meth:`bind_embedder` or the first :meth:`upsert`); a different dimension is
    refused with :class:`~hybrid_memory.errors.EmbeddingDimensionError`.

    All methods are thread-safe (one lock); ``a``-prefixed async twins run them in a worker thread.
    After :meth:`close` every method raises :class:`~hybrid_memory.errors.StoreUnavailableError`.

    Args:
        path: SQLite file (created with its parent folders if missing), or ``":memory:"`` for
            an ephemeral store.
        analyzer: Tokeniser for BM25 (default :class:`~hybrid_memory.analyzer.Analyzer`). If the
            file was indexed with another analyzer, it is re-analysed on open.
        wipe_timeout: Seconds a forget (:meth:`delete`, :meth:`delete_user`) waits for readers in
            other connections that pin the WAL before it reports a pending wipe (see
            :attr:`wipe_pending`); 0 = one attempt, no wait.
        budget: The memory budget its per-user partitions count against (default: the process's,
            :func:`~hybrid_memory.stores.budget.cache_budget`; least recently used users are
            evicted and rebuilt from the file when needed again).

    Raises:
        StoreUnavailableError: the file cannot be opened.
        SchemaError: the file holds an incompatible hybrid-memory schema.

    Example:
        >>> import numpy as np
        >>> from hybrid_memory.records import MemoryRecord
        >>> from hybrid_memory.stores.base import SearchRequest
        >>> store = LocalStore(":memory:")
        >>> store.bind_embedder("toy", 3)
        >>> tea = MemoryRecord.create(user_id="alice", content="Alice drinks green tea every morning")
        >>> car = MemoryRecord.create(user_id="alice", content="Alice drives a red car")
        >>> store.upsert([tea, car], np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
        >>> query = np.array([0.9, 0.1, 0.0], dtype=np.float32)
        >>> hits = store.search(SearchRequest(user_id="alice", query="green tea", vector=query, alpha=0.5))
        >>> [(h.record.content, round(h.score, 3)) for h in hits]
        [('Alice drinks green tea every morning', 1.0), ('Alice drives a red car', 0.0)]
        >>> [h.record.content for h in store.search(
        ...     SearchRequest(user_id="alice", query="red car", vector=None, alpha=0.0))]
        ['Alice drives a red car']
        >>> store.search(SearchRequest(user_id="bob", query="green tea", vector=query, alpha=0.5))
        []
        >>> store.count("alice"), store.delete_user("alice"), store.count("alice")
        (2, 2, 0)
        >>> store.close()
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        analyzer: Analyzer | None = None,
        wipe_timeout: float = DEFAULT_WIPE_TIMEOUT,
        budget: CacheBudget | None = None,
    ) -> None:
        self.analyzer: Analyzer = analyzer if analyzer is not None else Analyzer()
        self._wipe_timeout = wipe_seconds(wipe_timeout, most=60.0)
        self._wipe_pending = False
        raw = os.fspath(path)
        if not isinstance(raw, str):
            raise InvalidInputError("path must be a str or os.PathLike[str]")
        self._memory = raw == ":memory:"
        self._path = raw
        self._lock = threading.RLock()
        self._partitions = {}
        self._unsaved = []
        self._budget = budget if budget is not None else cache_budget()
        self._evict = self._budget.owner(self, _drop_partition)
        self._data_version = -1
        self._closed = False
        try:
            if not self._memory:
                Path(raw).expanduser().parent.mkdir(parents=True, exist_ok=True)
                self._path = str(Path(raw).expanduser())
            self._conn = connect_owned(self._path, self)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailableError(f"cannot open the memory store at {raw!r}: {exc}") from exc
        try:
            self._setup()
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreUnavailableError(f"cannot open the memory store at {raw!r}: {exc}") from exc
        except BaseException:
            self._conn.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------
    def _setup(self) -> None:
        c = self._conn
        c.execute("PRAGMA secure_delete=ON")
        c.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        if not self._memory:
            enable_wal(c, self._path)
            c.execute("PRAGMA synchronous=FULL")
        with self._tx():
            _create_or_migrate(c, self.analyzer, self._path)
        dim = self._meta("embedder_dimension")
        self._dim = int(dim) if dim is not None else None
        # From here on another connection's commit changes data_version, so the first operation
        # reads the dimension again if another process bound an embedder since this open.
        self._data_version = int(c.execute("PRAGMA data_version").fetchone()[0])
        if not self._memory and self._meta(_WIPE_KEY) is not None:
            self._wipe_pending = True
            self._wipe(0.0)  # a forget left text behind a reader: finish it if the reader has left

    def close(self) -> None:
        """Close the database. Idempotent; later calls raise StoreUnavailableError."""
        with self._lock:
            if self._closed:
                return
            self._save_all()  # the next process loads these users from their snapshots
            self._closed = True
            self._partitions.clear()
            self._budget.discard_owner(self._evict)
            try:
                if not self._memory:  # a pending wipe gets one more bounded chance; it stays recorded otherwise
                    self._wipe(self._wipe_timeout if self._wipe_pending else 0.0)
            except (sqlite3.Error, StoreError):  # pragma: no cover - best effort on close
                pass
            finally:
                self._conn.close()

    def __enter__(self) -> LocalStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"LocalStore({self._path!r}, {state})"

    # -- plumbing ----------------------------------------------------------------------------
    @property
    def wipe_pending(self) -> bool:
        """Whether deleted text may still be on disk because a reader pinned the WAL.

        True after a :meth:`delete` / :meth:`delete_user` (of any process on this file) could not
        checkpoint within ``wipe_timeout`` because another connection held a read transaction.
        Becomes False when the wipe is finished: by the next write or open of the file once the
        reader has left, by :meth:`finish_wipe`, or by :meth:`close`. Always False for ``":memory:"``.
        """
        with self._guard():
            if self._memory:
                return False
            self._wipe_pending = self._meta(_WIPE_KEY) is not None
            return self._wipe_pending

    def finish_wipe(self, timeout: float | None = None) -> bool:
        """Finish a pending wipe, waiting up to ``timeout`` s (default ``wipe_timeout``) for readers.

        Returns:
            True when no deleted text is left on disk (nothing was pending, or the wipe finished);
            False when a reader of another connection still pins the WAL.

        Raises:
            InvalidInputError: a negative or non-numeric timeout.
        """
        wait = self._wipe_timeout if timeout is None else wipe_seconds(timeout, name="timeout")
        with self._guard():
            if self._memory:
                return True
            return self._wipe(wait)

    async def afinish_wipe(self, timeout: float | None = None) -> bool:
        """Async twin of :meth:`finish_wipe`."""
        return await asyncio.to_thread(self.finish_wipe, timeout)

    # -- embedder ----------------------------------------------------------------------------
    @property
    def dimension(self) -> int | None:
        """Vector dimension of the store (``None`` until an embedder is bound or a vector stored)."""
        with self._guard():
            return self._dim

    @property
    def embedder_name(self) -> str | None:
        """Name of the embedder recorded first (``None`` if none was bound)."""
        with self._guard():
            return self._meta("embedder_name")

    def bind_embedder(self, name: str, dimension: int) -> None:
        """Record the embedder on first use, or check that it is the one recorded.

        A store whose dimension was fixed by a first :meth:`upsert` records the first name bound.

        Raises:
            EmbeddingDimensionError: the store holds vectors of another dimension (the message
                names both dimensions and the ``hybrid-memory reembed`` command).
            EmbedderMismatchError: the store recorded another embedder of the same dimension
                (the recorded name stays).
            InvalidInputError: empty name or non-positive dimension.
        """
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError("embedder name must be a non-empty str")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}")
        with self._guard():
            if self._check_binding(name, dimension):
                return
            with self._tx():  # checked again under the write lock: another process may have bound meanwhile
                if not self._check_binding(name, dimension):
                    if self._meta("embedder_name") is None:
                        self._set_meta("embedder_name", name)
                    self._set_meta("embedder_dimension", str(dimension))
            self._dim = dimension

    def _check_binding(self, name: str, dimension: int) -> bool:
        """Raise if the stored binding refuses ``name`` / ``dimension``; ``True`` when both are recorded."""
        recorded = self._meta("embedder_name")
        stored = self._meta("embedder_dimension")
        if stored is not None and int(stored) != self._dim:  # bound by another process since the last look
            self._drop_partitions()
            self._dim = int(stored)
        if self._dim is not None and self._dim != dimension:
            raise EmbeddingDimensionError(
                self._dim,
                dimension,
                hint=f"the store was built with embedder {recorded or 'unknown'!r} ({self._dim}-d) and cannot "
                f"take {name!r} ({dimension}-d); {_REEMBED_HINT}",
            )
        if recorded is not None and recorded != name:
            raise EmbedderMismatchError(recorded, name, dimension)
        return recorded is not None and self._dim is not None

    # -- writes ------------------------------------------------------------------------------
    @staticmethod
    def _check_records(records: Sequence[MemoryRecord]) -> builtins.list[MemoryRecord]:
        if isinstance(records, (str, bytes)) or not isinstance(records, Sequence):
            raise InvalidInputError("records must be a sequence of MemoryRecord")
        out = builtins.list(records)
        for r in out:
            if not isinstance(r, MemoryRecord):
                raise InvalidInputError(f"expected MemoryRecord, got {type(r).__name__}")
            check_id(r.user_id)
            check_id(r.id, name="id")
            check_text(r.content)
            if r.session_id is not None:
                check_id(r.session_id, name="session_id")
        return out

    def upsert(
        self,
        records: Sequence[MemoryRecord],
        vectors: Vector | Sequence[Sequence[float]],
        *,
        epochs: Mapping[str, int] | None = None,
    ) -> None:
        """Insert or replace ``records`` (of one or several users) with their vectors.

        Upserting the same id again replaces the record and its vector (idempotent).

        Args:
            records: The records.
            vectors: One vector per record.
            epochs: Forget epochs the caller read (``user -> epoch``): the write is refused as a
                whole if one of them changed (the user was forgotten meanwhile).

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since (nothing is written).
            InvalidInputError: bad records, vectors of the wrong shape, zero or non-finite vectors,
                metadata that is not JSON.
            EmbeddingDimensionError: vectors of another dimension than the store's.
        """
        recs = self._check_records(records)
        if not recs:
            return
        m = as_matrix(vectors, len(recs), None)
        unit = _unit_rows(m)
        analyzed = [self.analyzer.analyze(r.search_text) for r in recs]
        rows = [
            (*_row(r, a), unit[i].astype("<f4").tobytes()) for i, (r, a) in enumerate(zip(recs, analyzed, strict=True))
        ]
        with self._guard():
            if self._dim is not None and m.shape[1] != self._dim:
                raise EmbeddingDimensionError(self._dim, int(m.shape[1]), hint=_REEMBED_HINT)
            with self._tx() as c:
                self._check_epochs(epochs)
                if self._dim is None:
                    stored = self._meta("embedder_dimension")  # another process may have bound one meanwhile
                    if stored is not None and int(stored) != m.shape[1]:
                        self._drop_partitions()
                        self._dim = int(stored)
                        raise EmbeddingDimensionError(self._dim, int(m.shape[1]), hint=_REEMBED_HINT)
                    self._set_meta("embedder_dimension", str(m.shape[1]))
                versions = self._bump_versions(r.user_id for r in recs)
                c.executemany(
                    "INSERT OR REPLACE INTO memories (user_id, id, session_id, content, analyzed, category, "
                    "importance, source, created_at, created_us, updated_at, last_accessed_at, access_count, "
                    "tags, metadata, status, version, supersedes, superseded_by, provenance, context, vector) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            self._dim = int(m.shape[1])
            parts = self._current(versions)
            for i, r in enumerate(recs):
                part = parts.get(r.user_id)
                if part is not None:
                    part.put(_FilterFields.of(r), analyzed[i].split(), unit[i])
            self._resized(parts)

    def update(
        self,
        records: Sequence[MemoryRecord],
        *,
        epochs: Mapping[str, int] | None = None,
        vectors: Vector | None = None,
    ) -> None:
        """Replace the stored fields of existing records (and their vectors, if given) in place.

        Args:
            records: The new versions of stored records.
            epochs: As in :meth:`upsert`.
            vectors: One new vector per record (a changed content); ``None`` keeps the stored ones.
                Unlike :meth:`upsert`, a memory deleted since the caller read it is not re-created.

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since (checked first).
            NotFoundError: an id does not exist for its user (nothing is written then).
            InvalidInputError: bad records, or vectors of the wrong shape, zero or non-finite.
            EmbeddingDimensionError: vectors of another dimension than the store's.
        """
        recs = self._check_records(records)
        if not recs:
            return
        unit = None if vectors is None else _unit_rows(as_matrix(vectors, len(recs), None))
        analyzed = [self.analyzer.analyze(r.search_text) for r in recs]
        with self._guard():
            if unit is not None and self._dim is not None and unit.shape[1] != self._dim:
                raise EmbeddingDimensionError(self._dim, int(unit.shape[1]), hint=_REEMBED_HINT)
            old_content: dict[tuple[str, str], str] = {}
            with self._tx() as c:
                self._check_epochs(epochs)
                for r in recs:
                    row = c.execute(
                        "SELECT content, context FROM memories WHERE user_id = ? AND id = ?", (r.user_id, r.id)
                    ).fetchone()
                    if row is None:
                        raise NotFoundError(f"memory {r.id!r} does not exist for user {r.user_id!r}")
                    old_content.setdefault((r.user_id, r.id), f"{row[1]}\n{row[0]}" if row[1] else str(row[0]))
                versions = self._bump_versions([r.user_id for r in recs])
                c.executemany(
                    "UPDATE memories SET session_id = ?, content = ?, analyzed = ?, category = ?, importance = ?, "
                    "source = ?, created_at = ?, created_us = ?, updated_at = ?, last_accessed_at = ?, "
                    "access_count = ?, tags = ?, metadata = ?, status = ?, version = ?, supersedes = ?, "
                    "superseded_by = ?, provenance = ?, context = ? WHERE user_id = ? AND id = ?",
                    [(*_row(r, a)[2:], r.user_id, r.id) for r, a in zip(recs, analyzed, strict=True)],
                )
                if unit is not None:
                    c.executemany(
                        "UPDATE memories SET vector = ? WHERE user_id = ? AND id = ?",
                        [(unit[i].astype("<f4").tobytes(), r.user_id, r.id) for i, r in enumerate(recs)],
                    )
            # Text the new versions no longer hold (an edit, a context cut out by a forget) leaves the WAL too.
            removed_text = any(old_content[(r.user_id, r.id)] not in r.search_text for r in recs)
            parts = self._current(versions)
            for i, (r, a) in enumerate(zip(recs, analyzed, strict=True)):
                part = parts.get(r.user_id)
                if part is not None:
                    changed = old_content[(r.user_id, r.id)] != r.search_text
                    old_content[(r.user_id, r.id)] = r.search_text
                    part.update(_FilterFields.of(r), a.split() if changed else None, None if unit is None else unit[i])
            self._resized(parts)
            if removed_text:
                self._forget_traces()

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        """``access_count += 1`` and ``last_accessed_at = when`` for these memories (missing ids skipped).

        Raises:
            InvalidInputError: bad user id or a naive ``when``.
        """
        check_id(user_id)
        ids = check_ids(ids)
        stamp = _iso(ensure_utc(when, name="when"))
        with self._guard(), self._tx() as c:
            for chunk in _chunks(ids):
                c.execute(
                    f"UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? "
                    f"WHERE user_id = ? AND id IN ({_marks(chunk)})",
                    (stamp, user_id, *chunk),
                )

    def delete(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete these memories of ``user_id``; return how many existed (missing ids are fine).

        The deleted cells are overwritten in the file (``secure_delete``) and the WAL truncated;
        the file is not rewritten, so a copy a past rebalance left in another page may stay (see
        the package docstring; :meth:`delete_user` rewrites the file).
        """
        check_id(user_id)
        ids = check_ids(ids)
        if not ids:
            return 0
        with self._guard():
            removed: builtins.list[str] = []
            with self._tx() as c:
                for chunk in _chunks(ids):
                    found = c.execute(
                        f"SELECT id FROM memories WHERE user_id = ? AND id IN ({_marks(chunk)})", (user_id, *chunk)
                    ).fetchall()
                    removed.extend(str(r[0]) for r in found)
                    c.execute(f"DELETE FROM memories WHERE user_id = ? AND id IN ({_marks(chunk)})", (user_id, *chunk))
                versions = self._bump_versions([user_id]) if removed else {}
            parts = self._current(versions)
            part = parts.get(user_id)
            if part is not None:
                for mid in removed:
                    part.remove(mid)
            self._resized(parts)
            if removed:
                self._forget_traces()
            return len(removed)

    def delete_user(self, user_id: str) -> int:
        """Delete every memory and turn of ``user_id``, bump its forget epoch, leave no copy of its text.

        The turns in the user's logs are recorded as forgotten first (:meth:`retired_turns`: hashes only).

        One transaction: a concurrent write that read the old epoch is refused afterwards. Then
        the file is rewritten (``VACUUM``: copies a rebalance left in the gap of pages that stay)
        and the WAL truncated; a reader pinning the WAL or another writer holding the file makes
        the wipe pending (:attr:`wipe_pending`).

        Returns:
            How many memories were deleted.
        """
        check_id(user_id)
        with self._guard():
            with self._tx() as c:
                logged = c.execute("SELECT id FROM turns WHERE user_id = ?", (user_id,))
                _retire(c, user_id, [str(r[0]) for r in logged], forgotten=True, epoch=self._epoch(user_id))
                n = c.execute("DELETE FROM memories WHERE user_id = ?", (user_id,)).rowcount
                rows = n + sum(
                    c.execute(f"DELETE FROM {table} WHERE user_id = ?", (user_id,)).rowcount
                    for table in ("turns", "extracted", "summarized")
                )
                c.execute(
                    "INSERT INTO forget_epochs (user_hash, epoch) VALUES (?, 1) "
                    "ON CONFLICT (user_hash) DO UPDATE SET epoch = epoch + 1",
                    (user_hash(user_id),),
                )
                self._bump_versions([user_id])
            self._drop_partition(user_id)
            self._forget_traces(rewrite=rows > 0)  # copies a rebalance left in shared pages: rebuild them
            return int(n)

    # -- reads -------------------------------------------------------------------------------
    def _fetch(self, user_id: str, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        out: dict[str, MemoryRecord] = {}
        for chunk in _chunks(ids):
            for row in self._conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM memories WHERE user_id = ? AND id IN ({_marks(chunk)})",
                (user_id, *chunk),
            ):
                rec = _record(row)
                out[rec.id] = rec
        return out

    def get(self, user_id: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]:
        """The records with these ids that exist for ``user_id``, in the order asked (missing skipped)."""
        check_id(user_id)
        ids = check_ids(ids)
        with self._guard():
            found = self._fetch(user_id, ids)
        return [found[i] for i in ids if i in found]

    def get_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """Stored unit-normalised float32 vectors by id (missing ids skipped)."""
        check_id(user_id)
        ids = check_ids(ids)
        out: dict[str, Vector] = {}
        with self._guard():
            for chunk in _chunks(ids):
                for mid, blob in self._conn.execute(
                    f"SELECT id, vector FROM memories WHERE user_id = ? AND id IN ({_marks(chunk)})", (user_id, *chunk)
                ):
                    out[str(mid)] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return out

    def list(
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        """Records of ``user_id`` passing ``filter``, oldest first (``filter=None``: every status)."""
        check_id(user_id)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative int or None, got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a non-negative int, got {offset!r}")
        where, params = _where(user_id, filter)
        with self._guard():
            rows = self._conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM memories WHERE {where} ORDER BY created_us, id LIMIT ? OFFSET ?",
                (*params, -1 if limit is None else limit, offset),
            ).fetchall()
        return [_record(r) for r in rows]

    def count(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:
        """Number of memories of one user (or of all users), optionally passing ``filter``."""
        if user_id is not None:
            check_id(user_id)
        where, params = _where(user_id, filter)
        with self._guard():
            return int(self._conn.execute(f"SELECT COUNT(*) FROM memories WHERE {where}", params).fetchone()[0])

    def users(self) -> builtins.list[str]:
        """Ids of the users that have memories, sorted."""
        with self._guard():
            return [str(r[0]) for r in self._conn.execute("SELECT DISTINCT user_id FROM memories ORDER BY user_id")]

    # -- search ------------------------------------------------------------------------------
    def neighbours(
        self, user_id: str, vectors: Vector, *, threshold: float, top: int
    ) -> builtins.list[builtins.list[Neighbour]]:
        """The active memories of ``user_id`` most similar to each of ``vectors`` (the writer's dedup check).

        Served from the same in-process index as :meth:`search` (no second copy of the vectors):
        one matrix product per block of query rows.

        Args:
            user_id: Whose memories.
            vectors: Unit-normalised query vectors, one per row.
            threshold: Minimum cosine similarity.
            top: At most this many neighbours per row.

        Returns:
            Per row, ``(id, cosine, category)`` of at most ``top`` active memories with cosine at
            or above ``threshold``, most similar first (ties by id).

        Raises:
            InvalidInputError: bad user id, ``top`` < 1, or vectors that are not a finite 2-D array.
            EmbeddingDimensionError: vectors of another dimension than the store's.
        """
        check_id(user_id)
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise InvalidInputError(f"top must be a positive int, got {top!r}")
        q = np.asarray(vectors, dtype=np.float32)
        m = as_matrix(q, q.shape[0] if q.ndim == 2 else -1, None)
        with self._guard():
            if self._dim is not None and m.shape[1] != self._dim:
                raise EmbeddingDimensionError(self._dim, int(m.shape[1]), hint=_REEMBED_HINT)
            return self._partition(user_id).neighbours(m, float(threshold), top)

    def mean_vector(self, user_id: str) -> Vector | None:
        """The mean of ``user_id``'s active unit vectors, from the search index (``retrieval.centre_weight``).

        Raises:
            InvalidInputError: bad user id.
        """
        check_id(user_id)
        with self._guard():
            if self._dim is None:
                return None
            return self._partition(user_id).mean_active()

    def search(self, request: SearchRequest) -> builtins.list[StoreHit]:
        """Hybrid search within ``request.user_id``'s memories (Weaviate semantics).

        ``alpha`` 1.0 = pure vector, 0.0 = pure keyword (BM25); ``query=None`` forces alpha 1.

        Raises:
            InvalidInputError: not a SearchRequest, or no vector with alpha > 0, or a zero vector.
            EmbeddingDimensionError: the query vector has another dimension than the store's.
        """
        if not isinstance(request, SearchRequest):
            raise InvalidInputError(f"expected SearchRequest, got {type(request).__name__}")
        q = request.vector
        if hybrid_weights(request.effective_alpha)[0] is not None and q is None:
            raise InvalidInputError(
                "a query vector is required when alpha > 0 (alpha 1.0 = pure vector, 0.0 = pure keyword/BM25)"
            )
        unit_q = None if q is None else _unit_vector(np.asarray(q, dtype=np.float32))
        counts = query_term_counts(self.analyzer.query_tokens(request.query)) if request.query is not None else {}
        attempt = 1
        while True:
            with self._guard():
                hits = self._search(request, counts, unit_q, last=attempt >= _SEARCH_ATTEMPTS)
            if hits is not None:
                return hits
            attempt += 1

    def _search(
        self,
        request: SearchRequest,
        counts: dict[str, int],
        unit_q: npt.NDArray[np.float32] | None,
        *,
        last: bool,
    ) -> builtins.list[StoreHit] | None:
        """One attempt of :meth:`search` (under the guard); ``None`` when a hit was deleted meanwhile.

        The partition is checked against the file, then the hits' rows are read: another process
        can delete a hit between the two. Then the search runs again on the partition as it is
        now; the ``last`` attempt leaves such hits out (what was deleted is not returned).
        """
        alpha = request.effective_alpha
        w_vec, w_kw = hybrid_weights(alpha)
        if unit_q is not None and self._dim is not None and unit_q.shape[0] != self._dim:
            raise EmbeddingDimensionError(self._dim, int(unit_q.shape[0]), hint=_REEMBED_HINT)
        part = self._partition(request.user_id)
        if part.n == 0:
            return []
        mask = part.mask(request.filter)
        k = candidate_limit(request.limit)
        # The full product only when the vector leg runs; otherwise only the hits' rows.
        sims = part.similarities(unit_q) if (w_vec is not None and unit_q is not None) else None
        vec_ids, vec_dist = part.vector_leg(sims, mask, k) if sims is not None else (None, None)
        kw_ids, kw_scores = part.keyword_leg(counts, mask, k) if w_kw is not None else ([], _NO_SCORES)
        fused = hybrid_fuse_legs(
            alpha=alpha,
            vector_ids=vec_ids,
            vector_distances=vec_dist,
            keyword_ids=kw_ids,
            keyword_scores=kw_scores,
            fusion=request.fusion,
            limit=request.limit,
            offset=request.offset,
            max_vector_distance=request.max_vector_distance,
            auto_limit=request.auto_limit,
        )
        if not fused:
            return []
        records = self._fetch(request.user_id, [h.id for h in fused])
        if len(records) < len(fused):
            if not last:
                return None
            fused = [h for h in fused if h.id in records]
        similarity = _similarities(part, fused, unit_q, sims)
        return [
            StoreHit(
                record=records[h.id],
                score=h.score,
                keyword_score=h.keyword_score,
                vector_similarity=sim,
                vector=part.matrix[part.row_of[h.id]].copy(),  # a copy: the partition's rows move
            )
            for h, sim in zip(fused, similarity, strict=True)
        ]
