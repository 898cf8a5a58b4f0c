"""Weaviate backend: :class:`WeaviateStore` on weaviate-client v4, plus a local server launcher.

This is the only module of hybrid-memory that imports ``weaviate`` (always inside functions, so
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
* object UUID = the record id when it is a canonical UUID (the default for
  :class:`~hybrid_memory.records.MemoryRecord`), else ``uuid5(namespace, id)``; Weaviate breaks
  score ties by this UUID string;
* a second, tiny collection ``<collection>Meta`` holds one config object: schema version,
  analyzer name, embedder name and vector dimension;
* ``<collection>Turns`` (multi-tenant, the same tenant per user, created lazily) is the durable
  log of the turns ``add_turn`` accepted: one object per turn, UUID ``uuid5(SHA-256(user id), turn id)``
  (a retried append replaces, never duplicates), properties session id, turn id, role, content,
  timestamp, importance, key-frame flag, tokens, scoring note, ``seq`` and the forget ``epoch``
  it was written under; no vector index;
* ``<collection>ForgetEpochs`` (not multi-tenant, no vectors) holds one object per forgotten
  user, UUID ``uuid5(SHA-256(user id))`` (the id is not stored in clear), property ``epoch``.

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
  process died (or lost the server) before its second epoch read -- a turn is then invisible
  (wrong epoch), a memory stays searchable until the user is forgotten again.

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
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import queue
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Literal, TypeVar

import numpy as np

from hybrid_memory.analyzer import Analyzer
from hybrid_memory.errors import (
    ConfigurationError,
    EmbeddingDimensionError,
    InvalidInputError,
    MissingDependencyError,
    NotFoundError,
    SchemaError,
    StoreError,
    StoreUnavailableError,
    UserForgottenError,
)
from hybrid_memory.records import MemoryRecord, Turn, check_id, check_text, ensure_utc
from hybrid_memory.stores.base import (
    QUERY_MAXIMUM_RESULTS,
    AsyncFromSyncStore,
    MemoryFilter,
    SearchRequest,
    SessionLog,
    StoreHit,
    Vector,
    as_matrix,
)

__all__ = [
    "SCHEMA_VERSION",
    "SEARCH_PROPERTY",
    "SEQ_TIE_BREAK_BITS",
    "WeaviateServer",
    "WeaviateStore",
    "find_weaviate_binary",
    "object_uuid",
    "tenant_name",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Version of the collection layout written by this module (stored in the meta collection).
SCHEMA_VERSION = 1
#: The one searchable property: the analyzer's tokens joined by spaces.
SEARCH_PROPERTY = "search_text"
#: Name of the single named vector.
VECTOR_NAME = "default"
#: Namespace for object UUIDs of non-UUID record ids and for meta objects.
_UUID_NAMESPACE = uuid.UUID("3b0f5c1e-8a51-5d6c-9d0e-6c1b7a2f4e90")
_CONFIG_UUID = str(uuid.uuid5(_UUID_NAMESPACE, "hybrid-memory:config"))
#: Largest gRPC batch sent at once (objects).
_MAX_BATCH = 500
#: Ids per ``contains_any`` filter.
_ID_CHUNK = 1000
#: Weaviate filters kept per store (built from the same MemoryFilter they are reused).
_FILTER_CACHE_SIZE = 256
#: Largest ``write_concurrency`` (batch requests of one write in flight at once).
_MAX_WRITE_CONCURRENCY = 8
#: Turns per page when a session log is read (keyset pagination on ``seq``).
_TURN_PAGE = 1000
#: Low bits of a turn's ``seq`` that hold the per-process tie-break.
SEQ_TIE_BREAK_BITS = 10
#: Every ``seq`` is below this: the gRPC batch sends numbers as doubles (exact up to 2**53).
_SEQ_LIMIT = 1 << 53
_KEYWORD_EXPLAIN = re.compile(
    r"Result Set keyword,bm25\) Document ([0-9a-fA-F-]{36})(?:: original score ([^,\s]+),| contributed)"
)


def _import_weaviate() -> ModuleType:
    try:
        import weaviate
    except ImportError as exc:
        raise MissingDependencyError("weaviate-client", "weaviate") from exc
    return weaviate


# -- names -------------------------------------------------------------------------------------
def tenant_name(user_id: str) -> str:
    """The tenant of a user: ``u_`` + the first 48 hex digits of SHA-256(user id).

    Tenant names must match ``[A-Za-z0-9_-]{1,64}``; hashing also keeps user ids out of the
    schema and the file names on the server.

    Example:
        >>> tenant_name("alice")
        'u_2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f'
    """
    check_id(user_id)
    return "u_" + hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:48]


def object_uuid(record_id: str) -> str:
    """The Weaviate object UUID of a record id.

    A canonical (lower-case, hyphenated) UUID is used as is, so Weaviate's tie-break by UUID
    string equals a tie-break by record id; any other id is mapped with ``uuid5``.

    Example:
        >>> object_uuid("6f1b8a7e-4c1d-5b0e-9f3a-2d7c8e5a1b90")
        '6f1b8a7e-4c1d-5b0e-9f3a-2d7c8e5a1b90'
        >>> object_uuid("note-1") == object_uuid("note-1") != object_uuid("note-2")
        True
    """
    try:
        if str(uuid.UUID(record_id)) == record_id:
            return record_id
    except ValueError:
        pass
    return str(uuid.uuid5(_UUID_NAMESPACE, record_id))


def _user_hash(user_id: str) -> str:
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()


def _turn_uuid(user_id: str, turn_id: str) -> str:
    """Object UUID of a turn: the same for a retried append of the same turn."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"turn:{_user_hash(user_id)}:{turn_id}"))


