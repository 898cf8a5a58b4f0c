from __future__ import annotations

from typing import Any

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
    assert m.shape == (3, 512 + 384)  # USE-multilingual and e5-small as one
    assert float(m[0] @ m[1]) > float(m[0] @ m[2]) + 0.2  # zh↔en paraphrase beats unrelated
    use = [emb.cross_script_view(v) for v in m]  # what judges a memory in the other script: USE's part
    assert float(use[0] @ use[1]) > float(use[0] @ use[2]) + 0.5


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


def test_concat_embedder_cross_script_view_is_that_part_alone_at_unit_norm() -> None:
    from hybrid_memory.embeddings import ConcatEmbedder
    from hybrid_memory.errors import EmbeddingDimensionError
    from hybrid_memory.testing import HashingEmbedder

    a, b = HashingEmbedder(dim=32), HashingEmbedder(dim=48)
    texts = ["I live in Berlin", "我喜欢喝乌龙茶"]
    for index, part in ((0, a), (1, b)):
        both = ConcatEmbedder([(a, 1.0), (b, 3.0)], cross_script=index)
        for row, own in zip(both.embed_documents(texts), part.embed_documents(texts), strict=True):
            view = both.cross_script_view(row)
            assert view is not None and np.allclose(view, own, atol=1e-5)
        query_view = both.cross_script_view(both.embed_query("Where do I live?"))
        assert query_view is not None and np.allclose(query_view, part.embed_query("Where do I live?"), atol=1e-5)
    whole = ConcatEmbedder([(a, 1.0), (b, 3.0)])
    assert whole.cross_script is None and whole.cross_script_view(whole.embed_query("x")) is None
    with pytest.raises(EmbeddingDimensionError):
        ConcatEmbedder([(a, 1.0), (b, 3.0)], cross_script=1).cross_script_view(np.ones(32, dtype=np.float32))


@pytest.mark.parametrize("index", [-1, 2, True, 1.0, "0"])
def test_concat_embedder_refuses_a_cross_script_part_it_does_not_have(index: object) -> None:
    from hybrid_memory.embeddings import ConcatEmbedder
    from hybrid_memory.testing import HashingEmbedder

    with pytest.raises(ConfigurationError, match="cross_script"):
        ConcatEmbedder([(HashingEmbedder(), 1.0), (HashingEmbedder(dim=32), 1.0)], cross_script=index)  # type: ignore[arg-type]


def _topics(texts: object) -> list[list[float]]:
    """A part that pairs languages: one axis per topic, whatever the language."""
    axes = (("护士", "job"), ("subway",), ("football",))
    return [[1.0 if any(w in str(t) for w in words) else 0.0 for words in axes] + [0.1] for t in texts]  # type: ignore[attr-defined]


def _scripts(texts: object) -> list[list[float]]:
    """A part that ranks well in one language and pairs languages badly: one axis per script."""
    return [[0.0, 1.0] if any("\u4e00" <= c <= "\u9fff" for c in str(t)) else [1.0, 0.0] for t in texts]  # type: ignore[attr-defined]


def _recall_with_pair(
    parts: tuple[Any, Any],
    cross_script: int | None,
    memories: tuple[str, ...],
    question: str,
    *,
    store: Any = None,
    retrieval: dict[str, Any] | None = None,
) -> list[Any]:
    """``recall`` of a fake two-part pair (shares 0.2 / 0.8), ranking by relevance alone."""
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.config import HybridMemoryConfig
    from hybrid_memory.embeddings import ConcatEmbedder

    pair = ConcatEmbedder(
        [(CallableEmbedder(parts[0], name="aligned"), 0.2), (CallableEmbedder(parts[1], name="script"), 0.8)],
        cross_script=cross_script,
    )
    weights = {"w_relevance": 1.0, "w_importance": 0.0, "w_recency": 0.0, "w_heat": 0.0}
    config = HybridMemoryConfig(rerank=weights, retrieval=retrieval or {})
    mem = HybridMemory(store=store or LocalStore(":memory:"), embedder=pair, config=config, trace=False)
    try:
        for text in memories:
            mem.remember("u", text, importance=0.5)
        return list(mem.recall(question, user_id="u", k=len(memories), touch=False))
    finally:
        mem.close()


