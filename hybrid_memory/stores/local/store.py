"""The embedded default store: one SQLite file, Weaviate-exact hybrid ranking in process.

:class:`LocalStore` keeps every memory in one SQLite file (or in memory for ``":memory:"``) and
answers hybrid searches from an in-process index per user, built lazily from SQLite and kept up
to date on every write:

* a float32 matrix of unit vectors, so the vector leg is one matrix-vector product and an exact
  top-K (:func:`numpy.partition`, ties at the cut-off kept and ordered by id);
* BM25 postings (``term -> rows, tf``), document lengths and ``avgdl``, so the keyword leg is
  Weaviate's BlockMax BM25 (:mod:`hybrid_memory.ranking`) with **per-user statistics**, like a
  Weaviate tenant holding the same objects. Every stored memory of the user counts in ``N``,
  ``df`` and ``avgdl`` whatever its status; filters restrict the candidates, never the
  statistics;
* filter columns (status, category, creation time, session, tags) as numpy arrays.

The analysed text (the :class:`~hybrid_memory.analyzer.Analyzer` tokens) is stored with each
memory, so an index is rebuilt without re-tokenising; opening a file with another analyzer
re-analyses it. When another connection (another process, the CLI) commits to the file, the
in-process indexes are dropped and rebuilt on the next search (``PRAGMA data_version``).

Both legs are fused with :func:`hybrid_memory.ranking.hybrid_fuse`, so ``alpha`` means the same
as on Weaviate: 1.0 = pure vector, 0.0 = pure keyword (BM25).

Conversation state lives in the same file: table ``turns`` is the durable, ordered log of every
turn ``add_turn`` accepted (``seq`` orders it across processes), and ``forget_epochs`` holds each
forgotten user's epoch under a SHA-256 of the user id (so a forgotten id is not kept in clear).
:meth:`LocalStore.delete_user` deletes the memories and turns and bumps the epoch in one
transaction; writes that carry ``epochs`` check them inside their own transaction.

Durability: WAL journal with ``synchronous=FULL``; a write that returned has been committed and
fsynced, so it survives ``kill -9`` of the process and a power cut. Right to be forgotten: the
connection runs with ``PRAGMA secure_delete=ON`` (SQLite overwrites deleted content with zeros)
and :meth:`LocalStore.delete` / :meth:`LocalStore.delete_user` then checkpoint and truncate the
WAL, so no copy of the deleted text stays in the database file or its WAL. ``VACUUM`` was not
chosen because it rewrites the whole file on every forget.

A reader in another connection (another process, the CLI, the inspector) that holds a read
transaction pins the WAL: until it ends, the checkpoint cannot copy the overwritten pages into the
file nor truncate the WAL, so the old text is still on disk. The store then does not pretend: it
retries the checkpoint for ``wipe_timeout`` seconds (0.5 by default, never the 5 s busy timeout),
and if the reader is still there it records a *pending wipe* in the file's ``meta`` table and
reports it (:attr:`LocalStore.wipe_pending`; ``HybridMemory.forget_user(...).wipe_pending``; exit
code 3 of ``hybrid-memory forget``). The wipe is finished by the next write or open of the file by
any process once the reader has left, by :meth:`LocalStore.finish_wipe`, or on :meth:`LocalStore.close`.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from hybrid_memory.analyzer import Analyzer
from hybrid_memory.errors import (
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    SchemaError,
    StoreError,
    StoreUnavailableError,
    UserForgottenError,
)
from hybrid_memory.ranking import (
    FusedHit,
    bm25_accumulate,
    candidate_limit,
    cosine_distance,
    hybrid_fuse_legs,
    hybrid_weights,
    order_by_key_then_id,
    query_term_counts,
)
from hybrid_memory.records import Category, MemoryRecord, Status, Turn, check_id, check_text, ensure_utc
from hybrid_memory.stores.base import AsyncFromSyncStore, check_ids, user_hash
from hybrid_memory.stores.budget import CacheBudget, cache_budget
from hybrid_memory.stores.nearest import Neighbour, nearest
from hybrid_memory.values import MemoryFilter, SearchRequest, SessionLog, StoreHit, Vector, as_matrix

__all__ = ["LocalStore"]

SCHEMA_VERSION = "1"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
_STATUS_CODES: dict[str, int] = {s: i for i, s in enumerate(get_args(Status))}
_CATEGORY_CODES: dict[str, int] = {c: i for i, c in enumerate(get_args(Category))}
_CATEGORY_NAMES: tuple[str, ...] = (*get_args(Category), "")  # code -1 (unknown) -> ""
_ACTIVE = _STATUS_CODES["active"]
#: Estimated bytes of a partition (see _Partition.nbytes): per row beyond its vector and columns
#: (id string, row map, token counts), per posting entry and per distinct term.
_ROW_BYTES = 480
_POSTING_BYTES = 90
_TERM_BYTES = 250
#: Query rows x partition rows per block of :meth:`LocalStore.neighbours` (a 16 MB float32 block).
_NEIGHBOUR_BLOCK = 1 << 22
_CHUNK = 500  # ids per "IN (...)" query
#: Query terms whose BM25 contributions a partition keeps between writes (then computed per query).
_BM25_CACHE_TERMS = 4096
_NO_SCORES: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
_REEMBED_HINT = "run `hybrid-memory reembed` to re-embed the store with the new embedder, or use another store"
#: ``meta`` key present while a forget's text may still be on disk (a reader pinned the WAL).
_WIPE_KEY = "wipe_pending"
#: Default seconds a forget waits for readers that pin the WAL before reporting a pending wipe.
DEFAULT_WIPE_TIMEOUT = 0.5
_BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS memories (
    user_id          TEXT NOT NULL,
    id               TEXT NOT NULL,
    session_id       TEXT,
    content          TEXT NOT NULL,
    analyzed         TEXT NOT NULL,
    category         TEXT NOT NULL,
    importance       REAL NOT NULL,
    source           TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    created_us       INTEGER NOT NULL,
    updated_at       TEXT NOT NULL,
    last_accessed_at TEXT,
    access_count     INTEGER NOT NULL,
    tags             TEXT NOT NULL,
    metadata         TEXT NOT NULL,
    status           TEXT NOT NULL,
    version          INTEGER NOT NULL,
    supersedes       TEXT,
    superseded_by    TEXT,
    provenance       TEXT NOT NULL,
    vector           BLOB NOT NULL,
    context          TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (user_id, id)
);
CREATE INDEX IF NOT EXISTS memories_by_time ON memories (user_id, created_us, id);
CREATE TABLE IF NOT EXISTS turns (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    id           TEXT NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    timestamp    TEXT NOT NULL,
    importance   REAL NOT NULL,
    key_frame    INTEGER NOT NULL,
    key_frame_reason TEXT,
    tokens       INTEGER NOT NULL,
    scoring_note TEXT
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns (user_id, session_id, seq);
CREATE TABLE IF NOT EXISTS forget_epochs (
    user_hash TEXT PRIMARY KEY,
    epoch     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS user_versions (
    user_hash TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
);
"""

