"""The peer baselines (real LangChain / LlamaIndex classes) on tiny corpora with the hashing embedder."""

from __future__ import annotations

import sys

import pytest

from benchmarks.harness.datasets import Doc, Question
from benchmarks.harness.peers import (
    LANGCHAIN,
    LLAMAINDEX,
    flush_batches,
    missing_requirement,
    run_langchain,
    run_llamaindex,
)
from hybrid_memory.testing import HashingEmbedder

DOCS = (
    Doc("t1", "Ann adopted a kitten called Marmalade"),
    Doc("t2", "Bo started learning the violin"),
    Doc("t3", "Ann's sister lives in Lisbon"),
    Doc("t4", "Bo played the violin at a wedding in Porto"),
)


def _q(qid: str, text: str, *gold: str) -> Question:
    return Question(qid, text, frozenset(gold), "x")


def _llama_count(text: str) -> int:
    from llama_index.core.utils import get_tokenizer

    return len(get_tokenizer()(text))


def _node_text(docs: tuple[Doc, ...]) -> str:
    return "\n".join(f"<message role='user'>{d.text}</message>" for d in docs)


def test_flush_batches_cuts_when_the_flush_size_is_reached() -> None:
    words = [Doc("a", "one two"), Doc("b", "three"), Doc("c", "four five six"), Doc("d", "seven")]
    cut = flush_batches(words, 3, lambda t: len(t.split()))
    assert [[d.id for d in b] for b in cut] == [["a", "b"], ["c"], ["d"]]
    assert [[d.id for d in b] for b in flush_batches(words, 1, lambda t: len(t.split()))] == [
        ["a"],
        ["b"],
        ["c"],
        ["d"],
    ]
    assert [[d.id for d in b] for b in flush_batches(words, 100, lambda t: len(t.split()))] == [["a", "b", "c", "d"]]
    assert flush_batches([], 3, len) == []


def test_langchain_peer_ranks_the_identical_turn_first() -> None:
    qs = [_q("q1", DOCS[2].text, "t3"), _q("q2", DOCS[0].text, "t1")]
    run = run_langchain(DOCS, qs, HashingEmbedder(), depth=3)
    assert "VectorStoreRetrieverMemory" in run.note  # langchain_classic is installed in the dev venv
    assert run.units == 4
    assert run.rankings["q1"][0] == frozenset({"t3"}) and run.rankings["q2"][0] == frozenset({"t1"})
    assert all(len(hit) == 1 for hit in run.rankings["q1"]) and len(run.rankings["q1"]) == 3
    by_id = {d.id: d.text for d in DOCS}
    assert run.texts["q1"] == [by_id[next(iter(hit))] for hit in run.rankings["q1"]]
    assert run.injected("q1", 2) == "\n".join(run.texts["q1"][:2])


def test_langchain_peer_without_langchain_classic_uses_the_retriever(monkeypatch: pytest.MonkeyPatch) -> None:
    qs = [_q("q1", DOCS[3].text, "t4")]
    with_memory = run_langchain(DOCS, qs, HashingEmbedder(), depth=4)
    monkeypatch.setitem(sys.modules, "langchain_classic.memory", None)
    bare = run_langchain(DOCS, qs, HashingEmbedder(), depth=4)
    assert "langchain_classic not installed" in bare.note
    assert bare.rankings == with_memory.rankings
    assert bare.rankings["q1"][0] == frozenset({"t4"})


def test_llamaindex_peer_one_node_per_turn_and_per_batch() -> None:
    qs = [_q("q1", DOCS[1].text, "t2")]
    per_turn = run_llamaindex(DOCS, qs, HashingEmbedder(), depth=10, flush_tokens=1)
    assert per_turn.units == 4
    assert per_turn.rankings["q1"][0] == frozenset({"t2"})
    assert sorted(next(iter(h)) for h in per_turn.rankings["q1"]) == ["t1", "t2", "t3", "t4"]
    assert per_turn.texts["q1"][0] == f"<message role='user'>{DOCS[1].text}</message>"

    # flush size = the first two turns' tokens: batches [t1, t2] and [t3, t4]
    flush = _llama_count(DOCS[0].text) + _llama_count(DOCS[1].text)
    assert _llama_count(DOCS[0].text) < flush
    paired = run_llamaindex(DOCS, qs, HashingEmbedder(), depth=10, flush_tokens=flush)
    assert paired.units == 2
    assert paired.rankings["q1"][0] == frozenset({"t1", "t2"})  # the node stands for every turn of its batch
    assert set(paired.rankings["q1"]) == {frozenset({"t1", "t2"}), frozenset({"t3", "t4"})}
    assert paired.texts["q1"][0] == _node_text(DOCS[:2])
    assert paired.injected("q1", 2) == "\n\n".join(paired.texts["q1"])


def test_llamaindex_peer_top_k_is_capped_by_depth() -> None:
    qs = [_q("q1", DOCS[0].text, "t1")]
    run = run_llamaindex(DOCS, qs, HashingEmbedder(), depth=2, flush_tokens=1)
    assert len(run.rankings["q1"]) == 2 and run.rankings["q1"][0] == frozenset({"t1"})


def test_missing_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    assert missing_requirement(LANGCHAIN) is None
    assert missing_requirement(LLAMAINDEX) is None
    monkeypatch.setitem(sys.modules, "llama_index.core.memory", None)
    reason = missing_requirement(LLAMAINDEX)
    assert reason is not None and "llama_index.core.memory" in reason
    with pytest.raises(KeyError):
        missing_requirement("nope")


def test_bench_modules_do_not_import_the_frameworks() -> None:
    import subprocess

    code = (
        "import sys, benchmarks.harness.runner, benchmarks.harness.cli, benchmarks.harness.peers; "
        "print(sorted(m for m in sys.modules if m.startswith(('langchain', 'llama_index'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
