"""The writer serialises writes per user, not per process: a write stuck in IO stalls only its own user.

A write that embeds (or judges, or talks to the store) for alice holds alice's lock only; bob's
write goes through meanwhile, and a second write for alice waits for the first. Events and joins
with generous timeouts, no wall-clock checks.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.writer import LOCK_STRIPES, MemoryWriter

WAIT = 30.0  # seconds; only reached when something is stuck


class _Blocking(HashingEmbedder):
    def __init__(self, marker: str) -> None:
        super().__init__(dim=32)
        self.marker = marker
        self.entered = threading.Event()
        self.release = threading.Event()

    def _raw_documents(self, texts: list[str]) -> Any:
        if any(self.marker in t for t in texts):
            self.entered.set()
            assert self.release.wait(WAIT)
        return super()._raw_documents(texts)


def _draft(user: str, text: str) -> MemoryRecord:
    return MemoryRecord.create(user_id=user, content=text, importance=0.8)


def _other_stripe(user: str) -> str:
    mine = zlib.crc32(user.encode()) % LOCK_STRIPES
    return next(u for u in (f"bob-{i}" for i in range(1000)) if zlib.crc32(u.encode()) % LOCK_STRIPES != mine)


def test_a_write_stuck_in_the_embedder_does_not_block_another_user() -> None:
    emb = _Blocking("BLOCK")
    writer = MemoryWriter(LocalStore(":memory:"), emb)
    bob = _other_stripe("alice")
    errors: list[BaseException] = []

    def alice() -> None:
        try:
            writer.write([_draft("alice", "BLOCK I live in Hangzhou")])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=alice, daemon=True)
    t.start()
    assert emb.entered.wait(WAIT), "alice's write never reached the embedder"
    done = threading.Event()

    def bob_writes() -> None:
        writer.write([_draft(bob, "I drink oolong tea every morning")])
        done.set()

    b = threading.Thread(target=bob_writes, daemon=True)
    b.start()
    served = done.wait(WAIT)
    emb.release.set()
    t.join(WAIT)
    b.join(WAIT)
    assert served, "bob's write waited for alice's embedding: a lock shared by every user is held across IO"
    assert not errors
    assert [r.content for r in writer.store.list(bob)] == ["I drink oolong tea every morning"]
    assert [r.content for r in writer.store.list("alice")] == ["BLOCK I live in Hangzhou"]


class _SpyLock:
    """A re-entrant lock that tells when a caller had to wait for it."""

    def __init__(self) -> None:
        self.inner = threading.RLock()
        self.contended = threading.Event()

    def __enter__(self) -> _SpyLock:
        if not self.inner.acquire(blocking=False):
            self.contended.set()
            self.inner.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_two_writes_of_one_user_are_serialised() -> None:
    emb = _Blocking("alice-")
    writer = MemoryWriter(LocalStore(":memory:"), emb)
    spies = tuple(_SpyLock() for _ in range(LOCK_STRIPES))
    writer._stripes = spies  # type: ignore[assignment]
    t = threading.Thread(target=lambda: writer.write([_draft("alice", "alice- first fact")]), daemon=True)
    t.start()
    assert emb.entered.wait(WAIT)
    emb.entered.clear()
    s = threading.Thread(target=lambda: writer.write([_draft("alice", "alice- second fact")]), daemon=True)
    s.start()
    # The second write parks on alice's lock (the spy sees it wait) and never reaches the embedder
    # while the first is inside.
    stripe = spies[zlib.crc32(b"alice") % LOCK_STRIPES]
    assert stripe.contended.wait(WAIT), "the second write of alice did not wait for alice's lock"
    assert not emb.entered.is_set(), "two writes of one user ran inside the writer at once"
    emb.release.set()
    t.join(WAIT)
    s.join(WAIT)
    assert not t.is_alive() and not s.is_alive()
    assert sorted(r.content for r in writer.store.list("alice")) == ["alice- first fact", "alice- second fact"]
