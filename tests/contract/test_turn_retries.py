"""A retried ``add_turn`` (same ``turn_id``) adds nothing, in this process or another.

Work is delivered at least once in a many-process app: a worker dies after its write and before
it answers, a framework runs a step again, a client retries on a timeout. With the id the
application already has for the message, the retry must find the turn and write nothing: not a
second turn in the session's log (every process's short-term window), not a second memory, not a
search context cut from the turn itself. The same id for another turn is refused and leaves
nothing. The store's ``append_turns`` keeps one turn per id too, whichever process appends. A
retry that comes after its turn was forgotten (the turn, or its user) brings nothing back: the
store keeps a hash of each turn that left a log for seven days. One whose session only ended is
added to the new window (ending a session forgets nothing; an id numbered anew is not dropped).
LocalStore on a file and a real Weaviate server, each with two store objects on the same data.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from hybrid_memory import HybridMemory, InvalidInputError
from hybrid_memory.records import Turn
from hybrid_memory.stores.base import MemoryFilter, MemoryStore
from hybrid_memory.testing import HashingEmbedder
from tests.contract.test_forget_turns import plain_apps

T0 = datetime(2025, 6, 2, 9, tzinfo=timezone.utc)
_EVERY = MemoryFilter(statuses=("active", "superseded", "archived"))
PIP = "Remember: my greyhound is called Pip"
FED = "Remember: Pip eats twice a day"


class DiedError(Exception):
    """The process died here (raised instead of a real kill; the real kill: tests/reliability)."""


def turn(turn_id: str, text: str, session: str = "s", minutes: int = 0) -> Turn:
    return Turn(
        id=turn_id,
        user_id="u",
        session_id=session,
        role="user",
        content=text,
        timestamp=T0 + timedelta(minutes=minutes),
        importance=0.5,
        key_frame=False,
        tokens=5,
    )


def memories(mem: HybridMemory, needle: str) -> list[str]:
    return [r.content for r in mem.store.list("u", filter=_EVERY) if needle in r.content]


def test_append_turns_keeps_one_turn_per_id_whichever_process_appends(stores: tuple[MemoryStore, MemoryStore]) -> None:
    a, b = stores
    epoch = a.user_epoch("u")
    (first,) = a.append_turns([turn("t-1", PIP)], epoch=epoch)
    # another process retries the same turn a minute later: it gets the stored one back
    (again,) = b.append_turns([turn("t-1", PIP, minutes=1)], epoch=epoch)
    assert again == first
    # a batch with a stored id and a new one, the new one twice: each id once
    out = b.append_turns([turn("t-1", PIP), turn("t-2", FED, minutes=2), turn("t-2", FED, minutes=2)], epoch=epoch)
    assert [t.id for t in out] == ["t-1", "t-2", "t-2"]
    assert out[0] == first and out[1] == out[2] and out[1].seq > first.seq
    for store in stores:
        log = store.load_session("u", "s")
        assert [(t.id, t.content, t.timestamp) for t in log.turns] == [
            ("t-1", PIP, T0),
            ("t-2", FED, T0 + timedelta(minutes=2)),
        ]
        assert log.count == 2
    # an id of another session is not moved into this one
    (other,) = a.append_turns([turn("t-1", "something else", session="s2")], epoch=epoch)
    assert other == first
    assert a.load_session("u", "s2").count == 0


def test_a_retried_add_turn_adds_nothing_in_this_or_another_process(stores: tuple[MemoryStore, MemoryStore]) -> None:
    with plain_apps(stores) as (app, other):
        first = app.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")
        reply = app.add_turn("u", "s", "assistant", "Lovely name!", timestamp=T0, turn_id="msg-2")
        assert first.id == "msg-1"
        for mem in (app, other, app):  # the retry: here, in another process, here again
            assert mem.add_turn("u", "s", "user", PIP, timestamp=T0 + timedelta(minutes=5), turn_id="msg-1") == first
            assert mem.add_turn("u", "s", "assistant", "Lovely name!", turn_id="msg-2") == reply
        later = other.add_turn("u", "s", "user", FED, timestamp=T0 + timedelta(minutes=1), turn_id="msg-3")
        for mem in (app, other):
            assert [t.id for t in mem.short_term("u", "s")] == ["msg-1", "msg-2", "msg-3"]
        assert memories(app, "Pip") == [PIP, FED]  # the reply is context only; each user turn once
        (fed,) = [r for r in app.store.list("u", filter=_EVERY) if r.content == FED]
        assert fed.context == "Lovely name!" and fed.metadata["turn_id"] == later.id
        assert [r.context for r in app.store.list("u", filter=_EVERY) if r.content == PIP] == [""]


@pytest.mark.parametrize("where", ["before_the_log", "after_the_log"])
def test_a_retry_after_the_first_try_died_between_its_writes_stores_the_turn_once(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    with plain_apps(stores) as (app, other):
        app.add_turn("u", "s", "assistant", "What is your dog called?", timestamp=T0, turn_id="msg-0")
        real = app.store.append_turns

        def dying(turns: Any, *, epoch: int) -> Any:
            if where == "after_the_log":
                real(turns, epoch=epoch)
            raise DiedError  # the memory is written first, then the log

        monkeypatch.setattr(app.store, "append_turns", dying)
        with pytest.raises(DiedError):
            app.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")
        # the request is delivered again, to another process
        retried = other.add_turn("u", "s", "user", PIP, timestamp=T0 + timedelta(minutes=1), turn_id="msg-1")
        assert retried.id == "msg-1"
        assert [t.id for t in other.short_term("u", "s")] == ["msg-0", "msg-1"]
        (pip,) = [r for r in other.store.list("u", filter=_EVERY) if "Pip" in r.content]
        assert pip.content == PIP and pip.context == "What is your dog called?"


def test_a_turn_id_of_another_turn_is_refused_and_leaves_nothing(stores: tuple[MemoryStore, MemoryStore]) -> None:
    with plain_apps(stores) as (app, other):
        app.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")
        refused = [
            (app, "s", "user", "Remember: my cat is called Miso"),  # another text: found in the window
            (app, "s", "assistant", PIP),  # another role
            (other, "s2", "user", "Remember: my parrot is called Kiwi"),  # another session: found by the store
        ]
        for mem, session, role, text in refused:
            with pytest.raises(InvalidInputError, match="msg-1"):
                mem.add_turn("u", session, role, text, timestamp=T0, turn_id="msg-1")
        for mem in (app, other):
            assert [t.content for t in mem.short_term("u", "s")] == [PIP]
            assert mem.short_term("u", "s2") == []
            assert [r.content for r in mem.store.list("u", filter=_EVERY)] == [PIP]


def gone(turn: Turn) -> bool:
    """What a retry of a turn that left its log returns: the turn as given, not stored (``seq`` 0)."""
    return turn.seq == 0


@pytest.mark.parametrize(
    "how", ["forget_turn", "forget_its_memory", "forget_user", "end_then_forget_turn", "end_then_forget_user"]
)
def test_a_late_retry_brings_back_no_forgotten_turn(stores: tuple[MemoryStore, MemoryStore], how: str) -> None:
    with plain_apps(stores) as (app, other):
        app.add_turn("u", "s", "assistant", "What is your dog called?", timestamp=T0, turn_id="msg-0")
        app.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")
        (pip,) = [r for r in app.store.list("u", filter=_EVERY) if r.content == PIP]
        if how == "forget_turn":
            assert other.forget_turn("msg-1", user_id="u", session_id="s") is True
        elif how == "forget_its_memory":
            other.forget(pip.id, user_id="u")
        elif how == "forget_user":
            other.forget_user("u")
        elif how == "end_then_forget_turn":  # the turn left the log with its session, then was forgotten
            other.end_session("u", "s")
            assert other.forget_turn("msg-1", user_id="u", session_id="s") is True
        else:  # the turn left the log with its session, then its user was forgotten
            other.end_session("u", "s")
            other.forget_user("u")
        # the request is delivered again, here and in the other process, minutes later
        for mem in (app, other):
            retried = mem.add_turn("u", "s", "user", PIP, timestamp=T0 + timedelta(minutes=5), turn_id="msg-1")
            assert gone(retried) and retried.id == "msg-1" and retried.content == PIP
            assert "msg-1" not in [t.id for t in mem.short_term("u", "s")]
            assert memories(mem, "Pip") == []
        # the application's next message is a new id: it is added as usual
        fed = other.add_turn("u", "s", "user", FED, timestamp=T0 + timedelta(minutes=6), turn_id="msg-3")
        assert fed.seq > 0 and [t.id for t in app.short_term("u", "s")][-1] == "msg-3"


@pytest.mark.parametrize("how", ["end_session", "clear_session"])
def test_an_id_said_again_after_its_session_ended_is_a_turn_of_the_new_window(
    stores: tuple[MemoryStore, MemoryStore], how: str
) -> None:
    """Ending a session forgets nothing: a late retry, or an id numbered anew, is not dropped."""
    with plain_apps(stores) as (app, other):
        app.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="1")
        getattr(other, how)("u", "s")
        again = app.add_turn("u", "s", "user", FED, timestamp=T0 + timedelta(minutes=1), turn_id="1")
        assert again.seq > 0
        assert [t.content for t in other.short_term("u", "s")] == [FED]
        assert memories(other, "Pip") == [PIP, FED]


def test_a_retry_racing_a_forget_of_its_turn_keeps_nothing(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try lands and is forgotten after the retry checked the id and before it appended."""
    with plain_apps(stores) as (app, other):
        real = app.store.append_turns

        def late(turns: Any, *, epoch: int) -> Any:
            monkeypatch.setattr(app.store, "append_turns", real)
            other.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")  # the first try
            assert other.forget_turn("msg-1", user_id="u", session_id="s") is True
            return real(turns, epoch=epoch)

        monkeypatch.setattr(app.store, "append_turns", late)
        retried = app.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")
        assert gone(retried)
        for mem in (app, other):
            assert mem.short_term("u", "s") == [] and memories(mem, "Pip") == []