@pytest.mark.parametrize("cross_script", [None, 0])
def test_a_pair_judges_other_script_memories_by_its_cross_script_part(cross_script: int | None) -> None:
    # The Chinese answer shares no keyword with the English question; by the whole vector (mostly the
    # script part) it is the least similar memory, by the topic part alone the most similar.
    memories = ("我在医院做护士。", "I take the subway to work every day.", "My son plays football.")
    hits = _recall_with_pair((_topics, _scripts), cross_script, memories, "What is my job?")
    assert (hits[0].content == "我在医院做护士。") is (cross_script == 0)
    answer = next(h for h in hits if h.content == "我在医院做护士。")
    assert answer.relevance == pytest.approx(1.0 if cross_script == 0 else 0.0, abs=1e-6)


def test_without_stored_vectors_a_pair_falls_back_to_the_whole_cosine() -> None:
    # A store that returns hits without their vectors: the part cannot be computed for any hit, so
    # the other-script memories are judged by the whole vector's cosine, as with any embedder (not on
    # two scales, and not left to the fused score, which is only alpha times that).
    import dataclasses

    from hybrid_memory import LocalStore
    from hybrid_memory.embeddings import ConcatEmbedder

    store = LocalStore(":memory:")
    search = store.search
    store.search = lambda *a, **kw: [dataclasses.replace(h, vector=None) for h in search(*a, **kw)]  # type: ignore[method-assign]
    texts = ("我在医院做护士。", "我儿子踢足球。", "I take the subway to work every day.", "My son plays football.")
    hits = _recall_with_pair(
        (_topics, _scripts), 0, texts, "What is my job?", store=store, retrieval={"centre_weight": 0}
    )
    pair = ConcatEmbedder([(CallableEmbedder(_topics), 0.2), (CallableEmbedder(_scripts), 0.8)])
    whole = pair.embed_documents(list(texts)) @ pair.embed_query("What is my job?")
    expected = (whole[0] - whole.min()) / (whole.max() - whole.min())
    assert 0.1 < expected < 0.9
    assert next(h for h in hits if h.content == texts[0]).relevance == pytest.approx(expected, abs=1e-5)


_ALIGNED = {  # a part that pairs languages: the question and its English answer agree, nothing else does
    "我的工作是什么？": [1.0, 0.0, 0.0, 0.0],
    "I work night shifts as a nurse.": [1.0, 0.0, 0.0, 0.0],
    "我的工作室在三楼。": [0.0, 1.0, 0.0, 0.0],
    "我喜欢猫。": [0.0, 0.0, 1.0, 0.0],
}


def _aligned(texts: object) -> list[list[float]]:
    return [_ALIGNED.get(str(t), [0.0, 0.0, 0.0, 1.0]) for t in texts]  # type: ignore[attr-defined]


def _by_script(texts: object) -> list[list[float]]:
    """Ranks within one language and pairs languages badly: every Chinese text is near the Chinese question."""
    return [[1.0, 0.3] if any("\u4e00" <= c <= "\u9fff" for c in str(t)) else [0.0, 1.0] for t in texts]  # type: ignore[attr-defined]


def test_when_candidates_mix_scripts_the_same_script_ones_are_judged_by_the_aligned_part_too() -> None:
    # The Chinese distractor shares 工作 with the Chinese question and, by the script part, looks like it:
    # its fused relevance is 1.0, as is the English answer's by the aligned part alone. With the vector
    # share of the same-script memories also taken from the aligned part, the answer comes first.
    memories = ("我的工作室在三楼。", "I work night shifts as a nurse.", "我喜欢猫。")
    hits = _recall_with_pair((_aligned, _by_script), 0, memories, "我的工作是什么？")
    assert [h.content for h in hits][:2] == ["I work night shifts as a nurse.", "我的工作室在三楼。"]
    assert hits[0].relevance == pytest.approx(1.0) and hits[1].relevance < 0.9


