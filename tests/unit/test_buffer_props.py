"""KeyFrameBuffer invariants: property tests (hypothesis) plus a few worked cases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import Turn
from hybrid_memory.write.buffer import KeyFrameBuffer

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def turn(i: int, tokens: int, key: bool = False) -> Turn:
    return Turn(
        id=f"t{i}",
        user_id="u",
        session_id="s",
        role="user",
        content=f"turn {i}",
        timestamp=T0 + timedelta(seconds=i),
        key_frame=key,
        tokens=tokens,
    )


turn_specs = st.lists(st.tuples(st.integers(0, 60), st.booleans()), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(specs=turn_specs, budget=st.integers(1, 150), ratio=st.floats(0.05, 1.0))
def test_invariants(specs: list[tuple[int, bool]], budget: int, ratio: float) -> None:
    buf = KeyFrameBuffer(max_tokens=budget, max_key_frame_ratio=ratio)
    added: list[Turn] = []
    evicted_all: list[Turn] = []
    for i, (tokens, key) in enumerate(specs):
        t = turn(i, tokens, key)
        before = buf.turns
        out = buf.add(t)
        added.append(t)
        evicted_all.extend(out)
        window = buf.turns
        # budget never exceeded, the counter is exact
        assert buf.token_count == sum(x.tokens for x in window) <= budget
        # evicted turns come back oldest first and only from what was there
        assert [x.id for x in out] == sorted((x.id for x in out), key=lambda s: int(s[1:]))
        assert {x.id for x in out} <= {x.id for x in before} | {t.id}
        # order preserved
        assert [int(x.id[1:]) for x in window] == sorted(int(x.id[1:]) for x in window)
        # a key frame goes only when key frames exceed their share or no non-key turn is left
        if any(x.key_frame for x in out):
            keys_before = sum(x.tokens for x in [*before, t] if x.key_frame)
            non_key_left = sum(x.tokens for x in window if not x.key_frame)
            assert keys_before > buf.key_frame_budget or non_key_left == 0
        # pinned share respected unless one key frame alone is left
        keys_now = [x for x in window if x.key_frame]
        assert sum(x.tokens for x in keys_now) <= buf.key_frame_budget or len(keys_now) <= 1
    # every turn is in the window or was evicted, exactly once
    ids = [x.id for x in evicted_all] + [x.id for x in buf.turns]
    assert sorted(ids) == sorted(x.id for x in added)
    assert len(set(ids)) == len(ids)


@settings(max_examples=60, deadline=None)
@given(specs=turn_specs, budget=st.integers(1, 150))
def test_non_key_turns_go_before_key_frames(specs: list[tuple[int, bool]], budget: int) -> None:
    buf = KeyFrameBuffer(max_tokens=budget, max_key_frame_ratio=1.0)
    for i, (tokens, key) in enumerate(specs):
        t = turn(i, tokens, key)
        keys_before = sum(x.tokens for x in [*buf.turns, t] if x.key_frame)
        out = buf.add(t)
        if any(x.key_frame for x in out):
            # only when key frames alone overflow the budget, or every non-key token is gone
            assert keys_before > budget or sum(x.tokens for x in buf.turns if not x.key_frame) == 0


def test_key_frames_alone_over_budget_do_not_deadlock() -> None:
    buf = KeyFrameBuffer(max_tokens=10, max_key_frame_ratio=1.0)
    assert buf.add(turn(1, 6, key=True)) == []
    out = buf.add(turn(2, 6, key=True))
    assert [x.id for x in out] == ["t1"]
    assert [x.id for x in buf.turns] == ["t2"] and buf.token_count == 6


def test_key_frame_share_keeps_room_for_recent_turns() -> None:
    buf = KeyFrameBuffer(max_tokens=100, max_key_frame_ratio=0.5)
    for i in range(5):
        buf.add(turn(i, 20, key=True))
    assert sum(x.tokens for x in buf.key_frames) <= 50
    buf.add(turn(10, 30))
    buf.add(turn(11, 20))
    assert [x.id for x in buf.turns][-2:] == ["t10", "t11"]
    assert buf.token_count <= 100


def test_oversized_turn_is_evicted_at_once() -> None:
    buf = KeyFrameBuffer(max_tokens=10)
    buf.add(turn(1, 3))
    out = buf.add(turn(2, 50))
    assert [x.id for x in out] == ["t1", "t2"]
    assert buf.turns == [] and buf.token_count == 0


def test_duplicate_ids_and_bad_arguments_are_rejected() -> None:
    buf = KeyFrameBuffer(max_tokens=10)
    buf.add(turn(1, 1))
    assert "t1" in buf and len(buf) == 1
    with pytest.raises(InvalidInputError):
        buf.add(turn(1, 1))
    with pytest.raises(InvalidInputError):
        KeyFrameBuffer(max_tokens=0)
    with pytest.raises(InvalidInputError):
        KeyFrameBuffer(max_tokens=10, max_key_frame_ratio=0.0)


def test_clear_returns_everything_in_order() -> None:
    buf = KeyFrameBuffer(max_tokens=100)
    for i in range(4):
        buf.add(turn(i, 5, key=i % 2 == 0))
    assert [x.id for x in buf.clear()] == ["t0", "t1", "t2", "t3"]
    assert buf.token_count == 0 and buf.turns == []
