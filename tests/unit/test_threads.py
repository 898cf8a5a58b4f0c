"""The one "run it in a daemon thread, give up after N seconds" helper (hybrid_memory.threads, issue 13)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from hybrid_memory.threads import DaemonPool, call_with_deadline, start_daemon


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()  # release abandoned calls


def test_a_missed_deadline_raises_the_builtin_timeout_error_and_abandons_the_call(gate: threading.Event) -> None:
    seen: list[str] = []

    def hangs() -> str:
        seen.append(threading.current_thread().name)
        gate.wait(60)
        return "too late"

    with pytest.raises(TimeoutError, match=r"^the server did not answer within 0.05s$"):
        call_with_deadline(hangs, 0.05, name="hm-test-call", what="the server")
    assert seen == ["hm-test-call"]
    worker = next(t for t in threading.enumerate() if t.name == "hm-test-call")
    assert worker.daemon and worker.is_alive()  # abandoned, never joined at exit


def test_the_callables_own_errors_come_back_in_the_caller() -> None:
    def times_out_itself() -> None:
        raise TimeoutError("upstream 504")

    with pytest.raises(TimeoutError, match="upstream 504"):
        call_with_deadline(times_out_itself, 30)

    class Stop(BaseException):
        pass

    def stops() -> None:
        raise Stop

    with pytest.raises(Stop):
        call_with_deadline(stops, 30)
    assert call_with_deadline(threading.get_ident, 30) != threading.get_ident()


def test_start_daemon_hands_back_a_future() -> None:
    fut = start_daemon(lambda: threading.current_thread().daemon, name="hm-test-daemon")
    assert fut.result(timeout=30) is True
    bad = start_daemon(lambda: 1 / 0, name="hm-test-daemon")
    assert isinstance(bad.exception(timeout=30), ZeroDivisionError)


def test_pool_submit_hands_back_results_and_errors_from_a_daemon_thread() -> None:
    pool = DaemonPool(name="hm-test-pool", idle_timeout=300)
    assert pool.submit(lambda: threading.current_thread().daemon).result(timeout=30) is True
    assert pool.submit(threading.get_ident).result(timeout=30) != threading.get_ident()
    assert isinstance(pool.submit(lambda: 1 / 0).exception(timeout=30), ZeroDivisionError)


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` until it holds; ``False`` after ``timeout`` (a hang guard, not a measurement)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_workers_reuse_an_idle_thread() -> None:
    # An idle timeout far longer than the test: the reuse cannot race with retirement under load.
    workers = DaemonPool(name="test-pool", idle_timeout=300)
    seen: list[int] = []
    done = threading.Event()

    def task() -> None:
        seen.append(threading.get_ident())
        done.set()

    workers.run(task)
    assert done.wait(30)
    assert wait_until(lambda: workers.idle() == 1)
    done.clear()
    workers.run(task)
    assert done.wait(30)
    assert seen[0] == seen[1]  # the same thread ran both calls
    assert wait_until(lambda: workers.idle() == 1)


def test_workers_retire_after_the_idle_timeout() -> None:
    workers = DaemonPool(name="test-pool", idle_timeout=0.05)
    seen: list[int] = []
    done = threading.Event()

    def task() -> None:
        seen.append(threading.get_ident())
        done.set()

    workers.run(task)
    assert done.wait(30)
    # Retired: no idle worker left and its thread has ended.
    assert wait_until(lambda: workers.idle() == 0 and all(t.ident != seen[0] for t in threading.enumerate()))


def test_workers_start_a_new_thread_while_one_is_busy() -> None:
    workers = DaemonPool(name="test-pool", idle_timeout=1.0)
    release = threading.Event()
    started = threading.Event()
    idents: list[int] = []

    def blocked() -> None:
        idents.append(threading.get_ident())
        started.set()
        release.wait(60)  # set below; the long guard keeps the first worker busy however slow the machine

    second = threading.Event()

    def quick() -> None:
        idents.append(threading.get_ident())
        second.set()

    workers.run(blocked)
    assert started.wait(5)
    workers.run(quick)
    assert second.wait(5)  # not stuck behind the blocked call
    release.set()
    assert idents[0] != idents[1]
