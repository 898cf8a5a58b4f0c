"""``hybrid-memory bench``: the benchmark harness, run from a checkout of the repository.

The harness (``benchmarks/harness/``: dataset loaders, metrics, the runner, the LangChain and
LlamaIndex peer baselines, ``perf``) is not part of the installed package: it imports weaviate,
LangChain and LlamaIndex and reads dataset files that are never shipped. This entry looks for it in
the checkout that holds the current directory and registers its sub-commands; anywhere else
``hybrid-memory bench`` exits with status 2 and a message that says what to do.

Example:
    >>> import argparse, os, tempfile
    >>> parser = argparse.ArgumentParser(prog="hybrid-memory")
    >>> sub = parser.add_subparsers(dest="command")
    >>> with tempfile.TemporaryDirectory() as outside:
    ...     register(sub, start=outside)
    >>> args = parser.parse_args(["bench", "locomo", "--data", "locomo10.json"])
    >>> args.func is _unavailable, args.args
    (True, ['locomo', '--data', 'locomo10.json'])
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

__all__ = ["find_checkout", "register"]

#: Where the harness's command line lives, relative to the repository root.
HARNESS_CLI = Path("benchmarks") / "harness" / "cli.py"

_EXTRAS = "pip install -e '.[all,dev]'"


def find_checkout(start: str | Path | None = None) -> Path | None:
    """The root of the repository checkout that holds ``start``, or ``None`` outside one.

    Args:
        start: Where to look from (default: the current directory); its parents are searched too.

    Returns:
        The first of ``start`` and its parents with ``pyproject.toml`` and ``benchmarks/harness/cli.py``.
    """
    here = Path.cwd() if start is None else Path(start)
    here = here.resolve()
    for folder in (here, *here.parents):
        if (folder / HARNESS_CLI).is_file() and (folder / "pyproject.toml").is_file():
            return folder
    return None


def _harness_cli(root: Path) -> Any | None:
    """``benchmarks.harness.cli`` imported from ``root``, or ``None`` when another copy is already imported."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module("benchmarks.harness.cli")
    origin = Path(module.__file__ or "").resolve()
    return module if origin == (root / HARNESS_CLI).resolve() else None


def _message(start: Path) -> str:
    return (
        f"`hybrid-memory bench` runs the benchmark harness (benchmarks/harness/), which is not part of the "
        f"installed package, and {start} is not inside a checkout of the hybrid-memory repository. "
        f"Run it from a checkout (git clone of the repository, then cd into it) after `{_EXTRAS}` there: "
        "the harness needs the local, weaviate, langchain and llamaindex extras. "
        "`python -m benchmarks` in the checkout runs the whole quality benchmark."
    )


def _unavailable(args: argparse.Namespace) -> int:
    print(f"error: {args.bench_unavailable}", file=sys.stderr)
    return 2


def register(subparsers: Any, *, start: str | Path | None = None) -> None:
    """Add the ``bench`` sub-command: the harness's own inside a checkout, else one that explains what to do.

    Args:
        subparsers: The ``add_subparsers()`` object of the ``hybrid-memory`` parser.
        start: Where to look for the checkout (default: the current directory).
    """
    root = find_checkout(start)
    harness = _harness_cli(root) if root is not None else None
    if harness is not None:
        harness.register(subparsers)
        return
    where = (Path.cwd() if start is None else Path(start)).resolve()
    if root is not None:
        message = (
            f"another `benchmarks` package was imported before the harness of the checkout {root}; "
            f"run `hybrid-memory bench` in a fresh process from {root}."
        )
    else:
        message = _message(where)
    bench = subparsers.add_parser(
        "bench",
        help="benchmarks on LoCoMo / LongMemEval / MemoryBank-CN and perf (run from a checkout of the repository)",
        description=message,
    )
    bench.add_argument("args", nargs=argparse.REMAINDER, help="the harness's arguments (DATASET --data FILE ...)")
    bench.set_defaults(func=_unavailable, bench_unavailable=message)
