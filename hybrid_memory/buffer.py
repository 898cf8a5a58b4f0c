"""The short-term buffer: a token-budgeted window of the current session's turns.

Turns flagged as key frames (high importance, explicit "remember", goals, constraints, declared
preferences) are pinned: the oldest *non-key* turn is evicted first. The budget is never
exceeded: when key frames alone overflow it, the oldest key frames are evicted too. Order is
preserved and every evicted turn is returned exactly once, so the caller can hand it to the
long-term write path.

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
    """

    def __init__(self, *, max_tokens: int) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInputError("max_tokens must be a positive int")
        self.max_tokens = max_tokens
        self._turns: list[Turn] = []
        self._tokens = 0
        self._lock = threading.Lock()

    @property
    def turns(self) -> list[Turn]:
        """The turns in the window, oldest first (a copy)."""
        with self._lock:
            return list(self._turns)

    @property
    def token_count(self) -> int:
        """Tokens currently held."""
        return self._tokens

    def add(self, turn: Turn) -> list[Turn]:
        """Append ``turn`` and return the turns evicted to respect the budget (oldest first).

        A single turn larger than the whole budget is evicted at once (it goes straight to
        long-term memory) rather than overflowing the window.
        """
        with self._lock:
            self._turns.append(turn)
            self._tokens += turn.tokens
            evicted: list[Turn] = []
            while self._tokens > self.max_tokens and self._turns:
                idx = next((i for i, x in enumerate(self._turns) if not x.key_frame), 0)
                out = self._turns.pop(idx)
                self._tokens -= out.tokens
                evicted.append(out)
            evicted.sort(key=lambda x: (x.timestamp, x.id))
            return evicted

    def clear(self) -> list[Turn]:
        """Empty the window and return what it held."""
        with self._lock:
            out, self._turns, self._tokens = self._turns, [], 0
            return out
