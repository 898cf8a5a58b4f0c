"""HybridMemoryStore against LangGraph's BaseStore contract.

The scenarios are ported from LangGraph's own store tests (``libs/checkpoint/tests/test_store.py``
and ``libs/checkpoint-sqlite/tests/test_store.py``). Where the semantics are meant to match, the
same operations run on LangGraph's ``InMemoryStore`` (the oracle) and on ``HybridMemoryStore``
and the results are compared. Where hybrid semantics differ on purpose (scores, ranking,
lifecycle, TTL, filters on missing values), the difference is asserted explicitly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder
from langchain_hybrid_memory import HybridMemoryStore

ANY_NS = ("{user_id}",)  # the first label of any namespace is the core user: accepts every namespace


class HashingEmbeddings(Embeddings):
    """The same lexical vectors for the oracle as the core uses (LangChain ``Embeddings`` face)."""

    def __init__(self) -> None:
        self._e = HashingEmbedder(dim=256)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._e.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self._e.embed_query(text)]


@pytest.fixture
def hybrid(mem: HybridMemory) -> HybridMemoryStore:
    return HybridMemoryStore(mem, namespace=ANY_NS)


@pytest.fixture
def oracle() -> InMemoryStore:
    return InMemoryStore(index={"dims": 256, "embed": HashingEmbeddings(), "fields": ["text"]})


@pytest.fixture
def pair(hybrid: HybridMemoryStore, oracle: InMemoryStore) -> tuple[BaseStore, BaseStore]:
    return oracle, hybrid


def triples(items: Any) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(i.namespace, i.key, i.value) for i in items]


def same(pair: tuple[BaseStore, BaseStore], fn: Callable[[BaseStore], Any]) -> Any:
    """Run ``fn`` on the oracle and the hybrid store; assert equal results; return them."""
    expected, actual = fn(pair[0]), fn(pair[1])
    assert actual == expected
    return actual


# --------------------------------------------------------------------------- list_namespaces
NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


def _fill(store: BaseStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, ns in enumerate(namespaces):
        store.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})


def test_list_namespaces_basic(pair: tuple[BaseStore, BaseStore]) -> None:
    for s in pair:
        _fill(s, NAMESPACES)
    calls: list[dict[str, Any]] = [
        {"prefix": ("a", "b")},
        {"suffix": ("f",)},
        {"prefix": ("a",), "suffix": ("f",)},
        {"prefix": ("a", "b"), "max_depth": 3},
        {"prefix": ("a", "b"), "limit": 2},
        {"prefix": ("a", "b"), "offset": 2},
        {"prefix": ("a", "*", "f")},
        {"suffix": ("*", "f")},
        {"prefix": ("nonexistent",)},
        {"prefix": ("users", "123")},
        {},
        {"max_depth": 2},
    ]
    for kwargs in calls:
        got = same(pair, lambda s, kw=kwargs: s.list_namespaces(**kw))  # type: ignore[misc]
        assert isinstance(got, list)
    assert pair[1].list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]


def test_list_namespaces_with_wildcards(pair: tuple[BaseStore, BaseStore]) -> None:
    for s in pair:
        _fill(
            s,
            [
                ("users", "123"),
                ("users", "456"),
                ("users", "789", "settings"),
                ("admin", "users", "789"),
                ("guests", "123"),
                ("guests", "456", "preferences"),
            ],
        )
    same(pair, lambda s: s.list_namespaces(prefix=("users", "*")))
    same(pair, lambda s: s.list_namespaces(suffix=("*", "preferences")))
    assert same(pair, lambda s: s.list_namespaces(prefix=("*", "users"), suffix=("*", "settings"))) == []


def test_list_namespaces_pagination(pair: tuple[BaseStore, BaseStore]) -> None:
    for s in pair:
        for i in range(20):
            s.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": f"value_{i:02d}"})
    for offset in (0, 5, 15):
        got = same(pair, lambda s, o=offset: s.list_namespaces(prefix=("namespace",), limit=5, offset=o))  # type: ignore[misc]
        assert got == [("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


def test_list_namespaces_max_depth_and_empty(pair: tuple[BaseStore, BaseStore]) -> None:
    assert same(pair, lambda s: s.list_namespaces()) == []
    for s in pair:
        _fill(s, [("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"), ("a", "g"), ("h", "i", "j", "k")])
    assert same(pair, lambda s: s.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "g"), ("h", "i")]


# --------------------------------------------------------------------------- namespace validation
async def test_cannot_put_invalid_namespaces(pair: tuple[BaseStore, BaseStore]) -> None:
    doc = {"foo": "bar"}
    for s in pair:
        for ns in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
            with pytest.raises(InvalidNamespaceError):
                s.put(ns, "foo", doc)
            with pytest.raises(InvalidNamespaceError):
                await s.aput(ns, "foo", doc)
        await s.aput(("foo", "langgraph", "foo"), "bar", doc)
        assert (await s.aget(("foo", "langgraph", "foo"), "bar")).value == doc  # type: ignore[union-attr]
        assert (await s.asearch(("foo", "langgraph", "foo")))[0].value == doc
        await s.adelete(("foo", "langgraph", "foo"), "bar")
        assert await s.aget(("foo", "langgraph", "foo"), "bar") is None


def test_batch_validates_namespace_labels(hybrid: HybridMemoryStore) -> None:
    """Ops passed straight to batch() skip BaseStore's checks; the store runs validate_op_namespace."""
    for op in [
        PutOp(("a.b",), "k", {"x": 1}),
        GetOp(("a", ""), "k"),
        SearchOp(("a\x00",)),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a.b",)),)),
    ]:
        with pytest.raises(InvalidNamespaceError):
            hybrid.batch([op])
    with pytest.raises(InvalidNamespaceError):
        hybrid.batch([PutOp((), "k", {"x": 1})])  # an empty namespace names no user


