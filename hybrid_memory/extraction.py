"""Moved to :mod:`hybrid_memory.write.extraction`; this module re-exports its public names."""

from hybrid_memory.write.extraction import (
    BackgroundWorker,
    ExtractedFact,
    ExtractedMemory,
    ExtractionResult,
    FactExtractor,
    FactList,
)

__all__ = ["BackgroundWorker", "ExtractedFact", "ExtractedMemory", "ExtractionResult", "FactExtractor", "FactList"]
