"""LocalStore's query product (einsum or BLAS by partition size) and its per-filter row masks.

Large partitions multiply with BLAS ``@``, small ones with ``einsum``; the two differ only in the
last bits of a dot product, so the ranking of a tie-free corpus must be the same either way.
Row masks are kept per filter between searches: every kind of write must drop them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import MemoryFilter, SearchRequest
from hybrid_memory.stores.local import LocalStore, partition

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
WORDS = ["tea", "coffee", "green", "black", "morning", "evening", "drink", "likes", "garden", "train"]


def records(rng: np.random.Generator, n: int) -> list[MemoryRecord]:
    return [
        MemoryRecord.create(
            user_id="u",
            id=str(uuid.UUID(int=i + 1)),
            content=" ".join(WORDS[int(w)] for w in rng.integers(0, len(WORDS), size=int(rng.integers(2, 7)))),
            timestamp=T0 + timedelta(hours=i),
            category=("fact", "preference")[i % 2],
            tags=("work",) if i % 3 == 0 else (),
        )
        for i in range(n)
    ]


def test_blas_and_einsum_products_rank_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    recs = records(rng, 400)
    vectors = rng.normal(size=(400, 64)).astype(np.float32)
    queries = rng.normal(size=(12, 64)).astype(np.float32)
    with LocalStore(":memory:") as store:
        store.upsert(recs, vectors)
        part = store._partition("u")
        ranked = {}
        for threshold, product in ((1 << 62, "einsum"), (0, "blas")):
            monkeypatch.setattr(partition, "_BLAS_PRODUCT_ELEMENTS", threshold)
            unit = partition._unit_vector(queries[0])
            expected = (
                part.matrix[: part.n] @ unit if product == "blas" else np.einsum("ij,j->i", part.matrix[: part.n], unit)
            )
            assert np.array_equal(part.similarities(unit), expected)
            ranked[product] = [
                [
                    (h.record.id, h.score)
                    for h in store.search(SearchRequest(user_id="u", query="green tea", vector=q, alpha=a, limit=15))
                ]
                for q in queries
                for a in (0.4, 1.0)
            ]
        for got, want in zip(ranked["blas"], ranked["einsum"], strict=True):
            assert [i for i, _ in got] == [i for i, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_cached_masks_follow_every_write(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    recs = records(rng, 60)
    vectors = rng.normal(size=(60, 16)).astype(np.float32)
    filters = [MemoryFilter(), MemoryFilter(categories=("fact",)), MemoryFilter(tags=("work",))]

    def found(store: LocalStore, flt: MemoryFilter) -> set[str]:
        req = SearchRequest(user_id="u", query="tea", vector=vectors[0], alpha=0.5, limit=100, filter=flt)
        return {h.record.id for h in store.search(req)}

    with LocalStore(tmp_path / "m.db") as store:
        store.upsert(recs, vectors)
        part = store._partition("u")
        first = part.mask(filters[1])
        assert part.mask(filters[1]) is first and not first.flags.writeable  # kept, read-only
        assert {f: found(store, f) for f in filters} == {f: found(store, f) for f in filters}
        store.update([recs[0].evolve(status="archived"), recs[1].evolve(category="fact", tags=("work",))])
        store.delete("u", [recs[2].id])  # the last row moves into its place
        store.upsert([recs[2].evolve(category="preference")], vectors[2:3])
        assert recs[0].id not in found(store, filters[0])
        assert recs[1].id in found(store, filters[1]) and recs[1].id in found(store, filters[2])
        assert recs[2].id not in found(store, filters[1]) and recs[2].id in found(store, filters[0])
        assert store._partition("u") is part  # changed in place, not rebuilt
        for flt in filters:
            assert np.array_equal(part.mask(flt), part._compute_mask(flt))
        for i in range(partition._MASK_CACHE_FILTERS + 3):  # more filters than kept: still right
            flt = MemoryFilter(session_id=f"s{i}")
            assert not part.mask(flt).any()
        assert len(part._masks) <= partition._MASK_CACHE_FILTERS
