"""Processes that bind embedders to one store at once agree on one of them (architecture §10).

``HybridMemory`` binds its embedder (name and vector dimension) to the store when it is built; the
store then refuses another one (``EmbedderMismatchError``, ``EmbeddingDimensionError``), because
vectors of two models in one index rank nonsense. Workers started at once on a fresh store with
different embedders (a deploy that changed the model while old workers still run) must not all be
told they won: exactly one binds, every other one gets the typed error, and every process reads
back the winner.

* Deterministic interleavings with two store objects on the same data (``stores``): one read the
  store's binding (none yet), then the other bound another embedder, then the first binds or
  writes its first vectors.
* Real processes: four workers open the store, wait at a barrier and bind four different
  embedders (two dimensions) at the same instant, six fresh stores in a row; and the same on
  stores whose first vectors were written without a name (the workers race to name them).

LocalStore on a file and a real Weaviate server (``tests/weaviate_fixtures.py``).
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from hybrid_memory.errors import EmbedderMismatchError, EmbeddingDimensionError
from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing.store_contract import DIM, rec
from tests.contract.test_forget_races import _before
from tests.reliability.proc_worker import open_store

WORKERS = 4
ROUNDS = 6


def _name(worker: int) -> str:
    return f"emb-{worker}"


def _dimension(worker: int, spec: dict[str, Any] | None = None) -> int:
    if spec is not None and spec["unbound_first_write"]:
        return DIM  # the dimension is bound already: the workers race to name it
    return DIM if worker % 2 == 0 else 2 * DIM


@pytest.mark.parametrize(
    ("other_dimension", "error"),
    [(DIM, EmbedderMismatchError), (2 * DIM, EmbeddingDimensionError)],
    ids=["same dimension", "other dimension"],
)
def test_a_store_that_read_no_binding_cannot_bind_another_embedder_after_another_process_did(
    stores: tuple[MemoryStore, MemoryStore], other_dimension: int, error: type[Exception]
) -> None:
    a, b = stores
    assert a.embedder_name is None and a.dimension is None  # A has read the store: nothing bound yet
    b.bind_embedder("emb-b", DIM)
    with pytest.raises(error):
        a.bind_embedder("emb-a", other_dimension)
    for s in (a, b):
        assert (s.embedder_name, s.dimension) == ("emb-b", DIM)
    a.bind_embedder("emb-b", DIM)  # the recorded one binds through either


def test_a_first_write_without_binding_keeps_to_the_dimension_another_process_bound(
    stores: tuple[MemoryStore, MemoryStore],
) -> None:
    a, b = stores
    assert a.dimension is None
    b.bind_embedder("emb-b", DIM)
    with pytest.raises(EmbeddingDimensionError):
        a.upsert([rec("u", "written with another model")], np.ones((1, 2 * DIM), dtype=np.float32))
    assert a.count("u") == 0 and b.count("u") == 0
    assert a.dimension == DIM


def test_naming_a_store_whose_first_vectors_were_written_unbound_keeps_the_first_name(
    stores: tuple[MemoryStore, MemoryStore],
) -> None:
    """A store used directly (not through ``HybridMemory``) binds its dimension on the first write, no name."""
    a, b = stores
    a.upsert([rec("u", "written before any embedder was named")], np.ones((1, DIM), dtype=np.float32))
    assert (a.embedder_name, a.dimension) == (None, DIM)  # A has read the store: no name yet
    b.bind_embedder("emb-b", DIM)
    with pytest.raises(EmbedderMismatchError):
        a.bind_embedder("emb-a", DIM)
    for s in (a, b):
        assert (s.embedder_name, s.dimension) == ("emb-b", DIM)
    a.bind_embedder("emb-b", DIM)


def _open(spec: dict[str, Any], worker: int) -> MemoryStore:
    dead_letters = Path(spec["tmp"]) / f"dead-letters-{worker}.sqlite"
    return cast(MemoryStore, open_store({**spec, "kind": spec["backend"], "dead_letter_path": dead_letters}))


def _bind_at_the_barrier(spec: dict[str, Any], worker: int, barrier: Any) -> tuple[str, str | None, int | None]:
    """Open the store, wait for the other workers, bind this worker's embedder; what happened and what is bound."""
    store = _open(spec, worker)
    try:
        barrier.wait(timeout=120)
        try:
            store.bind_embedder(_name(worker), _dimension(worker, spec))
            outcome = "bound"
        except EmbedderMismatchError:
            outcome = "mismatch"
        except EmbeddingDimensionError:
            outcome = "dimension"
        return outcome, store.embedder_name, store.dimension
    finally:
        store.close()


def _worker(specs: list[dict[str, Any]], worker: int, barrier: Any, out: Any) -> None:
    for spec in specs:
        try:
            out.put((spec["round"], worker, *_bind_at_the_barrier(spec, worker, barrier)))
        except BaseException as exc:  # reported, so the test fails with the reason instead of hanging
            out.put((spec["round"], worker, f"error: {type(exc).__name__}: {exc}", None, None))
            barrier.abort()
            raise


