"""The Weaviate store: :class:`WeaviateStore`, its constructors and the memory operations.

The store is assembled from one base per concern (each in its own module): the client, retries
and handles (:mod:`.client`), the schema (:mod:`.schema`), batch writes and forget epochs
(:mod:`.writes`), turn logs (:mod:`.turns`), tenant use notes (:mod:`.tenants`) and tombstones
of deleted memories (:mod:`.tombstones`). What is left here: the constructors, the memory
writes and reads, deletes and the hybrid search. The package docstring
(:mod:`hybrid_memory.stores.weaviate`) describes the schema and the guarantees.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import (
    ConfigurationError,
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    SchemaError,
    StoreError,
    StoreUnavailableError,
    UserForgottenError,
)
from hybrid_memory.records import MemoryRecord, check_id, ensure_utc
from hybrid_memory.stores.base import AsyncFromSyncStore, check_ids, update_present
from hybrid_memory.stores.nearest import Neighbour
from hybrid_memory.stores.weaviate.client import (
    _ID_CHUNK,
    _NOTHING,
    _check_epoch_map,
    _check_records,
    _chunks,
    _import_weaviate,
    _is_active,
    _Node,
    logger,
)
from hybrid_memory.stores.weaviate.dead_letters import _default_dead_letter_path, _Failure, _Letter, _Pending
from hybrid_memory.stores.weaviate.errors import is_tenant_missing, translate
from hybrid_memory.stores.weaviate.mapping import (
    SEARCH_PROPERTY,
    _Cosine,
    _properties,
    _record,
    _unit_rows,
    _vector_of,
    object_uuid,
    tenant_name,
)
from hybrid_memory.stores.weaviate.runtime import _GRPC_CHANNEL_OPTIONS
from hybrid_memory.stores.weaviate.server import WeaviateServer, _free_ports, find_weaviate_binary
from hybrid_memory.stores.weaviate.tombstones import CLOCK_SKEW, REPLAY_HORIZON, _Tombstones
from hybrid_memory.stores.weaviate.writes import _Merge
from hybrid_memory.text.analyzer import Analyzer
from hybrid_memory.values import QUERY_MAXIMUM_RESULTS, MemoryFilter, SearchRequest, StoreHit, Vector, as_matrix

_KEYWORD_EXPLAIN = re.compile(
    r"Result Set keyword,bm25\) Document ([0-9a-fA-F-]{36})(?:: original score ([^,\s]+),| contributed)"
)


def _node(url: str, grpc_port: int | None, settings: Mapping[str, Any]) -> tuple[str, _Node]:
    """``(host_port label, node)`` for one REST URL: its liveness URL and a client factory.

    Raises:
        ConfigurationError: a malformed URL.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"url must look like http(s)://host[:port], got {url!r}")
    secure = parts.scheme == "https"
    host = parts.hostname
    port = parts.port or (443 if secure else 80)
    grpc_host = settings["grpc_host"]
    if grpc_host is None:
        cloud = host.endswith((".weaviate.cloud", ".weaviate.network", ".wcs.api.weaviate.io"))
        grpc_host = f"grpc-{host}" if cloud and not host.startswith("grpc-") else host
    if grpc_port is None:
        grpc_port = 443 if secure else 50051
    query, insert, init = settings["timeouts"]
    headers, api_key = settings["headers"], settings["api_key"]

    def connect() -> Any:
        weaviate = _import_weaviate()
        from weaviate.classes.init import AdditionalConfig, Auth, GrpcConfig, Timeout

        return weaviate.connect_to_custom(
            http_host=host,
            http_port=port,
            http_secure=secure,
            grpc_host=grpc_host,
            grpc_port=grpc_port,
            grpc_secure=secure,
            headers=dict(headers) if headers else None,
            additional_config=AdditionalConfig(
                timeout=Timeout(query=query, insert=insert, init=init),
                grpc_config=GrpcConfig(channel_options=list(_GRPC_CHANNEL_OPTIONS)),
                trust_env=settings["trust_env"],
            ),
            auth_credentials=Auth.api_key(api_key) if api_key else None,
            skip_init_checks=True,
        )

    scheme = "https" if secure else "http"
    shown = f"[{host}]" if ":" in host else host
    return f"{host}_{port}", _Node(f"{scheme}://{shown}:{port}/v1/.well-known/live", connect)


#: Neighbour queries of one write in flight at once (each is a small near_vector read).
_NEIGHBOUR_CONCURRENCY = 8


def _without_access(record: MemoryRecord) -> MemoryRecord:
    """``record`` without the statistics a recall's touch changes (to compare what was written)."""
    return record.model_copy(update={"access_count": 0, "last_accessed_at": None})


