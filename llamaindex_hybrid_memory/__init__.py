"""LlamaIndex adapters for hybrid-memory (``pip install 'hybrid-memory[llamaindex]'``).

Three thin subclasses of LlamaIndex's own extension points, each built from a core
:class:`~hybrid_memory.HybridMemory` (``memory=``) and a ``user_id``:

- :class:`HybridAgentMemory` (``BaseMemory``): the ``memory=`` of ``FunctionAgent``,
  ``ReActAgent`` and ``AgentWorkflow`` runs, for one user and session;
- :class:`HybridMemoryBlock` (``BaseMemoryBlock[str]``): a long-term block for
  ``llama_index.core.memory.Memory``;
- :class:`HybridMemoryRetriever` (``BaseRetriever``): recall as ``NodeWithScore`` with every
  score component in the metadata.

Importing this package without llama-index-core raises
:class:`~hybrid_memory.errors.MissingDependencyError` naming the install command.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from llamaindex_hybrid_memory.agent_memory import HybridAgentMemory
from llamaindex_hybrid_memory.block import HybridMemoryBlock
from llamaindex_hybrid_memory.retriever import HybridMemoryRetriever

try:
    __version__ = version("hybrid-memory")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "HybridAgentMemory",
    "HybridMemoryBlock",
    "HybridMemoryRetriever",
    "__version__",
]