def _epoch_uuid(user_id: str) -> str:
    """Object UUID of a user's forget epoch (derived from a SHA-256 of the id, never the id)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"forget-epoch:{_user_hash(user_id)}"))


class _SeqClock:
    """Issues the ``seq`` of appended turns: ``unix_ms << SEQ_TIE_BREAK_BITS | tie_break``.

    One per process (shared by every :class:`WeaviateStore` in it; re-seeded in a forked child).
    For each ``(collection, user, session)`` it remembers the largest seq issued or loaded (LRU,
    ``capacity`` sessions), and a new seq is the first one of this process's tie-break that is
    above it and not earlier than the current millisecond. So a session's seqs from one process
    strictly increase in append order, and a turn appended after loading another process's turn
    sorts after it even when that process's clock runs ahead.
    """

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self._floors: collections.OrderedDict[tuple[str, str, str], int] = collections.OrderedDict()
        self._reseed()

    def _reseed(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.tie_break = int.from_bytes(os.urandom(2), "big") & ((1 << SEQ_TIE_BREAK_BITS) - 1)

    def _remember(self, key: tuple[str, str, str], seq: int) -> None:
        if seq > self._floors.get(key, -1):
            self._floors[key] = seq
        self._floors.move_to_end(key)
        while len(self._floors) > self.capacity:
            self._floors.popitem(last=False)

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # a forked child: its own tie-break, a lock nobody holds
            self._reseed()

    def observe(self, key: tuple[str, str, str], seq: int) -> None:
        """Note that ``seq`` was seen in ``key``'s log: later appends here sort after it."""
        self._check_fork()
        with self._lock:
            self._remember(key, seq)

    def next(self, key: tuple[str, str, str]) -> int:
        """A new seq for ``key``, above every seq issued or observed for it."""
        self._check_fork()
        bits, tb = SEQ_TIE_BREAK_BITS, self.tie_break
        with self._lock:
            floor = self._floors.get(key, -1)
            slot = max(0, floor >> bits)
            if (slot << bits | tb) <= floor:
                slot += 1
            seq = max(slot, time.time_ns() // 1_000_000) << bits | tb
            if seq >= _SEQ_LIMIT:
                raise StoreError("turn sequence numbers are exhausted (2**53); the clock is far in the future")
            self._remember(key, seq)
            return seq


_SEQ_CLOCK = _SeqClock()


#: gRPC reconnect backoff (ms). grpc-core's default grows to 120 s while a server is down, so a
#: client could stay unusable for a minute or two after the server came back.
_GRPC_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


# -- errors ------------------------------------------------------------------------------------
_TRANSIENT_WORDS = (
    "not reachable",
    "unavailable",
    "connection",
    "connect",
    "timeout",
    "timed out",
    "deadline",
    "temporarily",
    "try again",
    "too many requests",
    "resource_exhausted",
    "eof",
    "reset by peer",
    "broken pipe",
    "shutting down",
    "503",
    "502",
    "504",
)


def _is_tenant_missing(exc: BaseException) -> bool:
    return "tenant not found" in str(exc).lower()


def _is_collection_missing(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return ("class" in msg or "collection" in msg) and ("not found" in msg or "could not find" in msg)


def _is_transient(exc: BaseException) -> bool:
    """Whether retrying ``exc`` can help (network trouble, timeouts, overload)."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {
        "WeaviateConnectionError",
        "WeaviateTimeoutError",
        "WeaviateGRPCUnavailableError",
        "WeaviateStartUpError",
        "WeaviateRetryError",
        "WeaviateBatchStreamError",
        "WeaviateBatchFailedToReestablishStreamError",
        "ConnectError",
        "TimeoutException",
        "NetworkError",
        "RemoteProtocolError",
    }:
        return True
    if "WeaviateClosedClientError" in names:
        return False
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status >= 500 or status == 429
    return _message_is_transient(str(exc))


def _message_is_transient(message: str) -> bool:
    msg = message.lower()
    return any(w in msg for w in _TRANSIENT_WORDS)


def _live_url_of(client: Any) -> str | None:
    """``<REST base>/v1/.well-known/live`` of a client (best effort; ``None`` if unknown)."""
    params = getattr(getattr(client, "_connection", None), "_connection_params", None)
    http = getattr(params, "http", None)
    host, port, secure = getattr(http, "host", None), getattr(http, "port", None), getattr(http, "secure", None)
    if not isinstance(host, str) or not isinstance(port, int):
        return None
    scheme = "https" if secure else "http"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}/v1/.well-known/live"


def _translate(exc: BaseException, what: str) -> StoreError:
    """Map a foreign exception to the library's error tree (caller raises ``from exc``)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "WeaviateClosedClientError" in names:
        return StoreUnavailableError(f"Weaviate {what} failed: the client is closed")
    if _is_transient(exc):
        return StoreUnavailableError(f"Weaviate {what} failed: {exc}")
    if _is_collection_missing(exc):
        return SchemaError(f"Weaviate {what} failed: the collection does not exist; call store.ensure_schema() ({exc})")
    return StoreError(f"Weaviate {what} failed: {exc}")


# -- the binary and the server process --------------------------------------------------------
def find_weaviate_binary() -> str | None:
    """Locate a ``weaviate-server`` binary.

    Order: ``WEAVIATE_BINARY`` (must exist), ``weaviate-server`` on ``PATH``, ``$GOBIN``,
    every ``$GOPATH/bin``, ``~/go/bin``.

    Raises:
        ConfigurationError: ``WEAVIATE_BINARY`` is set but is not an executable file.
    """
    env = os.environ.get("WEAVIATE_BINARY")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise ConfigurationError(f"WEAVIATE_BINARY={env!r} is not an executable file")
    found = shutil.which("weaviate-server")
    if found:
        return found
    dirs: list[str] = []
    if os.environ.get("GOBIN"):
        dirs.append(os.environ["GOBIN"])
    for p in os.environ.get("GOPATH", "").split(os.pathsep):
        if p:
            dirs.append(os.path.join(p, "bin"))
    dirs.append(os.path.join(os.path.expanduser("~"), "go", "bin"))
    for d in dirs:
        cand = os.path.join(d, "weaviate-server")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _free_ports(n: int, *, pairs: int = 0) -> list[int]:
    """``n`` distinct free TCP ports, then ``pairs`` consecutive pairs ``(p, p + 1)``.

    Ports are checked on all interfaces (gRPC and the cluster data port bind ``:port``) and held
    open until all are chosen, so they are distinct.
    """
    socks: list[socket.socket] = []

    def grab(port: int) -> socket.socket | None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("", port))
        except OSError:
            s.close()
            return None
        socks.append(s)
        return s

    try:
        out: list[int] = []
        for _ in range(n):
            s = grab(0)
            assert s is not None
            out.append(int(s.getsockname()[1]))
        found = 0
        while found < pairs:
            s = grab(0)
            assert s is not None
            p = int(s.getsockname()[1])
            if p < 65535 and grab(p + 1) is not None:
                out.extend((p, p + 1))
                found += 1
        return out
    finally:
        for s in socks:
            s.close()


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
    else:
        proc.wait()


class WeaviateServer:
    """A single-node ``weaviate-server`` on loopback ports (weaviate.md §3.3).

    Telemetry and the pprof listener are off, cluster and Raft bind to 127.0.0.1 on free ports,
    anonymous access is on (loopback only; note gRPC listens on all interfaces, weaviate.md §3.3).
    The server log goes to ``log_path`` (default: ``weaviate-server.log`` next to the data).

    Args:
        binary: Path of ``weaviate-server`` (default: :func:`find_weaviate_binary`).
        data_path: Persistent data directory; ``None`` = a temporary directory removed on stop.
        memory_limit: ``GOMEMLIMIT`` for the Go runtime (e.g. ``"1GiB"``), ``None`` = unlimited.
        environment: Extra or overriding environment variables for the server.
        startup_timeout: Seconds to wait for ``/v1/.well-known/ready``.
        log_path: Where the server's stdout/stderr go.

    Raises:
        ConfigurationError: no binary was found.

    Example:
        >>> server = WeaviateServer(memory_limit="1GiB").start()  # doctest: +SKIP
        >>> server.url, server.grpc_port  # doctest: +SKIP
        ('http://127.0.0.1:41235', 41236)
        >>> server.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        data_path: str | os.PathLike[str] | None = None,
        memory_limit: str | None = None,
        environment: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        found = str(binary) if binary is not None else find_weaviate_binary()
        if found is None:
            raise ConfigurationError(
                "weaviate-server binary not found; set WEAVIATE_BINARY or run "
                "`go install github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0`"
            )
        self.binary = found
        self._tmp: str | None = None
        if data_path is None:
            self._tmp = tempfile.mkdtemp(prefix="hybrid-memory-weaviate-")
            self.data_path = Path(self._tmp) / "data"
            default_log = Path(self._tmp) / "weaviate-server.log"
        else:
            self.data_path = Path(data_path).resolve()
            default_log = self.data_path.parent / f"{self.data_path.name}-weaviate-server.log"
        self.log_path = Path(log_path) if log_path is not None else default_log
        self.memory_limit = memory_limit
        self.environment = dict(environment or {})
        self.startup_timeout = startup_timeout
        self.host = "127.0.0.1"
        self.http_port = 0
        self.grpc_port = 0
        self.startup_seconds: float | None = None
        self._ports: list[int] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def url(self) -> str:
        """The REST base URL, e.g. ``http://127.0.0.1:8080``."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self.pid is not None

    def env(self) -> dict[str, str]:
        """The environment the server runs with (inherited env + §3.3 settings + overrides)."""
        if self._ports is None:  # keep the ports across restarts so clients can reconnect
            # With CLUSTER_IN_LOCALHOST the server derives the Raft RPC address as RAFT_PORT + 1
            # (cluster/resolver/rpc.go), so that pair (and gossip/data) must be consecutive.
            self._ports = _free_ports(2, pairs=2)
        http, grpc, gossip, data, raft, raft_rpc = self._ports
        self.http_port, self.grpc_port = http, grpc
        env = dict(os.environ)
        env.update(
            {
                "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "true",
                "PERSISTENCE_DATA_PATH": str(self.data_path),
                "DEFAULT_VECTORIZER_MODULE": "none",
                "ENABLE_MODULES": "",
                "CLUSTER_HOSTNAME": "node1",
                "CLUSTER_IN_LOCALHOST": "true",
                "CLUSTER_BIND_ADDR": "127.0.0.1",
                "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
                "CLUSTER_DATA_BIND_PORT": str(data),
                "RAFT_PORT": str(raft),
                "RAFT_INTERNAL_RPC_PORT": str(raft_rpc),
                "RAFT_BOOTSTRAP_EXPECT": "1",
                # One node on loopback has no network delay to tolerate: the default multiplier
                # 5 (heartbeat 5 s) only delays the first leader election, i.e. start-up by ~5 s.
                "RAFT_TIMEOUTS_MULTIPLIER": "1",
                "GRPC_PORT": str(grpc),
                "DISABLE_TELEMETRY": "true",
                "GO_PROFILING_DISABLE": "true",
                "QUERY_DEFAULTS_LIMIT": "10",
                "AUTOSCHEMA_ENABLED": "false",
                "LOG_LEVEL": "warning",
            }
        )
        if self.memory_limit is not None:
            env["GOMEMLIMIT"] = self.memory_limit
        env.update(self.environment)
        return env

    def start(self) -> WeaviateServer:
        """Start the server and wait until it is ready.

        Raises:
            StoreUnavailableError: the process exited or did not become ready in time (the
                message carries the tail of the server log).
        """
        if self.running:
            return self
        self.data_path.mkdir(parents=True, exist_ok=True)
        env = self.env()
        args = [
            self.binary,
            "--host",
            self.host,
            "--port",
            str(self.http_port),
            "--scheme",
            "http",
            "--read-timeout=600s",
            "--write-timeout=600s",
        ]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._finalizer = weakref.finalize(self, _terminate, self._proc, 30.0)
        ready = f"{self.url}/v1/.well-known/ready"
        while True:
            if self._proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise StoreUnavailableError(f"weaviate-server exited during start-up:\n{tail}")
            try:
                with urllib.request.urlopen(ready, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() - t0 > self.startup_timeout:
                tail = self.log_tail()
                self.stop()
                raise StoreUnavailableError(f"weaviate-server not ready after {self.startup_timeout:.0f}s:\n{tail}")
            time.sleep(0.1)
        self.startup_seconds = time.monotonic() - t0
        return self

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0, *, keep_data: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``). Idempotent.

        A temporary data directory is removed unless ``keep_data`` (to :meth:`start` again on
        the same data and ports).
        """
        if self._proc is not None:
            _terminate(self._proc, timeout)
            self._proc = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._tmp is not None and not keep_data:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> WeaviateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- dead-letter queue ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Pending:
    """One record waiting to be written (in a batch or in the dead-letter queue)."""

    record: MemoryRecord
    vector: Vector
    uuid: str
    tenant: str


class _DeadLetterQueue:
    """Records whose write failed after all retries, in a SQLite file (created on first use).

    ``epoch`` is the user's forget epoch the write carried (``NULL``: none); a replay drops the
    record when the user was forgotten since.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
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
        conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA secure_delete=ON")  # deleted memories are overwritten, not left in free pages
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS dead_letters ("
            " user_id TEXT NOT NULL, record_id TEXT NOT NULL, record_json TEXT NOT NULL,"
            " vector BLOB NOT NULL, error TEXT NOT NULL, attempts INTEGER NOT NULL,"
            " first_failed_at TEXT NOT NULL, last_failed_at TEXT NOT NULL, epoch INTEGER,"
            " PRIMARY KEY (user_id, record_id))"
        )
        if "epoch" not in {str(r[1]) for r in conn.execute("PRAGMA table_info(dead_letters)")}:
            conn.execute("ALTER TABLE dead_letters ADD COLUMN epoch INTEGER")  # a queue from before epochs
        self._conn = conn
        return conn

    def add(self, items: Sequence[tuple[_Pending, str]], epochs: Mapping[str, int] | None = None) -> None:
        if not items:
            return
        now = datetime.now(timezone.utc).isoformat()
        with self._lock:
            conn = self._open(create=True)
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                for p, err in items:
                    conn.execute(
                        "INSERT INTO dead_letters (user_id, record_id, record_json, vector, error, attempts,"
                        " first_failed_at, last_failed_at, epoch) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)"
                        " ON CONFLICT(user_id, record_id) DO UPDATE SET record_json=excluded.record_json,"
                        " vector=excluded.vector, error=excluded.error, attempts=attempts+1,"
                        " last_failed_at=excluded.last_failed_at, epoch=excluded.epoch",
                        (
                            p.record.user_id,
                            p.record.id,
                            json.dumps(p.record.to_json_dict(), ensure_ascii=False),
                            np.asarray(p.vector, dtype="<f4").tobytes(),
                            err[:2000],
                            now,
                            now,
                            None if epochs is None else epochs.get(p.record.user_id),
                        ),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def pending(self, user_id: str | None = None) -> list[tuple[MemoryRecord, Vector, str, int, int | None]]:
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return []
            sql = "SELECT record_json, vector, error, attempts, epoch FROM dead_letters"
            args: tuple[str, ...] = ()
            if user_id is not None:
                sql += " WHERE user_id = ?"
                args = (user_id,)
            rows = conn.execute(sql + " ORDER BY last_failed_at, rowid", args).fetchall()
        out = []
        for rec_json, blob, err, attempts, epoch in rows:
            rec = MemoryRecord.from_json_dict(json.loads(rec_json))
            vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
            out.append((rec, vec, str(err), int(attempts), None if epoch is None else int(epoch)))
        return out

    def remove(self, user_id: str, record_ids: Iterable[str]) -> None:
        ids = list(record_ids)
        if not ids:
            return
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return
            # One transaction: in autocommit mode every row would be its own fsync (synchronous=FULL).
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "DELETE FROM dead_letters WHERE user_id = ? AND record_id = ?", [(user_id, i) for i in ids]
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def remove_user(self, user_id: str) -> int:
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return 0
            n = int(conn.execute("DELETE FROM dead_letters WHERE user_id = ?", (user_id,)).rowcount)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # no copy of the rows left in the WAL
            return n

    def count(self) -> int:
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return 0
            return int(conn.execute("SELECT COUNT(*) FROM dead_letters").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _default_dead_letter_path(label: str) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return Path(base) / "hybrid-memory" / "dead-letters" / f"{safe}.sqlite"


# -- records <-> objects -------------------------------------------------------------------------
def _metadata_json(record: MemoryRecord) -> str:
    """``record.metadata`` as JSON; :class:`InvalidInputError` when it cannot be stored."""
    if not record.metadata:
        return "{}"
    try:
        return json.dumps(record.metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata of memory {record.id} is not JSON-serialisable: {exc}") from exc


def _properties(record: MemoryRecord, analyzed: str) -> dict[str, Any]:
    metadata = _metadata_json(record)
    props: dict[str, Any] = {
        "record_id": record.id,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "content": record.content,
        SEARCH_PROPERTY: analyzed,
        "category": record.category,
        "importance": float(record.importance),
        "source": record.source,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_accessed_at": record.last_accessed_at,
        "access_count": int(record.access_count),
        "tags": list(record.tags),
        "metadata_json": metadata,
        "status": record.status,
        "version": int(record.version),
        "supersedes": record.supersedes,
        "superseded_by": record.superseded_by,
        "provenance": list(record.provenance),
        "context": record.context or None,
    }
    return {k: v for k, v in props.items() if v is not None}


def _record(props: Mapping[str, Any]) -> MemoryRecord:
    def utc(v: Any) -> datetime:
        if isinstance(v, str):
            v = datetime.fromisoformat(v.replace("Z", "+00:00"))
        return ensure_utc(v)

    last = props.get("last_accessed_at")

    try:
        return MemoryRecord(
            id=props["record_id"],
            user_id=props["user_id"],
            content=props["content"],
            session_id=props.get("session_id"),
            category=props["category"],
            importance=float(props["importance"]),
            source=props["source"],
            created_at=utc(props["created_at"]),
            updated_at=utc(props["updated_at"]),
            last_accessed_at=utc(last) if last is not None else None,
            access_count=int(props.get("access_count") or 0),
            tags=tuple(props.get("tags") or ()),
            metadata=json.loads(props.get("metadata_json") or "{}"),
            status=props["status"],
            version=int(props.get("version") or 1),
            supersedes=props.get("supersedes"),
            superseded_by=props.get("superseded_by"),
            provenance=tuple(props.get("provenance") or ()),
            context=props.get("context") or "",
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise SchemaError(f"a stored object does not describe a memory: {exc}") from exc


def _turn_properties(turn: Turn, epoch: int) -> dict[str, Any]:
    props: dict[str, Any] = {
        "user_id": turn.user_id,
        "session_id": turn.session_id,
        "turn_id": turn.id,
        "role": turn.role,
        "content": turn.content,
        "timestamp": ensure_utc(turn.timestamp, name="timestamp"),
        "importance": float(turn.importance),
        "key_frame": bool(turn.key_frame),
        "key_frame_reason": turn.key_frame_reason,
        "tokens": int(turn.tokens),
        "scoring_note": turn.scoring_note,
        "seq": int(turn.seq),
        "epoch": int(epoch),
    }
    return {k: v for k, v in props.items() if v is not None}


def _turn(props: Mapping[str, Any]) -> Turn:
    try:
        ts = props["timestamp"]
        if isinstance(ts, str):
            ts = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        return Turn(
            id=props["turn_id"],
            user_id=props["user_id"],
            session_id=props["session_id"],
            role=props["role"],
            content=props["content"],
            timestamp=ensure_utc(ts),
            importance=float(props.get("importance") or 0.0),
            key_frame=bool(props.get("key_frame")),
            key_frame_reason=props.get("key_frame_reason"),
            tokens=int(props.get("tokens") or 0),
            scoring_note=props.get("scoring_note"),
            seq=int(props["seq"]),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise SchemaError(f"a stored object does not describe a turn: {exc}") from exc


def _vector_of(obj: Any) -> Vector | None:
    vec = getattr(obj, "vector", None)
    if isinstance(vec, Mapping):
        vec = vec.get(VECTOR_NAME)
    if vec is None:
        return None
    out: Vector = np.asarray(vec, dtype=np.float32)
    return out


def _unit_rows(m: Vector) -> Vector:
    norms = np.linalg.norm(m.astype(np.float64), axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vector = (m / norms).astype(np.float32)
    return out


class _Cosine:
    """Cosine similarity (float64) to one query vector, whose cast and norm are computed once."""

    __slots__ = ("_norm", "_q")

    def __init__(self, query: Vector) -> None:
        self._q = query.astype(np.float64)
        self._norm = float(np.linalg.norm(self._q))

    def __call__(self, a: Vector) -> float:
        a64 = a.astype(np.float64)
        na = float(np.linalg.norm(a64))
        if na == 0 or self._norm == 0:
            return 0.0
        return float(np.dot(a64, self._q) / (na * self._norm))


def _check_ids(ids: object) -> list[str]:
    """Memory ids as a de-duplicated list; anything but a sequence of valid str is InvalidInputError."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidInputError("ids must be a sequence of str (not a single str)")
    for i in ids:
        if not isinstance(i, str):
            raise InvalidInputError(f"memory ids must be str, got {type(i).__name__}")
        try:
            i.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError("memory ids must be valid Unicode (lone surrogate?)") from exc
    return list(dict.fromkeys(ids))


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


def _object_error(message: str) -> Exception:
    """The error for an object a batch rejected: retried by ``_call`` when it looks transient."""
    return ConnectionError(message) if _message_is_transient(message) else StoreError(message)


def _chunks(items: Sequence[T], n: int) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _is_active(tenant: Any) -> bool:
    status = getattr(getattr(tenant, "activity_status", None), "value", "ACTIVE")
    return str(status) in ("ACTIVE", "HOT")


class _UnreachableError(ConnectionError):
    """The liveness probe failed (never leaves this module: translated to StoreUnavailableError)."""


class _Nothing:
    """A filter that matches nothing (an empty ``categories``/``tags``/``statuses`` tuple)."""


_NOTHING = _Nothing()


class _Workers:
    """Reusable daemon threads for :meth:`WeaviateStore._watched` calls.

    A call takes an idle worker or starts a new one, so a call that hangs on a dead server holds
    only its own thread and never delays the next call; daemon threads never block interpreter
    exit. A worker idle for ``idle_timeout`` seconds ends.
    """

    def __init__(self, idle_timeout: float = 30.0) -> None:
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def run(self, task: Callable[[], None]) -> None:
        """Start ``task`` in a worker thread (it must not raise)."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._loop, args=(inbox,), name="hybrid-memory-weaviate-call", daemon=True).start()
        inbox.put(task)

    def idle(self) -> int:
        """Workers waiting for a call."""
        with self._lock:
            return len(self._idle)

    def _loop(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                task = inbox.get(timeout=self.idle_timeout)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # taken by a caller just now: its task is on the way
            task()
            with self._lock:
                self._idle.append(inbox)


_WORKERS = _Workers()


def _submit(fn: Callable[..., T], *args: Any, inline: bool) -> concurrent.futures.Future[T]:
    """Run ``fn(*args)`` inline or in a short-lived daemon thread; its outcome as a future.

    A daemon thread (not a ``ThreadPoolExecutor``, whose workers are joined at interpreter exit)
    so that a request hanging on a dead server never blocks the exit.
    """
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # handed to the caller through the future
            fut.set_exception(exc)

    if inline:
        run()
    else:
        threading.Thread(target=run, name="hybrid-memory-weaviate-batch", daemon=True).start()
    return fut


# -- the store -----------------------------------------------------------------------------------
class WeaviateStore(AsyncFromSyncStore):
    """:class:`~hybrid_memory.stores.base.MemoryStore` on Weaviate (one tenant per user).

    ``alpha``: 1.0 = pure vector, 0.0 = pure keyword (BM25); always sent explicitly.

    Args:
        client: A connected ``weaviate.WeaviateClient`` you own; the store never closes it.
        collection: Collection name (the others are ``<collection>Meta``, ``<collection>Turns``
            and ``<collection>ForgetEpochs``).
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
        write_concurrency: Batch requests of one write kept in flight at once (1 = one after
            the other); the next batch is prepared while the server stores the previous one.
        max_retries: Retries of a failed request or batch object before dead-lettering it.
        retry_base_delay: First backoff delay in seconds (doubled per retry, with jitter).
        retry_max_delay: Upper bound of one backoff delay.
        health_check_interval: Before a request, if nothing succeeded for this many seconds,
            probe ``/v1/.well-known/live`` first so an outage fails fast (``None`` = never).

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
        write_concurrency: int = 2,
        max_retries: int = 3,
        retry_base_delay: float = 0.2,
        retry_max_delay: float = 5.0,
        health_check_interval: float | None = 2.0,
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
        self._client = client
        self.collection = collection
        self.meta_collection = f"{collection}Meta"
        self.turns_collection = f"{collection}Turns"
        self.epochs_collection = f"{collection}ForgetEpochs"
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.vector_index = vector_index
        self.dynamic_threshold = dynamic_threshold
        self.replication_factor = replication_factor
        self.batch_size = batch_size
        self.write_concurrency = write_concurrency
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        dl_path = Path(dead_letter_path) if dead_letter_path is not None else _default_dead_letter_path(collection)
        self._dlq = _DeadLetterQueue(dl_path)
        self._owns_client = False
        self._server: WeaviateServer | None = None
        self._closed = False
        self._meta: dict[str, Any] | None = None
        self._meta_lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._handles: dict[str, Any] = {}
        self._turn_handles: dict[str, Any] = {}
        self._filter_cache: dict[MemoryFilter, Any] = {}
        self.health_check_interval = health_check_interval
        self._live_url = _live_url_of(client)
        self._probe_timeout = 2.0
        self._watch_interval = 0.5
        self._last_ok = 0.0

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        url: str,
        *,
        grpc_port: int | None = None,
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
    ) -> WeaviateStore:
        """Connect to a server by URL (``http://`` or ``https://``); the store owns the client.

        Args:
            url: REST endpoint, e.g. ``http://localhost:8080`` or ``https://xyz.weaviate.cloud``.
            grpc_port: gRPC port (default 50051 for http, 443 for https).
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

        Raises:
            ConfigurationError: a malformed URL.
            StoreUnavailableError: the server cannot be reached.
        """
        weaviate = _import_weaviate()
        from urllib.parse import urlsplit

        from weaviate.classes.init import AdditionalConfig, Auth, GrpcConfig, Timeout

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"url must look like http(s)://host[:port], got {url!r}")
        secure = parts.scheme == "https"
        host = parts.hostname
        port = parts.port or (443 if secure else 80)
        if grpc_host is None:
            cloud = host.endswith((".weaviate.cloud", ".weaviate.network", ".wcs.api.weaviate.io"))
            grpc_host = f"grpc-{host}" if cloud and not host.startswith("grpc-") else host
        if grpc_port is None:
            grpc_port = 443 if secure else 50051
        try:
            client = weaviate.connect_to_custom(
                http_host=host,
                http_port=port,
                http_secure=secure,
                grpc_host=grpc_host,
                grpc_port=grpc_port,
                grpc_secure=secure,
                headers=dict(headers) if headers else None,
                additional_config=AdditionalConfig(
                    timeout=Timeout(query=timeout, insert=insert_timeout, init=init_timeout),
                    grpc_config=GrpcConfig(channel_options=list(_GRPC_CHANNEL_OPTIONS)),
                    trust_env=trust_env,
                ),
                auth_credentials=Auth.api_key(api_key) if api_key else None,
                skip_init_checks=True,
            )
        except Exception as exc:
            raise _translate(exc, f"connect to {url}") from exc
        label = f"{host}_{port}_{collection}"
        store = cls(
            client,
            collection=collection,
            analyzer=analyzer,
            vector_index=vector_index,
            replication_factor=replication_factor,
            dead_letter_path=dead_letter_path if dead_letter_path is not None else _default_dead_letter_path(label),
            max_retries=max_retries,
        )
        store._owns_client = True
        if create_schema:
            try:
                store.ensure_schema()
            except BaseException:
                store.close()
                raise
        return store

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
            raise _translate(exc, "connect to the embedded server") from exc
        dl_path = server.data_path / "hybrid-memory-dead-letters.sqlite"
        store = cls(client, collection=collection, analyzer=analyzer, dead_letter_path=dl_path)
        store._owns_client = True
        store._server = server
        if create_schema:
            try:
                store.ensure_schema()
            except BaseException:
                store.close()
                raise
        return store

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
            raise _translate(exc, "start weaviate-client's embedded server") from exc
        store = cls(
            client,
            collection=collection,
            analyzer=analyzer,
            dead_letter_path=Path(data_path) / "hybrid-memory-dead-letters.sqlite",
        )
        store._owns_client = True
        store._tmp_dir = tmp
        if create_schema:
            try:
                store.ensure_schema()
            except BaseException:
                store.close()
                raise
        return store

    @classmethod
    async def aconnect(cls, url: str, **kwargs: Any) -> WeaviateStore:
        """Async twin of :meth:`connect` (runs it in a worker thread)."""
        return await asyncio.to_thread(lambda: cls.connect(url, **kwargs))

    @classmethod
    async def aembedded(cls, data_path: str | os.PathLike[str] | None = None, **kwargs: Any) -> WeaviateStore:
        """Async twin of :meth:`embedded` (runs it in a worker thread)."""
        return await asyncio.to_thread(lambda: cls.embedded(data_path, **kwargs))

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
        self._handles.clear()
        self._turn_handles.clear()
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

    def _probe(self, timeout: float) -> bool:
        """One liveness probe (REST ``/v1/.well-known/live``); ``True`` when it answered 200."""
        if self._live_url is None:
            return True
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self._live_url, timeout=max(0.05, timeout)) as resp:
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
        ok = self._probe(timeout)
        if ok:
            self._last_ok = now
        return ok

    def _request_timeout(self) -> float:
        """Seconds one request may take in total: the client's query timeout (default 30)."""
        cfg = getattr(getattr(self._client, "_connection", None), "timeout_config", None)
        value = getattr(cfg, "query", None)
        return float(value) if isinstance(value, (int, float)) and value > 0 else 30.0

    def _watched(self, fn: Callable[[], T], deadline: float) -> T:
        """Run ``fn`` in a worker thread; give up at ``deadline`` or when the server stops answering.

        A server that dies or hangs (``SIGSTOP``) right after a successful call is not caught by
        :meth:`_reachable` (it skips the probe for ``health_check_interval``), and the client then
        retries internally for about a minute. While ``fn`` runs, the server is probed every
        ``_watch_interval`` seconds; a failed probe or the deadline abandons the call with a
        transient error. Only used for reads, deletes and schema calls: an abandoned call may
        still complete later, which is harmless for those (idempotent), unlike for batch writes.
        """
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["out"] = fn()
            except BaseException as exc:  # re-raised in the caller's thread
                box["err"] = exc
            finally:
                done.set()

        _WORKERS.run(run)
        next_probe = time.monotonic() + self._watch_interval
        while not done.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic()))):
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(f"Weaviate did not answer within {self._request_timeout():g}s")
            if self._live_url is not None and now >= next_probe:
                if not self._probe(min(self._probe_timeout, deadline - now)) and not done.is_set():
                    raise _UnreachableError(f"server not reachable at {self._live_url}")
                next_probe = time.monotonic() + self._watch_interval
        if "err" in box:
            raise box["err"]
        return box["out"]  # type: ignore[no-any-return]

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on transient errors; translate what finally fails.

        The whole call, retries included, ends within the client's query timeout.
        """
        self._check_open()
        deadline = time.monotonic() + self._request_timeout()
        attempt = 0
        while True:
            try:
                if not self._reachable(deadline):
                    raise _UnreachableError(f"server not reachable at {self._live_url}")
                out = self._watched(fn, deadline)
                self._last_ok = time.monotonic()
                return out
            except Exception as exc:
                if isinstance(exc, (StoreError, InvalidInputError)):
                    raise
                if (
                    attempt < self.max_retries
                    and _is_transient(exc)
                    and not self._closed
                    and time.monotonic() + self.retry_base_delay * (2**attempt) < deadline
                ):
                    logger.debug("retrying Weaviate %s after %r", what, exc)
                    self._sleep_before_retry(attempt)
                    attempt += 1
                    continue
                raise _translate(exc, what) from exc

    # -- schema --------------------------------------------------------------------------------
    def _property_defs(self) -> list[Any]:
        from weaviate.classes.config import DataType, Property, Tokenization

        def ident(name: str) -> Any:
            return Property(
                name=name,
                data_type=DataType.TEXT,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
                index_filterable=True,
            )

        def blob(name: str, dt: Any = DataType.TEXT) -> Any:
            return Property(
                name=name,
                data_type=dt,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
                index_filterable=False,
            )

        return [
            ident("record_id"),
            ident("user_id"),
            ident("session_id"),
            blob("content"),
            Property(
                name=SEARCH_PROPERTY,
                data_type=DataType.TEXT,
                tokenization=Tokenization.WHITESPACE,
                index_searchable=True,
                index_filterable=False,
            ),
            ident("category"),
            Property(name="importance", data_type=DataType.NUMBER),
            ident("source"),
            Property(name="created_at", data_type=DataType.DATE),
            Property(name="updated_at", data_type=DataType.DATE),
            Property(name="last_accessed_at", data_type=DataType.DATE),
            Property(name="access_count", data_type=DataType.INT),
            Property(
                name="tags",
                data_type=DataType.TEXT_ARRAY,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
                index_filterable=True,
            ),
            blob("metadata_json"),
            ident("status"),
            Property(name="version", data_type=DataType.INT),
            ident("supersedes"),
            ident("superseded_by"),
            blob("provenance", DataType.TEXT_ARRAY),
            blob("context"),
        ]

    def _vector_config(self) -> Any:
        from weaviate.classes.config import Configure, VectorDistances

        cosine = VectorDistances.COSINE
        index: Any
        if self.vector_index == "flat":
            index = Configure.VectorIndex.flat(distance_metric=cosine)
        elif self.vector_index == "hnsw":
            index = Configure.VectorIndex.hnsw(distance_metric=cosine)
        else:
            index = Configure.VectorIndex.dynamic(
                distance_metric=cosine,
                threshold=self.dynamic_threshold,
                flat=Configure.VectorIndex.flat(distance_metric=cosine),
                hnsw=Configure.VectorIndex.hnsw(distance_metric=cosine),
            )
        return Configure.Vectors.self_provided(name=VECTOR_NAME, vector_index_config=index)

    def _turn_property_defs(self) -> list[Any]:
        from weaviate.classes.config import DataType, Property, Tokenization

        def ident(name: str) -> Any:
            return Property(
                name=name,
                data_type=DataType.TEXT,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
                index_filterable=True,
            )

        def blob(name: str, dt: Any = DataType.TEXT) -> Any:
            if dt != DataType.TEXT:
                return Property(name=name, data_type=dt, index_filterable=False)
            return Property(
                name=name,
                data_type=dt,
                tokenization=Tokenization.FIELD,
                index_searchable=False,
                index_filterable=False,
            )

        return [
            ident("user_id"),
            ident("session_id"),
            ident("turn_id"),
            blob("role"),
            blob("content"),
            blob("timestamp", DataType.DATE),
            blob("importance", DataType.NUMBER),
            blob("key_frame", DataType.BOOL),
            blob("key_frame_reason"),
            blob("tokens", DataType.INT),
            blob("scoring_note"),
            Property(name="seq", data_type=DataType.INT, index_filterable=True, index_range_filters=True),
            Property(name="epoch", data_type=DataType.INT, index_filterable=True),
        ]

    def create(self) -> None:
        """Create the memory, meta, turn and forget-epoch collections.

        Raises:
            SchemaError: a collection of that name already exists.
            StoreUnavailableError: the server cannot be reached.
        """
        if self._call("schema check", lambda: self._client.collections.exists(self.collection)):
            raise SchemaError(f"collection {self.collection!r} already exists; use ensure_schema()")
        self.ensure_schema()

    def ensure_schema(self) -> None:
        """Create the collections if missing and check an existing schema; load the meta data.

        Idempotent and safe to call concurrently from several processes.

        Raises:
            SchemaError: the existing collection was not made by this module (no multi-tenancy,
                no whitespace ``search_text`` property) or was indexed with another analyzer.
            StoreUnavailableError: the server cannot be reached.
        """
        from weaviate.classes.config import Configure, DataType, Property, Tokenization

        cols = self._client.collections

        def create_main() -> None:
            if cols.exists(self.collection):
                return
            try:
                cols.create(
                    self.collection,
                    description="hybrid-memory long-term memories (one tenant per user)",
                    vector_config=self._vector_config(),
                    properties=self._property_defs(),
                    inverted_index_config=Configure.inverted_index(bm25_b=0.75, bm25_k1=1.2),
                    multi_tenancy_config=Configure.multi_tenancy(
                        enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
                    ),
                    replication_config=Configure.replication(factor=self.replication_factor)
                    if self.replication_factor is not None
                    else None,
                )
            except Exception:
                if not cols.exists(self.collection):  # lost a creation race: fine
                    raise

        def create_meta() -> None:
            if cols.exists(self.meta_collection):
                return
            try:
                cols.create(
                    self.meta_collection,
                    description=f"hybrid-memory settings of {self.collection}",
                    properties=[
                        Property(
                            name="key",
                            data_type=DataType.TEXT,
                            tokenization=Tokenization.FIELD,
                            index_searchable=False,
                        ),
                        Property(
                            name="value",
                            data_type=DataType.TEXT,
                            index_searchable=False,
                            index_filterable=False,
                        ),
                    ],
                    replication_config=Configure.replication(factor=self.replication_factor)
                    if self.replication_factor is not None
                    else None,
                )
            except Exception:
                if not cols.exists(self.meta_collection):
                    raise

        def no_vectors() -> Any:
            return Configure.Vectors.self_provided(vector_index_config=Configure.VectorIndex.none())

        def create_turns() -> None:
            if cols.exists(self.turns_collection):
                return
            try:
                cols.create(
                    self.turns_collection,
                    description=f"hybrid-memory turn logs of {self.collection} (one tenant per user)",
                    properties=self._turn_property_defs(),
                    vector_config=no_vectors(),
                    multi_tenancy_config=Configure.multi_tenancy(
                        enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
                    ),
                    replication_config=replication,
                )
            except Exception:
                if not cols.exists(self.turns_collection):
                    raise

        def create_epochs() -> None:
            if cols.exists(self.epochs_collection):
                return
            try:
                cols.create(
                    self.epochs_collection,
                    description=f"hybrid-memory forget epochs of {self.collection} (by SHA-256 of the user id)",
                    properties=[
                        Property(name="epoch", data_type=DataType.INT, index_filterable=False),
                    ],
                    vector_config=no_vectors(),
                    replication_config=replication,
                )
            except Exception:
                if not cols.exists(self.epochs_collection):
                    raise

        replication = (
            Configure.replication(factor=self.replication_factor) if self.replication_factor is not None else None
        )
        self._call("create collection", create_main)
        self._call("create meta collection", create_meta)
        self._call("create turns collection", create_turns)
        self._call("create forget-epochs collection", create_epochs)
        self._check_schema()
        with self._meta_lock:
            self._meta = None
        meta = self._load_meta()
        if meta.get("analyzer") not in (None, self.analyzer.name):
            raise SchemaError(
                f"collection {self.collection!r} was indexed with analyzer {meta['analyzer']!r}, "
                f"this store uses {self.analyzer.name!r}; BM25 would not match. Re-index into a new "
                "collection or pass the original analyzer."
            )

    def _check_schema(self) -> None:
        cfg = self._call("read schema", lambda: self._client.collections.use(self.collection).config.get())
        if not cfg.multi_tenancy_config.enabled:
            raise SchemaError(f"collection {self.collection!r} exists without multi-tenancy")
        props = {p.name: p for p in cfg.properties}
        p = props.get(SEARCH_PROPERTY)
        tok = getattr(getattr(p, "tokenization", None), "value", None)
        if p is None or tok != "whitespace":
            raise SchemaError(
                f"collection {self.collection!r} has no whitespace-tokenised {SEARCH_PROPERTY!r} "
                "property; it was not created by hybrid-memory"
            )
        ctx = next((q for q in self._property_defs() if q.name == "context"), None)
        if ctx is not None and "context" not in props:  # created before memories had a search context
            self._call("add property", lambda: self._client.collections.use(self.collection).config.add_property(ctx))
        searchable = sorted(n for n, q in props.items() if getattr(q, "index_searchable", False))
        if searchable != [SEARCH_PROPERTY]:
            logger.warning(
                "collection %s has other searchable properties %s; BM25 only searches %s",
                self.collection,
                searchable,
                SEARCH_PROPERTY,
            )

    def drop(self) -> None:
        """Delete the four collections: every memory, turn and forget epoch (all users!). Idempotent."""

        def run() -> None:
            for name in (self.collection, self.meta_collection, self.turns_collection, self.epochs_collection):
                if self._client.collections.exists(name):
                    self._client.collections.delete(name)

        self._call("drop collections", run)
        with self._meta_lock:
            self._meta = None
        self._handles.clear()
        self._turn_handles.clear()

    async def acreate(self) -> None:
        """Async twin of :meth:`create`."""
        await asyncio.to_thread(self.create)

    async def aensure_schema(self) -> None:
        """Async twin of :meth:`ensure_schema`."""
        await asyncio.to_thread(self.ensure_schema)

    async def adrop(self) -> None:
        """Async twin of :meth:`drop`."""
        await asyncio.to_thread(self.drop)

    # -- meta ----------------------------------------------------------------------------------
    def _load_meta(self) -> dict[str, Any]:
        with self._meta_lock:
            if self._meta is not None:
                return self._meta
            meta_coll = self._client.collections.use(self.meta_collection)
            obj = self._call("read meta", lambda: meta_coll.query.fetch_object_by_id(_CONFIG_UUID))
            if obj is None:
                meta: dict[str, Any] = {
                    "schema_version": SCHEMA_VERSION,
                    "analyzer": self.analyzer.name,
                    "embedder": None,
                    "dimension": None,
                }
                if not self._create_meta(meta):  # another process created it first: use theirs
                    obj = self._call("read meta", lambda: meta_coll.query.fetch_object_by_id(_CONFIG_UUID))
                    if obj is None:
                        raise SchemaError(f"the meta object of {self.collection!r} vanished while it was created")
                    meta = json.loads(obj.properties["value"])
            else:
                meta = json.loads(obj.properties["value"])
            self._meta = meta
            return meta

    def _create_meta(self, meta: Mapping[str, Any]) -> bool:
        """Insert the first meta object; ``False`` when another process inserted it meanwhile."""
        meta_coll = self._client.collections.use(self.meta_collection)
        props = {"key": "config", "value": json.dumps(dict(meta), sort_keys=True)}

        def run() -> bool:
            try:
                meta_coll.data.insert(properties=props, uuid=_CONFIG_UUID)
            except Exception as exc:
                if getattr(exc, "status_code", None) == 422 and meta_coll.data.exists(_CONFIG_UUID):
                    return False  # 422 "id already exists": a concurrent first connection won
                raise
            return True

        return bool(self._call("create meta", run))

    def _write_meta(self, meta: Mapping[str, Any]) -> None:
        meta_coll = self._client.collections.use(self.meta_collection)
        props = {"key": "config", "value": json.dumps(dict(meta), sort_keys=True)}

        def run() -> None:
            if meta_coll.data.exists(_CONFIG_UUID):
                meta_coll.data.replace(uuid=_CONFIG_UUID, properties=props)
            else:
                meta_coll.data.insert(properties=props, uuid=_CONFIG_UUID)

        self._call("write meta", run)

    @property
    def dimension(self) -> int | None:
        """Vector dimension of the stored memories (``None`` while no embedder was bound).

        Reads the meta collection once (network IO on first access).
        """
        self._check_open()
        dim = self._load_meta().get("dimension")
        return int(dim) if dim is not None else None

    @property
    def embedder_name(self) -> str | None:
        """Name of the embedder bound with :meth:`bind_embedder` (``None`` if unknown)."""
        self._check_open()
        name = self._load_meta().get("embedder")
        return str(name) if name is not None else None

    def bind_embedder(self, name: str, dimension: int) -> None:
        """Record the embedder on first use, or check it against the stored one.

        Raises:
            EmbeddingDimensionError: the store holds vectors of another dimension.
        """
        self._check_open()
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}")
        meta = dict(self._load_meta())
        stored = meta.get("dimension")
        if stored is not None and int(stored) != dimension:
            raise EmbeddingDimensionError(
                int(stored),
                dimension,
                hint=(
                    f"collection {self.collection!r} was built with embedder {meta.get('embedder')!r}; "
                    f"re-embed into a new collection (`hybrid-memory reembed`) or use the original embedder"
                ),
            )
        if stored is None or meta.get("embedder") != name:
            if stored is not None and meta.get("embedder") not in (None, name):
                logger.warning(
                    "embedder changed from %s to %s (same dimension %d); stored vectors may not be comparable",
                    meta.get("embedder"),
                    name,
                    dimension,
                )
            meta["dimension"] = dimension
            meta["embedder"] = name
            with self._meta_lock:
                self._write_meta(meta)
                self._meta = meta

    def _ensure_dimension(self, dim: int) -> None:
        stored = self.dimension
        if stored is None:
            meta = dict(self._load_meta())
            meta["dimension"] = dim
            with self._meta_lock:
                self._write_meta(meta)
                self._meta = meta
        elif stored != dim:
            raise EmbeddingDimensionError(stored, dim)

    # -- helpers -------------------------------------------------------------------------------
    def _tenant(self, tenant: str) -> Any:
        h = self._handles.get(tenant)
        if h is None:
            if len(self._handles) > 4096:
                self._handles.clear()
            h = self._client.collections.use(self.collection).with_tenant(tenant)
            self._handles[tenant] = h
        return h

    def _turns(self, tenant: str) -> Any:
        h = self._turn_handles.get(tenant)
        if h is None:
            if len(self._turn_handles) > 4096:
                self._turn_handles.clear()
            h = self._client.collections.use(self.turns_collection).with_tenant(tenant)
            self._turn_handles[tenant] = h
        return h

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

    def _fetch(
        self, user_id: str, ids: Sequence[str], *, vectors: bool
    ) -> dict[str, tuple[MemoryRecord, Vector | None]]:
        """Stored records (and vectors) by record id; missing ids are absent."""
        from weaviate.classes.query import Filter

        check_id(user_id)
        uuids = list(dict.fromkeys(object_uuid(i) for i in ids))
        if not uuids:
            return {}
        h = self._tenant(tenant_name(user_id))
        out: dict[str, tuple[MemoryRecord, Vector | None]] = {}
        for chunk in _chunks(uuids, _ID_CHUNK):

            def run(chunk: Sequence[str] = chunk) -> Any:
                return h.query.fetch_objects(
                    filters=Filter.by_id().contains_any(list(chunk)),
                    limit=len(chunk),
                    include_vector=vectors,
                )

            try:
                res = self._call("fetch", run)
            except StoreError as exc:
                if _is_tenant_missing(exc):
                    return {}
                raise
            for o in res.objects:
                rec = _record(o.properties)
                if rec.user_id != user_id:  # defence in depth: tenants already isolate users
                    continue
                out[rec.id] = (rec, _vector_of(o) if vectors else None)
        return out

    # -- writes --------------------------------------------------------------------------------
    def _send(self, tenant: str, items: Sequence[_Pending]) -> list[tuple[_Pending, str]]:
        """One attempt: batch-write ``items`` into ``tenant``; return the failures with reasons.

        Each chunk is one gRPC ``BatchObjects`` request (``data.insert_many``); its per-object
        errors are the ``ErrorObject`` s that the client's batch context collects in
        ``failed_objects``. The batch *context* is not used: in weaviate-client 4.24.1 against
        servers >= 1.36 it is the streaming batcher, which waits up to 1 s for a partial batch
        and, when the server is unreachable, retries internally for about ten minutes
        (``WEAVIATE_BATCH_MAX_RETRIES``) before reporting anything -- that would bypass the
        bounded retry and dead-letter policy of this store.
        """
        from weaviate.classes.data import DataObject

        h = self._tenant(tenant)
        failed: list[tuple[_Pending, str]] = []
        chunks = list(_chunks(items, self.batch_size))
        window = max(1, min(self.write_concurrency, len(chunks)))
        in_flight: collections.deque[tuple[Sequence[_Pending], concurrent.futures.Future[Any]]] = collections.deque()

        def collect() -> None:
            chunk, fut = in_flight.popleft()
            try:
                res = fut.result()
            except Exception as exc:  # the whole request failed (network, all objects rejected)
                failed.extend((p, f"{type(exc).__name__}: {exc}") for p in chunk)
                return
            self._last_ok = time.monotonic()
            for idx, err in res.errors.items():
                failed.append((chunk[int(idx)], str(getattr(err, "message", err))))

        try:
            for chunk in chunks:
                objs = [
                    DataObject(
                        properties=_properties(p.record, self.analyzer.analyze(p.record.search_text)),
                        uuid=p.uuid,
                        vector={VECTOR_NAME: p.vector.tolist()},
                    )
                    for p in chunk
                ]
                while len(in_flight) >= window:
                    collect()
                if not self._reachable():
                    failed.extend((p, f"server not reachable at {self._live_url}") for p in chunk)
                    continue
                in_flight.append((chunk, _submit(h.data.insert_many, objs, inline=window == 1)))
            while in_flight:
                collect()
        finally:  # only when an exception escaped: let the requests already sent finish
            concurrent.futures.wait([fut for _, fut in in_flight])
        return failed

    def _write(
        self,
        items: Sequence[_Pending],
        *,
        dead_letter: bool = True,
        epochs: Mapping[str, int] | None = None,
    ) -> list[tuple[_Pending, str]]:
        """Write with retries; return the final failures.

        With ``dead_letter`` (full writes of the caller's records) what still fails is queued
        (with its user's epoch from ``epochs``) and what succeeds clears any older queued version
        of the same memory. Without it (touch) the queue is left alone, so a pending newer
        version is neither cleared nor overwritten.
        """
        self._check_open()
        by_tenant: dict[str, list[_Pending]] = {}
        for p in items:
            by_tenant.setdefault(p.tenant, []).append(p)
        final: list[tuple[_Pending, str]] = []
        # Once the server proved unreachable after all retries, later tenants of this call are
        # tried once (the liveness probe still runs) instead of sleeping through the backoff again.
        down = False
        with self._write_lock:
            for tenant, group in by_tenant.items():
                todo = list(group)
                attempt = 0
                while True:
                    failures = self._send(tenant, todo)
                    if not failures:
                        break
                    if attempt >= self.max_retries or self._closed or down:
                        final.extend(failures)
                        down = down or all(m.startswith("server not reachable") for _, m in failures)
                        break
                    logger.debug("retrying %d failed objects for tenant %s", len(failures), tenant)
                    self._sleep_before_retry(attempt)
                    attempt += 1
                    todo = [p for p, _ in failures]
                failed_ids = {p.uuid for p, _ in final}
                ok = [p.record.id for p in group if p.uuid not in failed_ids]
                if ok and dead_letter:
                    self._dlq.remove(group[0].record.user_id, ok)
        if final and dead_letter:
            self._dlq.add(final, epochs)
        return final

    def _raise_failures(self, failures: Sequence[tuple[_Pending, str]], total: int) -> None:
        if not failures:
            return
        first = failures[0][1]
        msg = (
            f"{len(failures)} of {total} memories could not be written to Weaviate after "
            f"{self.max_retries} retries; they are kept in the dead-letter queue "
            f"({self._dlq.path or 'in memory'}) - call replay_dead_letters(). First error: {first}"
        )
        if all(_message_is_transient(m) for _, m in failures):
            raise StoreUnavailableError(msg)
        raise StoreError(msg)

    def _pending(self, records: Sequence[MemoryRecord], vectors: Vector) -> list[_Pending]:
        latest: dict[tuple[str, str], _Pending] = {}
        for rec, vec in zip(records, vectors, strict=True):
            if not isinstance(rec, MemoryRecord):
                raise InvalidInputError(f"expected MemoryRecord, got {type(rec).__name__}")
            _metadata_json(rec)  # validates metadata before anything is sent
            latest[(rec.user_id, rec.id)] = _Pending(rec, vec, object_uuid(rec.id), tenant_name(rec.user_id))
        return list(latest.values())

    # -- forget epochs -------------------------------------------------------------------------
    def _read_epoch(self, user_id: str) -> int:
        """The user's forget epoch: one object fetch by UUID (0 when the user was never forgotten)."""
        coll = self._client.collections.use(self.epochs_collection)
        uid = _epoch_uuid(user_id)
        obj = self._call("read forget epoch", lambda: coll.query.fetch_object_by_id(uid, return_properties=["epoch"]))
        if obj is None:
            return 0
        try:
            return int(obj.properties["epoch"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"a forget-epoch object has no integer epoch: {exc}") from exc

    def _bump_epoch(self, user_id: str) -> int:
        """Read-modify-write ``epoch + 1`` (two concurrent bumps may land as one: it still moved)."""
        from weaviate.classes.data import DataObject

        coll = self._client.collections.use(self.epochs_collection)
        uid = _epoch_uuid(user_id)
        new = self._read_epoch(user_id) + 1

        def run() -> None:
            res = coll.data.insert_many([DataObject(properties={"epoch": new}, uuid=uid)])
            for err in res.errors.values():
                raise _object_error(str(getattr(err, "message", err)))

        self._call("write forget epoch", run)
        return new

    def user_epoch(self, user_id: str) -> int:
        """The user's forget epoch (0 until the first :meth:`delete_user`; each one changes it).

        One object fetch by UUID; nothing is cached, so a forget from any process is seen at once.
        """
        self._check_open()
        check_id(user_id)
        return self._read_epoch(user_id)

    def _check_epochs(self, epochs: Mapping[str, int], *, outage_ok: bool = False) -> None:
        """Before a write: refuse it if a user's epoch is no longer the caller's.

        With ``outage_ok`` an unreachable server skips the check: the write then fails too and
        is dead-lettered with the epochs, which the replay checks.
        """
        for user, epoch in epochs.items():
            try:
                current = self._read_epoch(user)
            except StoreUnavailableError:
                if outage_ok:
                    return
                raise
            if current != epoch:
                raise UserForgottenError(user)

    def _forgotten_since(self, epochs: Mapping[str, int]) -> list[str]:
        """After a write: the users of ``epochs`` whose epoch moved meanwhile."""
        return [user for user, epoch in epochs.items() if self._read_epoch(user) != epoch]

    def _delete_objects(self, handle: Any, uuids: Sequence[str], what: str) -> int:
        """Delete objects by UUID from one tenant (a missing tenant holds none)."""
        from weaviate.classes.query import Filter

        deleted = 0
        for chunk in _chunks(list(dict.fromkeys(uuids)), _ID_CHUNK):

            def run(chunk: Sequence[str] = chunk) -> int:
                res = handle.data.delete_many(where=Filter.by_id().contains_any(list(chunk)))
                if res.failed:
                    raise StoreError(f"{res.failed} of {res.matches} deletions failed")
                return int(res.matches)

            try:
                deleted += self._call(what, run)
            except StoreError as exc:
                if _is_tenant_missing(exc):
                    return deleted
                raise
        return deleted

    def _undo(self, written: Sequence[_Pending], users: Iterable[str]) -> None:
        """Delete what a write refused after the fact (``users`` were forgotten) had stored."""
        gone = set(users)
        by_tenant: dict[str, list[_Pending]] = {}
        for p in written:
            if p.record.user_id in gone:
                by_tenant.setdefault(p.tenant, []).append(p)
        with self._write_lock:
            for tenant, group in by_tenant.items():
                self._dlq.remove(group[0].record.user_id, [p.record.id for p in group])
                self._delete_objects(self._tenant(tenant), [p.uuid for p in group], "undo a forgotten write")

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
        m = as_matrix(vectors, len(records), None)
        if not np.all(np.any(m != 0, axis=1)):
            raise InvalidInputError("a zero vector has no direction; cosine similarity is undefined")
        self._ensure_dimension(int(m.shape[1]))
        items = self._pending(records, _unit_rows(m))
        if guard:
            self._check_epochs(guard, outage_ok=True)
        failures = self._write(items, epochs=guard or None)
        gone = self._undo_if_forgotten(items, failures, guard)
        if gone:
            raise UserForgottenError(gone[0])
        self._raise_failures(failures, len(items))

    def _undo_if_forgotten(
        self, items: Sequence[_Pending], failures: Sequence[tuple[_Pending, str]], epochs: Mapping[str, int]
    ) -> list[str]:
        """After a write: undo it for the users of ``epochs`` forgotten meanwhile; return them."""
        failed = {p.uuid for p, _ in failures}
        written = [p for p in items if p.uuid not in failed]
        if not epochs or not written:
            return []
        gone = self._forgotten_since(epochs)
        if gone:
            self._undo(written, gone)
            for user in gone:  # its queued part would be dropped by a replay anyway
                self._dlq.remove(user, [p.record.id for p in items if p.record.user_id == user])
        return gone

    def update(self, records: Sequence[MemoryRecord], *, epochs: Mapping[str, int] | None = None) -> None:
        """Replace stored records' fields, keeping their vectors.

        A read-modify-write: without ``epochs`` the users' current epochs are read first, so an
        update racing a forget (from any process) never re-inserts a forgotten memory.

        Args:
            records: The new versions of stored records.
            epochs: As in :meth:`upsert`.

        Raises:
            UserForgottenError: a user in ``epochs`` was forgotten since (checked first), or a
                user was forgotten while the update ran.
            NotFoundError: an id does not exist for its user (nothing is written).
        """
        self._check_open()
        records = _check_records(records)
        guard = _check_epoch_map(epochs)
        if not records:
            return
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
        # Read-modify-write under the write lock: a delete/delete_user of this process cannot
        # slip in between; other processes are covered by the epochs.
        with self._write_lock:
            for user_id, group in by_user.items():
                stored = self._fetch(user_id, [r.id for r in group], vectors=True)
                missing = [r.id for r in group if r.id not in stored]
                if missing:
                    gone = self._forgotten_since(guard)
                    if gone:
                        raise UserForgottenError(gone[0])
                    raise NotFoundError(f"memory {missing[0]!r} does not exist for user {user_id!r}")
                for r in group:
                    vec = stored[r.id][1]
                    if vec is None:
                        raise SchemaError(f"memory {r.id!r} has no stored vector")
                    recs.append(r)
                    vecs.append(vec)
            items = self._pending(recs, np.stack(vecs).astype(np.float32))
            failures = self._write(items, epochs=guard)
        gone = self._undo_if_forgotten(items, failures, guard)
        if gone:
            raise UserForgottenError(gone[0])
        self._raise_failures(failures, len(items))

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        """``access_count += 1`` and ``last_accessed_at = when`` (missing ids are skipped).

        The increment is read-modify-write: concurrent touches of one memory may count once. A
        failed touch raises but is not dead-lettered (it would overwrite a pending newer version).
        A touch racing a forget (from any process) deletes what it re-wrote and returns.
        """
        self._check_open()
        when = ensure_utc(when, name="when")
        ids = _check_ids(ids)
        check_id(user_id)
        if not ids:
            return
        epoch = self._read_epoch(user_id)
        with self._write_lock:  # see update(): never re-insert a memory forgotten meanwhile
            written = self._touch(user_id, ids, when)
        if written and self._read_epoch(user_id) != epoch:
            self._undo(written, [user_id])

    def _touch(self, user_id: str, ids: list[str], when: datetime) -> list[_Pending]:
        stored = self._fetch(user_id, ids, vectors=True)
        if not stored:
            return []
        recs: list[MemoryRecord] = []
        vecs: list[Vector] = []
        for rec, vec in stored.values():
            if vec is None:
                continue
            recs.append(rec.evolve(access_count=rec.access_count + 1, last_accessed_at=when))
            vecs.append(vec)
        if not recs:
            return []
        items = self._pending(recs, np.stack(vecs).astype(np.float32))
        failures = self._write(items, dead_letter=False)
        if failures:
            msg = f"{len(failures)} of {len(items)} access updates failed: {failures[0][1]}"
            if all(_message_is_transient(m) for _, m in failures):
                raise StoreUnavailableError(msg)
            raise StoreError(msg)
        return items

    def replay_dead_letters(self, user_id: str | None = None) -> int:
        """Write the dead-lettered records again; return how many succeeded.

        Records that fail again stay queued (their error and attempt count are updated). A record
        written successfully later through :meth:`upsert` is removed from the queue, so a replay
        never overwrites newer data with an older version. A record whose write carried a forget
        epoch is dropped (not written) when its user was forgotten since, from any process.
        """
        self._check_open()
        pending = self._dlq.pending(user_id)
        if not pending:
            return 0
        current: dict[str, int] = {}
        stale: dict[str, list[str]] = {}
        items: list[_Pending] = []
        for r, v, _, _, epoch in pending:
            if epoch is not None:
                if r.user_id not in current:
                    current[r.user_id] = self._read_epoch(r.user_id)
                if current[r.user_id] != epoch:
                    stale.setdefault(r.user_id, []).append(r.id)
                    continue
            items.append(_Pending(r, v, object_uuid(r.id), tenant_name(r.user_id)))
        for user, ids in stale.items():
            logger.info("dropping %d dead letters of a user forgotten since they were queued", len(ids))
            self._dlq.remove(user, ids)
        if not items:
            return 0
        guard = {u: e for u, e in current.items() if any(p.record.user_id == u for p in items)}
        failures = self._write(items, epochs=guard or None)
        gone = set(self._undo_if_forgotten(items, failures, guard))
        failed = {p.uuid for p, _ in failures}
        return sum(1 for p in items if p.uuid not in failed and p.record.user_id not in gone)

    async def areplay_dead_letters(self, user_id: str | None = None) -> int:
        """Async twin of :meth:`replay_dead_letters`."""
        return await asyncio.to_thread(self.replay_dead_letters, user_id)

    def dead_letters(self, user_id: str | None = None) -> list[tuple[MemoryRecord, str, int]]:
        """Queued records with their last error and attempt count (local file, no network)."""
        return [(r, err, n) for r, _, err, n, _ in self._dlq.pending(user_id)]

    def dead_letter_count(self) -> int:
        """Number of records in the dead-letter queue."""
        return self._dlq.count()

    # -- reads ---------------------------------------------------------------------------------
    def get(self, user_id: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records with these ids that exist for ``user_id`` (missing skipped), in order."""
        self._check_open()
        ids = _check_ids(ids)
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
        stored = self._fetch(user_id, _check_ids(ids), vectors=True)
        return {i: v for i, (_, v) in stored.items() if v is not None}

    def count(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:
        """Number of memories of one user (or all users) passing ``filter`` (``None`` = all).

        With ``user_id=None`` only active tenants are counted (offloaded users are not woken up).
        """
        self._check_open()
        where = self._filters(filter)
        if where is _NOTHING:
            return 0
        tenants = [tenant_name(user_id)] if user_id is not None else self._tenant_names()
        total = 0
        for t in tenants:
            h = self._tenant(t)

            def run(h: Any = h) -> int:
                return int(h.aggregate.over_all(total_count=True, filters=where).total_count or 0)

            try:
                total += self._call("count", run)
            except StoreError as exc:
                if _is_tenant_missing(exc):
                    continue
                raise
        return total

    def _tenant_names(self) -> list[str]:
        """Names of the active tenants (inactive/offloaded ones are not woken up)."""
        coll = self._client.collections.use(self.collection)
        tenants = self._call("list tenants", lambda: coll.tenants.get())
        return sorted(name for name, t in tenants.items() if _is_active(t))

    def users(self) -> list[str]:
        """Ids of the users that have memories (sorted).

        Reads one object per tenant. Only active tenants are inspected: a user id is stored
        only inside its tenant, so inactive or offloaded tenants are not listed.
        """
        self._check_open()
        out: set[str] = set()
        for name in self._tenant_names():
            h = self._tenant(name)

            def run(h: Any = h) -> Any:
                return h.query.fetch_objects(limit=1, return_properties=["user_id"])

            try:
                res = self._call("users", run)
            except StoreError as exc:
                if _is_tenant_missing(exc):
                    continue
                raise
            for o in res.objects:
                out.add(str(o.properties["user_id"]))
        return sorted(out)

    # -- deletes -------------------------------------------------------------------------------
    def delete(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete these memories of ``user_id``; return how many existed."""
        self._check_open()
        from weaviate.classes.query import Filter

        check_id(user_id)
        ids = _check_ids(ids)
        if not ids:
            return 0
        self._dlq.remove(user_id, ids)
        h = self._tenant(tenant_name(user_id))
        uuids = list(dict.fromkeys(object_uuid(i) for i in ids))
        deleted = 0
        with self._write_lock:
            for chunk in _chunks(uuids, _ID_CHUNK):

                def run(chunk: Sequence[str] = chunk) -> int:
                    res = h.data.delete_many(where=Filter.by_id().contains_any(list(chunk)))
                    if res.failed:
                        raise StoreError(f"{res.failed} of {res.matches} deletions failed")
                    return int(res.matches)

                try:
                    deleted += self._call("delete", run)
                except StoreError as exc:
                    if _is_tenant_missing(exc):
                        return 0
                    raise
        return deleted

    def delete_user(self, user_id: str) -> int:
        """Delete everything of ``user_id`` and change its forget epoch.

        In this order: bump the epoch, remove the memory and turn tenants and the user's dead
        letters (in this store's file), bump the epoch again, remove the tenants again. A write
        racing the forget (from any process) either lands before one of the removals or sees a
        moved epoch after it wrote and deletes what it wrote (module docstring).

        Returns:
            The number of memories the user had.
        """
        self._check_open()
        check_id(user_id)
        tenant = tenant_name(user_id)
        n = self.count(user_id)
        memories = self._client.collections.use(self.collection)
        turns = self._client.collections.use(self.turns_collection)

        def remove() -> None:
            memories.tenants.remove([tenant])  # a missing tenant is not an error
            turns.tenants.remove([tenant])

        with self._write_lock:
            for sweep in range(2):
                self._bump_epoch(user_id)
                self._call("delete tenant", remove)
                self._handles.pop(tenant, None)
                self._turn_handles.pop(tenant, None)
                if sweep == 0:
                    self._dlq.remove_user(user_id)
        return n

    # -- conversation state --------------------------------------------------------------------
    def append_turns(self, turns: Sequence[Turn], *, epoch: int) -> list[Turn]:
        """Durably append turns of one user to their sessions' logs.

        The user's epoch is checked before the write (refused, nothing written) and after it
        (what was written is deleted again). A retried append of the same turn id replaces the
        stored turn instead of adding one.

        Returns:
            The turns with ``seq`` set, in the given order (strictly increasing per session).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch``.
            InvalidInputError: turns of several users, or invalid turns.
        """
        self._check_open()
        from weaviate.classes.data import DataObject

        if isinstance(turns, (str, bytes)) or not isinstance(turns, Sequence):
            raise InvalidInputError("turns must be a sequence of Turn")
        items = list(turns)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidInputError(f"epoch must be a non-negative int, got {epoch!r}")
        if not items:
            return []
        if not all(isinstance(t, Turn) for t in items) or len({t.user_id for t in items}) != 1:
            raise InvalidInputError("append_turns takes Turn objects of exactly one user")
        user = items[0].user_id
        check_id(user)
        for t in items:
            check_id(t.session_id, name="session_id")
            check_id(t.id, name="turn id")
            check_text(t.content)
            ensure_utc(t.timestamp, name="timestamp")
        self._check_epochs({user: epoch})
        out = [t.model_copy(update={"seq": _SEQ_CLOCK.next((self.collection, user, t.session_id))}) for t in items]
        objects = [DataObject(properties=_turn_properties(t, epoch), uuid=_turn_uuid(user, t.id)) for t in out]
        h = self._turns(tenant_name(user))
        for chunk in _chunks(objects, self.batch_size):

            def run(chunk: Sequence[Any] = chunk) -> None:
                res = h.data.insert_many(list(chunk))
                for err in res.errors.values():
                    raise _object_error(f"a turn was not stored: {getattr(err, 'message', err)}")

            self._call("append turns", run)  # idempotent: a resent object replaces itself
        if self._read_epoch(user) != epoch:
            self._delete_objects(h, [str(o.uuid) for o in objects], "undo a forgotten append")
            raise UserForgottenError(user)
        return out

    def load_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:
        """The session's turns with ``seq > after_seq`` (in log order), its turn count and the epoch.

        The epoch is read first and only turns written under it are returned (a turn of a
        forgotten epoch is never read back, even before its tenant is removed). The turns are
        read before the count, so ``count`` is at least what the log held when they were read;
        with ``after_seq=0`` it is exactly ``len(turns)``. A cache that finds
        ``count != cached + len(turns)`` must reload the whole log (module docstring).
        """
        self._check_open()
        from weaviate.classes.query import Filter, Sort

        check_id(user_id)
        check_id(session_id, name="session_id")
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise InvalidInputError("after_seq must be a non-negative int")
        epoch = self._read_epoch(user_id)
        h = self._turns(tenant_name(user_id))
        scope = Filter.all_of(
            [Filter.by_property("session_id").equal(session_id), Filter.by_property("epoch").equal(epoch)]
        )
        order = Sort.by_property("seq", ascending=True).by_id(ascending=True)
        turns: list[Turn] = []
        seen: set[str] = set()
        floor, inclusive = after_seq, False
        while True:
            bound = Filter.by_property("seq")
            page_filter = Filter.all_of(
                [scope, bound.greater_or_equal(floor) if inclusive else bound.greater_than(floor)]
            )

            def run(page_filter: Any = page_filter) -> Any:
                return h.query.fetch_objects(filters=page_filter, sort=order, limit=_TURN_PAGE)

            try:
                res = self._call("load session", run)
            except StoreError as exc:
                if _is_tenant_missing(exc):
                    return SessionLog(turns=(), count=0, epoch=epoch)
                raise
            for o in res.objects:
                if str(o.uuid) in seen:
                    continue
                seen.add(str(o.uuid))
                t = _turn(o.properties)
                if t.user_id == user_id and t.session_id == session_id:  # defence in depth
                    turns.append(t)
            if len(res.objects) < _TURN_PAGE:
                break
            floor, inclusive = int(res.objects[-1].properties["seq"]), True  # equal seqs may span pages
        if turns:
            _SEQ_CLOCK.observe((self.collection, user_id, session_id), turns[-1].seq)
        if after_seq == 0:
            count = len(turns)
        else:

            def count_run() -> int:
                return int(h.aggregate.over_all(total_count=True, filters=scope).total_count or 0)

            try:
                count = self._call("count session turns", count_run)
            except StoreError as exc:
                if not _is_tenant_missing(exc):
                    raise
                count = 0  # removed by a forget just now: the epoch tells the reader on its next load
        return SessionLog(turns=tuple(turns), count=count, epoch=epoch)

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the session's turn log (long-term memories stay); return how many turns it held."""
        self._check_open()
        from weaviate.classes.query import Filter

        check_id(user_id)
        check_id(session_id, name="session_id")
        h = self._turns(tenant_name(user_id))
        where = Filter.by_property("session_id").equal(session_id)
        deleted = 0
        while True:

            def run() -> tuple[int, int]:
                res = h.data.delete_many(where=where)
                return int(res.matches), int(res.failed)

            try:
                matches, failed = self._call("delete session", run)
            except StoreError as exc:
                if _is_tenant_missing(exc):
                    return deleted
                raise
            if failed:
                raise StoreError(f"{failed} of {matches} turns of the session could not be deleted")
            deleted += matches
            if matches < QUERY_MAXIMUM_RESULTS:  # one call deletes at most that many
                return deleted

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
                include_vector=qvec is not None,
                return_metadata=MetadataQuery(score=True, explain_score=True),
            )

        try:
            res = self._call("hybrid search", run)
        except StoreError as exc:
            if _is_tenant_missing(exc):
                return []
            raise
        objects = list(res.objects)
        keyword = self._keyword_scores(objects, request, query_text, h, where)
        cosine = _Cosine(qvec) if qvec is not None else None
        hits: list[StoreHit] = []
        for o in objects:
            rec = _record(o.properties)
            if rec.user_id != request.user_id:  # defence in depth
                continue
            vec = _vector_of(o)
            sim = cosine(vec) if (cosine is not None and vec is not None) else None
            hits.append(
                StoreHit(
                    record=rec,
                    score=float(o.metadata.score),
                    keyword_score=keyword.get(str(o.uuid)),
                    vector_similarity=sim,
                )
            )
        return hits

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
                if _is_tenant_missing(exc):
                    return []
                raise
            return [_record(o.properties) for o in res.objects]
        # Large windows: the cursor API has no filters or sorting, so scan and sort here.
        try:
            recs = self._call("list", lambda: [_record(o.properties) for o in h.iterator(cache_size=1000)])
        except StoreError as exc:
            if _is_tenant_missing(exc):
                return []
            raise
        if filter is not None:
            recs = [r for r in recs if filter.matches(r)]
        recs.sort(key=lambda r: (r.created_at, r.id))
        return recs[offset:] if limit is None else recs[offset : offset + limit]
