"""``hybrid-memory consolidate --all-users`` racing a ``forget`` of another process.

A user forgotten while the command runs (the CLI ``forget``, or ``forget_user`` of an app process)
makes that user's consolidation raise :class:`~hybrid_memory.errors.UserForgottenError`. With
``--all-users`` the command skips that user, says so in its summary line and goes on with the
others; with ``--user`` it still fails with the error. The forget lands through a hook on the
store (right after consolidate read the user's memories), from a second store object on the same
file, so the race is deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder
from tests.unit.test_cli_ops import build_store, records, run

_NOW = ("--now", "2026-06-01T00:00Z")  # every memory of the story has faded by then


def _forget_during_its_consolidation(db: Path, user: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Forget ``user`` from another store object right after consolidate lists its memories."""
    real = LocalStore.list
    forgotten: list[int] = []

    def hooked(self: LocalStore, user_id: str, *args: Any, **kwargs: Any) -> Any:
        out = real(self, user_id, *args, **kwargs)
        if user_id == user and not forgotten:
            with HybridMemory(LocalStore(db), embedder=HashingEmbedder()) as other:
                forgotten.append(int(other.forget_user(user)))
        return out

    monkeypatch.setattr(LocalStore, "list", hooked)
    return forgotten


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    build_store(path)
    return path


def test_all_users_skips_a_user_forgotten_during_the_run_and_goes_on(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    forgotten = _forget_during_its_consolidation(db, "alice", monkeypatch)
    code, out, _ = run(capsys, "consolidate", "--store", str(db), "--all-users", *_NOW, "--quiet")
    assert code == 0 and forgotten == [4]
    lines = out.splitlines()
    assert lines[0].startswith("李雷: checked 3, archived 0, deleted 3")  # the user after alice was consolidated
    assert lines[-1] == "skipped 1 user(s) forgotten during the run: alice"
    assert "alice:" not in out
    assert {u for u, _ in records(db)} == set()  # alice forgotten, 李雷's faded memories deleted


def test_all_users_json_keeps_stdout_the_list_of_reports(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _forget_during_its_consolidation(db, "alice", monkeypatch)
    code, out, err = run(capsys, "consolidate", "--store", str(db), "--all-users", *_NOW, "--json", "--quiet")
    assert code == 0 and [r["user_id"] for r in json.loads(out)] == ["李雷"]
    assert "skipped 1 user(s) forgotten during the run: alice" in err


def test_one_user_forgotten_during_the_run_still_fails_typed(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _forget_during_its_consolidation(db, "alice", monkeypatch)
    code, out, err = run(capsys, "consolidate", "--store", str(db), "--user", "alice", *_NOW)
    assert code == 2 and out == "" and "'alice' was forgotten" in err
