"""Re-render ``benchmarks/results/perf.md`` and the perf plots from ``perf.json``.

The measurements come from ``hybrid-memory bench perf --out benchmarks/results --notes
benchmarks/perf_notes.md``; this script only re-renders (e.g. after editing the notes).

Usage: ``python -m benchmarks.perf_report [results_dir]``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.harness.perf import render_markdown, write_plots

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    """Render ``perf.md`` and the PNGs in the results folder from its ``perf.json``."""
    out = Path(argv[0]) if argv else HERE / "results"
    report = json.loads((out / "perf.json").read_text(encoding="utf-8"))
    notes_path = HERE / "perf_notes.md"
    notes = notes_path.read_text(encoding="utf-8") if notes_path.is_file() else None
    (out / "perf.md").write_text(render_markdown(report, notes), encoding="utf-8")
    for p in write_plots(report, out):
        print(p)
    print(out / "perf.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