_RECORD_COLUMNS = (
    "id, user_id, session_id, content, category, importance, source, created_at, updated_at, "
    "last_accessed_at, access_count, tags, metadata, status, version, supersedes, superseded_by, provenance, context"
)


def _micros(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be JSON-serialisable with finite numbers: {exc}") from exc


def _unit_rows(m: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    with np.errstate(over="ignore", under="ignore"):  # an overflowing norm is rejected just below
        norms = np.linalg.norm(m, axis=1, keepdims=True).astype(np.float32)
    if np.any(norms == 0) or not np.all(np.isfinite(norms)):
        raise InvalidInputError("vectors must have a non-zero, finite norm (cosine distance needs a direction)")
    out: npt.NDArray[np.float32] = (m / norms).astype(np.float32)
    return out


def _code_lut(names: Sequence[str] | None, codes: Mapping[str, int]) -> npt.NDArray[np.bool_]:
    """A boolean table indexed by code: ``True`` for the codes of ``names`` (unknown names ignored)."""
    lut = np.zeros(len(codes) + 1, dtype=np.bool_)  # the last entry is code -1 (unknown category)
    for name in names or ():
        code = codes.get(name)
        if code is not None:
            lut[code] = True
    return lut


def _unit_vector(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``_unit_rows(v[None, :])[0]`` for one vector, without the 2-D detour (same float32 result)."""
    with np.errstate(over="ignore", under="ignore"):  # an overflowing norm is rejected just below
        norm = np.sqrt(np.add.reduce(v * v))
    if not (norm > 0 and np.isfinite(norm)):
        raise InvalidInputError("vectors must have a non-zero, finite norm (cosine distance needs a direction)")
    out: npt.NDArray[np.float32] = v / norm
    return out


def _select_smallest(key: npt.NDArray[Any], k: int) -> npt.NDArray[np.intp]:
    """Indices of the ``k`` smallest keys plus every index tied with the k-th (unordered)."""
    if key.size <= k:
        return np.arange(key.size)
    kth = np.partition(key, k - 1)[k - 1]
    return np.flatnonzero(key <= kth)


class _Partition:
    """In-process index of one user's memories; rows are dense and swap-removed."""

    matrix: npt.NDArray[np.float32]
    dl: npt.NDArray[np.float64]
    status: npt.NDArray[np.int8]
    category: npt.NDArray[np.int8]
    created: npt.NDArray[np.int64]
    session: npt.NDArray[np.int32]

    def __init__(self, dim: int | None) -> None:
        self.dim = dim
        self.n = 0
        #: The user's change counter (``user_versions``) this partition reflects.
        self.version = 0
        #: The ``PRAGMA data_version`` at which :attr:`version` was last checked against the file.
        self.checked = -1
        #: Posting entries (term, row) held, for :meth:`nbytes`.
        self.entries = 0
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.term_counts: list[dict[str, int]] = []
        self.tags: list[tuple[str, ...]] = []
        # Postings live in one of two forms per term: ``_arrays[t]`` alone (built in bulk on
        # load, read-only) or ``_postings[t]`` (a ``{row: tf}`` dict, made on the first change
        # of the term; ``_arrays[t]`` is then a cache derived from it).
        self._postings: dict[str, dict[int, int]] = {}
        self._arrays: _FrozenPostings = _FrozenPostings()
        self.tag_rows: dict[str, set[int]] = {}
        self.session_codes: dict[str | None, int] = {None: -1}
        # BM25 contributions per (term, count in query), valid until the next change of any
        # posting, length or N (cleared by every mutation, see _changed).
        self._bm25_cache: dict[tuple[str, int], npt.NDArray[np.float64]] = {}
        self.total_tokens = 0
        self.docs_with_tokens = 0
        self._alloc(16)

    # -- storage ---------------------------------------------------------------------------
    def _alloc(self, capacity: int) -> None:
        dim = self.dim or 0
        matrix = np.zeros((capacity, dim), dtype=np.float32)
        dl = np.zeros(capacity, dtype=np.float64)
        status = np.zeros(capacity, dtype=np.int8)
        category = np.zeros(capacity, dtype=np.int8)
        created = np.zeros(capacity, dtype=np.int64)
        session = np.zeros(capacity, dtype=np.int32)
        if self.n:
            matrix[: self.n] = self.matrix[: self.n]
            dl[: self.n] = self.dl[: self.n]
            status[: self.n] = self.status[: self.n]
            category[: self.n] = self.category[: self.n]
            created[: self.n] = self.created[: self.n]
            session[: self.n] = self.session[: self.n]
        self.matrix, self.dl, self.status, self.category = matrix, dl, status, category
        self.created, self.session = created, session

    def nbytes(self) -> int:
        """Estimated bytes held (arrays at capacity, Python objects per row, posting and term)."""
        cap = int(self.matrix.shape[0])
        arrays = cap * ((self.dim or 0) * 4 + 8 + 1 + 1 + 8 + 4)
        terms = len(self._arrays) + len(self._postings)
        return arrays + self.n * _ROW_BYTES + self.entries * _POSTING_BYTES + terms * _TERM_BYTES

    def _ensure_row(self) -> int:
        if self.n >= self.matrix.shape[0]:
            self._alloc(max(16, 2 * self.matrix.shape[0]))
        return self.n

    def _changed(self) -> None:
        """Drop what is derived from postings, lengths and N (called by every mutation)."""
        self._bm25_cache.clear()

    def _mutable(self, term: str) -> dict[int, int]:
        """The dict form of a term's postings, to be changed by the caller."""
        self._changed()
        p = self._postings.get(term)
        if p is None:
            frozen = self._arrays.get(term)
            p = {} if frozen is None else dict(zip(frozen[0].tolist(), frozen[1].astype(int).tolist(), strict=True))
            self._postings[term] = p
        self._arrays.pop(term, None)
        return p

    def _index_terms(self, row: int, tokens: Sequence[str]) -> None:
        counts: dict[str, int] = Counter(tokens)
        for t, c in counts.items():
            self._mutable(t)[row] = c
        self.term_counts[row] = counts
        self.entries += len(counts)
        self.dl[row] = len(tokens)
        self.total_tokens += len(tokens)
        self.docs_with_tokens += 1 if tokens else 0

    def _unindex_terms(self, row: int) -> None:
        for t in self.term_counts[row]:
            p = self._mutable(t)
            del p[row]
            if not p:
                del self._postings[t]
        length = int(self.dl[row])
        self.total_tokens -= length
        self.docs_with_tokens -= 1 if length else 0
        self.entries -= len(self.term_counts[row])
        self.term_counts[row] = {}
        self.dl[row] = 0

    def _set_tags(self, row: int, tags: tuple[str, ...]) -> None:
        for tag in self.tags[row]:
            rows = self.tag_rows[tag]
            rows.discard(row)
            if not rows:
                del self.tag_rows[tag]
        self.tags[row] = tags
        for tag in tags:
            self.tag_rows.setdefault(tag, set()).add(row)

    def _set_filters(self, row: int, rec: _FilterFields) -> None:
        self.status[row] = _STATUS_CODES[rec.status]
        self.category[row] = _CATEGORY_CODES.get(rec.category, -1)
        self.created[row] = rec.created_us
        code = self.session_codes.get(rec.session_id)
        if code is None:
            code = len(self.session_codes) - 1
            self.session_codes[rec.session_id] = code
        self.session[row] = code
        self._set_tags(row, rec.tags)

    # -- mutations -------------------------------------------------------------------------
    def put(self, rec: _FilterFields, tokens: Sequence[str], vector: npt.NDArray[np.float32]) -> None:
        """Insert or replace one memory."""
        self._changed()
        if self.dim is None:
            self.dim = int(vector.shape[0])
            self._alloc(self.matrix.shape[0])
        row = self.row_of.get(rec.id)
        if row is None:
            row = self._ensure_row()
            self.n += 1
            self.ids.append(rec.id)
            self.row_of[rec.id] = row
            self.term_counts.append({})
            self.tags.append(())
        else:
            self._unindex_terms(row)
        self.matrix[row] = vector
        self._index_terms(row, tokens)
        self._set_filters(row, rec)

    def bulk_load(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Fill an empty partition in one pass (what :meth:`put` does row by row).

        Rows are ``(id, analyzed, status, category, created_us, session_id, tags, vector)``.
        """
        self._changed()
        n = len(rows)
        blobs = b"".join(r[7] for r in rows)
        matrix = np.frombuffer(blobs, dtype="<f4").reshape(n, -1)
        self.dim = int(matrix.shape[1])
        self.n = 0
        self._alloc(n)
        self.matrix[:n] = matrix
        self.ids = [str(r[0]) for r in rows]
        self.row_of = {mid: i for i, mid in enumerate(self.ids)}
        self.status[:n] = [_STATUS_CODES[r[2]] for r in rows]
        self.category[:n] = [_CATEGORY_CODES.get(r[3], -1) for r in rows]
        self.created[:n] = [int(r[4]) for r in rows]
        codes = self.session_codes
        sessions = []
        for r in rows:
            code = codes.get(r[5])
            if code is None:
                code = codes[r[5]] = len(codes) - 1
            sessions.append(code)
        self.session[:n] = sessions
        self.tags = [tuple(json.loads(r[6])) if r[6] != "[]" else () for r in rows]
        for row, tags in enumerate(self.tags):
            for tag in tags:
                self.tag_rows.setdefault(tag, set()).add(row)
        term_counts: builtins.list[dict[str, int]] = []
        lengths = []
        for r in rows:
            tokens = str(r[1]).split()
            counts: dict[str, int] = {}
            for t in tokens:
                counts[t] = counts.get(t, 0) + 1
            term_counts.append(counts)
            lengths.append(len(tokens))
        self.term_counts = term_counts
        self.entries = total_entries = sum(len(c) for c in term_counts)
        self.dl[:n] = lengths
        self.total_tokens = sum(lengths)
        self.docs_with_tokens = sum(1 for x in lengths if x)
        # Frozen postings: one stable sort of (term id, row) pairs, sliced per term.
        vocab: dict[str, int] = {}
        total = total_entries
        term_ids = np.fromiter(
            (vocab.setdefault(t, len(vocab)) for c in term_counts for t in c), dtype=np.int64, count=total
        )
        tfs = np.fromiter((v for c in term_counts for v in c.values()), dtype=np.float64, count=total)
        doc_rows = np.repeat(np.arange(n, dtype=np.int64), [len(c) for c in term_counts])
        order = np.argsort(term_ids, kind="stable")
        doc_rows, tfs = doc_rows[order], tfs[order]
        bounds = np.concatenate(([0], np.cumsum(np.bincount(term_ids, minlength=len(vocab)))))
        self._postings.clear()
        self._arrays = _FrozenPostings(vocab, doc_rows, tfs, bounds)
        self.n = n

    def update(self, rec: _FilterFields, tokens: Sequence[str] | None) -> None:
        """Change the filter fields (and the tokens when the content changed) of one memory."""
        self._changed()
        row = self.row_of.get(rec.id)
        if row is None:
            return
        if tokens is not None:
            self._unindex_terms(row)
            self._index_terms(row, tokens)
        self._set_filters(row, rec)

    def remove(self, memory_id: str) -> None:
        """Remove one memory, moving the last row into its place."""
        self._changed()
        row = self.row_of.pop(memory_id, None)
        if row is None:
            return
        self._unindex_terms(row)
        self._set_tags(row, ())
        last = self.n - 1
        if row != last:
            moved = self.ids[last]
            self.ids[row] = moved
            self.row_of[moved] = row
            self.matrix[row] = self.matrix[last]
            for arr in (self.dl, self.status, self.category, self.created, self.session):
                arr[row] = arr[last]
            counts = self.term_counts[last]
            for t, c in counts.items():
                p = self._mutable(t)
                del p[last]
                p[row] = c
            self.term_counts[row] = counts
            tags = self.tags[last]
            self._set_tags(last, ())
            self.tags[row] = ()
            self._set_tags(row, tags)
        self.ids.pop()
        self.term_counts.pop()
        self.tags.pop()
        self.n -= 1

    # -- queries ---------------------------------------------------------------------------
    def mask(self, flt: MemoryFilter) -> npt.NDArray[np.bool_]:
        n = self.n
        m = _code_lut(flt.statuses, _STATUS_CODES)[self.status[:n]]
        if flt.categories is not None:
            m &= _code_lut(flt.categories, _CATEGORY_CODES)[self.category[:n]]
        if flt.tags is not None:
            tagged = np.zeros(n, dtype=np.bool_)
            for tag in flt.tags:
                rows = self.tag_rows.get(tag)
                if rows:
                    tagged[np.fromiter(rows, dtype=np.intp, count=len(rows))] = True
            m &= tagged
        if flt.since is not None:
            m &= self.created[:n] >= _micros(flt.since)
        if flt.until is not None:
            m &= self.created[:n] < _micros(flt.until)
        if flt.session_id is not None:
            code = self.session_codes.get(flt.session_id)
            if code is None:
                m[:] = False
            else:
                m &= self.session[:n] == code
        return m

    def similarities(self, unit_query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Dot products with every row (cosine similarity: rows and query are unit vectors).

        ``einsum`` runs single-threaded SIMD loops: with BLAS's own thread pool the product
        was several times slower (p95) whenever other threads or processes competed for the
        cores, which is the normal case in an agent server.
        """
        sims: npt.NDArray[np.float32] = np.einsum("ij,j->i", self.matrix[: self.n], unit_query)
        return sims

    def vector_leg(
        self, sims: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], k: int
    ) -> tuple[builtins.list[str], npt.NDArray[np.float32]]:
        """Exact top-``k`` allowed rows by cosine distance ascending, then id ascending.

        Returns:
            ``(ids, float32 distances)`` in that order.
        """
        allowed: npt.NDArray[np.intp] | None = None  # None: every row
        if not mask.all():
            allowed = np.flatnonzero(mask)
            if allowed.size == 0:
                return [], np.zeros(0, dtype=np.float32)
        dist = np.maximum(np.float32(0), np.float32(1) - (sims if allowed is None else sims[allowed]))
        sel = _select_smallest(dist, k)
        d = dist[sel]
        ids = self.ids
        sel_ids = [ids[r] for r in (sel if allowed is None else allowed[sel]).tolist()]
        order = order_by_key_then_id(d, sel_ids)[:k]
        return [sel_ids[i] for i in order], d[np.array(order, dtype=np.intp)]

    def keyword_leg(
        self, query_counts: Mapping[str, int], mask: npt.NDArray[np.bool_], k: int
    ) -> tuple[builtins.list[str], npt.NDArray[np.float32]]:
        """Top-``k`` allowed rows by BM25 descending, then id ascending (statistics unfiltered).

        Returns:
            ``(ids, float32 BM25 scores)`` in that order.
        """
        empty: tuple[builtins.list[str], npt.NDArray[np.float32]] = ([], np.zeros(0, dtype=np.float32))
        if not query_counts or self.docs_with_tokens == 0:
            return empty
        arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        for term in query_counts:
            entry = self._posting_arrays(term)
            if entry is not None:
                arrays[term] = entry
        if not arrays:
            return empty
        scores, hit = bm25_accumulate(
            query_counts,
            arrays,
            self.dl[: self.n],
            n_docs=self.n,
            avgdl=self.total_tokens / self.docs_with_tokens,
            cache=self._bm25_cache if len(self._bm25_cache) < _BM25_CACHE_TERMS else None,
        )
        cand = np.flatnonzero(hit & mask)
        if cand.size == 0:
            return empty
        key = -scores[cand]
        sel = _select_smallest(key, k)
        ids = self.ids
        sel_ids = [ids[r] for r in cand[sel].tolist()]
        order = order_by_key_then_id(key[sel], sel_ids)[:k]
        return [sel_ids[i] for i in order], scores[cand[sel[np.array(order, dtype=np.intp)]]]

    def neighbours(
        self, unit: npt.NDArray[np.float32], threshold: float, top: int
    ) -> builtins.list[builtins.list[Neighbour]]:
        """Per query row: up to ``top`` active rows with cosine >= ``threshold``, most similar first, then id.

        One matrix product per block of query rows (blocks bounded by :data:`_NEIGHBOUR_BLOCK`).
        """
        n = self.n
        if n == 0 or len(unit) == 0:
            return [[] for _ in range(len(unit))]
        inactive = self.status[:n] != _ACTIVE
        names = _CategoryNames(self.category)
        step = max(1, _NEIGHBOUR_BLOCK // n)
        found: builtins.list[builtins.list[Neighbour]] = []
        for lo in range(0, len(unit), step):
            sims = unit[lo : lo + step] @ self.matrix[:n].T
            if inactive.any():
                sims[:, inactive] = -np.inf
            found.extend(nearest(sims, self.ids, names, threshold, top))
        return found

    def _posting_arrays(self, term: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None:
        cached = self._arrays.get(term)
        if cached is None:
            p = self._postings.get(term)
            if p is None:
                return None
            cached = (
                np.fromiter(p.keys(), dtype=np.int64, count=len(p)),
                np.fromiter(p.values(), dtype=np.float64, count=len(p)),
            )
            self._arrays[term] = cached
        return cached


_Posting = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]


class _FrozenPostings:
    """Postings built in bulk, ``term -> (rows, tfs)`` sliced on demand out of two flat arrays.

    No per-term objects are made on load (a cold partition is built faster and holds ~250 bytes
    less per distinct term); terms set or popped later live in an overlay (popped = ``None``).
    """

    def __init__(
        self,
        vocab: dict[str, int] | None = None,
        rows: npt.NDArray[np.int64] | None = None,
        tfs: npt.NDArray[np.float64] | None = None,
        bounds: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self._vocab: dict[str, int] = vocab if vocab is not None else {}
        self._rows = rows if rows is not None else np.zeros(0, dtype=np.int64)
        self._tfs = tfs if tfs is not None else np.zeros(0, dtype=np.float64)
        self._bounds = bounds if bounds is not None else np.zeros(1, dtype=np.int64)
        self._over: dict[str, _Posting | None] = {}

    def __len__(self) -> int:
        return len(self._vocab) + len(self._over)

    def get(self, term: str) -> _Posting | None:
        """The postings of ``term`` (``None``: none frozen)."""
        if term in self._over:
            return self._over[term]
        i = self._vocab.get(term)
        if i is None:
            return None
        lo, hi = int(self._bounds[i]), int(self._bounds[i + 1])
        return self._rows[lo:hi], self._tfs[lo:hi]

    def __setitem__(self, term: str, value: _Posting) -> None:
        self._over[term] = value

    def pop(self, term: str, default: None = None) -> _Posting | None:
        """Remove ``term`` and return what it held (``default`` when nothing)."""
        value = self.get(term)
        if value is not None or term in self._vocab:
            self._over[term] = None
        return value if value is not None else default


class _CategoryNames(Sequence[str]):
    """Category names of a partition's rows, looked up only for the rows asked for."""

    def __init__(self, codes: npt.NDArray[np.int8]) -> None:
        self._codes = codes

    def __len__(self) -> int:
        return len(self._codes)

    def __getitem__(self, row: Any) -> Any:
        return _CATEGORY_NAMES[int(self._codes[row])]


class _FilterFields:
    """The fields of a memory that searches filter on."""

    __slots__ = ("category", "created_us", "id", "session_id", "status", "tags")

    def __init__(
        self, id: str, status: str, category: str, created_us: int, session_id: str | None, tags: tuple[str, ...]
    ) -> None:
        self.id = id
        self.status = status
        self.category = category
        self.created_us = created_us
        self.session_id = session_id
        self.tags = tags

    @classmethod
    def of(cls, rec: MemoryRecord) -> _FilterFields:
        return cls(rec.id, rec.status, rec.category, _micros(rec.created_at), rec.session_id, tuple(rec.tags))


class LocalStore(AsyncFromSyncStore):
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
        if isinstance(wipe_timeout, bool) or not isinstance(wipe_timeout, (int, float)) or not 0 <= wipe_timeout <= 60:
            raise InvalidInputError(f"wipe_timeout must be a number of seconds in [0, 60], got {wipe_timeout!r}")
        self._wipe_timeout = float(wipe_timeout)
        self._wipe_pending = False
        self._wiping = False
        raw = os.fspath(path)
        if not isinstance(raw, str):
            raise InvalidInputError("path must be a str or os.PathLike[str]")
        self._memory = raw == ":memory:"
        self._path = raw
        self._lock = threading.RLock()
        self._partitions: dict[str, _Partition] = {}
        self._budget: CacheBudget = budget if budget is not None else cache_budget()
        self._evict = self._budget.owner(self, _drop_partition)
        self._data_version = -1
        self._closed = False
        try:
            if not self._memory:
                Path(raw).expanduser().parent.mkdir(parents=True, exist_ok=True)
                self._path = str(Path(raw).expanduser())
            self._conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
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
            mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailableError(f"cannot enable WAL on {self._path!r} (journal mode {mode})")
            c.execute("PRAGMA synchronous=FULL")
        with self._tx():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            version = self._meta("schema_version")
            if version is None:
                self._set_meta("schema_version", SCHEMA_VERSION)
            elif version != SCHEMA_VERSION:
                raise SchemaError(f"{self._path!r} has schema version {version}; this library reads {SCHEMA_VERSION}")
            columns = {str(r[1]) for r in c.execute("PRAGMA table_info(memories)")}
            if "context" not in columns:  # files written before memories had a search context (additive)
                c.execute("ALTER TABLE memories ADD COLUMN context TEXT NOT NULL DEFAULT ''")
            stored = self._meta("analyzer")
            if stored != self.analyzer.name:
                if stored is not None:
                    self._reanalyze()
                self._set_meta("analyzer", self.analyzer.name)
        dim = self._meta("embedder_dimension")
        self._dim: int | None = int(dim) if dim is not None else None
        if not self._memory and self._meta(_WIPE_KEY) is not None:
            self._wipe_pending = True
            self._wipe(0.0)  # a forget left text behind a reader: finish it if the reader has left

    def _reanalyze(self) -> None:
        rows = self._conn.execute("SELECT user_id, id, content, context FROM memories").fetchall()
        self._conn.executemany(
            "UPDATE memories SET analyzed = ? WHERE user_id = ? AND id = ?",
            [
                (self.analyzer.analyze(f"{context}\n{content}" if context else content), user_id, mid)
                for user_id, mid, content, context in rows
            ],
        )

    def close(self) -> None:
        """Close the database. Idempotent; later calls raise StoreUnavailableError."""
        with self._lock:
            if self._closed:
                return
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

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

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

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

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
        wait = self._wipe_timeout if timeout is None else timeout
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
            raise InvalidInputError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
        with self._guard():
            if self._memory:
                return True
            return self._wipe(float(wait))

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
        """Record the embedder on first use, or check that its dimension matches.

        The first name is kept; only the dimension is enforced.

        Raises:
            EmbeddingDimensionError: the store holds vectors of another dimension (the message
                names both dimensions and the ``hybrid-memory reembed`` command).
            InvalidInputError: empty name or non-positive dimension.
        """
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError("embedder name must be a non-empty str")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}")
        with self._guard():
            if self._dim is not None and self._dim != dimension:
                stored = self._meta("embedder_name") or "unknown"
                raise EmbeddingDimensionError(
                    self._dim,
                    dimension,
                    hint=f"the store was built with embedder {stored!r} ({self._dim}-d) and cannot take "
                    f"{name!r} ({dimension}-d); {_REEMBED_HINT}",
                )
            if self._dim is None or self._meta("embedder_name") is None:
                with self._tx():
                    if self._meta("embedder_name") is None:
                        self._set_meta("embedder_name", name)
                    self._set_meta("embedder_dimension", str(dimension))
            self._dim = dimension

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

    def _row(self, r: MemoryRecord, analyzed: str) -> tuple[Any, ...]:
        return (
            r.user_id,
            r.id,
            r.session_id,
            r.content,
            analyzed,
            r.category,
            float(r.importance),
            r.source,
            _iso(r.created_at),
            _micros(r.created_at),
            _iso(r.updated_at),
            None if r.last_accessed_at is None else _iso(r.last_accessed_at),
            r.access_count,
            _json(builtins.list(r.tags), "tags"),
            _json(r.metadata, "metadata"),
            r.status,
            r.version,
            r.supersedes,
            r.superseded_by,
            _json(builtins.list(r.provenance), "provenance"),
            r.context,
        )

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
            (*self._row(r, a), unit[i].astype("<f4").tobytes())
            for i, (r, a) in enumerate(zip(recs, analyzed, strict=True))
        ]
        with self._guard():
            if self._dim is not None and m.shape[1] != self._dim:
                raise EmbeddingDimensionError(self._dim, int(m.shape[1]), hint=_REEMBED_HINT)
            with self._tx() as c:
                self._check_epochs(epochs)
                if self._dim is None:
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

    def update(self, records: Sequence[MemoryRecord], *, epochs: Mapping[str, int] | None = None) -> None:
        """Replace the stored fields of existing records, keeping their vectors.

        Args:
            records: The new versions of stored records.
            epochs: As in :meth:`upsert`.

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since (checked first).
            NotFoundError: an id does not exist for its user (nothing is written then).
            InvalidInputError: bad records.
        """
        recs = self._check_records(records)
        if not recs:
            return
        analyzed = [self.analyzer.analyze(r.search_text) for r in recs]
        with self._guard():
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
                    [(*self._row(r, a)[2:], r.user_id, r.id) for r, a in zip(recs, analyzed, strict=True)],
                )
            parts = self._current(versions)
            for r, a in zip(recs, analyzed, strict=True):
                part = parts.get(r.user_id)
                if part is not None:
                    changed = old_content[(r.user_id, r.id)] != r.search_text
                    old_content[(r.user_id, r.id)] = r.search_text
                    part.update(_FilterFields.of(r), a.split() if changed else None)
            self._resized(parts)

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

        The deleted text is overwritten in the file (``secure_delete``) and the WAL truncated.
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

        One transaction: a concurrent write that read the old epoch is refused afterwards.

        Returns:
            How many memories were deleted.
        """
        check_id(user_id)
        with self._guard():
            with self._tx() as c:
                n = c.execute("DELETE FROM memories WHERE user_id = ?", (user_id,)).rowcount
                c.execute("DELETE FROM turns WHERE user_id = ?", (user_id,))
                c.execute(
                    "INSERT INTO forget_epochs (user_hash, epoch) VALUES (?, 1) "
                    "ON CONFLICT (user_hash) DO UPDATE SET epoch = epoch + 1",
                    (user_hash(user_id),),
                )
                self._bump_versions([user_id])
            self._drop_partition(user_id)
            self._forget_traces()
            return int(n)

    # -- conversation state ------------------------------------------------------------------
    def _epoch(self, user_id: str) -> int:
        row = self._conn.execute(
            "SELECT epoch FROM forget_epochs WHERE user_hash = ?", (user_hash(user_id),)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _check_epochs(self, epochs: Mapping[str, int] | None) -> None:
        """Inside a write transaction: refuse it if a user was forgotten since ``epochs`` was read."""
        for user, epoch in (epochs or {}).items():
            if self._epoch(user) != epoch:
                raise UserForgottenError(user)

    def user_epoch(self, user_id: str) -> int:
        """The user's forget epoch (0 until the first :meth:`delete_user`)."""
        check_id(user_id)
        with self._guard():
            return self._epoch(user_id)

    def append_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]:
        """Durably append turns of one user to their sessions' logs (fsynced when this returns).

        Returns:
            The turns with ``seq`` set, in the given order.

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch`` (nothing is written).
            InvalidInputError: turns of several users, or invalid turns.
        """
        items = builtins.list(turns)
        if not items:
            return []
        users = {t.user_id for t in items}
        if len(users) != 1 or not all(isinstance(t, Turn) for t in items):
            raise InvalidInputError("append_turns takes Turn objects of exactly one user")
        (user,) = users
        check_id(user)
        for t in items:
            check_id(t.session_id, name="session_id")
            check_text(t.content)
        out: builtins.list[Turn] = []
        with self._guard(), self._tx() as c:
            self._check_epochs({user: epoch})
            for t in items:
                cur = c.execute(
                    "INSERT INTO turns (user_id, session_id, id, role, content, timestamp, importance, key_frame, "
                    "key_frame_reason, tokens, scoring_note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        t.user_id,
                        t.session_id,
                        t.id,
                        t.role,
                        t.content,
                        _iso(ensure_utc(t.timestamp, name="timestamp")),
                        float(t.importance),
                        int(t.key_frame),
                        t.key_frame_reason,
                        int(t.tokens),
                        t.scoring_note,
                    ),
                )
                out.append(t.model_copy(update={"seq": int(cur.lastrowid or 0)}))
        return out

    def load_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:
        """The session's turns with ``seq > after_seq``, its turn count and the user's epoch (one snapshot)."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise InvalidInputError("after_seq must be a non-negative int")
        with self._guard():
            c = self._conn
            c.execute("BEGIN")  # one read snapshot for the three reads
            try:
                rows = c.execute(
                    "SELECT seq, id, role, content, timestamp, importance, key_frame, tokens, scoring_note, "
                    "key_frame_reason "
                    "FROM turns WHERE user_id = ? AND session_id = ? AND seq > ? ORDER BY seq",
                    (user_id, session_id, after_seq),
                ).fetchall()
                count = int(
                    c.execute(
                        "SELECT COUNT(*) FROM turns WHERE user_id = ? AND session_id = ?", (user_id, session_id)
                    ).fetchone()[0]
                )
                epoch = self._epoch(user_id)
            finally:
                c.execute("COMMIT")
        turns = tuple(
            Turn(
                id=str(r[1]),
                user_id=user_id,
                session_id=session_id,
                role=r[2],
                content=str(r[3]),
                timestamp=datetime.fromisoformat(str(r[4])),
                importance=float(r[5]),
                key_frame=bool(r[6]),
                tokens=int(r[7]),
                scoring_note=r[8],
                key_frame_reason=r[9],
                seq=int(r[0]),
            )
            for r in rows
        )
        return SessionLog(turns=turns, count=count, epoch=epoch)

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the session's turn log (long-term memories stay); return how many turns it held."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        with self._guard():
            with self._tx() as c:
                n = int(
                    c.execute("DELETE FROM turns WHERE user_id = ? AND session_id = ?", (user_id, session_id)).rowcount
                )
            if n:
                self._forget_traces()
            return n

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

    def search(self, request: SearchRequest) -> builtins.list[StoreHit]:
        """Hybrid search within ``request.user_id``'s memories (Weaviate semantics).

        ``alpha`` 1.0 = pure vector, 0.0 = pure keyword (BM25); ``query=None`` forces alpha 1.

        Raises:
            InvalidInputError: not a SearchRequest, or no vector with alpha > 0, or a zero vector.
            EmbeddingDimensionError: the query vector has another dimension than the store's.
        """
        if not isinstance(request, SearchRequest):
            raise InvalidInputError(f"expected SearchRequest, got {type(request).__name__}")
        alpha = request.effective_alpha
        w_vec, w_kw = hybrid_weights(alpha)
        q = request.vector
        if w_vec is not None and q is None:
            raise InvalidInputError(
                "a query vector is required when alpha > 0 (alpha 1.0 = pure vector, 0.0 = pure keyword/BM25)"
            )
        unit_q = None if q is None else _unit_vector(np.asarray(q, dtype=np.float32))
        counts = query_term_counts(self.analyzer.query_tokens(request.query)) if request.query is not None else {}
        with self._guard():
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


def _similarities(
    part: _Partition,
    fused: Sequence[FusedHit],
    unit_q: npt.NDArray[np.float32] | None,
    sims: npt.NDArray[np.float32] | None,
) -> builtins.list[float | None]:
    """``1 - cosine distance`` (float32) of each hit (``None`` without a query vector).

    The vector leg's distance when it found the hit, else the distance from the dot product.
    """
    if unit_q is None:
        return [None] * len(fused)
    dist = np.empty(len(fused), dtype=np.float32)
    for j, h in enumerate(fused):
        if h.vector_distance is not None:
            dist[j] = h.vector_distance
        else:
            row = part.row_of[h.id]
            dot = float(sims[row]) if sims is not None else float(np.dot(part.matrix[row], unit_q))
            dist[j] = cosine_distance(dot)
    out: builtins.list[float | None] = (np.float32(1) - dist).tolist()
    return out


def _drop_partition(store: LocalStore, user_id: Hashable) -> None:
    """The cache budget's eviction of one user's partition."""
    store._partitions.pop(str(user_id), None)


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _marks(chunk: Sequence[str]) -> str:
    return ", ".join("?" * len(chunk))


def _where(user_id: str | None, flt: MemoryFilter | None) -> tuple[str, tuple[Any, ...]]:
    clauses: builtins.list[str] = []
    params: builtins.list[Any] = []
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    if flt is not None:
        clauses.append(f"status IN ({_marks(flt.statuses)})" if flt.statuses else "0")
        params.extend(flt.statuses)
        if flt.categories is not None:
            clauses.append(f"category IN ({_marks(flt.categories)})" if flt.categories else "0")
            params.extend(flt.categories)
        if flt.tags is not None:
            clauses.append(
                f"EXISTS (SELECT 1 FROM json_each(memories.tags) WHERE json_each.value IN ({_marks(flt.tags)}))"
                if flt.tags
                else "0"
            )
            params.extend(flt.tags)
        if flt.since is not None:
            clauses.append("created_us >= ?")
            params.append(_micros(flt.since))
        if flt.until is not None:
            clauses.append("created_us < ?")
            params.append(_micros(flt.until))
        if flt.session_id is not None:
            clauses.append("session_id = ?")
            params.append(flt.session_id)
    return (" AND ".join(clauses) if clauses else "1"), tuple(params)


def _json_tuple(text: str) -> tuple[Any, ...]:
    return () if text == "[]" else tuple(json.loads(text))


def _record(row: Sequence[Any]) -> MemoryRecord:
    (mid, user_id, session_id, content, category, importance, source, created_at, updated_at, last_accessed_at,
     access_count, tags, metadata, status, version, supersedes, superseded_by, provenance, context) = row  # fmt: skip
    return _validate_record(
        {
            "id": mid,
            "user_id": user_id,
            "session_id": session_id,
            "content": content,
            "category": category,
            "importance": importance,
            "source": source,
            "created_at": _from_iso(created_at),
            "updated_at": _from_iso(updated_at),
            "last_accessed_at": None if last_accessed_at is None else _from_iso(last_accessed_at),
            "access_count": access_count,
            "tags": _json_tuple(tags),
            "metadata": {} if metadata == "{}" else json.loads(metadata),
            "status": status,
            "version": version,
            "supersedes": supersedes,
            "superseded_by": superseded_by,
            "provenance": _json_tuple(provenance),
            "context": context,
        }
    )


_validate_record = MemoryRecord.model_validate
_from_iso = datetime.fromisoformat
