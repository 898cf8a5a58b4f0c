"""A process writing to ``LocalStore`` is killed with ``kill -9`` mid-ingest (issue 8, fault 3).

A real child process ingests through the facade (``remember``, ``remember_many``, ``add_turn``)
and ``forget``s some memories, printing every acknowledged operation as soon as the call has
returned. The parent kills it with SIGKILL at a random point, reopens the file and checks:
``PRAGMA integrity_check`` is ``ok``, every acknowledged write is present (content and metadata
intact), every acknowledged delete is gone, and the store keeps working.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder
from tests.reliability.conftest import report, runs

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
from datetime import datetime, timezone
from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder

path, seed = sys.argv[1], int(sys.argv[2])
mem = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(dim=64))
words = "amber basil cedar delta ember fjord granite harbor indigo juniper kelp lantern meadow".split()
out = sys.stdout
acked = []
i = 0
while True:
    i += 1
    user = f"user-{i % 7}"
    text = f"child {seed} op {i}: " + " ".join(words[(i * k) % len(words)] for k in (1, 3, 5)) + f" 记忆{i}"
    if i % 11 == 0 and acked:
        u, mid = acked.pop(0)
        existed = mem.forget(mid, user_id=u)
        out.write(json.dumps({"op": "forget", "user": u, "id": mid, "existed": existed}) + "\n")
    elif i % 5 == 0:
        items = [{"content": f"{text} #{j}", "importance": 0.6, "metadata": {"i": i, "j": j}} for j in range(20)]
        for o in mem.remember_many(user, items):
            acked.append((user, o.record.id))
            out.write(json.dumps({"op": "write", "user": user, "id": o.record.id, "content": o.record.content}) + "\n")
    elif i % 3 == 0:
        t = mem.add_turn(user, "s", "user", "Remember: " + text, timestamp=datetime.now(timezone.utc))
        out.write(json.dumps({"op": "turn", "user": user, "id": t.id, "key": t.key_frame}) + "\n")
    else:
        o = mem.remember(user, text, importance=0.7, metadata={"i": i})
        acked.append((user, o.record.id))
        out.write(json.dumps({"op": "write", "user": user, "id": o.record.id, "content": o.record.content}) + "\n")
    out.flush()
"""


@pytest.mark.parametrize("run", range(runs(3)))
def test_kill9_of_a_writing_process_loses_no_acknowledged_write(tmp_path: Path, run: int) -> None:
    path = tmp_path / "memory.db"
    rng = random.Random(run)
    kill_after = rng.randint(40, 400)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    lines: list[dict[str, object]] = []
    try:
        assert child.stdout is not None
        while len(lines) < kill_after:
            line = child.stdout.readline()
            if not line:
                err = child.stderr.read() if child.stderr else ""
                pytest.fail(f"child exited early ({child.poll()}): {err[-2000:]}")
            lines.append(json.loads(line))
        os.kill(child.pid, signal.SIGKILL)
        # Lines already written before the kill are acknowledged too.
        rest, _ = child.communicate(timeout=30)
        for line in rest.splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by the kill was never acknowledged
                lines.append(json.loads(line))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    with contextlib.closing(sqlite3.connect(path)) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchall()
        assert integrity == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []

    written = {(str(x["user"]), str(x["id"])): str(x["content"]) for x in lines if x["op"] == "write"}
    forgotten = {(str(x["user"]), str(x["id"])) for x in lines if x["op"] == "forget"}
    assert written, "nothing was acknowledged before the kill"
    store = LocalStore(path)
    try:
        for (user, mid), content in written.items():
            got = store.get(user, [mid])
            if (user, mid) in forgotten:
                assert got == [], f"acknowledged forget of {mid} was undone"
            else:
                assert [r.content for r in got] == [content], f"acknowledged write {mid} lost"
        report(
            "LocalStore writer process kill -9",
            acknowledged_writes=len(written),
            acknowledged_forgets=len(forgotten),
            integrity=integrity[0][0],
            lost=0,
        )
        users = {u for u, _ in written}
        assert sum(store.count(u) for u in users) >= len(set(written) - forgotten)
        # The reopened store keeps working: search, write, delete.
        mem = HybridMemory(store=store, embedder=HashingEmbedder(dim=64))
        out = mem.remember("user-1", "after the crash: amber cedar", importance=0.9)
        assert mem.recall("amber cedar crash", user_id="user-1", k=50)
        assert mem.forget(out.record.id if out.record else "", user_id="user-1")
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
