"""Fixtures of the store contract runs in this folder.

The suite itself is :class:`hybrid_memory.testing.store_contract.StoreContract`, the same public
entry point a third backend uses; ``test_store_contract.py`` subclasses it once per backend. The
Weaviate fixtures (a real server: :mod:`tests.weaviate_fixtures`) are registered here by import.
``stores`` gives the race tests two store objects on the same data, as two processes have them;
``either_store`` one store of each kind, for the recall features measured on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.local import LocalStore
from tests.weaviate_fixtures import (  # noqa: F401 - fixtures are registered by import
    weaviate_contract_store,
    weaviate_contract_twin,
    weaviate_endpoint,
)


@pytest.fixture(params=["local", pytest.param("weaviate", marks=pytest.mark.weaviate)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[MemoryStore, MemoryStore]]:
    """Two store objects on the same data: the app's and another process's (own connection or client).

    LocalStore on a file, and a real Weaviate server (its own client, its own dead-letter file).
    """
    if request.param == "local":
        a, b = LocalStore(tmp_path / "m.db"), LocalStore(tmp_path / "m.db")
    else:
        a = request.getfixturevalue("weaviate_contract_store")
        b = request.getfixturevalue("weaviate_contract_twin")(a)
    try:
        yield a, b
    finally:
        b.close()
        a.close()


@pytest.fixture(params=["local", pytest.param("weaviate", marks=pytest.mark.weaviate)])
def either_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    """A LocalStore file, then a real Weaviate server: one store each run, closed after the test."""
    s: MemoryStore = (
        LocalStore(tmp_path / "m.db")
        if request.param == "local"
        else request.getfixturevalue("weaviate_contract_store")
    )
    try:
        yield s
    finally:
        s.close()
