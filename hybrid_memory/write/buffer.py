"""The short-term buffer: a token-budgeted window of the current session's turns.

Turns flagged as key frames (high importance, explicit "remember", goals, constraints, declared
preferences) are pinned: the oldest *non-key* turn is evicted first. Invariants (checked by
property tests):

* the sum of ``Turn.tokens`` never exceeds ``max_tokens`` after :meth:`KeyFrameBuffer.add`;
* key frames may pin at most ``max_key_frame_ratio`` of the budget; beyond that the oldest key
  frames are evicted (they were already written to long-term memory when they arrived), so
  recent conversation always has room and key frames can never deadlock the window;
* a key frame is evicted only when key frames exceed their share or no non-key turn is left;
* the window keeps the original order, and every turn added is either in the window or was
  returned by exactly one :meth:`~KeyFrameBuffer.add` call (so the caller can hand it to the
  long-term write path exactly once).

Example:
    >>> from datetime import datetime, timezone
    >>> from hybrid_memory.records import Turn
    >>> buf = KeyFrameBuffer(max_tokens=10)
    >>> def t(i, n, key=False):
    ...     return Turn(id=str(i), user_id="u", session_id="s", role="user", content="x",
    ...                 timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc), key_frame=key, tokens=n)
    >>> buf.add(t(1, 4, key=True)), buf.add(t(2, 4)), [e.id for e in buf.add(t(3, 4))]
    ([], [], ['2'])
    >>> [x.id for x in buf.turns], buf.token_count
    (['1', '3'], 8)
"""

from __future__ import annotations

import threading

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import Turn

__all__ = ["KeyFrameBuffer"]


class KeyFrameBuffer:
    """Token-budgeted window with pinned key frames.

    Args:
        max_tokens: The budget; the sum of ``Turn.tokens`` never exceeds it after :meth:`add`.
        max_key_frame_ratio: Share of the budget key frames may occupy (0 < ratio <= 1).
    """

    def __init__(self, *, max_tokens: int, max_key_frame_ratio: float = 0.6) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError("max_tokens must be a positive int")
        if isinstance(max_key_frame_ratio, bool) or not 0.0 < float(max_key_frame_ratio) <= 1.0:
            raise InvalidInputError("max_key_frame_ratio must be in (0, 1]")
        self.max_tokens = max_tokens
        self.max_key_frame_ratio = float(max_key_frame_ratio)
        self._turns: list[Turn] = []
        self._ids: set[str] = set()
        self._tokens = 0
        self._key_tokens = 0
        self._lock = threading.Lock()

    @property
    def turns(self) -> list[Turn]:
        """The turns in the window, oldest first (a copy)."""
        with self._lock:
            return list(self._turns)

    @property
    def key_frames(self) -> list[Turn]:
        """The pinned turns in the window, oldest first."""
        with self._lock:
            return [t for t in self._turns if t.key_frame]

    @property
    def token_count(self) -> int:
        """Tokens currently held."""
        return self._tokens

    @property
    def key_frame_budget(self) -> int:
        """Tokens key frames may pin (``max_tokens × max_key_frame_ratio``)."""
        return int(self.max_tokens * self.max_key_frame_ratio)

    def __len__(self) -> int:
        return len(self._turns)

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._ids

    def _pop(self, idx: int) -> Turn:
        out = self._turns.pop(idx)
        self._ids.discard(out.id)
        self._tokens -= out.tokens
        if out.key_frame:
            self._key_tokens -= out.tokens
        return out

    def add(self, turn: Turn) -> list[Turn]:
        """Append ``turn`` and return the turns evicted to respect the budget, oldest first.

        A single turn larger than the whole budget is evicted at once (it goes straight to
        long-term memory) rather than overflowing the window.

        Raises:
            InvalidInputError: a turn with this id is already in the window, or ``tokens < 0``.
        """
        if turn.tokens < 0:
            raise InvalidInputError("turn.tokens must be >= 0")
        with self._lock:
            if turn.id in self._ids:
                raise InvalidInputError(f"turn {turn.id!r} is already in the window")
            self._turns.append(turn)
            self._ids.add(turn.id)
            self._tokens += turn.tokens
            if turn.key_frame:
                self._key_tokens += turn.tokens
            evicted: list[tuple[int, Turn]] = []
            seq = {t.id: n for n, t in enumerate(self._turns)}
            # 1. Key frames beyond their share: drop the oldest ones (never the last key frame
            #    standing, which step 2 handles if it alone overflows the budget).
            while self._key_tokens > self.key_frame_budget:
                keys = [i for i, x in enumerate(self._turns) if x.key_frame]
                if len(keys) <= 1:
                    break
                out = self._pop(keys[0])
                evicted.append((seq[out.id], out))
            # 2. Over budget: oldest non-key turn first, then the oldest key frame.
            while self._tokens > self.max_tokens and self._turns:
                idx = next((i for i, x in enumerate(self._turns) if not x.key_frame), 0)
                out = self._pop(idx)
                evicted.append((seq[out.id], out))
            evicted.sort(key=lambda e: e[0])
            return [t for _, t in evicted]

    def clear(self) -> list[Turn]:
        """Empty the window and return what it held, oldest first."""
        with self._lock:
            out, self._turns = self._turns, []
            self._ids.clear()
            self._tokens = 0
            self._key_tokens = 0
            return out
