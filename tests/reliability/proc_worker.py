"""An application process for the multi-process tests (``tests/reliability/test_processes.py``).

Run as ``python -m tests.reliability.proc_worker SPEC_JSON`` from the repository root. ``SPEC_JSON``
names the store (``{"kind": "local", "path": ...}`` or ``{"kind": "weaviate", "url": ...,
"grpc_port": ..., "collection": ..., "dead_letter_path": ...}``, optionally ``"api_key"``), the trace file and one mode:

* ``add``: ``add_turn`` each of ``turns`` (``[session, role, text]``, or ``[session, role, text,
  turn_id]``), print ``ADDED <json>`` with the stored turns and the window, then ``close()`` and
  exit; with ``"hang": true`` it neither closes nor exits after printing (the test kills it with
  SIGKILL). With ``"die": ["before" | "after", n]`` the process SIGKILLs itself inside the store's
  turn append of its ``n``-th ``add_turn`` (0-based), before or after the append lands. With ``"extract":
  {"responses": [...], "batch_turns": n}`` the memory extracts facts with a fake chat model
  answering ``responses`` in turn.
* ``talk``: ``add_turn`` numbered user turns into ``session`` until the file ``stop`` exists, then
  ``end_session`` and ``close``; every call is logged to ``log`` as one JSON line with its start and
  end on ``time.monotonic()`` (one clock for every process of the machine) and its outcome.
* ``mixed``: for ``seconds``, a seeded random mix of ``add_turn``, ``remember``, ``forget`` /
  ``forget_turn`` (of one of this process's own acknowledged writes), ``recall``, ``build_context``
  and ``end_session`` over ``users``; every acknowledged write and forget and every recall that
  returned another user's memory is logged.
* ``summarize``: ``add`` on a memory that summarises each session every ``summary_every`` turns
  with the extractive :class:`~hybrid_memory.write.summary.SessionSummarizer` (``close()`` runs
  a summary that became due; ``tests/reliability/test_processes_summary.py``).

The embedder is the lexical ``HashingEmbedder`` (fast and deterministic); what is under test is the
store as the single source of truth, not the embedding model.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hybrid_memory import HybridMemory, HybridMemoryConfig
from hybrid_memory.errors import HybridMemoryError
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 5, 1, 9, tzinfo=timezone.utc)


def open_store(spec: dict[str, Any]) -> Any:
    if spec["kind"] == "local":
        from hybrid_memory import LocalStore

        return LocalStore(spec["path"])
    from hybrid_memory.stores.weaviate import WeaviateStore

    return WeaviateStore.connect(
        spec["url"],
        grpc_port=spec["grpc_port"],
        api_key=spec.get("api_key"),
        collection=spec["collection"],
        dead_letter_path=spec["dead_letter_path"],
    )


def open_memory(spec: dict[str, Any]) -> HybridMemory:
    config = HybridMemoryConfig(
        buffer={"max_tokens": spec.get("max_tokens", 2000), "idle_flush_minutes": 0},  # type: ignore[arg-type]
        writer={"turn_min_importance": 0.0},  # type: ignore[arg-type]
    )
    extractor = None
    if spec.get("extract"):
        from langchain_core.language_models import FakeListChatModel

        from hybrid_memory.write.extraction import FactExtractor

        llm = FakeListChatModel(responses=spec["extract"]["responses"])
        extractor = FactExtractor(llm, method="json_mode", batch_turns=spec["extract"]["batch_turns"])
    return HybridMemory(
        store=open_store(spec["store"]),
        embedder=HashingEmbedder(),
        config=config,
        trace=spec.get("trace") or False,
        extractor=extractor,
    )


def _log(path: str, **row: Any) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()


def _die_in_append(mem: HybridMemory, when: str) -> None:
    """Make the store's next turn append kill this process, ``before`` or ``after`` it lands."""
    store = mem.store
    real = store.append_turns

    def dying(turns: Any, *, epoch: int) -> Any:
        if when == "after":
            real(turns, epoch=epoch)
        os.kill(os.getpid(), signal.SIGKILL)

    store.append_turns = dying  # type: ignore[method-assign]


