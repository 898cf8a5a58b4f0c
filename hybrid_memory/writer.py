"""Moved to :mod:`hybrid_memory.write.writer`; this module re-exports its public names."""

from hybrid_memory.write.writer import (
    ConflictJudge,
    ConflictReview,
    ConflictVerdicts,
    HeuristicConflictJudge,
    LLMConflictJudge,
    MemoryWriter,
    Relation,
    Verdict,
    conflict_similarity_for,
)

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
