"""The conversation-state half of the local store: turn logs and forget epochs.

Table ``turns`` is the durable, ordered log of every turn ``add_turn`` accepted (``seq`` orders
it across processes); ``forget_epochs`` holds each forgotten user's epoch under a SHA-256 of the
user id (so a forgotten id is not kept in clear); ``extracted`` holds each session's extraction
watermark (the ``seq`` of the last turn whose facts were extracted) and ``summarized`` its summary
watermark (moved by a compare-and-set inside one ``BEGIN IMMEDIATE`` transaction, so of two
processes marking the same range exactly one succeeds); ``retired_turns`` holds, for
:data:`~hybrid_memory.stores.base.RETIRED_TURN_TTL`, a hash of each turn a delete took out of
its log, whether it was forgotten or its session ended, and the user's epoch then (written in
the delete's transaction). Writes that carry ``epochs`` check them
inside their own transaction (:meth:`_TurnLog._check_epochs`).
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone

from hybrid_memory.errors import InvalidInputError, UserForgottenError
from hybrid_memory.records import Turn, check_id, check_text, ensure_utc
from hybrid_memory.stores.base import (
    RETIRED_TURN_TTL,
    check_epoch,
    check_ids,
    check_watermark_move,
    retired_turn_key,
    user_hash,
)
from hybrid_memory.stores.local.cache import _PartitionCache
from hybrid_memory.stores.local.rows import _chunks, _iso, _marks
from hybrid_memory.values import SessionLog


class _TurnLog(_PartitionCache):
    """Durable, ordered turn logs per user and session, and the users' forget epochs."""

    def _epoch(self, user_id: str) -> int:
        row = self._conn.execute(
            "SELECT epoch FROM forget_epochs WHERE user_hash = ?", (user_hash(user_id),)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _check_epochs(self, epochs: Mapping[str, int] | None) -> None:
        """Inside a write transaction: refuse it if a user was forgotten since ``epochs`` was read."""
        for user, epoch in (epochs or {}).items():
            if self._epoch(user) != epoch:
                raise UserForgottenError(user)

    def user_epoch(self, user_id: str) -> int:
        """The user's forget epoch (0 until the first :meth:`delete_user`)."""
        check_id(user_id)
        with self._guard():
            return self._epoch(user_id)

    def append_turns(self, turns: Sequence[Turn], *, epoch: int) -> builtins.list[Turn]:
        """Durably append turns of one user to their sessions' logs (fsynced when this returns).

        A turn whose id the user's logs already hold is not appended again: the stored turn is
        returned in its place (found in the same transaction, so a retried append from any process
        adds nothing).

        Returns:
            The turns with ``seq`` set, in the given order (a turn already stored: as stored).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch`` (nothing is written).
            InvalidInputError: turns of several users, or invalid turns.
        """
        items = builtins.list(turns)
        if not items:
            return []
        users = {t.user_id for t in items}
        if len(users) != 1 or not all(isinstance(t, Turn) for t in items):
            raise InvalidInputError("append_turns takes Turn objects of exactly one user")
        (user,) = users
        check_id(user)
        for t in items:
            check_id(t.session_id, name="session_id")
            check_id(t.id, name="turn id")
            check_text(t.content)
        out: builtins.list[Turn] = []
        with self._guard(), self._tx() as c:
            self._check_epochs({user: epoch})
            for t in items:
                row = c.execute(
                    f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? AND id = ?", (user, t.id)
                ).fetchone()
                if row is not None:
                    out.append(_turn(user, row))
                    continue
                cur = c.execute(
                    "INSERT INTO turns (user_id, session_id, id, role, content, timestamp, importance, key_frame, "
                    "key_frame_reason, tokens, scoring_note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        t.user_id,
                        t.session_id,
                        t.id,
                        t.role,
                        t.content,
                        _iso(ensure_utc(t.timestamp, name="timestamp")),
                        float(t.importance),
                        int(t.key_frame),
                        t.key_frame_reason,
                        int(t.tokens),
                        t.scoring_note,
                    ),
                )
                out.append(t.model_copy(update={"seq": int(cur.lastrowid or 0)}))
        return out

    def retired_turns(self, user_id: str, turn_ids: Sequence[str], *, epoch: int) -> builtins.set[str]:
        """Of these turn ids, those a retried ``add_turn`` under ``epoch`` must not add back (the protocol's rules)."""
        check_id(user_id)
        ids = check_ids(turn_ids)
        check_epoch(epoch)
        with self._guard():
            return {i for i in ids if _is_retired(self._conn, user_id, i, epoch)}

    def load_session(self, user_id: str, session_id: str, *, after_seq: int = 0) -> SessionLog:
        """The session's turns with ``seq > after_seq``, its turn count and the user's epoch (one snapshot)."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise InvalidInputError("after_seq must be a non-negative int")
        with self._guard():
            c = self._conn
            c.execute("BEGIN")  # one read snapshot for the three reads
            try:
                rows = c.execute(
                    f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id = ? AND session_id = ? AND seq > ? ORDER BY seq",
                    (user_id, session_id, after_seq),
                ).fetchall()
                count = int(
                    c.execute(
                        "SELECT COUNT(*) FROM turns WHERE user_id = ? AND session_id = ?", (user_id, session_id)
                    ).fetchone()[0]
                )
                epoch = self._epoch(user_id)
            finally:
                c.execute("COMMIT")
        turns = tuple(_turn(user_id, r) for r in rows)
        return SessionLog(turns=turns, count=count, epoch=epoch)

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the session's turn log (long-term memories stay); return how many turns it held.

        Its turns are recorded as ended in the same transaction (:meth:`retired_turns`).
        """
        check_id(user_id)
        check_id(session_id, name="session_id")
        with self._guard():
            with self._tx() as c:
                rows = c.execute("SELECT id FROM turns WHERE user_id = ? AND session_id = ?", (user_id, session_id))
                _retire(c, user_id, [str(r[0]) for r in rows], forgotten=False, epoch=self._epoch(user_id))
                n = int(
                    c.execute("DELETE FROM turns WHERE user_id = ? AND session_id = ?", (user_id, session_id)).rowcount
                )
                c.execute("DELETE FROM extracted WHERE user_id = ? AND session_id = ?", (user_id, session_id))
            if n:
                self._forget_traces()
            return n

    def delete_turns(self, user_id: str, turn_ids: Sequence[str]) -> int:
        """Delete these turns of ``user_id`` from their sessions' logs; return how many were there.

        The ids are recorded as forgotten in the same transaction, found or not
        (:meth:`retired_turns`). The deleted cells are overwritten and the WAL truncated, as for
        :meth:`delete`. The rest of each log, its watermarks and the long-term memories stay;
        missing ids are fine.
        """
        check_id(user_id)
        ids = check_ids(turn_ids)
        if not ids:
            return 0
        with self._guard():
            with self._tx() as c:
                _retire(c, user_id, ids, forgotten=True, epoch=self._epoch(user_id))
                n = sum(
                    int(
                        c.execute(
                            f"DELETE FROM turns WHERE user_id = ? AND id IN ({_marks(chunk)})", (user_id, *chunk)
                        ).rowcount
                    )
                    for chunk in _chunks(ids)
                )
            if n:
                self._forget_traces()
            return n

    def extracted_upto(self, user_id: str, session_id: str) -> int:
        """The session's extraction watermark: ``seq`` of its last extracted turn (0: none yet)."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        with self._guard():
            row = self._conn.execute(
                "SELECT upto FROM extracted WHERE user_id = ? AND session_id = ?", (user_id, session_id)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def mark_extracted(self, user_id: str, session_id: str, seq: int, *, epoch: int) -> bool:
        """Advance the session's extraction watermark to ``seq`` (compare-and-set: never moves back).

        Returns:
            Whether the watermark moved (``False``: it was already at or past ``seq``).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch`` (nothing is written).
            InvalidInputError: ``seq`` is not a positive int.
        """
        check_id(user_id)
        check_id(session_id, name="session_id")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidInputError("seq must be a positive int")
        with self._guard(), self._tx() as c:
            self._check_epochs({user_id: epoch})
            moved = c.execute(
                "INSERT INTO extracted (user_id, session_id, upto) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id, session_id) DO UPDATE SET upto = excluded.upto WHERE upto < excluded.upto",
                (user_id, session_id, seq),
            ).rowcount
        return bool(moved)

    def summarized_upto(self, user_id: str, session_id: str) -> int:
        """The session's summary watermark: ``seq`` of its last summarised turn (0: none yet)."""
        check_id(user_id)
        check_id(session_id, name="session_id")
        with self._guard():
            row = self._conn.execute(
                "SELECT upto FROM summarized WHERE user_id = ? AND session_id = ?", (user_id, session_id)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def mark_summarized(self, user_id: str, session_id: str, seq: int, *, expected: int, epoch: int) -> bool:
        """Move the session's summary watermark from ``expected`` to ``seq`` (compare-and-set).

        Returns:
            Whether it moved (``False``: the watermark is no longer ``expected``: another
            process summarised from there first).

        Raises:
            UserForgottenError: the user's epoch is no longer ``epoch`` (nothing is written).
            InvalidInputError: ``expected`` is negative or ``seq`` is not above it.
        """
        check_id(user_id)
        check_id(session_id, name="session_id")
        check_watermark_move(expected, seq)
        with self._guard(), self._tx() as c:  # BEGIN IMMEDIATE: read and write are one step
            self._check_epochs({user_id: epoch})
            row = c.execute(
                "SELECT upto FROM summarized WHERE user_id = ? AND session_id = ?", (user_id, session_id)
            ).fetchone()
            if (0 if row is None else int(row[0])) != expected:
                return False
            c.execute(
                "INSERT INTO summarized (user_id, session_id, upto) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id, session_id) DO UPDATE SET upto = excluded.upto",
                (user_id, session_id, seq),
            )
        return True


def _retire(c: sqlite3.Connection, user_id: str, turn_ids: Iterable[str], *, forgotten: bool, epoch: int) -> None:
    """Inside a delete's transaction: record turns as forgotten or ended under ``epoch``; prune expired records.

    A forgotten turn's record is never turned back into an ended one.
    """
    now = datetime.now(timezone.utc)
    c.executemany(
        "INSERT INTO retired_turns (key, forgotten, epoch, retired_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET forgotten = max(forgotten, excluded.forgotten), epoch = excluded.epoch, "
        "retired_at = excluded.retired_at",
        [(retired_turn_key(user_id, t), int(forgotten), epoch, _iso(now)) for t in turn_ids],
    )
    c.execute("DELETE FROM retired_turns WHERE retired_at < ?", (_iso(now - RETIRED_TURN_TTL),))


def _is_retired(c: sqlite3.Connection, user_id: str, turn_id: str, epoch: int) -> bool:
    """Whether a retry of the turn must not add it back (forgotten, or ended before a forget of its user)."""
    cutoff = _iso(datetime.now(timezone.utc) - RETIRED_TURN_TTL)
    row = c.execute(
        "SELECT forgotten, epoch FROM retired_turns WHERE key = ? AND retired_at >= ?",
        (retired_turn_key(user_id, turn_id), cutoff),
    ).fetchone()
    return row is not None and (bool(row[0]) or int(row[1]) < epoch)


#: Columns of a stored turn, in the order :func:`_turn` reads them.
_TURN_COLUMNS = (
    "seq, id, role, content, timestamp, importance, key_frame, tokens, scoring_note, key_frame_reason, session_id"
)


def _turn(user_id: str, r: Sequence[object]) -> Turn:
    """A stored turn from a row of :data:`_TURN_COLUMNS`."""
    return Turn(
        id=str(r[1]),
        user_id=user_id,
        session_id=str(r[10]),
        role=r[2],  # type: ignore[arg-type]
        content=str(r[3]),
        timestamp=datetime.fromisoformat(str(r[4])),
        importance=float(r[5]),  # type: ignore[arg-type]
        key_frame=bool(r[6]),
        tokens=int(r[7]),  # type: ignore[call-overload]
        scoring_note=r[8],  # type: ignore[arg-type]
        key_frame_reason=r[9],  # type: ignore[arg-type]
        seq=int(r[0]),  # type: ignore[call-overload]
    )
