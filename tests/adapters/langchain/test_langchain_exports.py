"""The public surface of langchain_hybrid_memory is small, sorted and pinned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import langchain_hybrid_memory

ROOT = Path(__file__).resolve().parents[3]
EXPECTED = ["HybridChatMemory", "HybridMemoryMiddleware", "HybridMemoryRetriever", "HybridMemoryStore", "__version__"]


def test_all_is_pinned_and_sorted() -> None:
    assert langchain_hybrid_memory.__all__ == EXPECTED
    assert sorted(langchain_hybrid_memory.__all__) == langchain_hybrid_memory.__all__
    for name in EXPECTED:
        assert getattr(langchain_hybrid_memory, name) is not None
    assert isinstance(langchain_hybrid_memory.__version__, str)
    assert set(EXPECTED) <= set(dir(langchain_hybrid_memory))


def test_base_classes() -> None:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_classic.memory.chat_memory import BaseChatMemory
    from langchain_core.retrievers import BaseRetriever
    from langgraph.store.base import BaseStore

    assert issubclass(langchain_hybrid_memory.HybridChatMemory, BaseChatMemory)
    assert issubclass(langchain_hybrid_memory.HybridMemoryRetriever, BaseRetriever)
    assert issubclass(langchain_hybrid_memory.HybridMemoryStore, BaseStore)
    assert issubclass(langchain_hybrid_memory.HybridMemoryMiddleware, AgentMiddleware)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def test_import_is_lazy_and_missing_extra_names_the_install_command() -> None:
    lazy = _run(
        "import sys, langchain_hybrid_memory; "
        "assert 'langgraph' not in sys.modules and 'langchain_classic' not in sys.modules, sorted(sys.modules)"
    )
    assert lazy.returncode == 0, lazy.stderr
    missing = _run(
        "import sys; sys.modules['langgraph'] = None\n"
        "from hybrid_memory.errors import MissingDependencyError\n"
        "try:\n"
        "    from langchain_hybrid_memory import HybridMemoryStore\n"
        "except MissingDependencyError as e:\n"
        "    print(e)\n"
    )
    assert missing.returncode == 0, missing.stderr
    assert "pip install 'hybrid-memory[langchain]'" in missing.stdout
    assert "langgraph" in missing.stdout
