"""Helpers shared by the contract tests (vectors, records)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from hybrid_memory.records import MemoryRecord

DIM = 8
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def vec(*components: float) -> np.ndarray:
    """A DIM-d float32 vector from its first components (rest zero)."""
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(components)] = components
    return v


def mat(*vectors: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(v, dtype=np.float32) for v in vectors])


def rec(user_id: str, content: str, *, minutes: int = 0, **fields: Any) -> MemoryRecord:
    """A record created ``minutes`` after T0."""
    return MemoryRecord.create(user_id=user_id, content=content, timestamp=T0 + timedelta(minutes=minutes), **fields)
