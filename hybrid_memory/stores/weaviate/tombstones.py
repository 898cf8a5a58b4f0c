"""Tombstones of deleted memories: a dead-letter replay never re-creates a memory deleted meanwhile.

A replay writes a queued record again with a batch insert, and a batch insert creates an object
that is missing. A ``delete`` from any process after the write was first asked for, or while the
replay runs, must win. (``update`` and ``touch`` change objects in place with merges, which the
server refuses for a missing object; they need no tombstones, see
:meth:`~hybrid_memory.stores.weaviate.writes._Writes._merge`.)

``<collection>Tombstones`` (not multi-tenant, no vectors) holds one object per deleted memory,
UUID ``uuid5(SHA-256(user id), record id)`` (neither id in clear), properties ``token`` (a clock
id and new random text per delete) and ``deleted_at`` (UTC). The protocol:

* ``delete``: delete the objects (D1), write their tombstones (T), delete the objects again (D2);
* the replay: read the tombstones of the queued ids (S) and drop the letters whose memory was
  deleted after their write was queued (``deleted_at`` >= ``queued_at``), hold back those in doubt
  (below), write the rest (W), read the tombstones again (C); every id whose tombstone appeared or
  changed between S and C is deleted again (:meth:`_Tombstones._unbury_check`).

The two times come from two clocks: the queueing process's, and the deleting one's, perhaps on
another machine. A delete made after the write was queued, but dated before it by a clock that is
behind, would let the replay re-create a deleted memory; treating every recent tombstone as later
would instead drop a legitimate write of an id deleted a moment before. So a tombstone's token
starts with an id of the clock that dated it (the kernel's boot id, hashed: every process and
container of one machine shares it). One from this machine's clock (the dead-letter file is local)
is compared exactly; one from another clock dated less than :data:`CLOCK_SKEW` before the queue
time is *in doubt*: its letter stays queued and logged, like a stale one, until
``replay_dead_letters(include_stale=True)``. Clocks further apart than that are not covered.

Why nothing comes back: a write can re-create only a memory deleted before W. If that delete's T
was visible at S, the letter was dropped or held; if it is visible at C, the token changed and the
replay deletes what it wrote; otherwise T came after C, so D2 (after T) came after W and deleted
it. A tombstone older than the letter (an id deleted, then legitimately put again) never drops it.
Every step reads and writes at the store's consistency levels (QUORUM by default: read-your-writes
across processes). A replay killed between W and C leaves its letters queued (the queue is settled
last), so the next replay drops them and deletes again what the killed one put back.

Retired turns (:meth:`~hybrid_memory.stores.base.MemoryStore.retired_turns`) share the collection:
``delete_turns``, ``delete_session`` and ``delete_user`` first write one object per turn they
take out of a log, UUID ``uuid5`` of :func:`~hybrid_memory.stores.base.retired_turn_key` (a hash
of the user and turn ids), ``token`` ``forgotten:<epoch>`` or ``ended:<epoch>``, dated like a
tombstone and pruned with them; ``add_turn`` reads them before and after it writes a turn with
the caller's id.

Pruning: a ``delete`` removes tombstones older than :data:`TOMBSTONE_TTL` (seven days), at most
once per :data:`_PRUNE_INTERVAL` per store object. Dead letters queued longer ago than
:data:`REPLAY_HORIZON` are held back until an explicit ``replay_dead_letters(include_stale=True)``;
a tombstone pruned between S and C counts as unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hybrid_memory.errors import StoreError
from hybrid_memory.records import check_id
from hybrid_memory.stores.base import RETIRED_TURN_TTL, check_epoch, check_ids, retired_turn_key, user_hash
from hybrid_memory.stores.weaviate.client import _ID_CHUNK, _chunks
from hybrid_memory.stores.weaviate.dead_letters import _Pending
from hybrid_memory.stores.weaviate.errors import is_collection_missing, is_tenant_missing, object_error
from hybrid_memory.stores.weaviate.mapping import _UUID_NAMESPACE, tenant_name
from hybrid_memory.stores.weaviate.tenants import _Tenancy

#: Age after which a tombstone may be pruned (the longest read-to-check window that is guarded).
TOMBSTONE_TTL = timedelta(days=7)
#: Dead letters queued longer ago than this are not replayed by default: a delete of their memory
#: since may have been pruned (the day of slack covers the prune interval and clock skew).
REPLAY_HORIZON = TOMBSTONE_TTL - timedelta(days=1)
#: How far apart the clocks of two machines sharing a server may be. A tombstone dated less than
#: this before a dead letter's queue time may stand for a delete made *after* the write was queued,
#: on a machine whose clock is behind: the replay holds such a letter back instead of guessing.
CLOCK_SKEW = timedelta(minutes=5)
#: Seconds between two prunes of old tombstones by one store object.
_PRUNE_INTERVAL = 600.0


@functools.lru_cache(maxsize=1)
def _clock_id() -> str:
    """Short id of the wall clock this process reads: the kernel's, so shared by its processes and containers.

    Linux's boot id (new at each boot, the same in every container on the kernel); elsewhere the
    host name. Hashed: the shared store never holds either in clear.
    """
    try:
        source = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        source = ""
    source = source or f"host:{socket.gethostname()}"
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def _same_clock(token: str) -> bool:
    """Whether a tombstone's token was written by a process reading this process's clock.

    Tokens are ``<clock id>.<random>``; those of older versions (no clock id) are from an unknown clock.
    """
    return token.partition(".")[0] == _clock_id()


def _tombstone_uuid(user_id: str, record_id: str) -> str:
    """Object UUID of the tombstone of one memory (from a SHA-256 of the user id, never the id)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"tombstone:{user_hash(user_id)}:{record_id}"))


