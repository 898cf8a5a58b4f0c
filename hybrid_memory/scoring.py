"""Moved to :mod:`hybrid_memory.write.importance`; this module re-exports its public names.

``StructuredMethod`` and ``parse_json_object``, the LLM plumbing, live in :mod:`hybrid_memory.llm_call`.
"""

from hybrid_memory.llm_call import StructuredMethod, parse_json_object
from hybrid_memory.write.importance import (
    HeuristicImportanceScorer,
    ImportanceScorer,
    ImportanceScores,
    LLMImportanceScorer,
    ScoreBatch,
    ScoredText,
    TurnScore,
    content_key,
    infer_category,
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
