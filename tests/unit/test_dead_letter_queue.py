"""The Weaviate store's dead-letter file on its own (a real SQLite file, no server).

A replay settles what it read by stamp: a newer version of the same memory queued meanwhile (by
this or another process sharing the file) must survive the replay, and a replay that fails again
keeps the time its write was asked for, which is what deletes are compared with.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("weaviate", reason="the 'weaviate' extra is not installed")

from hybrid_memory.records import CONTEXT_SOURCE_KEY, MemoryRecord
from hybrid_memory.stores.weaviate.dead_letters import _DeadLetterQueue, _Failure, _Pending

T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)


def failure(rec: MemoryRecord, message: str = "server unreachable") -> _Failure:
    vec = np.ones(4, dtype=np.float32) / 2.0
    return _Failure(_Pending(rec, vec, rec.id, rec.user_id), message, transient=True)


@pytest.fixture
def dlq(tmp_path: Path) -> Iterator[_DeadLetterQueue]:
    queue = _DeadLetterQueue(tmp_path / "dead.sqlite")
    try:
        yield queue
    finally:
        queue.close()


def test_a_version_queued_after_the_replay_read_the_queue_is_not_removed_by_it(dlq: _DeadLetterQueue) -> None:
    old = MemoryRecord.create(user_id="alice", content="my address is 1 Old Road", timestamp=T0)
    dlq.add([failure(old)])
    [read] = dlq.pending()
    # While the replay writes the old version, another write of the same memory fails and is queued.
    newer = old.model_copy(update={"content": "my address is 2 New Street"})
    dlq.add([failure(newer)])
    dlq.settle([read], [])
    [left] = dlq.pending()
    assert left.record.content == "my address is 2 New Street"
    assert left.stamp != read.stamp


def test_a_replayed_row_is_removed_and_a_failed_one_keeps_its_request_time(dlq: _DeadLetterQueue) -> None:
    a = MemoryRecord.create(user_id="alice", content="a", timestamp=T0)
    b = MemoryRecord.create(user_id="alice", content="b", timestamp=T0)
    dlq.add([failure(a), failure(b)])
    read = {x.record.id: x for x in dlq.pending()}
    dlq.settle([read[a.id]], [(read[b.id], "timed out again")])
    [left] = dlq.pending()
    assert left.record.id == b.id
    assert (left.error, left.attempts) == ("timed out again", 2)
    assert (left.queued_at, left.stamp) == (read[b.id].queued_at, read[b.id].stamp)


def test_a_failed_replay_does_not_bring_back_a_row_removed_meanwhile(dlq: _DeadLetterQueue) -> None:
    a = MemoryRecord.create(user_id="alice", content="a", timestamp=T0)
    dlq.add([failure(a)])
    [read] = dlq.pending()
    dlq.remove("alice", [a.id])  # a newer write of the memory succeeded meanwhile
    dlq.settle([], [(read, "timed out again")])
    assert dlq.pending() == []


def test_blanking_contexts_touches_only_the_rows_cut_from_those_turns_and_keeps_their_stamp(
    tmp_path: Path, dlq: _DeadLetterQueue
) -> None:
    """The words leave the file; the write stays the same one (a replay that read it can still settle it)."""

    def turn_memory(user: str, content: str, source: str) -> MemoryRecord:
        return MemoryRecord.create(
            user_id=user, content=content, timestamp=T0, context="my pin is 4711", metadata={CONTEXT_SOURCE_KEY: source}
        )

    hit, other_turn, other_user = (
        turn_memory("alice", "a", "t1"),
        turn_memory("alice", "b", "t2"),
        turn_memory("bob", "c", "t1"),
    )
    odd = MemoryRecord.create(  # a caller's own metadata under the key: not a turn id, left alone
        user_id="alice", content="d", timestamp=T0, context="my pin is 4711", metadata={CONTEXT_SOURCE_KEY: ["t1"]}
    )
    assert odd.context_source is None
    dlq.add([failure(hit), failure(other_turn), failure(other_user), failure(odd)])
    before = {x.key: x for x in dlq.pending()}
    assert dlq.blank_contexts("alice", {"t1", "t9"}) == 1
    after = {x.key: x for x in dlq.pending()}
    assert after[(hit.user_id, hit.id)].record == hit.evolve(context="")
    assert (after[(hit.user_id, hit.id)].stamp, after[(hit.user_id, hit.id)].queued_at) == (
        before[(hit.user_id, hit.id)].stamp,
        before[(hit.user_id, hit.id)].queued_at,
    )
    assert (
        after[(other_turn.user_id, other_turn.id)].record == other_turn
        and after[(other_user.user_id, other_user.id)].record == other_user
    )
    assert dlq.blank_contexts("alice", {"t1"}) == 0  # already blank
    dlq.settle([before[(hit.user_id, hit.id)]], [])  # a replay that read the row before: same write, same stamp
    assert (hit.user_id, hit.id) not in {x.key for x in dlq.pending()}
    assert after[(odd.user_id, odd.id)].record == odd
    dlq.remove("alice", [other_turn.id, odd.id])
    dlq.remove("bob", [other_user.id])
    blob = b"".join(p.read_bytes() for p in tmp_path.glob("dead.sqlite*"))
    assert b"4711" not in blob


def test_a_queue_written_before_request_times_and_stamps_is_still_replayable(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    rec = MemoryRecord.create(user_id="alice", content="queued by an older version", timestamp=T0)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE dead_letters (user_id TEXT NOT NULL, record_id TEXT NOT NULL, record_json TEXT NOT NULL,"
            " vector BLOB NOT NULL, error TEXT NOT NULL, attempts INTEGER NOT NULL, first_failed_at TEXT NOT NULL,"
            " last_failed_at TEXT NOT NULL, PRIMARY KEY (user_id, record_id))"
        )
        conn.execute(
            "INSERT INTO dead_letters VALUES (?, ?, ?, ?, 'down', 1, ?, ?)",
            (
                rec.user_id,
                rec.id,
                json.dumps(rec.to_json_dict()),
                np.zeros(4, dtype="<f4").tobytes(),
                "2025-03-01T00:00:00+00:00",
                "2025-03-02T00:00:00+00:00",
            ),
        )
    conn.close()
    dlq = _DeadLetterQueue(path)
    try:
        [x] = dlq.pending()
        assert (x.record, x.epoch, x.stamp) == (rec, None, None)
        assert x.queued_at == datetime(2025, 3, 2, tzinfo=timezone.utc)  # the last failure stands in
        dlq.settle([x], [])
        assert dlq.count() == 0
    finally:
        dlq.close()
