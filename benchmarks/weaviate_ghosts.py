"""Index ghosts on a real Weaviate, and whether the summary watermark reads through them.

Usage::

    python -m benchmarks.weaviate_ghosts            # writes results/weaviate_ghosts.{md,json}
    python -m benchmarks.weaviate_ghosts --trials 300

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
move, and whether the store's reads were right. Needs ``weaviate-server`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import argparse
import json
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
from hybrid_memory.stores.weaviate.mapping import tenant_name  # noqa: E402
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


def run(trials: int, seed: int) -> dict[str, Any]:
    """Start a server, run ``trials`` trials, and count (module docstring)."""
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
        try:
            with ThreadPoolExecutor(RACERS) as pool:
                rows = [trial(store, clients, pool, rng) for _ in range(trials)]
        finally:
            for c in clients:
                c.close()
            store.close()
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
    }


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# Index ghosts on a real Weaviate and the summary watermark",
            "",
            f"Measured {r['when']} (load {r['load']:.1f}) with `python -m benchmarks.weaviate_ghosts"
            f" --trials {r['trials']} --seed {r['seed']}` on weaviate-server v1.39.0, one node."
            " Each trial races four creates of one watermark move (module docstring).",
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
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "weaviate_ghosts.md")
    args = p.parse_args(argv)
    report = run(args.trials, args.seed)
    args.out.write_text(render(report), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