@pytest.mark.parametrize("first_write", ["fresh store", "unbound first write"])
@pytest.mark.parametrize("backend", ["local", pytest.param("weaviate", marks=pytest.mark.weaviate)])
def test_processes_binding_different_embedders_at_once_agree_on_one(
    backend: str, first_write: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``unbound first write``: the store's first vectors were written without a name, so the workers race to name it."""
    specs: list[dict[str, Any]] = []
    for r in range(ROUNDS):
        spec: dict[str, Any] = {
            "backend": backend,
            "round": r,
            "tmp": str(tmp_path),
            "unbound_first_write": first_write == "unbound first write",
        }
        if backend == "local":
            spec["path"] = str(tmp_path / f"round-{r}.db")
        else:
            endpoint = request.getfixturevalue("weaviate_endpoint")
            spec.update(
                url=endpoint.url,
                grpc_port=endpoint.grpc_port,
                api_key=endpoint.api_key,
                collection="B" + uuid.uuid4().hex[:20],
            )
        specs.append(spec)
        if spec["unbound_first_write"]:
            store = _open(spec, -1)
            try:
                store.upsert([rec("u", "written before any embedder was named")], np.ones((1, DIM), dtype=np.float32))
            finally:
                store.close()
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(specs, w, barrier, out)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    try:
        results: list[tuple[Any, ...]] = []
        while len(results) < WORKERS * ROUNDS:
            results.append(out.get(timeout=300))
            if str(results[-1][2]).startswith("error"):  # the other workers stop at the broken barrier
                break
        for p in procs:
            p.join(timeout=60)
        errors = [r for r in results if str(r[2]).startswith("error")]
        assert not errors, errors
        for r in range(ROUNDS):
            rows = sorted(row[1:] for row in results if row[0] == r)
            winners = [worker for worker, outcome, _, _ in rows if outcome == "bound"]
            assert len(winners) == 1, rows
            won = winners[0]
            spec = specs[r]
            for worker, outcome, name, dimension in rows:
                assert (name, dimension) == (_name(won), _dimension(won, spec)), rows  # every process reads the winner
                if worker != won:
                    same = _dimension(worker, spec) == _dimension(won, spec)
                    assert outcome == ("mismatch" if same else "dimension"), rows
            fresh = _open(spec, -1)  # a process started later reads the winner too
            try:
                assert (fresh.embedder_name, fresh.dimension) == (_name(won), _dimension(won, spec))
            finally:
                fresh.close()
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        if backend == "weaviate":
            for spec in specs:
                store = _open(spec, -1)
                store.drop()  # type: ignore[attr-defined]
                store.close()


@pytest.mark.parametrize("operation", ["bind", "first write"])
def test_another_process_binding_between_a_local_stores_check_and_its_write_lock_wins(
    tmp_path: Path, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LocalStore checks the binding, then takes SQLite's write lock: it checks again under the lock."""
    a, b = LocalStore(tmp_path / "m.db"), LocalStore(tmp_path / "m.db")
    try:
        assert a.dimension is None
        _before(a, "_tx", lambda: b.bind_embedder("emb-b", DIM), monkeypatch)
        with pytest.raises(EmbeddingDimensionError):
            if operation == "bind":
                a.bind_embedder("emb-a", 2 * DIM)
            else:
                a.upsert([rec("u", "written with another model")], np.ones((1, 2 * DIM), dtype=np.float32))
        for s in (a, b):
            assert (s.embedder_name, s.dimension, s.count("u")) == ("emb-b", DIM, 0)
    finally:
        a.close()
        b.close()


@pytest.mark.weaviate
def test_a_weaviate_binding_whose_process_died_before_copying_it_into_the_meta_object_still_holds(
    weaviate_contract_store: Any, weaviate_contract_twin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The binding collection is created first, then copied into the meta object: a death between them."""
    a = weaviate_contract_store

    def died(meta: Any) -> None:
        raise KeyboardInterrupt("killed after the binding was created")

    monkeypatch.setattr(a, "_write_meta", died)
    with pytest.raises(KeyboardInterrupt):
        a.bind_embedder("emb-a", DIM)
    meta = a.client.collections.use(a.meta_collection).query.fetch_objects().objects
    assert [json.loads(o.properties["value"])["embedder"] for o in meta] == [None]  # the copy never happened
    b = weaviate_contract_twin(a)
    try:
        assert (b.embedder_name, b.dimension) == ("emb-a", DIM)  # read from the binding itself
        with pytest.raises(EmbedderMismatchError):
            b.bind_embedder("emb-b", DIM)
        b.bind_embedder("emb-a", DIM)
        meta = a.client.collections.use(a.meta_collection).query.fetch_objects().objects
        assert [json.loads(o.properties["value"])["embedder"] for o in meta] == ["emb-a"]  # copied now
    finally:
        b.close()