def _retired_uuid(user_id: str, turn_id: str) -> str:
    """Object UUID of the record that a turn left its log (from a hash of both ids)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"retired-turn:{retired_turn_key(user_id, turn_id)}"))


#: ``token`` of a retired turn's record: ``<kind>:<the user's epoch then>``.
_FORGOTTEN, _ENDED = "forgotten", "ended"


class _Tombstones(_Tenancy):
    """Deletes that leave tombstones, and the check that undoes a replayed write of a memory deleted meanwhile."""

    _last_prune: float = float("-inf")
    _tombstones_ready: bool = False

    @property
    def tombstones_collection(self) -> str:
        """Name of the tombstone collection (``<collection>Tombstones``)."""
        return f"{self.collection}Tombstones"

    # -- schema --------------------------------------------------------------------------------
    def ensure_schema(self) -> None:
        """Create the collections if missing and check an existing schema; load the meta data.

        Also creates ``<collection>Tombstones`` (module docstring). Idempotent and safe to call
        concurrently from several processes.

        Raises:
            SchemaError: the existing collection was not made by this module (no multi-tenancy,
                no whitespace ``search_text`` property) or was indexed with another analyzer.
            StoreUnavailableError: the server cannot be reached.
        """
        super().ensure_schema()
        self._create_tombstones()
        self._tombstones_ready = True

    def _create_tombstones(self) -> None:
        """Create ``<collection>Tombstones`` if it does not exist (idempotent, concurrent-safe)."""
        from weaviate.classes.config import Configure, DataType, Property

        name = self.tombstones_collection
        replication = (
            Configure.replication(factor=self.replication_factor) if self.replication_factor is not None else None
        )

        def create() -> None:
            cols = self._client.collections
            if cols.exists(name):
                return
            try:
                cols.create(
                    name,
                    description=f"hybrid-memory tombstones of memories deleted from {self.collection}",
                    properties=[
                        Property(name="token", data_type=DataType.TEXT, index_filterable=False, index_searchable=False),
                        Property(name="deleted_at", data_type=DataType.DATE, index_range_filters=True),
                    ],
                    vector_config=Configure.Vectors.self_provided(vector_index_config=Configure.VectorIndex.none()),
                    replication_config=replication,
                )
            except Exception:
                if not cols.exists(name):
                    raise

        self._call("create tombstone collection", create)

    def drop(self) -> None:
        """Delete the seven collections: every memory, turn, forget epoch, use note, tombstone and the binding (all users!).

        Idempotent.
        """
        super().drop()
        name = self.tombstones_collection

        def run() -> None:
            if self._client.collections.exists(name):
                self._client.collections.delete(name)

        self._call("drop tombstone collection", run)
        self._tombstones_ready = False

    # -- tombstones ----------------------------------------------------------------------------
    def _tombstones(self, user_id: str, ids: Sequence[str]) -> dict[str, str]:
        """The tokens of the tombstones of these memories of ``user_id``, by record id."""
        return {i: token for i, (token, _) in self._tombstone_rows(user_id, ids).items()}

    def _tombstone_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, tuple[str, datetime | None]]:
        """``(token, deleted_at)`` of the tombstones of these memories of ``user_id``, by record id."""
        return self._rows_by_uuid({_tombstone_uuid(user_id, i): i for i in dict.fromkeys(ids)})

    def _rows_by_uuid(self, by_uuid: Mapping[str, str]) -> dict[str, tuple[str, datetime | None]]:
        """``(token, deleted_at)`` of the tombstone objects at these UUIDs, by the value each UUID maps to."""
        from weaviate.classes.query import Filter

        coll = self._coll(self.tombstones_collection)
        out: dict[str, tuple[str, datetime | None]] = {}
        for chunk in _chunks(list(by_uuid), _ID_CHUNK):

            def run(chunk: Sequence[str] = chunk) -> Any:
                return coll.query.fetch_objects(
                    filters=Filter.by_id().contains_any(list(chunk)),
                    limit=len(chunk),
                    return_properties=["token", "deleted_at"],
                )

            try:
                res = self._call("read tombstones", run)
            except StoreError as exc:
                if is_collection_missing(exc):  # a schema from before tombstones: nothing deleted since
                    return {}
                raise
            for o in res.objects:
                when = o.properties.get("deleted_at")
                out[by_uuid[str(o.uuid)]] = (
                    str(o.properties.get("token")),
                    when if isinstance(when, datetime) else None,
                )
        return out

    def _deleted_after(
        self, user_id: str, queued: Mapping[str, datetime]
    ) -> tuple[list[str], list[str], dict[str, str]]:
        """Of ``queued`` (record id -> when its write was queued): the ids deleted since, the ids in doubt, and every tombstone's token.

        A dead-lettered write of a memory that was deleted after the write was queued must not
        bring it back on replay; the tokens are the "before" of the replay's :meth:`_unbury_check`,
        for a delete that lands while the replay writes. An id whose tombstone is dated less than
        :data:`CLOCK_SKEW` before the queue time, by another machine's clock (its token names the
        clock, :func:`_same_clock`), is in doubt: which came first depends on two clocks. A
        tombstone older than :data:`TOMBSTONE_TTL` may be pruned already, so the replay holds back
        dead letters older than :data:`REPLAY_HORIZON`.
        """
        rows = self._tombstone_rows(user_id, list(queued))
        gone: list[str] = []
        doubt: list[str] = []
        for i, (token, when) in rows.items():
            if when is None:
                continue
            if when >= queued[i]:
                gone.append(i)
            elif when >= queued[i] - CLOCK_SKEW and not _same_clock(token):
                doubt.append(i)
        return gone, doubt, {i: token for i, (token, _) in rows.items()}

    def _bury(self, user_id: str, ids: Sequence[str]) -> None:
        """Write a new tombstone (a fresh token) for each of these memories; prune old ones now and then."""
        self._write_tombstones([_tombstone_uuid(user_id, i) for i in dict.fromkeys(ids)])

    def _write_tombstones(self, uuids: Sequence[str], token: str | None = None) -> None:
        """Write a tombstone object (dated now) at each UUID; prune old ones now and then.

        ``token``: a fresh clock token by default (memory tombstones); a retired turn's kind and epoch.
        """
        from weaviate.classes.data import DataObject

        if not self._tombstones_ready:  # a store built without ensure_schema() on an older schema
            self._create_tombstones()
            self._tombstones_ready = True
        coll = self._coll(self.tombstones_collection, write=True)
        now = datetime.now(timezone.utc)
        token = token or f"{_clock_id()}.{secrets.token_hex(8)}"
        for chunk in _chunks(list(dict.fromkeys(uuids)), self.batch_size):
            objs = [DataObject(properties={"token": token, "deleted_at": now}, uuid=u) for u in chunk]

            def run(objs: list[Any] = objs) -> None:
                res = coll.data.insert_many(objs)
                for err in res.errors.values():
                    raise object_error(str(getattr(err, "message", err)))

            self._call("write tombstones", run)
        if time.monotonic() - self._last_prune >= _PRUNE_INTERVAL:
            self._last_prune = time.monotonic()
            self._prune_tombstones(now - TOMBSTONE_TTL)

    # -- retired turns -------------------------------------------------------------------------
    def retired_turns(self, user_id: str, turn_ids: Sequence[str], *, epoch: int) -> set[str]:
        """Of these turn ids of ``user_id``, those a retried ``add_turn`` under ``epoch`` must not add back.

        The protocol's rules: the forgotten ones, and the ended ones recorded under an earlier epoch.
        """
        self._check_open()
        check_id(user_id)
        ids = check_ids(turn_ids)
        check_epoch(epoch)
        if not ids:
            return set()
        return {i for i, (kind, at) in self._retired(user_id, ids).items() if kind == _FORGOTTEN or at < epoch}

    def _retired(self, user_id: str, turn_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """``(kind, epoch)`` of the records of these turns younger than :data:`RETIRED_TURN_TTL`, by turn id."""
        cutoff = datetime.now(timezone.utc) - RETIRED_TURN_TTL
        out: dict[str, tuple[str, int]] = {}
        for i, (token, when) in self._rows_by_uuid({_retired_uuid(user_id, t): t for t in turn_ids}).items():
            kind, _, at = token.partition(":")
            if when is not None and when >= cutoff and kind in (_FORGOTTEN, _ENDED) and at.isdigit():
                out[i] = (kind, int(at))
        return out

    def _retire(self, user_id: str, turn_ids: Sequence[str], *, forgotten: bool) -> None:
        """Record these turns of ``user_id`` as forgotten or ended (before they leave their logs).

        A forgotten turn's record is never turned back into an ended one.
        """
        ids = list(dict.fromkeys(turn_ids))
        if not ids:
            return
        epoch = self._read_epoch(user_id)
        if not forgotten:
            kept = {i for i, (kind, _) in self._retired(user_id, ids).items() if kind == _FORGOTTEN}
            ids = [i for i in ids if i not in kept]
        token = f"{_FORGOTTEN if forgotten else _ENDED}:{epoch}"
        self._write_tombstones([_retired_uuid(user_id, t) for t in ids], token)

    def delete_turns(self, user_id: str, turn_ids: Sequence[str]) -> int:
        """Record these ids as forgotten (found or not), then delete them (:meth:`_TurnLog.delete_turns`)."""
        self._check_open()
        check_id(user_id)
        ids = check_ids(turn_ids)
        self._retire(user_id, ids, forgotten=True)
        return super().delete_turns(user_id, ids)

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Record the session's turns as ended, then delete its log (:meth:`_TurnLog.delete_session`)."""
        self._retire(user_id, self._logged_turn_ids(user_id, session_id), forgotten=False)
        return super().delete_session(user_id, session_id)

    def _retire_user(self, user_id: str) -> None:
        """Before a forget of the user: record every turn its tenant holds (of any epoch) as forgotten."""
        # Not self._turns: that notes a use of the tenant, which a background flush could write
        # back after the forget removed the tenant's use note.
        h = super(_Tenancy, self)._turns(tenant_name(user_id))
        try:
            objects = self._call(
                "list turns to retire",
                lambda: list(h.iterator(return_properties=["turn_id", "epoch"], cache_size=1000)),
            )
        except StoreError as exc:
            if is_tenant_missing(exc):
                return
            raise
        logged = [str(o.properties["turn_id"]) for o in objects if int(o.properties.get("epoch") or 0) >= 0]
        self._retire(user_id, logged, forgotten=True)  # (epoch < 0: a watermark object, not a turn)

    def _prune_tombstones(self, before: datetime) -> None:
        """Delete the tombstones written before ``before`` (of every user)."""
        from weaviate.classes.query import Filter

        coll = self._coll(self.tombstones_collection, write=True)

        def run() -> None:
            res = coll.data.delete_many(where=Filter.by_property("deleted_at").less_than(before))
            if res.failed:
                raise StoreError(f"{res.failed} of {res.matches} tombstone deletions failed")

        self._call("prune tombstones", run)

    def _unbury_check(self, user_id: str, before: dict[str, str], written: Sequence[_Pending]) -> list[str]:
        """After a replay's write: delete again what it wrote of memories deleted since ``before``; return their ids.

        The dead letters are left alone: the replay settles them afterwards by their stamp, so a
        newer version queued meanwhile (by another process) stays queued.

        Args:
            user_id: Whose memories were written.
            before: The tombstones of the written ids, read before the write.
            written: What the write stored (failed objects excluded).
        """
        mine = [p for p in written if p.record.user_id == user_id]
        if not mine:
            return []
        after = self._tombstones(user_id, [p.record.id for p in mine])
        buried = [p for p in mine if p.record.id in after and after[p.record.id] != before.get(p.record.id)]
        if buried:
            self._delete_objects(
                self._tenant(tenant_name(user_id), write=True),
                [p.uuid for p in buried],
                "undo a write of a deleted memory",
            )
        return [p.record.id for p in buried]
