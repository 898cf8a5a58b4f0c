"""No lock shared by every user is held across embedding: a slow embedder stalls only its own caller.

An embedder that blocks on an :class:`threading.Event` for one text holds one thread (a user's
``add_turn``, or the background extraction) inside the embedding; meanwhile another thread serves
another user from start to end. Events and joins with generous timeouts, no wall-clock checks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import FakeListChatModel

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.write.extraction import FactExtractor

WAIT = 30.0  # seconds; only reached when something is stuck


class BlockingEmbedder(HashingEmbedder):
    """Blocks every document embedding that contains ``marker`` until ``release`` is set."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.entered = threading.Event()
        self.release = threading.Event()

    def _raw_documents(self, texts: list[str]) -> Any:
        if any(self.marker in t for t in texts):
            self.entered.set()
            assert self.release.wait(WAIT)
        return super()._raw_documents(texts)


def _bob_is_served(mem: HybridMemory) -> list[str]:
    """Everything another user does in one turn; returns what the steps saw."""
    seen: list[str] = []
    turn = mem.add_turn("bob", "s", "user", "Remember: I drink green tea every morning")
    seen.append(turn.content)
    seen.append(mem.remember("bob", "Bob's dog is called Rex", importance=0.8).action)
    seen.extend(t.content for t in mem.short_term("bob", "s"))
    seen.extend(h.content for h in mem.recall("what is the dog called", user_id="bob", k=1))
    seen.append(mem.build_context("what is my dog called?", user_id="bob", session_id="s").text)
    return seen


def _run(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_a_blocked_add_turn_does_not_stall_another_user() -> None:
    emb = BlockingEmbedder("SLOW-EMBED")
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb)
    errors: list[BaseException] = []

    def alice() -> None:
        try:
            mem.add_turn("alice", "s", "user", "Remember: my locker code is SLOW-EMBED 4411")
        except BaseException as exc:  # pragma: no cover - reported by the assert below
            errors.append(exc)

    a = _run(alice)
    try:
        assert emb.entered.wait(WAIT)  # alice's turn is inside the embedder now
        seen: list[str] = []
        b = _run(lambda: seen.extend(_bob_is_served(mem)))
        b.join(WAIT)
        assert not b.is_alive(), "bob waited for alice's embedding"
        assert a.is_alive() and not emb.release.is_set()  # alice was still blocked all along
        assert seen[:2] == ["Remember: I drink green tea every morning", "added"]
        assert "Bob's dog is called Rex" in seen and "Rex" in seen[-1]
    finally:
        emb.release.set()
        a.join(WAIT)
    assert not a.is_alive() and errors == []
    assert [t.content for t in mem.short_term("alice", "s")] == ["Remember: my locker code is SLOW-EMBED 4411"]
    mem.close()


def test_a_blocked_background_extraction_does_not_stall_writes_of_another_user() -> None:
    fact = "The user is allergic to shellfish (SLOW-EMBED)."
    reply = json.dumps({"memories": [{"content": fact, "category": "fact", "importance": 9, "source_turns": [1]}]})
    emb = BlockingEmbedder("SLOW-EMBED")
    ex = FactExtractor(FakeListChatModel(responses=[reply]), method="json_mode", batch_turns=3)
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=emb, extractor=ex)
    try:
        for text in ("hey there, long day", "btw I am allergic to shellfish, it makes me sick", "anyway, dinner?"):
            mem.add_turn("ann", "s", "user", text)  # the third fills a batch for the extractor
        assert emb.entered.wait(WAIT)  # the background job embeds the extracted fact now
        seen: list[str] = []
        b = _run(lambda: seen.extend(_bob_is_served(mem)))
        b.join(WAIT)
        assert not b.is_alive(), "bob's writes waited for the background embedding"
        assert not emb.release.is_set() and mem._sessions.worker.pending == 1  # still blocked
        assert seen[:2] == ["Remember: I drink green tea every morning", "added"]
    finally:
        emb.release.set()
    assert mem.flush(timeout=WAIT)
    assert [
        h.content for h in mem.recall("shellfish allergy", user_id="ann", k=5) if h.record.source == "inferred"
    ] == [fact]
    mem.close()
