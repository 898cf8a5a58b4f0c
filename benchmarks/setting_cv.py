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
* ``period_words``: ``retrieval.drop_period_words``, whether the keyword leg searches the question
  without the words of the periods it names (:func:`hybrid_memory.text.temporal.without_periods`),
  against keeping them. Writes ``period_words_cv.{json,md}``.
* ``centre``: ``retrieval.centre_weight``, query centring: the vector leg searches with the query
  vector minus this weight times the mean of the user's active memory vectors (renormalised), which
  demotes the memories that come up for any query (the ``hub_0_beta`` rows of ``experiments.md``
  measure it at store level). Writes ``centre_cv.{json,md}``.

    python -m benchmarks.setting_cv w_time --out benchmarks/results
    python -m benchmarks.setting_cv candidates --out benchmarks/results
    python -m benchmarks.setting_cv half_life --out benchmarks/results
    python -m benchmarks.setting_cv alpha --out benchmarks/results
    python -m benchmarks.setting_cv centre --out benchmarks/results
    python -m benchmarks.setting_cv period_words --out benchmarks/results
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
        reference: The value the study compares with and breaks ties towards (``None``: the
            library default). A study of a feature compares with the feature off, also after
            the feature became the default.
        decision: Why the library default is what it is when the leave-one-dataset-out rule
            cannot decide (rendered at the end of the result file; empty: the rule decides).
    """

    short: str
    dotted: str
    values: tuple[float, ...]
    file: str
    title: str
    what: str
    reference: float | None = None
    decision: str = ""

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
    def reference_name(self) -> str:
        """The label of the value the study compares with (:attr:`reference`, else the default)."""
        return self.name(self.default if self.reference is None else self.reference)

    @property
    def marks(self) -> tuple[str, str]:
        """The markers of the study's section in ``experiments.md``."""
        return f"<!-- {self.file}: start -->", f"<!-- {self.file}: end -->"


#: Why query centring is on although the leave-one-dataset-out rule cannot keep it (issue 17).
CENTRE_DECISION = (
    "**Decision: on, at 0.75.** The rule above compares with centring off and cannot decide it: LongMemEval and "
    "MemoryBank-CN miss 2 and 1 of their dev questions at every weight of the grid, so with LoCoMo held out the "
    "other two tie and the tie goes to the reference; a gain confined to LoCoMo can never be kept by it, however "
    "consistent. A setting whose rule is tied that way is kept when (1) no value lowers a dataset's headline, held out "
    "or not; (2) inside the dataset that moves, chosen on the other folds and scored on each held-out group, it rises "
    "with a sign test p < 0.05; (3) through the API its Recall@1 and nDCG@10 drop on no dataset; (4) the bilingual "
    "probe does not get worse. Centring: (1) holds at every weight; (2) LoCoMo R@10 0.714 -> 0.731 held out, 30 "
    "questions up and 11 down (p = 0.004); (3) at 0.75 Recall@1 / nDCG@10 go LoCoMo 0.349 -> 0.358 / 0.546 -> 0.556, "
    "LongMemEval 0.385 -> 0.407 / 0.811 -> 0.815, MemoryBank-CN 0.616 -> 0.616 / 0.854 -> 0.861, while at 1.0, the "
    "folds' choice, MemoryBank-CN Recall@1 falls to 0.595, so the weight is 0.75, the largest that lowers neither; "
    "(4) the probe is unchanged at every weight (Recall@1 0.926, Recall@5 1.0, the same blocks injected). It costs "
    "LongMemEval turn Recall@5 0.904 -> 0.893 (one question's evidence turns; session recall_all@5 stays 0.957). "
    "The same test keeps none of the earlier studies' LoCoMo-only gains (measured before centring): dense feedback 27 up / 20 down (p = 0.38, "
    "and Recall@1 drops), recency half-life 1 day 8 / 3 (p = 0.23), statement-form queries 25 / 15 (p = 0.15), "
    "re-rank weights 0.6/0.3/0.05/0.05 14 / 7 (p = 0.19); the USE + e5 pair (49 / 13) fails (1) and (4). "
    "These figures are from when centring was decided; rerun with the period's words out of the keyword query "
    "(`retrieval.drop_period_words`, the table above), centring still lowers no headline at any weight, and within "
    "LoCoMo's folds it scores 0.728 held out against 0.715 off, 26 questions up and 12 down (p = 0.034). With the "
    "length prior on (`rerank.w_length` 0.4) it still lowers no headline at any weight and LoCoMo scores 0.742 against "
    "0.730 off, but within LoCoMo's folds the gain is 24 questions up and 15 down (p = 0.20), short of (2). The rule is "
    "for turning a setting on; a default already on stays unless the evidence favours turning it off, and none does "
    "(no dataset scores higher off, Recall@1 and nDCG@10 included)."
)

#: Why the period's words stay out of the keyword query once the length prior is on (issue 17).
PERIOD_DECISION = (
    "**Decision: on (unchanged).** Measured when it was turned on, the rule kept it: LongMemEval 0.957 -> 0.978 and "
    "LoCoMo 0.727 -> 0.728 held out. With the length prior on (`rerank.w_length` 0.4), the table above is split: on "
    "costs LoCoMo 0.744 -> 0.742 held out (within LoCoMo's folds 2 questions up and 2 down), off costs LongMemEval "
    "0.978 -> 0.957 held out (one question, and its dev target of 0.96). Neither direction passes the rule, so the "
    "default stays as it was."
)