def test_a_pair_with_a_cross_script_part_takes_that_parts_floor_and_gate() -> None:
    from hybrid_memory.embeddings import ConcatEmbedder, UniversalSentenceEncoder
    from hybrid_memory.testing import HashingEmbedder

    small, plain = HashingEmbedder(dim=32), CallableEmbedder(_scripts)
    assert (small.min_similarity, plain.min_similarity) == (0.15, 0.3)
    assert ConcatEmbedder([(small, 1.0), (plain, 3.0)]).min_similarity == pytest.approx(0.25 * 0.15 + 0.75 * 0.3)
    judged = ConcatEmbedder([(small, 1.0), (plain, 3.0)], cross_script=0)
    assert judged.min_similarity == 0.15 and judged.injection_gate is None
    use = UniversalSentenceEncoder()  # the weights load on first embed only
    with_use = ConcatEmbedder([(use, 1.0), (plain, 6.0)], cross_script=0)
    assert with_use.min_similarity == use.min_similarity and with_use.injection_gate is use.injection_gate
    assert ConcatEmbedder([(use, 1.0), (plain, 6.0)]).injection_gate is None


_JUDGE = {  # the aligned part: the question matches the job memory, nothing else
    "What is my job?": [1.0, 0.0, 0.0],
    "I work night shifts as a nurse.": [1.0, 0.0, 0.0],
    "I like cats.": [0.0, 1.0, 0.0],
}


def _judge(texts: object) -> list[list[float]]:
    return [_JUDGE.get(str(t), [0.0, 0.0, 1.0]) for t in texts]  # type: ignore[attr-defined]


def _pair_memory(cross_script: int | None) -> Any:
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.embeddings import ConcatEmbedder

    pair = ConcatEmbedder(
        [(CallableEmbedder(_judge, name="aligned"), 0.2), (CallableEmbedder(_scripts, name="script"), 0.8)],
        cross_script=cross_script,
    )
    return HybridMemory(store=LocalStore(":memory:"), embedder=pair, trace=False)


@pytest.mark.parametrize("cross_script", [None, 0])
def test_a_pairs_floor_reads_the_cosine_of_its_cross_script_part(cross_script: int | None) -> None:
    # "I like cats." shares no word with the question. The script part calls any two English texts
    # the same (cosine 1.0), so the whole cosine is 0.8, over the mean floor (0.3); the aligned part,
    # which judges with cross_script=0, calls it unrelated (0.0, under its own floor 0.3).
    mem = _pair_memory(cross_script)
    try:
        mem.remember("u", "I like cats.", importance=0.5)
        [hit] = mem.recall("What is my job?", user_id="u", k=1, touch=False)
        assert hit.vector_similarity == pytest.approx(0.0 if cross_script == 0 else 0.8, abs=1e-5)
        ctx = mem.build_context("What is my job?", user_id="u")
        assert ctx.skipped is (cross_script == 0)
    finally:
        mem.close()


@pytest.mark.parametrize("cross_script", [None, 0])
def test_a_pairs_archive_fall_back_asks_its_cross_script_part_whether_anything_active_is_relevant(
    cross_script: int | None,
) -> None:
    mem = _pair_memory(cross_script)
    try:
        mem.remember("u", "I like cats.", importance=0.5)
        nurse = mem.remember("u", "I work night shifts as a nurse.", importance=0.5).record
        assert nurse is not None
        mem.store.update([nurse.model_copy(update={"status": "archived"})])
        found = [h.content for h in mem.recall("What is my job?", user_id="u", k=5, touch=False)]
        # judged by the whole cosine, the cat memory (0.8) looks relevant and the archive is not searched
        assert ("I work night shifts as a nurse." in found) is (cross_script == 0)
        assert "I like cats." in found
    finally:
        mem.close()


def test_a_pair_judges_hits_returned_without_vectors_by_their_stored_vectors() -> None:
    import dataclasses

    mem = _pair_memory(0)
    search = mem.store.search
    mem.store.search = lambda *a, **kw: [dataclasses.replace(h, vector=None) for h in search(*a, **kw)]  # type: ignore[method-assign]
    try:
        mem.remember("u", "I like cats.", importance=0.5)
        [hit] = mem.recall("What is my job?", user_id="u", k=1, touch=False)
        assert hit.vector_similarity == pytest.approx(0.0, abs=1e-5)  # the aligned part's, read with get_vectors
        assert mem.build_context("What is my job?", user_id="u").skipped
    finally:
        mem.close()
