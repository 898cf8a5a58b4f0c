"""Maintenance writes racing a ``forget_user`` of another process: the forget wins, typed.

``consolidate`` and ``clear_review`` read a user's memories, then write changed versions back.
A forget from a second store object on the same data (another process: its own connection, or
its own Weaviate client) lands between those steps through a hook on the first store, so the
race is deterministic. The call must raise :class:`~hybrid_memory.errors.UserForgottenError`
(never a ``NotFoundError`` about an id the caller never passed, never a report of work that the
forget undid), and nothing of the user may be left. LocalStore on a file and a real Weaviate
server (``tests/weaviate_fixtures.py``). Within one process, ``consolidate`` also holds the
user's write lock, so no write of the same process lands between its read and its merge.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.errors import UserForgottenError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter, MemoryStore
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.writer import LOCK_STRIPES, REVIEW_KEY, MemoryWriter

_EVERY = MemoryFilter(statuses=("active", "superseded", "archived"))
_HIKE = "I love hiking in the Alps every summer with my dog"


def _after(store: MemoryStore, name: str, hook: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``hook`` once, right after ``store.<name>`` returns."""
    real = getattr(store, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        monkeypatch.setattr(store, name, real)
        hook()
        return out

    monkeypatch.setattr(store, name, hooked)


def _before(store: MemoryStore, name: str, hook: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``hook`` once, right before ``store.<name>`` is called."""
    real = getattr(store, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(store, name, real)
        hook()
        return real(*args, **kwargs)

    monkeypatch.setattr(store, name, hooked)


def _app_with_a_duplicate(store: MemoryStore) -> HybridMemory:
    """A memory over ``store`` whose user ``u`` has two near-duplicates (consolidate merges them)."""
    mem = HybridMemory(store, embedder=HashingEmbedder())
    first = mem.remember("u", _HIKE, importance=0.9).record
    assert first is not None
    mem.put(first.evolve(id="dup-1", content=_HIKE + "!"))
    mem.remember("v", "My sister lives in Lisbon", importance=0.9)  # another user: untouched
    return mem


def _nothing_of_u_left(store: MemoryStore) -> None:
    assert store.list("u", filter=_EVERY) == []
    assert store.count("u") == 0
    assert [r.content for r in store.list("v", filter=_EVERY)] == ["My sister lives in Lisbon"]


@pytest.mark.parametrize("step", ["after the read", "after the vectors", "before the delete"])
def test_consolidate_racing_a_forget_of_another_process_raises_user_forgotten(
    stores: tuple[MemoryStore, MemoryStore], step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    app = _app_with_a_duplicate(app_store)
    other = HybridMemory(other_store, embedder=HashingEmbedder())
    forgotten: list[int] = []

    def forget() -> None:
        forgotten.append(int(other.forget_user("u")))

    if step == "after the read":  # the vectors are gone: nothing to merge, but the report would lie
        _after(app_store, "list", forget, monkeypatch)
    elif step == "after the vectors":  # the merge's update is refused
        _after(app_store, "get_vectors", forget, monkeypatch)
    else:  # the update landed; the forget deletes everything before consolidate deletes the duplicate
        _before(app_store, "delete", forget, monkeypatch)
    with pytest.raises(UserForgottenError) as err:
        app.consolidate("u")
    assert err.value.user_id == "u" and forgotten == [2]
    _nothing_of_u_left(app_store)
    _nothing_of_u_left(other_store)
    # After the forget the user is new: the next consolidation works on what is there (nothing).
    assert app.consolidate("u").checked == 0


def test_consolidate_without_a_race_still_merges(stores: tuple[MemoryStore, MemoryStore]) -> None:
    app_store, _ = stores
    app = _app_with_a_duplicate(app_store)
    report = app.consolidate("u")
    assert report.merged and [r.content for r in app_store.list("u", filter=_EVERY)] == [_HIKE + "!"]


def _writer_with_reviews(store: MemoryStore, users: Sequence[str], pairs: int) -> MemoryWriter:
    """A writer over ``store`` whose ``users`` each superseded ``pairs`` memories (one review each)."""

    def day(d: int) -> datetime:
        return datetime(2024, 1, d, tzinfo=timezone.utc)

    writer = MemoryWriter(store, HashingEmbedder(), clock=lambda: day(10))
    changes = [("I eat meat", "I no longer eat meat"), ("I live in Paris", "I no longer live in Paris")]
    for user in users:
        for pair in changes[:pairs]:
            for d, text in enumerate(pair, start=1):
                writer.write([MemoryRecord.create(user_id=user, content=text, importance=0.8, timestamp=day(d))])
    return writer


def test_clear_review_racing_a_forget_of_another_process_raises_user_forgotten(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    writer = _writer_with_reviews(app_store, ["u"], 1)
    assert [r.action for r in writer.review_queue("u")] == ["superseded"]
    _after(app_store, "list", lambda: other_store.delete_user("u"), monkeypatch)
    with pytest.raises(UserForgottenError):
        writer.clear_review("u")
    assert app_store.list("u", filter=_EVERY) == [] and other_store.list("u", filter=_EVERY) == []


def test_clear_review_racing_a_delete_of_another_process_clears_the_rest_and_leaves_it_deleted(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    writer = _writer_with_reviews(app_store, ["u", "w"], 2)  # w is untouched
    reviewed = sorted(r.id for r in app_store.list("u", filter=_EVERY) if r.metadata.get(REVIEW_KEY))
    assert len(reviewed) == 2
    _after(app_store, "list", lambda: other_store.delete("u", reviewed[:1]), monkeypatch)
    assert writer.clear_review("u") == 1  # no NotFoundError; only what it cleared is counted
    left = other_store.list("u", filter=_EVERY)
    assert reviewed[0] not in {r.id for r in left}  # stays deleted
    assert [r.metadata.get(REVIEW_KEY) for r in left if r.id == reviewed[1]] == [None]
    assert sum(1 for r in other_store.list("w", filter=_EVERY) if r.metadata.get(REVIEW_KEY)) == 2


def test_consolidate_holds_the_users_write_lock_while_it_reads_and_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of this process (dedup bump, supersede) never lands between consolidate's read and its merge."""
    store = LocalStore(":memory:")
    app = _app_with_a_duplicate(store)
    held: list[bool] = []

    def probe() -> None:  # from another thread: can a writer of "u" (or of "v") take its lock now?
        def try_lock(user: str) -> None:
            stripe = app.writer._stripes[zlib.crc32(user.encode("utf-8")) % LOCK_STRIPES]
            got = stripe.acquire(blocking=False)
            if got:
                stripe.release()
            held.append(not got)

        for user in ("u", "v"):
            t = threading.Thread(target=try_lock, args=(user,))
            t.start()
            t.join()

    _after(store, "get_vectors", probe, monkeypatch)
    try:
        assert app.consolidate("u").merged
        assert held == [True, _same_stripe("u", "v")]  # "u" is locked; another user is not (own stripe)
    finally:
        app.close()


def _same_stripe(a: str, b: str) -> bool:
    return zlib.crc32(a.encode("utf-8")) % LOCK_STRIPES == zlib.crc32(b.encode("utf-8")) % LOCK_STRIPES


@pytest.mark.parametrize("gone", ["the one kept", "the one merged away"])
def test_consolidate_racing_a_delete_of_another_process_merges_nothing_into_a_deleted_memory(
    stores: tuple[MemoryStore, MemoryStore], gone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    app = _app_with_a_duplicate(app_store)
    first = next(r for r in app_store.list("u") if r.id != "dup-1")
    app_store.update([first.evolve(tags=("outdoors",))])
    deleted = "dup-1" if gone == "the one kept" else first.id  # the longer text is the one kept
    _after(app_store, "get_vectors", lambda: other_store.delete("u", [deleted]), monkeypatch)
    report = app.consolidate("u")  # no NotFoundError about a memory the caller never named
    if gone == "the one kept":  # no merge into it: the other one stays, as it was
        assert report.merged == {} and report.deleted == []
        expected = [(first.id, ("outdoors",))]
    else:  # the merge read it first, so it counts as made before the delete
        assert report.merged == {"dup-1": [first.id]}
        expected = [("dup-1", ("outdoors",))]
    for store in (app_store, other_store):
        assert [(r.id, r.tags) for r in store.list("u", filter=_EVERY)] == expected
    assert [r.content for r in other_store.list("v", filter=_EVERY)] == ["My sister lives in Lisbon"]
