"""Fixtures of the store contract suite.

Every test in ``tests/contract/`` takes the ``store`` fixture and runs once per entry of
:data:`STORE_FACTORIES`: a registry ``name -> StoreKind(factory, marks)``. A factory receives the
pytest ``request`` and a fresh ``tmp_path`` and returns a new, empty store bound to nothing; the
fixture closes it after the test.

Adding a backend (e.g. Weaviate) is one entry here::

    STORE_FACTORIES["weaviate"] = StoreKind(
        lambda request, tmp_path: request.getfixturevalue("weaviate_contract_store"),
        marks=(pytest.mark.weaviate,),
    )

where ``weaviate_contract_store`` is a fixture yielding an empty ``WeaviateStore`` (a fresh
collection or tenant prefix per test). Fixtures are only visible below the conftest that defines
them, so that fixture must live in ``tests/conftest.py`` or in a plugin module listed in the root
conftest's ``pytest_plugins`` (e.g. one that ``tests/integration/conftest.py`` also imports).
Entries may also be added from such a plugin at import time (``STORE_FACTORIES`` is a plain dict
read when tests are collected).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.local import LocalStore
from tests.weaviate_fixtures import weaviate_contract_store, weaviate_endpoint  # noqa: F401 - fixtures

StoreFactory = Callable[[pytest.FixtureRequest, Path], MemoryStore]


@dataclass(frozen=True)
class StoreKind:
    """How to build one backend for the contract suite, and the marks its tests carry."""

    factory: StoreFactory
    marks: tuple[pytest.MarkDecorator, ...] = field(default_factory=tuple)


STORE_FACTORIES: dict[str, StoreKind] = {
    "local-memory": StoreKind(lambda request, tmp_path: LocalStore(":memory:")),
    "local-file": StoreKind(lambda request, tmp_path: LocalStore(tmp_path / "m.db")),
    # A real server (tests/weaviate_fixtures.py): skipped without binary/WEAVIATE_URL, fails in CI.
    "weaviate": StoreKind(
        lambda request, tmp_path: request.getfixturevalue("weaviate_contract_store"),
        marks=(pytest.mark.weaviate,),
    ),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_kind" in metafunc.fixturenames:
        metafunc.parametrize(
            "store_kind",
            [pytest.param(name, marks=kind.marks, id=name) for name, kind in STORE_FACTORIES.items()],
        )


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    s = STORE_FACTORIES[store_kind].factory(request, tmp_path)
    try:
        yield s
    finally:
        s.close()
