"""Session summaries driven by the store's summary watermark (issue 13: session state in the store).

The turns waiting for the next summary are the log's turns above the session's watermark, so
memories on one file (standing in for processes; ``tests/reliability/test_processes_summary.py``
uses real ones) share them: turns split over two memories reach one summary, a memory that
stopped before its summary leaves its turns to the next, two memories summarising the same turns
at once leave one summary, and a forget stops a summary in flight from being written or marked.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.config import HybridMemoryConfig
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.summary import SessionSummarizer, SummaryResult

T0 = datetime(2025, 6, 2, 9, tzinfo=timezone.utc)
WAIT = 30.0
SAID = [
    "I live in Leeds",
    "my budget is at most 900 pounds",
    "I never work on Sundays",
    "my daughter Mia is 7",
    "I play the cello",
    "I am allergic to peanuts",
]


class GatedSummarizer(SessionSummarizer):
    """The extractive summarizer, held at its start until the test opens the gate.

    Not a mock: it makes real summaries; the gate only fixes the interleaving of two jobs (a race
    the test could otherwise not cause on purpose).
    """

    def __init__(self, gate: threading.Event, entered: threading.Semaphore, signature: str = "") -> None:
        super().__init__()
        self.gate, self.entered, self.signature = gate, entered, signature

    def summarize(
        self, previous: str | None, turns: Sequence[str], *, roles: Sequence[str] | None = None
    ) -> SummaryResult:
        self.entered.release()
        assert self.gate.wait(WAIT)
        made = super().summarize(previous, turns, roles=roles)
        return dataclasses.replace(made, text=made.text + self.signature)


def memory(path: Path, *, every: int = 6, summarizer: SessionSummarizer | None = None) -> HybridMemory:
    return HybridMemory(
        store=LocalStore(path),
        embedder=HashingEmbedder(),
        config=HybridMemoryConfig(buffer={"summary_every": every}),  # type: ignore[arg-type]
        summarizer=summarizer if summarizer is not None else SessionSummarizer(),
    )


def summaries(mem: HybridMemory, user: str = "u") -> list[tuple[str, str]]:
    """(status, content) of every summary memory of ``user``, oldest first."""
    return [(r.status, r.content) for r in mem.list_memories(user) if r.category == "summary"]


def add(mem: HybridMemory, texts: Sequence[str], start: int = 0) -> None:
    for i, text in enumerate(texts, start):
        mem.add_turn("u", "s", "user", text, timestamp=T0 + timedelta(minutes=i))


def test_turns_split_over_two_memories_reach_one_summary(tmp_path: Path) -> None:
    a, b = memory(tmp_path / "m.db"), memory(tmp_path / "m.db")
    try:
        add(a, SAID[:2])
        add(b, SAID[2:4], 2)
        add(a, SAID[4:5], 4)
        assert a.flush(timeout=WAIT) and b.flush(timeout=WAIT)
        assert summaries(a) == []  # 5 of 6: nothing is due yet, in either memory
        add(b, SAID[5:], 5)  # b counts a's turns too: the sixth turn of the session makes it due
        assert b.flush(timeout=WAIT) and a.flush(timeout=WAIT)
        [(status, text)] = summaries(a)
        assert status == "active" and text.splitlines() == SAID
        last = b.short_term("u", "s")[-1]
        assert a.store.summarized_upto("u", "s") == last.seq
        assert a.session_summary("u", "s") == b.session_summary("u", "s") == text
    finally:
        a.close()
        b.close()


def test_turns_a_stopped_memory_left_are_summarised_by_the_next(tmp_path: Path) -> None:
    first = memory(tmp_path / "m.db")
    add(first, SAID[:4])
    first.close()  # before a summary was due: its four turns wait in the store, not in the process
    second = memory(tmp_path / "m.db")
    try:
        add(second, SAID[4:], 4)
        assert second.flush(timeout=WAIT)
        [(status, text)] = summaries(second)
        assert status == "active" and text.splitlines() == SAID
        # The next six turns make version 2, folded from version 1 (which it supersedes).
        add(second, [f"my locker number is {n}" for n in range(101, 107)], 6)
        assert second.flush(timeout=WAIT)
        assert [s for s, _ in summaries(second)] == ["superseded", "active"]
    finally:
        second.close()


def test_two_memories_summarising_the_same_turns_at_once_leave_one_summary(tmp_path: Path) -> None:
    gate, entered = threading.Event(), threading.Semaphore(0)
    a = memory(tmp_path / "m.db", summarizer=GatedSummarizer(gate, entered))
    b = memory(tmp_path / "m.db", summarizer=GatedSummarizer(gate, entered))
    try:
        add(a, SAID[:5])
        add(b, SAID[5:], 5)  # b's sixth turn makes the summary due in b ...
        a.add_turn("u", "s", "assistant", "Noted.", timestamp=T0)  # ... and a (7 pending) sees it due too
        assert entered.acquire(timeout=WAIT) and entered.acquire(timeout=WAIT)  # both jobs hold the same turns
        gate.set()
        assert a.flush(timeout=WAIT) and b.flush(timeout=WAIT)
        # One summary of the six turns survives (the loser of the watermark's compare-and-set
        # deleted its own); the seventh turn waits for the next summary.
        [(status, text)] = summaries(a)
        assert status == "active" and text.splitlines() == SAID
        log = a.store.load_session("u", "s")
        assert a.store.summarized_upto("u", "s") == log.turns[5].seq
        assert list(a._sessions.worker.errors) == list(b._sessions.worker.errors) == []
    finally:
        gate.set()
        a.close()
        b.close()


def test_a_summary_in_flight_during_a_forget_writes_and_marks_nothing(tmp_path: Path) -> None:
    gate, entered = threading.Event(), threading.Semaphore(0)
    mem = memory(tmp_path / "m.db", every=3, summarizer=GatedSummarizer(gate, entered))
    other = memory(tmp_path / "m.db", every=3)
    try:
        add(mem, SAID[:3])
        assert entered.acquire(timeout=WAIT)  # the summary job read the turns under the old epoch
        other.forget_user("u")  # another process forgets the user
        gate.set()
        assert mem.flush(timeout=WAIT)
        assert summaries(other) == [] and other.store.summarized_upto("u", "s") == 0
        assert list(mem._sessions.worker.errors) == []  # refused quietly: nothing from before the forget
        # New turns after the forget are summarised from a fresh watermark.
        add(other, ["I moved to York", "I work nights", "I own a kayak"])
        assert other.flush(timeout=WAIT)
        assert [t for _, t in summaries(other)] == ["I moved to York\nI work nights\nI own a kayak"]
    finally:
        gate.set()
        mem.close()
        other.close()


def test_end_session_claims_the_last_turns_before_deleting_the_log(tmp_path: Path) -> None:
    a, b = memory(tmp_path / "m.db"), memory(tmp_path / "m.db")
    try:
        add(a, SAID[:2])
        add(b, SAID[2:3], 2)
        last = a.short_term("u", "s")[-1].seq
        a.end_session("u", "s")
        assert a.store.summarized_upto("u", "s") == last  # claimed: b summarises none of them again
        assert a.flush(timeout=WAIT) and b.flush(timeout=WAIT)
        assert [t for _, t in summaries(a)] == ["\n".join(SAID[:3])]
        # The session goes on after its end: its new turns are above the kept watermark.
        add(b, SAID[3:], 3)
        b.end_session("u", "s")
        assert b.flush(timeout=WAIT)
        assert summaries(b) == [("superseded", "\n".join(SAID[:3])), ("active", "\n".join(SAID))]
    finally:
        a.close()
        b.close()


class EveryMarkWins(LocalStore):
    """A LocalStore whose summary marks all win: the window of a store without conditional writes.

    A fault LocalStore cannot produce (its compare-and-set is one transaction), reproduced here
    for what ``WeaviateStore`` documents: two simultaneous marks from one watermark both win.
    """

    def mark_summarized(self, user_id: str, session_id: str, seq: int, *, expected: int, epoch: int) -> bool:
        now = self.summarized_upto(user_id, session_id)
        if now < seq:
            super().mark_summarized(user_id, session_id, seq, expected=now, epoch=epoch)
        return True


def test_two_winning_marks_leave_one_active_summary_after_the_next(tmp_path: Path) -> None:
    gate, entered = threading.Event(), threading.Semaphore(0)
    mems = [
        HybridMemory(
            store=EveryMarkWins(tmp_path / "m.db"),
            embedder=HashingEmbedder(),
            config=HybridMemoryConfig(buffer={"summary_every": 6}),  # type: ignore[arg-type]
            summarizer=GatedSummarizer(gate, entered, f"\nSummary number {n}."),  # not a duplicate of the other
        )
        for n in (1, 2)
    ]
    a, b = mems
    try:
        add(a, SAID[:5])
        add(b, SAID[5:], 5)
        a.add_turn("u", "s", "user", "I drink tea", timestamp=T0)
        assert entered.acquire(timeout=WAIT) and entered.acquire(timeout=WAIT)
        gate.set()
        assert a.flush(timeout=WAIT) and b.flush(timeout=WAIT)
        assert list(a._sessions.worker.errors) == list(b._sessions.worker.errors) == []
        # Both summaries of the same turns were written and both marks won: both are kept, ...
        got = summaries(a)
        assert sorted(text.splitlines()[-1] for _, text in got) == ["Summary number 1.", "Summary number 2."]
        assert all(text.splitlines()[:-1] == SAID for _, text in got)
        # ... and the session's next summary supersedes every one of them.
        add(a, [f"my locker number is {n}" for n in range(101, 106)], 7)
        assert a.flush(timeout=WAIT) and b.flush(timeout=WAIT)
        assert [s for s, _ in summaries(a)] == ["superseded", "superseded", "active"]
    finally:
        gate.set()
        for m in mems:
            m.close()
