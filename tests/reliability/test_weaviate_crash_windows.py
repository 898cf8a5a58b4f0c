"""A process killed between its Weaviate write and its after-write checks leaves nothing deleted behind.

Weaviate has no transactions: a write checks the server (forget epochs, tombstones), writes, then
checks again and deletes what a delete or a forget that landed meanwhile should have removed. A
process can die between the write and that second check. The dying process here is a real one
killed with SIGKILL (``tests/reliability/weaviate_crash_worker.py``), the server a real
``weaviate-server``, the survivor another process (the test's).

* A dead-letter replay: its queue bookkeeping comes last, so the letter is still queued, and the
  next replay must drop it *and* delete what the dead one put back (a deleted memory, or a
  forgotten user's).
* A memory write racing a forget: the object carries the epoch it was checked against, so no read
  returns it and the first read deletes it.
* A touch or an update racing a delete or a forget: it changes the object in place (a merge), which
  the server refuses for an object that is gone, so there is nothing to undo.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory.errors import StoreUnavailableError
from hybrid_memory.records import MemoryRecord
from tests.reliability.conftest import child_env, report

pytestmark = [pytest.mark.weaviate, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def crash(spec: dict[str, Any]) -> None:
    """Run ``weaviate_crash_worker`` with ``spec``; it must have written, then died by SIGKILL."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability.weaviate_crash_worker", json.dumps(spec)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "WRITTEN" in proc.stdout


def seeded(server: Any, tmp_path: Path, content: str) -> tuple[Any, MemoryRecord]:
    """A store on ``server`` (collection ``Rel``) holding one memory of ``alice``, written with her forget epoch."""
    from hybrid_memory.stores.weaviate import WeaviateStore

    store = WeaviateStore.connect(
        server.url, grpc_port=server.grpc_port, collection="Rel", dead_letter_path=tmp_path / "dead-letters.sqlite"
    )
    store.bind_embedder("test", 4)
    said = MemoryRecord.create(user_id="alice", content=content, timestamp=T0)
    store.upsert([said], np.eye(1, 4, dtype=np.float32), epochs={"alice": store.user_epoch("alice")})
    return store, said


def spec_for(server: Any, tmp_path: Path, record_id: str, **fields: str) -> dict[str, Any]:
    """The worker's spec for user ``alice`` on ``server``, collection ``Rel``; ``fields``: action, call, content."""
    return {
        "url": server.url,
        "grpc_port": server.grpc_port,
        "collection": "Rel",
        "dead_letters": str(tmp_path / "child.sqlite"),
        "other_dead_letters": str(tmp_path / "other.sqlite"),
        "user": "alice",
        "record_id": record_id,
        **fields,
    }


@pytest.mark.parametrize("action", ["delete", "forget"])
def test_a_replay_killed_after_its_write_leaves_nothing_deleted_behind(
    private_weaviate: Any, tmp_path: Path, action: str
) -> None:
    from hybrid_memory.stores.weaviate import WeaviateStore

    server = private_weaviate()
    dead_letters = tmp_path / "dead-letters.sqlite"
    store = WeaviateStore.connect(
        server.url, grpc_port=server.grpc_port, collection="Rel", dead_letter_path=dead_letters
    )
    try:
        store.max_retries = 0
        store.bind_embedder("test", 4)
        old = MemoryRecord.create(user_id="alice", content="alice's old address", timestamp=T0)
        store.upsert([old], np.eye(1, 4, dtype=np.float32), epochs={"alice": store.user_epoch("alice")})
        newer = old.model_copy(update={"content": "alice's new address"})
        server.stop(keep_data=True)
        with pytest.raises(StoreUnavailableError, match="dead-letter"):
            store.upsert([newer], np.eye(1, 4, 1, dtype=np.float32), epochs={"alice": 0})
        server.start()

        crash({**spec_for(server, tmp_path, old.id, action=action, call="replay"), "dead_letters": str(dead_letters)})
        # The dead process put the memory back after the delete / forget, and its letter is still queued.
        put_back = store.count("alice")
        assert put_back == 1 and store.dead_letter_count() == 1
        if action == "delete":
            assert store.get("alice", [old.id]) == [newer]
            # A recall touches it before anyone replays again: still recognised as the replay's write.
            store.touch("alice", [old.id], T0)
            assert [r.access_count for r in store.get("alice", [old.id])] == [1]
        else:  # it carries the epoch from before the forget: no read returns it
            assert store.get("alice", [old.id]) == []

        assert store.replay_dead_letters() == 0
        report(
            "dead-letter replay killed after its write",
            action=action,
            put_back_by_the_killed_replay=put_back,
            left_after_the_next_replay=store.count("alice"),
        )
        assert store.get("alice", [old.id]) == []
        assert store.count("alice") == 0
        assert store.dead_letter_count() == 0
    finally:
        store.close()


def test_a_write_killed_after_it_raced_a_forget_is_never_read_back(private_weaviate: Any, tmp_path: Path) -> None:
    from hybrid_memory.stores.base import SearchRequest

    server = private_weaviate()
    store, said = seeded(server, tmp_path, "alice's old secret")
    try:
        crash(
            spec_for(
                server,
                tmp_path,
                said.id,
                action="forget",
                call="upsert",
                content="alice's secret said just before the forget",
            )
        )
        left = store.count("alice")  # the dead process's write landed after the forget
        assert left == 1
        hits = store.search(SearchRequest(user_id="alice", query="alice secret", vector=None, alpha=0.0))
        report("memory write killed after it raced a forget", left_by_the_killed_write=left, read_back=len(hits))
        assert hits == []
        assert store.list("alice") == []
        assert store.count("alice") == 0  # the first read deleted it
    finally:
        store.close()


@pytest.mark.parametrize(
    ("call", "action"), [("touch", "delete"), ("update", "delete"), ("touch", "forget"), ("update", "forget")]
)
def test_a_touch_or_update_killed_after_it_raced_a_delete_leaves_the_memory_deleted(
    private_weaviate: Any, tmp_path: Path, call: str, action: str
) -> None:
    """Before merges, the batch insert of a touch or update re-created the memory and only a check after it undid that."""
    server = private_weaviate()
    store, said = seeded(server, tmp_path, "alice's old address")
    try:
        crash(
            spec_for(
                server, tmp_path, said.id, action=action, call=call, content="alice's new address, by a dying process"
            )
        )
        left = store.count("alice")  # an aggregate: it also counts what no read would return
        report(
            "touch or update killed after it raced a delete", call=call, action=action, left_by_the_killed_write=left
        )
        assert left == 0
        assert store.get("alice", [said.id]) == [] and store.list("alice") == []
    finally:
        store.close()
