"""Moved to :mod:`hybrid_memory.write.lifecycle`; this module re-exports its public names."""

from hybrid_memory.write.lifecycle import ConsolidationReport, consolidate

__all__ = ["ConsolidationReport", "consolidate"]
