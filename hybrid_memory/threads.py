"""Running a blocking call in a daemon thread, with or without a deadline.

The one helper behind every "run it in a thread and give up after N seconds" in the library:
:func:`settle` runs a callable into a :class:`~concurrent.futures.Future`, :func:`start_daemon`
does so in a new daemon thread and :func:`call_with_deadline` waits for that future at most
``timeout`` seconds; :class:`DaemonPool` reuses idle daemon threads for frequent short calls (a
client's requests) while still giving every call a thread of its own. Daemon threads (not a ``ThreadPoolExecutor``, whose workers are joined at
interpreter exit) mean that a call hanging on a dead server or model never blocks the exit; a call
that misses its deadline is abandoned and what it returns later is dropped.

Example:
    >>> call_with_deadline(lambda: 42, timeout=5)
    42
    >>> start_daemon(lambda: "done", name="example").result(timeout=5)
    'done'
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DaemonPool", "call_with_deadline", "settle", "start_daemon"]

T = TypeVar("T")


def settle(future: concurrent.futures.Future[T], fn: Callable[[], T]) -> None:
    """Run ``fn()`` and put its result, or the exception it raised, into ``future``.

    Never raises: whatever ``fn`` raises (``BaseException`` included) is handed to the thread that
    waits on ``future``.
    """
    try:
        out = fn()
    except BaseException as exc:  # re-raised by future.result() in the waiting thread
        future.set_exception(exc)
    else:
        future.set_result(out)


def start_daemon(fn: Callable[[], T], *, name: str) -> concurrent.futures.Future[T]:
    """Start ``fn()`` in a new daemon thread called ``name``; its outcome as a future."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    threading.Thread(target=settle, args=(future, fn), name=name, daemon=True).start()
    return future


def call_with_deadline(
    fn: Callable[[], T], timeout: float, *, name: str = "hybrid-memory-call", what: str = "the call"
) -> T:
    """Run ``fn()`` in a daemon thread (see :func:`start_daemon`) and wait at most ``timeout`` seconds.

    Args:
        fn: The blocking call.
        timeout: Seconds to wait for it.
        name: Name of the thread (shows in stack dumps).
        what: What is called, for the error message ("the model").

    Raises:
        TimeoutError: ``fn`` did not return within ``timeout`` seconds (it keeps running, abandoned).
        BaseException: whatever ``fn`` raised, re-raised in the caller's thread.
    """
    future = start_daemon(fn, name=name)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:  # not the builtin TimeoutError before Python 3.11
        if future.done():  # finished meanwhile, or fn itself raised a TimeoutError: its own outcome
            return future.result()
        raise TimeoutError(f"{what} did not answer within {timeout:g}s") from None


class DaemonPool:
    """Reusable daemon threads: each call takes an idle thread or starts a new one.

    Unlike a ``ThreadPoolExecutor`` there is no cap and no queue: a call that hangs (on a dead
    server) holds only its own thread and never delays the next call, and daemon threads never
    block interpreter exit. A thread idle for ``idle_timeout`` seconds ends.

    Args:
        name: Name of the threads (shows in stack dumps).
        idle_timeout: Seconds an idle thread waits for a call before it ends.

    Example:
        >>> pool = DaemonPool(name="example")
        >>> pool.submit(lambda: 6 * 7).result(timeout=5)
        42
    """

    def __init__(self, *, name: str, idle_timeout: float = 30.0) -> None:
        self.name = name
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Start ``fn()`` in a pool thread; its outcome (result or exception) as a future."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.run(lambda: settle(future, fn))
        return future

    def run(self, task: Callable[[], None]) -> None:
        """Start ``task()`` in a pool thread (it must not raise: use :meth:`submit` for outcomes)."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._loop, args=(inbox,), name=self.name, daemon=True).start()
        inbox.put(task)

    def idle(self) -> int:
        """Threads waiting for a call."""
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
