"""The contract every MemoryStore passes (parametrised over STORE_FACTORIES in conftest.py).

Search semantics are Weaviate's hybrid search with per-user BM25 statistics; alpha 1.0 = pure
vector, 0.0 = pure keyword (BM25).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from hybrid_memory.errors import (
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    StoreUnavailableError,
)
from hybrid_memory.records import MemoryRecord, Status
from hybrid_memory.stores.base import MemoryFilter, MemoryStore, SearchRequest, StoreHit
from tests.contract.store_contract_helpers import DIM, T0, mat, rec, vec

ALL_STATUSES: tuple[Status, ...] = ("active", "superseded", "archived", "deleted")


def ids(hits: list[StoreHit]) -> list[str]:
    return [h.record.id for h in hits]


def search(
    store: MemoryStore, user: str, query: str | None, v: np.ndarray | None, alpha: float, **kw: object
) -> list[StoreHit]:
    return store.search(SearchRequest(user_id=user, query=query, vector=v, alpha=alpha, **kw))  # type: ignore[arg-type]


def seed(store: MemoryStore, records: list[MemoryRecord], vectors: list[np.ndarray]) -> None:
    store.bind_embedder("contract-test", DIM)
    store.upsert(records, mat(*vectors))


def test_store_satisfies_protocol(store: MemoryStore) -> None:
    assert isinstance(store, MemoryStore)


def test_empty_store(store: MemoryStore) -> None:
    missing = str(uuid.uuid4())
    assert store.count() == 0
    assert store.count("alice") == 0
    assert store.users() == []
    assert store.list("alice") == []
    assert store.get("alice", [missing]) == []
    assert store.get_vectors("alice", [missing]) == {}
    assert search(store, "alice", "anything", vec(1), 0.5) == []
    assert search(store, "alice", "anything", None, 0.0) == []
    assert store.delete("alice", [missing]) == 0
    assert store.delete_user("alice") == 0
    store.bind_embedder("contract-test", DIM)
    assert store.dimension == DIM
    assert search(store, "alice", "anything", vec(1), 0.5) == []


def test_idempotent_upsert(store: MemoryStore) -> None:
    fixed = "0b1f3c52-7d0e-4f7e-9d1c-2a6f7c9e8b10"
    first = rec("alice", "the cat sleeps on the sofa", id=fixed)
    seed(store, [first], [vec(1)])
    store.upsert([first], mat(vec(1)))
    assert store.count("alice") == 1
    latest = first.evolve(content="the dog plays in the garden", updated_at=T0 + timedelta(hours=1))
    store.upsert([latest], mat(vec(0, 1)))
    assert store.count("alice") == 1
    [got] = store.get("alice", [fixed])
    assert got.content == "the dog plays in the garden"
    assert got.updated_at == T0 + timedelta(hours=1)
    assert ids(search(store, "alice", "garden", None, 0.0)) == [fixed]
    assert search(store, "alice", "sofa", None, 0.0) == []
    np.testing.assert_allclose(store.get_vectors("alice", [fixed])[fixed], vec(0, 1), atol=1e-6)


def test_upsert_same_id_twice_in_one_batch_keeps_the_last(store: MemoryStore) -> None:
    fixed = str(uuid.uuid4())
    a = rec("alice", "first version", id=fixed)
    b = rec("alice", "second version", id=fixed)
    seed(store, [a, b], [vec(1), vec(0, 1)])
    assert store.count("alice") == 1
    assert store.get("alice", [fixed])[0].content == "second version"
    assert ids(search(store, "alice", "second", None, 0.0)) == [fixed]
    assert search(store, "alice", "first", None, 0.0) == []


def test_metadata_round_trip(store: MemoryStore) -> None:
    beijing = timezone(timedelta(hours=8))
    original = MemoryRecord.create(
        user_id="alice",
        content="Alice 喜欢喝绿茶 🍵 every morning",
        timestamp=datetime(2025, 3, 1, 20, 30, 15, 123456, tzinfo=beijing),
        category="preference",
        importance=0.8,
        source="assistant",
        session_id="s-1",
        tags=("drink", "中文"),
        metadata={
            "nested": {"list": [1, 2.5, "三", None, True], "deep": {"k": "v", "empty": {}}},
            "emoji": "🍵",
            "quote": 'say "hi"\nnew line',
            "big": 2**53,
        },
        last_accessed_at=datetime(2025, 3, 2, 8, 0, tzinfo=beijing),
        access_count=3,
        version=2,
        supersedes=str(uuid.uuid4()),
        provenance=("turn-1", "turn-2"),
    )
    old = rec("alice", "Alice drinks coffee", status="superseded", superseded_by=original.id)
    seed(store, [original, old], [vec(1, 1), vec(1)])
    got, got_old = store.get("alice", [original.id, old.id])
    assert got == original
    assert got_old == old
    assert got.metadata == original.metadata
    assert got.created_at == datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)
    for ts in (got.created_at, got.updated_at, got.last_accessed_at):
        assert ts is not None
        assert ts.utcoffset() == timedelta(0)
    [listed] = store.list("alice", filter=MemoryFilter(statuses=("active",)))
    assert listed == original
    [hit] = search(store, "alice", "绿茶", None, 0.0)
    assert hit.record == original


def test_metadata_must_be_json(store: MemoryStore) -> None:
    bad = rec("alice", "has a set in metadata", metadata={"s": {1, 2}})
    store.bind_embedder("contract-test", DIM)
    with pytest.raises(InvalidInputError):
        store.upsert([bad], mat(vec(1)))
    assert store.count() == 0


def test_delete_of_missing_ids(store: MemoryStore) -> None:
    a = rec("alice", "keep me around")
    seed(store, [a], [vec(1)])
    assert store.delete("alice", [str(uuid.uuid4()), str(uuid.uuid4())]) == 0
    assert store.delete("alice", []) == 0
    assert store.count("alice") == 1
    assert store.delete("alice", [a.id, str(uuid.uuid4())]) == 1
    assert store.count("alice") == 0
    assert store.delete("alice", [a.id]) == 0
    assert store.delete_user("nobody") == 0


def test_per_user_isolation(store: MemoryStore) -> None:
    content = "Project Apollo deadline is Friday"
    a = rec("alice", content)
    b = rec("bob", content)
    assert a.id != b.id
    seed(store, [a, b], [vec(1), vec(1)])
    for user, mine, other in (("alice", a, b), ("bob", b, a)):
        for alpha in (0.0, 0.5, 1.0):
            hits = search(store, user, "Apollo deadline", vec(1), alpha)
            assert ids(hits) == [mine.id]
            assert all(h.record.user_id == user for h in hits)
        assert store.get(user, [other.id]) == []
        assert store.get_vectors(user, [other.id]) == {}
        assert ids_of(store.list(user)) == [mine.id]
        assert store.count(user) == 1
    assert store.users() == ["alice", "bob"]
    assert store.count() == 2
    # Writes scoped to the wrong user touch nothing.
    assert store.delete("alice", [b.id]) == 0
    store.touch("alice", [b.id], T0 + timedelta(days=1))
    assert store.get("bob", [b.id])[0].access_count == 0
    assert store.delete_user("alice") == 1
    assert store.count("alice") == 0
    assert store.count("bob") == 1
    assert ids(search(store, "bob", "Apollo", vec(1), 0.5)) == [b.id]
    assert store.users() == ["bob"]


def ids_of(records: list[MemoryRecord]) -> list[str]:
    return [r.id for r in records]


def test_same_explicit_id_for_two_users(store: MemoryStore) -> None:
    shared = str(uuid.uuid4())
    a = rec("alice", "alice's note", id=shared)
    b = rec("bob", "bob's note", id=shared)
    seed(store, [a, b], [vec(1), vec(0, 1)])
    assert store.get("alice", [shared])[0].content == "alice's note"
    assert store.get("bob", [shared])[0].content == "bob's note"
    assert store.delete("alice", [shared]) == 1
    assert store.get("bob", [shared])[0].content == "bob's note"


def test_bm25_statistics_are_per_user(store: MemoryStore) -> None:
    b = rec("bob", "apollo launch window")
    seed(store, [b], [vec(1)])
    [before] = search(store, "bob", "apollo", None, 0.0)
    crowd = [rec("alice", f"apollo apollo memo number {i}") for i in range(20)]
    store.upsert(crowd, mat(*[vec(1, i) for i in range(20)]))
    [after] = search(store, "bob", "apollo", None, 0.0)
    assert before.keyword_score is not None
    assert after.keyword_score == before.keyword_score


def test_limit_is_honoured(store: MemoryStore) -> None:
    records = [rec("alice", f"note number {i} about gardening", minutes=i) for i in range(30)]
    seed(store, records, [vec(1, i / 30, (i % 7) / 7) for i in range(30)])
    for alpha in (0.0, 0.5, 1.0):
        assert len(search(store, "alice", "gardening", vec(1), alpha, limit=5)) == 5
        assert len(search(store, "alice", "gardening", vec(1), alpha, limit=50)) == 30
    assert len(store.list("alice", limit=7)) == 7
    assert ids_of(store.list("alice", limit=3, offset=2)) == [r.id for r in records[2:5]]


def test_offset_pages_through_the_ranking(store: MemoryStore) -> None:
    records = [rec("alice", f"gardening tip {i}", minutes=i) for i in range(12)]
    seed(store, records, [vec(1, i / 12) for i in range(12)])
    full = ids(search(store, "alice", "gardening", vec(1), 0.5, limit=12))
    page = ids(search(store, "alice", "gardening", vec(1), 0.5, limit=3, offset=4))
    assert page == full[4:7]


def test_filters(store: MemoryStore) -> None:
    m1 = rec("alice", "meeting notes about the budget", minutes=0, category="fact", tags=("work",), session_id="s1")
    m2 = rec(
        "alice", "likes spicy food within budget", minutes=10, category="preference", tags=("food",), session_id="s1"
    )
    m3 = rec(
        "alice",
        "archived budget plan",
        minutes=20,
        category="project",
        tags=("work", "urgent"),
        session_id="s2",
        status="archived",
    )
    m4 = rec("alice", "old budget figure", minutes=30, category="fact", session_id="s2", status="superseded")
    seed(store, [m1, m2, m3, m4], [vec(1, 0.1), vec(1, 0.2), vec(1, 0.3), vec(1, 0.4)])

    def found(flt: MemoryFilter) -> set[str]:
        by_search = {h.record.id for h in search(store, "alice", "budget", vec(1), 0.5, filter=flt)}
        by_list = set(ids_of(store.list("alice", filter=flt)))
        assert by_search == by_list
        assert store.count("alice", filter=flt) == len(by_list)
        return by_search

    assert found(MemoryFilter()) == {m1.id, m2.id}
    assert found(MemoryFilter(statuses=("active", "archived"))) == {m1.id, m2.id, m3.id}
    assert found(MemoryFilter(statuses=ALL_STATUSES)) == {m1.id, m2.id, m3.id, m4.id}
    assert found(MemoryFilter(categories=("fact",))) == {m1.id}
    assert found(MemoryFilter(categories=("fact",), statuses=ALL_STATUSES)) == {m1.id, m4.id}
    assert found(MemoryFilter(tags=("work",))) == {m1.id}
    assert found(MemoryFilter(tags=("work",), statuses=("active", "archived"))) == {m1.id, m3.id}
    assert found(MemoryFilter(tags=("urgent", "food"))) == {m2.id}
    assert found(MemoryFilter(since=T0 + timedelta(minutes=10))) == {m2.id}
    assert found(MemoryFilter(until=T0 + timedelta(minutes=10))) == {m1.id}
    assert found(
        MemoryFilter(since=T0 + timedelta(minutes=10), until=T0 + timedelta(minutes=20), statuses=ALL_STATUSES)
    ) == {m2.id}
    assert found(MemoryFilter(session_id="s1")) == {m1.id, m2.id}
    assert found(MemoryFilter(session_id="s2")) == set()
    assert found(MemoryFilter(session_id="s2", statuses=ALL_STATUSES)) == {m3.id, m4.id}
    assert found(MemoryFilter(session_id="never")) == set()
    # filter=None lists every status, oldest first.
    assert ids_of(store.list("alice")) == [m1.id, m2.id, m3.id, m4.id]
    assert store.count("alice") == 4


def test_filters_do_not_change_bm25_statistics(store: MemoryStore) -> None:
    x1 = rec("alice", "apple banana smoothie", category="fact")
    x2 = rec("alice", "apple", category="preference")
    x3 = rec("alice", "cherry tart", category="fact")
    seed(store, [x1, x2, x3], [vec(1), vec(0, 1), vec(0, 0, 1)])
    unfiltered = {h.record.id: h.keyword_score for h in search(store, "alice", "apple", None, 0.0)}
    [only_fact] = search(store, "alice", "apple", None, 0.0, filter=MemoryFilter(categories=("fact",)))
    assert only_fact.record.id == x1.id
    assert only_fact.keyword_score == unfiltered[x1.id]
    # Memories outside the default filter (archived) still count in N, df and avgdl.
    store.update([x3.evolve(status="archived")])
    after = {h.record.id: h.keyword_score for h in search(store, "alice", "apple", None, 0.0)}
    assert after == unfiltered


def test_scores_are_ordered_descending(store: MemoryStore) -> None:
    words = ["tea", "coffee", "green tea", "black tea latte", "water", "tea tea tea", "juice with tea"]
    records = [rec("alice", f"{w} note {i}", minutes=i) for i, w in enumerate(words * 3)]
    rng = np.random.default_rng(7)
    seed(store, records, [rng.normal(size=DIM).astype(np.float32) for _ in records])
    q = rng.normal(size=DIM).astype(np.float32)
    for fusion in ("relative", "ranked"):
        for alpha in (0.0, 0.3, 0.5, 0.75, 1.0):
            hits = search(store, "alice", "green tea", q, alpha, limit=15, fusion=fusion)
            assert hits
            scores = [h.score for h in hits]
            assert scores == sorted(scores, reverse=True)


def test_alpha_zero_is_pure_bm25_and_alpha_one_pure_vector(store: MemoryStore) -> None:
    pie = rec("alice", "the red apple pie recipe")
    apple = rec("alice", "apple")
    other = rec("alice", "completely unrelated text")
    seed(store, [pie, apple, other], [vec(0, 1), vec(0, 0, 1), vec(1)])
    bm25 = search(store, "alice", "apple", vec(1), 0.0)
    assert ids(bm25) == [apple.id, pie.id]  # the perfect vector match is not a keyword hit
    assert [h.score for h in bm25] == [1.0, 0.0]
    assert all(h.keyword_score is not None and h.keyword_score > 0 for h in bm25)
    assert bm25[0].keyword_score > bm25[1].keyword_score  # type: ignore[operator]
    assert SearchRequest(user_id="alice", query="apple", vector=None, alpha=0.0).alpha == 0.0
    assert ids(search(store, "alice", "apple", None, 0.0)) == [apple.id, pie.id]

    vector = search(store, "alice", "apple", vec(1), 1.0)
    assert vector[0].record.id == other.id
    assert vector[0].score == 1.0
    assert {h.record.id for h in vector} == {pie.id, apple.id, other.id}
    assert all(h.keyword_score is None for h in vector)
    assert vector[0].vector_similarity == pytest.approx(1.0, abs=1e-6)

    # query=None forces alpha = 1 (Weaviate client rule) even when alpha says 0.
    assert ids(search(store, "alice", None, vec(1), 0.0)) == ids(vector)


def test_alpha_above_zero_needs_a_vector(store: MemoryStore) -> None:
    seed(store, [rec("alice", "something")], [vec(1)])
    with pytest.raises(InvalidInputError):
        search(store, "alice", "something", None, 0.5)


def test_hybrid_relative_scores(store: MemoryStore) -> None:
    a = rec("alice", "zebra crossing")
    b = rec("alice", "zebra")
    c = rec("alice", "horse")
    seed(store, [a, b, c], [vec(1), vec(0.5, 1), vec(0, 1)])
    hits = search(store, "alice", "zebra", vec(1), 0.5)
    assert ids(hits) == [b.id, a.id, c.id]
    by_id = {h.record.id: h for h in hits}
    cos_b = 0.5 / np.sqrt(1.25)
    assert by_id[b.id].score == pytest.approx(0.5 * cos_b + 0.5, abs=1e-6)
    assert by_id[a.id].score == pytest.approx(0.5, abs=1e-6)
    assert by_id[c.id].score == 0.0
    assert by_id[b.id].vector_similarity == pytest.approx(cos_b, abs=1e-6)
    assert by_id[c.id].keyword_score is None
    # Pure BM25 still reports the cosine similarity of each hit when a query vector is given.
    bm25 = search(store, "alice", "zebra", vec(1), 0.0)
    assert ids(bm25) == [b.id, a.id]
    assert [h.vector_similarity for h in bm25] == pytest.approx([cos_b, 1.0], abs=1e-6)


def test_ranked_fusion(store: MemoryStore) -> None:
    a = rec("alice", "zebra crossing")
    b = rec("alice", "zebra")
    c = rec("alice", "horse")
    seed(store, [a, b, c], [vec(1), vec(0.5, 1), vec(0, 1)])
    hits = search(store, "alice", "zebra", vec(1), 0.5, fusion="ranked")
    by_id = {h.record.id: h for h in hits}
    # vector ranks: a 0, b 1, c 2; keyword ranks: b 0, a 1.
    both = float(np.float32(np.float32(0.5 / 61) + np.float32(0.5 / 60)))
    assert by_id[a.id].score == both
    assert by_id[b.id].score == both
    assert by_id[c.id].score == float(np.float32(0.5 / 62))
    assert ids(hits) == [b.id, a.id, c.id]  # tie broken by the BM25 score (b's is higher)


def test_max_vector_distance(store: MemoryStore) -> None:
    near = rec("alice", "alpha beta")
    mid = rec("alice", "delta")
    far = rec("alice", "beta gamma")
    seed(store, [near, mid, far], [vec(1), vec(1, 1), vec(0, 1)])
    assert {h.record.id for h in search(store, "alice", "beta", vec(1), 0.5)} == {near.id, mid.id, far.id}
    within = search(store, "alice", "beta", vec(1), 0.5, max_vector_distance=0.3)
    assert {h.record.id for h in within} == {near.id, mid.id}  # far matches "beta" but is too far
    assert ids(search(store, "alice", "beta", vec(1), 0.5, max_vector_distance=0.01)) == [near.id]
    # Pure BM25 has no vector leg, so the threshold does not apply.
    assert {h.record.id for h in search(store, "alice", "beta", vec(1), 0.0, max_vector_distance=0.01)} == {
        near.id,
        far.id,
    }


def test_touch_bumps_access_count(store: MemoryStore) -> None:
    a = rec("alice", "remember the milk")
    seed(store, [a], [vec(1)])
    when = datetime(2025, 4, 1, 9, 0, tzinfo=timezone(timedelta(hours=2)))
    store.touch("alice", [a.id, str(uuid.uuid4())], when)
    [got] = store.get("alice", [a.id])
    assert got.access_count == 1
    assert got.last_accessed_at == when
    assert got.last_accessed_at is not None
    assert got.last_accessed_at.utcoffset() == timedelta(0)
    store.touch("alice", [a.id], when + timedelta(hours=1))
    assert store.get("alice", [a.id])[0].access_count == 2
    with pytest.raises(InvalidInputError):
        store.touch("alice", [a.id], datetime(2025, 4, 1, 9, 0))  # naive


def test_update(store: MemoryStore) -> None:
    a = rec("alice", "the blue bicycle is in the garage")
    b = rec("alice", "lunch at noon")
    seed(store, [a, b], [vec(1), vec(0, 1)])
    ghost = rec("alice", "never stored")
    with pytest.raises(NotFoundError):
        store.update([b.evolve(content="changed lunch"), ghost])
    assert store.get("alice", [b.id])[0].content == "lunch at noon"
    with pytest.raises(NotFoundError):
        store.update([a.evolve(user_id="bob")])

    store.update([a.evolve(status="archived")])
    assert a.id not in ids(search(store, "alice", "bicycle", vec(1), 0.5))
    assert ids(search(store, "alice", "bicycle", vec(1), 0.5)) == [b.id]  # vector leg still finds b
    archived = search(store, "alice", "bicycle", None, 0.0, filter=MemoryFilter(statuses=("archived",)))
    assert ids(archived) == [a.id]

    store.update([b.evolve(content="dinner at eight", tags=("meal",))])
    assert search(store, "alice", "lunch", None, 0.0) == []
    assert ids(search(store, "alice", "dinner", None, 0.0)) == [b.id]
    assert ids(search(store, "alice", "dinner", None, 0.0, filter=MemoryFilter(tags=("meal",)))) == [b.id]
    np.testing.assert_allclose(store.get_vectors("alice", [b.id])[b.id], vec(0, 1), atol=1e-6)


def test_vectors_are_stored_unit_normalised(store: MemoryStore) -> None:
    a = rec("alice", "three four five")
    seed(store, [a], [vec(3, 4)])
    v = store.get_vectors("alice", [a.id])[a.id]
    assert v.dtype == np.float32
    assert v.shape == (DIM,)
    np.testing.assert_allclose(v, vec(0.6, 0.8), atol=1e-6)


def test_invalid_vectors_are_rejected(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    a = rec("alice", "x marks the spot")
    with pytest.raises(InvalidInputError):
        store.upsert([a], mat(vec(1), vec(0, 1)))  # two vectors for one record
    with pytest.raises(InvalidInputError):
        store.upsert([a], mat(vec(float("nan"))))
    with pytest.raises(InvalidInputError):
        store.upsert([a], mat(vec()))  # zero vector has no direction
    assert store.count() == 0


def test_dimension_mismatch_is_refused(store: MemoryStore) -> None:
    store.bind_embedder("emb-a", DIM)
    store.bind_embedder("emb-a", DIM)  # same dimension: fine
    with pytest.raises(EmbeddingDimensionError) as info:
        store.bind_embedder("emb-b", 2 * DIM)
    message = str(info.value)
    assert str(DIM) in message
    assert str(2 * DIM) in message
    assert "hybrid-memory reembed" in message
    a = rec("alice", "dimension check")
    with pytest.raises(EmbeddingDimensionError):
        store.upsert([a], np.ones((1, 2 * DIM), dtype=np.float32))
    store.upsert([a], mat(vec(1)))
    with pytest.raises(EmbeddingDimensionError):
        search(store, "alice", "dimension", np.ones(2 * DIM, dtype=np.float32), 0.5)
    assert store.dimension == DIM


def test_first_upsert_fixes_the_dimension(store: MemoryStore) -> None:
    store.upsert([rec("alice", "no embedder bound yet")], mat(vec(1)))
    assert store.dimension == DIM
    with pytest.raises(EmbeddingDimensionError):
        store.bind_embedder("other", DIM + 1)


def test_chinese_found_by_two_character_query(store: MemoryStore) -> None:
    apple = rec("li", "我喜欢吃苹果")
    weather = rec("li", "今天天气很好")
    code = rec("li", "I use Python写代码 every day")
    seed(store, [apple, weather, code], [vec(1), vec(0, 1), vec(0, 0, 1)])
    assert ids(search(store, "li", "苹果", None, 0.0)) == [apple.id]
    assert ids(search(store, "li", "代码", None, 0.0)) == [code.id]
    assert ids(search(store, "li", "python", None, 0.0)) == [code.id]
    assert search(store, "li", "香蕉", None, 0.0) == []


async def test_async_twins(store: MemoryStore) -> None:
    a = rec("alice", "async apples")
    b = rec("alice", "async bananas", minutes=1)
    store.bind_embedder("contract-test", DIM)
    await store.aupsert([a, b], mat(vec(1), vec(0, 1)))
    assert await store.acount("alice") == 2
    hits = await store.asearch(SearchRequest(user_id="alice", query="apples", vector=vec(1), alpha=0.5))
    assert ids(hits)[0] == a.id
    assert ids_of(await store.aget("alice", [b.id, a.id])) == [b.id, a.id]
    assert set(await store.aget_vectors("alice", [a.id])) == {a.id}
    await store.atouch("alice", [a.id], T0 + timedelta(days=2))
    assert (await store.aget("alice", [a.id]))[0].access_count == 1
    assert ids_of(await store.alist("alice", limit=1)) == [a.id]
    await store.aupdate([b.evolve(status="archived")])
    assert await store.acount("alice", filter=MemoryFilter()) == 1
    assert await store.adelete("alice", [a.id]) == 1
    assert await store.adelete_user("alice") == 1
    assert await store.acount() == 0
    await store.aclose()
    with pytest.raises(StoreUnavailableError):
        await store.acount()


def test_closed_store_raises(store: MemoryStore) -> None:
    seed(store, [rec("alice", "closing time")], [vec(1)])
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreUnavailableError):
        store.count()
    with pytest.raises(StoreUnavailableError):
        search(store, "alice", "closing", vec(1), 0.5)
    with pytest.raises(StoreUnavailableError):
        store.upsert([rec("alice", "after close")], mat(vec(1)))


def test_context_is_searched_by_keyword_but_never_returned_as_content(store: MemoryStore) -> None:
    answer = rec("alice", "I went to the pottery class on Sunday", context="Bob: how was the weekend?")
    other = rec("alice", "The weekend weather was rainy", minutes=1)
    seed(store, [answer, other], [vec(1), vec(0, 1)])
    (got,) = store.get("alice", [answer.id])
    assert got.context == "Bob: how was the weekend?" and got.content == "I went to the pottery class on Sunday"
    assert got.search_text == "Bob: how was the weekend?\nI went to the pottery class on Sunday"
    # "Bob" is only in the context: BM25 finds the memory by it.
    assert ids(search(store, "alice", "Bob", None, 0.0)) == [answer.id]
    # Updating the context re-indexes it.
    store.update([got.evolve(context="Carol asked about the weekend")])
    assert search(store, "alice", "Bob", None, 0.0) == []
    assert ids(search(store, "alice", "Carol", None, 0.0)) == [answer.id]
    assert store.get("alice", [other.id])[0].context == ""


@pytest.mark.parametrize(("alpha", "with_vector"), [(0.5, True), (1.0, True), (0.0, True), (0.0, False)])
def test_hits_carry_the_stored_vector(store: MemoryStore, alpha: float, with_vector: bool) -> None:
    a = rec("alice", "green tea in the morning")
    b = rec("alice", "green jacket for the rain", minutes=1)
    seed(store, [a, b], [vec(3, 4), vec(0, 0, 2)])
    hits = search(store, "alice", "green", vec(1, 1) if with_vector else None, alpha)
    assert sorted(ids(hits)) == sorted([a.id, b.id])
    stored = store.get_vectors("alice", [a.id, b.id])
    for h in hits:
        assert h.vector is not None
        np.testing.assert_allclose(h.vector, stored[h.record.id], atol=1e-6)
    by_id = {h.record.id: h.vector for h in hits}
    np.testing.assert_allclose(by_id[a.id], vec(0.6, 0.8), atol=1e-6)  # unit-normalised as stored
    np.testing.assert_allclose(by_id[b.id], vec(0, 0, 1), atol=1e-6)
