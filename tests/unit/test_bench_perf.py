"""``hybrid-memory bench perf`` at tiny sizes: JSON schema, real measurements, rendering, CLI."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.harness.cli import register
from benchmarks.harness.perf import (
    SCHEMA_VERSION,
    PerfOptions,
    check_targets,
    make_corpus,
    numpy_floor_topk,
    project_cluster,
    render_markdown,
    run_perf,
    write_outputs,
)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    opts = PerfOptions(
        sizes=(150, 400),
        queries=6,
        warmup=1,
        weaviate=False,
        embedder=False,
        import_runs=1,
        concurrency=(1, 2),
        concurrency_seconds=0.15,
        concurrency_size=150,
        remember_items=40,
        profile=True,
    )
    return run_perf(opts)


def test_corpus_is_realistic_and_unique(tmp_path: Path) -> None:
    c = make_corpus(300, 5, dim=32, seed=1, data_dir=tmp_path)  # empty dir: synthetic vocabulary
    assert len(set(c.texts)) == 300
    assert c.vectors.shape == (300, 32) and c.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(c.vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(np.linalg.norm(c.query_vectors, axis=1), 1.0, atol=1e-5)
    # Each query vector is closest (or nearly) to the memory it was made from.
    sims = c.vectors @ c.query_vectors.T
    for j, t in enumerate(c.query_targets):
        assert sims[t, j] > 0.5
    assert "synthetic" in c.source


def test_numpy_floor_is_exact_top_k() -> None:
    rng = np.random.default_rng(0)
    m = rng.standard_normal((50, 8)).astype(np.float32)
    q = rng.standard_normal(8).astype(np.float32)
    top = numpy_floor_topk(m, q, 5)
    assert top.tolist() == np.argsort(-(m @ q))[:5].tolist()


def test_report_schema_and_real_numbers(report: dict[str, Any]) -> None:
    assert report["schema_version"] == SCHEMA_VERSION
    assert len(report["loadavg_start"]) == 3 and all(_finite(x) for x in report["loadavg_start"])
    assert _finite(report["import"]["median_s"]) and report["import"]["median_s"] > 0
    assert _finite(report["peak_rss_mb"]) and report["peak_rss_mb"] > 10
    local = report["local"]
    assert [s["n"] for s in local["sizes"]] == [150, 400]
    for s in local["sizes"]:
        assert _finite(s["ingest_upsert_per_s"]) and s["ingest_upsert_per_s"] > 0
        assert s["target_in_candidates"] > 0.5  # queries find the memory they were aimed at
        for key in (
            "numpy_floor",
            "numpy_floor_einsum",
            "numpy_floor_fused",
            "numpy_floor_fused_einsum",
            "store_search",
            "recall",
            "recall_touch",
            "build_context",
        ):
            st = s["latency"][key]
            assert st["n"] == 6
            assert all(_finite(st[p]) and st[p] > 0 for p in ("p50_ms", "p95_ms", "p99_ms"))
            assert st["p50_ms"] <= st["p95_ms"] <= st["p99_ms"] <= st["max_ms"]
    assert local["sizes"][-1]["profile_store_search"]["top_own_time"]
    rm = local["remember_many"]
    assert rm["items"] == 40 and rm["per_s"] > 0 and rm["actions"].get("added", 0) >= 1
    runs = local["concurrency"]["runs"]
    assert [r["threads"] for r in runs] == [1, 2]
    assert all(r["calls"] > 0 and r["qps"] > 0 and not r["errors"] for r in runs)
    assert report["weaviate"] is None
    assert report["projection"] == {"skipped": "no Weaviate measurements"}
    json.dumps(report, allow_nan=False)


def test_targets_have_status(report: dict[str, Any]) -> None:
    targets = check_targets(report)
    assert {t["status"] for t in targets} <= {"met", "missed", "not measured", "informational"}
    imp = next(t for t in targets if t["target"].startswith("import"))
    assert imp["status"] in ("met", "missed") and _finite(imp["figure"])
    assert any(t["status"] == "not measured" and "Weaviate" in t["target"] for t in targets)


def test_100k_targets_compare_with_the_fused_floor() -> None:
    def lat(**p95: float) -> dict[str, Any]:
        return {k: {"p95_ms": v} for k, v in p95.items()}

    size = {
        "n": 100_000,
        "ingest_upsert_per_s": 9000.0,
        "latency": lat(
            numpy_floor=8.0,
            numpy_floor_einsum=10.0,
            numpy_floor_fused=12.0,
            numpy_floor_fused_einsum=11.0,
            store_search=16.0,
            recall=17.0,
        ),
    }
    rows = [t for t in check_targets({"local": {"sizes": [size]}}) if "at 100k" in t["target"]]
    assert [(round(t["figure"], 4), t["limit"], t["status"]) for t in rows] == [
        (round(16 / 11, 4), 1.5, "met"),  # the faster fused floor (einsum here)
        (round(17 / 11, 4), 1.5, "missed"),
        (2.0, None, "informational"),  # the vector-only floor, @ here
    ]
    assert "fused numpy floor" in rows[0]["target"] and "vector-only" in rows[2]["target"]


def test_projection_from_weaviate_figures() -> None:
    lat = {"store_search": {"p95_ms": 9.0}}
    fake = {
        "weaviate": {
            "sizes": [
                {
                    "n": 1000,
                    "tenants": 4,
                    "disk_bytes_per_memory": 5000.0,
                    "server_rss_mb_before": 100.0,
                    "server_rss_mb_after": 120.0,
                    "server_cpu_ms_per_query": 2.0,
                    "latency": lat,
                }
            ]
        }
    }
    p = project_cluster(fake)
    assert p["memories_total"] == 1_000_000_000
    assert p["disk_one_copy_tb"] == pytest.approx(5.0)
    assert p["measured_inputs"]["server_rss_mb_per_loaded_tenant"] == pytest.approx(5.0)
    assert p["qps_per_node"] == pytest.approx(16 * 0.7 / 0.002)


def test_projection_prefers_the_cluster_and_counts_per_copy() -> None:
    def size(disk: float, rss_after: float, cpu: float) -> dict[str, Any]:
        return {
            "n": 1000,
            "tenants": 4,
            "disk_bytes_per_memory": disk,
            "server_rss_mb_before": 300.0,
            "server_rss_mb_after": rss_after,
            "server_cpu_ms_per_query": cpu,
            "ingest_upsert_per_s": 900.0,
            "latency": {"store_search": {"p95_ms": 30.0}, "bare_hybrid": {"p95_ms": 25.0}},
        }

    fake: dict[str, Any] = {
        "weaviate": {"sizes": [size(5000.0, 320.0, 2.0)]},
        "weaviate_cluster": {"nodes": 3, "replication_factor": 3, "sizes": [size(15000.0, 360.0, 6.0)]},
    }
    p = project_cluster(fake)
    assert p["measured_inputs"]["source"] == "3-node cluster, RF 3"
    assert p["disk_one_copy_tb"] == pytest.approx(5.0)  # 15,000 B over three copies
    assert p["measured_inputs"]["server_rss_mb_per_loaded_tenant"] == pytest.approx(5.0)  # 60 MB / 4 / 3
    assert p["qps_per_node"] == pytest.approx(16 * 0.7 / 0.006)
    assert p["max_hot_tenants_per_node"] == int(0.75 * 64 * 1024 / 5.0)
    targets = {t["target"]: t for t in check_targets(fake)}
    ratio = targets["WeaviateStore on 3 nodes (RF 3): store.search p95 / bare client hybrid p95 at 10k"]
    assert ratio["status"] == "not measured"  # only 1,000 memories per user were measured
    fake["weaviate_cluster"]["sizes"][0]["n"] = 10_000
    targets = {t["target"]: t for t in check_targets(fake)}
    ratio = targets["WeaviateStore on 3 nodes (RF 3): store.search p95 / bare client hybrid p95 at 10k"]
    assert ratio["figure"] == pytest.approx(1.2) and ratio["status"] == "met"


def test_outputs_and_markdown(report: dict[str, Any], tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("## Analysis\n\nhand-written", encoding="utf-8")
    paths = write_outputs(report, tmp_path / "out", notes_path=notes)
    names = {p.name for p in paths}
    assert {"perf.json", "perf.md"} <= names
    assert json.loads((tmp_path / "out" / "perf.json").read_text())["schema_version"] == SCHEMA_VERSION
    md = (tmp_path / "out" / "perf.md").read_text()
    assert "## Targets" in md and "Load average" in md and "hand-written" in md
    assert "LocalStore recall latency" in md
    assert render_markdown(report).count("| 400 |") >= 5


def test_cli_registers_perf() -> None:
    parser = argparse.ArgumentParser(prog="hybrid-memory")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "perf", "--sizes", "1000,10_000", "--no-weaviate", "--json"])
    assert args.sizes == (1000, 10_000) and args.no_weaviate and args.json
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "perf", "--sizes", "0"])
