"""The ``hybrid-memory`` command line.

Sub-commands: ``demo`` (the whole memory loop, offline), the operator commands, ``mcp`` and
``bench`` (quality benchmarks on LoCoMo, LongMemEval and MemoryBank-CN files, and ``perf``; from a
checkout of the repository, see :mod:`hybrid_memory.cli.bench`). Run ``hybrid-memory --help`` for
the list.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="hybrid-memory",
        description="Memory for LLM agents: key-frame short-term buffer + Weaviate-exact hybrid long-term recall.",
    )
    from hybrid_memory import __version__

    parser.add_argument("--version", action="version", version=f"hybrid-memory {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = sub.add_parser("demo", help="run the bilingual multi-session demo of the whole memory loop (offline)")
    demo.add_argument("--store", default=":memory:", help="LocalStore file (default: in memory)")
    demo.add_argument(
        "--embedder",
        choices=["default", "hashing"],
        default="default",
        help="'default' = the local multilingual models (USE-multilingual and e5-small as one); "
        "'hashing' = tiny lexical embedder (no model)",
    )
    demo.set_defaults(func=_run_demo)

    from hybrid_memory.cli.bench import register as register_bench

    register_bench(sub)
    from hybrid_memory.cli.ops import register as register_ops

    register_ops(sub)
    from hybrid_memory.mcp.cli import register as register_mcp

    register_mcp(sub)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from hybrid_memory.cli.demo import run_demo

    return run_demo(store_path=args.store, embedder=args.embedder)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hybrid-memory`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from hybrid_memory.errors import HybridMemoryError

    try:
        code = args.func(args)
    except HybridMemoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
