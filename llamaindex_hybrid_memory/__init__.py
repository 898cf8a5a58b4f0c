"""LlamaIndex adapters for hybrid-memory (``pip install 'hybrid-memory[llamaindex]'``)."""

from __future__ import annotations

__all__: list[str] = []
