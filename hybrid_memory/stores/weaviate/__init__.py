"""Weaviate backend: :class:`WeaviateStore` on weaviate-client v4, plus a local server launcher.

This is the only package of hybrid-memory that imports ``weaviate`` (always inside functions, so
``import hybrid_memory`` works without the ``weaviate`` extra).

Setup:
    ``pip install 'hybrid-memory[weaviate]'`` and a Weaviate server (>= 1.27; tested with 1.39.0):
    Docker (``docker run -p 8080:8080 -p 50051:50051 cr.weaviate.io/semitechnologies/weaviate:1.39.0``),
    a cluster, Weaviate Cloud, or a local ``weaviate-server`` binary
    (``go install github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0``).

Instantiate:
    * ``WeaviateStore.connect("http://localhost:8080")`` -- we own that client and close it;
    * ``WeaviateStore(client=my_client)`` -- a client you own (never closed by the store); call
      :meth:`WeaviateStore.ensure_schema` once (``__init__`` does no network IO);
    * ``WeaviateStore.embedded()`` -- starts a local ``weaviate-server`` (``WEAVIATE_BINARY``,
      ``PATH`` or ``$GOPATH/bin``) on free loopback ports and stops it on :meth:`close`.

Use:
    The store implements :class:`~hybrid_memory.stores.base.MemoryStore`; hand it to
    ``HybridMemory(store=...)``.

Schema (weaviate.md §7), chosen so that hybrid scores equal :class:`LocalStore`'s exactly:

* collection ``HybridMemory`` (configurable) with multi-tenancy, **one tenant per user**; the
  tenant name is :func:`tenant_name` (``u_`` + 48 hex digits of SHA-256 of the user id), so BM25
  statistics are per user and deleting a user drops the whole shard;
* one self-provided named vector ``default`` on a ``flat`` index, cosine, no quantization (exact
  brute force; ``dynamic``/``hnsw`` are options for large tenants);
* ``search_text`` holds ``Analyzer.analyze(record.search_text)`` (context + content) with ``whitespace`` tokenisation and is the
  **only** searchable property; every other text property has ``index_searchable=False`` (ids
  with ``field`` tokenisation), BM25 k1 = 1.2, b = 0.75;
* ``epoch`` (int, not indexed) is the user's forget epoch the write was checked against
  (absent for a write without ``epochs``): reads leave out objects of an older epoch (see Forget);
* object UUID = the record id when it is a canonical UUID (the default for
  :class:`~hybrid_memory.records.MemoryRecord`), else ``uuid5(namespace, id)``; Weaviate breaks
  score ties by this UUID string;
* a second, tiny collection ``<collection>Meta`` holds one config object: schema version,
  analyzer name, embedder name and vector dimension;
* ``<collection>Embedder`` (no properties, no objects) is the embedder binding itself: its
  description holds the embedder name and dimension bound first. The server creates collections
  through its Raft log and refuses a second create of a name, so of processes binding different
  embedders at once exactly one wins and the others get ``EmbedderMismatchError`` or
  ``EmbeddingDimensionError`` (an object insert at a fixed id can succeed twice: the server checks
  the id and writes it in two steps). The winner copies the binding into the meta object. When the
  first vectors were written without a name (the store used directly), the first name bound later
  is ``<collection>EmbedderName``, created the same way;
* ``<collection>Turns`` (multi-tenant, the same tenant per user, created lazily) is the durable
  log of the turns ``add_turn`` accepted: one object per turn, UUID ``uuid5(SHA-256(user id), turn id)``
  (a retried append finds it and adds nothing; two racing appends write the same object),
  properties session id, turn id, role, content, timestamp, importance, key-frame flag, tokens,
  scoring note, ``seq`` and the forget ``epoch`` it was written under; no vector index;
* ``<collection>ForgetEpochs`` (not multi-tenant, no vectors) holds one object per forgotten
  user, UUID ``uuid5(SHA-256(user id))`` (the id is not stored in clear), property ``epoch``;
* ``<collection>TenantUse`` (not multi-tenant, no vectors) holds the last recorded use of every
  tenant (its name and a UTC time), so an operator can deactivate idle users
  (:meth:`WeaviateStore.deactivate_idle`, ``hybrid-memory tenants --deactivate-idle S``; module
  :mod:`hybrid_memory.stores.weaviate.tenants`);
* ``<collection>Tombstones`` (not multi-tenant, no vectors) holds one object per memory deleted
  in the last seven days, UUID ``uuid5(SHA-256(user id), record id)``, properties ``token`` and
  ``deleted_at``: a dead-letter replay never re-creates a memory deleted after its write was asked
  for (module :mod:`hybrid_memory.stores.weaviate.tombstones`). ``update`` and ``touch`` need no
  tombstones: they merge into the stored object (``PATCH``), which the server refuses for an
  object that is gone.

Conversation state without transactions (architecture §10):

* ``seq`` (:class:`_SeqClock`) is ``unix_ms << 10 | tie_break``, a 53-bit integer (the gRPC
  batch carries numbers as protobuf doubles, exact only up to 2**53; valid until the year
  2248). ``tie_break`` is 10 random bits per process. In one process, the seqs of a session
  are strictly increasing in append order and greater than every seq the process has loaded
  for it, whatever the clocks. Every reader orders a log by ``(seq, object UUID)``, so turns
  appended by different processes are ordered the same way everywhere: by UTC millisecond, then
  by tie-break. Not guaranteed: that a turn becomes visible before every turn with a larger seq
  (a slower append, a clock behind). Such a turn is never lost: :meth:`WeaviateStore.load_session`
  reads the turns *before* the count (so the count covers at least those turns), and a full load
  reports ``count == len(turns)``, so a reader that has synced past it sees
  ``count != cached + len(new)`` and reloads the whole log (``HybridMemory`` does).
* Forget: :meth:`WeaviateStore.delete_user` bumps the user's epoch (read-modify-write;
  concurrent forgets may bump once between them, an epoch only has to *change*), removes the
  memory and turn tenants and the user's local dead letters, bumps the epoch again and removes
  the tenants again. A write that carries ``epochs`` (and every ``update`` and ``touch``, whose
  read-modify-write could otherwise re-insert a forgotten memory) reads the epoch before
  writing and again after: if it moved, the write deletes what it wrote and raises
  :class:`~hybrid_memory.errors.UserForgottenError`. A racing write whose second read came
  before the forget's second bump has landed before it, so the second removal deletes it; one
  whose second read came later is refused and undone. Turns carry their epoch and
  :meth:`~WeaviateStore.load_session` returns only the current epoch's turns, so even a turn
  written by a process that died between its write and its second read is never read back.
  Dead letters keep the epoch of their write; a replay drops them if the user was forgotten.
  Limits (no server-side conditional write exists): a write request abandoned by a timeout can
  still land later; a write that landed after the forget's second removal stays stored when its
  process died (or lost the server) before its second epoch read. It is never read back: a turn
  is invisible (wrong epoch), and a memory object carries the epoch its write was checked
  against (property ``epoch``), so every read of memories leaves it out and deletes it
  (``_Writes._live``); only ``count`` includes it until then.

Index ghosts: Weaviate 1.39 updates an object's inverted index after it releases the object's
lock (``Shard.putObjectLSM``, ``Shard.mergeObjectInStorage``). Two writes of one object that
change the same property at once (one process archives a memory while another restores it) can
leave it indexed under the losing write's value as well as, or instead of, the stored one, until
a later write changes that property again. A filter on the property can then match an object whose
stored value it excludes: every memory read (search, neighbours, the writer's snapshot, ``list``)
therefore checks its filter again on the stored properties it got back
(:meth:`MemoryFilter.matches <hybrid_memory.values.MemoryFilter.matches>`), so an archived or
superseded memory is never returned as active; such a page or top-k holds one result fewer.
An ``update`` that changes a memory's status (from the one it read) then checks which statuses
the index matches the memory by, and re-indexes it when that is not exactly its stored status
(``WeaviateStore._reindex_status_ghosts``): of two racing writers, the one whose index update
lands last sees the final index. So a memory restored while another process archives it is
not left invisible to recall. Not repaired: a ghost of another property (category, tags) until
the memory's next write, and ``count`` (an aggregate over the index) counts by the index.
The turn log and the summary watermark read stored values the same way (:mod:`.turns`).
``python -m benchmarks.weaviate_ghosts`` causes both kinds on a real server and counts them.

Search sends ``alpha`` explicitly (1.0 = pure vector, 0.0 = pure keyword (BM25)), the query text
``analyzer.analyze_query(query)`` (stopwords removed client-side, because ``whitespace``
tokenisation keeps them) and the query vector. :attr:`StoreHit.score` is Weaviate's fused score;
``keyword_score`` is the BM25 score of the keyword leg (parsed from the server's explanation for
relativeScoreFusion, fetched with a BM25 query over the hits for rankedFusion) and
``vector_similarity`` is recomputed client-side from the stored vectors. Where Weaviate's answer
depends on its internal document ids (the order of exactly equal vector distances, BM25 ties at
the 100th place) or on BlockMax-WAND pruning, no client can reproduce it; ``docs/weaviate.md``
(*Parity*) lists what ``tests/integration/test_parity.py`` measured.

Writes are gRPC batches (``data.insert_many``) whose failed objects are retried
with exponential backoff and jitter; what still fails goes to a durable SQLite dead-letter queue
(:meth:`WeaviateStore.replay_dead_letters`) and the call raises, so nothing acknowledged is lost.

The async twins run the thread-safe sync client in a worker thread (``asyncio.to_thread``)
rather than using ``WeaviateAsyncClient``: an async client is bound to the event loop it was
connected in, while a store usually outlives many loops (tests, notebooks, web workers).

Layout: :mod:`.store` (:class:`WeaviateStore`: constructors, memory reads, writes and search),
:mod:`.client` (connection, retries, handles), :mod:`.schema` (collections and meta data),
:mod:`.writes` (batches, merges, dead-lettering, forget epochs), :mod:`.turns` (turn logs),
:mod:`.tombstones` (deleted ids that a dead-letter replay checks),
:mod:`.mapping` (names, properties, records <-> objects), :mod:`.errors` (client exceptions ->
the library's errors, by type), :mod:`.dead_letters` (the SQLite queue), :mod:`.runtime` (turn
sequence clock, call threads), :mod:`.server` (the local ``weaviate-server`` launcher) and
:mod:`.cluster` (a local multi-node cluster for tests and benchmarks).

Cluster: :meth:`WeaviateStore.connect` takes several node URLs and fails over to the next live
node; writes ask every replica (``ALL``) first and fall back to ``write_consistency`` (QUORUM)
when a replica is down, reads use ``read_consistency`` (QUORUM); ``count`` bounds its aggregate
by ``count_timeout`` (``docs/weaviate.md``, *A cluster of three nodes*).
"""

from __future__ import annotations

from hybrid_memory.stores.weaviate.cluster import WeaviateCluster
from hybrid_memory.stores.weaviate.mapping import SCHEMA_VERSION, SEARCH_PROPERTY, object_uuid, tenant_name
from hybrid_memory.stores.weaviate.runtime import SEQ_TIE_BREAK_BITS
from hybrid_memory.stores.weaviate.server import WeaviateServer, find_weaviate_binary
from hybrid_memory.stores.weaviate.store import WeaviateStore

__all__ = [
    "SCHEMA_VERSION",
    "SEARCH_PROPERTY",
    "SEQ_TIE_BREAK_BITS",
    "WeaviateCluster",
    "WeaviateServer",
    "WeaviateStore",
    "find_weaviate_binary",
    "object_uuid",
    "tenant_name",
]
