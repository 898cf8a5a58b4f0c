"""The write half of :class:`~hybrid_memory.stores.weaviate.WeaviateStore`: batches, merges and forget epochs.

:class:`_Writes` sends gRPC batches (``data.insert_many``, ``write_concurrency`` requests in
flight), retries the objects that failed and dead-letters what still fails; it changes stored
objects in place with merges (REST ``PATCH``, :meth:`_Writes._merge`), which never re-create an
object deleted meanwhile; it reads and bumps the users' forget epochs and undoes a write that
raced a forget (package docstring, *Forget*).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hybrid_memory.errors import InvalidInputError, SchemaError, StoreError, StoreUnavailableError, UserForgottenError
from hybrid_memory.records import MemoryRecord, check_id
from hybrid_memory.stores.weaviate.client import _ID_CHUNK, _chunks, logger
from hybrid_memory.stores.weaviate.dead_letters import _Failure, _Pending
from hybrid_memory.stores.weaviate.errors import is_tenant_missing, is_transient, message_is_transient, object_error
from hybrid_memory.stores.weaviate.mapping import (
    VECTOR_NAME,
    _epoch_uuid,
    _metadata_json,
    _properties,
    _record,
    _vector_of,
    object_uuid,
    tenant_name,
)
from hybrid_memory.stores.weaviate.schema import _Schema
from hybrid_memory.threads import start_daemon
from hybrid_memory.values import Vector

T = TypeVar("T")


def _each(items: Iterable[T], fn: Callable[[T], None], workers: int, name: str) -> None:
    """``fn(item)`` for every item, on up to ``workers`` daemon threads (in this thread when one is enough)."""
    queue = collections.deque(items)  # popleft() is thread-safe
    workers = min(workers, len(queue))
    if workers <= 1:
        for item in queue:
            fn(item)
        return

    def worker() -> None:
        while True:
            try:
                item = queue.popleft()
            except IndexError:
                return
            fn(item)

    for fut in [start_daemon(worker, name=name) for _ in range(workers)]:
        fut.result()


@dataclass(frozen=True)
class _Merge:
    """A change of one stored object in place: ``properties`` replace the stored ones (``None`` removes one).

    ``vector``: a new vector for the object (``None`` keeps the stored one).
    """

    tenant: str
    uuid: str
    properties: dict[str, Any]
    vector: list[float] | None = None


class _Writes(_Schema):
    """Batch writes with retries and dead letters; merges; forget epochs."""

    # -- merges --------------------------------------------------------------------------------
    def _merge(self, merges: Sequence[_Merge]) -> tuple[set[int], dict[int, tuple[str, bool]]]:
        """Change stored objects in place; return the indexes of those missing, and the failures.

        Each merge is one REST ``PATCH`` (``data.update``): the server merges the properties into
        the stored object under its per-object lock and answers 404 when the object does not
        exist, on every replica. Unlike a batch insert it never re-creates an object, so a
        read-modify-write that races a ``delete`` or a forget (which removes the tenant) from
        another process leaves the memory deleted, even if this process dies right after; that
        needs no check after the write. A merge without a vector keeps the stored one.

        With ``write_all_first`` a merge first asks every replica (``ALL``) once, then, if that
        failed or found no object, the write level with retries (like :meth:`_write`); only the
        write level's answer makes an object missing. After one failure at ``ALL`` the call's
        remaining merges go straight to the write level. Up to ``write_concurrency``
        merges run at once; all of them end within the client's insert timeout.

        Returns:
            ``(missing, failures)``: the indexes of the merges whose object or tenant did not
            exist, and ``index -> (message, transient)`` of those that failed.
        """
        self._check_open()
        deadline = time.monotonic() + self._request_timeout("insert")
        missing: set[int] = set()
        failures: dict[int, tuple[str, bool]] = {}

        def attempt(m: _Merge, level: str | None) -> Callable[[], bool]:
            handle = self._tenant(m.tenant, write=True, level=level)

            def run() -> bool:
                try:
                    vector = None if m.vector is None else {VECTOR_NAME: m.vector}
                    handle.data.update(uuid=m.uuid, properties=m.properties, vector=vector)
                except Exception as exc:
                    if getattr(exc, "status_code", None) == 404 or is_tenant_missing(exc):
                        return False
                    raise
                return True

            return run

        # Once a merge at ALL failed (a replica is down), the others of this call skip ALL: on a
        # node that just died each attempt could wait until the cluster drops it.
        all_first = [self.write_all_first and self.write_consistency not in (None, "ALL")]

        def one(i: int) -> None:
            m = merges[i]
            if all_first[0]:
                try:
                    if self._watched(attempt(m, "ALL"), deadline):
                        return
                    # Not found at ALL: a replica that missed the object may say so; ask the write level.
                except Exception:  # a replica is down: the write level is enough
                    all_first[0] = False
                    logger.debug("merge at ALL failed; retrying at %s", self.write_consistency)
            try:
                if not self._call("merge", attempt(m, None), timeout=max(0.0, deadline - time.monotonic())):
                    missing.add(i)
            except StoreError as exc:
                failures[i] = (str(exc), isinstance(exc, StoreUnavailableError))

        _each(range(len(merges)), one, self.write_concurrency, "hybrid-memory-weaviate-merge")
        return missing, failures

    # -- writes --------------------------------------------------------------------------------
    def _send(
        self,
        tenant: str,
        items: Sequence[_Pending],
        *,
        deadline: float,
        level: str | None = None,
        epoch: int | None = None,
    ) -> list[_Failure]:
        """One attempt: batch-write ``items`` into ``tenant``; return the failures with reasons.

        ``level``: the consistency level of this attempt (default: ``write_consistency``).
        ``epoch``: the user's forget epoch the write was checked against, stored with each object
        (:meth:`_live`).
        ``deadline`` (``time.monotonic()``): a request not answered by then, or within
        ``batch_timeout`` of being sent, is abandoned and its objects fail as transient (the
        next attempt sends them again). Weaviate 1.39 holds the first write after its Raft
        leader died for over 40 s, and every write of a cluster without Raft quorum; an
        abandoned request may still land later, which the resent same objects make harmless.

        Each chunk is one gRPC ``BatchObjects`` request (``data.insert_many``); its per-object
        errors are the ``ErrorObject`` s that the client's batch context collects in
        ``failed_objects``. The batch *context* is not used: in weaviate-client 4.24.1 against
        servers >= 1.36 it is the streaming batcher, which waits up to 1 s for a partial batch
        and, when the server is unreachable, retries internally for about ten minutes
        (``WEAVIATE_BATCH_MAX_RETRIES``) before reporting anything -- that would bypass the
        bounded retry and dead-letter policy of this store.
        """
        from weaviate.classes.data import DataObject

        h = self._tenant(tenant, write=True, level=level)
        failed: list[_Failure] = []
        chunks = list(_chunks(items, self.batch_size))
        window = max(1, min(self.write_concurrency, len(chunks)))
        in_flight: collections.deque[tuple[Sequence[_Pending], concurrent.futures.Future[Any], float]] = (
            collections.deque()
        )

        def collect() -> None:
            chunk, fut, sent = in_flight.popleft()
            try:
                res = self._await_batch(fut, min(deadline, sent + self.batch_timeout))
            except concurrent.futures.TimeoutError as lost:
                self._last_ok = 0.0  # probe (and maybe fail over) before the next request
                failed.extend(_Failure(p, str(lost), True) for p in chunk)
                return
            except Exception as exc:  # the whole request failed (network, all objects rejected)
                if is_transient(exc):
                    self._last_ok = 0.0  # probe (and maybe fail over) before the next request
                failed.extend(_Failure(p, f"{type(exc).__name__}: {exc}", is_transient(exc)) for p in chunk)
                return
            self._last_ok = time.monotonic()
            for idx, err in res.errors.items():
                msg = str(getattr(err, "message", err))  # a plain string: no type to decide by
                failed.append(_Failure(chunk[int(idx)], msg, message_is_transient(msg)))

        try:
            for chunk in chunks:
                objs = [
                    DataObject(
                        properties=_properties(p.record, self.analyzer.analyze(p.record.search_text), epoch),
                        uuid=p.uuid,
                        vector={VECTOR_NAME: p.vector.tolist()},
                    )
                    for p in chunk
                ]
                while len(in_flight) >= window:
                    collect()
                if not self._reachable():
                    failed.extend(_Failure(p, f"server not reachable at {self._live_url}", True, True) for p in chunk)
                    continue
                sent = start_daemon(functools.partial(h.data.insert_many, objs), name="hybrid-memory-weaviate-batch")
                in_flight.append((chunk, sent, time.monotonic()))
            while in_flight:
                collect()
        finally:  # only when an exception escaped: let the requests already sent finish (in time)
            concurrent.futures.wait([fut for _, fut, _ in in_flight], timeout=max(0.0, deadline - time.monotonic()))
        return failed

    def _await_batch(self, fut: concurrent.futures.Future[Any], deadline: float) -> Any:
        """The batch request's result, watched like :meth:`_watched` watches a read.

        Raises:
            concurrent.futures.TimeoutError: the deadline passed, or the node stopped answering
                its liveness probe (checked every ``_watch_interval`` seconds): weaviate-client
                would retry a batch to a dead node for about 15 s before raising, while the
                request is abandoned here and retried (on another node after a fail-over).
        """
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise concurrent.futures.TimeoutError("Weaviate did not answer the batch in time")
            try:
                return fut.result(timeout=max(0.0, min(self._watch_interval, deadline - now)))
            except concurrent.futures.TimeoutError:
                if self._live_url is not None and not fut.done() and not self._probe(self._probe_timeout):
                    raise concurrent.futures.TimeoutError(f"server not reachable at {self._live_url}") from None

    def _write(
        self,
        items: Sequence[_Pending],
        *,
        dead_letter: bool = True,
        epochs: Mapping[str, int] | None = None,
        keep: Callable[[list[_Pending]], list[_Pending]] | None = None,
    ) -> list[_Failure]:
        """Write with retries; return the final failures.

        With ``write_all_first`` the first attempt asks for every replica (``ALL``): when it
        succeeds, every copy holds the write before it is acknowledged, so a read at any level
        through any node sees it. What that attempt could not write (a replica is down) is sent
        again at once at ``write_consistency``, without a backoff sleep or a retry counted.

        The whole write, retries included, ends within the client's insert timeout: what is not
        written by then fails (and is dead-lettered). Records of several users (tenants) are
        written ``write_concurrency`` tenants at a time.

        With ``dead_letter`` (full writes of the caller's records) what still fails is queued
        (with its user's epoch from ``epochs``) and what succeeds clears any older queued version
        of the same memory. Without it (touch) the queue is left alone, so a pending newer
        version is neither cleared nor overwritten.

        ``keep`` filters the items once this process's other writes are done (under the write
        lock): a replay drops there the records a newer write has replaced since it read them.
        """
        self._check_open()
        deadline = time.monotonic() + self._request_timeout("insert")
        # Once the server proved unreachable after all retries, later tenants of this call are
        # tried once (the liveness probe still runs) instead of sleeping through the backoff again.
        down = [False]

        def one_tenant(tenant: str, group: list[_Pending]) -> list[_Failure]:
            todo = list(group)
            epoch = None if epochs is None else epochs.get(group[0].record.user_id)
            attempt = 0
            all_first = self.write_all_first and self.write_consistency not in (None, "ALL")
            while True:
                failures = self._send(tenant, todo, deadline=deadline, level="ALL" if all_first else None, epoch=epoch)
                if all_first and failures:
                    all_first = False
                    todo = [f.pending for f in failures]
                    continue
                all_first = False
                if not failures:
                    return []
                late = time.monotonic() + self.retry_base_delay * (2**attempt) >= deadline
                if attempt >= self.max_retries or self._closed or down[0] or late:
                    down[0] = down[0] or all(f.unreachable for f in failures)
                    return failures
                logger.debug("retrying %d failed objects for tenant %s", len(failures), tenant)
                self._sleep_before_retry(attempt)
                attempt += 1
                todo = [f.pending for f in failures]

        results: dict[str, list[_Failure]] = {}
        with self._write_lock:
            by_tenant: dict[str, list[_Pending]] = {}
            for p in keep(list(items)) if keep is not None else items:
                by_tenant.setdefault(p.tenant, []).append(p)
            tenants = list(by_tenant.items())

            def write_tenant(tenant: tuple[str, list[_Pending]]) -> None:
                results[tenant[0]] = one_tenant(*tenant)

            # Several users: up to write_concurrency tenants at once (replicated writes wait ~0.1 s each).
            _each(tenants, write_tenant, self.write_concurrency, "hybrid-memory-weaviate-batch")
            final = [f for tenant, _ in tenants for f in results.get(tenant, [])]
            if dead_letter:
                self._settle_queue([p for _, group in tenants for p in group], final, epochs)
        return final

    def _settle_queue(
        self,
        items: Sequence[_Pending],
        failures: Sequence[_Failure],
        epochs: Mapping[str, int] | None,
        *,
        gone: Iterable[str] = (),
    ) -> None:
        """After a write of the caller's records: what landed clears an older queued version, what failed is queued.

        ``gone``: UUIDs of items that neither landed nor failed (deleted meanwhile).
        """
        skip = {f.pending.uuid for f in failures} | set(gone)
        landed: dict[str, list[str]] = {}
        for p in items:
            if p.uuid not in skip:
                landed.setdefault(p.record.user_id, []).append(p.record.id)
        for user_id, ids in landed.items():
            self._dlq.remove(user_id, ids)
        if failures:
            self._dlq.add(failures, epochs)

    def _raise_failures(self, failures: Sequence[_Failure], total: int) -> None:
        if not failures:
            return
        first = failures[0].message
        msg = (
            f"{len(failures)} of {total} memories could not be written to Weaviate after "
            f"{self.max_retries} retries; they are kept in the dead-letter queue "
            f"({self._dlq.path or 'in memory'}) - call replay_dead_letters(). First error: {first}"
        )
        if all(f.transient for f in failures):
            raise StoreUnavailableError(msg)
        raise StoreError(msg)

    def _pending(self, records: Sequence[MemoryRecord], vectors: Vector) -> list[_Pending]:
        latest: dict[tuple[str, str], _Pending] = {}
        for rec, vec in zip(records, vectors, strict=True):
            if not isinstance(rec, MemoryRecord):
                raise InvalidInputError(f"expected MemoryRecord, got {type(rec).__name__}")
            _metadata_json(rec)  # validates metadata before anything is sent
            latest[(rec.user_id, rec.id)] = _Pending(rec, vec, object_uuid(rec.id), tenant_name(rec.user_id))
        return list(latest.values())

    # -- forget epochs -------------------------------------------------------------------------
    def _read_epoch(self, user_id: str) -> int:
        """The user's forget epoch: one object fetch by UUID (0 when the user was never forgotten)."""
        coll = self._coll(self.epochs_collection)
        uid = _epoch_uuid(user_id)
        obj = self._call("read forget epoch", lambda: coll.query.fetch_object_by_id(uid, return_properties=["epoch"]))
        if obj is None:
            return 0
        try:
            return int(obj.properties["epoch"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"a forget-epoch object has no integer epoch: {exc}") from exc

    def _bump_epoch(self, user_id: str) -> int:
        """Read-modify-write ``epoch + 1`` (two concurrent bumps may land as one: it still moved)."""
        from weaviate.classes.data import DataObject

        coll = self._coll(self.epochs_collection, write=True)
        uid = _epoch_uuid(user_id)
        new = self._read_epoch(user_id) + 1

        def run() -> None:
            res = coll.data.insert_many([DataObject(properties={"epoch": new}, uuid=uid)])
            for err in res.errors.values():
                raise object_error(str(getattr(err, "message", err)))

        self._call("write forget epoch", run)
        return new

    def user_epoch(self, user_id: str) -> int:
        """The user's forget epoch (0 until the first :meth:`delete_user`; each one changes it).

        One object fetch by UUID; nothing is cached, so a forget from any process is seen at once.
        """
        self._check_open()
        check_id(user_id)
        return self._read_epoch(user_id)

    def _check_epochs(self, epochs: Mapping[str, int], *, outage_ok: bool = False) -> None:
        """Before a write: refuse it if a user's epoch is no longer the caller's.

        With ``outage_ok`` an unreachable server skips the check: the write then fails too and
        is dead-lettered with the epochs, which the replay checks.
        """
        for user, epoch in epochs.items():
            try:
                current = self._read_epoch(user)
            except StoreUnavailableError:
                if outage_ok:
                    return
                raise
            if current != epoch:
                raise UserForgottenError(user)

    def _forgotten_since(self, epochs: Mapping[str, int]) -> list[str]:
        """After a write: the users of ``epochs`` whose epoch moved meanwhile."""
        return [user for user, epoch in epochs.items() if self._read_epoch(user) != epoch]

    def _live(self, user_id: str, objects: Sequence[Any], epoch: Callable[[], int] | None = None) -> list[Any]:
        """``objects`` of ``user_id``'s tenant without the memories a write that raced a forget left behind.

        A memory object stores the forget epoch its write was checked against (``epoch``; absent
        for a write without epochs). A forget removes the user's tenant, so an object whose epoch
        is older than the user's current one was written by a process that checked the epoch before
        the forget and died before its second check, which would have deleted it again. Such objects
        are left out of every read and deleted (best effort). ``epoch`` gives the user's current
        epoch when the caller has it (default: read it, only if an object carries one).
        """
        marked = [o for o in objects if isinstance(o.properties.get("epoch"), int)]
        if not marked:
            return list(objects)
        current = epoch() if epoch is not None else self._read_epoch(user_id)
        # Older only: epochs only grow, so a read that saw an epoch not yet current (a lagging
        # replica at a weak read consistency) can never make newer memories look stale.
        stale = sorted({str(o.uuid) for o in marked if o.properties["epoch"] < current})
        if not stale:
            return list(objects)
        self._drop_left_behind(user_id, stale)
        gone = set(stale)
        return [o for o in objects if str(o.uuid) not in gone]

    def _drop_left_behind(self, user_id: str, uuids: Sequence[str]) -> None:
        """Delete (best effort) the objects of ``user_id`` that a write that raced a forget left (:meth:`_live`)."""
        logger.warning("leaving out %d memories written by a write that raced a forget of their user", len(uuids))
        try:
            handle = self._tenant(tenant_name(user_id), write=True)
            self._delete_objects(handle, list(uuids), "delete memories left behind by a forget")
        except StoreError as exc:  # they stay out of every read; the next read tries again
            logger.warning("could not delete them yet: %s", exc)

    def _fetch(
        self, user_id: str, ids: Sequence[str], *, vectors: bool, epoch: int | None = None
    ) -> dict[str, tuple[MemoryRecord, Vector | None]]:
        """Stored records (and vectors) by record id; missing ids are absent.

        ``epoch``: the user's current forget epoch, when the caller has just read it (:meth:`_live`).
        """
        from weaviate.classes.query import Filter

        check_id(user_id)
        uuids = list(dict.fromkeys(object_uuid(i) for i in ids))
        if not uuids:
            return {}
        h = self._tenant(tenant_name(user_id))
        objects: list[Any] = []
        for chunk in _chunks(uuids, _ID_CHUNK):

            def run(chunk: Sequence[str] = chunk) -> Any:
                return h.query.fetch_objects(
                    filters=Filter.by_id().contains_any(list(chunk)),
                    limit=len(chunk),
                    include_vector=vectors,
                )

            try:
                objects += self._call("fetch", run).objects
            except StoreError as exc:
                if is_tenant_missing(exc):
                    return {}
                raise
        out: dict[str, tuple[MemoryRecord, Vector | None]] = {}
        for o in self._live(user_id, objects, None if epoch is None else lambda: epoch):
            rec = _record(o.properties)
            if rec.user_id != user_id:  # defence in depth: tenants already isolate users
                continue
            out[rec.id] = (rec, _vector_of(o) if vectors else None)
        return out

    def _delete_objects(self, handle: Any, uuids: Sequence[str], what: str) -> int:
        """Delete objects by UUID from one tenant (a missing tenant holds none)."""
        from weaviate.classes.query import Filter

        deleted = 0
        for chunk in _chunks(list(dict.fromkeys(uuids)), _ID_CHUNK):

            def run(chunk: Sequence[str] = chunk) -> int:
                res = handle.data.delete_many(where=Filter.by_id().contains_any(list(chunk)))
                if res.failed:
                    raise StoreError(f"{res.failed} of {res.matches} deletions failed")
                return int(res.matches)

            try:
                deleted += self._call(what, run)
            except StoreError as exc:
                if is_tenant_missing(exc):
                    return deleted
                raise
        return deleted

    def _undo(self, written: Sequence[_Pending], users: Iterable[str]) -> None:
        """Delete what a write refused after the fact (``users`` were forgotten) had stored."""
        gone = set(users)
        by_tenant: dict[str, list[_Pending]] = {}
        for p in written:
            if p.record.user_id in gone:
                by_tenant.setdefault(p.tenant, []).append(p)
        with self._write_lock:
            for tenant, group in by_tenant.items():
                self._dlq.remove(group[0].record.user_id, [p.record.id for p in group])
                self._delete_objects(
                    self._tenant(tenant, write=True), [p.uuid for p in group], "undo a forgotten write"
                )

    def _undo_if_forgotten(
        self, items: Sequence[_Pending], failures: Sequence[_Failure], epochs: Mapping[str, int]
    ) -> list[str]:
        """After a write: undo it for the users of ``epochs`` forgotten meanwhile; return them."""
        failed = {f.pending.uuid for f in failures}
        written = [p for p in items if p.uuid not in failed]
        if not epochs or not written:
            return []
        gone = self._forgotten_since(epochs)
        if gone:
            self._undo(written, gone)
            for user in gone:  # its queued part would be dropped by a replay anyway
                self._dlq.remove(user, [p.record.id for p in items if p.record.user_id == user])
        return gone
