"""LangChain / LangGraph adapters for hybrid-memory (``pip install 'hybrid-memory[langchain]'``)."""

from __future__ import annotations

__all__: list[str] = []
