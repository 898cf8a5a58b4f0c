"""One numeric setting through the API, cross-validated across the three dev datasets (issue 17 part 6).

A study runs the default pipeline of :func:`benchmarks.harness.runner.run_benchmark` (no baselines,
peers or token counts) once per value of one setting, set through the environment
(``HYBRID_MEMORY_<SECTION>__<FIELD>``, which the runner's configuration reads); the value with the
best mean headline on two datasets is scored on the third (ties go to the default). The studies:

* ``w_time``: ``rerank.w_time``. A question that names a period ("5月2日", "last week") also
  searches that period, and the re-rank adds ``w_time`` to the memories created in it
  (:mod:`hybrid_memory.text.temporal`). The default, 0.2, was chosen on the store-level
  experiments (``time_window_w`` in ``experiments.md``). Writes ``time_cv.{json,md}``.
* ``candidates``: ``retrieval.candidates``, how many hybrid hits the re-rank scores per recall
  (each leg of the store search still fetches at least 100, so the fusion's normalisation is the
  same; only the pool the re-rank may reorder changes). Writes ``candidates_cv.{json,md}``.
* ``half_life``: ``rerank.half_life_days``, the half-life of the re-rank's recency term (days since
  a memory's last update or use). Writes ``half_life_cv.{json,md}``.
* ``alpha``: ``retrieval.alpha``, the hybrid search's one global alpha (1.0 = pure vector), on a
  finer grid than the main run's sweep (:mod:`benchmarks.fusion_cv` reads that one) and with each
  question's score kept for the within-dataset folds. Writes ``alpha_cv.{json,md}``.

    python -m benchmarks.setting_cv w_time --out benchmarks/results
    python -m benchmarks.setting_cv candidates --out benchmarks/results
    python -m benchmarks.setting_cv half_life --out benchmarks/results
    python -m benchmarks.setting_cv alpha --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402

from benchmarks.harness.folds import write_questions  # noqa: E402
from benchmarks.rerank_cv import (  # noqa: E402
    cross_validate,
    cv_tables,
    grouped_lines,
    run,
    section_rows,
    update_experiments,
    verdict,
    within_datasets,
)
from hybrid_memory.config import HybridMemoryConfig  # noqa: E402


@dataclass(frozen=True)
class Setting:
    """One setting and the grid a study runs it over.

    Attributes:
        short: The study's name and the label of its variants (``"w_time 0.2"``).
        dotted: The setting's configuration path (``rerank.w_time``); the environment variable
            and the library default follow from it.
        values: The grid (the library default among them).
        file: Result file stem under ``--out``.
        title: What the setting is, for headings (``"The time-window weight"``).
        what: What the setting does, for the result file's preamble.
    """

    short: str
    dotted: str
    values: tuple[float, ...]
    file: str
    title: str
    what: str

    @property
    def section(self) -> str:
        """The configuration section as the environment spells it (``RERANK``)."""
        return self.dotted.split(".")[0].upper()

    @property
    def field(self) -> str:
        """The setting as the environment spells it (``W_TIME``)."""
        return self.dotted.split(".")[1].upper()

    @property
    def default(self) -> float:
        """The library default (the field's declared default, whatever the environment says)."""
        section, field = self.dotted.split(".")
        model = HybridMemoryConfig.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        return float(model.model_fields[field].default)

    def name(self, value: float) -> str:
        """The variant's label: ``"<short> <value>"``, with ``" (default)"`` for the library default."""
        return f"{self.short} {value:g}" + (" (default)" if value == self.default else "")

    @property
    def default_name(self) -> str:
        return self.name(self.default)

    @property
    def marks(self) -> tuple[str, str]:
        """The markers of the study's section in ``experiments.md``."""
        return f"<!-- {self.file}: start -->", f"<!-- {self.file}: end -->"


STUDIES = {
    s.short: s
    for s in (
        Setting(
            "w_time",
            "rerank.w_time",
            (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0),
            "time_cv",
            "The time-window weight",
            "(added to memories created in a period the question names)",
        ),
        Setting(
            "candidates",
            "retrieval.candidates",
            (10, 15, 20, 30, 50, 100),
            "candidates_cv",
            "The re-ranked candidates",
            "(hybrid hits the re-rank scores per recall; each leg still fetches at least 100)",
        ),
        Setting(
            "half_life",
            "rerank.half_life_days",
            (1.0, 3.0, 7.0, 14.0, 30.0, 90.0),
            "half_life_cv",
            "The recency half-life",
            "(recency = 0.5 ** (days since the last update or use / half-life), weight 0.1)",
        ),
        Setting(
            "alpha",
            "retrieval.alpha",
            (0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.75, 0.9, 1.0),
            "alpha_cv",
            "One global alpha",
            "(the hybrid search's weight of the vector leg: 1.0 = pure vector, 0.0 = pure BM25)",
        ),
    )
}


def table(study: Setting) -> dict[str, dict[str, str]]:
    """Every variant as the ``HYBRID_MEMORY_<SECTION>__<FIELD>`` setting it makes."""
    return {study.name(v): {study.field: f"{v:g}"} for v in study.values}


def markdown(
    study: Setting, scores: dict[str, dict[str, float]], cv: dict[str, Any], grouped: dict[str, Any] | None = None
) -> str:
    default = study.default_name
    lines = [
        f"# {study.title} through the API, cross-validated (`python -m benchmarks.setting_cv {study.short}`)",
        "",
        "Default pipeline (`HybridMemory.recall`: alpha 0.4, search context, re-rank 0.6/0.2/0.1/0.1), default "
        f"embedder, `{study.dotted}` {study.what} from the grid; "
        "headline metric per dataset; chosen on two datasets (best mean, ties to the default), scored on the third.",
        "",
        *cv_tables(scores, cv, study.short, lambda n: verdict(n, scores, cv, default)),
        *(["", *grouped_lines(grouped)] if grouped else []),
    ]
    kept = [n for n in scores if "**kept**" in verdict(n, scores, cv, default)]
    lines += ["", conclusion(study, scores, cv, kept), ""]
    return "\n".join(lines)


def conclusion(study: Setting, scores: dict[str, dict[str, float]], cv: dict[str, Any], kept: list[str]) -> str:
    """One sentence: what is kept, and where tuning on two datasets loses on the third."""
    if kept:
        return f"Kept: {', '.join(kept)}."
    stays = f"Kept: nothing; the default stays ({study.short} {study.default:g})"
    drops = [d for d, c in cv.items() if c["held_out"] < c["default"]]
    if not drops:
        return f"{stays}: no value scores above it on a dataset left out."
    wants = []
    for d in cv:
        top = max(s[d] for s in scores.values())
        best = " / ".join(n.removeprefix(f"{study.short} ") for n, s in scores.items() if s[d] == top)
        wants.append(f"{d} {best}")
    return (
        f"{stays}. Tuned on two datasets, {study.short} loses on the third "
        f"({', '.join(drops)} held out): the datasets want different values (best: {'; '.join(wants)}), so the "
        "dev-tuned default is itself an optimistic estimate."
    )


def experiments_section(study: Setting, scores: dict[str, dict[str, float]], cv: dict[str, Any]) -> str:
    """The rows for experiments.md (the idea measured alone, with its cross-validated fate)."""
    start, end = study.marks
    lines = [
        start,
        f"## {study.title} (through the API, cross-validated)",
        "",
        f"`{study.dotted}` over a grid, the rest of the default pipeline unchanged; chosen on two datasets, scored on "
        f"the third; details in [{study.file}.md]({study.file}.md). "
        f"Reproduce: `python -m benchmarks.setting_cv {study.short}`.",
        "",
        *section_rows(scores, cv, list(scores), study.default_name),
    ]
    return "\n".join([*lines, end])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("study", choices=sorted(STUDIES))
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--render-only", action="store_true", help="rewrite the Markdown from the study's JSON in --out")
    args = p.parse_args(argv)
    study = STUDIES[args.study]
    per_question: dict[str, Any] = {}
    if args.render_only:
        if args.out is None:
            p.error("--render-only needs --out")
        saved = json.loads((args.out / f"{study.file}.json").read_text())
        scores, grouped = saved["scores"], saved.get("grouped_cross_validated")
    else:
        scores = run(
            args.data_dir, table=table(study), keys=(study.field,), section=study.section, per_question=per_question
        )
        grouped = within_datasets(per_question, study.default_name)
    cv = cross_validate(scores, study.default_name)
    text = markdown(study, scores, cv, grouped)
    print(text)
    if args.out is not None:
        result = {"scores": scores, "cross_validated": cv, "grouped_cross_validated": grouped}
        (args.out / f"{study.file}.json").write_text(json.dumps(result, indent=2) + "\n")
        if per_question:
            write_questions(args.out / f"{study.file}_questions.json", per_question)
        (args.out / f"{study.file}.md").write_text(text)
        update_experiments(args.out / "experiments.md", experiments_section(study, scores, cv), *study.marks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
