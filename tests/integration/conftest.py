"""Integration tests run against a real Weaviate server: see :mod:`tests.weaviate_fixtures`.

The server is started once per session from the ``weaviate-server`` binary (or taken from
``WEAVIATE_URL``); without either the tests are skipped, and with ``CI=true`` they fail.
"""

from __future__ import annotations

from tests.weaviate_fixtures import (  # noqa: F401 - fixtures are registered by import
    weaviate_contract_store,
    weaviate_endpoint,
    weaviate_store,
    weaviate_store_factory,
)
