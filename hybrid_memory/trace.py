"""Re-exports :mod:`hybrid_memory.observe.trace` (per-operation traces), where the code lives now.

Kept so that ``hybrid_memory.trace`` keeps importing the same public names.
"""

from __future__ import annotations

from hybrid_memory.observe.trace import (
    TRACE_FORMAT,
    Observer,
    TraceCandidate,
    TraceSetting,
    TraceStep,
    TraceStore,
    TraceTurn,
    TraceWrite,
    default_trace_path,
    format_steps,
    observed,
)

__all__ = [
    "TRACE_FORMAT",
    "Observer",
    "TraceCandidate",
    "TraceSetting",
    "TraceStep",
    "TraceStore",
    "TraceTurn",
    "TraceWrite",
    "default_trace_path",
    "format_steps",
    "observed",
]
