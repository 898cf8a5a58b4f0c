"""The compact-vector study's forms: what a float16 / int8 store would compute with."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.compact_vectors import BYTES, _rescored, compact
from benchmarks.harness.pure import PureIndex
from hybrid_memory.text.analyzer import Analyzer


def _unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    unit: np.ndarray = m / np.linalg.norm(m, axis=1, keepdims=True)
    return unit


def test_float32_is_unchanged_and_compact_forms_stay_close_and_unit() -> None:
    m = _unit(200, 64)
    assert compact(m, "float32") is m
    for form, tol in (("float16", 1e-3), ("int8", 2e-2)):
        c = compact(m, form)
        assert c.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1.0, rtol=1e-5)
        assert float(np.abs(c - m).max()) < tol
        assert not np.array_equal(c, m)  # really rounded


def test_int8_keeps_sign_and_zero_vectors() -> None:
    m = np.zeros((2, 8), dtype=np.float32)
    m[1, 3] = -1.0
    c = compact(m, "int8")
    assert not np.isnan(c).any()
    assert c[1, 3] == pytest.approx(-1.0)


def test_rescored_leg_orders_the_compact_candidates_by_their_float32_cosine() -> None:
    exact = _unit(300, 32, seed=1)
    ids = [f"m{i}" for i in range(300)]
    idx = PureIndex(ids, [""] * 300, compact(exact, "int8"), Analyzer())
    q = exact[7] + 0.05 * _unit(1, 32, seed=2)[0]
    leg = _rescored(idx, exact, {i: n for n, i in enumerate(ids)}, q, 20)
    assert {c.id for c in leg} == {c.id for c in idx.vector_leg(q, 20)}
    sims = [float(exact[int(c.id[1:])] @ q) for c in leg]
    assert sims == sorted(sims, reverse=True)
    assert leg[0].id == "m7"


def test_bytes_per_vector() -> None:
    assert [BYTES[f](384) for f in ("float32", "float16", "int8", "int8_rescored")] == [1536, 768, 388, 388]
