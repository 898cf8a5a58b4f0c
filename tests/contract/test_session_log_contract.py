"""The conversation-state contract every MemoryStore passes: turn logs and forget epochs.

A store is the single source of truth for conversation state (architecture §10): the ordered,
durable log of each session's turns and each user's forget epoch, which every write that carries
``epochs`` checks. Parametrised over STORE_FACTORIES (conftest.py); the two-store tests open a
second store object on the same data, as another process would.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from hybrid_memory.errors import InvalidInputError, NotFoundError, UserForgottenError
from hybrid_memory.records import Turn
from hybrid_memory.stores.base import MemoryStore, SessionLog
from tests.contract.store_contract_helpers import DIM, T0, mat, rec, vec


def turn(user: str, session: str, content: str, *, minute: int = 0, **fields: object) -> Turn:
    return Turn(
        id=str(uuid.uuid4()),
        user_id=user,
        session_id=session,
        role=fields.pop("role", "user"),  # type: ignore[arg-type]
        content=content,
        timestamp=T0 + timedelta(minutes=minute, microseconds=123_456),
        **fields,  # type: ignore[arg-type]
    )


def contents(log: SessionLog) -> list[str]:
    return [t.content for t in log.turns]


def append(store: MemoryStore, *turns: Turn) -> list[Turn]:
    user = turns[0].user_id
    return store.append_turns(list(turns), epoch=store.user_epoch(user))


# -- forget epochs ------------------------------------------------------------------------------
def test_epoch_starts_at_zero_and_moves_on_every_delete_user(store: MemoryStore) -> None:
    assert store.user_epoch("alice") == 0
    assert store.delete_user("alice") == 0
    first = store.user_epoch("alice")
    assert first != 0
    store.delete_user("alice")
    assert store.user_epoch("alice") not in (0, first)
    assert store.user_epoch("bob") == 0  # per user


def test_writes_with_the_current_epoch_are_accepted(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    store.delete_user("alice")
    epoch = store.user_epoch("alice")
    r = rec("alice", "written after the forget")
    store.upsert([r], mat(vec(1)), epochs={"alice": epoch})
    store.update([r.evolve(content="edited after the forget")], epochs={"alice": epoch})
    [stored] = store.append_turns([turn("alice", "s1", "hello again")], epoch=epoch)
    assert store.get("alice", [r.id])[0].content == "edited after the forget"
    assert contents(store.load_session("alice", "s1")) == ["hello again"]
    assert stored.seq > 0


def test_a_stale_epoch_refuses_upsert_update_and_append_and_writes_nothing(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    stale = store.user_epoch("alice")
    kept = rec("alice", "the cat sleeps on the sofa")
    store.upsert([kept], mat(vec(1)), epochs={"alice": stale})
    store.delete_user("alice")
    fresh = rec("alice", "written after the forget", minutes=1)
    store.upsert([fresh], mat(vec(0, 1)))  # no epochs: new data is accepted

    with pytest.raises(UserForgottenError) as info:
        store.upsert([rec("alice", "buffered before the forget")], mat(vec(1)), epochs={"alice": stale})
    assert info.value.user_id == "alice"
    with pytest.raises(UserForgottenError):
        store.update([fresh.evolve(content="an edit from before the forget")], epochs={"alice": stale})
    with pytest.raises(UserForgottenError):
        store.append_turns([turn("alice", "s1", "said before the forget")], epoch=stale)
    # A whole multi-user write is refused when one of its users was forgotten.
    with pytest.raises(UserForgottenError):
        store.upsert(
            [rec("bob", "bob's memory"), rec("alice", "alice's")],
            mat(vec(1), vec(0, 1)),
            epochs={"bob": store.user_epoch("bob"), "alice": stale},
        )

    assert store.list("alice") == [fresh]
    assert store.count("bob") == 0
    log = store.load_session("alice", "s1")
    assert (log.turns, log.count) == ((), 0)


def test_update_reports_a_forget_before_a_missing_id(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    r = rec("alice", "forgotten soon")
    stale = store.user_epoch("alice")
    store.upsert([r], mat(vec(1)), epochs={"alice": stale})
    store.delete_user("alice")
    with pytest.raises(UserForgottenError):  # not NotFoundError about an id the caller had
        store.update([r.evolve(content="edited")], epochs={"alice": stale})
    with pytest.raises(NotFoundError):
        store.update([r.evolve(content="edited")], epochs={"alice": store.user_epoch("alice")})
    assert store.count("alice") == 0


def test_delete_user_removes_turns_too(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    store.upsert([rec("alice", "a memory")], mat(vec(1)))
    append(store, turn("alice", "s1", "one"), turn("alice", "s2", "two"))
    append(store, turn("bob", "s1", "bob's turn"))
    assert store.delete_user("alice") == 1
    for session in ("s1", "s2"):
        log = store.load_session("alice", session)
        assert (log.turns, log.count, log.epoch) == ((), 0, store.user_epoch("alice"))
    assert contents(store.load_session("bob", "s1")) == ["bob's turn"]


# -- turn logs ----------------------------------------------------------------------------------
def test_append_returns_seqs_and_load_round_trips_every_field(store: MemoryStore) -> None:
    first = turn("alice", "s1", "I live in Berlin.", importance=0.9, key_frame=True, tokens=5, scoring_note="why")
    second = turn("alice", "s1", "Noted!", minute=1, role="assistant", tokens=2)
    stored = append(store, first, second)
    assert [t.id for t in stored] == [first.id, second.id]
    assert 0 < stored[0].seq < stored[1].seq
    assert [t.model_copy(update={"seq": 0}) for t in stored] == [first, second]
    log = store.load_session("alice", "s1")
    assert log.turns == tuple(stored)  # every field, the timestamp to the microsecond
    assert (log.count, log.epoch) == (2, 0)


def test_seqs_increase_in_append_order_and_after_seq_reads_the_rest(store: MemoryStore) -> None:
    stored: list[Turn] = []
    for i in range(12):  # one at a time, faster than any clock tick
        stored += append(store, turn("alice", "s1", f"turn {i}"))
    stored += append(store, *(turn("alice", "s1", f"batch {i}") for i in range(3)))
    seqs = [t.seq for t in stored]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    log = store.load_session("alice", "s1")
    assert contents(log) == [f"turn {i}" for i in range(12)] + [f"batch {i}" for i in range(3)]
    tail = store.load_session("alice", "s1", after_seq=stored[9].seq)
    assert contents(tail) == ["turn 10", "turn 11", "batch 0", "batch 1", "batch 2"]
    assert tail.count == 15
    after_all = store.load_session("alice", "s1", after_seq=stored[-1].seq)
    assert (after_all.turns, after_all.count) == ((), 15)


def test_turn_logs_are_per_user_and_per_session(store: MemoryStore) -> None:
    append(store, turn("alice", "s1", "alice s1"), turn("alice", "s2", "alice s2"))
    append(store, turn("bob", "s1", "bob s1"))
    assert contents(store.load_session("alice", "s1")) == ["alice s1"]
    assert contents(store.load_session("alice", "s2")) == ["alice s2"]
    assert contents(store.load_session("bob", "s1")) == ["bob s1"]
    assert store.load_session("bob", "s2").count == 0
    assert store.load_session("carol", "s1") == SessionLog(turns=(), count=0, epoch=0)
    assert store.count("alice") == 0  # turn logs are not memories


def test_delete_session_deletes_one_log(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    store.upsert([rec("alice", "a memory of s1", session_id="s1")], mat(vec(1)))
    append(store, *(turn("alice", "s1", f"s1 turn {i}") for i in range(3)))
    append(store, turn("alice", "s2", "s2 turn"), turn("alice", "s2", "s2 again"))
    append(store, turn("bob", "s1", "bob's s1"))
    assert store.delete_session("alice", "s1") == 3
    assert store.load_session("alice", "s1") == SessionLog(turns=(), count=0, epoch=0)
    assert store.load_session("alice", "s2").count == 2
    assert contents(store.load_session("bob", "s1")) == ["bob's s1"]
    assert store.count("alice") == 1  # long-term memories stay
    assert store.delete_session("alice", "s1") == 0
    assert store.delete_session("nobody", "s9") == 0
    # The session can be continued: its new turns sort after nothing old.
    append(store, turn("alice", "s1", "a fresh start"))
    assert contents(store.load_session("alice", "s1")) == ["a fresh start"]


def test_append_and_load_check_their_input(store: MemoryStore) -> None:
    assert store.append_turns([], epoch=0) == []
    with pytest.raises(InvalidInputError):
        store.append_turns([turn("alice", "s1", "a"), turn("bob", "s1", "b")], epoch=0)
    with pytest.raises(InvalidInputError):
        store.load_session("alice", "s1", after_seq=-1)
    with pytest.raises(InvalidInputError):
        store.load_session("alice", "")


async def test_async_twins(store: MemoryStore) -> None:
    store.bind_embedder("contract-test", DIM)
    assert await store.auser_epoch("alice") == 0
    stored = await store.aappend_turns([turn("alice", "s1", "async turn")], epoch=0)
    log = await store.aload_session("alice", "s1")
    assert log.turns == tuple(stored) and log.count == 1
    assert (await store.aload_session("alice", "s1", after_seq=stored[0].seq)).turns == ()
    r = rec("alice", "async memory")
    await store.aupsert([r], mat(vec(1)), epochs={"alice": 0})
    await store.aupdate([r.evolve(content="async edit")], epochs={"alice": 0})
    assert await store.adelete_session("alice", "s1") == 1
    assert await store.adelete_user("alice") == 1
    with pytest.raises(UserForgottenError):
        await store.aappend_turns([turn("alice", "s1", "too late")], epoch=0)
    with pytest.raises(UserForgottenError):
        await store.aupsert([rec("alice", "too late")], mat(vec(1)), epochs={"alice": 0})
    with pytest.raises(UserForgottenError):
        await store.aupdate([r], epochs={"alice": 0})
    assert await store.auser_epoch("alice") != 0


# -- two store objects on the same data (as two processes) --------------------------------------
def test_two_stores_share_turn_logs_and_forgets(store: MemoryStore, store_twin: MemoryStore) -> None:
    a, b = store, store_twin
    a.bind_embedder("contract-test", DIM)
    b.bind_embedder("contract-test", DIM)
    # Turn 1 through A, turn 2 through B (which read A's turn first), and so on: one log.
    for i in range(6):
        writer = a if i % 2 == 0 else b
        writer.load_session("alice", "s1")
        append(writer, turn("alice", "s1", f"turn {i}"))
    log_a, log_b = a.load_session("alice", "s1"), b.load_session("alice", "s1")
    assert log_a == log_b
    assert contents(log_a) == [f"turn {i}" for i in range(6)]
    seqs = [t.seq for t in log_a.turns]
    assert seqs == sorted(seqs) and len(set(seqs)) == 6
    assert contents(b.load_session("alice", "s1", after_seq=seqs[3])) == ["turn 4", "turn 5"]

    # A read the epoch (as a buffered turn or a background job would), then B forgets the user.
    stale = a.user_epoch("alice")
    memory = rec("alice", "said before the forget")
    a.upsert([memory], mat(vec(1)), epochs={"alice": stale})
    b.delete_user("alice")
    assert a.user_epoch("alice") == b.user_epoch("alice") != stale
    with pytest.raises(UserForgottenError):
        a.append_turns([turn("alice", "s1", "buffered before the forget")], epoch=stale)
    with pytest.raises(UserForgottenError):
        a.upsert([rec("alice", "extracted before the forget")], mat(vec(1)), epochs={"alice": stale})
    with pytest.raises(UserForgottenError):
        a.update([memory.evolve(content="summarised before the forget")], epochs={"alice": stale})
    for s in (a, b):
        assert s.count("alice") == 0
        assert s.load_session("alice", "s1").turns == ()

    # New data after the forget is accepted through either store.
    append(a, turn("alice", "s1", "hello again"))
    assert contents(b.load_session("alice", "s1")) == ["hello again"]
