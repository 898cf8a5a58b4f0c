# ruff: noqa: D102 - the test methods are named as sentences; a docstring would repeat them
"""The contract every :class:`~hybrid_memory.stores.base.MemoryStore` backend passes (a pytest suite).

:class:`StoreContract` holds the suite as test methods: memories (upsert, get, list, update,
touch, delete, per-user isolation and BM25 statistics), hybrid search with Weaviate's semantics
(alpha 1.0 = pure vector, 0.0 = pure keyword (BM25); relativeScoreFusion and rankedFusion,
filters, limit/offset, ``max_vector_distance``, hits that carry their stored vector), the
conversation state (turn logs, forget epochs refusing stale writes), the ``a``-prefixed async
twins and the closed state. ``LocalStore`` (file and ``:memory:``) and ``WeaviateStore`` run it
in this repository's ``tests/contract``; a third backend proves itself with the same class.

Setup:
    ``pip install 'hybrid-memory[dev]'`` (the suite needs pytest; importing this module without
    it raises :class:`~hybrid_memory.errors.MissingDependencyError`). Importing it has no side
    effects: it defines the class and a few helpers.

Use:
    Subclass it in a test module (its name must match ``test_*.py``) and give the ``store``
    fixture: a new, empty store, closed after the test. A backend that several processes can
    share also gives ``store_twin``: a second store object on the same data (another connection,
    another client); without it the two-store tests are skipped. ::

        # tests/test_my_store_contract.py
        from collections.abc import Iterator

        import pytest

        from hybrid_memory.testing.store_contract import StoreContract
        from my_package import MyStore


        class TestMyStore(StoreContract):
            @pytest.fixture
            def store(self, tmp_path) -> Iterator[MyStore]:
                s = MyStore(tmp_path / "data")
                yield s
                s.close()

            @pytest.fixture
            def store_twin(self, store, tmp_path) -> Iterator[MyStore]:
                s = MyStore(tmp_path / "data")  # the same data as `store`
                yield s
                s.close()

    then ``pytest tests/test_my_store_contract.py``. Async tests need no pytest plugin: they
    run their coroutine with :func:`asyncio.run`.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from hybrid_memory.errors import (
    EmbedderMismatchError,
    EmbeddingDimensionError,
    InvalidInputError,
    MissingDependencyError,
    NotFoundError,
    StoreUnavailableError,
    UserForgottenError,
)
from hybrid_memory.records import MemoryRecord, Status, Turn
from hybrid_memory.stores.base import AsyncFromSyncStore, MemoryStore
from hybrid_memory.stores.nearest import MeanSource, NeighbourSource
from hybrid_memory.values import MemoryFilter, SearchRequest, SessionLog, StoreHit, Vector

try:
    import pytest
except ImportError as exc:  # pragma: no cover - the dev extra installs pytest
    raise MissingDependencyError("pytest", "dev") from exc

__all__ = ["DIM", "T0", "StoreContract", "mat", "rec", "vec"]

#: Dimension of the suite's vectors.
DIM = 8
#: Creation time of the suite's first record.
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def vec(*components: float) -> Vector:
    """A DIM-d float32 vector from its first components (rest zero)."""
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(components)] = components
    return v


def mat(*vectors: Sequence[float] | Vector) -> Vector:
    """The vectors stacked as a float32 matrix."""
    return np.stack([np.asarray(v, dtype=np.float32) for v in vectors])


def rec(user_id: str, content: str, *, minutes: int = 0, **fields: Any) -> MemoryRecord:
    """A record created ``minutes`` after T0."""
    return MemoryRecord.create(user_id=user_id, content=content, timestamp=T0 + timedelta(minutes=minutes), **fields)


ALL_STATUSES: tuple[Status, ...] = ("active", "superseded", "archived", "deleted")


def ids(hits: list[StoreHit]) -> list[str]:
    return [h.record.id for h in hits]


def search(
    store: MemoryStore, user: str, query: str | None, v: npt.NDArray[np.float32] | None, alpha: float, **kw: object
) -> list[StoreHit]:
    return store.search(SearchRequest(user_id=user, query=query, vector=v, alpha=alpha, **kw))  # type: ignore[arg-type]


def seed(store: MemoryStore, records: list[MemoryRecord], vectors: list[npt.NDArray[np.float32]]) -> None:
    store.bind_embedder("contract-test", DIM)
    store.upsert(records, mat(*vectors))


def ids_of(records: list[MemoryRecord]) -> list[str]:
    return [r.id for r in records]


def turn(user: str, session: str, content: str, *, minute: int = 0, **fields: object) -> Turn:
    return Turn(
        id=str(uuid.uuid4()),
        user_id=user,
        session_id=session,
        role=fields.pop("role", "user"),  # type: ignore[arg-type]
        content=content,
        timestamp=T0 + timedelta(minutes=minute, microseconds=123_456),
        **fields,  # type: ignore[arg-type]
    )


def contents(log: SessionLog) -> list[str]:
    return [t.content for t in log.turns]


def append(store: MemoryStore, *turns: Turn) -> list[Turn]:
    user = turns[0].user_id
    return store.append_turns(list(turns), epoch=store.user_epoch(user))


class StoreContract:
    """The store contract as a pytest suite: subclass it and define the ``store`` fixture.

    See the module docstring for an example. Every test takes ``store`` (a new, empty store);
    the two-store tests also take ``store_twin``.
    """

    #: Whether the backend's ``mark_summarized`` is an atomic compare-and-set (exactly one of
    #: simultaneous marks from one watermark wins). A backend without conditional writes sets
    #: ``False`` and documents its window; the race test then requires at least one winner and
    #: a watermark that is a winner's mark, the same through every store object.
    atomic_marks: bool = True

    @pytest.fixture
    def store(self) -> Iterator[MemoryStore]:
        """A new, empty store, closed after the test: every subclass defines this fixture."""
        pytest.fail(f"{type(self).__name__} must define a `store` fixture yielding an empty store")
        yield  # pragma: no cover - unreachable, makes this a generator fixture

    @pytest.fixture
    def store_twin(self, store: MemoryStore) -> Iterator[MemoryStore]:
        """A second store object on the same data as ``store`` (default: none, the test is skipped)."""
        pytest.skip(f"{type(self).__name__}: no second store object on the same data (no `store_twin` fixture)")
        yield  # pragma: no cover - unreachable

    def test_store_satisfies_protocol(self, store: MemoryStore) -> None:
        assert isinstance(store, MemoryStore)

    def test_empty_store(self, store: MemoryStore) -> None:
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

    def test_idempotent_upsert(self, store: MemoryStore) -> None:
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

    def test_upsert_same_id_twice_in_one_batch_keeps_the_last(self, store: MemoryStore) -> None:
        fixed = str(uuid.uuid4())
        a = rec("alice", "first version", id=fixed)
        b = rec("alice", "second version", id=fixed)
        seed(store, [a, b], [vec(1), vec(0, 1)])
        assert store.count("alice") == 1
        assert store.get("alice", [fixed])[0].content == "second version"
        assert ids(search(store, "alice", "second", None, 0.0)) == [fixed]
        assert search(store, "alice", "first", None, 0.0) == []

    def test_metadata_round_trip(self, store: MemoryStore) -> None:
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

    def test_metadata_must_be_json(self, store: MemoryStore) -> None:
        bad = rec("alice", "has a set in metadata", metadata={"s": {1, 2}})
        store.bind_embedder("contract-test", DIM)
        with pytest.raises(InvalidInputError):
            store.upsert([bad], mat(vec(1)))
        assert store.count() == 0

    def test_delete_of_missing_ids(self, store: MemoryStore) -> None:
        a = rec("alice", "keep me around")
        seed(store, [a], [vec(1)])
        assert store.delete("alice", [str(uuid.uuid4()), str(uuid.uuid4())]) == 0
        assert store.delete("alice", []) == 0
        assert store.count("alice") == 1
        assert store.delete("alice", [a.id, str(uuid.uuid4())]) == 1
        assert store.count("alice") == 0
        assert store.delete("alice", [a.id]) == 0
        assert store.delete_user("nobody") == 0

    def test_per_user_isolation(self, store: MemoryStore) -> None:
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

    def test_same_explicit_id_for_two_users(self, store: MemoryStore) -> None:
        shared = str(uuid.uuid4())
        a = rec("alice", "alice's note", id=shared)
        b = rec("bob", "bob's note", id=shared)
        seed(store, [a, b], [vec(1), vec(0, 1)])
        assert store.get("alice", [shared])[0].content == "alice's note"
        assert store.get("bob", [shared])[0].content == "bob's note"
        assert store.delete("alice", [shared]) == 1
        assert store.get("bob", [shared])[0].content == "bob's note"

    def test_bm25_statistics_are_per_user(self, store: MemoryStore) -> None:
        b = rec("bob", "apollo launch window")
        seed(store, [b], [vec(1)])
        [before] = search(store, "bob", "apollo", None, 0.0)
        crowd = [rec("alice", f"apollo apollo memo number {i}") for i in range(20)]
        store.upsert(crowd, mat(*[vec(1, i) for i in range(20)]))
        [after] = search(store, "bob", "apollo", None, 0.0)
        assert before.keyword_score is not None
        assert after.keyword_score == before.keyword_score

    def test_limit_is_honoured(self, store: MemoryStore) -> None:
        records = [rec("alice", f"note number {i} about gardening", minutes=i) for i in range(30)]
        seed(store, records, [vec(1, i / 30, (i % 7) / 7) for i in range(30)])
        for alpha in (0.0, 0.5, 1.0):
            assert len(search(store, "alice", "gardening", vec(1), alpha, limit=5)) == 5
            assert len(search(store, "alice", "gardening", vec(1), alpha, limit=50)) == 30
        assert len(store.list("alice", limit=7)) == 7
        assert ids_of(store.list("alice", limit=3, offset=2)) == [r.id for r in records[2:5]]

    def test_offset_pages_through_the_ranking(self, store: MemoryStore) -> None:
        records = [rec("alice", f"gardening tip {i}", minutes=i) for i in range(12)]
        seed(store, records, [vec(1, i / 12) for i in range(12)])
        full = ids(search(store, "alice", "gardening", vec(1), 0.5, limit=12))
        page = ids(search(store, "alice", "gardening", vec(1), 0.5, limit=3, offset=4))
        assert page == full[4:7]

    def test_filters(self, store: MemoryStore) -> None:
        m1 = rec("alice", "meeting notes about the budget", minutes=0, category="fact", tags=("work",), session_id="s1")
        m2 = rec(
            "alice",
            "likes spicy food within budget",
            minutes=10,
            category="preference",
            tags=("food",),
            session_id="s1",
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

    def test_filters_do_not_change_bm25_statistics(self, store: MemoryStore) -> None:
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

    def test_scores_are_ordered_descending(self, store: MemoryStore) -> None:
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

    def test_alpha_zero_is_pure_bm25_and_alpha_one_pure_vector(self, store: MemoryStore) -> None:
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

    def test_alpha_above_zero_needs_a_vector(self, store: MemoryStore) -> None:
        seed(store, [rec("alice", "something")], [vec(1)])
        with pytest.raises(InvalidInputError):
            search(store, "alice", "something", None, 0.5)

    def test_hybrid_relative_scores(self, store: MemoryStore) -> None:
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

    def test_ranked_fusion(self, store: MemoryStore) -> None:
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

    def test_max_vector_distance(self, store: MemoryStore) -> None:
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

    def test_touch_bumps_access_count(self, store: MemoryStore) -> None:
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

    def test_update(self, store: MemoryStore) -> None:
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

    def test_update_clears_the_fields_the_new_version_no_longer_has(self, store: MemoryStore) -> None:
        a = rec(
            "alice",
            "the blue bicycle is in the garage",
            session_id="s1",
            tags=("bike",),
            metadata={"room": "garage"},
            provenance=("t1",),
            context="where is my bike?",
            superseded_by="m-new",
            last_accessed_at=T0,
        )
        seed(store, [a], [vec(1)])
        cleared = a.evolve(
            session_id=None,
            tags=(),
            metadata={},
            provenance=(),
            context="",
            superseded_by=None,
            last_accessed_at=None,
        )
        store.update([cleared])
        assert store.get("alice", [a.id]) == [cleared]
        assert search(store, "alice", "bike", None, 0.0) == []  # the keyword index forgot the old context

    def test_update_with_vectors_replaces_them_in_place_and_never_creates(self, store: MemoryStore) -> None:
        a = rec("alice", "the blue bicycle is in the garage")
        b = rec("alice", "lunch at noon")
        seed(store, [a, b], [vec(1), vec(0, 1)])
        moved = a.evolve(content="the red bicycle is in the shed")
        store.update([moved], vectors=mat(vec(0, 0, 3, 4)))
        assert store.get("alice", [a.id]) == [moved]
        np.testing.assert_allclose(store.get_vectors("alice", [a.id])[a.id], vec(0, 0, 0.6, 0.8), atol=1e-6)
        assert ids(search(store, "alice", "unrelated words", vec(0, 0, 0.6, 0.8), 1.0))[0] == a.id
        assert ids(search(store, "alice", "shed", None, 0.0)) == [a.id]

        ghost = rec("alice", "never stored")
        with pytest.raises(NotFoundError):  # an update never creates, vectors or not
            store.update([b.evolve(content="dinner"), ghost], vectors=mat(vec(1), vec(1)))
        assert store.get("alice", [ghost.id]) == [] and store.get("alice", [b.id]) == [b]
        np.testing.assert_allclose(store.get_vectors("alice", [b.id])[b.id], vec(0, 1), atol=1e-6)
        store.delete("alice", [b.id])
        with pytest.raises(NotFoundError):
            store.update([b.evolve(content="dinner")], vectors=mat(vec(1)))
        assert store.get("alice", [b.id]) == []

        with pytest.raises(InvalidInputError):  # one vector per record
            store.update([moved], vectors=mat(vec(1), vec(0, 1)))
        with pytest.raises(InvalidInputError):
            store.update([moved], vectors=np.zeros((1, DIM), dtype=np.float32))
        with pytest.raises(EmbeddingDimensionError):
            store.update([moved], vectors=np.ones((1, DIM + 1), dtype=np.float32))
        assert store.get("alice", [a.id]) == [moved]

    def test_vectors_are_stored_unit_normalised(self, store: MemoryStore) -> None:
        a = rec("alice", "three four five")
        seed(store, [a], [vec(3, 4)])
        v = store.get_vectors("alice", [a.id])[a.id]
        assert v.dtype == np.float32
        assert v.shape == (DIM,)
        np.testing.assert_allclose(v, vec(0.6, 0.8), atol=1e-6)

    def test_invalid_vectors_are_rejected(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        a = rec("alice", "x marks the spot")
        with pytest.raises(InvalidInputError):
            store.upsert([a], mat(vec(1), vec(0, 1)))  # two vectors for one record
        with pytest.raises(InvalidInputError):
            store.upsert([a], mat(vec(float("nan"))))
        with pytest.raises(InvalidInputError):
            store.upsert([a], mat(vec()))  # zero vector has no direction
        assert store.count() == 0

    def test_dimension_mismatch_is_refused(self, store: MemoryStore) -> None:
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

    def test_another_embedder_of_the_same_dimension_is_refused(self, store: MemoryStore) -> None:
        # Two models' vectors are not comparable even at one dimension: a store keeps the first
        # name bound and refuses any other, so nobody searches it with another model's queries.
        store.upsert([rec("alice", "dimension fixed by a write")], mat(vec(1)))  # no name yet
        store.bind_embedder("emb-a", DIM)
        store.bind_embedder("emb-a", DIM)
        with pytest.raises(EmbedderMismatchError) as info:
            store.bind_embedder("emb-b", DIM)
        assert (info.value.stored, info.value.given) == ("emb-a", "emb-b")
        assert "hybrid-memory reembed" in str(info.value)
        assert getattr(store, "embedder_name", "emb-a") == "emb-a"
        store.bind_embedder("emb-a", DIM)  # the recorded one still binds

    def test_first_upsert_fixes_the_dimension(self, store: MemoryStore) -> None:
        store.upsert([rec("alice", "no embedder bound yet")], mat(vec(1)))
        assert store.dimension == DIM
        with pytest.raises(EmbeddingDimensionError):
            store.bind_embedder("other", DIM + 1)

    def test_chinese_found_by_two_character_query(self, store: MemoryStore) -> None:
        apple = rec("li", "我喜欢吃苹果")
        weather = rec("li", "今天天气很好")
        code = rec("li", "I use Python写代码 every day")
        seed(store, [apple, weather, code], [vec(1), vec(0, 1), vec(0, 0, 1)])
        assert ids(search(store, "li", "苹果", None, 0.0)) == [apple.id]
        assert ids(search(store, "li", "代码", None, 0.0)) == [code.id]
        assert ids(search(store, "li", "python", None, 0.0)) == [code.id]
        assert search(store, "li", "香蕉", None, 0.0) == []

    def test_async_twins(self, store: MemoryStore) -> None:
        # The a-twins are not MemoryStore members: AsyncFromSyncStore (or a native override) gives them.
        twins = cast("AsyncFromSyncStore", store)

        async def run() -> None:
            a = rec("alice", "async apples")
            b = rec("alice", "async bananas", minutes=1)
            store.bind_embedder("contract-test", DIM)
            await twins.aupsert([a, b], mat(vec(1), vec(0, 1)))
            assert await twins.acount("alice") == 2
            hits = await twins.asearch(SearchRequest(user_id="alice", query="apples", vector=vec(1), alpha=0.5))
            assert ids(hits)[0] == a.id
            assert ids_of(await twins.aget("alice", [b.id, a.id])) == [b.id, a.id]
            assert set(await twins.aget_vectors("alice", [a.id])) == {a.id}
            await twins.atouch("alice", [a.id], T0 + timedelta(days=2))
            assert (await twins.aget("alice", [a.id]))[0].access_count == 1
            assert ids_of(await twins.alist("alice", limit=1)) == [a.id]
            await twins.aupdate([b.evolve(status="archived")])
            assert await twins.acount("alice", filter=MemoryFilter()) == 1
            assert await twins.adelete("alice", [a.id]) == 1
            assert await twins.adelete_user("alice") == 1
            assert await twins.acount() == 0
            await twins.aclose()
            with pytest.raises(StoreUnavailableError):
                await twins.acount()

        asyncio.run(run())

    def test_closed_store_raises(self, store: MemoryStore) -> None:
        seed(store, [rec("alice", "closing time")], [vec(1)])
        store.close()
        store.close()  # idempotent
        with pytest.raises(StoreUnavailableError):
            store.count()
        with pytest.raises(StoreUnavailableError):
            search(store, "alice", "closing", vec(1), 0.5)
        with pytest.raises(StoreUnavailableError):
            store.upsert([rec("alice", "after close")], mat(vec(1)))

    def test_context_is_searched_by_keyword_but_never_returned_as_content(self, store: MemoryStore) -> None:
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
    def test_hits_carry_the_stored_vector(self, store: MemoryStore, alpha: float, with_vector: bool) -> None:
        a = rec("alice", "green tea in the morning")
        b = rec("alice", "green jacket for the rain", minutes=1)
        seed(store, [a, b], [vec(3, 4), vec(0, 0, 2)])
        hits = search(store, "alice", "green", vec(1, 1) if with_vector else None, alpha)
        assert sorted(ids(hits)) == sorted([a.id, b.id])
        stored = store.get_vectors("alice", [a.id, b.id])
        for h in hits:
            assert h.vector is not None
            np.testing.assert_allclose(h.vector, stored[h.record.id], atol=1e-6)
        by_id = {h.record.id: h.vector for h in hits if h.vector is not None}
        np.testing.assert_allclose(by_id[a.id], vec(0.6, 0.8), atol=1e-6)  # unit-normalised as stored
        np.testing.assert_allclose(by_id[b.id], vec(0, 0, 1), atol=1e-6)

    def test_neighbours_are_the_nearest_active_memories_of_that_user(self, store: MemoryStore) -> None:
        # Optional capability (NeighbourSource): the writer's dedup check served by the store's own index.
        if not isinstance(store, NeighbourSource):
            pytest.skip(f"{type(store).__name__} has no neighbours(); the writer keeps its own index")
        near = rec("alice", "green tea every morning", category="preference")
        nearer = rec("alice", "green tea in the morning", minutes=1)
        far = rec("alice", "a jacket for the rain", minutes=2)
        old = rec("alice", "black tea every morning", minutes=3)
        bobs = rec("bob", "green tea every morning")
        seed(store, [near, nearer, far, old, bobs], [vec(0.8, 0.6), vec(0.9, 0.4), vec(0, 0, 1), vec(1), vec(1)])
        store.update([old.evolve(status="superseded")])
        queries = mat(vec(1), vec(0, 0, 0, 1))
        got = store.neighbours("alice", queries, threshold=0.5, top=5)
        assert len(got) == 2 and got[1] == []  # one list per row; nothing near the second
        assert [(i, c) for i, _, c in got[0]] == [(nearer.id, "fact"), (near.id, "preference")]
        cosines = [sim for _, sim, _ in got[0]]
        expected = [0.9 / float(np.hypot(0.9, 0.4)), 0.8]
        np.testing.assert_allclose(cosines, expected, atol=1e-5)
        assert [i for i, _, _ in store.neighbours("alice", queries[:1], threshold=0.5, top=1)[0]] == [nearer.id]
        assert store.neighbours("alice", queries[:1], threshold=0.99, top=5) == [[]]
        assert store.neighbours("carol", queries[:1], threshold=0.0, top=5) == [[]]  # no tenant, no error

    def test_mean_vector_is_the_mean_of_that_users_active_vectors(self, store: MemoryStore) -> None:
        # Optional capability (MeanSource): query centring (``retrieval.centre_weight``).
        if not isinstance(store, MeanSource):
            pytest.skip(f"{type(store).__name__} has no mean_vector(); query centring is refused for it")
        a = rec("alice", "green tea every morning")
        b = rec("alice", "a jacket for the rain", minutes=1)
        old = rec("alice", "black tea every morning", minutes=2)
        bobs = rec("bob", "green tea every morning")
        seed(store, [a, b, old, bobs], [vec(3, 4), vec(0, 0, 2), vec(1), vec(0, 0, 0, 1)])
        assert store.mean_vector("carol") is None  # no memories (no tenant), no error
        store.update([old.evolve(status="archived")])
        got = store.mean_vector("alice")
        assert got is not None
        np.testing.assert_allclose(got, vec(0.3, 0.4, 0.5), atol=1e-6)  # unit vectors, archived one left out
        store.update([a.evolve(status="superseded"), b.evolve(status="archived")])
        assert store.mean_vector("alice") is None  # nothing active
        assert store.mean_vector("bob") is not None
        store.delete_user("bob")
        assert store.mean_vector("bob") is None  # a forgotten user's mean is gone at once

    def test_epoch_starts_at_zero_and_moves_on_every_delete_user(self, store: MemoryStore) -> None:
        assert store.user_epoch("alice") == 0
        assert store.delete_user("alice") == 0
        first = store.user_epoch("alice")
        assert first != 0
        store.delete_user("alice")
        assert store.user_epoch("alice") not in (0, first)
        assert store.user_epoch("bob") == 0  # per user

    def test_writes_with_the_current_epoch_are_accepted(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        store.delete_user("alice")
        epoch = store.user_epoch("alice")
        r = rec("alice", "written after the forget")
        store.upsert([r], mat(vec(1)), epochs={"alice": epoch})
        store.update([r.evolve(content="edited after the forget")], epochs={"alice": epoch})
        [stored] = store.append_turns([turn("alice", "s1", "hello again")], epoch=epoch)
        assert store.get("alice", [r.id])[0].content == "edited after the forget"
        assert contents(store.load_session("alice", "s1")) == ["hello again"]
        assert stored.seq > 0

    def test_a_stale_epoch_refuses_upsert_update_and_append_and_writes_nothing(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        stale = store.user_epoch("alice")
        kept = rec("alice", "the cat sleeps on the sofa")
        store.upsert([kept], mat(vec(1)), epochs={"alice": stale})
        store.delete_user("alice")
        fresh = rec("alice", "written after the forget", minutes=1)
        store.upsert([fresh], mat(vec(0, 1)))  # no epochs: new data is accepted

        with pytest.raises(UserForgottenError) as info:
            store.upsert([rec("alice", "buffered before the forget")], mat(vec(1)), epochs={"alice": stale})
        assert info.value.user_id == "alice"
        with pytest.raises(UserForgottenError):
            store.update([fresh.evolve(content="an edit from before the forget")], epochs={"alice": stale})
        with pytest.raises(UserForgottenError):
            store.append_turns([turn("alice", "s1", "said before the forget")], epoch=stale)
        # A whole multi-user write is refused when one of its users was forgotten.
        with pytest.raises(UserForgottenError):
            store.upsert(
                [rec("bob", "bob's memory"), rec("alice", "alice's")],
                mat(vec(1), vec(0, 1)),
                epochs={"bob": store.user_epoch("bob"), "alice": stale},
            )

        assert store.list("alice") == [fresh]
        assert store.count("bob") == 0
        log = store.load_session("alice", "s1")
        assert (log.turns, log.count) == ((), 0)

    def test_update_reports_a_forget_before_a_missing_id(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        r = rec("alice", "forgotten soon")
        stale = store.user_epoch("alice")
        store.upsert([r], mat(vec(1)), epochs={"alice": stale})
        store.delete_user("alice")
        with pytest.raises(UserForgottenError):  # not NotFoundError about an id the caller had
            store.update([r.evolve(content="edited")], epochs={"alice": stale})
        with pytest.raises(NotFoundError):
            store.update([r.evolve(content="edited")], epochs={"alice": store.user_epoch("alice")})
        assert store.count("alice") == 0

    def test_delete_user_removes_turns_too(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        store.upsert([rec("alice", "a memory")], mat(vec(1)))
        append(store, turn("alice", "s1", "one"), turn("alice", "s2", "two"))
        append(store, turn("bob", "s1", "bob's turn"))
        assert store.delete_user("alice") == 1
        for session in ("s1", "s2"):
            log = store.load_session("alice", session)
            assert (log.turns, log.count, log.epoch) == ((), 0, store.user_epoch("alice"))
        assert contents(store.load_session("bob", "s1")) == ["bob's turn"]

    def test_append_returns_seqs_and_load_round_trips_every_field(self, store: MemoryStore) -> None:
        first = turn("alice", "s1", "I live in Berlin.", importance=0.9, key_frame=True, tokens=5, scoring_note="why")
        second = turn("alice", "s1", "Noted!", minute=1, role="assistant", tokens=2)
        stored = append(store, first, second)
        assert [t.id for t in stored] == [first.id, second.id]
        assert 0 < stored[0].seq < stored[1].seq
        assert [t.model_copy(update={"seq": 0}) for t in stored] == [first, second]
        log = store.load_session("alice", "s1")
        assert log.turns == tuple(stored)  # every field, the timestamp to the microsecond
        assert (log.count, log.epoch) == (2, 0)

    def test_a_turn_id_the_log_holds_is_not_appended_again(self, store: MemoryStore) -> None:
        # A retried append (a worker that died after writing, a framework step run again) adds nothing.
        first = turn("alice", "s1", "I live in Berlin.")
        [stored] = append(store, first)
        retry = first.model_copy(update={"timestamp": first.timestamp + timedelta(minutes=5)})
        assert append(store, retry) == [stored]  # the stored turn, as stored
        assert append(store, first.model_copy(update={"session_id": "s2"})) == [stored]  # not moved
        assert store.load_session("alice", "s1").turns == (stored,)
        assert store.load_session("alice", "s2").count == 0
        assert store.load_session("bob", "s1").count == 0
        assert append(store, first.model_copy(update={"user_id": "bob"}))[0].user_id == "bob"  # ids are per user
        # once deleted from the log, the store appends the id again (add_turn checks retired_turns first)
        assert store.delete_turns("alice", [first.id]) == 1
        [back] = append(store, retry)
        assert back.model_copy(update={"seq": 0}) == retry and back.seq > stored.seq

    def test_turns_that_leave_their_logs_are_retired(self, store: MemoryStore) -> None:
        # add_turn reads this so a late retry brings back no forgotten turn.
        a, b, c = (turn("alice", "s1", text) for text in ("one", "two", "three"))
        d = turn("alice", "s2", "four")
        append(store, a, b, c, d)

        def retired(*ids: str, user: str = "alice") -> set[str]:
            return store.retired_turns(user, list(ids), epoch=store.user_epoch(user))

        assert retired(a.id, b.id, "never-stored") == set()
        assert store.delete_turns("alice", [a.id, "never-stored"]) == 1
        assert retired(a.id, b.id, "never-stored") == {a.id, "never-stored"}  # forgotten, found or not
        assert retired(a.id, user="bob") == set()  # per user
        assert store.delete_session("alice", "s1") == 2  # ended: nothing forgotten
        assert retired(a.id, b.id, c.id, d.id) == {a.id}
        store.delete_user("alice")  # the ended turns, and d still in its log, are forgotten with the user
        assert retired(a.id, b.id, c.id, d.id) == {a.id, b.id, c.id, d.id}
        assert store.retired_turns("alice", [b.id, d.id], epoch=0) == {d.id}  # b ended under epoch 0 itself
        assert retired() == set()
        with pytest.raises(InvalidInputError):
            store.retired_turns("alice", "not-a-list", epoch=0)
        with pytest.raises(InvalidInputError):
            store.retired_turns("alice", [a.id], epoch=-1)

    def test_seqs_increase_in_append_order_and_after_seq_reads_the_rest(self, store: MemoryStore) -> None:
        stored: list[Turn] = []
        for i in range(12):  # one at a time, faster than any clock tick
            stored += append(store, turn("alice", "s1", f"turn {i}"))
        stored += append(store, *(turn("alice", "s1", f"batch {i}") for i in range(3)))
        seqs = [t.seq for t in stored]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        log = store.load_session("alice", "s1")
        assert contents(log) == [f"turn {i}" for i in range(12)] + [f"batch {i}" for i in range(3)]
        tail = store.load_session("alice", "s1", after_seq=stored[9].seq)
        assert contents(tail) == ["turn 10", "turn 11", "batch 0", "batch 1", "batch 2"]
        assert tail.count == 15
        after_all = store.load_session("alice", "s1", after_seq=stored[-1].seq)
        assert (after_all.turns, after_all.count) == ((), 15)

    def test_turn_logs_are_per_user_and_per_session(self, store: MemoryStore) -> None:
        append(store, turn("alice", "s1", "alice s1"), turn("alice", "s2", "alice s2"))
        append(store, turn("bob", "s1", "bob s1"))
        assert contents(store.load_session("alice", "s1")) == ["alice s1"]
        assert contents(store.load_session("alice", "s2")) == ["alice s2"]
        assert contents(store.load_session("bob", "s1")) == ["bob s1"]
        assert store.load_session("bob", "s2").count == 0
        assert store.load_session("carol", "s1") == SessionLog(turns=(), count=0, epoch=0)
        assert store.count("alice") == 0  # turn logs are not memories

    def test_delete_session_deletes_one_log(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        store.upsert([rec("alice", "a memory of s1", session_id="s1")], mat(vec(1)))
        append(store, *(turn("alice", "s1", f"s1 turn {i}") for i in range(3)))
        append(store, turn("alice", "s2", "s2 turn"), turn("alice", "s2", "s2 again"))
        append(store, turn("bob", "s1", "bob's s1"))
        assert store.delete_session("alice", "s1") == 3
        assert store.load_session("alice", "s1") == SessionLog(turns=(), count=0, epoch=0)
        assert store.load_session("alice", "s2").count == 2
        assert contents(store.load_session("bob", "s1")) == ["bob's s1"]
        assert store.count("alice") == 1  # long-term memories stay
        assert store.delete_session("alice", "s1") == 0
        assert store.delete_session("nobody", "s9") == 0
        # The session can be continued: its new turns sort after nothing old.
        append(store, turn("alice", "s1", "a fresh start"))
        assert contents(store.load_session("alice", "s1")) == ["a fresh start"]

    def test_delete_turns_takes_turns_out_of_their_logs_and_nothing_else(self, store: MemoryStore) -> None:
        store.bind_embedder("contract-test", DIM)
        store.upsert([rec("alice", "a memory of s1", session_id="s1")], mat(vec(1)))
        s1 = append(store, *(turn("alice", "s1", f"s1 turn {i}") for i in range(4)))
        [s2] = append(store, turn("alice", "s2", "s2 turn"))
        [bobs] = append(store, turn("bob", "s1", "bob's s1"))
        assert store.mark_extracted("alice", "s1", s1[3].seq, epoch=0) is True
        assert store.mark_summarized("alice", "s1", s1[2].seq, expected=0, epoch=0) is True
        # Turns of two sessions at once; a missing id and another user's turn id are not deleted.
        assert store.delete_turns("alice", [s1[1].id, s2.id, "no-such-turn", bobs.id]) == 2
        log = store.load_session("alice", "s1")
        assert contents(log) == ["s1 turn 0", "s1 turn 2", "s1 turn 3"] and log.count == 3
        assert contents(store.load_session("alice", "s1", after_seq=s1[0].seq)) == ["s1 turn 2", "s1 turn 3"]
        assert store.load_session("alice", "s2") == SessionLog(turns=(), count=0, epoch=0)
        assert contents(store.load_session("bob", "s1")) == ["bob's s1"]
        assert (store.extracted_upto("alice", "s1"), store.summarized_upto("alice", "s1")) == (s1[3].seq, s1[2].seq)
        assert store.count("alice") == 1  # long-term memories stay
        assert store.delete_turns("alice", [s1[1].id]) == 0  # deleted already
        assert (store.delete_turns("alice", []), store.delete_turns("nobody", ["x"])) == (0, 0)
        [later] = append(store, turn("alice", "s1", "the session goes on"))
        assert later.seq > s1[3].seq and store.load_session("alice", "s1").count == 4
        with pytest.raises(InvalidInputError):
            store.delete_turns("alice", s1[0].id)  # a single str, not a list of ids
        with pytest.raises(InvalidInputError):
            store.delete_turns("", [s1[0].id])

    def test_the_extraction_watermark_only_moves_forward_per_session(self, store: MemoryStore) -> None:
        stored = append(store, *(turn("alice", "s1", f"turn {i}") for i in range(4)))
        append(store, turn("alice", "s2", "other session"))
        assert store.extracted_upto("alice", "s1") == 0
        assert store.mark_extracted("alice", "s1", stored[1].seq, epoch=0) is True
        assert store.extracted_upto("alice", "s1") == stored[1].seq
        assert store.mark_extracted("alice", "s1", stored[0].seq, epoch=0) is False  # never back
        assert store.mark_extracted("alice", "s1", stored[1].seq, epoch=0) is False  # a second mark of one batch
        assert store.extracted_upto("alice", "s1") == stored[1].seq
        assert store.mark_extracted("alice", "s1", stored[3].seq, epoch=0) is True
        assert store.extracted_upto("alice", "s1") == stored[3].seq
        assert (store.extracted_upto("alice", "s2"), store.extracted_upto("bob", "s1")) == (0, 0)
        assert contents(store.load_session("alice", "s1", after_seq=stored[3].seq)) == []
        assert store.load_session("alice", "s1").count == 4  # the watermark is not a turn
        with pytest.raises(InvalidInputError):
            store.mark_extracted("alice", "s1", 0, epoch=0)

    def test_the_watermark_goes_with_its_session_and_its_user(self, store: MemoryStore) -> None:
        [a1] = append(store, turn("alice", "s1", "one"))
        [a2] = append(store, turn("alice", "s2", "two"))
        store.mark_extracted("alice", "s1", a1.seq, epoch=0)
        store.mark_extracted("alice", "s2", a2.seq, epoch=0)
        assert store.delete_session("alice", "s1") == 1  # the watermark is not counted as a turn
        assert (store.extracted_upto("alice", "s1"), store.extracted_upto("alice", "s2")) == (0, a2.seq)
        store.delete_user("alice")
        assert store.extracted_upto("alice", "s2") == 0
        with pytest.raises(UserForgottenError):  # a batch extracted before the forget marks nothing
            store.mark_extracted("alice", "s2", a2.seq, epoch=0)
        assert store.extracted_upto("alice", "s2") == 0
        epoch = store.user_epoch("alice")
        [fresh] = store.append_turns([turn("alice", "s2", "after the forget")], epoch=epoch)
        assert store.mark_extracted("alice", "s2", fresh.seq, epoch=epoch) is True
        assert store.extracted_upto("alice", "s2") == fresh.seq

    def test_the_summary_watermark_moves_by_compare_and_set(self, store: MemoryStore) -> None:
        stored = append(store, *(turn("alice", "s1", f"turn {i}") for i in range(4)))
        append(store, turn("alice", "s2", "other session"))
        first, third, last = stored[0].seq, stored[2].seq, stored[3].seq
        assert store.summarized_upto("alice", "s1") == 0
        assert store.mark_summarized("alice", "s1", third, expected=0, epoch=0) is True
        assert store.summarized_upto("alice", "s1") == third
        # A process that read 0 too and summarised from there loses: the watermark is no longer 0.
        assert store.mark_summarized("alice", "s1", last, expected=0, epoch=0) is False
        assert store.mark_summarized("alice", "s1", third + 1, expected=first, epoch=0) is False
        assert store.summarized_upto("alice", "s1") == third
        assert store.mark_summarized("alice", "s1", last, expected=third, epoch=0) is True
        assert store.summarized_upto("alice", "s1") == last
        assert store.mark_summarized("alice", "s1", last + 1, expected=third, epoch=0) is False  # a stale read
        assert (store.summarized_upto("alice", "s2"), store.summarized_upto("bob", "s1")) == (0, 0)
        assert store.extracted_upto("alice", "s1") == 0  # the two watermarks are separate
        assert store.load_session("alice", "s1").count == 4  # the watermark is not a turn
        for bad in ((last, last), (last, last - 1), (-1, last)):
            with pytest.raises(InvalidInputError):
                store.mark_summarized("alice", "s1", bad[1], expected=bad[0], epoch=0)

    def test_the_summary_watermark_outlives_its_log_but_not_its_user(self, store: MemoryStore) -> None:
        [a1] = append(store, turn("alice", "s1", "one"))
        assert store.mark_summarized("alice", "s1", a1.seq, expected=0, epoch=0) is True
        assert store.delete_session("alice", "s1") == 1  # the watermark is not counted as a turn
        assert store.summarized_upto("alice", "s1") == a1.seq  # end_session: the session may go on
        [a2] = append(store, turn("alice", "s1", "the session goes on"))
        assert a2.seq > a1.seq
        assert contents(store.load_session("alice", "s1", after_seq=store.summarized_upto("alice", "s1"))) == [
            "the session goes on"
        ]
        store.delete_user("alice")
        assert store.summarized_upto("alice", "s1") == 0
        with pytest.raises(UserForgottenError):  # a summary made before the forget marks nothing
            store.mark_summarized("alice", "s1", a2.seq, expected=a1.seq, epoch=0)
        with pytest.raises(UserForgottenError):
            store.mark_summarized("alice", "s1", a2.seq, expected=0, epoch=0)
        assert store.summarized_upto("alice", "s1") == 0
        epoch = store.user_epoch("alice")
        [fresh] = store.append_turns([turn("alice", "s1", "after the forget")], epoch=epoch)
        assert store.mark_summarized("alice", "s1", fresh.seq, expected=0, epoch=epoch) is True
        assert store.summarized_upto("alice", "s1") == fresh.seq

    def test_append_and_load_check_their_input(self, store: MemoryStore) -> None:
        assert store.append_turns([], epoch=0) == []
        with pytest.raises(InvalidInputError):
            store.append_turns([turn("alice", "s1", "a"), turn("bob", "s1", "b")], epoch=0)
        with pytest.raises(InvalidInputError):
            store.load_session("alice", "s1", after_seq=-1)
        with pytest.raises(InvalidInputError):
            store.load_session("alice", "")

    def test_async_twins_of_the_turn_log(self, store: MemoryStore) -> None:
        # The a-twins are not MemoryStore members: AsyncFromSyncStore (or a native override) gives them.
        twins = cast("AsyncFromSyncStore", store)

        async def run() -> None:
            store.bind_embedder("contract-test", DIM)
            assert await twins.auser_epoch("alice") == 0
            stored = await twins.aappend_turns([turn("alice", "s1", "async turn")], epoch=0)
            log = await twins.aload_session("alice", "s1")
            assert log.turns == tuple(stored) and log.count == 1
            assert (await twins.aload_session("alice", "s1", after_seq=stored[0].seq)).turns == ()
            r = rec("alice", "async memory")
            await twins.aupsert([r], mat(vec(1)), epochs={"alice": 0})
            await twins.aupdate([r.evolve(content="async edit")], epochs={"alice": 0})
            assert await twins.amark_extracted("alice", "s1", stored[0].seq, epoch=0) is True
            assert await twins.aextracted_upto("alice", "s1") == stored[0].seq
            assert await twins.amark_summarized("alice", "s1", stored[0].seq, expected=0, epoch=0) is True
            assert await twins.asummarized_upto("alice", "s1") == stored[0].seq
            [gone] = await twins.aappend_turns([turn("alice", "s1", "async turn, forgotten")], epoch=0)
            assert await twins.adelete_turns("alice", [gone.id]) == 1
            assert await twins.aretired_turns("alice", [gone.id, stored[0].id], epoch=0) == {gone.id}
            assert await twins.adelete_session("alice", "s1") == 1
            assert await twins.adelete_user("alice") == 1
            with pytest.raises(UserForgottenError):
                await twins.aappend_turns([turn("alice", "s1", "too late")], epoch=0)
            with pytest.raises(UserForgottenError):
                await twins.aupsert([rec("alice", "too late")], mat(vec(1)), epochs={"alice": 0})
            with pytest.raises(UserForgottenError):
                await twins.aupdate([r], epochs={"alice": 0})
            assert await twins.auser_epoch("alice") != 0

        asyncio.run(run())

    def test_two_stores_share_turn_logs_and_forgets(self, store: MemoryStore, store_twin: MemoryStore) -> None:
        a, b = store, store_twin
        a.bind_embedder("contract-test", DIM)
        b.bind_embedder("contract-test", DIM)
        # Turn 1 through A, turn 2 through B (which read A's turn first), and so on: one log.
        for i in range(6):
            writer = a if i % 2 == 0 else b
            writer.load_session("alice", "s1")
            append(writer, turn("alice", "s1", f"turn {i}"))
        log_a, log_b = a.load_session("alice", "s1"), b.load_session("alice", "s1")
        assert log_a == log_b
        assert contents(log_a) == [f"turn {i}" for i in range(6)]
        seqs = [t.seq for t in log_a.turns]
        assert seqs == sorted(seqs) and len(set(seqs)) == 6
        assert contents(b.load_session("alice", "s1", after_seq=seqs[3])) == ["turn 4", "turn 5"]

        # A read the epoch (as a buffered turn or a background job would), then B forgets the user.
        stale = a.user_epoch("alice")
        memory = rec("alice", "said before the forget")
        a.upsert([memory], mat(vec(1)), epochs={"alice": stale})
        b.delete_user("alice")
        assert a.user_epoch("alice") == b.user_epoch("alice") != stale
        with pytest.raises(UserForgottenError):
            a.append_turns([turn("alice", "s1", "buffered before the forget")], epoch=stale)
        with pytest.raises(UserForgottenError):
            a.upsert([rec("alice", "extracted before the forget")], mat(vec(1)), epochs={"alice": stale})
        with pytest.raises(UserForgottenError):
            a.update([memory.evolve(content="summarised before the forget")], epochs={"alice": stale})
        for s in (a, b):
            assert s.count("alice") == 0
            assert s.load_session("alice", "s1").turns == ()

        # New data after the forget is accepted through either store.
        append(a, turn("alice", "s1", "hello again"))
        assert contents(b.load_session("alice", "s1")) == ["hello again"]

    def test_of_marks_racing_from_one_summary_watermark_one_wins(
        self, store: MemoryStore, store_twin: MemoryStore
    ) -> None:
        # Four summarisers (two per store object) read the same watermark and mark their ranges at once.
        stored = append(store, *(turn("alice", "s1", f"turn {i}") for i in range(8)))
        assert store.mark_summarized("alice", "s1", stored[1].seq, expected=0, epoch=0) is True
        start = threading.Barrier(4)

        def mark(s: MemoryStore, seq: int) -> bool:
            start.wait(timeout=30)
            return s.mark_summarized("alice", "s1", seq, expected=stored[1].seq, epoch=0)

        ends = [stored[i].seq for i in (4, 5, 6, 7)]
        with ThreadPoolExecutor(4) as pool:
            won = list(pool.map(mark, [store, store_twin, store, store_twin], ends))
        winner = store.summarized_upto("alice", "s1")
        assert store_twin.summarized_upto("alice", "s1") == winner
        assert winner in [e for e, w in zip(ends, won, strict=True) if w]  # the mark of a process told it won
        if self.atomic_marks:
            assert won.count(True) == 1, won
        else:  # the backend documents a window in which two simultaneous marks both win
            assert won.count(True) >= 1, won
        # The next move starts from the winner's mark, through either store.
        race = f"ends {ends}, won {won}, winner {winner}"
        assert store_twin.mark_summarized("alice", "s1", winner + 1, expected=winner, epoch=0) is True, race
        assert (after := store.summarized_upto("alice", "s1")) == winner + 1, f"{race}, then read {after}"
