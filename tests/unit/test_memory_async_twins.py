"""Every public IO method of the facade has an ``a``-prefixed async twin with exactly its signature."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.testing import HashingEmbedder

#: Public methods that do no IO (in-process state only): a twin would only add a thread hop.
#: (``review_queue`` reads the store: it has its twin.)
_NO_IO = frozenset({"now", "write_log"})


def _public_methods(*, coroutine: bool) -> dict[str, Any]:
    return {
        name: fn
        for name, fn in vars(HybridMemory).items()
        if not name.startswith("_") and inspect.isfunction(fn) and inspect.iscoroutinefunction(fn) == coroutine
    }


SYNC = _public_methods(coroutine=False)
ASYNC = _public_methods(coroutine=True)


def test_the_facade_has_both_kinds_of_methods() -> None:
    assert {"add_turn", "remember", "remember_many", "recall", "build_context", "close"} <= set(SYNC)
    assert {"aadd_turn", "aremember", "aremember_many", "arecall", "abuild_context", "aclose"} <= set(ASYNC)


@pytest.mark.parametrize("name", sorted(set(SYNC) - _NO_IO))
def test_every_io_method_has_a_twin_with_the_same_parameters(name: str) -> None:
    twin = ASYNC.get(f"a{name}")
    assert twin is not None, f"HybridMemory.{name} has no async twin a{name}"
    sync_params = list(inspect.signature(SYNC[name]).parameters.values())
    twin_params = list(inspect.signature(twin).parameters.values())
    # Same names, kinds (positional / keyword-only), defaults and annotations, in the same order.
    assert [(p.name, p.kind, p.default, p.annotation) for p in twin_params] == [
        (p.name, p.kind, p.default, p.annotation) for p in sync_params
    ]
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in twin_params)
    assert inspect.signature(twin).return_annotation == inspect.signature(SYNC[name]).return_annotation
    assert twin.__name__ == f"a{name}" and f":meth:`{name}`" in (twin.__doc__ or "")


def test_every_twin_belongs_to_a_sync_method() -> None:
    assert {name for name in ASYNC if name[1:] not in SYNC} == set()


def test_no_io_methods_are_really_public_sync_methods() -> None:
    assert set(SYNC) >= _NO_IO


class _ThreadRecordingEmbedder(HashingEmbedder):
    """Records the thread of every document embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def _raw_documents(self, texts: list[str]) -> Any:
        self.threads.append(threading.get_ident())
        return super()._raw_documents(texts)


async def test_twins_run_off_the_event_loop_with_keyword_arguments() -> None:
    emb = _ThreadRecordingEmbedder()
    mem = HybridMemory(embedder=emb)
    try:
        out = await mem.aremember("u", "Alice's cat is called Miso", importance=0.8, tags=("pets",))
        assert out.action == "added" and out.record is not None and out.record.tags == ("pets",)
        hits = await mem.arecall("what is the cat called", user_id="u", k=1, alpha=0.5)
        assert [h.content for h in hits] == ["Alice's cat is called Miso"]
        assert emb.threads and threading.get_ident() not in emb.threads
        turn = await mem.aadd_turn("u", "s", "user", "I like green tea")
        assert [t.id for t in await mem.ashort_term("u", "s")] == [turn.id]
        await mem.aremember("u", "I eat meat", importance=0.8)
        await mem.aremember("u", "I no longer eat meat", importance=0.8)
        queued = await mem.areview_queue("u")  # read from the store, off the loop
        assert [(r.action, r.old_content, r.new_content) for r in queued] == [
            ("superseded", "I eat meat", "I no longer eat meat")
        ]
        with pytest.raises(TypeError):
            await mem.arecall("cat", user_id="u", kk=1)  # type: ignore[call-arg]
    finally:
        await mem.aclose()
