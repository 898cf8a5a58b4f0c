"""consolidate(): archive by freshness and age, delete, merge near-duplicates, archive fall-back."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.config import LifecycleConfig
from hybrid_memory.errors import InvalidInputError
from hybrid_memory.read.rerank import freshness
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.lifecycle import consolidate

DAY0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def put(store: LocalStore, emb: HashingEmbedder, *recs: MemoryRecord) -> None:
    store.upsert(list(recs), emb.embed_documents([r.content for r in recs]))


def mk(content: str, imp: float, days: float = 0, **kw: object) -> MemoryRecord:
    return MemoryRecord.create(
        user_id="u", content=content, importance=imp, timestamp=DAY0 + timedelta(days=days), **kw
    )


def status(store: LocalStore, r: MemoryRecord) -> str | None:
    got = store.get("u", [r.id])
    return got[0].status if got else None


def test_freshness_thresholds_archive_then_delete() -> None:
    store, emb = LocalStore(":memory:"), HashingEmbedder()
    keep = mk("I am allergic to peanuts", 1.0)
    fade = mk("watched a funny cat video", 0.1)
    put(store, emb, keep, fade)
    # importance 0.1: half-life 7·1.9 = 13.3 days; freshness 0.096 after 45 days
    when = DAY0 + timedelta(days=45)
    assert 0.05 < freshness(fade, when, 7.0) < 0.1
    rep = consolidate(store, "u", now=when)
    assert rep.archived == [fade.id] and rep.deleted == [] and "freshness 0.096" in rep.reasons[fade.id]
    assert (status(store, keep), status(store, fade)) == ("active", "archived")
    rep = consolidate(store, "u", now=DAY0 + timedelta(days=120))
    assert rep.deleted == [fade.id] and status(store, fade) is None and status(store, keep) == "active"


def test_old_unimportant_memories_are_archived_after_90_idle_days() -> None:
    store, emb = LocalStore(":memory:"), HashingEmbedder()
    mid = mk("my gym is on Baker Street", 0.55)
    important = mk("my blood type is O negative", 0.6)
    used = mk("my locker code hint is the cat", 0.55)
    put(store, emb, mid, important, used)
    store.touch("u", [used.id], DAY0 + timedelta(days=60))
    now = DAY0 + timedelta(days=91)
    assert freshness(mid, now, 7.0) > 0.1  # not faded: archived for age alone
    rep = consolidate(store, "u", now=now)
    assert rep.archived == [mid.id] and "idle 91 days" in rep.reasons[mid.id]
    assert status(store, important) == "active" and status(store, used) == "active"


def test_near_duplicates_merge_into_the_most_complete() -> None:
    store, emb = LocalStore(":memory:"), HashingEmbedder()
    short = mk("I like green tea", 0.6, tags=("drink",), provenance=("t1",))
    full = mk("I like green tea!", 0.5, days=1, provenance=("t2",))
    other = mk("I have 2 kids", 0.7)
    different_number = mk("I have 3 kids", 0.7, days=2)
    put(store, emb, short, full, other, different_number)
    store.touch("u", [short.id], DAY0 + timedelta(days=2))
    rep = consolidate(store, "u", now=DAY0 + timedelta(days=3), dedup_threshold=emb.dedup_threshold)
    assert rep.merged == {full.id: [short.id]} and rep.deleted == [short.id]
    kept = store.get("u", [full.id])[0]
    assert kept.importance == 0.6 and kept.access_count == 1 and kept.tags == ("drink",)
    assert set(kept.provenance) == {"t1", "t2"}
    # numbers differ: never merged, even though the texts are close
    assert status(store, other) == "active" and status(store, different_number) == "active"


def test_superseded_memories_are_left_alone() -> None:
    store, emb = LocalStore(":memory:"), HashingEmbedder()
    old = mk("I drink tea", 0.1, status="superseded", superseded_by="x")
    put(store, emb, old)
    rep = consolidate(store, "u", now=DAY0 + timedelta(days=400))
    assert rep.checked == 0 and status(store, old) == "superseded"


def test_config_and_validation() -> None:
    store, emb = LocalStore(":memory:"), HashingEmbedder()
    r = mk("some note about lunch", 0.5)
    put(store, emb, r)
    strict = LifecycleConfig(archive_after_days=1.0, archive_below_importance=0.9)
    assert consolidate(store, "u", now=DAY0 + timedelta(days=2), config=strict).archived == [r.id]
    with pytest.raises(InvalidInputError):
        consolidate(store, "u", now=datetime(2024, 1, 1))
    with pytest.raises(InvalidInputError):
        consolidate(store, "u", now=DAY0, half_life_days=0)


def test_facade_consolidate_and_archive_fallback() -> None:
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
    mem.remember("u", "my old bike was a red Peugeot", importance=0.2, timestamp=DAY0)
    mem.remember("u", "I am allergic to peanuts", importance=1.0, timestamp=DAY0)
    rep = mem.consolidate("u", now=DAY0 + timedelta(days=70))
    [bike] = [r for r in mem.list_memories("u", filter=MemoryFilter(statuses=("archived",)))]
    assert rep.archived == [bike.id]
    later = DAY0 + timedelta(days=71)
    # archived: out of normal recall unless asked for, or when nothing active is relevant
    with_archived = mem.recall("red Peugeot bike", user_id="u", include_archived=True, now=later)
    assert with_archived[0].content == "my old bike was a red Peugeot"
    fallback = mem.recall("red Peugeot bike", user_id="u", now=later)
    assert "my old bike was a red Peugeot" in [h.content for h in fallback]
    mem.close()


async def test_aconsolidate() -> None:
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
    mem.remember("u", "a passing thought about clouds", importance=0.0, timestamp=DAY0)
    rep = await mem.aconsolidate("u", now=DAY0 + timedelta(days=35))
    assert len(rep.deleted) == 1 and mem.store.count("u") == 0
    mem.close()


def test_a_memory_deleted_by_another_process_while_consolidating_is_not_archived_and_the_rest_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other, emb = LocalStore(tmp_path / "m.db"), LocalStore(tmp_path / "m.db"), HashingEmbedder()
    keep = mk("I am allergic to peanuts", 1.0)
    fades = [mk("watched a funny cat video", 0.1), mk("ate a sandwich for lunch", 0.1)]
    put(store, emb, keep, *fades)
    real = store.list

    def list_then_delete(*args: Any, **kwargs: Any) -> list[MemoryRecord]:
        out = real(*args, **kwargs)
        monkeypatch.setattr(store, "list", real)
        other.delete("u", [fades[0].id])  # another process, between the read and the update
        return out

    monkeypatch.setattr(store, "list", list_then_delete)
    rep = consolidate(store, "u", now=DAY0 + timedelta(days=45), dedup_threshold=emb.dedup_threshold)
    assert rep.archived == [fades[1].id] and fades[0].id not in rep.reasons  # the rest is still archived
    assert (status(store, fades[0]), status(store, fades[1]), status(store, keep)) == (None, "archived", "active")


def _between_read_and_write(store: LocalStore, monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Run ``change`` (another process) once, right after consolidate's read of the memories."""
    real = store.list

    def list_then_change(*args: Any, **kwargs: Any) -> list[MemoryRecord]:
        out = real(*args, **kwargs)
        monkeypatch.setattr(store, "list", real)
        change()
        return out

    monkeypatch.setattr(store, "list", list_then_change)


