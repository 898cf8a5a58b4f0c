"""Re-exports :mod:`hybrid_memory.text.temporal` (dates and time windows in queries), where the code lives now.

Kept so that ``hybrid_memory.temporal`` keeps importing the same public names.
"""

from __future__ import annotations

from hybrid_memory.text.temporal import (
    TimeWindow,
    find_time_windows,
    without_periods,
)

__all__ = [
    "TimeWindow",
    "find_time_windows",
    "without_periods",
]
