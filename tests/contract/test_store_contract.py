"""Run the store contract (:mod:`hybrid_memory.testing.store_contract`) on every backend of the library.

Each class gives the suite its ``store`` (a new, empty store, closed after the test) and, where
several processes can share the data, a ``store_twin`` on the same data. ``LocalStore(":memory:")``
has no twin (an in-memory SQLite database belongs to one connection). Weaviate runs on a real
server (``tests/weaviate_fixtures.py``): skipped without a binary or ``WEAVIATE_URL``, a failure
with ``CI=true``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing.store_contract import StoreContract


class TestLocalStoreInMemory(StoreContract):
    @pytest.fixture
    def store(self) -> Iterator[MemoryStore]:
        s = LocalStore(":memory:")
        yield s
        s.close()


class TestLocalStoreFile(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[MemoryStore]:
        s = LocalStore(tmp_path / "m.db")
        yield s
        s.close()

    @pytest.fixture
    def store_twin(self, store: MemoryStore, tmp_path: Path) -> Iterator[MemoryStore]:
        s = LocalStore(tmp_path / "m.db")
        yield s
        s.close()


@pytest.mark.weaviate
class TestWeaviateStore(StoreContract):
    atomic_marks = False  # no conditional write: see hybrid_memory.stores.weaviate.turns (Limit)

    @pytest.fixture
    def store(self, weaviate_contract_store: Any) -> Iterator[MemoryStore]:
        yield weaviate_contract_store
        weaviate_contract_store.close()  # the fixture then drops its collections

    @pytest.fixture
    def store_twin(self, store: MemoryStore, weaviate_contract_twin: Callable[[Any], Any]) -> Iterator[MemoryStore]:
        s = weaviate_contract_twin(store)
        yield s
        s.close()
