"""Moved: the writer lives in :mod:`hybrid_memory.write.writer`, its judges in :mod:`hybrid_memory.write.conflict`.

This module re-exports their public names.
"""

from hybrid_memory.write.conflict import (
    ConflictJudge,
    ConflictReview,
    ConflictVerdicts,
    HeuristicConflictJudge,
    LLMConflictJudge,
    Relation,
    Verdict,
)
from hybrid_memory.write.writer import MemoryWriter, conflict_similarity_for

__all__ = [
    "ConflictJudge",
    "ConflictReview",
    "ConflictVerdicts",
    "HeuristicConflictJudge",
    "LLMConflictJudge",
    "MemoryWriter",
    "Relation",
    "Verdict",
    "conflict_similarity_for",
]
