"""A process that writes to Weaviate and is killed (SIGKILL) right after its write, before its checks.

Used by ``test_dead_letter_processes.py``. The write is either a dead-letter replay
(``"call": "replay"``) or a memory write that carries the user's forget epoch (``"call": "upsert"``:
``content``, ``record_id`` unused). Just before the write, a second store object (its own
dead-letter file, as another process has) deletes the memory or forgets the user, after the
call's own checks read the server; the write then puts back what was removed, and this process
dies before the after-write checks that would remove it again.

Usage: ``python -m tests.reliability.weaviate_crash_worker '<json spec>'`` with ``url``,
``grpc_port``, ``collection``, ``dead_letters``, ``other_dead_letters``, ``user``, ``record_id``,
``action`` (``"delete"`` or ``"forget"``) and ``call``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime, timezone
from typing import Any

import numpy as np

from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.weaviate import WeaviateStore


def main(spec: dict[str, Any]) -> None:
    def connect(dead_letters: str) -> WeaviateStore:
        return WeaviateStore.connect(
            spec["url"], grpc_port=spec["grpc_port"], collection=spec["collection"], dead_letter_path=dead_letters
        )

    store = connect(spec["dead_letters"])
    write = store._write

    def remove_then_write(*args: Any, **kwargs: Any) -> Any:
        other = connect(spec["other_dead_letters"])
        try:
            if spec["action"] == "forget":
                other.delete_user(spec["user"])
            else:
                other.delete(spec["user"], [spec["record_id"]])
        finally:
            other.close()
        out = write(*args, **kwargs)
        print("WRITTEN", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # dies between the write and the next line
        return out

    store._write = remove_then_write  # type: ignore[method-assign]
    if spec["call"] == "replay":
        store.replay_dead_letters()
    else:
        rec = MemoryRecord.create(
            user_id=spec["user"], content=spec["content"], timestamp=datetime.now(timezone.utc).replace(microsecond=0)
        )
        epoch = store.user_epoch(spec["user"])
        store.upsert([rec], np.full((1, 4), 0.5, dtype=np.float32), epochs={spec["user"]: epoch})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
