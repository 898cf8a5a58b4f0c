"""LangChain / LangGraph adapters for hybrid-memory (``pip install 'hybrid-memory[langchain]'``).

* :class:`HybridChatMemory` - ``memory=`` for legacy ``ConversationChain`` / ``LLMChain``;
* :class:`HybridMemoryRetriever` - a ``BaseRetriever`` for LCEL pipelines;
* :class:`HybridMemoryStore` - a LangGraph ``BaseStore`` for ``create_agent(store=...)``,
  graphs and store-based tools;
* :class:`HybridMemoryMiddleware` - an ``AgentMiddleware`` that injects recalled memories into
  ``create_agent`` model calls and records each turn.

All of them wrap one core :class:`hybrid_memory.HybridMemory`, which can serve many users and
adapters at once. Names are imported lazily; a missing extra raises
:class:`~hybrid_memory.errors.MissingDependencyError` naming the install command.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from hybrid_memory.errors import MissingDependencyError

try:
    __version__ = version("hybrid-memory")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "HybridChatMemory",
    "HybridMemoryMiddleware",
    "HybridMemoryRetriever",
    "HybridMemoryStore",
    "__version__",
]

_LAZY = {
    "HybridChatMemory": "langchain_hybrid_memory.chat_memory",
    "HybridMemoryMiddleware": "langchain_hybrid_memory.middleware",
    "HybridMemoryRetriever": "langchain_hybrid_memory.retrievers",
    "HybridMemoryStore": "langchain_hybrid_memory.store",
}
_PACKAGES = {"langchain_core": "langchain-core", "langchain_classic": "langchain-classic", "langgraph": "langgraph"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        try:
            module = import_module(_LAZY[name])
        except ModuleNotFoundError as exc:
            root = (exc.name or "").split(".")[0]
            if root in _PACKAGES or root == "langchain":
                raise MissingDependencyError(_PACKAGES.get(root, root), "langchain") from exc
            raise
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'langchain_hybrid_memory' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))


if TYPE_CHECKING:  # pragma: no cover
    from langchain_hybrid_memory.chat_memory import HybridChatMemory
    from langchain_hybrid_memory.middleware import HybridMemoryMiddleware
    from langchain_hybrid_memory.retrievers import HybridMemoryRetriever
    from langchain_hybrid_memory.store import HybridMemoryStore
