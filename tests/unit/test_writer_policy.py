"""MemoryWriter policy: gate, dedup, conflicts, supersede chains, demotion, review queue."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.language_models import FakeListChatModel

from hybrid_memory.config import WriterConfig
from hybrid_memory.errors import InvalidInputError
from hybrid_memory.llm_call import LLMCallPolicy
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.conflict import ConflictJudge, HeuristicConflictJudge, LLMConflictJudge, Verdict
from hybrid_memory.write.writer import MemoryWriter, conflict_similarity_for

DAY1 = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)


def day(n: int) -> datetime:
    return DAY1 + timedelta(days=n - 1)


def rec(content: str, *, when: datetime = DAY1, imp: float = 0.7, user: str = "u", **kw: Any) -> MemoryRecord:
    return MemoryRecord.create(user_id=user, content=content, importance=imp, timestamp=when, **kw)


@pytest.fixture
def store() -> LocalStore:
    return LocalStore(":memory:")


@pytest.fixture
def writer(store: LocalStore) -> MemoryWriter:
    return MemoryWriter(store, HashingEmbedder(dim=256), clock=lambda: day(10))


def active(store: LocalStore, user: str = "u") -> list[str]:
    return [r.content for r in store.list(user, filter=MemoryFilter())]


def test_min_importance_gate_rejects_with_reason(store: LocalStore) -> None:
    w = MemoryWriter(store, HashingEmbedder(), WriterConfig(min_importance=0.3))
    outs = w.write([rec("hello there", imp=0.1), rec("I live in Oslo", imp=0.6)])
    assert [o.action for o in outs] == ["rejected", "added"]
    assert outs[0].reason == "importance 0.10 below min_importance 0.30"
    assert active(store) == ["I live in Oslo"]


def test_exact_and_cosine_duplicates_bump_instead_of_adding(writer: MemoryWriter, store: LocalStore) -> None:
    first = rec("I like green tea", imp=0.5, provenance=("t1",))
    assert writer.write([first])[0].action == "added"
    outs = writer.write(
        [
            rec("I like green tea", imp=0.4, provenance=("t2",)),  # same id
            rec("I like green tea!", imp=0.9, when=day(3), provenance=("t3",)),  # same tokens: cosine 1.0
        ]
    )
    assert [o.action for o in outs] == ["deduplicated", "deduplicated"]
    assert outs[0].reason == "already stored"
    assert outs[1].reason is not None and outs[1].reason.startswith("cosine 1.000 ≥ 0.92")
    assert all(o.related_id == first.id for o in outs)
    [stored] = store.list("u")
    assert stored.access_count == 2
    assert stored.importance == 0.9
    assert stored.updated_at == day(10)
    assert stored.provenance == ("t1", "t2", "t3")


def test_duplicates_inside_one_batch(writer: MemoryWriter, store: LocalStore) -> None:
    outs = writer.write([rec("I like tea"), rec("I like tea"), rec("i LIKE tea.", provenance=("x",))])
    assert [o.action for o in outs] == ["added", "deduplicated", "deduplicated"]
    assert store.count("u") == 1
    assert store.list("u")[0].provenance == ("x",)


def test_changed_number_is_not_a_duplicate_but_supersedes(writer: MemoryWriter, store: LocalStore) -> None:
    old = rec("我每天跑步5公里", when=day(1))
    writer.write([old])
    out = writer.write([rec("我每天跑步10公里", when=day(4))])[0]
    assert out.action == "superseded"
    assert out.related_id == old.id
    assert out.reason is not None and "number changed (5 → 10)" in out.reason
    assert out.record is not None and out.record.supersedes == old.id and out.record.version == 2
    [gone] = store.get("u", [old.id])
    assert gone.status == "superseded" and gone.superseded_by == out.record.id
    assert active(store) == ["我每天跑步10公里"]


def test_negation_flip_supersedes_and_is_reviewable(writer: MemoryWriter, store: LocalStore) -> None:
    writer.write([rec("I eat meat", when=day(1))])
    out = writer.write([rec("I no longer eat meat", when=day(2))])[0]
    assert out.action == "superseded" and "negation flipped" in (out.reason or "")
    [review] = writer.review_queue("u")
    assert (review.action, review.old_content, review.new_content) == (
        "superseded",
        "I eat meat",
        "I no longer eat meat",
    )
    assert writer.review_queue("someone-else") == []


def test_older_statement_is_demoted_to_temporary(writer: MemoryWriter, store: LocalStore) -> None:
    writer.write([rec("I have 3 kids", when=day(5))])
    out = writer.write([rec("I have 2 kids", when=day(1))])[0]  # an import of an older note
    assert out.action == "demoted"
    assert out.record is not None and out.record.category == "temporary" and out.record.status == "active"
    assert "older than" in (out.reason or "")
    assert [r.action for r in writer.review_queue("u")] == ["demoted"]
    assert sorted(active(store)) == ["I have 2 kids", "I have 3 kids"]


def test_less_important_newer_statement_is_demoted(writer: MemoryWriter) -> None:
    writer.write([rec("I have 3 kids", when=day(1), imp=0.9)])
    out = writer.write([rec("I have 4 kids", when=day(2), imp=0.5)])[0]
    assert out.action == "demoted" and "less important than" in (out.reason or "")


def test_tolerance_lets_slightly_less_important_news_supersede(store: LocalStore) -> None:
    w = MemoryWriter(store, HashingEmbedder(), WriterConfig(supersede_tolerance=0.2))
    w.write([rec("I have 3 kids", when=day(1), imp=0.8)])
    assert w.write([rec("I have 4 kids", when=day(2), imp=0.65)])[0].action == "superseded"


def test_two_preferences_in_one_domain_are_only_suspected(writer: MemoryWriter, store: LocalStore) -> None:
    writer.write([rec("I like tea")])
    out = writer.write([rec("I like coffee")])[0]
    assert out.action == "added"
    [r] = writer.review_queue("u")
    assert r.action == "suspected" and "drink" in r.reason
    assert sorted(active(store)) == ["I like coffee", "I like tea"]


def test_conflict_inside_one_batch(writer: MemoryWriter, store: LocalStore) -> None:
    outs = writer.write([rec("I have 2 kids", when=day(1)), rec("I have 3 kids", when=day(2))])
    assert [o.action for o in outs] == ["added", "superseded"]
    assert outs[0].record is not None and outs[0].record.status == "superseded"
    assert active(store) == ["I have 3 kids"]


def test_restating_a_superseded_value_makes_a_new_version(writer: MemoryWriter, store: LocalStore) -> None:
    a = writer.write([rec("I have 2 kids", when=day(1))])[0].record
    b = writer.write([rec("I have 3 kids", when=day(2))])[0].record
    out = writer.write([rec("I have 2 kids", when=day(3))])[0]
    assert a is not None and b is not None and out.record is not None
    assert out.action == "superseded" and out.related_id == b.id
    assert out.record.id != a.id and out.record.version == 3
    chain = {r.id: r for r in store.list("u")}
    assert chain[a.id].superseded_by == b.id and chain[b.id].superseded_by == out.record.id
    assert active(store) == ["I have 2 kids"]


def test_stating_an_archived_memory_again_reactivates_it(writer: MemoryWriter, store: LocalStore) -> None:
    r = writer.write([rec("I live in Oslo")])[0].record
    assert r is not None
    store.update([r.evolve(status="archived")])
    out = writer.write([rec("I live in Oslo", when=day(5))])[0]
    assert out.action == "updated" and out.record is not None and out.record.status == "active"
    assert store.get("u", [r.id])[0].status == "active"


def test_users_are_isolated(writer: MemoryWriter, store: LocalStore) -> None:
    outs = writer.write([rec("I like tea", user="a"), rec("I like tea", user="b"), rec("I like tea!", user="a")])
    assert [o.action for o in outs] == ["added", "added", "deduplicated"]
    assert store.count("a") == 1 and store.count("b") == 1


def test_cache_notices_changes_made_behind_its_back(writer: MemoryWriter, store: LocalStore) -> None:
    r = writer.write([rec("I like tea")])[0].record
    assert r is not None
    store.delete("u", [r.id])
    assert writer.write([rec("I like tea!")])[0].action == "added"


def test_conflict_detection_can_be_disabled(store: LocalStore) -> None:
    w = MemoryWriter(store, HashingEmbedder(), WriterConfig(detect_conflicts=False))
    w.write([rec("I eat meat", when=day(1))])
    assert w.write([rec("I no longer eat meat", when=day(2))])[0].action == "added"


def test_thresholds_follow_the_embedder_and_config(store: LocalStore) -> None:
    w = MemoryWriter(store, HashingEmbedder())
    assert w.dedup_threshold == 0.92 and w.conflict_threshold == pytest.approx(conflict_similarity_for(0.92))
    w2 = MemoryWriter(store, HashingEmbedder(), WriterConfig(dedup_threshold=0.99, conflict_similarity=0.7))
    assert (w2.dedup_threshold, w2.conflict_threshold) == (0.99, 0.7)


def test_vectors_must_match_the_drafts(writer: MemoryWriter) -> None:
    with pytest.raises(InvalidInputError):
        writer.write([rec("a b c")], vectors=np.ones((2, 256), dtype=np.float32))
    with pytest.raises(InvalidInputError):
        writer.write([rec("a b c")], vectors=np.zeros((1, 256), dtype=np.float32))


def test_forget_user_drops_review_queue_and_cache(writer: MemoryWriter) -> None:
    writer.write([rec("I eat meat", when=day(1)), rec("I no longer eat meat", when=day(2))])
    assert writer.review_queue("u")
    writer.store.delete_user("u")  # reviews live with the memories in the store (HybridMemory.forget_user does both)
    writer.forget_user("u")
    assert writer.review_queue("u") == [] and "u" not in writer._neighbours


def test_heuristic_judge_cases() -> None:
    j = HeuristicConflictJudge()
    assert isinstance(j, ConflictJudge)
    cases = {
        ("我现在改喝咖啡了", "我喜欢喝茶"): "contradicts",
        ("I switched to coffee now", "I like tea"): "contradicts",
        ("我不喜欢猫", "我喜欢猫"): "contradicts",
        ("预算不能超过八千元", "预算不能超过五千元"): "contradicts",
        ("我搬到深圳了", "我住在北京"): "contradicts",
        ("我现在改喝咖啡了", "我喜欢吃辣"): "unrelated",
        ("My dog is called Biscuit", "My cat is called Biscuit"): "unrelated",
        ("I like coffee", "I like tea"): "suspected",
    }
    for (new, old), relation in cases.items():
        assert j.judge(new, [old])[0].relation == relation, (new, old)


def verdicts(*rel: str) -> str:
    return json.dumps({"verdicts": [{"index": i, "relation": r, "reason": "llm says so"} for i, r in enumerate(rel)]})


def test_llm_judge_decides_and_falls_back(store: LocalStore) -> None:
    judge = LLMConflictJudge(FakeListChatModel(responses=[verdicts("contradicts")]), method="json_mode")
    w = MemoryWriter(store, HashingEmbedder(), judge=judge)
    w.write([rec("I work at Google", when=day(1))])
    out = w.write([rec("I work at a startup in Berlin", when=day(2))])[0]
    assert out.action == "superseded" and "llm says so; judge: llm" in (out.reason or "")

    class Broken(FakeListChatModel):
        def _call(self, *a: Any, **k: Any) -> str:
            raise TimeoutError("slow")

    fb = LLMConflictJudge(Broken(responses=["x"]), method="json_mode", policy=LLMCallPolicy(max_retries=0))
    [v] = fb.judge("I no longer eat meat", ["I eat meat"])
    assert v.relation == "contradicts" and v.judge == "heuristic" and "LLM judge failed: timed out" in v.reason
    partial = LLMConflictJudge(FakeListChatModel(responses=[verdicts("compatible")]), method="json_mode")
    vs = partial.judge("I have 3 kids", ["I like jazz", "I have 2 kids"])
    assert [v.relation for v in vs] == ["compatible", "contradicts"]
    assert "model gave no verdict" in vs[1].reason


async def test_async_write_and_judge(writer: MemoryWriter) -> None:
    outs = await writer.awrite([rec("I eat meat", when=day(1)), rec("I no longer eat meat", when=day(2))])
    assert [o.action for o in outs] == ["added", "superseded"]
    assert (await HeuristicConflictJudge().ajudge("I have 3 kids", ["I have 2 kids"]))[0].relation == "contradicts"


def test_bulk_batch_dedup_is_one_matrix_product(store: LocalStore) -> None:
    rng = np.random.default_rng(7)
    n, dim = 3000, 64
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    w = MemoryWriter(store, HashingEmbedder(dim=dim), WriterConfig(redact_pii=False, detect_conflicts=False))
    drafts = [rec(f"memory number {i} about topic {i % 97}", imp=0.5) for i in range(n)]
    searches = 0
    real_search = store.search

    def counting_search(req: Any) -> Any:
        nonlocal searches
        searches += 1
        return real_search(req)

    store.search = counting_search  # type: ignore[method-assign]
    for i in range(0, n, 500):
        outs = w.write(drafts[i : i + 500], vectors=vecs[i : i + 500])
        assert all(o.action == "added" for o in outs)
    assert searches == 0
    # the same vectors again: every one is a duplicate, none is added
    again = [rec(f"restated {i}", imp=0.5) for i in range(200)]
    outs = w.write(again, vectors=vecs[:200])
    assert {o.action for o in outs} == {"deduplicated"}
    assert store.count("u") == n


def test_the_review_queue_is_in_the_store_shared_by_processes_and_restarts(tmp_path: Path) -> None:
    """A second writer on the same file (another process, or this one after a restart) sees the same queue."""
    path = tmp_path / "memory.db"
    first = MemoryWriter(LocalStore(path), HashingEmbedder(), clock=lambda: day(10))
    first.write([rec("I eat meat", when=day(1)), rec("I no longer eat meat", when=day(2))])
    queued = first.review_queue("u")
    assert [(r.action, r.old_content, r.new_content) for r in queued] == [
        ("superseded", "I eat meat", "I no longer eat meat")
    ]
    first.store.close()

    second = MemoryWriter(LocalStore(path), HashingEmbedder(), clock=lambda: day(11))
    assert second.review_queue("u") == queued
    assert second.clear_review("u") == 1
    assert second.review_queue("u") == []
    # Clearing the queue changes nothing else about the memories.
    active = [r.content for r in second.store.list("u", filter=MemoryFilter())]
    assert active == ["I no longer eat meat"]


def test_a_failed_write_leaves_no_review_for_the_next(writer: MemoryWriter) -> None:
    class Broken(HeuristicConflictJudge):
        def judge(self, new: str, candidates: Sequence[str]) -> list[Verdict]:
            if any("tea" in c for c in candidates):
                raise RuntimeError("judge crashed after an earlier draft raised a review")
            return super().judge(new, candidates)

    writer.write([rec("I eat meat", when=day(1)), rec("I drink tea", when=day(1))])
    ok_judge = writer.judge
    writer.judge = Broken()
    with pytest.raises(RuntimeError):
        writer.write([rec("I no longer eat meat", when=day(2)), rec("I no longer drink tea", when=day(2))])
    writer.judge = ok_judge
    # The caller retries the same batch: one review per conflict, none left over from the failure.
    writer.write([rec("I no longer eat meat", when=day(2)), rec("I no longer drink tea", when=day(2))])
    assert sorted((r.old_content, r.new_content) for r in writer.review_queue("u")) == [
        ("I drink tea", "I no longer drink tea"),
        ("I eat meat", "I no longer eat meat"),
    ]
