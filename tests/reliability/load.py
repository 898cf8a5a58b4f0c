"""The mixed multi-user workload of the isolation tests and of ``benchmarks/reliability.py``.

``run_threads`` / ``run_tasks`` drive one :class:`~hybrid_memory.HybridMemory` with ``workers``
concurrent callers (threads, or asyncio tasks using the ``a``-prefixed twins) for ``seconds``,
and each caller for at least ``min_ops`` operations (drawn from its seeded generator), so what
the tests require (every kind of operation, some hits to check) comes from a number of
operations, not from how many a loaded machine gets through in ``seconds``.
Every caller repeatedly picks one of ``users`` users and does ``add_turn`` / ``remember`` /
``recall`` / ``build_context`` / ``forget``. Each user's memories carry a marker token only that
user has, and queries mix the shared vocabulary with *other* users' markers, so a leak would be
found: every recalled hit and every fused block is checked on the spot. The :class:`Ledger`
records acknowledged writes and forgets; :func:`verify` checks at the end that every
acknowledged, unforgotten write is stored and every forgotten memory stays gone.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from hybrid_memory import HybridMemory

WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "granite",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lantern",
    "meadow",
    "nectar",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "thistle",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "anchor",
    "bramble",
    "cobalt",
    "dune",
    "eagle",
    "falcon",
    "glacier",
    "hazel",
    "iris",
    "jasper",
    "kestrel",
    "lotus",
    "marble",
    "nutmeg",
    "olive",
    "咖啡",
    "茶",
    "苹果",
    "北京",
    "上海",
]
OPS = ("remember", "remember", "remember", "recall", "recall", "build_context", "add_turn", "add_turn", "forget")
_MARKER = re.compile(r"zq(\d{3})k")


def marker(user: int) -> str:
    return f"zq{user:03d}k"


def uid(user: int) -> str:
    return f"user-{user:03d}"


@dataclass
class Ledger:
    acked: dict[tuple[str, str], str] = field(default_factory=dict)  # (user, id) -> content
    forgotten: set[tuple[str, str]] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)
    checked_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, op: str) -> None:
        with self.lock:
            self.ops[op] = self.ops.get(op, 0) + 1

    def fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)


def _check_hits(ledger: Ledger, user: int, hits: Any, what: str) -> None:
    for h in hits:
        rec = h.record
        if rec.user_id != uid(user) or marker(user) not in rec.content:
            ledger.fail(f"LEAK in {what}: {uid(user)} got a memory of {rec.user_id}: {rec.content!r}")
    with ledger.lock:
        ledger.checked_hits += len(hits)


def _check_text(ledger: Ledger, user: int, text: str, what: str) -> None:
    others = {int(m) for m in _MARKER.findall(text)} - {user}
    if others:
        ledger.fail(f"LEAK in {what}: the block for {uid(user)} names users {sorted(others)}")


class _Caller:
    def __init__(self, mem: HybridMemory, ledger: Ledger, users: int, seed: int) -> None:
        self.mem, self.ledger, self.users = mem, ledger, users
        self.rng = random.Random(seed)
        self.seed = seed
        self.seq = 0
        self.mine: list[tuple[str, str]] = []

    def plan(self) -> tuple[str, int, str, str]:
        self.seq += 1
        user = self.rng.randrange(self.users)
        words = " ".join(self.rng.sample(WORDS, 5))
        other = marker(self.rng.randrange(self.users))
        content = f"{marker(user)} {words} w{self.seed}n{self.seq}"
        query = f"{words} {other}" if self.rng.random() < 0.5 else words
        return self.rng.choice(OPS), user, content, query

    def after_write(self, user: int, out: Any, content: str) -> None:
        rec = out.record
        if rec is None or out.action == "rejected":
            return
        with self.ledger.lock:
            self.ledger.acked[(uid(user), rec.id)] = rec.content
        if out.action == "added":
            self.mine.append((uid(user), rec.id))

    def pick_forget(self) -> tuple[str, str] | None:
        if not self.mine:
            return None
        return self.mine.pop(self.rng.randrange(len(self.mine)))

    def run_sync(self, op: str, user: int, content: str, query: str) -> None:
        m, u = self.mem, uid(user)
        if op == "remember":
            self.after_write(user, m.remember(u, content, importance=round(self.rng.uniform(0.3, 0.9), 2)), content)
        elif op == "recall":
            _check_hits(self.ledger, user, m.recall(query, user_id=u, k=10), "recall")
        elif op == "build_context":
            ctx = m.build_context(query, user_id=u, session_id=f"s{self.seed}")
            _check_hits(self.ledger, user, ctx.hits, "build_context")
            _check_text(self.ledger, user, ctx.text, "build_context")
        elif op == "add_turn":
            m.add_turn(u, f"s{self.seed}", "user", f"Remember: {content}")
        else:
            target = self.pick_forget()
            if target is not None:
                m.forget(target[1], user_id=target[0])
                with self.ledger.lock:
                    self.ledger.forgotten.add(target)

    async def run_async(self, op: str, user: int, content: str, query: str) -> None:
        m, u = self.mem, uid(user)
        if op == "remember":
            out = await m.aremember(u, content, importance=round(self.rng.uniform(0.3, 0.9), 2))
            self.after_write(user, out, content)
        elif op == "recall":
            _check_hits(self.ledger, user, await m.arecall(query, user_id=u, k=10), "arecall")
        elif op == "build_context":
            ctx = await m.abuild_context(query, user_id=u, session_id=f"s{self.seed}")
            _check_hits(self.ledger, user, ctx.hits, "abuild_context")
            _check_text(self.ledger, user, ctx.text, "abuild_context")
        elif op == "add_turn":
            await m.aadd_turn(u, f"s{self.seed}", "user", f"Remember: {content}")
        else:
            target = self.pick_forget()
            if target is not None:
                await m.aforget(target[1], user_id=target[0])
                with self.ledger.lock:
                    self.ledger.forgotten.add(target)


#: Operations every caller makes at least, whatever the duration (see the module docstring).
MIN_OPS = 40


def run_threads(
    mem: HybridMemory, *, workers: int, users: int, seconds: float, seed: int = 0, min_ops: int = MIN_OPS
) -> Ledger:
    ledger = Ledger()
    stop = time.monotonic() + seconds

    def work(n: int) -> None:
        caller = _Caller(mem, ledger, users, seed * 100 + n)
        while caller.seq < min_ops or time.monotonic() < stop:
            op, user, content, query = caller.plan()
            try:
                caller.run_sync(op, user, content, query)
                ledger.count(op)
            except Exception:  # every exception is unexpected here
                ledger.fail(f"{op} raised:\n{traceback.format_exc()}")

    threads = [threading.Thread(target=work, args=(n,), name=f"load-{n}") for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 120)
        if t.is_alive():
            ledger.fail(f"{t.name} did not finish")
    return ledger


async def run_tasks(
    mem: HybridMemory, *, workers: int, users: int, seconds: float, seed: int = 0, min_ops: int = MIN_OPS
) -> Ledger:
    ledger = Ledger()
    stop = time.monotonic() + seconds

    async def work(n: int) -> None:
        caller = _Caller(mem, ledger, users, seed * 100 + n)
        while caller.seq < min_ops or time.monotonic() < stop:
            op, user, content, query = caller.plan()
            try:
                await caller.run_async(op, user, content, query)
                ledger.count(op)
            except Exception:
                ledger.fail(f"{op} raised:\n{traceback.format_exc()}")

    await asyncio.wait_for(asyncio.gather(*(work(n) for n in range(workers))), timeout=seconds + 120)
    return ledger


def verify(mem: HybridMemory, ledger: Ledger, users: int) -> dict[str, int]:
    """Every acknowledged, unforgotten write is stored; forgotten ones are gone; no store leaks."""
    store = mem.store
    lost: list[tuple[str, str]] = []
    resurrected: list[tuple[str, str]] = []
    for u in range(users):
        mine = [k for k in ledger.acked if k[0] == uid(u)]
        stored = {r.id: r for r in store.get(uid(u), [i for _, i in mine])}
        for key in mine:
            if key in ledger.forgotten:
                if key[1] in stored:
                    resurrected.append(key)
            elif key[1] not in stored:
                lost.append(key)
        for r in store.list(uid(u), filter=None):
            if r.user_id != uid(u) or marker(u) not in r.content:
                ledger.fail(f"LEAK in store.list: {uid(u)} holds {r.user_id}: {r.content!r}")
    return {
        "acknowledged": len(ledger.acked),
        "forgotten": len(ledger.forgotten),
        "lost": len(lost),
        "resurrected": len(resurrected),
        "checked_hits": ledger.checked_hits,
        "operations": sum(ledger.ops.values()),
    }
