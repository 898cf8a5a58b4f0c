"""Index ghosts on a real Weaviate, and whether the store's reads see through them.

Usage::

    python -m benchmarks.weaviate_ghosts            # writes results/weaviate_ghosts.{md,json}
    python -m benchmarks.weaviate_ghosts --trials 300 --status-trials 300

Weaviate 1.39 updates an object's inverted index after it releases the object's lock
(``Shard.putObjectLSM``). When two creates of one UUID both pass the server's existence check (it
has no conditional write), the first writer's index entries can land after the second writer
removed them: the object then stays indexed under the loser's values as well as its own
(``hybrid_memory.stores.weaviate.turns``, *Index ghosts*). This script causes that on purpose on
the summary watermark of a real :class:`WeaviateStore`, one session per trial:

1. the store appends three turns and moves the watermark from 0 to the first turn's ``seq``;
2. four clients race to create the next move (the object at the UUID of "the move from that
   value"), each with its own ``seq`` and a content of 5 or 3,000 words (at random): long contents
   slow a create's index update and make ghosts frequent enough to count (the store's own moves
   carry a short token, so their races are rarer: see the turns module);
3. the store reads the watermark, moves it one past, and reads it again.

Counted per trial: creates told they won, whether a loser's ``seq`` still finds the object
(a ghost), whether a sort by ``seq`` alone (the read before the fix) would have missed the last
move, and whether the store's reads were right.

A second experiment does the same to a memory's status (package docstring of
:mod:`hybrid_memory.stores.weaviate`, *Index ghosts*), one memory per trial: a store writes it
archived, then two other stores (two processes) at once restore it (``update`` to active) and
archive it again. Counted after both updates returned: the memories the updating stores found
indexed under another status than the stored one and re-indexed, memories whose stored status is
archived but that a filter on ``status == active`` still matches (a ghost left), memories that a
filter on their stored status does not match, and the store's reads (``search``, ``list``,
``neighbours``) that returned a memory whose stored status is not active (the reads check their
filter on the stored values).
Needs ``weaviate-server`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybrid_memory.stores.weaviate import WeaviateServer, WeaviateStore, find_weaviate_binary  # noqa: E402
from hybrid_memory.stores.weaviate.mapping import object_uuid, tenant_name  # noqa: E402
from hybrid_memory.stores.weaviate.turns import _mark_epoch, _summary_uuid  # noqa: E402
from hybrid_memory.testing.store_contract import turn  # noqa: E402

USER = "alice"
RACERS = 4


def _body(rng: random.Random, words: int) -> str:
    return " ".join(f"{rng.getrandbits(32):x}" for _ in range(words))


def trial(store: WeaviateStore, clients: list[Any], pool: ThreadPoolExecutor, rng: random.Random) -> dict[str, Any]:
    """One session: a raced move, then the store's reads (module docstring)."""
    from weaviate.classes.query import Filter, Sort
    from weaviate.exceptions import UnexpectedStatusCodeError

    session = f"s{uuid.uuid4().hex[:12]}"
    stored = store.append_turns([turn(USER, session, f"turn {i}") for i in range(3)], epoch=0)
    first = stored[0].seq
    assert store.mark_summarized(USER, session, first, expected=0, epoch=0)
    uid = _summary_uuid(USER, session, first)
    seqs = [first + 1 + rng.randrange(1_000_000) for _ in range(RACERS)]
    bodies = [_body(rng, rng.choice([5, 3000])) for _ in range(RACERS)]
    start = threading.Barrier(RACERS)

    def create(i: int) -> bool:
        h = clients[i].collections.use(store.turns_collection).with_tenant(tenant_name(USER))
        props = {
            "user_id": USER,
            "session_id": session,
            "turn_id": "summarized",
            "content": bodies[i],
            "seq": seqs[i],
            "epoch": _mark_epoch(0),
        }
        start.wait(timeout=30)
        try:
            h.data.insert(properties=props, uuid=uid)
        except UnexpectedStatusCodeError as exc:
            if exc.status_code != 422:
                raise
            return False
        return True

    won = list(pool.map(create, range(RACERS)))
    raw = clients[0].collections.use(store.turns_collection).with_tenant(tenant_name(USER))
    kept = int(raw.query.fetch_object_by_id(uid, return_properties=["seq"]).properties["seq"])
    ghosts = [
        s
        for s in seqs
        if s != kept
        and raw.query.fetch_objects(
            filters=Filter.all_of(
                [Filter.by_property("session_id").equal(session), Filter.by_property("seq").equal(s)]
            ),
            limit=2,
        ).objects
    ]
    read = store.summarized_upto(USER, session)
    moved = store.mark_summarized(USER, session, kept + 1, expected=kept, epoch=0)
    after = store.summarized_upto(USER, session)
    sort_alone = raw.query.fetch_objects(
        filters=Filter.all_of(
            [
                Filter.by_property("session_id").equal(session),
                Filter.by_property("turn_id").equal("summarized"),
                Filter.by_property("epoch").equal(_mark_epoch(0)),
            ]
        ),
        sort=Sort.by_property("seq", ascending=False),
        limit=1,
        return_properties=["seq"],
    ).objects
    return {
        "winners": won.count(True),
        "ghosts": len(ghosts),
        "sort_alone_misses": not sort_alone or int(sort_alone[0].properties["seq"]) != kept + 1,
        "store_right": read == kept and moved and after == kept + 1,
    }


