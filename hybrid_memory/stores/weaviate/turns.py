"""The conversation-state half of :class:`~hybrid_memory.stores.weaviate.WeaviateStore`: turn logs.

:class:`_TurnLog` appends turns to ``<collection>Turns`` (one tenant per user, one object per
turn, ordered by ``seq``), reads a session back by keyset pagination and deletes a session's
log or some turns (package docstring, *Conversation state without transactions*). A session's
extraction watermark is one more object of the user's tenant, at a UUID derived from the
session, whose ``epoch`` property is negative (:func:`_mark_epoch`), so it is never read or
counted as a turn.

The summary watermark is a chain of such objects, one per move: the move from watermark ``w``
lives at a UUID derived from the session and ``w`` (:func:`_summary_uuid`), is created with a
plain insert, which the server refuses when that UUID exists, and carries a random token that is
read back twice (after the insert and after the epoch check). Limit: Weaviate has no conditional
write, and its create is an existence check then a put inside one request; two creates of one
UUID whose checks both precede both puts both succeed, and the first may read its token back
before the second put replaces it. Then two processes believe they moved the watermark (their
summaries of the same turns are both kept, one superseding the other; see
:mod:`hybrid_memory.write.session`). Measured on one node at load 10-12, four simultaneous
marks from one watermark: two winners in 12 of 80 races with one read-back, 3 of 120 with the
second (never more than two). The watermark
is the end of the chain; the chain outlives the session's log (the protocol's
``summarized_upto``) and goes with the user's tenant.

Index ghosts: the watermark is read as the largest ``seq`` by a filtered, sorted query, then
the chain is followed by id (``fetch_object_by_id`` of the move from the value read) to its end.
The sort alone is not enough. Weaviate 1.39 updates an object's inverted index after it releases
the object's lock (``Shard.putObjectLSM``), so when two racing creates of one move both pass, the
first writer's index entries can land after the second writer removed them: the object then
stays indexed under the losing ``seq`` as well. When that ``seq`` is the larger, the sort returns
that move ahead of every later one, and a watermark read by the sort alone stays behind the
chain (seen in CI: a move acknowledged, then not read back). ``python -m
benchmarks.weaviate_ghosts`` causes it: 600 raced moves (some racers with long contents) left 17 ghosts,
and in 4 a sort alone missed the last move; the walk read all 600 right. It costs one by-id fetch
when the sort is right.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

from hybrid_memory.errors import InvalidInputError, StoreError, StoreUnavailableError, UserForgottenError
from hybrid_memory.records import Turn, check_id, check_text, ensure_utc
from hybrid_memory.stores.base import check_epoch, check_ids, check_watermark_move, user_hash
from hybrid_memory.stores.weaviate.client import _chunks
from hybrid_memory.stores.weaviate.errors import is_tenant_missing, object_error
from hybrid_memory.stores.weaviate.mapping import _UUID_NAMESPACE, _turn, _turn_properties, _turn_uuid, tenant_name
from hybrid_memory.stores.weaviate.runtime import _SEQ_CLOCK
from hybrid_memory.stores.weaviate.writes import _Writes
from hybrid_memory.values import QUERY_MAXIMUM_RESULTS, SessionLog

#: Turns per page when a session log is read (keyset pagination on ``seq``).
_TURN_PAGE = 1000


def _mark_uuid(user_id: str, session_id: str) -> str:
    """Object UUID of a session's extraction watermark (never a turn's: another name space)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"extracted:{user_hash(user_id)}:{session_id}"))


#: ``turn_id`` of the summary watermark's objects (a turn id is a UUID: never this).
_SUMMARY_MARK = "summarized"


def _summary_uuid(user_id: str, session_id: str, expected: int) -> str:
    """Object UUID of the summary watermark's move from ``expected`` (one per value it ever had)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"summarized:{user_hash(user_id)}:{session_id}:{expected}"))


def _mark_epoch(epoch: int) -> int:
    """The ``epoch`` property of a watermark object: negative, so no turn query ever matches it."""
    return -1 - epoch


def _session_scope(session_id: str, epoch: int) -> Any:
    """The filter of a session's turns written under ``epoch``."""
    from weaviate.classes.query import Filter

    return Filter.all_of([Filter.by_property("session_id").equal(session_id), Filter.by_property("epoch").equal(epoch)])


