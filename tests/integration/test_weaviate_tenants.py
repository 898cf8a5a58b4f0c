"""Tenant activity on a real weaviate-server: use notes, the idle sweep, auto activation on use.

What is checked is the server's own tenant state (``tenants.get()``), and that an inactive
user's memories and turns come back unchanged through the store (auto tenant activation).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord, Turn
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.stores.weaviate import WeaviateStore, tenant_name
from hybrid_memory.stores.weaviate.tenants import _use_uuid

pytestmark = pytest.mark.weaviate

T0 = datetime(2025, 5, 1, 8, 0, tzinfo=timezone.utc)


def write(store: WeaviateStore, user: str, n: int = 3, first: int = 0) -> list[MemoryRecord]:
    recs = [
        MemoryRecord.create(user_id=user, content=f"{user} note {i} about green tea", timestamp=T0)
        for i in range(first, first + n)
    ]
    store.upsert(recs, np.random.default_rng(len(user)).normal(size=(n, 8)).astype(np.float32))
    turn = Turn(
        id=str(uuid.uuid4()), user_id=user, session_id="s1", role="user", content=f"hi from {user}", timestamp=T0
    )
    store.append_turns([turn], epoch=store.load_session(user, "s1").epoch)
    return recs


def states(store: WeaviateStore, collection: str) -> dict[str, str]:
    got = store.client.collections.use(collection).tenants.get()
    return {name: str(t.activity_status.value) for name, t in got.items()}


def recorded(store: WeaviateStore) -> dict[str, datetime]:
    return store._last_uses()


def search(store: WeaviateStore, user: str) -> list[str]:
    hits = store.search(SearchRequest(user_id=user, query="green tea", vector=None, alpha=0.0, limit=10))
    return sorted(h.record.id for h in hits)


@pytest.fixture
def store(weaviate_store_factory: Callable[..., Any]) -> WeaviateStore:
    s: WeaviateStore = weaviate_store_factory()
    s.use_interval = 0.0  # note every use, so the test sees each one
    return s


def test_every_use_is_noted_by_tenant_never_by_user_id(store: WeaviateStore) -> None:
    write(store, "alice")
    write(store, "bob")
    store.flush_uses()
    uses = recorded(store)
    assert set(uses) == {tenant_name("alice"), tenant_name("bob")}
    now = datetime.now(timezone.utc)
    assert all(now - timedelta(minutes=5) < at <= now for at in uses.values())
    objects = list(store.client.collections.use(store.uses_collection).iterator())
    assert "alice" not in repr([o.properties for o in objects])  # hashed tenant names only


def test_sweep_deactivates_only_idle_users_and_their_data_comes_back_on_use(store: WeaviateStore) -> None:
    alice = write(store, "alice")
    write(store, "bob")
    store.flush_uses()
    before = {u: search(store, u) for u in ("alice", "bob")}
    store.flush_uses()  # those searches are use too: written now, before bob's record is made old
    # bob's last recorded use is two hours old, alice's is now
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    from weaviate.classes.data import DataObject

    store.client.collections.use(store.uses_collection).data.insert_many(
        [DataObject(properties={"tenant": tenant_name("bob"), "last_used": old}, uuid=_use_uuid(tenant_name("bob")))]
    )
    assert store.deactivate_idle(3600) == 1
    for collection in (store.collection, store.turns_collection):
        assert states(store, collection) == {tenant_name("alice"): "ACTIVE", tenant_name("bob"): "INACTIVE"}
    assert store.tenant_states() == {"ACTIVE": 1, "INACTIVE": 1}
    assert not store.is_active("bob") and store.is_active("alice")
    assert store.users() == ["alice"]  # listing inspects active tenants only, and wakes nobody
    assert states(store, store.collection)[tenant_name("bob")] == "INACTIVE"
    # bob's next request activates his tenants again; nothing was lost
    assert search(store, "bob") == before["bob"]
    assert [t.content for t in store.load_session("bob", "s1").turns] == ["hi from bob"]
    assert store.is_active("bob")
    assert states(store, store.turns_collection)[tenant_name("bob")] == "ACTIVE"
    assert search(store, "alice") == before["alice"] == sorted(r.id for r in alice)


def test_writes_to_an_inactive_user_activate_it(store: WeaviateStore) -> None:
    write(store, "carol", n=2)
    assert store.deactivate_idle(0, now=datetime.now(timezone.utc) + timedelta(seconds=1)) == 1
    assert not store.is_active("carol")
    more = write(store, "carol", n=1, first=2)
    assert store.is_active("carol")
    assert store.count("carol") == 3 and more[0].id in search(store, "carol")


def test_a_tenant_without_any_recorded_use_counts_as_idle(store: WeaviateStore) -> None:
    write(store, "dave")
    store.flush_uses()
    store.client.collections.use(store.uses_collection).data.delete_by_id(_use_uuid(tenant_name("dave")))
    assert store.deactivate_idle(24 * 3600) == 1
    assert not store.is_active("dave")


def test_forget_removes_the_use_note_and_the_sweep_removes_orphans(store: WeaviateStore) -> None:
    write(store, "erin")
    write(store, "frank")
    store.flush_uses()
    store.delete_user("erin")
    store.flush_uses()
    assert tenant_name("erin") not in recorded(store)
    # a note written by another process after the forget is removed by the next sweep
    from weaviate.classes.data import DataObject

    stray = tenant_name("erin")
    store.client.collections.use(store.uses_collection).data.insert_many(
        [DataObject(properties={"tenant": stray, "last_used": datetime.now(timezone.utc)}, uuid=_use_uuid(stray))]
    )
    assert store.deactivate_idle(3600) == 0
    assert set(recorded(store)) == {tenant_name("frank")}


def test_listing_and_counting_everyone_is_not_use(store: WeaviateStore) -> None:
    write(store, "gina")
    store.flush_uses()
    first = recorded(store)[tenant_name("gina")]
    assert store.users() == ["gina"]
    assert store.count() == 3
    store.flush_uses()
    assert recorded(store)[tenant_name("gina")] == first


def test_bad_idle_for_is_a_typed_error(store: WeaviateStore) -> None:
    for bad in (-1, "1h", True, float("nan")):
        with pytest.raises(InvalidInputError):
            store.deactivate_idle(bad)  # type: ignore[arg-type]


def test_cli_reports_states_and_deactivates_idle_users(
    store: WeaviateStore, weaviate_endpoint: Any, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from hybrid_memory.cli import main

    write(store, "hana")
    store.flush_uses()
    where = ["--weaviate", weaviate_endpoint.url, "--grpc-port", str(weaviate_endpoint.grpc_port)]
    where += ["--collection", store.collection]
    assert main(["tenants", *where]) == 0
    assert capsys.readouterr().out.strip() == "tenants by state: ACTIVE=1"
    assert main(["tenants", *where, "--deactivate-idle", "3600", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deactivated": 0, "states": {"ACTIVE": 1}}
    assert main(["tenants", *where, "--deactivate-idle", "0"]) == 0
    out = capsys.readouterr().out
    assert "deactivated 1 idle user(s)" in out and "INACTIVE=1" in out
    assert main(["tenants", "--store", str(tmp_path / "m.db")]) == 2
    assert "a Weaviate feature" in capsys.readouterr().err