class WeaviateStore(_Tombstones, AsyncFromSyncStore):
    """:class:`~hybrid_memory.stores.base.MemoryStore` on Weaviate (one tenant per user).

    ``alpha``: 1.0 = pure vector, 0.0 = pure keyword (BM25); always sent explicitly.

    Args:
        client: A connected ``weaviate.WeaviateClient`` you own; the store never closes it.
        collection: Collection name (the others are ``<collection>Meta``, ``<collection>Turns``,
            ``<collection>ForgetEpochs``, ``<collection>TenantUse``, ``<collection>Tombstones`` and,
            once an embedder is bound, ``<collection>Embedder``; ``<collection>EmbedderName`` when
            it is named after its first vectors were written without one).
        analyzer: Tokeniser for the searchable text (must match the one the data was indexed
            with; the analyzer name is stored and checked by :meth:`ensure_schema`).
        vector_index: ``"flat"`` (exact, default; parity with LocalStore), ``"dynamic"`` (flat,
            then HNSW past ``dynamic_threshold`` vectors per tenant; needs ``ASYNC_INDEXING=true``
            on the server) or ``"hnsw"``. Used only when the collection is created.
        dynamic_threshold: Vectors per tenant at which a ``dynamic`` index switches to HNSW.
        replication_factor: Copies of every tenant (e.g. 3 on a 3-node cluster); creation only.
        dead_letter_path: SQLite file of the dead-letter queue (created on the first failed
            write). Default: ``$XDG_STATE_HOME/hybrid-memory/dead-letters/<collection>.sqlite``.
        batch_size: Objects per gRPC batch request (at most 500).
        write_concurrency: Batch requests of one write kept in flight at once, and tenants of
            a several-user write written at once (1 = one after the other; default 8, the most
            allowed: a replicated batch waits ~0.1-0.2 s for its replicas, so throughput on a
            cluster comes from requests in flight; 50 users per 1,000-memory call on a 3-node
            RF 3 cluster: 1.3-1.7x the rate of 2 in three paired runs).
        max_retries: Retries of a failed request or batch object before dead-lettering it.
        retry_base_delay: First backoff delay in seconds (doubled per retry, with jitter).
        retry_max_delay: Upper bound of one backoff delay.
        health_check_interval: Before a request, if nothing succeeded for this many seconds,
            probe ``/v1/.well-known/live`` first so an outage fails fast (``None`` = never).
        read_consistency: Replicas a read waits for: ``"ONE"``, ``"QUORUM"`` (default) or
            ``"ALL"`` (``None`` = the server's default, ONE for searches). QUORUM reads after
            QUORUM writes see every acknowledged write (read-your-writes) with one node down.
        write_consistency: Replicas a write waits for before it is acknowledged (default
            ``"QUORUM"``: with replication factor 3 a write survives the loss of any one node).
        write_all_first: Ask every replica (``ALL``) first and fall back to
            ``write_consistency`` for what that could not write (a replica is down): while all
            nodes are up, every copy holds a write before it is acknowledged, so a read at any
            level through any node sees it (QUORUM search reads alone missed 1 of 150 fresh
            QUORUM writes on a loopback cluster).
        count_timeout: Seconds :meth:`count` gives its aggregate before counting with a search
            instead (an aggregate waits for a node that died moments ago; a search does not).
        batch_timeout: Seconds one batch request may go unanswered before it is abandoned and
            sent again (within the insert timeout, which bounds the whole write).

    Raises:
        MissingDependencyError: weaviate-client is not installed.
        ConfigurationError: invalid arguments.

    Example:
        >>> store = WeaviateStore.connect("http://localhost:8080")  # doctest: +SKIP
        >>> store.count("alice")  # doctest: +SKIP
        0
        >>> store.close()  # doctest: +SKIP
    """

    analyzer: Analyzer

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        url: str | Sequence[str],
        *,
        grpc_port: int | Sequence[int] | None = None,
        grpc_host: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        insert_timeout: float = 90.0,
        init_timeout: float = 10.0,
        create_schema: bool = True,
        collection: str = "HybridMemory",
        analyzer: Analyzer | None = None,
        vector_index: Literal["flat", "dynamic", "hnsw"] = "flat",
        replication_factor: int | None = None,
        dead_letter_path: str | os.PathLike[str] | None = None,
        max_retries: int = 3,
        trust_env: bool = False,
        read_consistency: str | None = "QUORUM",
        write_consistency: str | None = "QUORUM",
        write_all_first: bool = True,
        count_timeout: float = 2.0,
        batch_timeout: float = 10.0,
    ) -> WeaviateStore:
        """Connect to a server by URL (``http://`` or ``https://``); the store owns the client.

        Args:
            url: REST endpoint, e.g. ``http://localhost:8080`` or ``https://xyz.weaviate.cloud``;
                or the endpoints of several nodes of one cluster: the store talks to the first
                and, when a node stops answering its liveness probe, fails over to the next
                live one (in order, wrapping around).
            grpc_port: gRPC port (default 50051 for http, 443 for https); with several URLs one
                port for all nodes or one per URL.
            grpc_host: gRPC host (default: the URL's host; ``grpc-<host>`` for Weaviate Cloud).
            api_key: API key (Weaviate Cloud or ``AUTHENTICATION_APIKEY_*`` servers).
            headers: Extra HTTP/gRPC headers.
            timeout: Query timeout in seconds.
            insert_timeout: Batch insert timeout in seconds.
            init_timeout: Connection set-up timeout in seconds.
            create_schema: Call :meth:`ensure_schema` now (the factory does network IO anyway).
            collection: See :class:`WeaviateStore`.
            analyzer: See :class:`WeaviateStore`.
            vector_index: See :class:`WeaviateStore`.
            replication_factor: See :class:`WeaviateStore`.
            dead_letter_path: Default ``.../dead-letters/<host>_<port>_<collection>.sqlite``.
            max_retries: See :class:`WeaviateStore`.
            trust_env: Let the client read ``SSL_CERT_FILE`` (REST) and proxy variables from the
                environment, e.g. to trust a private CA for an ``https://`` server; gRPC reads
                ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``. Default ``False``: certifi's CA bundle only.
            read_consistency: See :class:`WeaviateStore`.
            write_consistency: See :class:`WeaviateStore`.
            write_all_first: See :class:`WeaviateStore`.
            count_timeout: See :class:`WeaviateStore`.
            batch_timeout: See :class:`WeaviateStore`.

        Raises:
            ConfigurationError: a malformed URL, or as many gRPC ports as URLs were not given.
            StoreUnavailableError: the server cannot be reached.
        """
        _import_weaviate()
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ConfigurationError("connect needs at least one url")
        ports: list[int | None]
        if grpc_port is None or isinstance(grpc_port, int):
            ports = [grpc_port] * len(urls)
        else:
            ports = list(grpc_port)
            if len(ports) != len(urls):
                raise ConfigurationError(f"{len(urls)} urls but {len(ports)} gRPC ports")
        settings = {
            "grpc_host": grpc_host,
            "api_key": api_key,
            "headers": headers,
            "timeouts": (timeout, insert_timeout, init_timeout),
            "trust_env": trust_env,
        }
        nodes = [_node(u, p, settings) for u, p in zip(urls, ports, strict=True)]
        try:
            client = nodes[0][1].connect()
        except Exception as exc:
            raise translate(exc, f"connect to {urls[0]}") from exc
        label = f"{nodes[0][0]}_{collection}"
        store = cls(
            client,
            collection=collection,
            analyzer=analyzer,
            vector_index=vector_index,
            replication_factor=replication_factor,
            dead_letter_path=dead_letter_path if dead_letter_path is not None else _default_dead_letter_path(label),
            max_retries=max_retries,
            read_consistency=read_consistency,
            write_consistency=write_consistency,
            write_all_first=write_all_first,
            count_timeout=count_timeout,
            batch_timeout=batch_timeout,
        )
        store._owns_client = True
        store._nodes = [n for _, n in nodes]
        return store._ready(create_schema)

    def _ready(self, create_schema: bool) -> WeaviateStore:
        """A constructor's last step: ensure the schema when asked, closing the store if that fails."""
        if create_schema:
            try:
                self.ensure_schema()
            except BaseException:
                self.close()
                raise
        return self

    @classmethod
    def embedded(
        cls,
        data_path: str | os.PathLike[str] | None = None,
        *,
        binary: str | os.PathLike[str] | None = None,
        memory_limit: str | None = None,
        environment: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        collection: str = "HybridMemory",
        analyzer: Analyzer | None = None,
        create_schema: bool = True,
    ) -> WeaviateStore:
        """Start a private local Weaviate and connect to it; :meth:`close` stops it.

        Uses ``binary``, else ``WEAVIATE_BINARY``, ``weaviate-server`` on ``PATH`` or in
        ``$GOPATH/bin``. Without a binary it falls back to weaviate-client's embedded mode,
        which downloads a release (needs network; Linux/macOS only).

        Args:
            data_path: Persistent data directory; ``None`` = temporary (deleted on close).
            binary: Explicit ``weaviate-server`` path.
            memory_limit: ``GOMEMLIMIT`` of the server, e.g. ``"1GiB"``.
            environment: Extra server environment variables (e.g. ``{"ASYNC_INDEXING": "true"}``).
            startup_timeout: Seconds to wait for readiness.
            collection: See :class:`WeaviateStore`.
            analyzer: See :class:`WeaviateStore`.
            create_schema: Call :meth:`ensure_schema` once the server is up.

        Raises:
            StoreUnavailableError: the server did not start.
        """
        weaviate = _import_weaviate()
        try:
            binary_path = str(binary) if binary is not None else find_weaviate_binary()
        except ConfigurationError:
            raise
        if binary_path is None:
            return cls._client_embedded(
                data_path,
                memory_limit=memory_limit,
                environment=environment,
                collection=collection,
                analyzer=analyzer,
                create_schema=create_schema,
            )
        server = WeaviateServer(
            binary_path,
            data_path=data_path,
            memory_limit=memory_limit,
            environment=environment,
            startup_timeout=startup_timeout,
        )
        server.start()
        try:
            from weaviate.classes.init import AdditionalConfig, GrpcConfig

            client = weaviate.connect_to_custom(
                http_host=server.host,
                http_port=server.http_port,
                http_secure=False,
                grpc_host=server.host,
                grpc_port=server.grpc_port,
                grpc_secure=False,
                skip_init_checks=True,
                additional_config=AdditionalConfig(grpc_config=GrpcConfig(channel_options=list(_GRPC_CHANNEL_OPTIONS))),
            )
        except Exception as exc:
            server.stop()
            raise translate(exc, "connect to the embedded server") from exc
        dl_path = server.data_path / "hybrid-memory-dead-letters.sqlite"
        store = cls(client, collection=collection, analyzer=analyzer, dead_letter_path=dl_path)
        store._owns_client = True
        store._server = server
        return store._ready(create_schema)

    @classmethod
    def _client_embedded(
        cls,
        data_path: str | os.PathLike[str] | None,
        *,
        memory_limit: str | None,
        environment: Mapping[str, str] | None,
        collection: str,
        analyzer: Analyzer | None,
        create_schema: bool,
    ) -> WeaviateStore:
        weaviate = _import_weaviate()
        from weaviate.embedded import EmbeddedOptions

        tmp = None
        if data_path is None:
            tmp = tempfile.mkdtemp(prefix="hybrid-memory-weaviate-")
            data_path = tmp
        http, grpc = _free_ports(2)
        env = {"DISABLE_TELEMETRY": "true", "GO_PROFILING_DISABLE": "true", "ENABLE_MODULES": ""}
        if memory_limit is not None:
            env["GOMEMLIMIT"] = memory_limit
        env.update(environment or {})
        try:
            client = weaviate.WeaviateClient(
                embedded_options=EmbeddedOptions(
                    persistence_data_path=str(data_path),
                    version="1.39.0",
                    port=http,
                    hostname="127.0.0.1",
                    grpc_port=grpc,
                    additional_env_vars=env,
                ),
                skip_init_checks=True,
            )
            client.connect()
        except Exception as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise translate(exc, "start weaviate-client's embedded server") from exc
        store = cls(
            client,
            collection=collection,
            analyzer=analyzer,
            dead_letter_path=Path(data_path) / "hybrid-memory-dead-letters.sqlite",
        )
        store._owns_client = True
        store._tmp_dir = tmp
        return store._ready(create_schema)

    @classmethod
    async def aconnect(cls, url: str, **kwargs: Any) -> WeaviateStore:
        """Async twin of :meth:`connect` (runs it in a worker thread)."""
        return await asyncio.to_thread(lambda: cls.connect(url, **kwargs))

    @classmethod
    async def aembedded(cls, data_path: str | os.PathLike[str] | None = None, **kwargs: Any) -> WeaviateStore:
        """Async twin of :meth:`embedded` (runs it in a worker thread)."""
        return await asyncio.to_thread(lambda: cls.embedded(data_path, **kwargs))

    def __enter__(self) -> WeaviateStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> WeaviateStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- memory writes -------------------------------------------------------------------------
    def upsert(
        self,
        records: Sequence[MemoryRecord],
        vectors: Vector | Sequence[Sequence[float]],
        *,
        epochs: Mapping[str, int] | None = None,
    ) -> None:
        """Insert or replace ``records`` with their vectors (stored unit-normalised).

        Args:
            records: The records (of one or several users).
            vectors: One vector per record.
            epochs: Forget epochs the caller read (``user -> epoch``). Checked before the write
                (refused, nothing written) and after it (what was written for a user forgotten
                meanwhile is deleted again); see the module docstring.

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since.
            InvalidInputError: wrong vector count/shape or non-JSON metadata (nothing written).
            EmbeddingDimensionError: vectors of another dimension than the store's.
            StoreUnavailableError: some records could not be written after retries (network);
                they are in the dead-letter queue.
            StoreError: some records were rejected by the server; also dead-lettered.
        """
        self._check_open()
        records = _check_records(records)
        guard = _check_epoch_map(epochs)
        if not records:
            return
        items = self._pending(records, self._check_vectors(vectors, len(records)))
        if guard:
            self._check_epochs(guard, outage_ok=True)
        failures = self._write(items, epochs=guard or None)
        self._means.wrote_records(r.user_id for r in records)
        gone = self._undo_if_forgotten(items, failures, guard)
        if gone:
            raise UserForgottenError(gone[0])
        self._raise_failures(failures, len(items))

    def _check_vectors(self, vectors: Vector | Sequence[Sequence[float]], n: int) -> Vector:
        """``n`` vectors of the store's dimension, unit-normalised (zero vectors are refused)."""
        m = as_matrix(vectors, n, None)
        if not np.all(np.any(m != 0, axis=1)):
            raise InvalidInputError("a zero vector has no direction; cosine similarity is undefined")
        self._ensure_dimension(int(m.shape[1]))
        return _unit_rows(m)

    def update(
        self,
        records: Sequence[MemoryRecord],
        *,
        epochs: Mapping[str, int] | None = None,
        vectors: Vector | None = None,
    ) -> None:
        """Replace stored records' fields (and their vectors, if given) in place.

        Each record is merged into its stored object in place (a ``PATCH``), which never
        re-creates an object: a memory that another process deletes, or whose user it forgets,
        after this update read it stays deleted, even if this process dies right after.

        Args:
            records: The new versions of stored records.
            epochs: As in :meth:`upsert`; without them the users' current epochs are read first.
            vectors: One new vector per record (a changed content); ``None`` keeps the stored ones.

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since (checked first), or a
                user was forgotten while the update ran.
            NotFoundError: an id does not exist for its user (nothing is written), or another
                process deleted it while the update ran (it stays deleted; the other records
                are updated).
            InvalidInputError: bad records, or vectors of the wrong shape or zero.
            EmbeddingDimensionError: vectors of another dimension than the store's.
            StoreUnavailableError: some records could not be written after retries (network);
                they are in the dead-letter queue.
            StoreError: some records were rejected by the server; also dead-lettered.
        """
        self._check_open()
        records = _check_records(records)
        guard = _check_epoch_map(epochs)
        if not records:
            return
        given = None if vectors is None else self._check_vectors(vectors, len(records))
        new_vector = {} if given is None else {(r.user_id, r.id): given[i] for i, r in enumerate(records)}
        by_user: dict[str, list[MemoryRecord]] = {}
        for r in records:
            if not isinstance(r, MemoryRecord):
                raise InvalidInputError(f"expected MemoryRecord, got {type(r).__name__}")
            by_user.setdefault(r.user_id, []).append(r)
        if guard:
            self._check_epochs(guard)
        for user_id in by_user:
            if user_id not in guard:
                guard[user_id] = self._read_epoch(user_id)
        recs: list[MemoryRecord] = []
        vecs: list[Vector] = []
        moved: dict[str, dict[str, set[str]]] = {}  # user -> id -> statuses before and after
        # Under the write lock, like every write of this process that touches the dead-letter
        # queue: a replay here cannot interleave with this update's bookkeeping.
        with self._write_lock:
            for user_id, group in by_user.items():
                # The stored vectors only serve a dead letter: a replay writes the whole object again.
                stored = self._fetch(user_id, [r.id for r in group], vectors=given is None, epoch=guard[user_id])
                missing = [r.id for r in group if r.id not in stored]
                if missing:
                    gone = self._forgotten_since(guard)
                    if gone:
                        raise UserForgottenError(gone[0])
                    raise NotFoundError(f"memory {missing[0]!r} does not exist for user {user_id!r}")
                for r in group:
                    vec = new_vector[(user_id, r.id)] if given is not None else stored[r.id][1]
                    if vec is None:
                        raise SchemaError(f"memory {r.id!r} has no stored vector")
                    recs.append(r)
                    vecs.append(vec)
                    if stored[r.id][0].status != r.status:
                        moved.setdefault(user_id, {})[r.id] = {stored[r.id][0].status, r.status}
            items = self._pending(recs, np.stack(vecs).astype(np.float32))
            merges = [
                _Merge(
                    p.tenant,
                    p.uuid,
                    _properties(
                        p.record, self.analyzer.analyze(p.record.search_text), guard[p.record.user_id], unset=True
                    ),
                    None if given is None else p.vector.tolist(),
                )
                for p in items
            ]
            vanished, failed = self._merge(merges)
            failures = [_Failure(items[i], msg, transient) for i, (msg, transient) in sorted(failed.items())]
            self._settle_queue(items, failures, guard, gone=[items[i].uuid for i in vanished])
        landed = {items[i].key for i in range(len(items)) if i not in vanished and i not in failed}
        self._means.wrote_records(r.user_id for r in recs)
        for user_id, statuses in moved.items():
            if changed := {i: s for i, s in statuses.items() if (user_id, i) in landed}:
                self._reindex_status_ghosts(user_id, changed)
        if vanished:
            gone = self._forgotten_since(guard)
            if gone:
                raise UserForgottenError(gone[0])
            first = items[min(vanished)].record
            raise NotFoundError(f"memory {first.id!r} does not exist for user {first.user_id!r} (deleted meanwhile)")
        self._raise_failures(failures, len(items))

    def _reindex_status_ghosts(self, user_id: str, statuses: Mapping[str, set[str]]) -> int:
        """Re-index the memories whose index no longer matches their stored status; return how many.

        Called after an update changed these memories' statuses (``statuses``: record id -> the
        statuses before and after). A restore and an archive of one memory at once can leave it
        indexed under the losing write's status only, or under both (package docstring, *Index
        ghosts*); the writer whose index update lands last sees it here. For each status involved
        (before, after, now stored), one query asks which of the memories a filter on it
        matches; a memory matched by another status than its stored one, or not by its own, is
        written again with its vector moved by one ulp and then with its own vector: a changed
        vector gives the object a new internal document id, indexed afresh from its stored
        properties. Best effort: a store error is logged, not raised (the update itself landed).
        On a replicated collection only the replicas this read reaches are checked.
        """
        from weaviate.classes.query import Filter

        tenant = tenant_name(user_id)
        try:
            stored = self._fetch(user_id, list(statuses), vectors=True)
            h = self._tenant(tenant, note=False)
            uuids = {object_uuid(i): i for i in stored}
            involved = set().union(*statuses.values(), (rec.status for rec, _ in stored.values()))
            wrong: set[str] = set()
            for status in sorted(involved):
                for chunk in _chunks(list(uuids), _ID_CHUNK):
                    where = Filter.all_of(
                        [Filter.by_id().contains_any(list(chunk)), Filter.by_property("status").equal(status)]
                    )

                    def run(where: Any = where, n: int = len(chunk)) -> Any:
                        return h.query.fetch_objects(filters=where, limit=n, return_properties=[])

                    matched = {str(o.uuid) for o in self._call("check status index", run).objects}
                    wrong |= {uuids[u] for u in chunk if (u in matched) != (stored[uuids[u]][0].status == status)}
            repairs = [(i, v) for i in sorted(wrong) if (v := stored[i][1]) is not None]
            if not repairs:
                return 0
            nudged = [v.copy() for _, v in repairs]
            for n in nudged:
                n[0] = np.nextafter(n[0], np.float32(np.inf))
            for vectors in (nudged, [v for _, v in repairs]):
                _, failed = self._merge(
                    [_Merge(tenant, object_uuid(i), {}, v.tolist()) for (i, _), v in zip(repairs, vectors, strict=True)]
                )
                if failed:  # logged below; a vector left one ulp off changes no ranking
                    raise StoreError(next(iter(failed.values()))[0])
        except StoreError as exc:
            logger.warning("could not check the status index of %d memories: %s", len(statuses), exc)
            return 0
        logger.info("re-indexed %d memories whose index lost their stored status", len(repairs))
        return len(repairs)

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        """``access_count += 1`` and ``last_accessed_at = when`` (missing ids are skipped).

        The increment is read-modify-write: concurrent touches of one memory may count once. Each
        memory is changed in place (a ``PATCH``, see :meth:`update`): one that another process
        deletes, or whose user it forgets, while the touch runs stays deleted and is skipped. A
        failed touch raises but is not dead-lettered (it would overwrite a pending newer version).
        """
        self._check_open()
        when = ensure_utc(when, name="when")
        ids = check_ids(ids)
        check_id(user_id)
        if not ids:
            return
        tenant = tenant_name(user_id)
        merges = [
            _Merge(tenant, object_uuid(rec.id), {"access_count": rec.access_count + 1, "last_accessed_at": when})
            for rec, _ in self._fetch(user_id, ids, vectors=False).values()
        ]
        if not merges:
            return
        _, failed = self._merge(merges)
        if failed:
            msg, _ = next(iter(failed.values()))
            msg = f"{len(failed)} of {len(merges)} access updates failed: {msg}"
            if all(transient for _, transient in failed.values()):
                raise StoreUnavailableError(msg)
            raise StoreError(msg)

    def replay_dead_letters(self, user_id: str | None = None, *, include_stale: bool = False) -> int:
        """Write the dead-lettered records again; return how many succeeded.

        Records that fail again stay queued (their error and attempt count are updated). A record
        written successfully later through :meth:`upsert` is removed from the queue, so a replay
        never overwrites newer data with an older version: a record written again while the replay
        runs is not replayed (checked under the write lock; from another process, once its write
        has cleared the dead letter), and a newer version queued meanwhile (by this or another
        process sharing the file) stays queued as it is.

        Nothing deleted comes back: a record whose write carried a forget epoch is dropped (not
        written) when its user was forgotten since, from any process; a record whose memory was
        deleted (by :meth:`delete`, from any process) after its write was asked for is dropped too,
        and one deleted while the replay writes is deleted again (its tombstone,
        :mod:`~hybrid_memory.stores.weaviate.tombstones`). Tombstones are kept for ``TOMBSTONE_TTL``
        (seven days), so a record queued longer ago than :data:`REPLAY_HORIZON` (a day less) is
        *stale*: a delete since may no longer be known. Stale records stay queued and are logged,
        not written, unless ``include_stale`` (after checking, with :meth:`dead_letters`, that they
        should come back). So is a record whose memory another machine deleted less than
        :data:`CLOCK_SKEW` before its write was queued: the two times come from two clocks, so the
        delete may have come after the write. The queue is settled last: a replay killed between
        its write and its checks leaves its records queued, and the next one drops them and deletes again what the
        killed one put back of a deleted memory or a forgotten user.

        Args:
            user_id: Replay only this user's records (default: everyone's).
            include_stale: Also write records queued before :data:`REPLAY_HORIZON`, and those
                whose memory was deleted within :data:`CLOCK_SKEW` before they were queued.
        """
        self._check_open()
        letters = self._dlq.pending(user_id)
        if not letters:
            return 0
        horizon = datetime.now(timezone.utc) - REPLAY_HORIZON
        stale = [x for x in letters if x.queued_at < horizon]
        if stale and not include_stale:
            logger.warning(
                "keeping %d dead letters queued more than %s ago: a delete of their memory since may no "
                "longer be known; check them with dead_letters() and call replay_dead_letters(include_stale=True)",
                len(stale),
                REPLAY_HORIZON,
            )
            letters = [x for x in letters if x.queued_at >= horizon]
        letters = self._blank_gone_contexts(letters)
        current: dict[str, int] = {}
        forgotten: dict[str, list[_Letter]] = {}
        live: list[_Letter] = []
        for x in letters:
            if x.epoch is not None:
                if x.record.user_id not in current:
                    current[x.record.user_id] = self._read_epoch(x.record.user_id)
                if current[x.record.user_id] != x.epoch:
                    forgotten.setdefault(x.record.user_id, []).append(x)
                    continue
            live.append(x)
        for user, dropped_letters in forgotten.items():
            self._drop_letters(user, dropped_letters, "of a user forgotten since they were queued")
        # Memories deleted (by any process) after their write was asked for stay deleted.
        before: dict[str, dict[str, str]] = {}
        held = 0
        for user in dict.fromkeys(x.record.user_id for x in live):
            asked = {x.record.id: x.queued_at for x in live if x.record.user_id == user}
            deleted, doubt, before[user] = self._deleted_after(user, asked)
            leave = set() if include_stale else set(doubt)  # held back, still queued
            held += len(leave)
            if deleted:
                dropped = set(deleted)
                self._drop_letters(
                    user,
                    [x for x in live if x.record.user_id == user and x.record.id in dropped],
                    "of memories deleted since they were queued",
                )
                leave |= dropped
            if leave:
                live = [x for x in live if x.record.user_id != user or x.record.id not in leave]
        if held:
            logger.warning(
                "keeping %d dead letters queued: their memory was deleted less than %s before the write was "
                "queued, by the clocks of two processes, so the delete may have come after it; check them "
                "with dead_letters() and call replay_dead_letters(include_stale=True)",
                held,
                CLOCK_SKEW,
            )
        if not live:
            return 0
        guard = {u: e for u, e in current.items() if any(x.record.user_id == u for x in live)}
        sent: dict[tuple[str, str], _Letter] = {}

        def still_queued(todo: list[_Pending]) -> list[_Pending]:
            # Under the write lock: a newer write of the memory since the queue was read (this
            # process's, or another's that already cleared its dead letter) is not overwritten.
            same = self._dlq.unchanged(live)
            sent.update({x.key: x for x in live if x.key in same})
            return [p for p in todo if p.key in same]

        pending = [_Pending(x.record, x.vector, object_uuid(x.record.id), tenant_name(x.record.user_id)) for x in live]
        failures = self._write(pending, dead_letter=False, epochs=guard or None, keep=still_queued)
        failed = {f.pending.key: f.message for f in failures}
        pending = [p for p in pending if p.key in sent]
        gone = set(self._undo_if_forgotten(pending, failures, guard))
        written = [p for p in pending if p.key not in failed and p.record.user_id not in gone]
        # A delete that landed while the replay wrote: undo what the replay put back.
        buried = {(u, i) for u, tombs in before.items() for i in self._unbury_check(u, tombs, written)}
        # A turn forgotten while the replay wrote: its forget may have listed the memories before
        # this write landed, so the context cut from it is checked again now.
        self._recheck_contexts([p.record for p in written if p.key not in buried])
        # Settled last, by stamp (see _DeadLetterQueue.settle): a replay killed before this line
        # leaves its letters queued, and the next replay drops them and undoes their write if
        # the memory was deleted or its user forgotten (_drop_letters).
        self._dlq.settle(
            [x for k, x in sent.items() if k not in failed], [(sent[k], message) for k, message in failed.items()]
        )
        return sum(1 for p in written if p.key not in buried)

    def _drop_letters(self, user_id: str, letters: Sequence[_Letter], why: str) -> None:
        """Remove dead letters of memories deleted (or a user forgotten) since their write was asked for.

        A replay killed between its write and its checks may have put such a memory back: a
        stored record equal to the letter's but for access statistics (a recall may have touched
        it since; nothing else wrote it) is deleted again. A newer version queued since (another
        stamp) stays queued.
        """
        if not letters:
            return
        logger.info("dropping %d dead letters %s", len(letters), why)
        stored = {r.id: _without_access(r) for r in self.get(user_id, [x.record.id for x in letters])}
        back = [x.record.id for x in letters if stored.get(x.record.id) == _without_access(x.record)]
        if back:
            handle = self._tenant(tenant_name(user_id), write=True)
            self._delete_objects(handle, [object_uuid(i) for i in back], "undo an interrupted replay")
        self._dlq.settle(letters, [])

    def _gone_context_sources(self, records: Sequence[MemoryRecord]) -> set[tuple[str, str]]:
        """``(user, turn id)`` of the turns ``records`` cut their search context from that left their session's log.

        A session whose whole log is gone (ended or cleared) is not a forget: its memories keep
        their context, as the writer does.
        """
        sources: dict[tuple[str, str], set[str]] = {}
        for r in records:
            if r.context_source is not None and r.session_id is not None:
                sources.setdefault((r.user_id, r.session_id), set()).add(r.context_source)
        gone: set[tuple[str, str]] = set()
        for (user, session), ids in sources.items():
            log = self.load_session(user, session)
            if log.turns:
                gone.update((user, i) for i in ids - {t.id for t in log.turns})
        return gone

    def _blank_gone_contexts(self, letters: Sequence[_Letter]) -> list[_Letter]:
        """The letters, without a search context cut from a turn that left the log since they were queued.

        A forget in another process (or on another machine) cannot reach this file: the replay
        checks the log itself, and blanks the context in the file too.
        """
        gone = self._gone_context_sources([x.record for x in letters])
        if not gone:
            return list(letters)
        for user in {u for u, _ in gone}:
            self._dlq.blank_contexts(user, {t for u, t in gone if u == user})
        return [
            dataclasses.replace(x, record=x.record.evolve(context=""))
            if (x.record.user_id, x.record.context_source) in gone
            else x
            for x in letters
        ]

    def _recheck_contexts(self, records: Sequence[MemoryRecord]) -> None:
        """Blank the context of replayed memories whose source turn left the log while they were written."""
        gone = self._gone_context_sources(records)
        for user in {u for u, _ in gone}:
            turns = {t for u, t in gone if u == user}
            ids = [r.id for r in records if r.user_id == user and r.context_source in turns]
            found = self.get(user, ids)
            update_present(self, [r.evolve(context="") for r in found if r.context_source in turns])

    async def areplay_dead_letters(self, user_id: str | None = None, *, include_stale: bool = False) -> int:
        """Async twin of :meth:`replay_dead_letters`."""
        return await asyncio.to_thread(self.replay_dead_letters, user_id, include_stale=include_stale)

    def dead_letters(self, user_id: str | None = None) -> list[tuple[MemoryRecord, str, int]]:
        """Queued records with their last error and attempt count (local file, no network)."""
        return [(x.record, x.error, x.attempts) for x in self._dlq.pending(user_id)]

    def dead_letter_count(self) -> int:
        """Number of records in the dead-letter queue."""
        return self._dlq.count()

    @property
    def wipe_pending(self) -> bool:
        """Whether a forget's text may still be in the dead-letter file because a reader pinned its WAL.

        The server deletes the tenants themselves; only this local SQLite file can hold a copy.
        Finished by the file's next write or open once the reader has left, or by :meth:`finish_wipe`.
        """
        self._check_open()
        return self._dlq.wipe_pending()

    def finish_wipe(self, timeout: float | None = None) -> bool:
        """Finish a pending wipe of the dead-letter file, waiting up to ``timeout`` s (default 0.5) for readers.

        Returns:
            True when no forgotten text is left in the file; False while a reader still pins it.
        """
        self._check_open()
        return self._dlq.finish_wipe(timeout)

    # -- reads ---------------------------------------------------------------------------------
    def get(self, user_id: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records with these ids that exist for ``user_id`` (missing skipped), in order."""
        self._check_open()
        ids = check_ids(ids)
        stored = self._fetch(user_id, ids, vectors=False)
        out: list[MemoryRecord] = []
        seen: set[str] = set()
        for i in ids:
            if i in stored and i not in seen:
                seen.add(i)
                out.append(stored[i][0])
        return out

    def get_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """Stored (unit-normalised) vectors by id for ``user_id``."""
        self._check_open()
        stored = self._fetch(user_id, check_ids(ids), vectors=True)
        return {i: v for i, (_, v) in stored.items() if v is not None}

    def count(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:
        """Number of memories of one user (or all users) passing ``filter`` (``None`` = all).

        With ``user_id=None`` only active tenants are counted (offloaded users are not woken up).
        The count is an aggregate over the server's index, so a memory that racing writes left
        indexed under another value (package docstring, *Index ghosts*) counts by that value.
        """
        self._check_open()
        where = self._filters(filter)
        if where is _NOTHING:
            return 0
        tenants = [tenant_name(user_id)] if user_id is not None else self._tenant_names()
        total = 0
        for t in tenants:
            try:
                total += self._count_objects(self._tenant(t, note=user_id is not None), where, "count")
            except StoreError as exc:
                if is_tenant_missing(exc):
                    continue
                raise
        return total

    def _tenant_names(self) -> list[str]:
        """Names of the active tenants (inactive/offloaded ones are not woken up)."""
        tenants = self._call("list tenants", lambda: self._client.collections.use(self.collection).tenants.get())
        return sorted(name for name, t in tenants.items() if _is_active(t))

    def users(self) -> list[str]:
        """Ids of the users that have memories (sorted).

        Reads one object per tenant. Only active tenants are inspected: a user id is stored
        only inside its tenant, so inactive or offloaded tenants are not listed. An object a write
        racing a forget left behind does not count (it is deleted, :meth:`_live`).
        """
        self._check_open()
        out: set[str] = set()
        for name in self._tenant_names():
            h = self._tenant(name, note=False)

            def run(h: Any = h) -> Any:
                return h.query.fetch_objects(limit=1, return_properties=["user_id", "epoch"])

            seen: set[str] = set()
            while True:  # each stale object found is deleted; one that could not be is not read twice
                try:
                    res = self._call("users", run)
                except StoreError as exc:
                    if is_tenant_missing(exc):
                        break
                    raise
                if not res.objects or str(res.objects[0].uuid) in seen:
                    break
                seen.add(str(res.objects[0].uuid))
                user = str(res.objects[0].properties["user_id"])
                if self._live(user, res.objects):
                    out.add(user)
                    break
        return sorted(out)

    # -- deletes -------------------------------------------------------------------------------
    def delete(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete these memories of ``user_id``; return how many existed.

        Deletes the objects, writes their tombstones and deletes them again, so a dead-letter
        replay of any process never brings them back
        (:mod:`~hybrid_memory.stores.weaviate.tombstones`); an ``update`` or ``touch`` that read
        them before merges in place and finds them gone.
        """
        self._check_open()
        check_id(user_id)
        ids = check_ids(ids)
        if not ids:
            return 0
        self._dlq.remove(user_id, ids)
        h = self._tenant(tenant_name(user_id), write=True)
        uuids = [object_uuid(i) for i in ids]
        with self._write_lock:
            n = self._delete_objects(h, uuids, "delete")
            self._bury(user_id, ids)
            self._delete_objects(h, uuids, "delete again")
        self._means.wrote(user_id, len(ids))
        return n

    def delete_user(self, user_id: str) -> int:
        """Delete everything of ``user_id`` and change its forget epoch.

        In this order: record the user's logged turns as forgotten (:meth:`retired_turns`), bump
        the epoch, remove the memory and turn tenants and the user's dead letters (in this
        store's file), bump the epoch again, remove the tenants again. A write
        racing the forget (from any process) either lands before one of the removals or sees a
        moved epoch after it wrote and deletes what it wrote (module docstring).

        Returns:
            The number of memories the user had.
        """
        self._check_open()
        check_id(user_id)
        tenant = tenant_name(user_id)
        n = self.count(user_id)

        def remove() -> None:
            cols = self._client.collections
            cols.use(self.collection).tenants.remove([tenant])  # a missing tenant is not an error
            cols.use(self.turns_collection).tenants.remove([tenant])

        self._retire_user(user_id)
        with self._write_lock:
            for sweep in range(2):
                self._bump_epoch(user_id)
                self._call("delete tenant", remove)
                if sweep == 0:
                    self._dlq.remove_user(user_id)
            self._forget_use(tenant)
            self._means.forget(user_id)
        return n

    # -- search --------------------------------------------------------------------------------
    def search(self, request: SearchRequest) -> list[StoreHit]:
        """Weaviate hybrid search within ``request.user_id``'s tenant.

        ``alpha``: 1.0 = pure vector, 0.0 = pure keyword (BM25); ``query=None`` forces 1.0.

        Raises:
            InvalidInputError: ``alpha > 0`` without a query vector.
            EmbeddingDimensionError: a query vector of the wrong dimension.
        """
        self._check_open()
        from weaviate.classes.query import HybridFusion, MetadataQuery

        alpha = request.effective_alpha
        qvec = request.vector
        if alpha > 0 and qvec is None:
            raise InvalidInputError(
                "a query vector is required when alpha > 0 (1.0 = pure vector, 0.0 = pure keyword/BM25)"
            )
        if qvec is not None:
            dim = self.dimension
            if dim is not None and qvec.shape[0] != dim:
                raise EmbeddingDimensionError(dim, int(qvec.shape[0]))
        where = self._filters(request.filter)
        if where is _NOTHING:
            return []
        query_text = None if request.query is None else self.analyzer.analyze_query(request.query)
        fusion = HybridFusion.RANKED if request.fusion == "ranked" else HybridFusion.RELATIVE_SCORE
        h = self._tenant(tenant_name(request.user_id))

        def run() -> Any:
            return h.query.hybrid(
                query=query_text,
                vector=qvec.tolist() if qvec is not None else None,
                alpha=alpha,
                fusion_type=fusion,
                query_properties=[SEARCH_PROPERTY],
                max_vector_distance=request.max_vector_distance,
                limit=request.limit,
                offset=request.offset or None,
                auto_limit=request.auto_limit or None,
                filters=where,
                include_vector=True,  # StoreHit.vector (and vector_similarity when a vector was given)
                return_metadata=MetadataQuery(score=True, explain_score=True),
            )

        try:
            res = self._call("hybrid search", run)
        except StoreError as exc:
            if is_tenant_missing(exc):
                return []
            raise
        objects = self._live(request.user_id, res.objects)
        keyword = self._keyword_scores(objects, request, query_text, h, where)
        cosine = _Cosine(qvec) if qvec is not None else None
        hits: list[StoreHit] = []
        for o in objects:
            rec = _record(o.properties)
            if rec.user_id != request.user_id:  # defence in depth
                continue
            if not request.filter.matches(rec):  # an index ghost (package docstring)
                continue
            vec = _vector_of(o)
            sim = cosine(vec) if (cosine is not None and vec is not None) else None
            hits.append(
                StoreHit(
                    record=rec,
                    score=float(o.metadata.score),
                    keyword_score=keyword.get(str(o.uuid)),
                    vector_similarity=sim,
                    vector=vec,
                )
            )
        return hits

    def neighbours(self, user_id: str, vectors: Vector, *, threshold: float, top: int) -> list[list[Neighbour]]:
        """The active memories of ``user_id`` most similar to each of ``vectors`` (the writer's dedup check).

        One ``near_vector`` query per row on the user's tenant, filtered to active memories and cut
        at cosine distance ``1 - threshold`` by the server; up to 8 rows run at a time. No
        aggregate and no copy of the user's vectors in this process: on a cluster any replica
        answers at the store's read consistency. The cosine is recomputed from the returned vector,
        as :meth:`search` does, so the threshold means what it means on ``LocalStore``.

        Args:
            user_id: Whose memories.
            vectors: Unit-normalised query vectors, one per row.
            threshold: Minimum cosine similarity.
            top: At most this many neighbours per row.

        Returns:
            Per row, ``(id, cosine, category)`` of at most ``top`` active memories with cosine at or
            above ``threshold``, most similar first (ties by id).
        """
        self._check_open()
        check_id(user_id)
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim != 2 or len(rows) == 0 or top <= 0:
            return [[] for _ in range(len(rows))]
        dim = self.dimension
        if dim is None:
            return [[] for _ in range(len(rows))]  # nothing was ever stored
        if rows.shape[1] != dim:
            raise EmbeddingDimensionError(dim, int(rows.shape[1]))
        active = MemoryFilter()
        where = self._filters(active)
        h = self._tenant(tenant_name(user_id))
        epoch = functools.cache(lambda: self._read_epoch(user_id))  # read once for all rows, if needed
        # The server's distance cut is a pre-filter; the exact threshold is applied below.
        distance = min(2.0, max(0.0, 1.0 - float(threshold)) + 1e-4)

        def one(q: Vector) -> list[Neighbour]:
            def run() -> Any:
                return h.query.near_vector(
                    near_vector=q.tolist(), distance=distance, limit=top, filters=where, include_vector=True
                )

            try:
                res = self._call("neighbour search", run)
            except StoreError as exc:
                if is_tenant_missing(exc):
                    return []
                raise
            cosine = _Cosine(q)
            found: list[Neighbour] = []
            for o in self._live(user_id, res.objects, epoch):
                rec = _record(o.properties)
                vec = _vector_of(o)
                if rec.user_id != user_id or vec is None:  # defence in depth
                    continue
                if not active.matches(rec):  # an index ghost (package docstring)
                    continue
                sim = cosine(vec)
                if sim >= threshold:
                    found.append((rec.id, sim, rec.category))
            found.sort(key=lambda n: (-n[1], n[0]))
            return found[:top]

        if len(rows) == 1:
            return [one(rows[0])]
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(_NEIGHBOUR_CONCURRENCY, len(rows))) as pool:
            return list(pool.map(one, rows))

    def active_vectors(self, user_id: str, *, limit: int) -> tuple[list[str], list[str], Vector] | None:
        """Ids, categories and stored unit vectors of ``user_id``'s active memories, if at most ``limit``.

        One request (``fetch_objects`` of at most ``limit + 1`` active objects with their vectors and
        two properties): the writer's bulk snapshot for a large ``remember_many``, which then
        checks a whole batch against the user's memories with one matrix product instead of one
        :meth:`neighbours` query per item.

        Args:
            user_id: Whose memories.
            limit: The most memories worth copying (at most ``QUERY_MAXIMUM_RESULTS - 1``).

        Returns:
            ``(ids, categories, matrix)`` (matrix rows unit, float32), or ``None`` when the user
            has more than ``limit`` active memories (then nothing is kept).
        """
        self._check_open()
        check_id(user_id)
        limit = max(0, min(int(limit), QUERY_MAXIMUM_RESULTS - 1))
        active = MemoryFilter()
        where = self._filters(active)
        h = self._tenant(tenant_name(user_id))

        def run() -> Any:
            return h.query.fetch_objects(
                filters=where,
                limit=limit + 1,
                include_vector=True,
                return_properties=["record_id", "user_id", "category", "status", "epoch"],
            )

        try:
            res = self._call("active vectors", run)
        except StoreError as exc:
            if is_tenant_missing(exc):
                return [], [], np.zeros((0, self.dimension or 0), dtype=np.float32)
            raise
        if len(res.objects) > limit:
            return None
        ids: list[str] = []
        cats: list[str] = []
        rows: list[Vector] = []
        for o in self._live(user_id, res.objects):
            vec = _vector_of(o)
            if o.properties.get("user_id") != user_id or vec is None:  # defence in depth
                continue
            if o.properties.get("status") not in active.statuses:  # an index ghost (package docstring)
                continue
            ids.append(str(o.properties["record_id"]))
            cats.append(str(o.properties["category"]))
            rows.append(vec)
        dim = self.dimension or 0
        return ids, cats, (np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32))

    #: The most active memories whose mean one ``fetch_objects`` reads; a user with more is read
    #: page by page with the cursor API (:meth:`_cursor_mean`).
    _mean_fetch_limit = QUERY_MAXIMUM_RESULTS - 1

    def mean_vector(self, user_id: str) -> Vector | None:
        """The mean of ``user_id``'s active unit vectors (``retrieval.centre_weight``), or ``None``.

        Computed from one :meth:`active_vectors` read and cached in this store
        (:class:`~hybrid_memory.stores.means.MeanCache`): read again after this process has written
        about a tenth of the user's memories, after five minutes (other processes' writes), and
        dropped when this store forgets the user. ``None`` when the user has no active memory.
        A user with more active memories than one read returns (``QUERY_MAXIMUM_RESULTS - 1``)
        is read with the cursor API, a page of vectors at a time, summed as it goes (about 0.7 s
        per 10,000 memories of 512 dimensions; a user whose last mean was over the limit goes there
        directly), so large users are centred as the local store centres them. Should that scan
        fail (a timeout), the user is left uncentred until the next read, with a warning. Reads of more
        than 1,000 memories are made in the background (``MeanCache.background_above``): a
        process's first read of a user reads at most 1,001 vectors (about 50 ms), and a larger
        user's recalls run uncentred until its first mean is in.

        Raises:
            InvalidInputError: bad user id.
        """
        self._check_open()
        check_id(user_id)

        def probe(user: str, at_most: int) -> tuple[Vector | None, int] | None:
            got = self.active_vectors(user, limit=at_most)
            if got is None:
                return None
            if not got[0]:
                return None, 0
            mean: Vector = got[2].mean(axis=0, dtype=np.float32)
            return mean, len(got[0])

        def fetch(user: str, before: int | None) -> tuple[Vector | None, int]:
            if before is None or before <= self._mean_fetch_limit:
                got = probe(user, self._mean_fetch_limit)
                if got is not None:
                    return got
            return self._cursor_mean(user)

        return self._means.get(user_id, fetch, probe)

    def _cursor_mean(self, user_id: str) -> tuple[Vector | None, int]:
        """The mean of ``user_id``'s active vectors over every object of the tenant (cursor API).

        The cursor has no filters: statuses are checked here on the stored properties (which also
        leaves out index ghosts), and objects a write that raced a forget left behind (an epoch
        older than the user's, read once before the scan) are left out and deleted, as
        :meth:`_live` does. Vectors are summed page by page, never all held.
        """
        statuses = MemoryFilter().statuses
        h = self._tenant(tenant_name(user_id))
        try:
            current = self._read_epoch(user_id)

            def run() -> tuple[npt.NDArray[np.float64] | None, int, list[str]]:
                total: npt.NDArray[np.float64] | None = None
                n = 0
                stale: list[str] = []
                props = ["user_id", "status", "epoch"]
                for o in h.iterator(include_vector=True, return_properties=props, cache_size=1000):
                    p = o.properties
                    if p.get("user_id") != user_id:  # defence in depth
                        continue
                    epoch = p.get("epoch")
                    if isinstance(epoch, int) and epoch < current:
                        stale.append(str(o.uuid))
                        continue
                    vec = _vector_of(o)
                    if vec is None or p.get("status") not in statuses:
                        continue
                    total = vec.astype(np.float64) if total is None else total + vec
                    n += 1
                return total, n, stale

            total, n, stale = self._call("mean by cursor", run)
        except StoreError as exc:
            if is_tenant_missing(exc):
                return None, 0
            logger.warning("query centring is off for one user until the next read: %s", exc)
            return None, self._mean_fetch_limit + 1
        if stale:
            self._drop_left_behind(user_id, stale)
        if total is None:
            return None, 0
        mean: Vector = (total / n).astype(np.float32)
        return mean, n

    def _keyword_scores(
        self, objects: Sequence[Any], request: SearchRequest, query_text: str | None, h: Any, where: Any
    ) -> dict[str, float]:
        """BM25 scores of the hits that the keyword leg returned, by object UUID."""
        if not objects or not query_text or request.effective_alpha >= 1.0:
            return {}
        scores: dict[str, float] = {}
        in_leg: set[str] = set()
        for o in objects:
            for m in _KEYWORD_EXPLAIN.finditer(o.metadata.explain_score or ""):
                uid = m.group(1).lower()
                in_leg.add(uid)
                if m.group(2) is not None:
                    with contextlib.suppress(ValueError):
                        scores[uid] = float(np.float32(float(m.group(2))))
        missing = sorted(in_leg - scores.keys())
        if not missing:
            return scores
        # rankedFusion does not print the BM25 score: ask for it (filters do not change BM25
        # statistics, so these are the keyword leg's scores).
        from weaviate.classes.query import Filter, MetadataQuery

        ids = Filter.by_id().contains_any(missing)
        flt = ids if where is None else Filter.all_of([where, ids])

        def run() -> Any:
            return h.query.bm25(
                query=query_text,
                query_properties=[SEARCH_PROPERTY],
                filters=flt,
                limit=len(missing),
                return_metadata=MetadataQuery(score=True),
                return_properties=[],
            )

        res = self._call("bm25 scores", run)
        for o in res.objects:
            scores[str(o.uuid)] = float(o.metadata.score)
        return scores

    # -- listing (last: the method name shadows the builtin in the class body) ------------
    def list(
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> list[MemoryRecord]:
        """Records of ``user_id`` passing ``filter`` (``None`` = all), oldest first.

        Order: ``created_at`` ascending, then id.
        """
        self._check_open()
        check_id(user_id)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative int or None, got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a non-negative int, got {offset!r}")
        if limit == 0:
            return []
        where = self._filters(filter)
        if where is _NOTHING:
            return []
        from weaviate.classes.query import Sort

        h = self._tenant(tenant_name(user_id))
        window = None if limit is None else offset + limit
        if window is not None and window <= QUERY_MAXIMUM_RESULTS:

            def run() -> Any:
                return h.query.fetch_objects(
                    filters=where,
                    limit=limit,
                    offset=offset or None,
                    sort=Sort.by_property("created_at", ascending=True).by_property("record_id", ascending=True),
                )

            try:
                res = self._call("list", run)
            except StoreError as exc:
                if is_tenant_missing(exc):
                    return []
                raise
            recs = [_record(o.properties) for o in self._live(user_id, res.objects)]
            # an index ghost (package docstring): the page may then hold fewer than ``limit``
            return recs if filter is None else [r for r in recs if filter.matches(r)]
        # Large windows: the cursor API has no filters or sorting, so scan and sort here.
        try:
            objects = self._call("list", lambda: list(h.iterator(cache_size=1000)))
            recs = [_record(o.properties) for o in self._live(user_id, objects)]
        except StoreError as exc:
            if is_tenant_missing(exc):
                return []
            raise
        if filter is not None:
            recs = [r for r in recs if filter.matches(r)]
        recs.sort(key=lambda r: (r.created_at, r.id))
        return recs[offset:] if limit is None else recs[offset : offset + limit]
