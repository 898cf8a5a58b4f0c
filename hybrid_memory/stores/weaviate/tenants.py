"""Tenant activity of :class:`~hybrid_memory.stores.weaviate.WeaviateStore`: idle users off the hot tier.

One tenant per user means a node holds every user's indexes in memory while their tenants are
``ACTIVE``. Weaviate keeps an ``INACTIVE`` tenant on disk only, and the collections are created
with *auto tenant activation*, so any read or write of an inactive tenant activates it again
(measured on a small tenant: a recall that activates it takes ~10 ms). What Weaviate does not do
is deactivate idle tenants by itself; :meth:`_Tenancy.deactivate_idle` does, from a record of use:

- every store process notes, at most once per ``use_interval`` seconds per tenant, that it used a
  tenant (``<collection>TenantUse``: one object per tenant, its name and the UTC time of use;
  tenant names are hashes of user ids, never the ids). The note is written in the background and
  is best effort: a lost note can only make a tenant look idle, which costs one activation;
- an operator job (``hybrid-memory tenants --deactivate-idle SECONDS``, e.g. from cron) sets every
  active tenant whose last recorded use is older than that to ``INACTIVE``, in the memory and the
  turn collection. A tenant with no recorded use at all counts as idle. A request racing the sweep
  activates the tenant again; nothing is lost either way, since deactivation keeps the data.

Listing users and counting every user (:meth:`users`, ``count(None)``) inspect active tenants only
and do not count as use.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from hybrid_memory.errors import InvalidInputError, StoreError
from hybrid_memory.stores.weaviate.client import _ACTIVE_STATES, _chunks, _is_active
from hybrid_memory.stores.weaviate.mapping import _UUID_NAMESPACE, tenant_name
from hybrid_memory.stores.weaviate.turns import _TurnLog
from hybrid_memory.threads import start_daemon

logger = logging.getLogger("hybrid_memory.stores.weaviate")

#: Tenants per ``tenants.update`` request of a sweep.
_UPDATE_CHUNK = 100
#: Most notes kept waiting for the background writer; beyond that new notes are dropped.
_MAX_PENDING = 100_000


class _UseNotes:
    """This process's use notes: when each tenant was last noted, and the notes not yet written."""

    __slots__ = ("flushing", "lock", "noted", "pending")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.flushing = threading.Lock()  # held while a batch is written: a flush waits for one in flight
        self.noted: dict[str, float] = {}
        self.pending: dict[str, datetime] = {}


def _use_uuid(tenant: str) -> str:
    return str(uuid.uuid5(_UUID_NAMESPACE, f"tenant-use:{tenant}"))


