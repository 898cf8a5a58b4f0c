"""MeanCache: when a network store reads a user's mean vector again (query centring)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import pytest

from hybrid_memory.stores.means import MeanCache


class _Fetch:
    def __init__(self, count: int) -> None:
        self.count = count
        self.calls: list[str] = []

    def __call__(self, user: str, before: int | None) -> tuple[np.ndarray | None, int]:
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


class _Spawn:
    """Background refreshes queued, run when the test says (deterministic: no thread, no sleep)."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], None]] = []

    def __call__(self, job: Callable[[], None]) -> None:
        self.jobs.append(job)

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            job()


def test_a_large_users_stale_mean_is_served_while_one_background_read_replaces_it() -> None:
    clock, spawn = _Clock(), _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(ttl=300.0, clock=clock, spawn=spawn)
    first = cache.get("u", fetch)  # the first read is the caller's
    assert fetch.calls == ["u"] and spawn.jobs == []
    clock.now = 301.0
    assert cache.get("u", fetch) is first and cache.get("u", fetch) is first  # stale: served, not read here
    assert fetch.calls == ["u"] and len(spawn.jobs) == 1  # one background read, however many recalls
    spawn.run()
    assert fetch.calls == ["u", "u"]
    second = cache.get("u", fetch)
    assert second is not first and second.tolist() == [2.0, 2.0] and spawn.jobs == []
    cache.wrote("u", 500)  # a tenth of 5,000
    assert cache.get("u", fetch) is second and len(spawn.jobs) == 1
    spawn.run()
    assert cache.get("u", fetch).tolist() == [3.0, 3.0]


def test_small_users_and_background_above_none_are_read_on_the_callers_thread() -> None:
    clock, spawn = _Clock(), _Spawn()
    small, cache = _Fetch(1_000), MeanCache(clock=clock, spawn=spawn)
    large, never = _Fetch(50_000), MeanCache(clock=clock, spawn=spawn, background_above=None)
    cache.get("u", small)
    never.get("u", large)
    clock.now = 301.0
    assert cache.get("u", small).tolist() == [2.0, 2.0] and never.get("u", large).tolist() == [2.0, 2.0]
    assert spawn.jobs == []


def test_a_failed_background_read_keeps_the_stale_mean_and_is_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    clock, spawn = _Clock(), _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(clock=clock, spawn=spawn)
    first = cache.get("u", fetch)
    clock.now = 301.0

    def failing(user: str, before: int | None) -> tuple[np.ndarray | None, int]:
        raise ConnectionError("server gone")

    assert cache.get("u", failing) is first
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.stores.means"):
        spawn.run()
    assert "server gone" in caplog.text
    assert cache.get("u", fetch) is first and len(spawn.jobs) == 1  # tried again, by the next recall
    spawn.run()
    assert cache.get("u", fetch) is not first


def test_a_mean_read_while_the_user_is_forgotten_is_not_kept() -> None:
    clock, spawn = _Clock(), _Spawn()
    cache = MeanCache(clock=clock, spawn=spawn)
    fetch = _Fetch(5_000)

    def racing(user: str, before: int | None) -> tuple[np.ndarray | None, int]:  # the forget lands while the read runs
        got = fetch(user, before)
        cache.forget(user)
        return got

    assert cache.get("u", racing) is not None  # the racing recall gets what it read ...
    cache.get("u", fetch)
    assert len(fetch.calls) == 2  # ... but it was not kept: read again
    clock.now = 301.0
    cache.get("u", racing)  # stale and large: a background read
    spawn.run()
    cache.get("u", fetch)
    assert len(fetch.calls) == 4 and spawn.jobs == []  # the background result was dropped too: read at once
    cache.get("u", fetch)
    assert len(fetch.calls) == 4  # and a read after the forget is kept


def test_at_most_two_background_reads_run_at_once_and_the_others_wait_their_turn() -> None:
    clock, spawn = _Clock(), _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(clock=clock, spawn=spawn)
    first = {u: cache.get(u, fetch) for u in "abc"}
    clock.now = 301.0
    assert all(cache.get(u, fetch) is first[u] for u in "abc")  # all stale, all served
    assert len(spawn.jobs) == 2  # "c" waits: no third scan at once
    spawn.run()
    assert cache.get("c", fetch) is first["c"] and len(spawn.jobs) == 1  # its turn, at its next recall
    spawn.run()
    assert all(cache.get(u, fetch) is not first[u] for u in "abc") and spawn.jobs == []


class _Probe:
    """``probe(user, n)``: the mean when the user has at most ``n`` memories, else ``None`` (a bounded read)."""

    def __init__(self, fetch: _Fetch) -> None:
        self.fetch = fetch
        self.calls: list[tuple[str, int]] = []

    def __call__(self, user: str, at_most: int) -> tuple[np.ndarray | None, int] | None:
        self.calls.append((user, at_most))
        if self.fetch.count > at_most:
            return None
        return self.fetch(user, None)


