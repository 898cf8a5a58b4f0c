"""One memory, many processes: the store is the single source of truth (architecture §10, issue 13).

Every scenario runs real OS processes (``tests/reliability/proc_worker.py``) over one store, a
``LocalStore`` file and a real Weaviate collection (``backend`` parameter):

* a process killed with SIGKILL right after ``add_turn`` returned loses nothing: a new process
  recalls the turn and continues the session with the same short-term window;
* turns of a process killed before their extraction batch ran are extracted, exactly once, by the
  next process that continues the session (the pending batch is the log above the store's
  extraction watermark);
* a session continued across processes keeps one window (turn 1 in process A, turn 2 in B);
* a turn memory the CLI forgot (its turn's extraction batch still pending) comes back in no window
  and no extracted fact of the next process;
* the CLI's ``forget --user`` while three processes keep talking for that user, which then end
  their sessions: nothing any of them said before the forget is left (memories, turns, vectors,
  trace steps);
* several processes of mixed traffic: nothing lost, nothing duplicated, nothing cross-user.

``HYBRID_MEMORY_RELIABILITY_SECONDS`` sets the length of the mixed-traffic run (default 20 s here;
``benchmarks/reliability.py`` runs it longer). Every scenario reports one row per backend for
``benchmarks/reliability.py`` (``report``: turns acknowledged, lost, duplicated, cross-user leaks,
texts said before a forget still present, trace steps) before it asserts.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.observe.trace import default_trace_path
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder
from tests.reliability.conftest import child_env, load_seconds, report

ROOT = Path(__file__).resolve().parents[2]
SECONDS = load_seconds(20.0)


def spawn(spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.proc_worker", json.dumps(spec)],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(spec: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    proc = spawn(spec)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    line = next(x for x in out.splitlines() if x.startswith("ADDED "))
    return dict(json.loads(line[len("ADDED ") :]))


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


class Backend:
    """Where the processes of one test meet: a LocalStore file or a Weaviate collection."""

    def __init__(self, kind: str, tmp_path: Path, endpoint: Any = None) -> None:
        self.kind, self.tmp, self.endpoint = kind, tmp_path, endpoint
        self.db = tmp_path / "app.db"
        self.collection = "P" + os.urandom(8).hex()
        self.label = "LocalStore file" if kind == "local" else "WeaviateStore"

    @property
    def spec(self) -> dict[str, Any]:
        if self.kind == "local":
            return {"kind": "local", "path": str(self.db)}
        return {
            "kind": "weaviate",
            "url": self.endpoint.url,
            "grpc_port": self.endpoint.grpc_port,
            "collection": self.collection,
            "dead_letter_path": str(self.tmp / "dead-letters.sqlite"),
        }

    def store(self) -> Any:
        if self.kind == "local":
            return LocalStore(self.db)
        from hybrid_memory.stores.weaviate import WeaviateStore

        return WeaviateStore.connect(
            self.endpoint.url,
            grpc_port=self.endpoint.grpc_port,
            collection=self.collection,
            dead_letter_path=self.tmp / "dead-letters.sqlite",
        )

    def memory(self) -> HybridMemory:
        return HybridMemory(store=self.store(), embedder=HashingEmbedder(), trace=False)

    @property
    def where(self) -> list[str]:
        if self.kind == "local":
            return ["--store", str(self.db)]
        return [
            "--weaviate",
            self.endpoint.url,
            "--grpc-port",
            str(self.endpoint.grpc_port),
            "--collection",
            self.collection,
        ]

    def drop(self) -> None:
        if self.kind == "weaviate":
            store = self.store()
            try:
                store.drop()
            finally:
                store.close()


@pytest.fixture(params=["local", "weaviate"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Trace files and dead letters of every process of the test live under tmp_path.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    if request.param == "local":
        yield Backend("local", tmp_path)
        return
    request.applymarker(pytest.mark.weaviate)
    b = Backend("weaviate", tmp_path, request.getfixturevalue("weaviate_endpoint"))
    try:
        yield b
    finally:
        b.drop()


_ASKED = (("flight Berlin", "Berlin"), ("cello", "cello"))


def test_kill_9_right_after_add_turn_loses_nothing(backend: Backend) -> None:
    store = backend.spec
    turns = [
        ["s1", "user", "My flight to Berlin is next Tuesday at 9am."],
        ["s1", "assistant", "Noted, have a good trip."],
        ["s1", "user", "I started learning the cello last month."],
    ]
    proc = spawn({"mode": "add", "store": store, "user": "alice", "turns": turns, "hang": True})
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the turns were acknowledged ...
    assert line.startswith("ADDED "), proc.stderr.read() if proc.stderr else line
    os.kill(proc.pid, signal.SIGKILL)  # ... and the process dies before any close or end_session
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    with backend.memory() as mem:  # a new process (a new connection and caches) on the same store
        window = [t.content for t in mem.short_term("alice", "s1")]
        top = {needle: [h.content for h in mem.recall(query, user_id="alice", k=3)] for query, needle in _ASKED}
        report(
            f"processes: kill -9 right after add_turn, {backend.label}",
            acknowledged=len(turns),
            lost=sum(t[2] not in window for t in turns),
            duplicated=len(window) - len(set(window)),
            recalled_first=sum(bool(h) and needle in h[0] for needle, h in top.items()),
        )
        assert window == [t[2] for t in turns]
        for needle, hits in top.items():
            assert hits and needle in hits[0]
        # and the session goes on with the same window
        mem.add_turn("alice", "s1", "user", "Also, my sister arrives on Friday.")
        assert len(mem.short_term("alice", "s1")) == 4


@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_9_inside_add_turn_then_a_retry_in_another_process_stores_each_turn_once(
    backend: Backend, when: str
) -> None:
    """At-least-once delivery: the worker dies mid-write, the request is delivered again elsewhere."""
    turns = [
        ["s1", "user", "My flight to Berlin is next Tuesday at 9am.", "m-1"],
        ["s1", "assistant", "Noted, have a good trip.", "m-2"],
        ["s1", "user", "I started learning the cello last month.", "m-3"],
    ]
    # the third add_turn dies with its memory written and its log append not made (before) or made (after)
    proc = spawn({"mode": "add", "store": backend.spec, "user": "alice", "turns": turns, "die": [when, 2]})
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err

    retried = run({"mode": "add", "store": backend.spec, "user": "alice", "turns": turns})  # the whole request again
    again = run({"mode": "add", "store": backend.spec, "user": "alice", "turns": turns})  # and once more
    texts = [t[2] for t in turns]
    assert retried["window"]["s1"] == again["window"]["s1"] == texts
    assert [t["id"] for t in retried["turns"]] == [t["id"] for t in again["turns"]] == ["m-1", "m-2", "m-3"]
    with backend.memory() as mem:
        stored = mem.store.list("alice", filter=MemoryFilter(statuses=("active", "superseded", "archived")))
        report(
            f"processes: kill -9 inside add_turn ({when} the log append), retried twice, {backend.label}",
            turns_in_log=len(mem.short_term("alice", "s1")),
            memories=len(stored),
        )
        assert [t.content for t in mem.short_term("alice", "s1")] == texts
        assert sorted(r.content for r in stored) == sorted([texts[0], texts[2]])  # the user's words, once each
        (cello,) = [r for r in stored if "cello" in r.content]
        assert cello.context == "Noted, have a good trip."


@pytest.mark.parametrize("how", ["forget_turn", "end_session", "forget_user"])
def test_a_late_retry_in_another_process_brings_back_no_forgotten_turn(backend: Backend, how: str) -> None:
    """The retry arrives after an operator forgot the turn or the user, or after the session ended."""
    turns = [
        ["s1", "user", "My flight to Berlin is next Tuesday at 9am.", "m-1"],
        ["s1", "assistant", "Noted, have a good trip.", "m-2"],
        ["s1", "user", "I started learning the cello last month.", "m-3"],
    ]
    run({"mode": "add", "store": backend.spec, "user": "alice", "turns": turns})
    with backend.memory() as operator:  # another process: the operator
        if how == "forget_turn":
            assert operator.forget_turn("m-3", user_id="alice", session_id="s1") is True
        elif how == "end_session":
            operator.end_session("alice", "s1")
        else:
            operator.forget_user("alice")
    retried = run({"mode": "add", "store": backend.spec, "user": "alice", "turns": turns})  # the whole request again
    with backend.memory() as mem:
        every = mem.store.list("alice", filter=MemoryFilter(statuses=_EVERY))
        stored = sorted(r.content for r in every if r.content in {t[2] for t in turns})  # not a session summary
        window = [t.content for t in mem.short_term("alice", "s1")]
    report(
        f"processes: a retry after {how}, {backend.label}",
        turns_in_log=len(window),
        memories=len(stored),
        retried_turns_stored=sum(t["seq"] > 0 for t in retried["turns"]),
    )
    texts = [t[2] for t in turns]
    if how == "forget_turn":
        assert window == texts[:2] and stored == [texts[0]]
        assert [t["seq"] > 0 for t in retried["turns"]] == [True, True, False]
    elif how == "end_session":  # ending forgets nothing: the retry is the new window, each memory still once
        assert window == texts and stored == sorted([texts[0], texts[2]])
        assert all(t["seq"] > 0 for t in retried["turns"])
    else:
        assert window == [] and stored == []
        assert [t["seq"] for t in retried["turns"]] == [0, 0, 0]


_EVERY = ("active", "superseded", "archived")


def _facts(*items: tuple[str, int]) -> str:
    return json.dumps(
        {"memories": [{"content": c, "category": "fact", "importance": 7, "source_turns": [i]} for c, i in items]}
    )


def test_kill_9_before_the_extraction_batch_ran_loses_no_fact_and_extracts_once(backend: Backend) -> None:
    store = backend.spec
    never = {"responses": [_facts(("The user keeps bees on the roof.", 0))], "batch_turns": 3}
    first = [["s1", "user", "I keep bees on the roof."], ["s1", "assistant", "How lovely!"]]
    proc = spawn({"mode": "add", "store": store, "user": "ann", "turns": first, "hang": True, "extract": never})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ADDED "), proc.stderr.read() if proc.stderr else line
    os.kill(proc.pid, signal.SIGKILL)  # 2 of 3 turns: the batch never ran
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    reply = _facts(("The user keeps bees on the roof.", 0), ("The user plays the oboe.", 2))
    second = run(
        {
            "mode": "add",
            "store": store,
            "user": "ann",
            "turns": [["s1", "user", "I play the oboe."]],  # completes the batch; close() waits for it
            "extract": {"responses": [reply], "batch_turns": 3},
        }
    )
    # A third process on the session finds nothing pending: its model (which would add a fact) is not asked.
    run(
        {
            "mode": "add",
            "store": store,
            "user": "ann",
            "turns": [],
            "extract": {"responses": [_facts(("The user keeps bees on the roof.", 0))], "batch_turns": 3},
        }
    )
    s = backend.store()
    try:
        extracted = [r.content for r in s.list("ann") if r.metadata.get("extracted")]
        watermark = s.extracted_upto("ann", "s1")
    finally:
        s.close()
    facts = {"The user keeps bees on the roof.", "The user plays the oboe."}
    report(
        f"processes: kill -9 before the extraction batch ran, {backend.label}",
        facts=len(facts),
        lost=len(facts - set(extracted)),
        duplicated=len(extracted) - len(set(extracted)),
        extra=len(set(extracted) - facts),
    )
    assert sorted(extracted) == sorted(facts)
    assert watermark == second["turns"][0]["seq"]


def test_a_turn_memory_the_cli_forgot_comes_back_in_no_window_or_fact_of_the_next_process(backend: Backend) -> None:
    store = backend.spec
    secret = "I keep bees on the roof at 12 Elm Street."
    first = [["s1", "user", secret], ["s1", "assistant", "How lovely!"]]
    never = {"responses": [_facts(("The user keeps bees on the roof.", 0))], "batch_turns": 3}
    proc = spawn({"mode": "add", "store": store, "user": "ann", "turns": first, "hang": True, "extract": never})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ADDED "), proc.stderr.read() if proc.stderr else line
    os.kill(proc.pid, signal.SIGKILL)  # 2 of 3 turns: the batch is pending in the log
    proc.communicate(timeout=30)
    s = backend.store()
    try:
        [memory_id] = [r.id for r in s.list("ann") if r.content == secret]
    finally:
        s.close()
    done = subprocess.run(  # the operator, in another process
        [sys.executable, "-m", "hybrid_memory.cli", "forget", *backend.where, "--user", "ann", "--id", memory_id],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # The next process continues the session, which fills the pending batch. Its model still names
    # the bees (at [0]): grounded in no user turn of what the log holds now, that fact is dropped.
    reply = _facts(("The user keeps bees on the roof.", 0), ("The user plays the oboe.", 1))
    later = run(
        {
            "mode": "add",
            "store": store,
            "user": "ann",
            "turns": [["s1", "user", "I play the oboe."], ["s1", "user", "Every evening."]],
            "extract": {"responses": [reply], "batch_turns": 3},
        }
    )
    s = backend.store()
    try:
        texts = [r.content for r in s.list("ann", filter=MemoryFilter(statuses=("active", "superseded", "archived")))]
        log = [t.content for t in s.load_session("ann", "s1").turns]
    finally:
        s.close()
    said = [x for x in [*texts, *log, *later["window"]["s1"]] if "bees" in x]
    report(f"processes: CLI forget of a pending turn, {backend.label}", forgotten_text_back=len(said))
    assert said == []
    assert later["window"]["s1"] == log == ["How lovely!", "I play the oboe.", "Every evening."]
    assert [t for t in texts if t.startswith("The user")] == ["The user plays the oboe."]


def test_a_session_continued_across_processes_keeps_one_window(backend: Backend) -> None:
    store = backend.spec
    a = run({"mode": "add", "store": store, "user": "bob", "turns": [["t", "user", "I live in Porto."]]})
    b = run({"mode": "add", "store": store, "user": "bob", "turns": [["t", "user", "I work as a nurse."]]})
    report(
        f"processes: a session continued across processes, {backend.label}",
        acknowledged=2,
        lost=len({"I live in Porto.", "I work as a nurse."} - set(b["window"].get("t", []))),
        duplicated=len(b["window"].get("t", [])) - len(set(b["window"].get("t", []))),
    )
    assert a["window"] == {"t": ["I live in Porto."]}
    assert b["window"] == {"t": ["I live in Porto.", "I work as a nurse."]}  # B's window holds A's turn
    assert b["turns"][0]["seq"] > a["turns"][0]["seq"]
    # A long-lived process with a cached window sees what another process added meanwhile.
    with backend.memory() as mem:
        assert [t.content for t in mem.short_term("bob", "t")] == ["I live in Porto.", "I work as a nurse."]
        run({"mode": "add", "store": store, "user": "bob", "turns": [["t", "user", "I have two cats."]]})
        mem.add_turn("bob", "t", "user", "And a dog.")
        assert [t.content for t in mem.short_term("bob", "t")] == [
            "I live in Porto.",
            "I work as a nurse.",
            "I have two cats.",
            "And a dog.",
        ]
        # Another process ends the session: this process's cached window follows.
        subprocess_end = [
            sys.executable,
            "-c",
            "import json, sys; from hybrid_memory import HybridMemory;"
            "from hybrid_memory.testing import HashingEmbedder; from tests.reliability.proc_worker import open_store;"
            "m = HybridMemory(store=open_store(json.loads(sys.argv[1])), embedder=HashingEmbedder());"
            "m.end_session('bob', 't'); m.close()",
            json.dumps(store),
        ]
        subprocess.run(subprocess_end, check=True, cwd=ROOT, env=child_env(), timeout=120)
        assert mem.short_term("bob", "t") == []
        assert {h.content for h in mem.recall("cats dog nurse Porto", user_id="bob", k=10)} >= {
            "I live in Porto.",
            "I have two cats.",
        }


def _host_port(url: str) -> str:
    """``host_port`` of a server URL, as the default trace path of a WeaviateStore names it."""
    parsed = urlsplit(url)
    return f"{parsed.hostname}_{parsed.port}"


def _trace_texts(path: Path, user: str) -> list[str]:
    if not path.exists():
        return []
    con = sqlite3.connect(path)
    try:
        return [str(r[0]) for r in con.execute("SELECT data FROM trace_steps WHERE user_id = ?", (user,))]
    finally:
        con.close()


def test_cli_forget_while_three_processes_talk_leaves_nothing_said_before_it(backend: Backend, tmp_path: Path) -> None:
    store = backend.spec
    stop = tmp_path / "stop"
    logs = [tmp_path / f"w{i}.jsonl" for i in range(3)]
    procs = [
        spawn(
            {
                "mode": "talk",
                "store": store,
                "trace": True,
                "user": "victim",
                "session": f"s{i}",
                "name": f"w{i}",
                "stop": str(stop),
                "log": str(log),
            }
        )
        for i, log in enumerate(logs)
    ]
    bystander = run({"mode": "add", "store": store, "user": "bystander", "turns": [["b", "user", "I like tea."]]})
    try:
        deadline = time.monotonic() + 120
        while min(len(read_log(p)) for p in logs) < 5:  # everyone has said a few things
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        forget_started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "hybrid_memory.cli", "forget", *backend.where, "--user", "victim", "--yes"],
            cwd=ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        forget_done = time.monotonic()
        assert done.returncode == 0, done.stderr
        # they keep talking a little after the forget, then end their sessions and close
        while min(sum(r["start"] > forget_done for r in read_log(p)) for p in logs) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stop.touch()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        stop.touch()
        for p in procs:
            if p.poll() is None:
                p.kill()

    said = [r for log in logs for r in read_log(log) if r["text"] != "<end_session>"]
    said_before = {r["text"] for r in said if r["end"] < forget_started}
    said_after = {r["text"] for r in said if r["start"] > forget_done and r["outcome"] == "ok"}
    with backend.memory() as mem:
        records = mem.list_memories("victim", filter=None)  # every status
        remaining = {r.content for r in records} | {r.context for r in records}
        windows = {s: [t.content for t in mem.short_term("victim", s)] for s in ("s0", "s1", "s2")}
        logged = {s: mem.store.load_session("victim", s).count for s in ("s0", "s1", "s2")}
        found = {h.content for h in mem.recall("garden note", user_id="victim", k=1000)}
        bystander_window = [t.content for t in mem.short_term("bystander", "b")]
        trace_file = Path(default_trace_path(mem.store))
    blob = ""
    if backend.kind == "local":  # nothing of what was said before: not in any table of the file
        with closing(sqlite3.connect(backend.db)) as con:
            blob = "\n".join(str(r) for r in con.execute("SELECT content, context FROM memories"))
            blob += "\n".join(str(r) for r in con.execute("SELECT content FROM turns"))
    # Every process of the test writes its trace where XDG_STATE_HOME (set by the fixture) or the
    # LocalStore file puts it; the checks below read that very file.
    if backend.kind == "local":
        expected_trace = Path(f"{backend.db}.traces.sqlite")
    else:
        name = f"{_host_port(backend.endpoint.url)}_{backend.collection}.sqlite"
        expected_trace = tmp_path / "state" / "hybrid-memory" / "traces" / name
    steps = _trace_texts(trace_file, "victim")
    traces = "\n".join(steps)
    still_there = {t for t in said_before if t in remaining or t in found or t in blob or t in traces}
    report(
        f"processes: CLI forget while 3 processes talk, {backend.label}",
        acknowledged_before=len(said_before),
        acknowledged_after=len(said_after),
        resurrected=len(still_there),
        turns_left_after_end_session=sum(logged.values()),
        trace_steps_before_forget=sum(any(t in step for t in said_before) for step in steps),
        trace_steps_left=len(steps),
        leaks=int(bystander_window != ["I like tea."]),
    )
    assert len(said_before) >= 15
    assert remaining.isdisjoint(said_before)  # memories (with their vectors: one object each)
    assert windows == {"s0": [], "s1": [], "s2": []}  # ended after the forget: nothing written back
    assert logged == {"s0": 0, "s1": 0, "s2": 0}
    assert found.isdisjoint(said_before)
    assert bystander_window == ["I like tea."] and bystander["turns"][0]["content"] == "I like tea."
    assert not any(text in blob for text in said_before)
    assert trace_file == expected_trace and trace_file.exists()
    assert said_after and any(t in traces for t in said_after)  # the processes' steps are in this file
    assert not any(text in traces for text in said_before)


def test_processes_of_mixed_traffic_lose_duplicate_and_leak_nothing(backend: Backend, tmp_path: Path) -> None:
    store = backend.spec
    users = [f"user{i}" for i in range(6)]
    logs = [tmp_path / f"m{i}.jsonl" for i in range(4)]
    procs = [
        spawn(
            {
                "mode": "mixed",
                "store": store,
                "users": users,
                "name": f"p{i}",
                "seed": i,
                "seconds": SECONDS,
                "log": str(log),
                "max_tokens": 60,
            }
        )
        for i, log in enumerate(logs)
    ]
    for p in procs:
        _, err = p.communicate(timeout=SECONDS + 300)
        assert p.returncode == 0, err
    rows = [r for log in logs for r in read_log(log)]
    written = [r for r in rows if r["op"] in ("add_turn", "remember")]
    forgotten = {r["text"] for r in rows if r["op"] == "forget"}  # by the process that wrote it, while others ran
    foreign = [r for r in rows if r.get("foreign")]  # a recall or context that showed another user's memory
    lost = duplicated = cross_user = back = 0
    with backend.memory() as mem:
        for user in users:
            stored = [r.content for r in mem.list_memories(user)]
            duplicated += sum(n - 1 for n in Counter(stored).values())
            cross_user += sum(not c.startswith(user + " ") for c in stored)
            lost += len({r["text"] for r in written if r["user"] == user} - forgotten - set(stored))
            back += len(forgotten & set(stored))
    ops = Counter(r["op"] for r in rows)
    report(
        f"processes: {len(procs)} processes of mixed traffic, {backend.label}",
        seconds=SECONDS,
        acknowledged=len(written),
        reads=ops["recall"] + ops["build_context"],
        sessions_ended=ops["end_session"],
        forgotten=len(forgotten),
        lost=lost,
        duplicated=duplicated,
        leaks=len(foreign) + cross_user,
    )
    assert ops["closed"] == len(procs)  # no process failed (a search racing another's forget raised KeyError)
    assert len(written) > 50 and len(forgotten) > 5
    assert back == 0  # nothing forgotten is stored
    assert foreign == []
    assert duplicated == 0  # nothing duplicated
    assert cross_user == 0  # nothing cross-user
    assert lost == 0  # nothing acknowledged is lost
