"""The store protocol every backend implements (its request/result types live in :mod:`hybrid_memory.values`).

A store is deliberately small: upsert records with their vectors, hybrid search, get, touch,
update, delete, per-user delete, count and list, all blocking; the ``a``-prefixed async twins
come from :class:`AsyncFromSyncStore`. Everything else (re-ranking, fusion into a prompt, the
write policy) lives above it in pure code.

A store is also the single source of truth for conversation state (architecture §10): the turns
``add_turn`` accepted (a durable, ordered log per user and session, read back with
:meth:`MemoryStore.load_session`) and each user's *forget epoch*. :meth:`MemoryStore.delete_user`
bumps the epoch in the same step as it deletes; a write that carries ``epochs={user: e}`` is
refused with :class:`~hybrid_memory.errors.UserForgottenError` when the user's epoch is no longer
``e``, so nothing a process read or buffered before a forget can be written back after it.

Search semantics are Weaviate's hybrid search (``weaviate.md`` §1.9): ``alpha`` 1.0 = pure
vector, 0.0 = pure keyword (BM25); the vector leg is fused first, the keyword leg second; each
leg fetches ``max(100, limit)`` candidates; relativeScoreFusion (default) or rankedFusion.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol, cast, runtime_checkable

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord, Turn
from hybrid_memory.text.analyzer import Analyzer
from hybrid_memory.values import (
    FusionType,
    MemoryFilter,
    SearchRequest,
    SessionLog,
    StoreHit,
    Vector,
    as_matrix,
)

__all__ = [
    "RETIRED_TURN_TTL",
    "AsyncFromSyncStore",
    "FusionType",
    "MemoryFilter",
    "MemoryStore",
    "SearchRequest",
    "SessionLog",
    "StoreHit",
    "Vector",
    "as_matrix",
    "retired_turn_key",
    "update_present",
]


def check_ids(ids: object) -> builtins.list[str]:
    """Memory ids as a de-duplicated list in the order given (shared input check of the backends).

    Raises:
        InvalidInputError: ``ids`` is a single str or not a sequence of valid (encodable) str.
    """
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidInputError("ids must be a sequence of str (not a single str)")
    for i in ids:
        if not isinstance(i, str):
            raise InvalidInputError(f"memory ids must be str, got {type(i).__name__}")
        try:
            i.encode("utf-8")
        except UnicodeEncodeError as exc:  # neither SQLite nor gRPC can carry it
            raise InvalidInputError("memory ids must be valid Unicode (lone surrogate?)") from exc
    return builtins.list(dict.fromkeys(ids))


def check_epoch(epoch: object) -> None:
    """A forget epoch passed to a store (shared input check of the backends).

    Raises:
        InvalidInputError: not a non-negative int.
    """
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidInputError(f"epoch must be a non-negative int, got {epoch!r}")


def check_watermark_move(expected: int, seq: int) -> None:
    """The arguments of a watermark compare-and-set (shared input check of the backends).

    Raises:
        InvalidInputError: not ints, ``expected`` negative or ``seq`` not above ``expected``.
    """
    for v in (expected, seq):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidInputError("seq and expected must be int")
    if expected < 0 or seq <= expected:
        raise InvalidInputError(f"a watermark moves forward only: expected={expected}, seq={seq}")


def user_hash(user_id: str) -> str:
    """SHA-256 hex digest of a user id: how backends key per-user state without the id in clear."""
    return hashlib.sha256(user_id.encode("utf-8")).hexdigest()


#: How long a store remembers the ids of turns that left their logs (:meth:`MemoryStore.retired_turns`):
#: the longest delay of a retried ``add_turn`` after which it cannot bring its turn back.
RETIRED_TURN_TTL = timedelta(days=7)


def retired_turn_key(user_id: str, turn_id: str) -> str:
    """SHA-256 hex digest naming a turn that left its log (neither id is kept in clear).

    Example:
        >>> retired_turn_key("alice", "m1") == retired_turn_key("alice", "m1")
        True
        >>> retired_turn_key("alice", "m1") == retired_turn_key("bob", "m1")
        False
    """
    return hashlib.sha256(f"{user_id}\x00{turn_id}".encode()).hexdigest()


@runtime_checkable
class MemoryStore(Protocol):
    """What a backend must implement: these blocking members and nothing else.

    All methods are scoped by ``user_id``. An operation a backend cannot do raises a typed
    :class:`~hybrid_memory.errors.StoreError`; none returns ``None`` to mean failure.

    The ``a``-prefixed async twins (``aupsert``, ``asearch``, ... ``aclose``) are not part of
    the protocol: a backend inherits them from :class:`AsyncFromSyncStore` (each runs its sync
    member in a worker thread) and overrides one only when it has a native async path. A new
    backend proves itself with :mod:`hybrid_memory.testing.store_contract`.
    """

    analyzer: Analyzer

    @property
    def dimension(self) -> int | None:
        """Vector dimension of the stored memories (``None`` while the store is empty/new)."""
        ...

    def bind_embedder(self, name: str, dimension: int) -> None:
        """Record (first use) or check the embedder; raise EmbeddingDimensionError on mismatch."""
        ...

    def upsert(
        self, records: Sequence[MemoryRecord], vectors: Vector, *, epochs: Mapping[str, int] | None = None
    ) -> None:
        """Insert or replace ``records`` (all of one or several users) with their vectors.

        With ``epochs``, refuse the whole write (UserForgottenError) if a listed user's forget
        epoch is no longer the given one.
        """
        ...

    def update(
        self,
        records: Sequence[MemoryRecord],
        *,
        epochs: Mapping[str, int] | None = None,
        vectors: Vector | None = None,
    ) -> None:
        """Replace stored records' fields in place, keeping their vectors. Missing ids raise NotFoundError.

        ``epochs`` as in :meth:`upsert` (checked before the missing-id check). ``vectors`` (one
        per record) replace the stored vectors too, for a changed content: unlike :meth:`upsert`,
        an update never re-creates a memory another process deleted after the caller read it.
        """
        ...

    def user_epoch(self, user_id: str) -> int:
        """The user's forget epoch: 0 until the first :meth:`delete_user`, then bumped by each."""
        ...

    def append_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]:
        """Durably append turns (any sessions of one user) to their sessions' logs.

        Returns the stored turns with ``seq`` set (increasing in append order). A turn whose id
        the user's logs already hold is not appended again: the stored turn is returned in its
        place, so a retried append adds nothing (a turn that has left the log since is appended
        again: the caller checks :meth:`retired_turns`). Refused with UserForgottenError
        (nothing written) when the user's epoch is no longer ``epoch``.
        """
        ...

    def retired_turns(self, user_id: str, turn_ids: Sequence[str], *, epoch: int) -> builtins.set[str]:
        """Of these turn ids of ``user_id``, those a retried ``add_turn`` under ``epoch`` must not add back.

        Each delete that takes turns out of a log records them, under :func:`retired_turn_key`
        (a hash: no id or text in clear), with the user's forget epoch, for
        :data:`RETIRED_TURN_TTL`: :meth:`delete_turns` records its ids (found or not) as
        *forgotten*, :meth:`delete_user` the turns in the user's logs, :meth:`delete_session`
        its turns as *ended*. Returned: the forgotten ids, and the ended ones recorded under an
        epoch below ``epoch`` (the user's epoch the caller read: the user was forgotten since the
        session ended). An ended turn whose user was not forgotten is not
        returned: a retry adds it to a new log, as a new turn (so an id reused after a session
        ended or was cleared loses nothing). A forgotten record never becomes an ended one.
        ``add_turn`` checks this before and after it writes a turn with the caller's id. Missing
        ids are fine.
        """
        ...

    def load_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:
        """The session's turns after ``after_seq``, its total turn count and the user's epoch."""
        ...

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the session's turn log (long-term memories stay); return how many turns it held.

        Its turns are recorded as ended first (:meth:`retired_turns`).
        """
        ...

    def delete_turns(self, user_id: str, turn_ids: Sequence[str]) -> int:
        """Delete these turns of ``user_id`` from their sessions' logs; return how many were there.

        What :meth:`HybridMemory.forget <hybrid_memory.memory.HybridMemory.forget>` of a memory
        written from turns calls, so the short-term window, fact extraction and summaries of
        any process no longer see them. The ids are recorded as forgotten first, found or not
        (:meth:`retired_turns`). The rest of each log, its watermarks and the long-term memories
        stay; missing ids are fine.
        """
        ...

    def extracted_upto(self, user_id: str, session_id: str) -> int:
        """The session's extraction watermark: ``seq`` of its last extracted turn (0: none yet).

        Deleted with the session's log (:meth:`delete_session`) and the user (:meth:`delete_user`).
        """
        ...

    def mark_extracted(self, user_id: str, session_id: str, seq: int, *, epoch: int) -> bool:
        """Advance the session's extraction watermark to ``seq`` once its facts were written.

        A compare-and-set: the watermark never moves back; returns whether it moved. Refused with
        UserForgottenError (nothing written) when the user's epoch is no longer ``epoch``.
        """
        ...

    def summarized_upto(self, user_id: str, session_id: str) -> int:
        """The session's summary watermark: ``seq`` of its last summarised turn (0: none yet).

        Kept when the session's log is deleted (a session continued after ``end_session`` goes
        on above it: seqs only grow); deleted with the user (:meth:`delete_user`).
        """
        ...

    def mark_summarized(self, user_id: str, session_id: str, seq: int, *, expected: int, epoch: int) -> bool:
        """Move the session's summary watermark from exactly ``expected`` (0: none yet) to ``seq``.

        A compare-and-set: of several processes that read the same watermark and summarised
        from it, one moves it and the others get ``False`` (their summary is redundant); a
        backend without conditional writes says where it can fail that (``WeaviateStore``:
        two simultaneous creates). Refused with UserForgottenError (nothing written) when the
        user's epoch is no longer ``epoch``.
        """
        ...

    def search(self, request: SearchRequest) -> builtins.list[StoreHit]:
        """Hybrid search within ``request.user_id``'s memories."""
        ...

    def get(self, user_id: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]:
        """The records with these ids that exist for ``user_id`` (missing ids skipped), in order."""
        ...

    def get_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """Stored (unit-normalised) vectors by id for ``user_id``."""
        ...

    def touch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:
        """``access_count += 1`` and ``last_accessed_at = when`` for these memories."""
        ...

    def list(
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        """Records of ``user_id`` passing ``filter``, oldest first."""
        ...

    def delete(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete these memories of ``user_id``; return how many existed. Missing ids are fine."""
        ...

    def delete_user(self, user_id: str) -> int:
        """Delete everything of ``user_id`` (memories and turn logs) and bump its forget epoch.

        The turns in the user's logs are recorded as forgotten first (:meth:`retired_turns`).

        Returns the number of memories deleted.
        """
        ...

    def count(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:
        """Number of memories (of one user, or all users when ``user_id`` is None)."""
        ...

    def users(self) -> builtins.list[str]:
        """Ids of the users that have memories."""
        ...

    def close(self) -> None:
        """Release resources. Idempotent."""
        ...


class AsyncFromSyncStore:
    """Base giving a :class:`MemoryStore` its ``a``-prefixed async twins through :func:`asyncio.to_thread`.

    A backend subclasses it and writes only the sync members::

        class MyStore(AsyncFromSyncStore):
            def search(self, request: SearchRequest) -> list[StoreHit]: ...

            # ... the other MemoryStore members

    and gets ``asearch``, ``aupsert``, ... ``aclose`` with the same signatures.
    """

    @property
    def _sync(self) -> MemoryStore:
        return cast("MemoryStore", self)

    async def aupsert(  # noqa: D102
        self, records: Sequence[MemoryRecord], vectors: Vector, *, epochs: Mapping[str, int] | None = None
    ) -> None:
        store = self._sync
        await asyncio.to_thread(lambda: store.upsert(records, vectors, epochs=epochs))

    async def aupdate(  # noqa: D102
        self,
        records: Sequence[MemoryRecord],
        *,
        epochs: Mapping[str, int] | None = None,
        vectors: Vector | None = None,
    ) -> None:
        store = self._sync
        await asyncio.to_thread(lambda: store.update(records, epochs=epochs, vectors=vectors))

    async def asearch(self, request: SearchRequest) -> builtins.list[StoreHit]:  # noqa: D102
        return await asyncio.to_thread(self._sync.search, request)

    async def aget(self, user_id: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]:  # noqa: D102
        return await asyncio.to_thread(self._sync.get, user_id, ids)

    async def aget_vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:  # noqa: D102
        return await asyncio.to_thread(self._sync.get_vectors, user_id, ids)

    async def atouch(self, user_id: str, ids: Sequence[str], when: datetime) -> None:  # noqa: D102
        await asyncio.to_thread(self._sync.touch, user_id, ids, when)

    async def alist(  # noqa: D102
        self, user_id: str, *, filter: MemoryFilter | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[MemoryRecord]:
        store = self._sync
        return await asyncio.to_thread(lambda: store.list(user_id, filter=filter, limit=limit, offset=offset))

    async def adelete(self, user_id: str, ids: Sequence[str]) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete, user_id, ids)

    async def adelete_user(self, user_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete_user, user_id)

    async def acount(self, user_id: str | None = None, *, filter: MemoryFilter | None = None) -> int:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.count(user_id, filter=filter))

    async def aclose(self) -> None:  # noqa: D102
        await asyncio.to_thread(self._sync.close)

    async def auser_epoch(self, user_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.user_epoch, user_id)

    async def aappend_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.append_turns(turns, epoch=epoch))

    async def aretired_turns(  # noqa: D102
        self, user_id: str, turn_ids: Sequence[str], *, epoch: int
    ) -> builtins.set[str]:
        store = self._sync
        return await asyncio.to_thread(lambda: store.retired_turns(user_id, turn_ids, epoch=epoch))

    async def aload_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.load_session(user_id, session_id, after_seq=after_seq))

    async def adelete_session(self, user_id: str, session_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete_session, user_id, session_id)

    async def adelete_turns(self, user_id: str, turn_ids: Sequence[str]) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.delete_turns, user_id, turn_ids)

    async def aextracted_upto(self, user_id: str, session_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.extracted_upto, user_id, session_id)

    async def amark_extracted(self, user_id: str, session_id: str, seq: int, *, epoch: int) -> bool:  # noqa: D102
        store = self._sync
        return await asyncio.to_thread(lambda: store.mark_extracted(user_id, session_id, seq, epoch=epoch))

    async def asummarized_upto(self, user_id: str, session_id: str) -> int:  # noqa: D102
        return await asyncio.to_thread(self._sync.summarized_upto, user_id, session_id)

    async def amark_summarized(  # noqa: D102
        self, user_id: str, session_id: str, seq: int, *, expected: int, epoch: int
    ) -> bool:
        store = self._sync
        return await asyncio.to_thread(
            lambda: store.mark_summarized(user_id, session_id, seq, expected=expected, epoch=epoch)
        )


#: Tries of :func:`update_present` when other processes keep deleting what it updates.
UPDATE_ATTEMPTS = 5


def update_present(
    store: MemoryStore, records: Sequence[MemoryRecord], *, epochs: Mapping[str, int] | None = None
) -> set[tuple[str, str]]:
    """Update ``records`` in ``store``, leaving out those another process deleted; return their ``(user, id)``.

    A caller that read memories and now writes changed versions back (a dedup bump, an archive, a
    refined importance) can find some deleted in between. ``update`` refuses the call then
    (``NotFoundError``; a store may have written the others already), so the ids still there are
    read again and updated without the vanished ones: a deleted memory never comes back and the
    caller never sees an error about an id it did not pass. A forget of the whole user still
    raises :class:`~hybrid_memory.errors.UserForgottenError` (``epochs`` are checked first).

    Raises:
        NotFoundError: the store said an id is missing that a read still finds, or deletes kept
            racing it for :data:`UPDATE_ATTEMPTS` tries.

    Example:
        >>> from hybrid_memory.stores.local import LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> store, emb = LocalStore(":memory:"), HashingEmbedder(dim=32)
        >>> kept = MemoryRecord.create(user_id="u", content="I like tea")
        >>> gone = MemoryRecord.create(user_id="u", content="I like jazz")
        >>> store.upsert([kept, gone], emb.embed_documents([kept.content, gone.content]))
        >>> store.delete("u", [gone.id])  # another process, after the caller read both
        1
        >>> update_present(store, [kept.evolve(importance=0.9), gone.evolve(importance=0.9)]) == {("u", gone.id)}
        True
        >>> store.get("u", [kept.id])[0].importance, store.get("u", [gone.id])
        (0.9, [])
    """
    from hybrid_memory.errors import NotFoundError

    rest, gone = builtins.list(records), set[tuple[str, str]]()
    for attempt in range(UPDATE_ATTEMPTS):
        if not rest:
            break
        try:
            store.update(rest, epochs=epochs)
            break
        except NotFoundError:
            wanted: dict[str, builtins.list[str]] = {}
            for r in rest:
                wanted.setdefault(r.user_id, []).append(r.id)
            present = {(u, r.id) for u, ids in wanted.items() for r in store.get(u, ids)}
            vanished = {(r.user_id, r.id) for r in rest} - present
            if not vanished or attempt == UPDATE_ATTEMPTS - 1:
                raise
            gone |= vanished
            rest = [r for r in rest if (r.user_id, r.id) not in vanished]
    return gone
