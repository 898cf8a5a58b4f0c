"""The finalizer of a ``WeaviateServer`` that was never stopped, on real child processes.

The garbage collector runs a finalizer in whichever thread allocates, also one that holds a lock,
so the finalizer must not wait there for the server to exit; at the interpreter's exit it must.
A Python child stands in for ``weaviate-server``: what matters is how it answers SIGTERM.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from hybrid_memory.stores.weaviate.server import WeaviateServer, _reap, _reaper

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# Ignores SIGTERM (a server slow to shut down), says so, then waits to be killed.
_DEAF = "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(600)\n"
# Exits on SIGTERM, as weaviate-server does.
_POLITE = "import sys, time\nprint('up', flush=True)\ntime.sleep(600)\n"


def _child(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with proc.stdout:
        assert proc.stdout.readline() == b"up\n"  # its handlers are in place
    return proc


def _data_dir(tmp_path: Path) -> str:
    d = tmp_path / "hybrid-memory-weaviate-x"
    (d / "data").mkdir(parents=True)
    (d / "data" / "segment").write_bytes(b"x")
    return str(d)


def test_a_collected_server_is_not_waited_for_in_the_collecting_thread(tmp_path: Path) -> None:
    _reaper()  # as spawn() does
    proc = _child(_DEAF)
    tmp = _data_dir(tmp_path)
    try:
        done = _reap(proc, 600.0, tmp)
        # Returned at once: the server (deaf to SIGTERM) still runs, and the wait is the reaper's.
        assert not done.is_set()
        assert proc.poll() is None
        assert os.path.isdir(tmp)
    finally:
        proc.kill()
    assert done.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(tmp)  # removed once the server is gone


def test_the_finalizer_starts_no_thread() -> None:
    """Thread.start() in a finalizer can wait forever for a lock of threading the interrupted thread holds."""
    _reaper()
    proc = _child(_POLITE)
    before = set(threading.enumerate())
    done = _reap(proc, 600.0, None)
    assert set(threading.enumerate()) <= before
    assert done.wait(30)
    assert proc.returncode == -signal.SIGTERM


def test_the_reaper_stops_a_server_with_sigterm_and_removes_its_data(tmp_path: Path) -> None:
    _reaper()
    proc = _child(_POLITE)
    tmp = _data_dir(tmp_path)
    assert _reap(proc, 600.0, tmp).wait(30)
    assert proc.returncode == -signal.SIGTERM
    assert not os.path.exists(tmp)


def test_the_reaper_kills_a_server_that_outlives_the_timeout() -> None:
    _reaper()
    proc = _child(_DEAF)
    try:
        assert _reap(proc, 0.2, None).wait(30)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_at_the_interpreters_exit_the_server_is_stopped_before_the_process_ends(tmp_path: Path) -> None:
    """A daemon reaper would die with the interpreter and leave the server running: at exit, wait."""
    script = textwrap.dedent(
        f"""
        import subprocess, sys, weakref
        from hybrid_memory.stores.weaviate.server import _reap, _reaper, _watch_exit

        class Server:  # holds its process until the interpreter exits, like an unstopped server
            pass

        child = subprocess.Popen(
            [sys.executable, "-c", {_DEAF!r}], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )  # (not our stderr: the test reads it to its end)
        with child.stdout:
            assert child.stdout.readline() == b"up\\n"
        server = Server()
        _reaper()  # as spawn() does
        weakref.finalize(server, _reap, child, 1.0, {str(tmp_path / "gone")!r})
        _watch_exit()
        print(child.pid, flush=True)
        """
    )
    (tmp_path / "gone").mkdir()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, check=True)
    pid = int(out.stdout.decode().split()[-1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass  # stopped (SIGKILL after the 1 s it ignored SIGTERM) and reaped before the exit
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the server outlived the interpreter that owned it")
    assert not (tmp_path / "gone").exists()


# A stand-in binary for WeaviateServer itself: ignores its arguments and SIGTERM (then says so in
# its data directory), runs until killed.
_DEAF_BINARY = (
    "#!{python}\nimport os, pathlib, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "pathlib.Path(os.environ['PERSISTENCE_DATA_PATH'], 'up').touch()\ntime.sleep(600)\n"
)


def _within_30_s(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` (a bound on a wait for another process, not a timing assertion)."""
    for _ in range(300):
        if condition():
            return True
        threading.Event().wait(0.1)
    return condition()


def _server(tmp_path: Path) -> WeaviateServer:
    binary = tmp_path / "weaviate-server"
    binary.write_text(_DEAF_BINARY.format(python=sys.executable), encoding="utf-8")
    binary.chmod(0o755)
    return WeaviateServer(binary=binary)


def test_a_server_never_started_leaves_no_directory_when_dropped(tmp_path: Path) -> None:
    server = _server(tmp_path)
    tmp = server.data_path.parent
    assert tmp.is_dir()  # made in __init__ (data_path and log_path name it)
    del server
    gc.collect()
    assert not tmp.exists()


def test_a_killed_server_keeps_its_data_for_a_restart_and_drops_it_with_the_object(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.spawn()
    (server.data_path / "segment").write_bytes(b"x")
    server.kill()
    assert (server.data_path / "segment").exists()  # start() would bring the server back on it
    tmp = server.data_path.parent
    server.stop(keep_data=True)
    assert tmp.is_dir()
    del server
    gc.collect()
    assert not tmp.exists()


def test_a_running_server_s_data_is_removed_only_after_it_exited(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.spawn()
    proc, tmp = server._proc, server.data_path.parent
    assert proc is not None
    up = server.data_path / "up"
    assert _within_30_s(lambda: up.exists() or proc.poll() is not None)  # its SIGTERM handler is in place
    assert up.exists()
    try:
        del server
        gc.collect()  # the finalizer sends SIGTERM, which this server ignores
        assert proc.poll() is None
        assert tmp.is_dir()  # not removed under the running server
    finally:
        proc.kill()
    assert _within_30_s(lambda: not tmp.exists())  # the reaper removes it once the process is gone
