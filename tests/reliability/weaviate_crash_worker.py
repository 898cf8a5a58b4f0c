"""A process that writes to Weaviate and is killed (SIGKILL) right after its write, before its checks.

Used by ``test_weaviate_crash_windows.py``. The write is a dead-letter replay
(``"call": "replay"``), a memory write that carries the user's forget epoch (``"call": "upsert"``:
``content``, ``record_id`` unused), or a read-modify-write of the stored memory ``record_id``
(``"call": "touch"`` or ``"update"``). Just before the write (the batch, or the merge of a touch
or update), a second store object (its own dead-letter file, as another process has) deletes the
memory or forgets the user, after the call's own reads; the write then lands on what was removed,
and this process dies before any after-write check could remove what it put back.

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
    hooked = "_merge" if spec["call"] in ("touch", "update") else "_write"
    write = getattr(store, hooked)

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

    stored = store.get(spec["user"], [spec["record_id"]]) if spec["call"] == "update" else []
    setattr(store, hooked, remove_then_write)
    if spec["call"] == "replay":
        store.replay_dead_letters()
    elif spec["call"] == "touch":
        store.touch(spec["user"], [spec["record_id"]], datetime.now(timezone.utc))
    elif spec["call"] == "update":
        store.update([r.model_copy(update={"content": spec["content"]}) for r in stored])
    else:
        rec = MemoryRecord.create(
            user_id=spec["user"], content=spec["content"], timestamp=datetime.now(timezone.utc).replace(microsecond=0)
        )
        epoch = store.user_epoch(spec["user"])
        store.upsert([rec], np.full((1, 4), 0.5, dtype=np.float32), epochs={spec["user"]: epoch})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
