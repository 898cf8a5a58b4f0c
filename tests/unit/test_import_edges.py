"""``hybrid-memory import`` edge inputs (issue 15, attack 5: the import cases).

Every bad file is refused with a typed library error (exit code 2, ``error: FILE: bad line after
byte N: ...``, never a traceback) before the first write: the target store is left exactly as it
was — no records, no vectors, no embedder binding, no progress file. Foreign user ids need an
explicit ``--user`` remap, and the printed count is the number of memories written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory import LocalStore
from hybrid_memory.cli import main
from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
DIM = 8
EVERY = MemoryFilter(statuses=("active", "superseded", "archived", "deleted"))


def header(**changes: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "format": "hybrid-memory-export/1",
        "embedder": "hashing-8",
        "dimension": DIM,
        "vectors": True,
        "statuses": ["active", "superseded", "archived", "deleted"],
        "users": ["alice"],
    }
    h.update(changes)
    return h


def row(i: int, user: str = "alice", **changes: Any) -> dict[str, Any]:
    rec = MemoryRecord.create(user_id=user, content=f"note number {i} of {user}", timestamp=T0).to_json_dict()
    vec = [0.0] * DIM
    vec[i % DIM] = 1.0
    line: dict[str, Any] = {"record": rec, "vector": vec}
    for k, v in changes.items():
        if k == "vector":
            line["vector"] = v
        else:
            rec[k] = v
    return line


def write(path: Path, head: dict[str, Any], lines: list[dict[str, Any] | str]) -> list[int]:
    """Write the export; return the byte offset where each line (after the header) starts."""
    starts = []
    with open(path, "wb") as fh:
        fh.write((json.dumps(head) + "\n").encode())
        for line in lines:
            starts.append(fh.tell())
            text = line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)
            fh.write((text + "\n").encode())
    return starts


def snapshot(path: Path) -> tuple[Any, ...]:
    """Everything an import could change: records, vectors and the embedder binding."""
    if not path.exists():
        return ("absent",)
    with LocalStore(path) as store:
        recs = sorted(
            json.dumps(r.to_json_dict(), sort_keys=True) for u in store.users() for r in store.list(u, filter=EVERY)
        )
        vecs = sorted(
            (u, k, v.tobytes())
            for u in store.users()
            for k, v in store.get_vectors(u, [r.id for r in store.list(u, filter=EVERY)]).items()
        )
        return (store.embedder_name, store.dimension, recs, vecs)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def existing(tmp_path: Path) -> Path:
    """A target store that already holds a memory of another user."""
    path = tmp_path / "existing.db"
    with LocalStore(path) as store:
        store.bind_embedder("hashing-8", DIM)
        store.upsert(
            [MemoryRecord.create(user_id="zoe", content="I keep bees", timestamp=T0)],
            np.eye(1, DIM, dtype=np.float32),
        )
    return path


BAD_LINES: dict[str, Callable[[], dict[str, Any] | str]] = {
    "access_count=10**30": lambda: row(99, access_count=10**30),
    "version=2**63": lambda: row(99, version=2**63),
    "access_count=-1": lambda: row(99, access_count=-1),
    "version=0": lambda: row(99, version=0),
    "vector too short": lambda: row(99, vector=[1.0] * (DIM - 1)),
    "vector too long": lambda: row(99, vector=[1.0] * (DIM + 1)),
    "vector is a string": lambda: row(99, vector="1,0,0,0,0,0,0,0"),
    "vector of strings": lambda: row(99, vector=["1"] * DIM),
    "vector of booleans": lambda: row(99, vector=[True] * DIM),
    "nested vector": lambda: row(99, vector=[[1.0]] * DIM),
    "vector with NaN": lambda: (
        json.dumps(row(99)).replace('"vector": [', '"vector": [NaN, ', 1).replace(", 0.0]", "]", 1)
    ),
    "vector overflowing float32": lambda: row(99, vector=[1e39] + [0.0] * (DIM - 1)),
    "zero vector": lambda: row(99, vector=[0.0] * DIM),
    "empty content": lambda: row(99, content=" "),
    "NUL in user id": lambda: row(99, user_id="al\u0000ice"),
    "metadata with Infinity": lambda: json.dumps(row(99, metadata={"x": 1.5})).replace("1.5", "Infinity"),
    "record is a list": lambda: {"record": [1, 2], "vector": None},
    "not an object": lambda: "[1, 2, 3]",
    "torn JSON": lambda: '{"record": {"id": "x"',
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
@pytest.mark.parametrize("target", ["new", "existing"])
def test_a_bad_line_is_a_clean_error_and_the_store_is_unchanged(
    case: str, target: str, tmp_path: Path, existing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.jsonl"
    starts = write(dump, header(), [row(i) for i in range(5)] + [BAD_LINES[case]()] + [row(i) for i in range(5, 9)])
    store = tmp_path / "new.db" if target == "new" else existing
    before = snapshot(store)
    code, out, err = run(capsys, "import", str(dump), "--store", str(store), "--batch-size", "2", "--quiet")
    assert code == 2, (out, err)
    assert err.startswith(f"error: {dump}: bad line after byte {starts[5]}: "), err
    assert "Traceback" not in err and err.count("\n") == 1
    assert snapshot(store) == (before if target == "existing" else (None, None, [], []))
    assert not (tmp_path / "dump.jsonl.progress").exists()


@pytest.mark.parametrize("dimension", [10**12, 0, -8, "8", 8.0, True])
def test_a_header_with_an_absurd_dimension_leaves_the_empty_target_unbound(
    dimension: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.jsonl"
    write(dump, header(dimension=dimension), [row(i) for i in range(3)])
    target = tmp_path / "t.db"
    code, _, err = run(capsys, "import", str(dump), "--store", str(target), "--quiet")
    assert code == 2 and "dimension" in err and "Traceback" not in err
    with LocalStore(target) as store:
        assert (store.dimension, store.embedder_name, store.count()) == (None, None, 0)
    # The target still takes a good import afterwards.
    good = tmp_path / "good.jsonl"
    write(good, header(), [row(i) for i in range(3)])
    code, out, _ = run(capsys, "import", str(good), "--store", str(target), "--quiet")
    assert code == 0 and "imported 3 memories" in out
    with LocalStore(target) as store:
        assert (store.dimension, store.embedder_name, store.count("alice")) == (DIM, "hashing-8", 3)


def test_vectors_that_disagree_with_the_header_dimension_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.jsonl"
    starts = write(dump, header(dimension=16), [row(i) for i in range(3)])
    target = tmp_path / "t.db"
    code, _, err = run(capsys, "import", str(dump), "--store", str(target), "--quiet")
    assert code == 2 and f"bad line after byte {starts[0]}" in err and "16" in err
    assert snapshot(target) == (None, None, [], [])


def test_a_line_of_another_user_is_refused_unless_remapped_with_user(
    tmp_path: Path, existing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "alice.jsonl"
    lines = [row(i) for i in range(1200)]
    lines.insert(700, row(5000, user="mallory"))
    starts = write(dump, header(users=["alice"]), lines)
    before = snapshot(existing)
    code, _, err = run(capsys, "import", str(dump), "--store", str(existing), "--quiet")
    assert code == 2 and f"bad line after byte {starts[700]}" in err
    assert "'mallory'" in err and "--user" in err
    assert snapshot(existing) == before

    code, out, _ = run(capsys, "import", str(dump), "--store", str(existing), "--user", "carol", "--quiet")
    assert code == 0 and "imported 1201 memories" in out
    with LocalStore(existing) as store:
        assert sorted(store.users()) == ["carol", "zoe"] and store.count("carol") == 1201


def test_the_count_is_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "dump.jsonl"
    write(dump, header(), [row(i) for i in range(1200)])
    for batch in ("500", "7", "1200"):
        target = tmp_path / f"t{batch}.db"
        code, out, _ = run(capsys, "import", str(dump), "--store", str(target), "--batch-size", batch, "--quiet")
        assert code == 0 and f"imported 1200 memories of 1 user into {target}" in out
        with LocalStore(target) as store:
            assert store.count() == 1200


def test_a_line_repeating_an_id_is_refused_not_counted_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.jsonl"
    lines = [row(i) for i in range(1200)]
    lines.append(row(17))  # 1,201 lines, 1,200 memories
    starts = write(dump, header(), lines)
    target = tmp_path / "t.db"
    code, out, err = run(capsys, "import", str(dump), "--store", str(target), "--quiet")
    assert code == 2 and "imported 1201" not in out
    assert f"bad line after byte {starts[1200]}" in err and "earlier line" in err
    assert snapshot(target) == (None, None, [], [])


def test_a_whole_store_export_names_its_users_in_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dump.jsonl"
    write(dump, header(users=None), [row(i) for i in range(3)] + [row(9, user="bob")])
    code, out, _ = run(capsys, "import", str(dump), "--store", str(tmp_path / "t.db"), "--quiet")
    assert code == 0 and "imported 4 memories of 2 users" in out and "alice 3, bob 1" in out


def test_the_records_bound_counters_to_what_every_store_keeps_exactly() -> None:
    rec = MemoryRecord.create(user_id="u", content="x", timestamp=T0)
    with pytest.raises(InvalidInputError, match="access_count"):
        rec.evolve(access_count=2**63)
    with pytest.raises(InvalidInputError, match="version"):
        MemoryRecord.from_json_dict({**rec.to_json_dict(), "version": 10**30})
    assert rec.evolve(access_count=2**53 - 1, version=2**53 - 1).version == 2**53 - 1
