"""Start and stop a local ``weaviate-server`` binary (tests, notebooks, ``WeaviateStore.embedded``).

No ``weaviate`` import: the launcher only runs a process and polls its REST readiness endpoint.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid_memory.errors import ConfigurationError, StoreUnavailableError

__all__ = ["WeaviateServer", "find_weaviate_binary"]


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


def require_weaviate_binary(binary: str | os.PathLike[str] | None = None) -> str:
    """``binary`` as a string, else :func:`find_weaviate_binary`'s answer.

    Raises:
        ConfigurationError: no binary was given or found.
    """
    found = str(binary) if binary is not None else find_weaviate_binary()
    if found is None:
        raise ConfigurationError(
            "weaviate-server binary not found; set WEAVIATE_BINARY or run "
            "`go install github.com/weaviate/weaviate/cmd/weaviate-server@v1.39.0`"
        )
    return found


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


def _sigterm(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to a process still running (no wait)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then wait ``timeout`` seconds for the exit before a SIGKILL (reaps the process)."""
    _sigterm(proc)
    _await_exit(proc, timeout)


def _await_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


_AT_EXIT = threading.Event()
#: Servers dropped without ``stop()``, for the reaper thread: (process, timeout, temporary data, done).
_REAPS: queue.SimpleQueue[tuple[subprocess.Popen[bytes], float, str | None, threading.Event]] = queue.SimpleQueue()


@functools.cache
def _watch_exit() -> None:
    """Note the interpreter's exit before any ``weakref.finalize`` callback runs (once per process).

    Called right after a finalizer is created: atexit runs its hooks last registered first, and
    ``weakref.finalize`` registered its own hook when the process's first finalizer was created.
    """
    atexit.register(_AT_EXIT.set)


def _finish(proc: subprocess.Popen[bytes], timeout: float, tmp: str | None) -> None:
    """Wait for a server sent SIGTERM (SIGKILL after ``timeout``), then remove its temporary data."""
    _await_exit(proc, timeout)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def _drain() -> None:
    while True:
        proc, timeout, tmp, done = _REAPS.get()
        with contextlib.suppress(Exception):  # the loop must outlive a server it could not reap
            _finish(proc, timeout, tmp)
        done.set()


@functools.cache
def _reaper() -> threading.Thread:
    """The daemon thread that finishes the servers :func:`_reap` hands over (started once per process).

    Started from :meth:`WeaviateServer.spawn`, never from a finalizer: ``Thread.start`` waits for
    the new thread, which first takes ``threading``'s internal locks (Python 3.10-3.12: the lock of
    its shutdown set), and the thread the garbage collector interrupted may hold one of them.
    """
    os.register_at_fork(after_in_child=_reaper.cache_clear)  # a forked child has no such thread
    thread = threading.Thread(target=_drain, name="hybrid-memory-weaviate-reaper", daemon=True)
    thread.start()
    return thread


def _reap(proc: subprocess.Popen[bytes], timeout: float, tmp: str | None) -> threading.Event:
    """The finalizer of a server that was never stopped: stop it, then remove its temporary data.

    At the interpreter's exit it waits, as :meth:`WeaviateServer.stop` does (SIGTERM, SIGKILL
    after ``timeout``), so the server flushes its data before the process ends. Anywhere else it
    runs in whichever thread the garbage collector interrupts, at any allocation, perhaps while
    that thread holds a lock: it only sends SIGTERM and queues the rest for the reaper thread
    (``SimpleQueue.put`` is safe in a finalizer; it takes no lock that thread could hold).
    Returns an event set once the server is gone and its data removed.
    """
    done = threading.Event()
    _sigterm(proc)
    if _AT_EXIT.is_set():
        _finish(proc, timeout, tmp)
        done.set()
    else:
        _REAPS.put((proc, timeout, tmp, done))
    return done


class WeaviateServer:
    """A single-node ``weaviate-server`` on loopback ports (weaviate.md §3.3).

    Telemetry and the pprof listener are off, cluster and Raft bind to 127.0.0.1 on free ports,
    anonymous access is on (loopback only; note gRPC listens on all interfaces, weaviate.md §3.3).
    The server log goes to ``log_path`` (default: ``weaviate-server.log`` next to the data).

    Args:
        binary: Path of ``weaviate-server`` (default: :func:`find_weaviate_binary`).
        data_path: Persistent data directory; ``None`` = a temporary directory removed on stop
            (or when the object is collected: never started, killed or stopped with ``keep_data``).
        memory_limit: ``GOMEMLIMIT`` for the Go runtime (e.g. ``"1GiB"``), ``None`` = unlimited.
        environment: Extra or overriding environment variables for the server.
        startup_timeout: Seconds to wait for ``/v1/.well-known/ready``.
        log_path: Where the server's stdout/stderr go.
        ports: The six ports (HTTP, gRPC, gossip, data, Raft, Raft RPC; gossip/data and the
            Raft pair consecutive) chosen by the caller, e.g. a :class:`WeaviateCluster` that
            must know every node's Raft port before any node starts; ``None`` = free ports.

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
        ports: tuple[int, int, int, int, int, int] | None = None,
    ) -> None:
        self.binary = require_weaviate_binary(binary)
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
        self._ports: list[int] | None = list(ports) if ports is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._dir_finalizer: weakref.finalize[Any, Any] | None = None
        self._t0 = 0.0
        self._remove_tmp_when_dropped()

    def _remove_tmp_when_dropped(self) -> None:
        """Remove the temporary directory if this object is collected while no server runs on it.

        Never started, killed, or stopped with ``keep_data``: nothing else would remove it. While
        a server runs, :func:`_reap` removes it once the server has exited instead.
        """
        if self._tmp is not None and self._dir_finalizer is None:
            self._dir_finalizer = weakref.finalize(self, shutil.rmtree, self._tmp, ignore_errors=True)

    def _cancel_tmp_removal(self) -> None:
        if self._dir_finalizer is not None:
            self._dir_finalizer.detach()
            self._dir_finalizer = None

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
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the process without waiting (:meth:`wait_ready` waits); no-op while it runs.

        Cluster nodes are spawned together: none is ready before the Raft quorum has formed.
        """
        if self.running:
            return
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
        self._t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _reaper()
        self._cancel_tmp_removal()  # removed by _reap once the server has exited, not under it
        self._finalizer = weakref.finalize(self, _reap, self._proc, 30.0, self._tmp)
        _watch_exit()

    def wait_ready(self) -> WeaviateServer:
        """Wait until ``/v1/.well-known/ready`` answers 200 (after :meth:`spawn`).

        Raises:
            StoreUnavailableError: the process exited or did not become ready within
                ``startup_timeout`` of its spawn (the message carries the tail of the log).
        """
        if self._proc is None:
            raise StoreUnavailableError("weaviate-server was not started")
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
            if time.monotonic() - self._t0 > self.startup_timeout:
                tail = self.log_tail()
                self.stop()
                raise StoreUnavailableError(f"weaviate-server not ready after {self.startup_timeout:.0f}s:\n{tail}")
            time.sleep(0.1)
        self.startup_seconds = time.monotonic() - self._t0
        return self

    def kill(self) -> None:
        """``kill -9`` the process (data and ports kept: :meth:`start` brings it back). Idempotent."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait(timeout=30)
            self._proc = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._remove_tmp_when_dropped()

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
            self._cancel_tmp_removal()
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._remove_tmp_when_dropped()

    def __enter__(self) -> WeaviateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
