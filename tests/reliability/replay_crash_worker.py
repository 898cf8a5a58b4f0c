"""A process that replays the dead letters and is killed (SIGKILL) right after the replay's write.

Used by ``test_dead_letter_processes.py``. While the replay runs, a second store object (its own
dead-letter file, as another process has) deletes the memory or forgets the user after the
replay's checks read the server and before its write, so the write puts back what was removed;
then this process dies before the replay's after-write checks and its queue bookkeeping.

Usage: ``python -m tests.reliability.replay_crash_worker '<json spec>'`` with ``url``,
``grpc_port``, ``collection``, ``dead_letters``, ``other_dead_letters``, ``user``, ``record_id``
and ``action`` (``"delete"`` or ``"forget"``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

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
    store.replay_dead_letters()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
