"""The suite's hang watchdog (``tests/watchdog.py``) in a real pytest process.

A test that blocks SIGALRM cannot be failed by pytest-timeout's signal method, like a test stuck
inside C. The watchdog must end that run with the test's stack on stderr instead of letting it
wait out its 600 s sleep; the subprocess's own timeout is only a hang guard.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STUCK = """
import signal, time

def test_stuck_where_no_signal_reaches() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(600)
"""

CONFTEST = """
from tests.watchdog import install

def pytest_configure(config):
    install(config)
"""


PROBE = """
def test_no_watchdog_without_a_limit(pytestconfig) -> None:
    assert pytestconfig.pluginmanager.get_plugin("hybrid-memory-hang-watchdog") is None
"""


def _run(tmp_path: Path, test: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``test`` (a test file's text) in a pytest process whose conftest installs the watchdog."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(test)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    if "-c" not in args:
        cmd += ["-c", os.devnull]
    return subprocess.run(
        [*cmd, *args, str(tmp_path / "test_it.py")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: the watchdog ends the stuck run long before its 600 s sleep
    )


def test_a_test_pytest_timeout_cannot_stop_ends_the_run_with_its_stack(tmp_path: Path) -> None:
    proc = _run(tmp_path, STUCK, "--timeout=1")
    assert proc.returncode != 0
    assert "Timeout (0:00:02)!" in proc.stderr  # faulthandler's dump, at twice the limit
    assert "test_stuck_where_no_signal_reaches" in proc.stderr and "test_it.py" in proc.stderr
    assert "passed" not in proc.stdout


def test_without_a_timeout_there_is_no_watchdog(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 300\n")  # like the project's: the option wins
    proc = _run(tmp_path, PROBE, "-c", str(tmp_path / "pytest.ini"), "--timeout=0")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr
