"""Compact vectors (issue 20, optional part): what float16 or int8 storage would cost in recall and speed.

Nothing here changes the stores: it measures whether a compact form of the *stored* vectors (the
query stays float32) would be worth building. Store level, as :mod:`benchmarks.fusion_cv`:
:class:`~benchmarks.harness.pure.PureIndex` (the stores' Weaviate-exact maths), the keyword leg
over the search text with the previous turn as context, the vector leg over the memory itself, no
re-rank. The stored vectors are replaced by what a compact store would give back:

* ``float32``: as stored today (4 bytes per dimension);
* ``float16``: rounded to half precision (2 bytes per dimension);
* ``int8``: per-vector symmetric int8 (1 byte per dimension + a float32 scale), de-quantised and
  re-normalised;
* ``int8_rescored``: the ``int8`` vector leg picks the candidates (the store's 100), then their
  float32 vectors re-score them exactly (the "rescoring step": the float32 copy stays on disk and
  only the candidates' rows are read).

For each form and dataset: the headline metric at the default alpha (0.4) and for the vector leg
alone (alpha 1.0, the most sensitive), and the share of questions whose fused top-k ids are
*identical* to float32's. Speed: one query's product against 100k x 384 stored vectors in each
form, as numpy computes it on this machine (numpy has BLAS for float32 only).

    python -m benchmarks.compact_vectors --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fusion_cv import HEADLINE  # noqa: E402
from benchmarks.harness.cache import CachedEmbedder, cached  # noqa: E402
from benchmarks.harness.datasets import Dataset  # noqa: E402
from benchmarks.harness.metrics import Ranking  # noqa: E402
from benchmarks.harness.pure import PureIndex  # noqa: E402
from benchmarks.harness.runner import aggregate, previous_turns, question_metrics  # noqa: E402
from hybrid_memory.ranking import VectorCandidate, candidate_limit, cosine_distance  # noqa: E402
from hybrid_memory.text.analyzer import Analyzer  # noqa: E402

F32 = npt.NDArray[np.float32]
FORMS = ("float32", "float16", "int8", "int8_rescored")
#: Bytes per stored vector of ``dim`` dimensions in each form.
BYTES = {
    "float32": lambda d: 4 * d,
    "float16": lambda d: 2 * d,
    "int8": lambda d: d + 4,
    "int8_rescored": lambda d: d + 4,
}
ALPHAS = (0.4, 1.0)


def compact(vectors: F32, form: str) -> F32:
    """What a store keeping ``vectors`` in ``form`` would compute with (float32, unit rows)."""
    if form == "float32":
        return vectors
    if form == "float16":
        out = vectors.astype(np.float16).astype(np.float32)
    else:
        scale = np.abs(vectors).max(axis=1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        out = (np.round(vectors / scale).astype(np.int8).astype(np.float32) * scale).astype(np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: F32 = (out / norms).astype(np.float32)
    return unit


def _rescored(idx: PureIndex, exact: F32, pos: dict[str, int], query: F32, k: int) -> list[VectorCandidate]:
    """The compact leg's candidates re-scored with their float32 vectors (ties by id, as the leg)."""
    cands = idx.vector_leg(query, k)
    sims = {c.id: float(exact[pos[c.id]] @ query) for c in cands}
    order = sorted(sims, key=lambda i: (-sims[i], i))
    return [VectorCandidate(i, cosine_distance(sims[i])) for i in order]


def run_dataset(ds: Dataset, emb: CachedEmbedder) -> dict[str, Any]:
    """Headline metrics per form and alpha, and the share of top-k lists identical to float32's."""
    an = Analyzer()
    rows: dict[tuple[str, float], list[Any]] = {(f, a): [] for f in FORMS for a in ALPHAS}
    same: dict[tuple[str, float], list[bool]] = {(f, a): [] for f in FORMS for a in ALPHAS}
    k_head = int(HEADLINE[ds.name].rsplit("@", 1)[1])
    for g in ds.groups:
        ids = [d.id for d in g.docs]
        texts = [d.text for d in g.docs]
        exact = np.asarray(emb.embed_documents(texts), dtype=np.float32)
        ctx = [f"{c}\n{t}" if c else t for c, t in zip(previous_turns(g), texts, strict=True)]
        kw_idx = PureIndex(ids, ctx, None, an)
        # One index (tokenised once); the stored vectors are swapped per form.
        vec_idx = PureIndex(ids, [""] * len(ids), exact, an)
        mats = {f: compact(exact, f) for f in ("float32", "float16", "int8")}
        mats["int8_rescored"] = mats["int8"]
        pos = {i: n for n, i in enumerate(ids)}
        qv = np.asarray(emb.embed_queries([q.text for q in g.questions]), dtype=np.float32)
        depth = len(ids) if ds.name == "longmemeval" else min(50, len(ids))
        k = candidate_limit(depth)
        for qi, q in enumerate(g.questions):
            _, kw_leg = kw_idx.legs(q.text, None, limit=depth)
            base: dict[float, list[str]] = {}
            for f in FORMS:
                vec_idx.vectors = mats[f]
                if f == "int8_rescored":
                    vec_leg = _rescored(vec_idx, exact, pos, qv[qi], k)
                else:
                    vec_leg = vec_idx.vector_leg(qv[qi], k)
                for a in ALPHAS:
                    order = PureIndex.fuse((vec_leg, kw_leg), alpha=a, limit=depth)
                    ranking: Ranking = [frozenset({i}) for i in order]
                    rows[(f, a)].append((q, question_metrics(ds.name, g, q, ranking, depth)))
                    if f == "float32":
                        base[a] = order[:k_head]
                    same[(f, a)].append(order[:k_head] == base[a])
    out: dict[str, Any] = {}
    for (f, a), r in rows.items():
        agg = aggregate(r, dataset=ds.name)
        out.setdefault(f, {})[f"alpha_{a:g}"] = {
            "headline": float(agg[HEADLINE[ds.name]]),
            "identical_top_k": round(float(np.mean(same[(f, a)])), 4),
        }
    return out


def speed(n: int = 100_000, dim: int = 384, reps: int = 30) -> dict[str, float]:
    """Median ms of one query's product against ``n`` stored vectors in each form (numpy, this machine)."""
    rng = np.random.default_rng(0)
    m32 = rng.standard_normal((n, dim)).astype(np.float32)
    q = rng.standard_normal(dim).astype(np.float32)
    m16 = m32.astype(np.float16)
    m8 = np.clip(np.round(m32 * 40), -127, 127).astype(np.int8)
    q8 = np.clip(np.round(q * 40), -127, 127).astype(np.int8)
    chunk = 8192

    def f16_chunked() -> object:
        out = np.empty(n, dtype=np.float32)
        for lo in range(0, n, chunk):
            out[lo : lo + chunk] = m16[lo : lo + chunk].astype(np.float32) @ q
        return out

    cases: dict[str, Callable[[], object]] = {
        "float32 (BLAS @)": lambda: m32 @ q,
        "float16 (numpy @)": lambda: m16 @ q.astype(np.float16),
        "float16 -> float32 in 8k-row chunks, then @": f16_chunked,
        "int8 (numpy @, int32 accumulate)": lambda: m8.astype(np.int32, copy=False) @ q8.astype(np.int32),
    }
    out: dict[str, float] = {}
    for name, fn in cases.items():
        fn()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(1000 * (time.perf_counter() - t))
        out[name] = round(float(np.median(ts)), 2)
    return out


def markdown(res: dict[str, Any]) -> str:
    """The report."""
    dim = res["dim"]
    lines = [
        "# Compact vectors: recall and speed of float16 / int8 storage (`python -m benchmarks.compact_vectors`)",
        "",
        (__doc__ or "").split("\n\n")[1].replace("\n", " "),
        "",
        f"Default embedder ({dim}-d), dev files. Load average at the start {res['load']}.",
        "",
        "| form | bytes per vector | dataset | headline (alpha 0.4) | identical top-k (0.4) | vector leg alone | identical top-k (vector) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for f in FORMS:
        for d, metric in HEADLINE.items():
            r = res["scores"][d][f]
            lines.append(
                f"| {f} | {BYTES[f](dim)} | {d} ({metric}) | {r['alpha_0.4']['headline']:.3f} | "
                f"{r['alpha_0.4']['identical_top_k']:.1%} | {r['alpha_1']['headline']:.3f} | {r['alpha_1']['identical_top_k']:.1%} |"
            )
    lines += ["", "One query's product against 100,000 x 384 stored vectors (median of 30, ms):", ""]
    lines += ["| form | ms |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in res["speed"].items()]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from benchmarks.__main__ import load_all
    from hybrid_memory.embeddings import default_embedder

    load = [round(x, 2) for x in os.getloadavg()]
    emb = cached(default_embedder())
    try:
        data = load_all(args.data_dir)
        scores = {d: run_dataset(data[d], emb) for d in HEADLINE}
        dim = int(np.asarray(emb.embed_queries(["dimension"])).shape[1])
    finally:
        emb.close()
    res: dict[str, Any] = {"dim": dim, "load": load, "scores": scores, "speed": speed()}
    text = markdown(res)
    print(text)
    if args.out is not None:
        (args.out / "compact_vectors.json").write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
        (args.out / "compact_vectors.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
