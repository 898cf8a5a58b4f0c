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
re-analyses it. A user's index is also saved whole when it leaves a process (evicted by the
memory budget, or the store closes): postings and filter columns as contiguous arrays in table
``snapshots``, the vectors in parts of at most 64 MB in table ``snapshot_vectors`` (schema 3; large
ones are read through a file map), so the next process's first search for that user loads them
instead of rebuilding the index. A snapshot is served only at the user's change counter it was saved at;
any write of the user deletes it in the write's own transaction (a trigger), forgets included. When another connection (another process, the CLI) commits to the file, the
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
connection runs with ``PRAGMA secure_delete=ON`` (SQLite overwrites deleted cells and freed pages
with zeros) and :meth:`LocalStore.delete` / :meth:`LocalStore.delete_user` then checkpoint and
truncate the WAL. ``secure_delete`` misses one kind of copy: when a delete or an insert rebalances
B-tree pages, SQLite rebuilds the pages that stay without clearing their unallocated gap, so an
old copy of a row that moved can outlive the row in a page of another user. Forgetting a whole
user (:meth:`LocalStore.delete_user`) therefore also rewrites the file (``VACUUM``) before the
checkpoint: its cost follows the size of what the other users keep, not of what is forgotten.
A single :meth:`LocalStore.delete` does not rewrite the file (that would make every supersede or
prune rewrite it), so a copy a past rebalance made of that memory may stay until the user is
forgotten or the file is vacuumed.

A reader in another connection (another process, the CLI, the inspector) that holds a read
transaction pins the WAL: until it ends, the checkpoint cannot copy the overwritten pages into the
file nor truncate the WAL, so the old text is still on disk. The store then does not pretend: it
retries the checkpoint for ``wipe_timeout`` seconds (0.5 by default, never the 5 s busy timeout),
and if the reader is still there it records a *pending wipe* in the file's ``meta`` table and
reports it (:attr:`LocalStore.wipe_pending`; ``HybridMemory.forget_user(...).wipe_pending``; exit
code 3 of ``hybrid-memory forget``). The wipe is finished by the next write or open of the file by
any process once the reader has left, by :meth:`LocalStore.finish_wipe`, or on :meth:`LocalStore.close`.

Layout of this package: :mod:`.store` (:class:`LocalStore`, its public methods), :mod:`.schema`
(tables, version, in-place migrations), :mod:`.rows` (records to rows and back, SQL helpers),
:mod:`.connection` (transactions and the wipe after a forget), :mod:`.cache` (which per-user
indexes are kept, the memory-budget hooks), :mod:`.partition` (one user's index: vectors,
postings, BM25 statistics, the neighbours dedup path) and :mod:`.turns` (turn logs, forget epochs).
"""

from hybrid_memory.stores.local.connection import DEFAULT_WIPE_TIMEOUT as DEFAULT_WIPE_TIMEOUT
from hybrid_memory.stores.local.schema import SCHEMA_VERSION as SCHEMA_VERSION
from hybrid_memory.stores.local.store import LocalStore

__all__ = ["LocalStore"]
