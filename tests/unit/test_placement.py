"""hybrid_memory.read.placement: the block ledger and the next block of a conversation (no IO)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hybrid_memory.config import FuserConfig, HybridMemoryConfig
from hybrid_memory.read.context import ContextFuser
from hybrid_memory.read.placement import BlockLedger, is_stable, next_block, place, prepend_block
from hybrid_memory.records import MemoryRecord, RecallHit

NOW = datetime(2024, 5, 4, tzinfo=timezone.utc)


def _hit(text: str) -> RecallHit:
    r = MemoryRecord.create(user_id="u", content=text, category="fact", importance=0.5, timestamp=NOW)
    return RecallHit(record=r, score=0.9, relevance=1.0, vector_similarity=0.7, importance=0.5, recency=1.0, heat=0.0)


def test_default_placement_is_the_stable_user_message() -> None:
    assert HybridMemoryConfig().fuser.placement == "user_message"
    assert [is_stable(p) for p in ("user_message", "before_user", "system_end", "system_start")] == [
        True,
        True,
        False,
        False,
    ]
    with pytest.raises(ValueError, match="placement"):
        FuserConfig(placement="middle")  # type: ignore[arg-type]


def test_ledger_round_trips_through_state_and_ignores_junk() -> None:
    ledger = BlockLedger().record("m1", "block one", ["a", "b"]).record("m2", "", ["c"]).record("m3", "three", ["c"])
    assert len(ledger) == 2  # an empty text records nothing
    again = BlockLedger.from_state([*ledger.to_state(), {"anchor": 3}, "junk", {"anchor": "x", "text": "t"}])
    assert again.to_state() == ledger.to_state()
    assert BlockLedger.from_state(None).to_state() == []
    assert again.present({"m1"}) == {"a", "b"} and again.present({"m9"}) == frozenset()
    assert again.prune({"m3"}).block_for("m1") is None and again.prune({"m3"}).block_for("m3") == "three"
    assert again.block_for(None) is None


def test_prepend_block() -> None:
    assert prepend_block("B", "question") == "B\n\nquestion"
    assert prepend_block("B", "") == "B"


def test_next_block_drops_shown_memories_and_the_header() -> None:
    fuser = ContextFuser()
    a, b = _hit("Ann lives in Lyon"), _hit("Ann is allergic to peanuts")
    ctx = fuser.fuse([a, b], query="Where do I live?", now=NOW)
    assert "Background memories" in ctx.text
    unchanged = next_block(fuser, ctx, set(), continued=False, query="Where do I live?", now=NOW)
    assert unchanged is ctx
    later = next_block(fuser, ctx, {a.id}, continued=True, query="Where do I live?", now=NOW)
    assert [h.id for h in later.hits] == [b.id]
    assert later.text.startswith("<memory-context>\n## ") and "Lyon" not in later.text  # the first block frames it
    assert (a.id, "already in the conversation") in later.dropped
    assert later.token_count < ctx.token_count
    none_left = next_block(fuser, ctx, {a.id, b.id}, continued=True, query="Where do I live?", now=NOW)
    assert (
        none_left.skipped and none_left.text == "" and "already in the conversation" in (none_left.skipped_reason or "")
    )


def test_place_records_at_the_anchor_and_forgets_what_left() -> None:
    fuser = ContextFuser()
    a, b = _hit("Ann lives in Lyon"), _hit("Ann is allergic to peanuts")
    ledger = BlockLedger().record("gone", "old", ["z"]).record("m1", "first", [a.id])
    ledger, ctx = place(
        fuser, ledger, fuser.fuse([a, b], query="q", now=NOW), anchor="m2", live={"m1", "m2"}, query="q", now=NOW
    )
    assert ledger.block_for("gone") is None and ledger.block_for("m1") == "first"
    assert ledger.block_for("m2") == ctx.text and [h.id for h in ctx.hits] == [b.id]
    # The same anchor again (a retried call) does not count its own earlier block as shown.
    ledger2, ctx2 = place(
        fuser, ledger, fuser.fuse([a, b], query="q", now=NOW), anchor="m2", live={"m1", "m2"}, query="q", now=NOW
    )
    assert ctx2.text == ctx.text and ledger2.to_state() == ledger.to_state()
