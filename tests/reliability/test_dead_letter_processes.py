"""A dead-letter replay killed between its write and its checks brings nothing back (real processes).

``WeaviateStore.replay_dead_letters`` checks the server (forget epochs, tombstones), writes, then
checks again and deletes what a delete or a forget that landed meanwhile should have removed. A
process can die between the write and that second check; the replay's queue bookkeeping comes
last, so the dead letter is still queued, and the next replay (here: another process, the test's)
must drop it *and* delete what the dead one put back. The dying process is a real one killed with
SIGKILL (``tests/reliability/replay_crash_worker.py``), the server a real ``weaviate-server``.
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

        spec = {
            "url": server.url,
            "grpc_port": server.grpc_port,
            "collection": "Rel",
            "dead_letters": str(dead_letters),
            "other_dead_letters": str(tmp_path / "other.sqlite"),
            "user": "alice",
            "record_id": old.id,
            "action": action,
        }
        proc = subprocess.run(
            [sys.executable, "-m", "tests.reliability.replay_crash_worker", json.dumps(spec)],
            cwd=ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert "WRITTEN" in proc.stdout
        # The dead process put the memory back after the delete / forget, and its letter is still queued.
        put_back = store.get("alice", [old.id])
        assert put_back == [newer]
        assert store.dead_letter_count() == 1
        # A recall touches the memory before anyone replays again: still recognised as the replay's write.
        store.touch("alice", [old.id], T0)
        assert [r.access_count for r in store.get("alice", [old.id])] == [1]

        assert store.replay_dead_letters() == 0
        report(
            "dead-letter replay killed after its write",
            action=action,
            put_back_by_the_killed_replay=len(put_back),
            left_after_the_next_replay=store.count("alice"),
        )
        assert store.get("alice", [old.id]) == []
        assert store.count("alice") == 0
        assert store.dead_letter_count() == 0
    finally:
        store.close()
