"""Re-export of :mod:`hybrid_memory.read.rerank` (the re-ranking of hybrid candidates), kept for old imports."""

from hybrid_memory.read.rerank import freshness, recency, relevance_of, rerank

__all__ = ["freshness", "recency", "relevance_of", "rerank"]