def status_trial(stores: list[WeaviateStore], pool: ThreadPoolExecutor, rng: random.Random) -> dict[str, Any]:
    """One memory: an archive and a restore at once from two stores, then the first store's reads."""
    import numpy as np
    from weaviate.classes.query import Filter

    from hybrid_memory.records import MemoryRecord
    from hybrid_memory.values import MemoryFilter, SearchRequest

    store = stores[0]
    record = MemoryRecord.create(user_id=USER, content=f"tea {_body(rng, rng.choice([5, 3000]))}", status="archived")
    vector = np.asarray([[rng.gauss(0.0, 1.0) for _ in range(8)]], dtype=np.float32)
    store.upsert([record], vector)
    start = threading.Barrier(2)

    def write(k: int) -> None:
        start.wait(timeout=30)
        stores[k + 1].update([record.evolve(status=("active", "archived")[k])])

    list(pool.map(write, range(2)))
    raw = store.client.collections.use(store.collection).with_tenant(tenant_name(USER))
    uid = object_uuid(record.id)
    stored = str(raw.query.fetch_object_by_id(uid, return_properties=["status"]).properties["status"])

    def indexed(status: str) -> bool:
        where = Filter.all_of([Filter.by_id().equal(uid), Filter.by_property("status").equal(status)])
        return bool(raw.query.fetch_objects(filters=where, limit=1, return_properties=[]).objects)

    hits = store.search(SearchRequest(user_id=USER, query="tea", vector=vector[0], alpha=0.5, limit=5))
    listed = store.list(USER, filter=MemoryFilter(), limit=5)
    [near] = store.neighbours(USER, vector, threshold=0.5, top=5)
    returned = {h.record.id for h in hits} | {r.id for r in listed} | {n[0] for n in near}
    row = {
        "stored_active": stored == "active",
        "ghost": stored != "active" and indexed("active"),
        "unindexed": not indexed(stored),
        "read_wrong": stored != "active" and record.id in returned,
    }
    store.delete(USER, [record.id])
    return row


