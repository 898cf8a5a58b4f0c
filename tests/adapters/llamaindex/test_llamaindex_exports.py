"""The public surface of ``llamaindex_hybrid_memory`` is small, sorted and pinned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import llamaindex_hybrid_memory

EXPECTED_ALL = ["HybridAgentMemory", "HybridMemoryBlock", "HybridMemoryRetriever", "__version__"]


def test_all_is_pinned_and_sorted() -> None:
    assert llamaindex_hybrid_memory.__all__ == EXPECTED_ALL
    assert sorted(llamaindex_hybrid_memory.__all__) == llamaindex_hybrid_memory.__all__


def test_every_name_resolves() -> None:
    for name in EXPECTED_ALL:
        assert getattr(llamaindex_hybrid_memory, name) is not None
    assert isinstance(llamaindex_hybrid_memory.__version__, str)


def test_import_has_no_side_effects() -> None:
    code = (
        "import logging, os; before = dict(os.environ); import llamaindex_hybrid_memory; "
        "assert dict(os.environ) == before, 'environment changed'; "
        "assert not logging.getLogger().handlers, 'root logging configured'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])
