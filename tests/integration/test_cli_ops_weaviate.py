"""Operator CLI and traces against a real Weaviate server (see tests/weaviate_fixtures.py).

* ``export`` from a LocalStore, ``import`` into Weaviate, ``export`` back: identical records, so a
  store can move between backends losslessly;
* ``list`` / ``stats`` / ``search`` / ``replay`` / ``forget`` with ``--weaviate URL``;
* traces of a Weaviate-backed memory live in a local SQLite file under ``$XDG_STATE_HOME``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.cli import main
from hybrid_memory.observe.trace import default_trace_path
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder
from tests.weaviate_fixtures import WeaviateEndpoint

pytestmark = pytest.mark.weaviate

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
EVERY = MemoryFilter(statuses=("active", "superseded", "archived", "deleted"))


def _records(store: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.user_id, r.id): r.to_json_dict() for u in store.users() for r in store.list(u, filter=EVERY)}


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture
def wv_args(weaviate_endpoint: WeaviateEndpoint, weaviate_store_factory: Callable[..., Any]) -> Iterator[list[str]]:
    store = weaviate_store_factory()  # a fresh collection, dropped after the test
    yield [
        "--weaviate",
        weaviate_endpoint.url,
        "--grpc-port",
        str(weaviate_endpoint.grpc_port),
        "--collection",
        store.collection,
    ]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_local_to_weaviate_and_back_is_lossless(
    tmp_path: Path, wv_args: list[str], capsys: pytest.CaptureFixture[str], state_home: Path
) -> None:
    db = tmp_path / "memory.db"
    # The story runs two days past the frozen clock: allow that much future skew (writer.max_future_skew_seconds).
    cfg = HybridMemoryConfig(writer={"max_future_skew_seconds": 3 * 86400})
    mem = HybridMemory(store=LocalStore(db), embedder=HashingEmbedder(), clock=lambda: T0, config=cfg)
    mem.remember("alice", "I live in Berlin", importance=0.8, timestamp=T0, tags=("home",), metadata={"k": [1, 2]})
    mem.remember("alice", "I moved to Munich, I live in Munich now", importance=0.8, timestamp=T0 + timedelta(days=2))
    mem.remember_many("李雷", ["我喜欢喝乌龙茶，不要加糖", "下个月15号我要去东京出差，预算一万元"])
    mem.recall("乌龙茶", user_id="李雷", now=T0)
    mem.close()

    dump = tmp_path / "dump.jsonl"
    assert run(capsys, "export", "--store", str(db), "--out", str(dump), "--quiet")[0] == 0
    code, out, _ = run(capsys, "import", str(dump), *wv_args, "--quiet")
    assert code == 0 and "imported 4 memories" in out

    code, out, _ = run(capsys, "stats", *wv_args, "--json")
    st = json.loads(out)
    assert code == 0 and (st["users"], st["memories"], st["dimension"]) == (2, 4, 256)
    assert st["status"]["superseded"] == 1 and st["dead_letters"] == 0
    code, out, _ = run(capsys, "search", "乌龙茶", *wv_args, "--user", "李雷", "--json")
    hits = json.loads(out)
    assert code == 0 and hits[0]["content"] == "我喜欢喝乌龙茶，不要加糖" and hits[0]["keyword_score"] > 0

    back = tmp_path / "back.jsonl"
    assert run(capsys, "export", *wv_args, "--out", str(back), "--quiet")[0] == 0
    lines_a = [json.loads(x) for x in dump.read_text(encoding="utf-8").splitlines()[1:]]
    lines_b = [json.loads(x) for x in back.read_text(encoding="utf-8").splitlines()[1:]]
    rec_a = {(x["record"]["user_id"], x["record"]["id"]): x for x in lines_a}
    rec_b = {(x["record"]["user_id"], x["record"]["id"]): x for x in lines_b}
    assert rec_a.keys() == rec_b.keys()
    for key, a in rec_a.items():
        assert rec_b[key]["record"] == a["record"]
        assert np.allclose(rec_b[key]["vector"], a["vector"], atol=1e-6)

    code, out, _ = run(capsys, "forget", *wv_args, "--user", "alice", "--yes")
    assert code == 0 and "forgot user 'alice': 2 memories" in out
    code, out, _ = run(capsys, "list", *wv_args, "--json")
    assert [r["user_id"] for r in json.loads(out)] == ["李雷"]


def test_a_weaviate_memory_traces_to_a_local_file(
    weaviate_store_factory: Callable[..., Any],
    weaviate_endpoint: WeaviateEndpoint,
    state_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = weaviate_store_factory()
    path = Path(default_trace_path(store))
    assert path.parent == state_home / "hybrid-memory" / "traces"
    assert path.name.endswith(f"_{store.collection}.sqlite")
    mem = HybridMemory(store=store, embedder=HashingEmbedder(), trace=True, clock=lambda: T0)
    mem.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts, call 13812345678", timestamp=T0)
    mem.add_turn("alice", "s1", "user", "ok", timestamp=T0)
    mem.build_context("peanut allergy", user_id="alice", session_id="s1", now=T0)
    steps = mem.replay("s1")
    assert [s.kind for s in steps] == ["add_turn", "add_turn", "build_context"]
    assert path.exists() and b"13812345678" not in path.read_bytes()
    snap = mem.metrics()
    assert snap.store is not None and snap.store.users == {"alice": 1} and snap.store.dead_letters == 0

    args = [
        "--weaviate",
        weaviate_endpoint.url,
        "--grpc-port",
        str(weaviate_endpoint.grpc_port),
        "--collection",
        store.collection,
    ]
    code, out, _ = run(capsys, "replay", "s1", *args)
    assert code == 0 and "build_context" in out and "[PHONE]" in out

    mem.forget_user("alice")
    assert mem.replay("s1") == []
    data = b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))
    assert b"peanuts" not in data
    mem.close()


def test_dead_letters_are_listed_and_replayed_from_the_command_line(
    tmp_path: Path, wv_args: list[str], weaviate_store_factory: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two writes left in a dead-letter file (one queued ten days ago) come back through ``dead-letters --replay``."""
    import sqlite3

    from hybrid_memory.records import MemoryRecord
    from hybrid_memory.stores.weaviate.dead_letters import _DeadLetterQueue, _Failure, _Pending

    collection = wv_args[wv_args.index("--collection") + 1]
    path = tmp_path / "queue.sqlite"
    store = weaviate_store_factory(collection=collection, dead_letter_path=path)
    store.bind_embedder("test", 4)
    fresh = MemoryRecord.create(user_id="alice", content="alice's cat is called Miso", timestamp=T0)
    old = MemoryRecord.create(user_id="李雷", content="我喜欢喝乌龙茶", timestamp=T0)
    # What a write that failed after every retry leaves in the file (the same call the store makes).
    queue = _DeadLetterQueue(path)
    vec = np.full(4, 0.5, dtype=np.float32)
    queue.add([_Failure(_Pending(r, vec, r.id, r.user_id), "server unreachable", transient=True) for r in (fresh, old)])
    queue.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE dead_letters SET queued_at = ? WHERE record_id = ?", ("2025-01-01T00:00:00+00:00", old.id))
    conn.close()
    where = [*wv_args, "--dead-letter-path", str(path)]

    code, out, _ = run(capsys, "dead-letters", *where)
    assert code == 0 and "dead letters waiting: 2" in out and "--replay" in out
    code, out, _ = run(capsys, "dead-letters", *where, "--replay", "--json")
    got = json.loads(out)
    assert code == 0 and got["replayed"] == 1
    assert [(q["user"], q["id"]) for q in got["queued"]] == [("李雷", old.id)]  # queued long ago: held back
    assert store.get("alice", [fresh.id]) == [fresh] and store.get("李雷", [old.id]) == []
    code, out, _ = run(capsys, "dead-letters", *where, "--replay", "--include-stale")
    assert code == 0 and "written again: 1" in out and "dead letters waiting: 0" in out
    assert store.get("李雷", [old.id]) == [old]
    code, out, err = run(capsys, "dead-letters", "--store", str(tmp_path / "x.db"))
    assert code != 0 and "Weaviate" in err


def test_a_one_shot_command_centres_a_large_user_at_once_and_the_mcp_server_reads_it_in_the_background(
    wv_args: list[str],
) -> None:
    """A command's process ends before a background read would; a server's recalls should not wait for it."""
    from hybrid_memory.cli import build_parser
    from hybrid_memory.cli.ops import open_store
    from hybrid_memory.records import MemoryRecord

    args = build_parser().parse_args(["stats", *wv_args])
    store = open_store(args)
    n = 1_001  # one more than a first read bounded in the background (MeanCache.background_above)
    vectors = np.zeros((n, 8), dtype=np.float32)
    vectors[:, 0] = 1.0
    store.bind_embedder("hashing-8", 8)
    store.upsert([MemoryRecord.create(user_id="big", content=f"memory {i}") for i in range(n)], vectors)
    try:
        np.testing.assert_allclose(store.mean_vector("big"), vectors[0], atol=1e-6)  # by this call
    finally:
        store.close()
    server = open_store(args, background=True)  # as the MCP server opens it
    try:
        assert server.mean_vector("big") is None  # uncentred while its background read runs
        assert server._means.wait(60.0)
        np.testing.assert_allclose(server.mean_vector("big"), vectors[0], atol=1e-6)
    finally:
        server.close()
