"""The inspector's edit racing a ``forget_user`` of another process: the forget wins, nothing comes back.

The inspector (``--allow-edit``) saves an edit through :meth:`HybridMemory.edit`, which reads the
memory and writes the changed version back. A forget from a second store object on the same data
(another process: its own connection, or its own Weaviate client) lands between those steps
through a hook on the first store, so the race is deterministic. The edit must answer 404 and
nothing of the user may be left (an upsert without the forget epoch was accepted and brought the
edited memory back). LocalStore on a file and a real Weaviate server (``tests/weaviate_fixtures.py``).
"""

from __future__ import annotations

from http import HTTPStatus

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.errors import NotFoundError, UserForgottenError
from hybrid_memory.inspector.app import InspectorApp, _PageError, _RedirectError
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder
from tests.contract.test_forget_races import _EVERY, _after, _before, _nothing_of_u_left

_FACT = "I love hiking in the Alps every summer with my dog"


def _app(store: MemoryStore) -> tuple[HybridMemory, str]:
    mem = HybridMemory(store, embedder=HashingEmbedder())
    first = mem.remember("u", _FACT, importance=0.9).record
    assert first is not None
    mem.remember("u", "My favourite colour is green", importance=0.8)
    mem.remember("v", "My sister lives in Lisbon", importance=0.9)  # another user: untouched
    return mem, first.id


def _form(mid: str, *, content: str) -> dict[str, str]:
    return {"u": "u", "id": mid, "content": content, "importance": "0.5", "category": "fact", "status": "active"}


@pytest.mark.parametrize("change", ["content", "fields only"])
@pytest.mark.parametrize("step", ["before the read", "after the read"])
def test_inspector_edit_racing_a_forget_of_another_process_answers_404_and_brings_nothing_back(
    stores: tuple[MemoryStore, MemoryStore], step: str, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    mem, mid = _app(app_store)
    other = HybridMemory(other_store, embedder=HashingEmbedder())
    forgotten: list[int] = []

    def forget() -> None:
        forgotten.append(int(other.forget_user("u")))

    if step == "before the read":  # the edit finds nothing
        _before(app_store, "user_epoch", forget, monkeypatch)
        expected = f"no memory {mid!r}"
    else:  # the edit read the memory; its write is refused (upsert: re-embedded content; update: fields)
        _after(app_store, "get", forget, monkeypatch)
        expected = "was forgotten meanwhile"
    app = InspectorApp(mem, allow_edit=True)
    content = "I love hiking in the Dolomites" if change == "content" else _FACT
    with pytest.raises(_PageError) as page:
        app.post("/memory/edit", _form(mid, content=content), token=app.token)
    assert page.value.status == HTTPStatus.NOT_FOUND and expected in page.value.message
    assert forgotten == [2]
    _nothing_of_u_left(app_store)
    _nothing_of_u_left(other_store)


def test_edit_racing_a_forget_raises_user_forgotten_and_a_later_edit_finds_nothing(
    stores: tuple[MemoryStore, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    mem, mid = _app(app_store)
    _after(app_store, "get", lambda: other_store.delete_user("u"), monkeypatch)
    with pytest.raises(UserForgottenError) as err:
        mem.edit(mid, user_id="u", content="I love hiking in the Dolomites")
    assert err.value.user_id == "u"
    assert app_store.list("u", filter=_EVERY) == []
    with pytest.raises(NotFoundError):  # after the forget the memory is gone, not re-creatable by an edit
        mem.edit(mid, user_id="u", importance=0.1)


def test_inspector_edit_without_a_race_saves_and_redirects(stores: tuple[MemoryStore, MemoryStore]) -> None:
    app_store, other_store = stores
    mem, mid = _app(app_store)
    app = InspectorApp(mem, allow_edit=True)
    with pytest.raises(_RedirectError):
        app.post("/memory/edit", _form(mid, content="I love hiking in the Dolomites"), token=app.token)
    seen = other_store.get("u", [mid])  # the other process sees the edit
    assert [(r.content, r.importance) for r in seen] == [("I love hiking in the Dolomites", 0.5)]
    assert mem.recall("Dolomites", user_id="u", k=1)[0].id == mid


@pytest.mark.parametrize("change", ["content", "fields only"])
def test_edit_racing_a_delete_of_another_process_raises_not_found_and_leaves_it_deleted(
    stores: tuple[MemoryStore, MemoryStore], change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_store, other_store = stores
    mem, mid = _app(app_store)
    _after(app_store, "get", lambda: other_store.delete("u", [mid]), monkeypatch)
    with pytest.raises(NotFoundError):
        if change == "content":
            mem.edit(mid, user_id="u", content="I love hiking in the Dolomites")
        else:
            mem.edit(mid, user_id="u", importance=0.1)
    assert app_store.get("u", [mid]) == [] and other_store.get("u", [mid]) == []
    assert [r.content for r in other_store.list("u", filter=_EVERY)] == ["My favourite colour is green"]
