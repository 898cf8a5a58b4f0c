"""A LangGraph agent resumed after its worker died mid-recording stores each turn once.

LangGraph runs a node again when the process died before the node's result was checkpointed
(durable execution, ``durability="sync"``: ``agent.invoke(None, config)`` continues the thread
from its last checkpoint). The middleware records the user message and the answer in ``after_agent``; a
worker killed between those writes and the checkpoint must not make the resumed run add them a
second time. A child process runs the agent with a SQLite checkpointer and exits (``os._exit``,
no cleanup) inside the store's turn append, before or after the write lands; this process resumes
the thread from the same checkpoint file and memory file.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langgraph.checkpoint.sqlite import SqliteSaver

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder
from langchain_hybrid_memory import HybridMemoryMiddleware

ROOT = Path(__file__).resolve().parents[3]
SAID = "Remember: my greyhound is called Pip and eats twice a day."
ANSWER = "Noted: Pip, fed twice a day."
CONFIG = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
_EVERY = MemoryFilter(statuses=("active", "superseded", "archived"))

WORKER = textwrap.dedent(
    """
    import os, sqlite3, sys
    from langchain.agents import create_agent
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from hybrid_memory import HybridMemory, LocalStore
    from hybrid_memory.testing import HashingEmbedder
    from langchain_hybrid_memory import HybridMemoryMiddleware

    db, checkpoints, when, said, answer = sys.argv[1:6]
    store = LocalStore(db)
    append = store.append_turns

    def dying(turns, *, epoch):
        if when == "before" and any(t.role == "assistant" for t in turns):
            os._exit(9)  # the user's turn is in the log, the answer is not
        out = append(turns, epoch=epoch)
        if when == "after" and any(t.role == "assistant" for t in turns):
            os._exit(9)  # both turns are in the log; LangGraph never checkpointed after_agent
        return out

    store.append_turns = dying
    mem = HybridMemory(store, embedder=HashingEmbedder())
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    model = GenericFakeChatModel(messages=iter([AIMessage(content=answer)]))
    agent = create_agent(model, middleware=[HybridMemoryMiddleware(mem)], checkpointer=saver)
    agent.invoke(  # each step's checkpoint is written before the next step starts
        {"messages": [("user", said)]},
        config={"configurable": {"thread_id": "t1", "user_id": "alice"}},
        durability="sync",
    )
    os._exit(0)  # not reached: the worker dies inside after_agent
    """
)


def die_while_recording(tmp_path: Path, when: str) -> tuple[Path, Path]:
    """Run the agent in a child that exits inside the turn append (``when``: before or after it lands)."""
    db, checkpoints = tmp_path / "memory.db", tmp_path / "checkpoints.sqlite"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    died = subprocess.run(
        [sys.executable, "-c", WORKER, str(db), str(checkpoints), when, SAID, ANSWER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert died.returncode == 9, died.stderr
    return db, checkpoints


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_run_resumed_after_the_worker_died_while_recording_stores_each_turn_once(tmp_path: Path, when: str) -> None:
    db, checkpoints = die_while_recording(tmp_path, when)

    mem = HybridMemory(LocalStore(db), embedder=HashingEmbedder())
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    try:
        # The model already answered (that step was checkpointed): resuming must not call it again.
        agent = create_agent(
            GenericFakeChatModel(messages=iter([])), middleware=[HybridMemoryMiddleware(mem)], checkpointer=saver
        )
        assert agent.get_state(CONFIG).next  # the thread stopped inside after_agent
        out = agent.invoke(None, config=CONFIG)
        assert not agent.get_state(CONFIG).next
        turns = mem.short_term("alice", "t1")
        assert [(t.role, t.content) for t in turns] == [("user", SAID), ("assistant", ANSWER)]
        human = next(m for m in out["messages"] if m.type == "human")
        assert out["memory_context"]["recorded"] == human.id
        memories = [r for r in mem.list_memories("alice", filter=_EVERY) if "Pip" in r.content]
        assert [r.content for r in memories] == [SAID]  # the user's words, once; the answer is context only

        # and the conversation goes on in the same window
        agent = create_agent(
            GenericFakeChatModel(messages=iter(["Twice a day, yes."])),
            middleware=[HybridMemoryMiddleware(mem)],
            checkpointer=saver,
        )
        agent.invoke({"messages": [("user", "How often does Pip eat?")]}, config=CONFIG)
        assert [t.content for t in mem.short_term("alice", "t1")] == [
            SAID,
            ANSWER,
            "How often does Pip eat?",
            "Twice a day, yes.",
        ]
    finally:
        mem.close()
        saver.conn.close()


@pytest.mark.parametrize("how", ["forget_turn", "forget_user", "end_session"])
def test_a_run_resumed_after_its_turns_were_forgotten_brings_nothing_back(tmp_path: Path, how: str) -> None:
    """The worker died after recording; before the thread was resumed its turns were forgotten (or ended)."""
    db, checkpoints = die_while_recording(tmp_path, "after")

    mem = HybridMemory(LocalStore(db), embedder=HashingEmbedder())
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    try:
        recorded = mem.short_term("alice", "t1")
        assert [t.content for t in recorded] == [SAID, ANSWER]
        if how == "forget_turn":  # the user asked to forget what they said
            assert mem.forget_turn(recorded[0].id, user_id="alice", session_id="t1") is True
        elif how == "forget_user":
            mem.forget_user("alice")
        else:  # the idle flush ended the session
            mem.end_session("alice", "t1")
        agent = create_agent(
            GenericFakeChatModel(messages=iter([])), middleware=[HybridMemoryMiddleware(mem)], checkpointer=saver
        )
        agent.invoke(None, config=CONFIG)
        assert not agent.get_state(CONFIG).next
        kept = [r.content for r in mem.list_memories("alice", filter=_EVERY) if "Pip" in r.content]
        window = [t.content for t in mem.short_term("alice", "t1")]
        if how == "forget_turn":
            assert window == [ANSWER] and kept == []
        elif how == "forget_user":
            assert window == [] and kept == []
        else:  # ending forgets nothing: the resumed run records into the new window, the memory stays one
            assert window == [SAID, ANSWER] and kept == [SAID]
    finally:
        mem.close()
        saver.conn.close()