class _Tenancy(_TurnLog):
    """Use notes on every tenant handle, the idle sweep and tenant counts by state."""

    #: Seconds between two use notes of the same tenant from one process.
    use_interval: float = 300.0

    @property
    def uses_collection(self) -> str:
        """Name of the collection holding the last recorded use of every tenant."""
        return f"{self.collection}TenantUse"

    def _notes(self) -> _UseNotes:
        notes: _UseNotes | None = self.__dict__.get("_use_notes")
        if notes is None:
            notes = self.__dict__.setdefault("_use_notes", _UseNotes())
        return notes

    # -- use notes -----------------------------------------------------------------------------
    def _tenant(self, tenant: str, *, write: bool = False, level: str | None = None, note: bool = True) -> Any:
        if note:
            self._note_use(tenant)
        return super()._tenant(tenant, write=write, level=level)

    def _turns(self, tenant: str, *, write: bool = False) -> Any:
        self._note_use(tenant)
        return super()._turns(tenant, write=write)

    def _note_use(self, tenant: str) -> None:
        notes = self._notes()
        noted, pending = notes.noted, notes.pending
        now = time.monotonic()
        with notes.lock:
            last = noted.get(tenant)
            if last is not None and now - last < self.use_interval:
                return
            if len(pending) >= _MAX_PENDING:
                return
            if len(noted) > _MAX_PENDING:  # bounded: forget notes older than the interval
                for t in [t for t, at in noted.items() if now - at >= self.use_interval]:
                    del noted[t]
            noted[tenant] = now
            start = not pending
            pending[tenant] = datetime.now(timezone.utc)
        if start:
            start_daemon(self._flush_uses_quietly, name="hybrid-memory-tenant-use")

    def _flush_uses_quietly(self) -> None:
        try:
            self.flush_uses()
        except Exception as exc:  # best effort: a lost note only makes a tenant look idle
            logger.debug("tenant use notes not written: %s", exc)

    def flush_uses(self) -> int:
        """Write the use notes this process holds now (and wait for a write in flight); return how many."""
        notes = self._notes()
        with notes.flushing:
            with notes.lock:
                batch = dict(notes.pending)
                notes.pending.clear()
            if not batch or self.closed:
                return 0
            return self._write_uses(batch)

    def _write_uses(self, batch: dict[str, datetime]) -> int:
        from weaviate.classes.data import DataObject

        objects = [
            DataObject(properties={"tenant": t, "last_used": at}, uuid=_use_uuid(t)) for t, at in sorted(batch.items())
        ]
        coll = self._coll(self.uses_collection, write=True)
        for chunk in _chunks(objects, 500):
            result = self._call("write tenant use", functools.partial(coll.data.insert_many, list(chunk)))
            if getattr(result, "has_errors", False):
                errors = getattr(result, "errors", {})
                raise StoreError(f"{len(errors)} tenant use notes refused: {next(iter(errors.values()), '')}")
        return len(objects)

    def _forget_use(self, tenant: str) -> None:
        notes = self._notes()
        with notes.lock:
            notes.noted.pop(tenant, None)
            notes.pending.pop(tenant, None)
        coll = self._coll(self.uses_collection, write=True)
        self._call("delete tenant use", lambda: coll.data.delete_by_id(_use_uuid(tenant)))

    # -- sweep ---------------------------------------------------------------------------------
    def _last_uses(self) -> dict[str, datetime]:
        coll = self._coll(self.uses_collection)

        def run() -> dict[str, datetime]:
            out: dict[str, datetime] = {}
            for obj in coll.iterator(return_properties=["tenant", "last_used"]):
                t, at = obj.properties.get("tenant"), obj.properties.get("last_used")
                if isinstance(t, str) and isinstance(at, datetime):
                    out[t] = at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
            return out

        return self._call("read tenant use", run)

    def _statuses(self, collection: str) -> dict[str, str]:
        tenants = self._call("list tenants", lambda: self._client.collections.use(collection).tenants.get())
        return {name: str(getattr(t.activity_status, "value", t.activity_status)) for name, t in tenants.items()}

    def deactivate_idle(self, idle_for: float | timedelta, *, now: datetime | None = None) -> int:
        """Set every active tenant unused for ``idle_for`` to ``INACTIVE``; return how many users.

        Use is what any store process recorded (module docstring); a tenant with no record
        counts as idle. The user's memories and turns stay on disk and their next read or write
        activates the tenant again (auto tenant activation). Safe to run from any process while
        others serve requests.

        Args:
            idle_for: Seconds (or a ``timedelta``) without recorded use.
            now: The current time (UTC; default: the clock).

        Raises:
            InvalidInputError: ``idle_for`` is negative or not a number.
            StoreUnavailableError: the server did not answer.
        """
        self._check_open()
        seconds = idle_for.total_seconds() if isinstance(idle_for, timedelta) else idle_for
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise InvalidInputError(f"idle_for must be a non-negative number of seconds, got {idle_for!r}")
        self.flush_uses()
        cutoff = (now or datetime.now(timezone.utc)) - timedelta(seconds=seconds)
        uses = self._last_uses()
        memory, turns = self._statuses(self.collection), self._statuses(self.turns_collection)

        def idle_in(statuses: dict[str, str]) -> list[str]:
            return sorted(t for t, s in statuses.items() if s in _ACTIVE_STATES and (t not in uses or uses[t] < cutoff))

        idle_memory, idle_turns = idle_in(memory), idle_in(turns)
        self._set_inactive(self.collection, idle_memory)
        self._set_inactive(self.turns_collection, idle_turns)
        gone = [t for t in uses if t not in memory and t not in turns]  # notes of forgotten users
        if gone:
            from weaviate.classes.query import Filter

            coll = self._coll(self.uses_collection, write=True)
            for chunk in _chunks([_use_uuid(t) for t in gone], 500):
                where = Filter.by_id().contains_any(list(chunk))
                self._call("delete tenant use", functools.partial(coll.data.delete_many, where=where))
        return len(set(idle_memory) | set(idle_turns))

    def _set_inactive(self, collection: str, tenants: Iterable[str]) -> None:
        from weaviate.classes.tenants import Tenant, TenantActivityStatus

        def update(batch: list[Any]) -> None:
            self._client.collections.use(collection).tenants.update(batch)  # the current client after a fail-over

        for chunk in _chunks(list(tenants), _UPDATE_CHUNK):
            batch = [Tenant(name=t, activity_status=TenantActivityStatus.INACTIVE) for t in chunk]
            self._call("deactivate tenants", functools.partial(update, batch))

    def tenant_states(self) -> dict[str, int]:
        """How many users' memory tenants are in each activity state, e.g. ``{"ACTIVE": 3, "INACTIVE": 97}``."""
        self._check_open()
        return dict(Counter(self._statuses(self.collection).values()))

    def is_active(self, user_id: str) -> bool:
        """Whether ``user_id``'s memory tenant is active now (``False`` also when it does not exist)."""
        self._check_open()
        tenant = tenant_name(user_id)
        got = self._call(
            "read tenant", lambda: self._client.collections.use(self.collection).tenants.get_by_names([tenant])
        )
        return tenant in got and _is_active(got[tenant])
