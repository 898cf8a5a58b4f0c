"""Fixtures for the LlamaIndex adapter tests: a real core over an in-memory LocalStore and
LlamaIndex ``Memory`` objects whose SQL engines are disposed after each test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llama_index.core.memory import Memory
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder


@pytest.fixture
def core() -> Iterator[HybridMemory]:
    """The real engine: LocalStore in memory, the fast lexical HashingEmbedder, heuristic scorer."""
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(dim=256))
    yield mem
    mem.close()


@pytest.fixture
def make_chat_memory() -> Iterator[Callable[..., Memory]]:
    """Build LlamaIndex ``Memory`` objects, each on its own aiosqlite engine.

    ``Memory.from_defaults()`` creates an engine nobody closes, and aiosqlite then warns
    (ResourceWarning) when the connection is garbage-collected; we create the engines and
    dispose of them, so no warning has to be ignored.
    """
    engines: list[AsyncEngine] = []

    def make(**kwargs: Any) -> Memory:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        engines.append(engine)
        return Memory.from_defaults(async_engine=engine, **kwargs)

    yield make
    for engine in engines:
        asyncio.run(engine.dispose())
