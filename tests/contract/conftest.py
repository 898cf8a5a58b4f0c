"""Fixtures of the store contract runs in this folder.

The suite itself is :class:`hybrid_memory.testing.store_contract.StoreContract`, the same public
entry point a third backend uses; ``test_store_contract.py`` subclasses it once per backend. The
Weaviate fixtures (a real server: :mod:`tests.weaviate_fixtures`) are registered here by import.
"""

from __future__ import annotations

from tests.weaviate_fixtures import (  # noqa: F401 - fixtures are registered by import
    weaviate_contract_store,
    weaviate_contract_twin,
    weaviate_endpoint,
)