class _TurnLog(_Writes):
    """Durable, ordered turn logs per user and session."""

    def append_turns(self, turns: Sequence[Turn], *, epoch: int) -> list[Turn]:
        """Durably append turns of one user to their sessions' logs.

        The user's epoch is checked before the write (refused, nothing written) and after it
        (what was written is deleted again). A turn whose id the user's logs already hold is not
        appended again: the stored turn is returned in its place (read first, one query). Two
        processes appending the same new turn id at the same moment both write it, to the same
        object (its UUID comes from the user and the turn id): the log holds it once, at the
        ``seq`` of the later write.

        Returns:
            The turns with ``seq`` set, in the given order (strictly increasing per session; a turn
            already stored: as stored).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch``.
            InvalidInputError: turns of several users, or invalid turns.
        """
        self._check_open()
        from weaviate.classes.data import DataObject

        if isinstance(turns, (str, bytes)) or not isinstance(turns, Sequence):
            raise InvalidInputError("turns must be a sequence of Turn")
        items = list(turns)
        check_epoch(epoch)
        if not items:
            return []
        if not all(isinstance(t, Turn) for t in items) or len({t.user_id for t in items}) != 1:
            raise InvalidInputError("append_turns takes Turn objects of exactly one user")
        user = items[0].user_id
        check_id(user)
        for t in items:
            check_id(t.session_id, name="session_id")
            check_id(t.id, name="turn id")
            check_text(t.content)
            ensure_utc(t.timestamp, name="timestamp")
        self._check_epochs({user: epoch})
        h = self._turns(tenant_name(user), write=True)
        stored = self._stored_turns(h, user, [t.id for t in items], epoch)
        new: list[Turn] = []
        for t in items:
            if t.id not in stored:
                stored[t.id] = t.model_copy(update={"seq": _SEQ_CLOCK.next((self.collection, user, t.session_id))})
                new.append(stored[t.id])
        objects = [DataObject(properties=_turn_properties(t, epoch), uuid=_turn_uuid(user, t.id)) for t in new]
        if not objects:
            return [stored[t.id] for t in items]
        try:
            for chunk in _chunks(objects, self.batch_size):

                def run(chunk: Sequence[Any] = chunk) -> None:
                    res = h.data.insert_many(list(chunk))
                    for err in res.errors.values():
                        raise object_error(f"a turn was not stored: {getattr(err, 'message', err)}")

                self._call("append turns", run)  # idempotent: a resent object replaces itself
        except StoreUnavailableError:
            raise
        except StoreError:
            # A forget of the user removes the tenant under a write in flight ("store already closed"):
            # that is the forget the caller must hear of, not a store fault.
            if self._read_epoch(user) == epoch:
                raise
            with contextlib.suppress(StoreError):  # what an earlier chunk wrote (the tenant usually went with it)
                self._delete_objects(h, [str(o.uuid) for o in objects], "undo a forgotten append")
            raise UserForgottenError(user) from None
        if self._read_epoch(user) != epoch:
            self._delete_objects(h, [str(o.uuid) for o in objects], "undo a forgotten append")
            raise UserForgottenError(user)
        return [stored[t.id] for t in items]

    def _stored_turns(self, h: Any, user_id: str, turn_ids: Sequence[str], epoch: int) -> dict[str, Turn]:
        """The turns of ``turn_ids`` the user's logs hold under ``epoch``, by id (a missing tenant holds none)."""
        from weaviate.classes.query import Filter

        uuids = list(dict.fromkeys(_turn_uuid(user_id, t) for t in turn_ids))
        where = Filter.all_of([Filter.by_id().contains_any(uuids), Filter.by_property("epoch").equal(epoch)])

        def run() -> Any:
            return h.query.fetch_objects(filters=where, limit=len(uuids))

        try:
            res = self._call("read stored turns", run)
        except StoreError as exc:
            if is_tenant_missing(exc):
                return {}
            raise
        found = (_turn(o.properties) for o in res.objects)
        return {t.id: t for t in found if t.user_id == user_id}

    def load_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:
        """The session's turns with ``seq > after_seq`` (in log order), its turn count and the epoch.

        The epoch is read first and only turns written under it are returned (a turn of a
        forgotten epoch is never read back, even before its tenant is removed). The turns are
        read before the count, so ``count`` is at least what the log held when they were read;
        with ``after_seq=0`` it is exactly ``len(turns)``. A cache that finds
        ``count != cached + len(turns)`` must reload the whole log (module docstring).
        """
        self._check_open()
        check_id(user_id)
        check_id(session_id, name="session_id")
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise InvalidInputError("after_seq must be a non-negative int")
        epoch = self._read_epoch(user_id)
        h = self._turns(tenant_name(user_id))
        scope = _session_scope(session_id, epoch)
        try:
            objects = self._session_objects(h, scope, after_seq, None)
        except StoreError as exc:
            if is_tenant_missing(exc):
                return SessionLog(turns=(), count=0, epoch=epoch)
            raise
        turns = [_turn(o.properties) for o in objects]
        turns = [t for t in turns if t.user_id == user_id and t.session_id == session_id]  # defence in depth
        if turns:
            _SEQ_CLOCK.observe((self.collection, user_id, session_id), turns[-1].seq)
        if after_seq == 0:
            count = len(turns)
        else:
            try:
                count = self._count_objects(h, scope, "count session turns")
            except StoreError as exc:
                if not is_tenant_missing(exc):
                    raise
                count = 0  # removed by a forget just now: the epoch tells the reader on its next load
        return SessionLog(turns=tuple(turns), count=count, epoch=epoch)

    def _session_objects(self, h: Any, scope: Any, after_seq: int, properties: Sequence[str] | None) -> list[Any]:
        """The objects ``scope`` matches with ``seq > after_seq``, in log order, read by pages of :data:`_TURN_PAGE`.

        Keyset pagination on ``seq`` (then id): a page starts at the last page's largest ``seq``,
        inclusive, since equal seqs may span pages; objects already read are skipped, and so is an
        object whose stored ``seq`` is not above ``after_seq``.
        ``properties``: the properties to return (``None``: all of them).
        """
        from weaviate.classes.query import Filter, Sort

        order = Sort.by_property("seq", ascending=True).by_id(ascending=True)
        wanted = None if properties is None else list(dict.fromkeys([*properties, "seq"]))
        out: list[Any] = []
        seen: set[str] = set()
        floor, inclusive = after_seq, False
        while True:
            bound = Filter.by_property("seq")
            page_filter = Filter.all_of(
                [scope, bound.greater_or_equal(floor) if inclusive else bound.greater_than(floor)]
            )

            def run(page_filter: Any = page_filter) -> Any:
                return h.query.fetch_objects(
                    filters=page_filter, sort=order, limit=_TURN_PAGE, return_properties=wanted
                )

            res = self._call("load session", run)
            for o in res.objects:
                # The stored seq decides: an index ghost (module docstring) can match a turn appended
                # by two processes at once under the seq of the write that lost.
                if str(o.uuid) not in seen and int(o.properties.get("seq") or 0) > after_seq:
                    seen.add(str(o.uuid))
                    out.append(o)
            if len(res.objects) < _TURN_PAGE:
                return out
            floor, inclusive = int(res.objects[-1].properties["seq"]), True

    def _logged_turn_ids(self, user_id: str, session_id: str) -> list[str]:
        """Ids of the turns :meth:`load_session` would return, read without their text (cheaper)."""
        scope = _session_scope(session_id, self._read_epoch(user_id))
        try:
            objects = self._session_objects(
                self._turns(tenant_name(user_id)), scope, 0, ["turn_id", "user_id", "session_id"]
            )
        except StoreError as exc:
            if is_tenant_missing(exc):
                return []
            raise
        return [
            str(o.properties["turn_id"])
            for o in objects
            if o.properties.get("user_id") == user_id and o.properties.get("session_id") == session_id
        ]

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the session's turn log (long-term memories stay); return how many turns it held."""
        self._check_open()
        from weaviate.classes.query import Filter

        check_id(user_id)
        check_id(session_id, name="session_id")
        h = self._turns(tenant_name(user_id), write=True)
        self._delete_objects(h, [_mark_uuid(user_id, session_id)], "delete extraction watermark")
        where = Filter.all_of(
            [Filter.by_property("session_id").equal(session_id), Filter.by_property("epoch").greater_or_equal(0)]
        )
        deleted = 0
        while True:

            def run() -> tuple[int, int]:
                res = h.data.delete_many(where=where)
                return int(res.matches), int(res.failed)

            try:
                matches, failed = self._call("delete session", run)
            except StoreError as exc:
                if is_tenant_missing(exc):
                    return deleted
                raise
            if failed:
                raise StoreError(f"{failed} of {matches} turns of the session could not be deleted")
            deleted += matches
            if matches < QUERY_MAXIMUM_RESULTS:  # one call deletes at most that many
                return deleted

    def delete_turns(self, user_id: str, turn_ids: Sequence[str]) -> int:
        """Delete these turns of ``user_id`` from their sessions' logs; return how many were there.

        Each turn lives at a UUID derived from the user and its id, so this is one delete by
        UUID in the user's tenant. The rest of each log, its watermarks and the long-term
        memories stay; missing ids (and a user without a tenant) are fine.

        A memory write of this process still queued for replay (the dead-letter file) whose
        search context was cut from one of these turns loses that context first: the replay does
        not write the turn's words back, and the file keeps no copy of them. Queues of other
        processes are checked by their replay (:meth:`WeaviateStore.replay_dead_letters`).
        """
        self._check_open()
        check_id(user_id)
        ids = check_ids(turn_ids)
        if not ids:
            return 0
        self._dlq.blank_contexts(user_id, set(ids))
        h = self._turns(tenant_name(user_id), write=True)
        return self._delete_objects(h, [_turn_uuid(user_id, t) for t in ids], "delete turns")

    def _read_mark(self, h: Any, user_id: str, session_id: str, epoch: int) -> int:
        """The watermark stored under ``epoch`` (0: none, or one of a forgotten epoch)."""
        uid = _mark_uuid(user_id, session_id)

        def run() -> Any:
            return h.query.fetch_object_by_id(uid, return_properties=["seq", "epoch"])

        try:
            obj = self._call("read extraction watermark", run)
        except StoreError as exc:
            if is_tenant_missing(exc):
                return 0
            raise
        if obj is None or obj.properties.get("epoch") != _mark_epoch(epoch):
            return 0
        return int(obj.properties.get("seq") or 0)

    def extracted_upto(self, user_id: str, session_id: str) -> int:
        """The session's extraction watermark: ``seq`` of its last extracted turn (0: none yet)."""
        self._check_open()
        check_id(user_id)
        check_id(session_id, name="session_id")
        return self._read_mark(self._turns(tenant_name(user_id)), user_id, session_id, self._read_epoch(user_id))

    def mark_extracted(self, user_id: str, session_id: str, seq: int, *, epoch: int) -> bool:
        """Advance the session's extraction watermark to ``seq`` (it never moves back on purpose).

        Without transactions the compare-and-set is read, compare, write, re-read: of two racing
        marks the lower one may land last; it is then raised again (once), and a watermark that
        still ends up lower only makes the next batch re-read turns whose facts the writer's
        dedup already holds.

        Returns:
            Whether the watermark moved (``False``: it was already at or past ``seq``).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch`` (nothing is kept).
            InvalidInputError: ``seq`` is not a positive int.
        """
        self._check_open()
        from weaviate.classes.data import DataObject

        check_id(user_id)
        check_id(session_id, name="session_id")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidInputError("seq must be a positive int")
        self._check_epochs({user_id: epoch})
        h = self._turns(tenant_name(user_id), write=True)
        uid = _mark_uuid(user_id, session_id)
        props = {"user_id": user_id, "session_id": session_id, "seq": seq, "epoch": _mark_epoch(epoch)}
        moved = False
        for _ in range(2):
            if self._read_mark(h, user_id, session_id, epoch) >= seq:
                break

            def run() -> None:
                res = h.data.insert_many([DataObject(properties=props, uuid=uid)])
                for err in res.errors.values():
                    raise object_error(f"the extraction watermark was not stored: {getattr(err, 'message', err)}")

            self._call("mark extracted", run)  # idempotent: the object replaces itself
            moved = True
        if self._read_epoch(user_id) != epoch:
            self._delete_objects(h, [uid], "undo a forgotten watermark")
            raise UserForgottenError(user_id)
        return moved

    def _read_summary_mark(self, h: Any, user_id: str, session_id: str, epoch: int) -> int:
        """The summary watermark stored under ``epoch``: the largest ``seq`` of its chain (0: none)."""
        from weaviate.classes.query import Filter, Sort

        where = Filter.all_of(
            [
                Filter.by_property("session_id").equal(session_id),
                Filter.by_property("turn_id").equal(_SUMMARY_MARK),
                Filter.by_property("epoch").equal(_mark_epoch(epoch)),
            ]
        )

        def run() -> Any:
            return h.query.fetch_objects(
                filters=where, sort=Sort.by_property("seq", ascending=False), limit=1, return_properties=["seq"]
            )

        def read_move(mark: int) -> Any:
            uid = _summary_uuid(user_id, session_id, mark)
            return self._call(
                "read summary watermark move",
                lambda: h.query.fetch_object_by_id(uid, return_properties=["seq", "epoch"]),
            )

        try:
            res = self._call("read summary watermark", run)
            mark = int(res.objects[0].properties.get("seq") or 0) if res.objects else 0
            # The sort can lag the chain (module docstring, Index ghosts): follow the moves by id.
            while (move := read_move(mark)) is not None and move.properties.get("epoch") == _mark_epoch(epoch):
                nxt = int(move.properties.get("seq") or 0)
                if nxt <= mark:  # never written (moves go up); stop rather than loop
                    break
                mark = nxt
        except StoreError as exc:
            if is_tenant_missing(exc):
                return 0
            raise
        return mark

    def summarized_upto(self, user_id: str, session_id: str) -> int:
        """The session's summary watermark: ``seq`` of its last summarised turn (0: none yet)."""
        self._check_open()
        check_id(user_id)
        check_id(session_id, name="session_id")
        return self._read_summary_mark(
            self._turns(tenant_name(user_id)), user_id, session_id, self._read_epoch(user_id)
        )

    def mark_summarized(self, user_id: str, session_id: str, seq: int, *, expected: int, epoch: int) -> bool:
        """Move the session's summary watermark from ``expected`` to ``seq`` (compare-and-set).

        The move is an insert at the UUID of "the move from ``expected``" that the server
        refuses when it exists, then a read-back of its token (module docstring).

        Returns:
            Whether it moved (``False``: the watermark is no longer ``expected``).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch`` (nothing is kept).
            InvalidInputError: ``expected`` is negative or ``seq`` is not above it.
        """
        self._check_open()
        from weaviate.exceptions import UnexpectedStatusCodeError

        check_id(user_id)
        check_id(session_id, name="session_id")
        check_watermark_move(expected, seq)
        self._check_epochs({user_id: epoch})
        h = self._turns(tenant_name(user_id), write=True)
        if self._read_summary_mark(h, user_id, session_id, epoch) != expected:
            return False
        uid = _summary_uuid(user_id, session_id, expected)
        token = uuid.uuid4().hex
        props = {
            "user_id": user_id,
            "session_id": session_id,
            "turn_id": _SUMMARY_MARK,
            "content": token,
            "seq": seq,
            "epoch": _mark_epoch(epoch),
        }

        def run() -> None:
            try:
                h.data.insert(properties=props, uuid=uid)
            except UnexpectedStatusCodeError as exc:
                if exc.status_code != 422:  # 422: the UUID exists (another move from ``expected``)
                    raise

        self._call("mark summarized", run)

        def read_back() -> Any:
            return h.query.fetch_object_by_id(uid, return_properties=["content", "epoch"])

        def ours() -> bool:
            obj = self._call("read summary watermark move", read_back)
            return obj is not None and obj.properties.get("content") == token

        won = ours()
        if self._read_epoch(user_id) != epoch:
            if won:
                self._delete_objects(h, [uid], "undo a forgotten summary watermark")
            raise UserForgottenError(user_id)
        return won and ours()  # a racing create that replaced ours since (module docstring, Limit)