def test_retired_turns_are_recorded_by_every_delete_and_seen_by_every_store_object(
    stores: tuple[MemoryStore, MemoryStore],
) -> None:
    a, b = stores
    a.append_turns([turn(f"t-{i}", f"turn {i}", minutes=i) for i in range(4)], epoch=0)
    a.append_turns([turn("t-9", "elsewhere", session="s2")], epoch=0)

    def retired(store: MemoryStore, *ids: str) -> set[str]:
        return store.retired_turns("u", list(ids), epoch=store.user_epoch("u"))

    everything = ("t-0", "t-1", "t-2", "t-3", "t-9")
    assert retired(b, *everything, "never") == set()
    assert a.delete_turns("u", ["t-0", "never-logged"]) == 1
    assert retired(b, "t-0", "t-1", "never-logged") == {"t-0", "never-logged"}  # found or not
    assert b.retired_turns("v", ["t-0"], epoch=0) == set()  # per user
    assert b.delete_session("u", "s") == 3  # ended, not forgotten: a retry may add them again
    assert retired(a, *everything) == {"t-0"}  # and t-0 stays forgotten
    b.delete_user("u")  # now the ended ones and the logged one are forgotten too
    assert retired(a, *everything) == set(everything)


def test_turn_id_is_validated_before_anything_is_written(stores: tuple[MemoryStore, MemoryStore]) -> None:
    with plain_apps(stores) as (app, _):
        for bad in ("", "   ", "x\x00y", "x" * 10_000, 42):
            with pytest.raises(InvalidInputError, match="turn_id"):
                app.add_turn("u", "s", "user", PIP, turn_id=bad)  # type: ignore[arg-type]
        assert app.short_term("u", "s") == [] and app.store.list("u", filter=_EVERY) == []


def test_a_store_without_retired_turns_is_warned_about_once_and_still_works(
    stores: tuple[MemoryStore, MemoryStore], caplog: pytest.LogCaptureFixture
) -> None:
    """A third-party store written before ``retired_turns`` joined the contract."""

    class OlderStore:
        def __init__(self, inner: MemoryStore) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            if name in ("retired_turns", "aretired_turns"):
                raise AttributeError(name)
            return getattr(self._inner, name)

    older = OlderStore(stores[0])
    with HybridMemory(older, embedder=HashingEmbedder()) as mem, caplog.at_level("WARNING", "hybrid_memory.write"):  # type: ignore[arg-type]
        first = mem.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1")
        assert mem.add_turn("u", "s", "user", PIP, timestamp=T0, turn_id="msg-1") == first  # in the log: found
        mem.add_turn("u", "s", "user", FED, timestamp=T0, turn_id="msg-2")
    warnings = [r for r in caplog.records if "retired_turns" in r.getMessage()]
    assert len(warnings) == 1 and "OlderStore" in warnings[0].getMessage()