def test_a_memory_restated_while_consolidating_is_neither_deleted_nor_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other, emb = LocalStore(tmp_path / "m.db"), LocalStore(tmp_path / "m.db"), HashingEmbedder()
    fades = [mk("watched a funny cat video", 0.1), mk("ate a sandwich for lunch", 0.1)]
    put(store, emb, *fades)
    later = DAY0 + timedelta(days=120)
    restated = fades[0].evolve(importance=0.9, updated_at=later)  # the writer's bump in another process
    _between_read_and_write(store, monkeypatch, lambda: other.update([restated]))
    rep = consolidate(store, "u", now=later, dedup_threshold=emb.dedup_threshold)
    assert rep.deleted == [fades[1].id] and fades[0].id not in rep.reasons
    assert store.get("u", [fades[0].id]) == [restated]
    assert status(store, fades[1]) is None
    # the next run decides on the new state: restated today with importance 0.9, it stays
    assert consolidate(store, "u", now=later, dedup_threshold=emb.dedup_threshold).changed == 0


def test_an_edit_while_consolidating_is_kept_and_its_merge_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other, emb = LocalStore(tmp_path / "m.db"), LocalStore(tmp_path / "m.db"), HashingEmbedder()
    short = mk("I like green tea", 0.6)
    full = mk("I like green tea!", 0.5, days=1)
    faded = mk("watched a funny cat video", 0.1)
    put(store, emb, short, full, faded)
    edited = full.evolve(tags=("drink",), updated_at=DAY0 + timedelta(days=2))
    _between_read_and_write(store, monkeypatch, lambda: other.update([edited]))
    rep = consolidate(store, "u", now=DAY0 + timedelta(days=45), dedup_threshold=emb.dedup_threshold)
    assert rep.merged == {} and rep.archived == [faded.id]
    assert store.get("u", [full.id, short.id]) == [edited, short]