#: Why the length prior is on although the leave-one-dataset-out rule cannot keep it (issue 17).
LENGTH_DECISION = (
    "**Decision: on, at 0.4 with a cap of 20 units.** As with query centring, LongMemEval and MemoryBank-CN score the "
    "same at every weight, so with LoCoMo held out the other two tie and the rule cannot decide; the tie rule of the "
    "centring decision keeps it on every count: (1) no weight lowers a headline; (2) LoCoMo's folds choose 0.4 in 5 "
    "of 5 and score 0.742 held out against 0.728 off, 24 questions up and 7 down (p = 0.003); (3) Recall@1 / "
    "nDCG@10 go LoCoMo 0.357 -> 0.386 / 0.556 -> 0.579, LongMemEval 0.407 -> 0.407 / 0.815 -> 0.822, MemoryBank-CN "
    "0.616 -> 0.616 / 0.858 -> 0.858; (4) the bilingual probe is unchanged at every weight (Recall@1 0.926, "
    "Recall@5 1.0, same-language Recall@1 0.958, the same blocks injected; its memories are stated without a search "
    "context, so they lose nothing). It costs LongMemEval turn Recall@5 0.899 -> 0.877 (session recall_all@5 stays "
    "0.978) and lengthens LoCoMo's median block from 247 to 276 tokens. The cap is the one LoCoMo's folds choose "
    "([length_cap_cv.md](length_cap_cv.md)); the unit and the cap's grid were settled on these dev files before "
    "this study (the paragraph below)."
)

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
        Setting(
            "centre",
            "retrieval.centre_weight",
            (0.0, 0.25, 0.5, 0.75, 1.0),
            "centre_cv",
            "Query centring",
            "(the vector leg searches with the query vector minus this weight times the user's mean memory vector)",
            reference=0.0,
            decision=CENTRE_DECISION,
        ),
        Setting(
            "length",
            "rerank.w_length",
            (0.0, 0.05, 0.1, 0.2, 0.3, 0.4),
            "length_cv",
            "The length prior",
            "(minus this weight times 1 - a conversation turn's length prior, min(1, ln(1 + content units) / "
            "ln(1 + 20)); a memory stated without a search context loses nothing)",
            reference=0.0,
            decision=LENGTH_DECISION,
        ),
        Setting(
            "length_cap",
            "rerank.length_cap",
            (8.0, 15.0, 20.0, 30.0, 40.0),
            "length_cap_cv",
            "The length prior's cap",
            "(content units at which a turn's length prior reaches 1, at w_length 0.4)",
        ),
        Setting(
            "period_words",
            "retrieval.drop_period_words",
            (0.0, 1.0),
            "period_words_cv",
            "The period's words out of the keyword query",
            "(1: the keyword leg searches the question without the words that name its time windows, such as "
            "'the past two weeks' or '5月2日'; the windows and the vector leg are unchanged; 0: keeps them)",
            reference=0.0,
            decision=PERIOD_DECISION,
        ),
    )
}


def table(study: Setting) -> dict[str, dict[str, str]]:
    """Every variant as the ``HYBRID_MEMORY_<SECTION>__<FIELD>`` setting it makes."""
    return {study.name(v): {study.field: f"{v:g}"} for v in study.values}


def markdown(
    study: Setting, scores: dict[str, dict[str, float]], cv: dict[str, Any], grouped: dict[str, Any] | None = None
) -> str:
    lines = [
        f"# {study.title} through the API, cross-validated (`python -m benchmarks.setting_cv {study.short}`)",
        "",
        "Default pipeline (`HybridMemory.recall`: alpha 0.4, query centring 0.75, search context, re-rank 0.6/0.2/0.1/0.1, "
        "length prior 0.4), "
        "default "
        f"embedder, `{study.dotted}` {study.what} from the grid; "
        "headline metric per dataset; chosen on two datasets (best mean, ties to "
        + ("the default" if study.reference is None else f"the reference, {study.reference_name}")
        + "), scored on the third.",
        "",
        *cv_tables(scores, cv, study.short, lambda n: _verdict(study, n, scores, cv)),
        *(["", *grouped_lines(grouped)] if grouped else []),
    ]
    kept = [n for n in scores if "**kept**" in _verdict(study, n, scores, cv)]
    lines += ["", conclusion(study, scores, cv, kept), ""]
    if study.decision:
        lines += [study.decision, ""]
    return "\n".join(lines)


def _verdict(study: Setting, name: str, scores: dict[str, dict[str, float]], cv: dict[str, Any]) -> str:
    """The leave-one-dataset-out verdict, or the decision's for the library default it explains."""
    if study.reference is not None and name == study.reference_name and name != study.default_name:
        return "reference (off)" if study.reference == 0 else "reference"
    if study.decision and name == study.default_name and study.reference is not None:
        return "**kept** as the library default by the decision below (the rule above cannot decide)"
    return verdict(name, scores, cv, study.reference_name)


def conclusion(study: Setting, scores: dict[str, dict[str, float]], cv: dict[str, Any], kept: list[str]) -> str:
    """One sentence: what is kept, and where tuning on two datasets loses on the third."""
    if kept:
        return f"Kept: {', '.join(kept)}."
    if study.reference is not None and study.default != study.reference:
        return f"The rule keeps nothing over {study.reference_name}; the library default is {study.default_name}."
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
        *section_rows(scores, cv, list(scores), study.reference_name, lambda n: _verdict(study, n, scores, cv)),
        *(["", study.decision] if study.decision else []),
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
        grouped = within_datasets(per_question, study.reference_name)
    cv = cross_validate(scores, study.reference_name)
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