def test_a_first_read_with_a_probe_reads_a_small_user_at_once_and_no_more_than_the_bound() -> None:
    clock, spawn = _Clock(), _Spawn()
    fetch, cache = _Fetch(800), MeanCache(clock=clock, spawn=spawn)
    probe = _Probe(fetch)
    assert cache.get("u", fetch, probe).tolist() == [1.0, 1.0]  # on the caller's thread
    assert probe.calls == [("u", 1_000)] and fetch.calls == ["u"] and spawn.jobs == []
    cache.wrote("u", 80)
    assert cache.get("u", fetch, probe).tolist() == [2.0, 2.0]  # later reads: fetch, as before
    assert probe.calls == [("u", 1_000)] and spawn.jobs == []


def test_a_large_users_first_mean_is_read_in_the_background_and_its_recalls_meanwhile_are_uncentred() -> None:
    clock, spawn = _Clock(), _Spawn()
    fetch = _Fetch(100_000)
    before: list[int | None] = []

    def counting(user: str, last: int | None) -> tuple[np.ndarray | None, int]:
        before.append(last)
        return fetch(user, last)

    cache = MeanCache(clock=clock, spawn=spawn)
    probe = _Probe(fetch)
    assert cache.get("u", counting, probe) is None  # no mean yet: the recall is not held up by a whole read
    assert cache.get("u", counting, probe) is None and cache.get("u", counting, probe) is None
    assert probe.calls == [("u", 1_000)] and fetch.calls == [] and len(spawn.jobs) == 1  # one probe, one read
    spawn.run()
    assert before == [1_001]  # the store is told the user is above the bound (WeaviateStore: one read or the cursor)
    got = cache.get("u", counting, probe)
    assert got is not None and got.tolist() == [1.0, 1.0] and spawn.jobs == []
    clock.now = 301.0  # and from then on as any large user: the stale mean served while it is read again
    assert cache.get("u", counting, probe) is got and len(spawn.jobs) == 1
    spawn.run()
    assert before == [1_001, 100_000] and probe.calls == [("u", 1_000)]


def test_a_failed_first_background_read_leaves_the_user_uncentred_and_is_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spawn = _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(clock=_Clock(), spawn=spawn)

    def failing(user: str, before: int | None) -> tuple[np.ndarray | None, int]:
        raise ConnectionError("server gone")

    assert cache.get("u", failing, _Probe(fetch)) is None
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.stores.means"):
        spawn.run()
    assert "server gone" in caplog.text
    assert cache.get("u", fetch, _Probe(fetch)) is None and len(spawn.jobs) == 1  # tried again, not probed again
    spawn.run()
    assert cache.get("u", fetch, _Probe(fetch)) is not None


def test_a_forget_during_a_first_read_in_the_background_drops_its_result() -> None:
    spawn = _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(clock=_Clock(), spawn=spawn)
    probe = _Probe(fetch)
    assert cache.get("u", fetch, probe) is None
    cache.forget("u")  # after the probe, before the background read ends
    spawn.run()
    assert "u" not in cache._entries  # the forgotten user's mean was not kept
    assert cache.get("u", fetch, probe) is None and len(probe.calls) == 2  # a new first read

    def racing(user: str, at_most: int) -> tuple[np.ndarray | None, int] | None:  # the forget lands during the probe
        cache.forget(user)
        return probe(user, at_most)

    spawn.run()
    assert cache.get("u", fetch, probe) is not None
    cache.forget("u")
    assert cache.get("u", fetch, racing) is None
    assert "u" not in cache._entries and spawn.jobs == []  # nothing kept, nothing started


def test_first_reads_in_the_background_share_the_two_reads_and_background_above_none_reads_at_once() -> None:
    spawn = _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(clock=_Clock(), spawn=spawn)
    probe = _Probe(fetch)
    assert [cache.get(u, fetch, probe) for u in "abc"] == [None, None, None]
    assert len(spawn.jobs) == 2 and len(probe.calls) == 3  # "c" waits for a free read ...
    spawn.run()
    assert cache.get("c", fetch, probe) is None and len(spawn.jobs) == 1 and len(probe.calls) == 3  # ... its turn
    spawn.run()
    assert all(cache.get(u, fetch, probe) is not None for u in "abc")
    never = MeanCache(clock=_Clock(), spawn=spawn, background_above=None)
    assert never.get("u", fetch, probe) is not None and len(probe.calls) == 3 and spawn.jobs == []