# --------------------------------------------------------------------------- batches
def test_batch_order(pair: tuple[BaseStore, BaseStore]) -> None:
    def run(store: BaseStore) -> list[Any]:
        store.put(("test", "foo"), "key1", {"data": "value1"})
        store.put(("test", "bar"), "key2", {"data": "value2"})
        results = store.batch(
            [
                GetOp(("test", "foo"), "key1"),
                PutOp(("test", "bar"), "key2", {"data": "value2"}),
                SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
                ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
                GetOp(("test",), "key3"),
            ]
        )
        assert isinstance(results[0], Item)
        return [
            triples([results[0]]),
            results[1],
            triples(results[2]),  # type: ignore[arg-type]
            results[3],
            results[4],
        ]

    got = same(pair, run)
    assert got[0] == [(("test", "foo"), "key1", {"data": "value1"})]
    assert got[3] == [("test", "bar"), ("test", "foo")]


def test_batch_put_get_delete(pair: tuple[BaseStore, BaseStore]) -> None:
    def run(store: BaseStore) -> list[Any]:
        store.batch(
            [
                PutOp(("test",), "key1", {"data": "value1"}),
                PutOp(("test",), "key2", {"data": "value2"}),
                PutOp(("test",), "key3", None),
            ]
        )
        got = store.batch([GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")])
        return [None if g is None else (g.key, g.value) for g in got]  # type: ignore[union-attr]

    assert same(pair, run) == [("key1", {"data": "value1"}), ("key2", {"data": "value2"}), None]


def test_batch_search_ops(pair: tuple[BaseStore, BaseStore]) -> None:
    def run(store: BaseStore) -> list[Any]:
        for ns, key, value in [
            (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
            (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
            (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
        ]:
            store.put(ns, key, value)
        res = store.batch(
            [
                SearchOp(("test",), filter={"tag": "a"}, limit=10, offset=0),
                SearchOp(("test",), filter=None, limit=2, offset=0),
                SearchOp(("test", "foo"), filter=None, limit=10, offset=0),
            ]
        )
        return [sorted(triples(r)) for r in res]  # type: ignore[arg-type]

    got = same(pair, run)
    assert [len(r) for r in got] == [2, 2, 1]


def test_basic_ops_and_update(pair: tuple[BaseStore, BaseStore]) -> None:
    def run(store: BaseStore) -> list[Any]:
        ns = ("test", "documents")
        store.put(ns, "doc1", {"title": "Test Document", "content": "Hello, World!"})
        first = store.get(ns, "doc1")
        store.put(ns, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
        second = store.get(ns, "doc1")
        other = store.get(("test", "other_documents"), "doc1")
        store.delete(ns, "doc1")
        store.delete(ns, "never-existed")
        return [first.value, second.value, other, store.get(ns, "doc1")]  # type: ignore[union-attr]

    assert same(pair, run)[1] == {"title": "Updated Document", "content": "Hello, Updated!"}


# --------------------------------------------------------------------------- search without a query
def test_search_filters_and_pagination(pair: tuple[BaseStore, BaseStore]) -> None:
    data = [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"], "n": 1}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"], "n": 2}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"], "n": 3}),
        (("test", "docs"), "doc3", {"title": "Third", "author": "Carol", "meta": {"lang": "zh", "v": 2}, "n": 4.5}),
    ]
    for s in pair:
        for ns, key, value in data:
            s.put(ns, key, value)
    filters: list[dict[str, Any] | None] = [
        None,
        {"author": "Alice"},
        {"tags": ["draft"]},
        {"meta": {"lang": "zh"}},
        {"n": {"$gt": 1}},
        {"n": {"$gte": 2, "$lt": 4}},
        {"n": {"$lte": 2}},
        {"n": {"$ne": 3}},
        {"author": {"$eq": "Bob"}},
        {"author": {"$ne": "Alice"}, "n": {"$gt": 0}},
        {"author": "Nobody"},
    ]
    for flt in filters:
        same(pair, lambda s, f=flt: sorted(triples(s.search(("test",), filter=f))))  # type: ignore[misc]
    # one namespace: same order as the oracle (insertion order), paginated
    for offset in range(4):
        same(pair, lambda s, o=offset: triples(s.search(("test", "docs"), limit=2, offset=o)))  # type: ignore[misc]
    assert len(pair[1].search(("test",), limit=2)) == 2
    assert len(pair[1].search(("test",), offset=3)) == 1
    assert all(i.score is None for i in pair[1].search(("test",)))
    for s in pair:
        with pytest.raises(ValueError, match="operator"):
            s.search(("test",), filter={"n": {"$foo": 1}})


def test_filter_on_missing_or_non_numeric_value_is_false(pair: tuple[BaseStore, BaseStore]) -> None:
    """A documented difference: InMemoryStore raises TypeError, the hybrid store just does not match."""
    oracle, hybrid = pair
    for s in pair:
        s.put(("t",), "a", {"n": 1})
        s.put(("t",), "b", {"name": "x", "n": "many"})
    with pytest.raises(TypeError):
        oracle.search(("t",), filter={"missing": {"$gt": 0}})
    assert hybrid.search(("t",), filter={"missing": {"$gt": 0}}) == []
    assert [i.key for i in hybrid.search(("t",), filter={"n": {"$gte": 1}})] == ["a"]


# --------------------------------------------------------------------------- search with a query
DOCS = [
    ("doc1", {"text": "short text"}),
    ("doc2", {"text": "longer text document"}),
    ("doc3", {"text": "longest text document here"}),
    ("doc4", {"description": "text in description field"}),
    ("doc5", {"content": "text in content field"}),
    ("doc6", {"body": "text in body field"}),
]


def test_query_search_ranks_like_the_oracle_where_it_should(pair: tuple[BaseStore, BaseStore]) -> None:
    oracle, hybrid = pair
    for s in pair:
        for key, value in [
            ("doc1", {"text": "zany zebra Xerxes"}),
            ("doc2", {"text": "something about dogs"}),
            ("doc3", {"text": "text about birds"}),
        ]:
            s.put(("test",), key, value)
    for query, top in [("Zany Xerxes", "doc1"), ("dogs", "doc2"), ("birds", "doc3")]:
        assert oracle.search(("test",), query=query)[0].key == top
        assert hybrid.search(("test",), query=query)[0].key == top
    # every item comes back when the limit allows, as with the oracle
    assert {i.key for i in hybrid.search(("test",), query="about")} == {"doc1", "doc2", "doc3"}


def test_vector_insert_with_auto_embedding(hybrid: HybridMemoryStore) -> None:
    for key, value in DOCS:
        hybrid.put(("test",), key, value)
    results = hybrid.search(("test",), query="long text")
    keys = [r.key for r in results]
    assert "doc2" in keys and "doc3" in keys
    assert len(results) == 6
    assert all(isinstance(r, SearchItem) and r.score is not None for r in results)


def test_vector_update_with_embedding(hybrid: HybridMemoryStore) -> None:
    hybrid.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    hybrid.put(("test",), "doc2", {"text": "something about dogs"})
    hybrid.put(("test",), "doc3", {"text": "text about birds"})
    initial = hybrid.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    hybrid.put(("test",), "doc1", {"text": "new text about dogs"})
    after = {r.key: r.score for r in hybrid.search(("test",), query="Zany Xerxes")}
    assert after["doc1"] < initial[0].score  # type: ignore[operator]
    new = {r.key: r.score for r in hybrid.search(("test",), query="new text about dogs")}
    assert new["doc1"] > after["doc1"]  # type: ignore[operator]
    # index=False: stored and gettable, never ranked by a query
    hybrid.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    assert not any(r.key == "doc4" for r in hybrid.search(("test",), query="new text about dogs", limit=3))
    assert hybrid.get(("test",), "doc4").value == {"text": "new text about dogs"}  # type: ignore[union-attr]


def test_unindexed_items_fill_a_page_like_the_oracle(pair: tuple[BaseStore, BaseStore]) -> None:
    for s in pair:
        s.put(("t",), "a", {"text": "red apple"})
        s.put(("t",), "b", {"text": "green apple"}, index=False)
    for s in pair:
        res = s.search(("t",), query="apple", limit=5)
        assert [(r.key, r.score is None) for r in res] == [("a", False), ("b", True)]
        assert [r.key for r in s.search(("t",), query="apple", limit=1)] == ["a"]


def test_query_search_with_filters(pair: tuple[BaseStore, BaseStore]) -> None:
    docs = [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
    ]
    for s in pair:
        for key, value in docs:
            s.put(("test",), key, value)
    for query, flt, top in [
        ("apple", {"color": "red"}, "doc1"),
        ("car", {"color": "red"}, "doc2"),
        ("apple", {"score": {"$gte": 4.0}, "color": "green"}, "doc3"),
        ("blue", {"score": {"$gt": 3.2}}, "doc4"),
    ]:
        expected = pair[0].search(("test",), query=query, filter=flt)
        actual = pair[1].search(("test",), query=query, filter=flt)
        assert {r.key for r in actual} == {r.key for r in expected}
        assert actual[0].key == expected[0].key == top


async def test_concurrent_async_writes_and_searches(hybrid: HybridMemoryStore) -> None:
    colors = ["red", "blue", "green", "yellow", "purple"]
    things = ["apple", "car", "house", "book", "phone"]
    docs = [
        (f"doc{i}", {"text": f"{colors[i % 5]} {things[i % 5]}", "color": colors[i % 5], "index": i}) for i in range(30)
    ]
    await asyncio.gather(*[hybrid.aput(("test",), k, v) for k, v in docs])
    await asyncio.gather(*[hybrid.adelete(("test",), k) for k, _ in docs[:10]])
    queries: list[tuple[str, dict[str, Any]]] = [
        ("apple", {"color": "red"}),
        ("house", {"index": {"$gt": 12}}),
        ("phone", {"index": {"$lte": 29}}),
    ]
    results = await asyncio.gather(*[hybrid.asearch(("test",), query=q, filter=f) for q, f in queries])
    for res, (_, flt) in zip(results, queries, strict=True):
        assert res
        for item in res:
            assert item.value["index"] >= 10
            if "color" in flt:
                assert item.value["color"] == flt["color"]
    assert len(await hybrid.asearch(("test",), limit=100)) == 20


def test_query_pagination(hybrid: HybridMemoryStore) -> None:
    for i in range(5):
        hybrid.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = hybrid.search(("test",), query="test", limit=2)
    page2 = hybrid.search(("test",), query="test", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2
    assert not {r.key for r in page1} & {r.key for r in page2}
    assert len(hybrid.search(("test",), query="test", limit=10)) == 5


def test_query_edge_cases(pair: tuple[BaseStore, BaseStore]) -> None:
    for s in pair:
        s.put(("test",), "doc1", {"text": "test document"})
    for query in ["", None, "   ", "test " * 100, "test!@#$%^&*()", "测试文档"]:
        assert len(same(pair, lambda s, q=query: [r.key for r in s.search(("test",), query=q)])) == 1  # type: ignore[misc]


# --------------------------------------------------------------------------- hybrid-specific semantics
def test_namespace_template_maps_users_and_categories(mem: HybridMemory) -> None:
    store = HybridMemoryStore(mem)  # ("memories", "{user_id}")
    store.put(("memories", "alice", "preference"), "drink", {"content": "Alice prefers green tea"})
    store.put(("memories", "alice", "notes", "work"), "job", {"content": "Alice works night shifts"})
    store.put(("memories", "bob"), "drink", {"content": "Bob prefers black tea", "importance": 0.9})
    recs = {r.content: r for u in ("alice", "bob") for r in mem.list_memories(u)}
    assert recs["Alice prefers green tea"].user_id == "alice"
    assert recs["Alice prefers green tea"].category == "preference"
    assert recs["Bob prefers black tea"].user_id == "bob" and recs["Bob prefers black tea"].importance == 0.9
    with pytest.raises(InvalidNamespaceError, match="template"):
        store.put(("users", "alice"), "k", {"content": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("memories",), "k", {"content": "x"})
    assert store.get(("users", "alice"), "k") is None
    assert store.search(("users",)) == []
    assert [i.key for i in store.search(("memories", "alice", "preference"), query="tea")] == ["drink"]
    assert store.search(("memories", "alice"), query="tea")[0].key == "drink"
    assert {i.namespace for i in store.search(("memories",))} == {
        ("memories", "alice", "preference"),
        ("memories", "alice", "notes", "work"),
        ("memories", "bob"),
    }
    assert store.list_namespaces(prefix=("memories", "bob")) == [("memories", "bob")]
    assert store.list_namespaces(prefix=("memories", "*", "notes")) == [("memories", "alice", "notes", "work")]
    other = HybridMemoryStore(mem, namespace=("{user_id}", "memories"))
    other.put(("carol", "memories"), "k", {"text": "Carol likes chess"})
    assert [r.content for r in mem.list_memories("carol")] == ["Carol likes chess"]
    for bad in [(), ("memories",), ("a", "b"), ("{user_id}", "{user_id}"), ("a.b", "{user_id}")]:
        with pytest.raises(ValueError):
            HybridMemoryStore(mem, namespace=bad)


def test_core_memories_are_visible_through_the_store(mem: HybridMemory) -> None:
    store = HybridMemoryStore(mem)
    out = mem.remember("alice", "Alice is allergic to peanuts", importance=0.9, category="fact", tags=("health",))
    assert out.record is not None
    rid = out.record.id
    found = store.search(("memories", "alice"), query="peanuts allergy")
    assert [(i.namespace, i.key) for i in found] == [(("memories", "alice", "fact"), rid)]
    assert found[0].value["content"] == "Alice is allergic to peanuts"
    assert found[0].value["tags"] == ["health"]
    item = store.get(("memories", "alice", "fact"), rid)
    assert item is not None and item.value["importance"] == 0.9
    assert store.get(("memories", "alice", "preference"), rid) is None  # wrong namespace
    # a put on the core memory's (namespace, key) updates it in place, no duplicate
    store.put(("memories", "alice", "fact"), rid, {"content": "Alice is allergic to peanuts and cashews"})
    assert [r.content for r in mem.list_memories("alice")] == ["Alice is allergic to peanuts and cashews"]
    assert mem.list_memories("alice")[0].id == rid
    store.delete(("memories", "alice", "fact"), rid)
    assert mem.list_memories("alice") == []


def test_put_keeps_created_at_and_bumps_updated_at(pair: tuple[BaseStore, BaseStore]) -> None:
    oracle, hybrid = pair
    for s in pair:
        s.put(("u",), "k", {"text": "v1"})
    first = {id(s): s.get(("u",), "k") for s in pair}
    time.sleep(0.01)
    for s in pair:
        s.put(("u",), "k", {"text": "v2"})
    h1, h2 = first[id(hybrid)], hybrid.get(("u",), "k")
    assert h1 is not None and h2 is not None
    assert h2.created_at == h1.created_at
    assert h2.updated_at > h1.updated_at
    o1, o2 = first[id(oracle)], oracle.get(("u",), "k")
    assert o1 is not None and o2 is not None
    assert o2.created_at > o1.created_at  # InMemoryStore resets created_at (documented difference)
    assert h2.created_at.tzinfo is not None


def test_scores_are_the_cores_final_scores(mem: HybridMemory, hybrid: HybridMemoryStore) -> None:
    for key, value in DOCS:
        hybrid.put(("alice",), key, value)
    results = hybrid.search(("alice",), query="longest text document")
    assert all(r.score is not None and 0.0 <= r.score <= 1.0 for r in results)
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    top = mem.get(mem.list_memories("alice")[2].id, user_id="alice")
    assert results[0].value == {"text": "longest text document here"}
    assert top.content == "longest text document here"
    assert top.access_count >= 1  # a query search counts as an access (heat)


def test_value_importance_category_and_json(hybrid: HybridMemoryStore, mem: HybridMemory) -> None:
    hybrid.put(("alice",), "a", {"text": "Alice likes long walks", "importance": 0.25, "category": "preference"})
    hybrid.put(("alice",), "b", {"text": "plain note", "importance": "high", "category": "nonsense"})
    recs = {r.content: r for r in mem.list_memories("alice")}
    assert recs["Alice likes long walks"].importance == 0.25
    assert recs["Alice likes long walks"].category == "preference"
    assert 0.0 <= recs["plain note"].importance <= 1.0 and recs["plain note"].category in (
        "fact",
        "preference",
        "project",
    )
    with pytest.raises(ValueError, match="JSON"):
        hybrid.put(("alice",), "c", {"when": object()})
    value = {"text": "nested", "deep": {"list": [1, 2, {"x": None}]}}
    hybrid.put(("alice",), "d", value)
    got = hybrid.get(("alice",), "d")
    assert got is not None and got.value == value
    got.value["deep"]["list"].append(3)  # returned values are copies
    assert hybrid.get(("alice",), "d").value == value  # type: ignore[union-attr]


def test_fields_and_per_put_index_paths(mem: HybridMemory) -> None:
    store = HybridMemoryStore(mem, namespace=ANY_NS, fields=["title", "body.summary"])
    store.put(("u",), "a", {"title": "Quarterly report", "body": {"summary": "revenue grew", "raw": "zzz"}})
    store.put(("u",), "b", {"title": "x", "chapters": [{"c": "alpha beta"}, {"c": "gamma"}]}, index=["chapters[*].c"])
    contents = {r.content for r in mem.list_memories("u")}
    assert contents == {"Quarterly report\nrevenue grew", "alpha beta\ngamma"}
    assert [i.key for i in store.search(("u",), query="gamma", limit=1)] == ["b"]


def test_users_never_see_each_other(hybrid: HybridMemoryStore) -> None:
    hybrid.put(("alice", "notes"), "k", {"text": "Alice's secret diary entry"})
    assert hybrid.search(("bob",), query="secret diary") == []
    assert hybrid.search(("bob", "notes")) == []
    assert hybrid.get(("bob", "notes"), "k") is None
    assert hybrid.list_namespaces(prefix=("bob",)) == []


def test_ttl_is_not_supported(pair: tuple[BaseStore, BaseStore]) -> None:
    oracle, hybrid = pair
    assert hybrid.supports_ttl is False and oracle.supports_ttl is False
    for s in pair:
        with pytest.raises(NotImplementedError):
            s.put(("u",), "k", {"text": "x"}, ttl=5)
        s.put(("u",), "k", {"text": "x"}, ttl=None)
        assert s.get(("u",), "k", refresh_ttl=True) is not None
    with pytest.raises(NotImplementedError):
        hybrid.batch([PutOp(("u",), "k2", {"text": "y"}, ttl=1.0)])


def test_lifecycle_archived_and_superseded(mem: HybridMemory, hybrid: HybridMemoryStore) -> None:
    hybrid.put(("alice",), "old", {"text": "Alice lived in Paris"})
    hybrid.put(("alice",), "gone", {"text": "Alice lived in Rome"})
    recs = {r.content: r for r in mem.list_memories("alice")}
    mem.store.update(
        [
            recs["Alice lived in Paris"].evolve(status="archived"),
            recs["Alice lived in Rome"].evolve(status="superseded"),
        ]
    )
    item = hybrid.get(("alice",), "old")
    assert item is not None and item.value == {"text": "Alice lived in Paris"}
    assert hybrid.get(("alice",), "gone") is None
    assert [i.key for i in hybrid.search(("alice",))] == ["old"]
    # archived memories are out of normal ranking; the core's archive fall-back still finds them
    assert [i.key for i in hybrid.search(("alice",), query="lived in Paris")] == ["old"]
    assert hybrid.list_namespaces() == [("alice",)]


def test_alpha_is_passed_to_recall(mem: HybridMemory) -> None:
    keyword = HybridMemoryStore(mem, namespace=ANY_NS, alpha=0.0)
    keyword.put(("u",), "a", {"text": "kiwi smoothie"})
    keyword.put(("u",), "b", {"text": "banana bread"})
    assert [i.key for i in keyword.search(("u",), query="kiwi")] == ["a"]  # pure BM25: only the match
    with pytest.raises(ValueError):
        HybridMemoryStore(mem, alpha=2.0)


async def test_async_api(hybrid: HybridMemoryStore) -> None:
    await hybrid.aput(("u", "x"), "k", {"text": "async value"})
    assert (await hybrid.aget(("u", "x"), "k")).value == {"text": "async value"}  # type: ignore[union-attr]
    assert [i.key for i in await hybrid.asearch(("u",), query="async")] == ["k"]
    assert await hybrid.alist_namespaces(prefix=("u",)) == [("u", "x")]
    res = await hybrid.abatch(iter([GetOp(("u", "x"), "k"), PutOp(("u", "x"), "k", None), GetOp(("u", "x"), "k")]))
    assert isinstance(res[0], Item) and res[2] is None


def test_store_in_a_langgraph_graph(mem: HybridMemory) -> None:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    class S(TypedDict):
        question: str
        answer: str

    def recall(state: S, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        hits = runtime.store.search(("memories", "alice"), query=state["question"], limit=1)
        return {"answer": hits[0].value["content"] if hits else "?"}

    store = HybridMemoryStore(mem)
    store.put(("memories", "alice"), "pet", {"content": "Alice has a cat called Miso"})
    graph = StateGraph(S).add_node("recall", recall).add_edge(START, "recall").add_edge("recall", END)
    app = graph.compile(store=store)
    assert app.invoke({"question": "what is the cat called", "answer": ""})["answer"] == "Alice has a cat called Miso"


@pytest.fixture
def file_store(tmp_path: Any) -> Iterator[tuple[HybridMemoryStore, str]]:
    path = str(tmp_path / "memory.db")
    mem = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(dim=256))
    yield HybridMemoryStore(mem), path
    mem.close()


def test_items_survive_a_restart(file_store: tuple[HybridMemoryStore, str]) -> None:
    store, path = file_store
    store.put(("memories", "alice"), "k", {"content": "persisted fact", "n": 1})
    created = store.get(("memories", "alice"), "k").created_at  # type: ignore[union-attr]
    store.memory.close()
    mem2 = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(dim=256))
    try:
        again = HybridMemoryStore(mem2).get(("memories", "alice"), "k")
        assert again is not None and again.value == {"content": "persisted fact", "n": 1}
        assert again.created_at == created
    finally:
        mem2.close()


INVALID_NAMESPACES = [("foo.bar",), ("foo", ""), (123,)]
METHODS = ["get", "delete", "search", "prefix", "suffix"]


@pytest.mark.parametrize("namespace", INVALID_NAMESPACES)
@pytest.mark.parametrize("method", METHODS)
async def test_invalid_labels_are_rejected_sync_and_async(
    hybrid: HybridMemoryStore, namespace: Any, method: str
) -> None:
    for is_async in (False, True):
        with pytest.raises(InvalidNamespaceError):
            if method in ("prefix", "suffix"):
                if is_async:
                    await hybrid.alist_namespaces(**{method: namespace})
                else:
                    hybrid.list_namespaces(**{method: namespace})
            elif method == "search":
                await hybrid.asearch(namespace) if is_async else hybrid.search(namespace)
            elif is_async:
                await getattr(hybrid, f"a{method}")(namespace, "key")
            else:
                getattr(hybrid, method)(namespace, "key")
    assert hybrid.memory.store.users() == []


def test_empty_prefix_and_literal_labels(hybrid: HybridMemoryStore) -> None:
    hybrid.put(("tenant", "a_%"), "k", {"text": "percent label"})
    hybrid.put(("other",), "k", {"text": "other user"})
    assert sorted(i.namespace for i in hybrid.search(())) == [("other",), ("tenant", "a_%")]
    assert [i.namespace for i in hybrid.search(("tenant", "a_%"))] == [("tenant", "a_%")]
    assert hybrid.search(("tenant", "a_")) == []
    assert hybrid.list_namespaces(prefix=("tenant", "*"), suffix=("*",)) == [("tenant", "a_%")]
