"""``hybrid-memory bench``: the harness lives in ``benchmarks/harness/`` of a checkout, not in the package.

Real processes (``python -m hybrid_memory.cli``, as the console script runs it) in a sub-folder of this
checkout and in a folder outside any checkout. This checkout is on ``PYTHONPATH`` in both cases, so
``hybrid_memory`` is the code under test and ``benchmarks`` is even importable outside: the entry
decides by the current directory alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from hybrid_memory.cli.bench import find_checkout, register

ROOT = Path(__file__).resolve().parents[2]

LOCOMO = [
    {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a kitten called Marmalade yesterday."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "My sister lives in Lisbon now."},
            ],
        },
        "qa": [{"question": "What is the kitten's name?", "answer": "Marmalade", "evidence": ["D1:1"], "category": 4}],
    }
]


def _hybrid_memory(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["HYBRID_MEMORY_BENCH_CACHE"] = str(tmp_path / "cache")
    return subprocess.run(
        [sys.executable, "-m", "hybrid_memory.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_in_a_checkout_the_harness_runs(tmp_path: Path) -> None:
    data = tmp_path / "locomo_tiny.json"
    data.write_text(json.dumps(LOCOMO), encoding="utf-8")
    argv = ["bench", "locomo", "--data", str(data), "--json", "--embedder", "hashing", "--quiet", "--no-peers"]
    # From a sub-folder: the checkout is found above the current directory.
    res = _hybrid_memory(argv, cwd=ROOT / "docs", tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["questions"] == 1
    assert report["recall@10"] == 1.0


@pytest.mark.parametrize("args", [["bench"], ["bench", "locomo", "--data", "locomo10.json"], ["bench", "perf"]])
def test_outside_a_checkout_it_says_what_to_do(tmp_path: Path, args: list[str]) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert find_checkout(outside) is None
    res = _hybrid_memory(args, cwd=outside, tmp_path=tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    err = res.stderr
    assert err.startswith("error: `hybrid-memory bench` runs the benchmark harness (benchmarks/harness/)")
    assert str(outside.resolve()) in err
    assert "checkout of the hybrid-memory repository" in err
    assert "pip install -e '.[all,dev]'" in err
    assert "local, weaviate, langchain and llamaindex extras" in err


def test_outside_a_checkout_the_other_commands_still_work(tmp_path: Path) -> None:
    res = _hybrid_memory(["--help"], cwd=tmp_path, tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    help_text = " ".join(res.stdout.split())  # argparse wraps the help column
    assert "bench" in help_text and "(run from a checkout of the repository)" in help_text


def test_find_checkout_walks_up_to_the_repository_root(tmp_path: Path) -> None:
    assert find_checkout(ROOT / "benchmarks" / "harness") == ROOT
    assert find_checkout(ROOT) == ROOT
    # A benchmarks/harness folder without a pyproject.toml beside it is not a checkout.
    (tmp_path / "benchmarks" / "harness").mkdir(parents=True)
    (tmp_path / "benchmarks" / "harness" / "cli.py").write_text("")
    assert find_checkout(tmp_path) is None


def test_a_harness_imported_from_elsewhere_is_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Another top-level ``benchmarks`` package was imported first (some distributions ship one).
    foreign = types.ModuleType("benchmarks.harness.cli")
    foreign.__file__ = str(tmp_path / "site-packages" / "benchmarks" / "harness" / "cli.py")
    monkeypatch.setitem(sys.modules, "benchmarks.harness.cli", foreign)
    monkeypatch.setattr(sys, "path", [*sys.path])  # register() may put the checkout on it
    parser = argparse.ArgumentParser(prog="hybrid-memory")
    register(parser.add_subparsers(dest="command"), start=ROOT)
    args = parser.parse_args(["bench", "locomo"])
    assert "another `benchmarks` package was imported" in args.bench_unavailable
    assert str(ROOT) in args.bench_unavailable
    assert args.func(args) == 2