def add(spec: dict[str, Any], mem: HybridMemory | None = None) -> None:
    mem = open_memory(spec) if mem is None else mem
    user = spec["user"]
    die = spec.get("die")
    stored = []
    for i, (session, role, text, *turn_id) in enumerate(spec["turns"]):
        if die is not None and die[1] == i:
            _die_in_append(mem, die[0])
        turn = mem.add_turn(user, session, role, text, timestamp=T0, turn_id=turn_id[0] if turn_id else None)
        stored.append(turn.model_dump(mode="json"))
    window = {s: [t.content for t in mem.short_term(user, s)] for s in sorted({t[0] for t in spec["turns"]})}
    print("ADDED " + json.dumps({"turns": stored, "window": window}, ensure_ascii=False), flush=True)
    if spec.get("hang"):
        while True:  # killed by the test with SIGKILL, never closed
            time.sleep(3600)
    mem.close()


def talk(spec: dict[str, Any]) -> None:
    mem = open_memory(spec)
    user, session, name = spec["user"], spec["session"], spec["name"]
    stop = Path(spec["stop"])
    i = 0
    while not stop.exists():
        text = f"Remember: {name} note {i} about the garden"
        start = time.monotonic()
        try:
            mem.add_turn(user, session, "user", text, timestamp=T0 + timedelta(seconds=i))
            outcome = "ok"
        except HybridMemoryError as exc:
            outcome = type(exc).__name__
        _log(spec["log"], text=text, start=start, end=time.monotonic(), outcome=outcome)
        i += 1
    start = time.monotonic()
    mem.end_session(user, session)
    mem.close()
    _log(spec["log"], text="<end_session>", start=start, end=time.monotonic(), outcome="ok")


def mixed(spec: dict[str, Any]) -> None:
    mem = open_memory(spec)
    rng = random.Random(spec["seed"])
    users: list[str] = spec["users"]
    name = spec["name"]
    deadline = time.monotonic() + float(spec["seconds"])
    i = 0
    mine: list[tuple[str, str, str, str | None]] = []  # (user, text, memory or turn id, the turn's session)
    while time.monotonic() < deadline:
        user = rng.choice(users)
        session = f"{name}-{rng.randrange(3)}"
        op = rng.random()
        i += 1
        text = f"{user} fact {name}-{i}: likes colour {rng.randrange(10**6)}"
        if op < 0.35:
            turn = mem.add_turn(user, session, "user", text, timestamp=T0 + timedelta(seconds=i))
            _log(spec["log"], op="add_turn", user=user, text=text)
            mine.append((user, text, turn.id, session))
        elif op < 0.58:
            out = mem.remember(user, text, importance=0.7, timestamp=T0 + timedelta(seconds=i))
            _log(spec["log"], op="remember", user=user, text=text, action=out.action)
            if out.action == "added" and out.record is not None:
                mine.append((user, text, out.record.id, None))
        elif op < 0.65 and mine:
            user, text, ref, turn_session = mine.pop(rng.randrange(len(mine)))
            if turn_session is None:
                mem.forget(ref, user_id=user)
            else:
                mem.forget_turn(ref, user_id=user, session_id=turn_session)
            _log(spec["log"], op="forget", user=user, text=text)
        elif op < 0.85:
            hits = mem.recall("likes colour fact", user_id=user, k=10, now=T0 + timedelta(days=1))
            foreign = [h.content for h in hits if h.record.user_id != user or not h.content.startswith(user + " ")]
            _log(spec["log"], op="recall", user=user, foreign=foreign, n=len(hits))
        elif op < 0.95:
            ctx = mem.build_context("which colour do I like", user_id=user, session_id=session, now=T0)
            foreign = [h.content for h in ctx.hits if not h.content.startswith(user + " ")]
            _log(spec["log"], op="build_context", user=user, foreign=foreign)
        else:
            mem.end_session(user, session)
            _log(spec["log"], op="end_session", user=user, session=session)
    mem.close()
    _log(spec["log"], op="closed")


def summarize(spec: dict[str, Any]) -> None:
    from hybrid_memory.write.summary import SessionSummarizer

    config = HybridMemoryConfig(
        buffer={"idle_flush_minutes": 0, "summary_every": spec["summary_every"]},  # type: ignore[arg-type]
        writer={"turn_min_importance": 0.0},  # type: ignore[arg-type]
    )
    summarizer = SessionSummarizer()
    add(
        spec,
        HybridMemory(store=open_store(spec["store"]), embedder=HashingEmbedder(), config=config, summarizer=summarizer),
    )


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    {"add": add, "talk": talk, "mixed": mixed, "summarize": summarize}[spec["mode"]](spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
