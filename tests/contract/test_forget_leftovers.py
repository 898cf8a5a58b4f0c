"""What a forgotten or rewritten memory leaves behind elsewhere: review reasons, trace steps, the write log.

A conflict review's reason quotes the old memory's details ("number changed (4711 → 9999)"), the
write that superseded it says the same in its outcome and trace step, and the in-process write
log holds the memory itself. An operator (another process, its own store object) who forgets the
old PIN, or edits it out, must find it in none of them: not in the app's review queue (read from
the store), not in the trace file on disk, not in the write log of the process that forgets.
LocalStore on a file and a real Weaviate server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.testing import HashingEmbedder

OLD, NEW = "我的门禁密码是4711", "我的门禁密码是9999"


def _raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))


@pytest.mark.parametrize("how", ["forget", "edit"])
def test_a_forgotten_or_edited_old_value_leaves_no_review_trace_or_write_log_behind(
    stores: tuple[MemoryStore, MemoryStore], how: str, tmp_path: Path
) -> None:
    app_store, operator_store = stores
    trace = tmp_path / "steps.sqlite"
    app = HybridMemory(app_store, embedder=HashingEmbedder())
    operator = HybridMemory(operator_store, embedder=HashingEmbedder(), trace=trace)
    try:
        old = operator.remember("u", OLD, importance=0.9).record
        new = operator.remember("u", NEW, importance=0.9)
        assert old is not None and new.action == "superseded" and "4711" in (new.reason or "")
        [review] = app.review_queue("u")  # stored with the new memory: every process sees it
        assert (review.old_id, review.new_id) == (old.id, new.record.id if new.record else None)
        assert "4711" in review.reason and b"4711" in _raw(trace)
        if how == "forget":
            assert operator.forget(old.id, user_id="u")
        else:
            operator.edit(old.id, user_id="u", content="我的门禁密码已经换了")
        assert app.review_queue("u") == [] and operator.review_queue("u") == []
        assert [r.content for r in app.list_memories("u", filter=None) if "4711" in str(r.metadata)] == []
        logged = operator.write_log("u")
        assert [o for o in logged if "4711" in o.model_dump_json()] == []
        assert [o.reason for o in logged if o.action == "superseded"] == ["[forgotten]"]
        assert b"4711" not in _raw(trace)
    finally:
        app.close()
        operator.close()


def test_an_edited_new_value_drops_its_own_review(stores: tuple[MemoryStore, MemoryStore]) -> None:
    app_store, operator_store = stores
    app = HybridMemory(app_store, embedder=HashingEmbedder())
    operator = HybridMemory(operator_store, embedder=HashingEmbedder())
    try:
        app.remember("u", OLD, importance=0.9)
        new = app.remember("u", NEW, importance=0.9).record
        assert new is not None and len(operator.review_queue("u")) == 1
        operator.edit(new.id, user_id="u", content="我的门禁密码换成了新的")
        assert app.review_queue("u") == []  # its reason quoted the text as it was
        assert "9999" not in str(app.get(new.id, user_id="u").metadata)
    finally:
        app.close()
        operator.close()
