"""The one "run it in a daemon thread, give up after N seconds" helper (hybrid_memory.threads, issue 13)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from hybrid_memory.threads import call_with_deadline, start_daemon


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