class _Reindexed(logging.Handler):
    """Counts the memories the stores re-indexed (their ``re-indexed N memories`` log records)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("re-indexed"):
            self.count += int(record.args[0])  # type: ignore[index]


def run(trials: int, seed: int, status_trials: int = 300) -> dict[str, Any]:
    """Start a server, run ``trials`` watermark and ``status_trials`` status trials, and count (module docstring)."""
    import weaviate

    binary = find_weaviate_binary()
    if binary is None:
        raise SystemExit("no weaviate-server binary (WEAVIATE_BINARY or PATH; .ci/run installs it)")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        server = WeaviateServer(binary, data_path=Path(tmp) / "data", log_path=Path(tmp) / "server.log")
        server.start()
        host, port = server.url.split("//", 1)[1].rsplit(":", 1)
        store = WeaviateStore.connect(server.url, grpc_port=server.grpc_port, collection="Ghosts")
        clients = [
            weaviate.connect_to_local(host=host, port=int(port), grpc_port=server.grpc_port) for _ in range(RACERS)
        ]
        others = [
            WeaviateStore.connect(server.url, grpc_port=server.grpc_port, collection="GhostMemories") for _ in range(3)
        ]
        reindexed = _Reindexed()
        log = logging.getLogger("hybrid_memory.stores.weaviate")
        log.addHandler(reindexed)
        log.setLevel(logging.INFO)
        try:
            with ThreadPoolExecutor(RACERS) as pool:
                rows = [trial(store, clients, pool, rng) for _ in range(trials)]
                status_rows = [status_trial(others, pool, rng) for _ in range(status_trials)]
        finally:
            log.removeHandler(reindexed)
            for c in clients:
                c.close()
            for s in [store, *others]:
                s.close()
            server.stop()
    ghosted = [r for r in rows if r["ghosts"]]
    return {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": os.getloadavg()[0],
        "trials": trials,
        "seed": seed,
        "double_winners": sum(r["winners"] > 1 for r in rows),
        "trials_with_a_ghost": len(ghosted),
        "sort_alone_misses": sum(r["sort_alone_misses"] for r in rows),
        "store_wrong": sum(not r["store_right"] for r in rows),
        "store_wrong_with_a_ghost": sum(not r["store_right"] for r in ghosted),
        "status_trials": status_trials,
        "status_stored_active": sum(r["stored_active"] for r in status_rows),
        "status_reindexed": reindexed.count,
        "status_ghosts": sum(r["ghost"] for r in status_rows),
        "status_unindexed": sum(r["unindexed"] for r in status_rows),
        "status_reads_wrong": sum(r["read_wrong"] for r in status_rows),
    }


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# Index ghosts on a real Weaviate: the summary watermark and memory statuses",
            "",
            f"Measured {r['when']} (load {r['load']:.1f}) with `python -m benchmarks.weaviate_ghosts"
            f" --trials {r['trials']} --status-trials {r['status_trials']} --seed {r['seed']}`"
            " on weaviate-server v1.39.0, one node (module docstring).",
            "",
            "## The summary watermark",
            "",
            "Each trial races four creates of one watermark move.",
            "",
            "| trials | two or more creates told they won | trials leaving an index ghost"
            " | a sort by `seq` alone misses the last move | store reads wrong |",
            "|---|---|---|---|---|",
            f"| {r['trials']} | {r['double_winners']} | {r['trials_with_a_ghost']} | {r['sort_alone_misses']}"
            f" | {r['store_wrong']} ({r['store_wrong_with_a_ghost']} of them with a ghost) |",
            "",
            "A ghost: the object of the move is still found by a losing create's `seq`. The store reads the"
            " watermark by the sort and then follows the moves by id, so a ghost does not hold it back.",
            "",
            "## Memory statuses",
            "",
            "Each trial stores one archived memory; two other stores then restore it and archive it at once.",
            "",
            "| trials | stored active at the end | found indexed under another status and re-indexed by the store"
            " | left archived but matched by `status == active` (ghost) | left unmatched by its stored status"
            " | store reads returning a memory that is not active |",
            "|---|---|---|---|---|---|",
            f"| {r['status_trials']} | {r['status_stored_active']} | {r['status_reindexed']} | {r['status_ghosts']}"
            f" | {r['status_unindexed']} | {r['status_reads_wrong']} |",
            "",
            "An update that changes a status checks afterwards which statuses the index matches the memory by,"
            " and re-indexes it when that is not exactly its stored status (it writes the vector moved by one ulp,"
            " then the vector itself: a new internal document id, indexed afresh). The reads (`search`, `list`,"
            " `neighbours`) also check their filter again on the stored properties.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=600)
    p.add_argument("--status-trials", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "weaviate_ghosts.md")
    args = p.parse_args(argv)
    report = run(args.trials, args.seed, args.status_trials)
    args.out.write_text(render(report), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
