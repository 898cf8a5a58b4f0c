"""Isolation under load (issue 8, item 5): 8 concurrent callers x 50 users on each store.

Threads and asyncio tasks do mixed ``add_turn`` / ``remember`` / ``recall`` / ``build_context`` /
``forget`` (see :mod:`tests.reliability.load`). Asserted: zero results of another user (checked
on every hit and every fused block, adversarial queries name other users' marker tokens), zero
unexpected exceptions, zero lost acknowledged writes, zero forgotten memories coming back.

Each run lasts ``HYBRID_MEMORY_RELIABILITY_SECONDS`` (default 5 s here; 60 s in
``benchmarks/reliability.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
from hybrid_memory.testing import HashingEmbedder
from tests.reliability.conftest import load_seconds, report
from tests.reliability.load import Ledger, run_tasks, run_threads, verify

WORKERS, USERS = 8, 50
SECONDS = load_seconds(5.0)


def _config() -> HybridMemoryConfig:
    # A low relevance floor so build_context really injects memories (more hits to check).
    return HybridMemoryConfig(fuser={"min_similarity": 0.0})


@pytest.fixture(params=["local", pytest.param("weaviate", marks=pytest.mark.weaviate)])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HybridMemory]:
    if request.param == "local":
        store: Any = LocalStore(tmp_path / "load.db")
    else:
        factory: Callable[..., Any] = request.getfixturevalue("weaviate_store_factory")
        store = factory()
    mem = HybridMemory(store=store, embedder=HashingEmbedder(dim=128), config=_config())
    yield mem
    mem.close()


def _assert_clean(mem: HybridMemory, ledger: Ledger, mode: str) -> None:
    result = verify(mem, ledger, USERS)
    report(
        f"isolation load: {type(mem.store).__name__}, {WORKERS} {mode} x {USERS} users",
        seconds=SECONDS,
        **result,
        leaks=sum("LEAK" in e for e in ledger.errors),
        exceptions=sum("raised" in e for e in ledger.errors),
    )
    assert ledger.errors == [], "\n".join(ledger.errors[:5])
    assert result["lost"] == 0, result
    assert result["resurrected"] == 0, result
    assert result["acknowledged"] > 0 and result["checked_hits"] > 0, result
    assert set(ledger.ops) >= {"remember", "recall", "build_context", "add_turn", "forget"}, ledger.ops


def test_threads_never_see_another_users_memories(memory: HybridMemory) -> None:
    ledger = run_threads(memory, workers=WORKERS, users=USERS, seconds=SECONDS, seed=1)
    _assert_clean(memory, ledger, "threads")


async def test_asyncio_tasks_never_see_another_users_memories(memory: HybridMemory) -> None:
    ledger = await run_tasks(memory, workers=WORKERS, users=USERS, seconds=SECONDS, seed=2)
    _assert_clean(memory, ledger, "asyncio tasks")