def test_wait_returns_once_the_background_reads_are_done() -> None:
    """With the default spawn (a real thread): ``wait`` reports a read still under way, then its end."""
    release = threading.Event()
    fetch = _Fetch(5_000)

    def slow(user: str, before: int | None) -> tuple[np.ndarray | None, int]:
        release.wait()
        return fetch(user, before)

    cache = MeanCache(clock=_Clock())
    assert cache.wait(0.0)  # nothing under way
    assert cache.get("u", slow, _Probe(fetch)) is None
    assert not cache.wait(0.05)  # blocked until released: not done
    release.set()
    assert cache.wait(60.0)
    got = cache.get("u", slow, _Probe(fetch))
    assert got is not None and got.tolist() == [1.0, 1.0]


def test_a_background_read_cut_off_by_close_ends_quietly_and_is_not_kept(caplog: pytest.LogCaptureFixture) -> None:
    spawn = _Spawn()
    fetch, cache = _Fetch(5_000), MeanCache(clock=_Clock(), spawn=spawn)
    assert cache.get("u", fetch, _Probe(fetch)) is None

    def closed(user: str, before: int | None) -> tuple[np.ndarray | None, int]:
        raise ConnectionError("client closed")

    assert cache.get("v", closed, _Probe(fetch)) is None and len(spawn.jobs) == 2
    cache.close()
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.stores.means"):
        spawn.run()
    assert caplog.text == ""  # the failure at close is no news
    assert cache._entries == {}  # and the read that succeeded is not kept


class _Gate:
    """A fetch that blocks until released, so other callers arrive while it runs (real threads)."""

    def __init__(self, fetch: Callable[[str, int | None], tuple[np.ndarray | None, int]]) -> None:
        self.fetch = fetch
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = False

    def __call__(self, user: str, before: int | None) -> tuple[np.ndarray | None, int]:
        self.entered.set()
        assert self.release.wait(timeout=60)
        if self.fail:
            raise ConnectionError("the server went away")
        return self.fetch(user, before)


def _waiting(cache: MeanCache, user: str, n: int) -> None:
    """Block until ``n`` callers wait for the read of ``user`` under way."""
    for _ in range(6_000):
        with cache._lock:
            if cache._flights[user].waiters == n:
                return
        threading.Event().wait(0.01)
    raise AssertionError(f"{n} callers never waited for the read of {user!r}")


@pytest.mark.parametrize("first", [True, False], ids=["first read", "stale mean"])
def test_callers_of_one_user_arriving_during_a_read_wait_for_it_instead_of_reading_again(first: bool) -> None:
    clock, fetch = _Clock(), _Fetch(200)
    cache = MeanCache(clock=clock)
    if not first:
        cache.get("u", fetch)
        clock.now = 301.0  # stale, and small: read again on the caller's thread
    gate = _Gate(fetch)
    got: list[np.ndarray | None] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("u", gate))) for _ in range(4)]
    threads[0].start()
    assert gate.entered.wait(timeout=60)
    for t in threads[1:]:
        t.start()
    _waiting(cache, "u", 3)
    assert cache.get("v", fetch) is not None  # another user is not held up
    gate.release.set()
    for t in threads:
        t.join(timeout=60)
    reads = 2 if first else 3  # "u" once (plus the first read of the stale case), "v" once
    assert len(fetch.calls) == reads and len(got) == 4
    assert all(g is not None and g.tolist() == got[0].tolist() for g in got)  # type: ignore[union-attr]
    assert cache.get("u", fetch) is got[0] and len(fetch.calls) == reads  # and it was kept


def test_callers_waiting_for_a_read_that_fails_read_again_themselves() -> None:
    fetch = _Fetch(200)
    cache = MeanCache(clock=_Clock())
    gate = _Gate(fetch)
    errors: list[BaseException] = []
    got: list[np.ndarray | None] = []

    def leader() -> None:
        try:
            cache.get("u", gate)
        except ConnectionError as exc:
            errors.append(exc)

    first = threading.Thread(target=leader)
    first.start()
    assert gate.entered.wait(timeout=60)
    second = threading.Thread(target=lambda: got.append(cache.get("u", fetch)))
    second.start()
    _waiting(cache, "u", 1)
    gate.fail = True
    gate.release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    assert len(errors) == 1  # the caller whose read failed gets the error ...
    assert len(got) == 1 and got[0] is not None and fetch.calls == ["u"]  # ... the waiter read itself


def test_a_caller_after_a_forget_does_not_wait_for_the_read_begun_before_it() -> None:
    fetch = _Fetch(200)
    cache = MeanCache(clock=_Clock())
    gate = _Gate(fetch)
    first = threading.Thread(target=lambda: cache.get("u", gate))
    first.start()
    assert gate.entered.wait(timeout=60)
    cache.forget("u")
    assert cache.get("u", fetch) is not None and fetch.calls == ["u"]  # read at once, not after the gate
    gate.release.set()
    first.join(timeout=60)
    assert len(fetch.calls) == 2
    cache.get("u", fetch)  # neither read overlapping the forget is kept (as before): read again ...
    cache.get("u", fetch)
    assert len(fetch.calls) == 3  # ... and that one is
