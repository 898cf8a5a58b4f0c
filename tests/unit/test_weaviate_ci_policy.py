"""Without a weaviate-server and WEAVIATE_URL the Weaviate tests skip -- and fail when CI=true.

Runs one contract test on the Weaviate backend in a child pytest whose environment hides every
binary (no WEAVIATE_BINARY, PATH without a weaviate-server, empty HOME and GOPATH).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WEAVIATE_", "CI"))}
    path = [
        p for p in env.get("PATH", "").split(os.pathsep) if p and not os.path.exists(os.path.join(p, "weaviate-server"))
    ]
    env.update(PATH=os.pathsep.join(path), HOME=str(tmp_path), GOPATH=str(tmp_path / "go"))
    env.pop("GOBIN", None)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/contract/test_store_contract.py",
            "-k",
            "weaviate and empty_store",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "--no-header",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(autouse=True)
def _needs_client() -> None:
    pytest.importorskip("weaviate", reason="the 'weaviate' extra is not installed")


def test_skipped_with_the_reason_outside_ci(tmp_path: Path) -> None:
    res = _run(tmp_path, ci=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 skipped" in res.stdout
    assert "no weaviate-server binary" in res.stdout


def test_a_failure_in_ci(tmp_path: Path) -> None:
    res = _run(tmp_path, ci=True)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "CI=true but the Weaviate tests cannot run" in res.stdout
    assert "skipped" not in res.stdout
