"""Re-exports :mod:`hybrid_memory.observe.metrics` (in-process metrics and the Prometheus view), where the code lives now.

Kept so that ``hybrid_memory.metrics`` keeps importing the same public names.
"""

from __future__ import annotations

from hybrid_memory.observe.metrics import (
    WRITE_ACTIONS,
    ContextStats,
    MemoryMetrics,
    MetricsSnapshot,
    OperationStats,
    RecallStats,
    RefinementStats,
    ScorerStats,
    StoreStats,
    prometheus_registry,
    serve_prometheus,
)

__all__ = [
    "WRITE_ACTIONS",
    "ContextStats",
    "MemoryMetrics",
    "MetricsSnapshot",
    "OperationStats",
    "RecallStats",
    "RefinementStats",
    "ScorerStats",
    "StoreStats",
    "prometheus_registry",
    "serve_prometheus",
]
