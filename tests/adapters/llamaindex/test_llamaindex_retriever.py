"""HybridMemoryRetriever: a real LlamaIndex BaseRetriever, alone and inside a query engine."""

from __future__ import annotations

import pytest
from llama_index.core.llms.mock import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from hybrid_memory import HybridMemory, InvalidInputError, MemoryFilter
from llamaindex_hybrid_memory import HybridMemoryRetriever
from llamaindex_hybrid_memory.retriever import SCORE_KEYS

ALICE = [
    {"content": "Alice prefers window seats on long flights", "importance": 0.8, "category": "preference"},
    {"content": "Alice's passport expires in March 2027", "importance": 0.9, "tags": ["travel"]},
    {"content": "Alice is learning Japanese for a trip to Kyoto", "importance": 0.6, "tags": ["travel"]},
    {"content": "Alice's cat Miso eats salmon", "importance": 0.4},
]


@pytest.fixture
def filled(core: HybridMemory) -> HybridMemory:
    core.remember_many("alice", [{**item, "session_id": "s1"} for item in ALICE])
    core.remember("bob", "Bob prefers aisle seats on long flights", importance=0.8)
    return core


def _check_node(n: NodeWithScore, user_id: str) -> None:
    assert isinstance(n.node, TextNode)
    md = n.node.metadata
    assert md["memory_id"] == n.node.node_id
    assert md["user_id"] == user_id
    assert set(SCORE_KEYS) <= set(md)
    assert n.score == md["score"]
    assert 0.0 <= md["relevance"] <= 1.0 and 0.0 <= md["recency"] <= 1.0 and 0.0 <= md["heat"] <= 1.0
    assert md["created_at"].endswith("+00:00")


def test_retrieve_returns_scored_nodes_with_components(filled: HybridMemory) -> None:
    retriever = HybridMemoryRetriever(filled, user_id="alice", k=3)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("window seats on flights")
    assert 1 <= len(nodes) <= 3
    assert nodes[0].node.get_content() == "Alice prefers window seats on long flights"
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)
    for n in nodes:
        _check_node(n, "alice")
    top = nodes[0].node.metadata
    assert top["category"] == "preference" and top["session_id"] == "s1" and top["source"] == "user"
    assert top["keyword_score"] is not None and top["vector_similarity"] is not None


def test_scores_match_the_core_recall(filled: HybridMemory) -> None:
    nodes = HybridMemoryRetriever(filled, user_id="alice", k=4).retrieve(QueryBundle("trip travel passport"))
    hits = filled.recall("trip travel passport", user_id="alice", k=4)
    assert [n.node.node_id for n in nodes] == [h.id for h in hits]
    for n, h in zip(nodes, hits, strict=True):
        comps = h.components()
        for key in ("relevance", "keyword_score", "vector_similarity", "importance", "recency"):
            assert n.node.metadata[key] == pytest.approx(comps[key])


async def test_aretrieve_matches_retrieve(filled: HybridMemory) -> None:
    retriever = HybridMemoryRetriever(filled, user_id="alice", k=4)
    sync_nodes = retriever.retrieve("Japanese trip to Kyoto")
    async_nodes = await retriever.aretrieve("Japanese trip to Kyoto")
    assert [n.node.node_id for n in async_nodes] == [n.node.node_id for n in sync_nodes]
    assert async_nodes[0].node.get_content() == "Alice is learning Japanese for a trip to Kyoto"
    for n in async_nodes:
        _check_node(n, "alice")


def test_never_returns_another_users_memories(filled: HybridMemory) -> None:
    alice = HybridMemoryRetriever(filled, user_id="alice", k=10).retrieve("aisle seats on long flights")
    assert all(n.node.metadata["user_id"] == "alice" for n in alice)
    assert "Bob prefers aisle seats on long flights" not in [n.node.get_content() for n in alice]
    assert HybridMemoryRetriever(filled, user_id="carol").retrieve("flights") == []


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_alpha_and_filter_are_passed_through(filled: HybridMemory, alpha: float) -> None:
    retriever = HybridMemoryRetriever(filled, user_id="alice", k=4, alpha=alpha, filter=MemoryFilter(tags=("travel",)))
    nodes = retriever.retrieve("passport expires")
    assert nodes and nodes[0].node.get_content() == "Alice's passport expires in March 2027"
    assert all("travel" in n.node.metadata["tags"] for n in nodes)
    if alpha == 0.0:  # pure BM25: the vector leg contributes nothing to relevance
        hits = filled.recall("passport expires", user_id="alice", k=4, alpha=0.0, filter=MemoryFilter(tags=("travel",)))
        assert [n.node.node_id for n in nodes] == [h.id for h in hits]


def test_scores_are_hidden_from_llm_and_embedder_text(filled: HybridMemory) -> None:
    node = HybridMemoryRetriever(filled, user_id="alice", k=1).retrieve("window seats")[0].node
    llm_text = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "window seats" in llm_text and "category: preference" in llm_text
    for key in ("memory_id", "relevance", "recency", "heat", "vector_similarity"):
        assert key not in llm_text
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == "Alice prefers window seats on long flights"


def test_invalid_arguments_raise_core_errors(filled: HybridMemory) -> None:
    with pytest.raises(InvalidInputError):
        HybridMemoryRetriever(filled, user_id="")
    with pytest.raises(InvalidInputError, match="alpha"):
        HybridMemoryRetriever(filled, user_id="alice", alpha=1.5).retrieve("flights")


async def test_works_inside_a_query_engine(filled: HybridMemory) -> None:
    engine = RetrieverQueryEngine.from_args(HybridMemoryRetriever(filled, user_id="alice", k=2), llm=MockLLM())
    response = await engine.aquery("Which seat does Alice prefer on flights?")
    assert response.source_nodes
    assert response.source_nodes[0].node.get_content() == "Alice prefers window seats on long flights"
    assert "window seats" in str(response)  # MockLLM echoes the prompt, which holds the memory
