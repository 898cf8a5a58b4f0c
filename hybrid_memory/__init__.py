"""hybrid-memory: memory for LLM agents.

A short-term key-frame buffer for the conversation in progress, a long-term store searched with
Weaviate's alpha-weighted hybrid (BM25 + vector) search, an importance scorer that decides what
is worth keeping, and a context fuser that injects the right few memories under a token budget.

Names are imported lazily, so ``import hybrid_memory`` is cheap and has no side effects.

Example:
    >>> from hybrid_memory import HybridMemory, LocalStore
    >>> from hybrid_memory.testing import HashingEmbedder
    >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
    >>> _ = mem.remember("alice", "Alice is allergic to peanuts", importance=0.9)
    >>> [h.content for h in mem.recall("peanuts allergy", user_id="alice", k=1)]
    ['Alice is allergic to peanuts']
    >>> mem.recall("peanuts allergy", user_id="bob")
    []
    >>> mem.close()
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("hybrid-memory")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "Analyzer",
    "ConfigurationError",
    "ContextFuser",
    "EmbedderMismatchError",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "FusedContext",
    "HeuristicImportanceScorer",
    "HybridMemory",
    "HybridMemoryConfig",
    "HybridMemoryError",
    "IdentityMismatchError",
    "InvalidInputError",
    "KeyFrameBuffer",
    "LLMImportanceScorer",
    "LocalStore",
    "MemoryFilter",
    "MemoryRecord",
    "MemoryStore",
    "MissingDependencyError",
    "NotFoundError",
    "RecallHit",
    "SchemaError",
    "ScoringError",
    "StoreError",
    "StoreUnavailableError",
    "UniversalSentenceEncoder",
    "UserForgottenError",
    "WeaviateStore",
    "WriteOutcome",
    "__version__",
]

_LAZY = {
    "Analyzer": "hybrid_memory.text.analyzer",
    "ContextFuser": "hybrid_memory.read.context",
    "FusedContext": "hybrid_memory.records",
    "HeuristicImportanceScorer": "hybrid_memory.write.importance",
    "HybridMemory": "hybrid_memory.memory",
    "HybridMemoryConfig": "hybrid_memory.config",
    "KeyFrameBuffer": "hybrid_memory.write.buffer",
    "LLMImportanceScorer": "hybrid_memory.write.importance",
    "LocalStore": "hybrid_memory.stores.local",
    "MemoryFilter": "hybrid_memory.values",
    "MemoryRecord": "hybrid_memory.records",
    "MemoryStore": "hybrid_memory.stores.base",
    "RecallHit": "hybrid_memory.records",
    "UniversalSentenceEncoder": "hybrid_memory.embeddings",
    "WeaviateStore": "hybrid_memory.stores.weaviate",
    "WriteOutcome": "hybrid_memory.records",
}
_ERRORS = {
    "ConfigurationError",
    "EmbedderMismatchError",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "HybridMemoryError",
    "IdentityMismatchError",
    "InvalidInputError",
    "MissingDependencyError",
    "NotFoundError",
    "SchemaError",
    "ScoringError",
    "StoreError",
    "StoreUnavailableError",
    "UserForgottenError",
}


def __getattr__(name: str) -> Any:
    if name in _ERRORS:
        return getattr(import_module("hybrid_memory.errors"), name)
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hybrid_memory' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))


if TYPE_CHECKING:  # pragma: no cover
    from hybrid_memory.config import HybridMemoryConfig
    from hybrid_memory.embeddings import UniversalSentenceEncoder
    from hybrid_memory.errors import (
        ConfigurationError,
        EmbedderMismatchError,
        EmbeddingDimensionError,
        EmbeddingError,
        HybridMemoryError,
        IdentityMismatchError,
        InvalidInputError,
        MissingDependencyError,
        NotFoundError,
        SchemaError,
        ScoringError,
        StoreError,
        StoreUnavailableError,
        UserForgottenError,
    )
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.read.context import ContextFuser
    from hybrid_memory.records import FusedContext, MemoryRecord, RecallHit, WriteOutcome
    from hybrid_memory.stores.base import MemoryFilter, MemoryStore
    from hybrid_memory.stores.local import LocalStore
    from hybrid_memory.stores.weaviate import WeaviateStore
    from hybrid_memory.text.analyzer import Analyzer
    from hybrid_memory.write.buffer import KeyFrameBuffer
    from hybrid_memory.write.importance import HeuristicImportanceScorer, LLMImportanceScorer
