"""A hang watchdog for the whole suite: one stuck test ends the run with every thread's stack.

pytest-timeout (``timeout = 300`` in ``pyproject.toml``, signal method) fails a slow test by raising
in the main thread, once per test. It cannot when the main thread is blocked inside C, nor when its
one alarm is spent: raised inside a garbage-collector finalizer, the exception is swallowed (printed
as unraisable) and the test's next wait has no alarm left; a teardown that blocks after a timeout is
the same. CI then waits for its own time limit and shows pytest's last buffered output, not where
the test hangs. This plugin arms :func:`faulthandler.dump_traceback_later` for each test
(setup, call and teardown) at twice pytest-timeout's limit: when it fires, every thread's stack
goes to the terminal's stderr and the process exits, so the run fails within minutes and says why.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Generator

import pytest
from pytest_timeout import get_env_settings

#: How many times pytest-timeout's limit a single test may take before the run is ended.
FACTOR = 2.0


class HangWatchdog:
    """The plugin: ``limit`` seconds per test, stacks written to file descriptor ``fd``."""

    def __init__(self, limit: float, fd: int) -> None:
        self.limit = limit
        self.fd = fd

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self) -> Generator[None, object, object]:
        """Arm the watchdog for one test's setup, call and teardown."""
        faulthandler.dump_traceback_later(self.limit, exit=True, file=self.fd)
        try:
            return (yield)
        finally:
            faulthandler.cancel_dump_traceback_later()

    def pytest_unconfigure(self) -> None:
        """Close the duplicated stderr descriptor."""
        faulthandler.cancel_dump_traceback_later()
        os.close(self.fd)


def install(config: pytest.Config) -> HangWatchdog | None:
    """Register the watchdog when pytest-timeout has a limit; None when it has none (e.g. ``--timeout=0``).

    The stacks go to a duplicate of the real stderr taken with pytest's capture suspended, so
    they reach the terminal (or CI's log) even while a test's output is being captured.
    """
    timeout = get_env_settings(config).timeout  # pytest-timeout's own reading: option, env, ini
    if not timeout or timeout <= 0:
        return None
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        fd = os.dup(sys.stderr.fileno())
    else:
        with capman.global_and_fixture_disabled():
            fd = os.dup(sys.stderr.fileno())
    watchdog = HangWatchdog(FACTOR * timeout, fd)
    config.pluginmanager.register(watchdog, "hybrid-memory-hang-watchdog")
    return watchdog
