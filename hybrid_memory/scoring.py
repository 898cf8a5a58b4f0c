"""Moved to :mod:`hybrid_memory.write.importance`; this module re-exports its public names."""

from hybrid_memory.write.importance import (
    HeuristicImportanceScorer,
    ImportanceScorer,
    ImportanceScores,
    LLMImportanceScorer,
    ScoreBatch,
    ScoredText,
    StructuredMethod,
    TurnScore,
    content_key,
    infer_category,
    parse_json_object,
    spearman,
)

__all__ = [
    "HeuristicImportanceScorer",
    "ImportanceScorer",
    "ImportanceScores",
    "LLMImportanceScorer",
    "ScoreBatch",
    "ScoredText",
    "StructuredMethod",
    "TurnScore",
    "content_key",
    "infer_category",
    "parse_json_object",
    "spearman",
]
