"""MeanCache: when a network store reads a user's mean vector again (query centring)."""

from __future__ import annotations

import numpy as np

from hybrid_memory.stores.means import MeanCache


class _Fetch:
    def __init__(self, count: int) -> None:
        self.count = count
        self.calls: list[str] = []

    def __call__(self, user: str) -> tuple[np.ndarray | None, int]:
        self.calls.append(user)
        if self.count == 0:
            return None, 0
        return np.full(2, float(len(self.calls)), dtype=np.float32), self.count


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_read_once_then_again_after_a_tenth_of_the_memories_was_written() -> None:
    fetch, cache = _Fetch(100), MeanCache(clock=_Clock())
    first = cache.get("u", fetch)
    cache.wrote("u", 9)
    assert cache.get("u", fetch) is first and fetch.calls == ["u"]
    cache.wrote("u")  # the tenth of 100
    assert cache.get("u", fetch) is not first and fetch.calls == ["u", "u"]


def test_a_user_without_memories_is_read_again_after_its_first_write() -> None:
    fetch, cache = _Fetch(0), MeanCache(clock=_Clock())
    assert cache.get("u", fetch) is None and cache.get("u", fetch) is None
    assert fetch.calls == ["u"]
    fetch.count = 1
    cache.wrote_records(["u"])
    assert cache.get("u", fetch) is not None and len(fetch.calls) == 2


def test_read_again_after_the_ttl_and_at_once_after_a_forget() -> None:
    clock = _Clock()
    fetch, cache = _Fetch(100), MeanCache(ttl=300.0, clock=clock)
    cache.get("u", fetch)
    clock.now = 300.0
    cache.get("u", fetch)
    assert len(fetch.calls) == 1  # at the ttl: still fresh
    clock.now = 300.5
    cache.get("u", fetch)
    assert len(fetch.calls) == 2
    cache.forget("u")
    cache.get("u", fetch)
    assert len(fetch.calls) == 3


def test_writes_of_one_user_leave_the_others_cached_and_the_oldest_user_is_dropped_first() -> None:
    fetch, cache = _Fetch(10), MeanCache(max_users=2, clock=_Clock())
    cache.get("a", fetch)
    cache.get("b", fetch)
    cache.wrote("a")
    cache.get("b", fetch)
    assert fetch.calls == ["a", "b"]
    cache.get("c", fetch)  # drops "a", the least recently used
    cache.get("b", fetch)
    cache.get("a", fetch)
    assert fetch.calls == ["a", "b", "c", "a"]
