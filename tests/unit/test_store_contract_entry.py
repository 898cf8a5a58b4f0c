"""The public entry point of the store contract, as a third backend uses it from its own tests.

Runs a child pytest on a test module outside this repository's tests (in ``tmp_path``), so only
what ``hybrid_memory.testing.store_contract`` itself provides is in play.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BACKEND = """
from collections.abc import Iterator

import pytest

from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing.store_contract import StoreContract


class TestForgotTheFixture(StoreContract):
    pass


class TestThirdBackend(StoreContract):
    @pytest.fixture
    def store(self, tmp_path) -> Iterator[LocalStore]:
        s = LocalStore(tmp_path / "data.db")
        yield s
        s.close()
"""


def test_a_backend_runs_the_suite_by_subclassing_it(tmp_path: Path) -> None:
    (tmp_path / "test_third_backend.py").write_text(BACKEND, encoding="utf-8")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_third_backend.py",
            "-k",
            "empty_store or two_stores_share",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "--no-header",
            "-o",
            "addopts=",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = res.stdout + res.stderr
    # The subclass without a `store` fixture fails and says why; the real one passes, and its
    # two-store test is skipped because it gives no `store_twin`.
    assert "TestForgotTheFixture must define a `store` fixture" in out, out
    assert re.search(r"\b1 passed, 1 skipped, \d+ deselected, 2 errors\b", out), out
    assert "TestThirdBackend: no second store object on the same data" in out, out
