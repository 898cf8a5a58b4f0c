"""Session summaries across real processes: the summary state is in the store (architecture §10, issue 13).

The turns waiting for a session's next summary are the log's turns above the store's summary
watermark, not a list in one process, so:

* turns of one session split over two processes reach one summary of all of them;
* a process killed with SIGKILL before its summary ran loses nothing: the next process that
  continues the session summarises its turns too.

Real OS processes (``tests/reliability/proc_worker.py``, mode ``summarize``) on a ``LocalStore``
file and a real Weaviate collection (the ``backend`` fixture of ``test_processes.py``).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from hybrid_memory.records import MemoryRecord
from tests.reliability import test_processes
from tests.reliability.test_processes import Backend, run, spawn

#: The fixture of ``test_processes.py``: a LocalStore file, then a real Weaviate collection.
backend = test_processes.backend

EVERY = 6
USER = "sam"
SAID = [
    "I live in Leeds.",
    "My budget is at most 900 pounds.",
    "I never work on Sundays.",
    "My daughter Mia is 7.",
    "I play the cello.",
    "I am allergic to peanuts.",
]


def summarize(b: Backend, texts: list[str], **extra: Any) -> dict[str, Any]:
    """The spec of a process that adds ``texts`` as user turns of session s1, summarising every 6."""
    turns = [["s1", "user", t] for t in texts]
    return {"mode": "summarize", "store": b.spec, "user": USER, "turns": turns, "summary_every": EVERY, **extra}


def summaries(b: Backend) -> list[MemoryRecord]:
    store = b.store()
    try:
        return [r for r in store.list(USER) if r.category == "summary"]
    finally:
        store.close()


def watermark(b: Backend) -> int:
    store = b.store()
    try:
        return int(store.summarized_upto(USER, "s1"))
    finally:
        store.close()


def test_turns_split_over_two_processes_reach_one_summary(backend: Backend) -> None:
    first = run(summarize(backend, SAID[:3]))
    assert summaries(backend) == []  # 3 of 6 turns: no summary yet, and nothing kept in the process
    second = run(summarize(backend, SAID[3:]))
    assert second["window"]["s1"] == SAID  # one session, one log
    [summary] = summaries(backend)
    assert summary.status == "active" and summary.content.splitlines() == SAID
    ids = [t["id"] for t in first["turns"] + second["turns"]]
    assert summary.provenance == tuple(ids)
    assert watermark(backend) == second["turns"][-1]["seq"]


def test_kill_9_before_the_summary_ran_loses_nothing(backend: Backend) -> None:
    proc = spawn(summarize(backend, SAID[:4], hang=True))
    assert proc.stdout is not None
    line = proc.stdout.readline()  # four turns acknowledged, the summary not due yet ...
    assert line.startswith("ADDED "), proc.stderr.read() if proc.stderr else line
    os.kill(proc.pid, signal.SIGKILL)  # ... and the process dies without close or end_session
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert summaries(backend) == [] and watermark(backend) == 0

    second = run(summarize(backend, SAID[4:]))  # the sixth turn of the session: due in this process
    [summary] = summaries(backend)
    assert summary.status == "active" and summary.content.splitlines() == SAID
    assert watermark(backend) == second["turns"][-1]["seq"]
    # A third process continuing the session finds nothing pending: no second summary of them.
    run(summarize(backend, ["Thanks!"]))
    assert [s.id for s in summaries(backend)] == [summary.id]
