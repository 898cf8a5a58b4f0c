from __future__ import annotations

import numpy as np
import pytest

from hybrid_memory.embeddings import (
    CallableEmbedder,
    LangChainEmbedder,
    LlamaIndexEmbedder,
    as_embedder,
    normalize_rows,
)
from hybrid_memory.errors import ConfigurationError, EmbeddingError, InvalidInputError


def test_callable_embedder_normalises_and_batches() -> None:
    calls: list[int] = []

    def fn(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [[3.0, 4.0 + len(t)] for t in texts]

    emb = CallableEmbedder(fn, name="toy")
    emb.batch_size = 2
    m = emb.embed_documents(["a", "bb", "ccc"])
    assert m.shape == (3, 2) and m.dtype == np.float32
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0)
    assert calls == [2, 1]
    assert emb.dimension == 2


@pytest.mark.parametrize("bad", [[[float("nan"), 1.0]], [[0.0, 0.0]], [["x", "y"]], [[1.0, 2.0], [3.0, 4.0]]])
def test_unusable_vectors_raise_embedding_error(bad: object) -> None:
    emb = CallableEmbedder(lambda texts: bad)
    with pytest.raises(EmbeddingError):
        emb.embed_documents(["one"])


def test_model_exceptions_are_translated() -> None:
    def boom(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("model crashed")

    with pytest.raises(EmbeddingError, match="model crashed") as info:
        CallableEmbedder(boom).embed_query("x")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_non_string_text_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError):
        CallableEmbedder(lambda t: [[1.0]] * len(t)).embed_documents([1])  # type: ignore[list-item]


def test_langchain_embeddings_are_adapted() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    emb = as_embedder(DeterministicFakeEmbedding(size=8))
    assert isinstance(emb, LangChainEmbedder)
    v = emb.embed_query("hello")
    assert v.shape == (8,) and abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    assert np.allclose(emb.embed_query("hello"), v)


async def test_langchain_async_path() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    emb = as_embedder(DeterministicFakeEmbedding(size=8))
    m = await emb.aembed_documents(["a", "b"])
    assert m.shape == (2, 8)
    assert np.allclose(m[0], emb.embed_documents(["a"])[0])


def test_llamaindex_embedding_is_adapted() -> None:
    from llama_index.core.embeddings import MockEmbedding

    emb = as_embedder(MockEmbedding(embed_dim=4))
    assert isinstance(emb, LlamaIndexEmbedder)
    assert emb.embed_documents(["x", "y"]).shape == (2, 4)


def test_unusable_object_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        as_embedder(42)


def test_normalize_rows_checks_row_count() -> None:
    with pytest.raises(EmbeddingError, match="2 vectors for 3"):
        normalize_rows([[1.0], [2.0]], expected_rows=3)


def test_default_embedder_is_multilingual(default_embedder: object) -> None:
    emb = as_embedder(default_embedder)
    m = emb.embed_documents(["我喜欢吃苹果", "I like eating apples", "The stock market fell today"])
    assert m.shape == (3, 512)
    assert float(m[0] @ m[1]) > float(m[0] @ m[2]) + 0.2  # zh↔en paraphrase beats unrelated


def test_concat_embedder_cosine_is_the_share_weighted_mean_of_the_parts() -> None:
    from hybrid_memory.embeddings import ConcatEmbedder
    from hybrid_memory.testing import HashingEmbedder

    a = HashingEmbedder()
    small = HashingEmbedder(dim=64)
    b = CallableEmbedder(small.embed_documents, dedup_threshold=0.5, stm_threshold=0.4)
    both = ConcatEmbedder([(a, 1.0), (b, 3.0)])
    texts = ["I live in Berlin", "I moved to Munich last year", "我喜欢喝乌龙茶"]
    assert both.dimension == a.dimension + 64
    m = both.embed_documents(texts)
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
    ma, mb = a.embed_documents(texts), b.embed_documents(texts)
    expected = 0.25 * (ma @ ma.T) + 0.75 * (mb @ mb.T)
    assert np.allclose(m @ m.T, expected, atol=1e-5)
    q = both.embed_query("Where do I live?")
    assert np.allclose(
        q @ m.T,
        0.25 * (a.embed_query("Where do I live?") @ ma.T) + 0.75 * (b.embed_query("Where do I live?") @ mb.T),
        atol=1e-5,
    )
    assert both.dedup_threshold == pytest.approx(0.25 * a.dedup_threshold + 0.75 * b.dedup_threshold)
    assert both.stm_threshold == pytest.approx(0.25 * a.stm_threshold + 0.75 * b.stm_threshold)


@pytest.mark.parametrize("parts", [[], [(None, 0.0)], [("x", 1.0)], [(None, float("nan"))], [(None, True)], [None]])
def test_concat_embedder_refuses_bad_parts(parts: list[object]) -> None:
    from hybrid_memory.embeddings import ConcatEmbedder
    from hybrid_memory.errors import ConfigurationError
    from hybrid_memory.testing import HashingEmbedder

    fixed = [(HashingEmbedder(), p[1]) if isinstance(p, tuple) and p[0] is None else p for p in parts]
    with pytest.raises(ConfigurationError):
        ConcatEmbedder(fixed)  # type: ignore[arg-type]


def test_concat_embedder_is_a_working_memory_embedder() -> None:
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.embeddings import ConcatEmbedder
    from hybrid_memory.testing import HashingEmbedder

    emb = ConcatEmbedder([(HashingEmbedder(), 0.5), (HashingEmbedder(dim=32), 0.5)])
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb, trace=False)
    try:
        mem.remember("u", "I am allergic to peanuts", importance=0.9)
        mem.remember("u", "My sister lives in Lisbon", importance=0.6)
        hits = mem.recall("peanuts allergy", user_id="u", k=1)
        assert [h.content for h in hits] == ["I am allergic to peanuts"]
    finally:
        mem.close()
