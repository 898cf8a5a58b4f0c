"""The connection half of :class:`~hybrid_memory.stores.weaviate.WeaviateStore`.

:class:`_Client` owns the client, the dead-letter file and the per-tenant collection handles,
and runs every request: :meth:`_Client._call` retries transient failures with backoff and jitter
and translates what finally fails (:mod:`hybrid_memory.stores.weaviate.errors`), within the
client's query timeout, while a liveness probe turns an outage into a fast
:class:`~hybrid_memory.errors.StoreUnavailableError`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import random
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar

from hybrid_memory.errors import (
    ConfigurationError,
    InvalidInputError,
    MissingDependencyError,
    StoreError,
    StoreUnavailableError,
)
from hybrid_memory.records import MemoryRecord, check_id
from hybrid_memory.stores.means import MeanCache
from hybrid_memory.stores.weaviate.dead_letters import _DeadLetterQueue, _default_dead_letter_path
from hybrid_memory.stores.weaviate.errors import UnreachableError, is_transient, translate
from hybrid_memory.stores.weaviate.runtime import _WORKERS, _live_url_of
from hybrid_memory.stores.weaviate.server import WeaviateServer
from hybrid_memory.text.analyzer import Analyzer
from hybrid_memory.threads import start_daemon
from hybrid_memory.values import QUERY_MAXIMUM_RESULTS, MemoryFilter

logger = logging.getLogger("hybrid_memory.stores.weaviate")

T = TypeVar("T")

#: Largest gRPC batch sent at once (objects).
_MAX_BATCH = 500
#: Ids per ``contains_any`` filter.
_ID_CHUNK = 1000
#: Weaviate filters kept per store (built from the same MemoryFilter they are reused).
_FILTER_CACHE_SIZE = 256
#: Largest ``write_concurrency`` (batch requests of one write in flight at once).
_MAX_WRITE_CONCURRENCY = 8
#: Collection handles kept per store (one per collection, tenant and consistency level).
_HANDLE_CACHE_SIZE = 8192
#: Replica consistency levels a read or write may wait for (weaviate.md §6).
CONSISTENCY_LEVELS = ("ONE", "QUORUM", "ALL")


def _import_weaviate() -> ModuleType:
    try:
        import weaviate
    except ImportError as exc:
        raise MissingDependencyError("weaviate-client", "weaviate") from exc
    return weaviate


def _check_records(records: object) -> list[MemoryRecord]:
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence):
        raise InvalidInputError("records must be a sequence of MemoryRecord")
    out = list(records)
    for r in out:
        if not isinstance(r, MemoryRecord):
            raise InvalidInputError(f"expected MemoryRecord, got {type(r).__name__}")
    return out


def _check_epoch_map(epochs: object) -> dict[str, int]:
    """``epochs`` (``user -> epoch`` or ``None``) as a new dict; anything else is InvalidInputError."""
    if epochs is None:
        return {}
    if not isinstance(epochs, Mapping):
        raise InvalidInputError("epochs must be a mapping user_id -> int")
    out: dict[str, int] = {}
    for user, epoch in epochs.items():
        check_id(user)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidInputError(f"a forget epoch must be a non-negative int, got {epoch!r}")
        out[user] = epoch
    return out


class _Nothing:
    """A filter that matches nothing (an empty ``categories``/``tags``/``statuses`` tuple)."""


_NOTHING = _Nothing()


class _Live:
    """A collection handle looked up again on every attribute access.

    ``h.query.hybrid(...)`` inside a retried call resolves ``h.query`` against the store's
    *current* client, so a retry after a fail-over to another node (:meth:`_Client._failover`)
    talks to the new node, with the consistency level ``level`` (``None``: the server's default).
    """

    __slots__ = ("_key", "_store")

    def __init__(self, store: _Client, collection: str, tenant: str | None, level: str | None) -> None:
        self._store = store
        self._key = (collection, tenant, level)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store._resolve(self._key), name)


class _Node:
    """One node a store may talk to: its liveness URL and how to connect a client to it."""

    __slots__ = ("connect", "live_url")

    def __init__(self, live_url: str, connect: Callable[[], Any]) -> None:
        self.live_url = live_url
        self.connect = connect


def _chunks(items: Sequence[T], n: int) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close()


#: Activity states Weaviate serves requests in (``HOT`` is the pre-1.26 name of ``ACTIVE``).
_ACTIVE_STATES = ("ACTIVE", "HOT")


def _is_active(tenant: Any) -> bool:
    status = getattr(getattr(tenant, "activity_status", None), "value", "ACTIVE")
    return str(status) in _ACTIVE_STATES


class _Client:
    """Client, retries, lifecycle and per-tenant handles of a store (arguments: see ``WeaviateStore``)."""

    analyzer: Analyzer

    def __init__(
        self,
        client: Any,
        *,
        collection: str = "HybridMemory",
        analyzer: Analyzer | None = None,
        vector_index: Literal["flat", "dynamic", "hnsw"] = "flat",
        dynamic_threshold: int = 10_000,
        replication_factor: int | None = None,
        dead_letter_path: str | os.PathLike[str] | None = None,
        batch_size: int = 200,
        write_concurrency: int = 8,
        max_retries: int = 3,
        retry_base_delay: float = 0.2,
        retry_max_delay: float = 5.0,
        health_check_interval: float | None = 2.0,
        read_consistency: str | None = "QUORUM",
        write_consistency: str | None = "QUORUM",
        write_all_first: bool = True,
        count_timeout: float = 2.0,
        batch_timeout: float = 10.0,
    ) -> None:
        _import_weaviate()
        if not re.fullmatch(r"[A-Z][A-Za-z0-9_]{0,200}", collection or ""):
            raise ConfigurationError(
                f"collection must start with an upper-case letter and contain only [A-Za-z0-9_], got {collection!r}"
            )
        if vector_index not in ("flat", "dynamic", "hnsw"):
            raise ConfigurationError(f"vector_index must be 'flat', 'dynamic' or 'hnsw', got {vector_index!r}")
        if not 1 <= batch_size <= _MAX_BATCH:
            raise ConfigurationError(f"batch_size must be in 1..{_MAX_BATCH}")
        if not 1 <= write_concurrency <= _MAX_WRITE_CONCURRENCY:
            raise ConfigurationError(f"write_concurrency must be in 1..{_MAX_WRITE_CONCURRENCY}")
        if max_retries < 0 or retry_base_delay < 0 or retry_max_delay < 0:
            raise ConfigurationError("retry settings must be non-negative")
        if replication_factor is not None and replication_factor < 1:
            raise ConfigurationError("replication_factor must be >= 1")
        for name, level in (("read_consistency", read_consistency), ("write_consistency", write_consistency)):
            if level is not None and level not in CONSISTENCY_LEVELS:
                raise ConfigurationError(f"{name} must be one of {CONSISTENCY_LEVELS} or None, got {level!r}")
        if not count_timeout > 0 or not batch_timeout > 0:
            raise ConfigurationError("count_timeout and batch_timeout must be positive")
        self._client = client
        self.collection = collection
        self.meta_collection = f"{collection}Meta"
        self.turns_collection = f"{collection}Turns"
        self.epochs_collection = f"{collection}ForgetEpochs"
        self.binding_collection = f"{collection}Embedder"
        self.binding_name_collection = f"{collection}EmbedderName"
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.vector_index = vector_index
        self.dynamic_threshold = dynamic_threshold
        self.replication_factor = replication_factor
        self.batch_size = batch_size
        self.write_concurrency = write_concurrency
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.read_consistency = read_consistency
        self.write_consistency = write_consistency
        self.write_all_first = write_all_first
        self.count_timeout = count_timeout
        self.batch_timeout = batch_timeout
        dl_path = Path(dead_letter_path) if dead_letter_path is not None else _default_dead_letter_path(collection)
        self._dlq = _DeadLetterQueue(dl_path)
        self._owns_client = False
        self._server: WeaviateServer | None = None
        self._closed = False
        self._meta: dict[str, Any] | None = None
        self._meta_lock = threading.Lock()
        self._meta_unsaved = False  # _meta holds a binding the meta object lacks (its binder died before the copy)
        self._write_lock = threading.RLock()
        self._handles: dict[tuple[str, str | None, str | None], tuple[Any, Any]] = {}
        self._filter_cache: dict[MemoryFilter, Any] = {}
        self._means = MeanCache()  # query centring's per-user means (hybrid_memory.stores.means)
        self.health_check_interval = health_check_interval
        self._live_url = _live_url_of(client)
        self._probe_timeout = 2.0
        self._watch_interval = 0.5
        self._last_ok = 0.0
        self._nodes: list[_Node] = []  # set by WeaviateStore.connect: the nodes to fail over to
        self._node = 0
        self._failover_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------
    _tmp_dir: str | None = None

    @property
    def client(self) -> Any:
        """The underlying ``weaviate.WeaviateClient``."""
        return self._client

    @property
    def server(self) -> WeaviateServer | None:
        """The local server started by :meth:`embedded`, if any."""
        return self._server

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close what the store created (client, local server, dead-letter file). Idempotent.

        A client passed to the constructor is left open.
        """
        if self._closed:
            return
        self._closed = True
        self._means.close()  # a background mean read still running ends quietly
        self._handles.clear()
        self._dlq.close()
        if self._owns_client:
            with contextlib.suppress(Exception):
                self._client.close()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._tmp_dir is not None:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"WeaviateStore(collection={self.collection!r}, {state})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("the WeaviateStore is closed")

    # -- retries -------------------------------------------------------------------------------
    def _sleep_before_retry(self, attempt: int) -> None:
        cap = min(self.retry_max_delay, self.retry_base_delay * (2**attempt))
        time.sleep(cap / 2 + random.uniform(0, cap / 2))

    def _probe(self, timeout: float, url: str | None = None) -> bool:
        """One liveness probe (REST ``/v1/.well-known/live``, default: the current node's); ``True`` when it answered 200."""
        url = url or self._live_url
        if url is None:
            return True
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=max(0.05, timeout)) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _reachable(self, deadline: float | None = None) -> bool:
        """Cheap liveness probe (REST ``/v1/.well-known/live``), at most every few seconds.

        weaviate-client retries gRPC calls to an unreachable server internally with exponential
        backoff (about 63 s for a query, 7 s for a batch) before raising; probing first turns
        an outage into a :class:`StoreUnavailableError` within milliseconds.
        """
        if self._live_url is None or self.health_check_interval is None:
            return True
        now = time.monotonic()
        if now - self._last_ok < self.health_check_interval:
            return True
        timeout = self._probe_timeout if deadline is None else min(self._probe_timeout, deadline - now)
        ok = self._probe(timeout) or self._failover(timeout)
        if ok:
            self._last_ok = now
        return ok

    def _failover(self, timeout: float | None = None) -> bool:
        """Switch to the next node that answers its liveness probe; ``True`` once on a live node.

        Only for a store made by :meth:`WeaviateStore.connect` with several URLs. The old client
        is closed in the background; cached handles are rebuilt on the new client.
        """
        if len(self._nodes) < 2 or self._closed:
            return False
        failed = self._live_url
        probe_timeout = self._probe_timeout if timeout is None else max(0.05, min(self._probe_timeout, timeout))
        with self._failover_lock:
            if self._live_url != failed:  # another thread switched meanwhile
                return True
            n = len(self._nodes)
            for step in range(1, n):
                j = (self._node + step) % n
                node = self._nodes[j]
                if not self._probe(probe_timeout, node.live_url):
                    continue
                try:
                    client = node.connect()
                except Exception as exc:
                    logger.debug("could not connect to Weaviate node %s: %r", node.live_url, exc)
                    continue
                old, self._client = self._client, client
                self._node, self._live_url = j, node.live_url
                self._handles = {}
                logger.warning("Weaviate node %s is unreachable; using %s", failed, node.live_url)
                start_daemon(functools.partial(_close_quietly, old), name="hybrid-memory-weaviate-close")
                return True
        return False

    def _request_timeout(self, kind: Literal["query", "insert"] = "query") -> float:
        """Seconds one request may take in total: the client's query or insert timeout.

        Defaults (no timeout config found): 30 s for a query, 90 s for an insert.
        """
        cfg = getattr(getattr(self._client, "_connection", None), "timeout_config", None)
        value = getattr(cfg, kind, None)
        default = 30.0 if kind == "query" else 90.0
        return float(value) if isinstance(value, (int, float)) and value > 0 else default

    def _watched(self, fn: Callable[[], T], deadline: float) -> T:
        """Run ``fn`` in a worker thread; give up at ``deadline`` or when the server stops answering.

        A server that dies or hangs (``SIGSTOP``) right after a successful call is not caught by
        :meth:`_reachable` (it skips the probe for ``health_check_interval``), and the client then
        retries internally for about a minute. While ``fn`` runs, the server is probed every
        ``_watch_interval`` seconds; a failed probe or the deadline abandons the call with a
        transient error. Only used for reads, deletes and schema calls: an abandoned call may
        still complete later, which is harmless for those (idempotent), unlike for batch writes.
        """
        future = _WORKERS.submit(fn)
        next_probe = time.monotonic() + self._watch_interval
        while not concurrent.futures.wait([future], timeout=max(0.0, min(0.05, deadline - time.monotonic()))).done:
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError("Weaviate did not answer in time")
            if self._live_url is not None and now >= next_probe:
                if not self._probe(min(self._probe_timeout, deadline - now)) and not future.done():
                    raise UnreachableError(f"server not reachable at {self._live_url}")
                next_probe = time.monotonic() + self._watch_interval
        return future.result()

    def _call(self, what: str, fn: Callable[[], T], *, timeout: float | None = None) -> T:
        """Run ``fn`` with retries on transient errors; translate what finally fails.

        The whole call, retries included, ends within ``timeout`` (default: the client's query
        timeout). A transient failure forces a liveness probe before the retry, which fails
        over to another node when the current one is gone.
        """
        self._check_open()
        deadline = time.monotonic() + (self._request_timeout() if timeout is None else timeout)
        attempt = 0
        while True:
            try:
                if not self._reachable(deadline):
                    raise UnreachableError(f"server not reachable at {self._live_url}")
                out = self._watched(fn, deadline)
                self._last_ok = time.monotonic()
                return out
            except Exception as exc:
                if isinstance(exc, (StoreError, InvalidInputError)):
                    raise
                if (
                    attempt < self.max_retries
                    and is_transient(exc)
                    and not self._closed
                    and time.monotonic() + self.retry_base_delay * (2**attempt) < deadline
                ):
                    logger.debug("retrying Weaviate %s after %r", what, exc)
                    self._last_ok = 0.0  # probe (and maybe fail over) before the retry
                    self._sleep_before_retry(attempt)
                    attempt += 1
                    continue
                raise translate(exc, what) from exc

    # -- helpers -------------------------------------------------------------------------------
    def _resolve(self, key: tuple[str, str | None, str | None]) -> Any:
        """The client handle of ``(collection, tenant, level)`` on the current client (cached)."""
        client = self._client
        cached = self._handles.get(key)
        if cached is not None and cached[0] is client:
            return cached[1]
        collection, tenant, level = key
        h = client.collections.use(collection)
        if tenant is not None:
            h = h.with_tenant(tenant)
        if level is not None:
            from weaviate.classes.config import ConsistencyLevel

            h = h.with_consistency_level(ConsistencyLevel(level))
        if len(self._handles) >= _HANDLE_CACHE_SIZE:
            self._handles.clear()
        self._handles[key] = (client, h)
        return h

    def _level(self, write: bool) -> str | None:
        return self.write_consistency if write else self.read_consistency

    def _tenant(self, tenant: str, *, write: bool = False, level: str | None = None) -> Any:
        """The memory collection of ``tenant`` at ``level`` (default: the read or write level)."""
        return _Live(self, self.collection, tenant, level or self._level(write))

    def _turns(self, tenant: str, *, write: bool = False) -> Any:
        """The turn collection of ``tenant``, with the read (or write) consistency level."""
        return _Live(self, self.turns_collection, tenant, self._level(write))

    def _coll(self, collection: str, *, write: bool = False) -> Any:
        """A collection without tenants (meta, forget epochs), with the read (or write) level."""
        return _Live(self, collection, None, self._level(write))

    def _count_objects(self, h: Any, where: Any, what: str) -> int:
        """Objects of a tenant handle passing ``where``, within a bounded time.

        An aggregate first, given ``count_timeout`` seconds: on a replicated collection an
        aggregate is not replica-aware and waits for a node killed moments ago (until the
        cluster drops it, about 20 s, or the query timeout). Then the ids are counted with a
        search, which any live replica answers (up to ``QUERY_MAXIMUM_RESULTS`` objects; past
        that the aggregate's :class:`StoreUnavailableError` is raised).
        """

        def aggregate() -> int:
            return int(h.aggregate.over_all(total_count=True, filters=where).total_count or 0)

        try:
            return self._call(what, aggregate, timeout=self.count_timeout)
        except StoreUnavailableError as exc:
            first = exc

        def ids() -> int:
            res = h.query.fetch_objects(filters=where, limit=QUERY_MAXIMUM_RESULTS, return_properties=[])
            return len(res.objects)

        n = self._call(what, ids)
        if n >= QUERY_MAXIMUM_RESULTS:
            raise first
        return n

    def _filters(self, f: MemoryFilter | None) -> Any:
        """Weaviate ``Filter`` for ``f``: ``None`` (match all) or :data:`_NOTHING` (cached per filter)."""
        if f is None:
            return None
        try:
            return self._filter_cache[f]
        except KeyError:
            pass
        except TypeError:  # an unhashable filter (a list smuggled into a field): build it each time
            return self._build_filters(f)
        built = self._build_filters(f)
        if len(self._filter_cache) >= _FILTER_CACHE_SIZE:
            self._filter_cache.clear()
        self._filter_cache[f] = built
        return built

    def _build_filters(self, f: MemoryFilter) -> Any:
        from weaviate.classes.query import Filter

        if not f.statuses or f.categories == () or f.tags == ():
            return _NOTHING
        parts = [Filter.by_property("status").contains_any(list(f.statuses))]
        if f.categories is not None:
            parts.append(Filter.by_property("category").contains_any(list(f.categories)))
        if f.tags is not None:
            parts.append(Filter.by_property("tags").contains_any(list(f.tags)))
        if f.since is not None:
            parts.append(Filter.by_property("created_at").greater_or_equal(f.since))
        if f.until is not None:
            parts.append(Filter.by_property("created_at").less_than(f.until))
        if f.session_id is not None:
            parts.append(Filter.by_property("session_id").equal(f.session_id))
        return parts[0] if len(parts) == 1 else Filter.all_of(parts)
