"""The time-window weight through the API, cross-validated across the three dev datasets (issue 17 part 6).

A question that names a period ("5月2日", "last week") also searches that period, and the re-rank adds
``rerank.w_time`` to the memories created in it (:mod:`hybrid_memory.temporal`). The default, 0.2, was
chosen on the store-level experiments (``time_window_w`` in ``experiments.md``) without a cross-validated
estimate. Each variant sets ``HYBRID_MEMORY_RERANK__W_TIME`` and runs the default pipeline of
:func:`benchmarks.harness.runner.run_benchmark` (no baselines, peers or token counts); the value with the
best mean headline on two datasets is scored on the third (ties go to the default).

    python -m benchmarks.time_cv --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.rerank_cv import cross_validate, cv_tables, run, section_rows, update_experiments, verdict  # noqa: E402
from hybrid_memory.config import RerankConfig  # noqa: E402

#: The grid of ``rerank.w_time`` values (the default among them).
VALUES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)


def _name(w: float) -> str:
    return f"w_time {w:g}" + (" (default)" if w == RerankConfig().w_time else "")


DEFAULT = _name(RerankConfig().w_time)
SECTION_START = "<!-- time_cv: start -->"
SECTION_END = "<!-- time_cv: end -->"


def table() -> dict[str, dict[str, str]]:
    """Every variant as the ``HYBRID_MEMORY_RERANK__W_TIME`` setting it makes."""
    return {_name(w): {"W_TIME": str(w)} for w in VALUES}


def markdown(scores: dict[str, dict[str, float]], cv: dict[str, Any]) -> str:
    lines = [
        "# The time-window weight through the API, cross-validated (`python -m benchmarks.time_cv`)",
        "",
        "Default pipeline (`HybridMemory.recall`: alpha 0.4, search context, re-rank 0.6/0.2/0.1/0.1), default "
        "embedder, `rerank.w_time` (added to memories created in a period the question names) from the grid; "
        "headline metric per dataset; chosen on two datasets (best mean, ties to the default), scored on the third.",
        "",
        *cv_tables(scores, cv, "w_time", lambda n: verdict(n, scores, cv, DEFAULT)),
    ]
    kept = [n for n in scores if "**kept**" in verdict(n, scores, cv, DEFAULT)]
    lines += ["", conclusion(scores, cv, kept), ""]
    return "\n".join(lines)


def conclusion(scores: dict[str, dict[str, float]], cv: dict[str, Any], kept: list[str]) -> str:
    """One sentence: what is kept, and where tuning on two datasets loses on the third."""
    if kept:
        return f"Kept: {', '.join(kept)}."
    drops = [d for d, c in cv.items() if c["held_out"] < c["default"]]
    if not drops:
        return f"Kept: nothing; the default stays (w_time {RerankConfig().w_time:g}): no value scores above it on a held-out dataset."
    wants = []
    for d in cv:
        top = max(s[d] for s in scores.values())
        wants.append(f"{d} {' / '.join(n.removeprefix('w_time ') for n, s in scores.items() if s[d] == top)}")
    return (
        f"Kept: nothing; the default stays (w_time {RerankConfig().w_time:g}). Tuned on two datasets, w_time loses on the third "
        f"({', '.join(drops)} held out): the datasets want different values (best: {'; '.join(wants)}), so the "
        "dev-tuned default is itself an optimistic estimate."
    )


def experiments_section(scores: dict[str, dict[str, float]], cv: dict[str, Any]) -> str:
    """The rows for experiments.md (the idea measured alone, with its cross-validated fate)."""
    lines = [
        SECTION_START,
        "## The time-window weight (through the API, cross-validated)",
        "",
        "`rerank.w_time` over a grid, the rest of the default pipeline unchanged; chosen on two datasets, scored on "
        "the third; details in [time_cv.md](time_cv.md). Reproduce: `python -m benchmarks.time_cv`.",
        "",
        *section_rows(scores, cv, list(scores), DEFAULT),
    ]
    return "\n".join([*lines, SECTION_END])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    scores = run(args.data_dir, table=table(), keys=("W_TIME",))
    cv = cross_validate(scores, DEFAULT)
    text = markdown(scores, cv)
    print(text)
    if args.out is not None:
        (args.out / "time_cv.json").write_text(json.dumps({"scores": scores, "cross_validated": cv}, indent=2) + "\n")
        (args.out / "time_cv.md").write_text(text)
        update_experiments(args.out / "experiments.md", experiments_section(scores, cv), SECTION_START, SECTION_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
