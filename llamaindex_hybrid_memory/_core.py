"""The one check every LlamaIndex adapter makes on its core (no IO, no LlamaIndex import)."""

from __future__ import annotations

from hybrid_memory.errors import ConfigurationError
from hybrid_memory.memory import HybridMemory

__all__ = ["require_core"]


def require_core(memory: object, owner: str) -> HybridMemory:
    """Check that an adapter was given a :class:`~hybrid_memory.HybridMemory` core.

    Every adapter takes the core first, positionally or as ``memory=``; none builds a private
    one (it would silently forget everything between sessions).

    Raises:
        ConfigurationError: ``memory`` is not a ``HybridMemory``.
    """
    if isinstance(memory, HybridMemory):
        return memory
    raise ConfigurationError(
        f"{owner} needs a hybrid-memory core as its first argument (or memory=), got {type(memory).__name__}: "
        f"build one per application, e.g. HybridMemory(store=LocalStore('memory.db')), and share it "
        "between adapters and sessions so memories persist"
    )
