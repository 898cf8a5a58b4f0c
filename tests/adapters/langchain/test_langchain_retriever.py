"""HybridMemoryRetriever: the langchain-tests standard suite plus what the suite does not cover."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_tests.integration_tests import RetrieversIntegrationTests

from hybrid_memory import HybridMemory, InvalidInputError, MemoryFilter
from langchain_hybrid_memory import HybridMemoryRetriever

NOW = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
COMPONENTS = ("score", "relevance", "keyword_score", "vector_similarity", "importance", "recency", "heat")


def populate(mem: HybridMemory) -> None:
    facts = [
        ("Alice drinks green tea every morning", "preference", 0.7),
        ("Alice prefers jasmine tea in the evening", "preference", 0.6),
        ("Alice's tea of choice at work is oolong tea", "preference", 0.5),
        ("Alice works as a nurse at the city hospital", "fact", 0.8),
        ("Alice is planning a trip to Kyoto in April", "project", 0.6),
        ("Alice has a cat called Miso", "fact", 0.5),
    ]
    for i, (text, category, importance) in enumerate(facts):
        mem.remember(
            "alice",
            text,
            importance=importance,
            category=category,
            tags=("tea",) if "tea" in text else (),
            timestamp=NOW - timedelta(days=i),
        )
    mem.remember("bob", "Bob drinks black tea with milk", importance=0.9)


class TestHybridMemoryRetrieverStandard(RetrieversIntegrationTests):
    """langchain-tests' own suite (k in the constructor and per call, sync and async)."""

    @pytest.fixture(autouse=True)
    def _core(self, mem: HybridMemory) -> None:
        populate(mem)
        self._mem = mem

    @property
    def retriever_constructor(self) -> type[HybridMemoryRetriever]:
        return HybridMemoryRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self._mem, "user_id": "alice", "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "which tea does Alice like"


def test_documents_carry_memory_id_and_every_score_component(mem: HybridMemory) -> None:
    populate(mem)
    docs = HybridMemoryRetriever(memory=mem, user_id="alice", k=3).invoke("green tea in the morning")
    assert docs[0].page_content == "Alice drinks green tea every morning"
    expected = {h.id: h for h in mem.recall("green tea in the morning", user_id="alice", k=3)}
    for doc in docs:
        assert isinstance(doc, Document)
        assert doc.id == doc.metadata["memory_id"]
        assert doc.metadata["user_id"] == "alice"
        for name in COMPONENTS:
            assert name in doc.metadata
        assert doc.metadata["category"] == mem.get(doc.id, user_id="alice").category
        # same ranking as the core (the later recall only raised heat, which is uniform here)
        assert doc.id in expected
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    assert docs[0].metadata["keyword_score"] is not None and docs[0].metadata["keyword_score"] > 0


def test_per_call_k_alpha_filter_override_constructor(mem: HybridMemory) -> None:
    populate(mem)
    r = HybridMemoryRetriever(memory=mem, user_id="alice", k=4, alpha=1.0)
    assert len(r.invoke("tea")) == 4
    assert len(r.invoke("tea", k=1)) == 1
    # alpha=0.0 is pure BM25 and stays 0.0: only memories containing the word come back
    keyword_only = r.invoke("Kyoto", alpha=0.0, k=5)
    assert [d.page_content for d in keyword_only] == ["Alice is planning a trip to Kyoto in April"]
    prefs = r.invoke("Alice", k=10, filter=MemoryFilter(categories=("preference",)))
    assert {d.metadata["category"] for d in prefs} == {"preference"}
    assert len(prefs) == 3
    as_dict = r.invoke("Alice", k=10, filter={"tags": ["tea"]})
    assert len(as_dict) == 3 and all("tea" in d.metadata["tags"] for d in as_dict)


def test_constructor_filter_and_validation(mem: HybridMemory) -> None:
    populate(mem)
    r = HybridMemoryRetriever(memory=mem, user_id="alice", k=10, filter={"categories": ["fact"]})
    assert isinstance(r.filter, MemoryFilter)
    assert {d.metadata["category"] for d in r.invoke("Alice")} == {"fact"}
    with pytest.raises(ValueError):
        HybridMemoryRetriever(memory=mem, user_id="alice", alpha=1.5)
    with pytest.raises(InvalidInputError):
        HybridMemoryRetriever(memory=mem, user_id="alice", filter={"colour": "red"})
    with pytest.raises(InvalidInputError):
        r.invoke("tea", k=0)


def test_users_are_isolated(mem: HybridMemory) -> None:
    populate(mem)
    bob = HybridMemoryRetriever(memory=mem, user_id="bob", k=10).invoke("tea")
    assert [d.page_content for d in bob] == ["Bob drinks black tea with milk"]
    assert HybridMemoryRetriever(memory=mem, user_id="carol").invoke("tea") == []


def test_blank_query_returns_nothing(mem: HybridMemory) -> None:
    populate(mem)
    assert HybridMemoryRetriever(memory=mem, user_id="alice").invoke("   ") == []


async def test_async_matches_sync(mem: HybridMemory) -> None:
    populate(mem)
    r = HybridMemoryRetriever(memory=mem, user_id="alice", k=3)
    sync_ids = [d.id for d in r.invoke("nurse hospital")]
    async_docs = await r.ainvoke("nurse hospital", k=2, alpha=0.0)
    assert async_docs[0].page_content == "Alice works as a nurse at the city hospital"
    assert len(async_docs) <= 2
    assert sync_ids[0] == async_docs[0].id


def test_recall_counts_as_access(mem: HybridMemory) -> None:
    populate(mem)
    r = HybridMemoryRetriever(memory=mem, user_id="alice", k=1)
    doc = r.invoke("Miso the cat")[0]
    assert mem.get(doc.id, user_id="alice").access_count == doc.metadata["access_count"] + 1


def test_in_an_lcel_pipeline(mem: HybridMemory) -> None:
    populate(mem)
    retriever = HybridMemoryRetriever(memory=mem, user_id="alice", k=2)
    prompt = ChatPromptTemplate.from_messages([("system", "Known facts:\n{facts}"), ("human", "{question}")])
    chain = {
        "facts": retriever | RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs)),
        "question": RunnableLambda(lambda q: q),
    } | prompt
    value = chain.invoke("Which hospital does Alice work at?")
    system = value.to_messages()[0].content
    assert "nurse" in system
