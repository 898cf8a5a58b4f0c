"""The in-process search index of one user (:class:`_Partition`) and the vector helpers it uses.

A partition holds a user's memories as a float32 matrix of unit vectors, BM25 postings
(``term -> rows, tf``, bulk-loaded ones frozen in flat arrays), document lengths and the
filter columns (status, category, creation time, session, tags); it answers the vector leg,
the keyword leg (Weaviate's BlockMax BM25 with per-user statistics), the writer's
:meth:`_Partition.neighbours` dedup check, and reports its size (:meth:`_Partition.nbytes`) for
the memory budget (:mod:`hybrid_memory.stores.budget`). Which partitions are cached is
:mod:`.cache`'s concern.
"""

from __future__ import annotations

import bisect
import builtins
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, get_args

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.ranking import FusedHit, bm25_accumulate, cosine_distance, order_by_key_then_id
from hybrid_memory.records import Category, MemoryRecord, Status
from hybrid_memory.stores.local.rows import _micros
from hybrid_memory.stores.nearest import Neighbour, nearest
from hybrid_memory.values import MemoryFilter

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
#: Query terms whose BM25 contributions a partition keeps between writes (then computed per query).
_BM25_CACHE_TERMS = 4096
#: Filters whose row masks a partition keeps between writes (the cache is emptied when full).
_MASK_CACHE_FILTERS = 8
#: Rows x dimension from which the query product runs in BLAS (``@``) rather than ``einsum``.
_BLAS_PRODUCT_ELEMENTS = 1 << 24
_NO_SCORES: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)


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
        norm = np.sqrt(np.sum(v * v))  # np.add.reduce: the same float32 sum
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
        #: Per-row ``term -> count`` (``None`` until derived: see :attr:`term_counts`).
        self._counts: list[dict[str, int]] | None = []
        #: The user's change counter of the snapshot in the file that equals this partition (-1: none).
        self.saved = -1
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
        # Row masks per filter (read-only arrays), valid until the next change (cleared like the above).
        self._masks: dict[MemoryFilter, npt.NDArray[np.bool_]] = {}
        # The mean of the active rows (``mean_active``; a 1-tuple so that "no active row" is cached too), the
        # active rows it was computed from and the memories put, updated or removed since.
        self._mean: tuple[npt.NDArray[np.float32] | None] | None = None
        self._mean_rows = 0
        self._mean_writes = 0
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
        """Drop what is derived from postings, lengths and N (called by every mutation).

        A partition loaded from a snapshot gets its own writable arrays and its per-row term
        counts here, before its first change.
        """
        self._bm25_cache.clear()
        self._masks.clear()
        if not self.matrix.flags.writeable:
            self.term_counts  # noqa: B018 - derived while the frozen postings are still complete
            self._alloc(self.n)

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
        self._mean_writes += 1
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
        self._mean = None
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
        self._counts = term_counts
        self.entries = sum(len(c) for c in term_counts)
        self.dl[:n] = lengths
        self.total_tokens = sum(lengths)
        self.docs_with_tokens = sum(1 for x in lengths if x)
        self._postings.clear()
        self._arrays = _freeze(term_counts, self.entries)
        self.n = n

    # -- snapshots (see .cache) ------------------------------------------------------------
    def snapshot(self) -> _Snapshot:
        """This partition as contiguous arrays (a ``snapshots`` row of :mod:`.schema`, minus user and version).

        Rows keep their order; postings are the frozen ones (refrozen from the per-row term
        counts when writes changed them since the bulk load), stored with the terms sorted so a
        load needs no term dictionary (:class:`_SortedTerms`).
        """
        n = self.n
        frozen = self._arrays
        if self._postings or not frozen.pristine():
            frozen = _freeze(self.term_counts, self.entries)
        terms = builtins.list(frozen.vocab())
        rows, tfs, bounds = frozen.flat()
        order = sorted(range(len(terms)), key=terms.__getitem__)
        lengths = np.diff(bounds)[order]
        starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        gather = np.repeat(bounds[:-1][order] - starts[:-1], lengths) + np.arange(int(starts[-1]), dtype=np.int64)
        columns = b"".join(
            a[:n].tobytes()
            for a in (
                self.dl.astype("<f8", copy=False),
                self.created.astype("<i8", copy=False),
                self.session.astype("<i4", copy=False),
                self.status,
                self.category,
            )
        )
        return _Snapshot(
            rows=n,
            dim=int(self.dim or 0),
            vectors=np.ascontiguousarray(self.matrix[:n], dtype="<f4"),  # a view: the caller writes it at once
            columns=columns,
            postings=starts.astype("<i8").tobytes()
            + rows[gather].astype("<i4").tobytes()
            + tfs[gather].astype("<i4").tobytes(),
            ids="\x00".join(self.ids),  # ids and session ids never hold NUL (check_id)
            terms=json.dumps([terms[i] for i in order], ensure_ascii=False),
            sessions="\x00".join(s for s in self.session_codes if s is not None),  # codes 0, 1, ... in order
            tags=json.dumps([[row, tags] for row, tags in enumerate(self.tags) if tags], ensure_ascii=False),
        )

    @classmethod
    def from_snapshot(cls, snap: _Snapshot) -> _Partition:
        """The partition a :meth:`snapshot` was taken of (same rows, postings and statistics).

        The arrays are read-only views of the snapshot's buffers (no copy) until the first write
        copies them (:meth:`_changed`); per-row term counts are derived from the postings then too.
        """
        n, dim = snap.rows, snap.dim
        part = cls(dim)
        cols = snap.columns
        part.matrix = np.frombuffer(snap.vectors, dtype="<f4").reshape(n, dim)
        part.matrix.flags.writeable = False  # also over a writable buffer: _changed copies before a write
        part.dl = np.frombuffer(cols, dtype="<f8", count=n)
        part.created = np.frombuffer(cols, dtype="<i8", count=n, offset=8 * n)
        part.session = np.frombuffer(cols, dtype="<i4", count=n, offset=16 * n)
        part.status = np.frombuffer(cols, dtype=np.int8, count=n, offset=20 * n)
        part.category = np.frombuffer(cols, dtype=np.int8, count=n, offset=21 * n)
        part.n = n
        part.ids = snap.ids.split("\x00") if n else []
        part.row_of = dict(zip(part.ids, range(n), strict=False))  # as many ids as rows (a check costs 5 ms at 100k)
        for code, name in enumerate(snap.sessions.split("\x00") if snap.sessions else ()):
            part.session_codes[name] = code
        tags: builtins.list[tuple[str, ...]] = [()] * n
        for row, row_tags in json.loads(snap.tags):
            tags[row] = tuple(row_tags)
            for tag in row_tags:
                part.tag_rows.setdefault(tag, set()).add(row)
        part.tags = tags
        terms: builtins.list[str] = json.loads(snap.terms)
        bounds = np.frombuffer(snap.postings, dtype="<i8", count=len(terms) + 1)
        total = int(bounds[-1])
        at = 8 * (len(terms) + 1)
        rows = np.frombuffer(snap.postings, dtype="<i4", count=total, offset=at)  # widened per term by get()
        tfs = np.frombuffer(snap.postings, dtype="<i4", count=total, offset=at + 4 * total)
        part._arrays = _FrozenPostings(_SortedTerms(terms), rows, tfs, bounds.astype(np.int64, copy=False))
        part._counts = None
        part.entries = total
        part.total_tokens = int(part.dl.sum())
        part.docs_with_tokens = int(np.count_nonzero(part.dl))
        return part

    @property
    def term_counts(self) -> builtins.list[dict[str, int]]:
        """Each row's ``term -> count`` (derived from the frozen postings after a snapshot load)."""
        if self._counts is None:
            counts: builtins.list[dict[str, int]] = [{} for _ in range(self.n)]
            for term, (rows, tfs) in self._arrays.items():
                for row, tf in zip(rows.tolist(), tfs.astype(int).tolist(), strict=True):
                    counts[row][term] = tf
            self._counts = counts
        return self._counts

    def update(
        self, rec: _FilterFields, tokens: Sequence[str] | None, vector: npt.NDArray[np.float32] | None = None
    ) -> None:
        """Change the filter fields (the tokens when the content changed, the vector if given) of one memory."""
        self._changed()
        self._mean_writes += 1
        row = self.row_of.get(rec.id)
        if row is None:
            return
        if vector is not None:
            self.matrix[row] = vector
        if tokens is not None:
            self._unindex_terms(row)
            self._index_terms(row, tokens)
        self._set_filters(row, rec)

    def remove(self, memory_id: str) -> None:
        """Remove one memory, moving the last row into its place."""
        self._changed()
        self._mean_writes += 1
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
        """The rows ``flt`` allows (a read-only array kept until the next change of the partition)."""
        m = self._masks.get(flt)
        if m is None:
            if len(self._masks) >= _MASK_CACHE_FILTERS:
                self._masks.clear()
            m = self._masks[flt] = self._compute_mask(flt)
            m.flags.writeable = False
        return m

    def _compute_mask(self, flt: MemoryFilter) -> npt.NDArray[np.bool_]:
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

        Below :data:`_BLAS_PRODUCT_ELEMENTS` ``einsum`` runs single-threaded SIMD loops: at
        10k x 512 BLAS's own thread pool made the product several times slower (p95) whenever
        other threads or processes competed for the cores, the normal case in an agent server.
        From it on (100k x 512) the work per call amortises the pool: BLAS ``@`` (every core)
        had 2.4x less p95 than ``einsum`` on a quiet 2-core machine (12.0 vs 28.6 ms) and was no
        slower at load 17 (p50 99 vs 136 ms, p95 225 vs 227 ms). Both are exact float32 dot
        products; they differ only in summation order (a few ulps).
        """
        matrix = self.matrix[: self.n]
        sims: npt.NDArray[np.float32]
        if matrix.size >= _BLAS_PRODUCT_ELEMENTS:
            sims = matrix @ unit_query
        else:
            sims = np.einsum("ij,j->i", matrix, unit_query)
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

    def mean_active(self) -> npt.NDArray[np.float32] | None:
        """The mean of the active rows' vectors (a read-only array), or ``None`` without one.

        Computed again once about a tenth of the rows it was computed from were put, updated or
        removed since (``max(1, rows // 10)``, the rule of :class:`~hybrid_memory.stores.means.MeanCache`):
        a mean of many memories moves little with a few more, and a user with 100,000 memories
        would otherwise pay a pass over all of them on the first recall after every write.
        """
        if self._mean is None or self._mean_writes >= max(1, self._mean_rows // 10):
            active = self.status[: self.n] == _ACTIVE
            mean: npt.NDArray[np.float32] | None = None
            if active.any():
                mean = self.matrix[: self.n][active].mean(axis=0, dtype=np.float32)
                mean.flags.writeable = False
            self._mean, self._mean_rows, self._mean_writes = (mean,), int(active.sum()), 0
        return self._mean[0]

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


class _Snapshot(NamedTuple):
    """One partition as a ``snapshots`` row (:mod:`.schema`): little-endian arrays and a JSON of names.

    ``vectors``: ``rows x dim`` float32 in any buffer (a view of the matrix when taken; when
    loaded, the parts of ``snapshot_vectors`` read into one array, or a schema-2 row's bytes).
    ``columns``: float64 ``dl``, int64 ``created``, int32 ``session``, int8 ``status``, int8
    ``category`` (``rows`` each, in that order). ``postings``:
    int64 ``bounds`` (terms + 1), then int32 ``rows`` and int32 ``tfs`` (``bounds[-1]`` each).
    ``ids``, ``sessions``: NUL-separated (session code order). ``terms``: JSON list, sorted, one per
    ``bounds`` slice. ``tags``: JSON ``[[row, [tag, ...]], ...]`` of the rows that have tags.
    """

    rows: int
    dim: int
    vectors: bytes | npt.NDArray[Any]
    columns: bytes
    postings: bytes
    ids: str
    terms: str
    sessions: str
    tags: str


class _SortedTerms(Mapping[str, int]):
    """``term -> position`` over a sorted term list by binary search (nothing built on load)."""

    def __init__(self, terms: builtins.list[str]) -> None:
        self._terms = terms

    def __getitem__(self, term: str) -> int:
        i = bisect.bisect_left(self._terms, term)
        if i < len(self._terms) and self._terms[i] == term:
            return i
        raise KeyError(term)

    def __iter__(self) -> Iterator[str]:
        return iter(self._terms)

    def __len__(self) -> int:
        return len(self._terms)


def _freeze(term_counts: Sequence[Mapping[str, int]], entries: int) -> _FrozenPostings:
    """Frozen postings of per-row term counts: one stable sort of (term id, row) pairs, sliced per term."""
    n = len(term_counts)
    vocab: dict[str, int] = {}
    term_ids = np.fromiter(
        (vocab.setdefault(t, len(vocab)) for c in term_counts for t in c), dtype=np.int64, count=entries
    )
    tfs = np.fromiter((v for c in term_counts for v in c.values()), dtype=np.float64, count=entries)
    doc_rows = np.repeat(np.arange(n, dtype=np.int64), [len(c) for c in term_counts])
    order = np.argsort(term_ids, kind="stable")
    doc_rows, tfs = doc_rows[order], tfs[order]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(term_ids, minlength=len(vocab))))).astype(np.int64)
    return _FrozenPostings(vocab, doc_rows, tfs, bounds)


class _FrozenPostings:
    """Postings built in bulk, ``term -> (rows, tfs)`` sliced on demand out of two flat arrays.

    No per-term objects are made on load (a cold partition is built faster and holds ~250 bytes
    less per distinct term); terms set or popped later live in an overlay (popped = ``None``).
    The flat arrays may be narrower than the slices handed out (a snapshot's int32 ``rows`` and
    ``tfs``, kept as views of its bytes): :meth:`get` widens each slice to int64 / float64.
    """

    def __init__(
        self,
        vocab: Mapping[str, int] | None = None,
        rows: npt.NDArray[np.int64] | npt.NDArray[np.int32] | None = None,
        tfs: npt.NDArray[np.float64] | npt.NDArray[np.int32] | None = None,
        bounds: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self._vocab: Mapping[str, int] = vocab if vocab is not None else {}
        self._rows = rows if rows is not None else np.zeros(0, dtype=np.int64)
        self._tfs = tfs if tfs is not None else np.zeros(0, dtype=np.float64)
        self._bounds = bounds if bounds is not None else np.zeros(1, dtype=np.int64)
        self._over: dict[str, _Posting | None] = {}

    def __len__(self) -> int:
        return len(self._vocab) + len(self._over)

    def pristine(self) -> bool:
        """Whether every term is still the bulk-built one (nothing set or popped since)."""
        return not self._over

    def vocab(self) -> Iterator[str]:
        """The bulk-built terms in the order of their slices."""
        return iter(self._vocab)

    def flat(self) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int64]]:
        """The bulk-built ``(rows, tfs, bounds)`` arrays (term ``i`` is ``bounds[i]:bounds[i + 1]``)."""
        return self._rows, self._tfs, self._bounds

    def items(self) -> Iterator[tuple[str, _Posting]]:
        """Every term with its postings (bulk-built ones not popped, then the overlay)."""
        for term in self._vocab:
            if term not in self._over:
                posting = self.get(term)
                if posting is not None:
                    yield term, posting
        for term, value in self._over.items():
            if value is not None:
                yield term, value

    def get(self, term: str) -> _Posting | None:
        """The postings of ``term`` (``None``: none frozen)."""
        if term in self._over:
            return self._over[term]
        i = self._vocab.get(term)
        if i is None:
            return None
        lo, hi = int(self._bounds[i]), int(self._bounds[i + 1])
        return self._rows[lo:hi].astype(np.int64, copy=False), self._tfs[lo:hi].astype(np.float64, copy=False)

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
