"""Tests on a real 3-node Weaviate cluster: see :mod:`tests.weaviate_cluster`.

Every test in this folder is marked ``cluster`` and ``weaviate`` (``-m "not cluster"`` skips the
three nodes in a quick local run; CI runs them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.weaviate_cluster import (  # noqa: F401 - fixtures are registered by import
    cluster,
    cluster_store_factory,
    weaviate_cluster,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.weaviate)
