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

A backend that several processes can share also gives a ``twin``: a second, independent store
object on the same data as the one the factory made (another ``LocalStore`` on the same file,
another client on the same Weaviate collection). The ``store_twin`` fixture uses it and skips
backends without one (an in-memory SQLite database belongs to one connection).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hybrid_memory.stores.base import MemoryStore
from hybrid_memory.stores.local import LocalStore
from tests.weaviate_fixtures import (  # noqa: F401 - fixtures
    weaviate_contract_store,
    weaviate_contract_twin,
    weaviate_endpoint,
)

StoreFactory = Callable[[pytest.FixtureRequest, Path], MemoryStore]
TwinFactory = Callable[[pytest.FixtureRequest, Path, MemoryStore], MemoryStore]


@dataclass(frozen=True)
class StoreKind:
    """How to build one backend for the contract suite, and the marks its tests carry."""

    factory: StoreFactory
    marks: tuple[pytest.MarkDecorator, ...] = field(default_factory=tuple)
    twin: TwinFactory | None = None


STORE_FACTORIES: dict[str, StoreKind] = {
    "local-memory": StoreKind(lambda request, tmp_path: LocalStore(":memory:")),
    "local-file": StoreKind(
        lambda request, tmp_path: LocalStore(tmp_path / "m.db"),
        twin=lambda request, tmp_path, store: LocalStore(tmp_path / "m.db"),
    ),
    # A real server (tests/weaviate_fixtures.py): skipped without binary/WEAVIATE_URL, fails in CI.
    "weaviate": StoreKind(
        lambda request, tmp_path: request.getfixturevalue("weaviate_contract_store"),
        marks=(pytest.mark.weaviate,),
        twin=lambda request, tmp_path, store: request.getfixturevalue("weaviate_contract_twin")(store),
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


@pytest.fixture
def store_twin(
    store_kind: str, store: MemoryStore, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[MemoryStore]:
    """A second store object on the same data as ``store`` (as another process would open it)."""
    twin = STORE_FACTORIES[store_kind].twin
    if twin is None:
        pytest.skip(f"{store_kind}: a second store object cannot open the same data")
    s = twin(request, tmp_path, store)
    try:
        yield s
    finally:
        s.close()
