"""Moved to :mod:`hybrid_memory.write.summary`; this module re-exports its public names."""

from hybrid_memory.write.summary import SessionSummarizer, SummaryCheck, SummaryResult, check_summary, critical_items

__all__ = ["SessionSummarizer", "SummaryCheck", "SummaryResult", "check_summary", "critical_items"]
