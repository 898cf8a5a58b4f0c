"""Moved to :mod:`hybrid_memory.write.extraction`; this module re-exports its public names."""

from hybrid_memory.write.extraction import (
    MIN_SUPPORT,
    BackgroundWorker,
    ExtractedFact,
    ExtractedMemory,
    ExtractionResult,
    FactExtractor,
    FactList,
    grounding_problem,
    key_terms,
)

__all__ = [
    "MIN_SUPPORT",
    "BackgroundWorker",
    "ExtractedFact",
    "ExtractedMemory",
    "ExtractionResult",
    "FactExtractor",
    "FactList",
    "grounding_problem",
    "key_terms",
]
