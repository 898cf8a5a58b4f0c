"""``HybridMemory.edit``: an operator's in-place correction of one memory (the inspector's edit form)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.errors import InvalidInputError, NotFoundError
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)


def test_edit_changes_only_the_given_fields_and_keeps_the_vector_when_the_text_stays() -> None:
    clock = {"now": T0}
    with HybridMemory(embedder=HashingEmbedder(), clock=lambda: clock["now"]) as mem:
        rec = mem.remember("u", "I live in Berlin", importance=0.8, tags=("home",)).record
        assert rec is not None
        before = mem.store.get_vectors("u", [rec.id])[rec.id]
        clock["now"] = T0 + timedelta(hours=1)
        new = mem.edit(rec.id, user_id="u", importance=0.3, status="archived")
        assert (new.content, new.importance, new.status, new.tags) == ("I live in Berlin", 0.3, "archived", ("home",))
        assert new.updated_at == T0 + timedelta(hours=1) and mem.get(rec.id, user_id="u") == new
        assert (mem.store.get_vectors("u", [rec.id])[rec.id] == before).all()
        assert mem.edit(rec.id, user_id="u", tags=[]).tags == ()


def test_edit_redacts_and_re_embeds_a_new_text() -> None:
    with HybridMemory(embedder=HashingEmbedder()) as mem:
        rec = mem.remember("u", "I live in Berlin", importance=0.8).record
        assert rec is not None
        new = mem.edit(rec.id, user_id="u", content="Call me at 13812345678 in Lisbon")
        assert new.content == "Call me at [PHONE] in Lisbon" and new.id == rec.id
        assert mem.recall("Lisbon", user_id="u", k=1)[0].id == rec.id


def test_edit_refuses_bad_input_and_unknown_memories() -> None:
    with HybridMemory(embedder=HashingEmbedder()) as mem:
        rec = mem.remember("u", "I live in Berlin", importance=0.8).record
        assert rec is not None
        with pytest.raises(NotFoundError):
            mem.edit(rec.id, user_id="someone-else", importance=0.1)  # never another user's memory
        with pytest.raises(InvalidInputError):
            mem.edit(rec.id, user_id="u", importance=1.5)
        with pytest.raises(InvalidInputError):
            mem.edit(rec.id, user_id="u", tags="home")  # a str is a Sequence[str]: refused, not split into letters
        with pytest.raises(InvalidInputError):
            mem.edit("", user_id="u")
        assert mem.get(rec.id, user_id="u").importance == 0.8
