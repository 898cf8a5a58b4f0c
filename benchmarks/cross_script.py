"""How a memory in the other script is scored: the default rule against its alternatives, on the bilingual probe.

A question in English cannot match a Chinese memory on the keyword leg, and the reverse, so with
relative fusion such a memory would score at most ``alpha`` times its vector score, below any
same-script memory that shares a word with the question. The default re-rank
(``rerank.cross_script``, :mod:`hybrid_memory.read.rerank`) scores it by its vector leg alone: its
cosine rescaled over all candidates. That is what lifts the probe's cross-lingual Recall@1; this
study measures what it costs the same memories asked about in their own language (the probe's
``same_language_questions``), and the alternatives:

* ``off``: ``rerank.cross_script=False`` (relative fusion alone);
* ``all candidates (default)``: the default rule;
* ``other-script candidates``: the cosine rescaled over the other-script candidates alone (the best
  of them gets relevance 1.0 whatever its cosine);
* ``partial credit b``: the fused score the memory would get if its missing keyword leg were ``b``
  times its vector leg, ``alpha * v + (1 - alpha) * b * v`` with ``v`` the default rule's score.

Each for the default model (USE-multilingual), e5-small int8 and the two as one embedder (e5's
share 6/7, alpha 0.5: the ensemble study's best setting). A rule is kept only when it lowers
neither Recall@1 for any embedder and raises one.

Needs the ``local`` and ``e5-onnx`` extras; about 15 seconds. Reproduce::

    python -m benchmarks.cross_script --out benchmarks/results

Writes ``cross_script.json``, ``cross_script.md`` and its section of ``experiments.md``.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.e5_onnx import probe  # noqa: E402
from benchmarks.rerank_cv import study_main  # noqa: E402

SECTION_START = "<!-- cross_script: start -->"
SECTION_END = "<!-- cross_script: end -->"
DEFAULT = "all candidates (default)"
#: The partial credits measured for the missing keyword leg.
CREDITS = (0.5, 0.75, 0.9)
#: The two Recall@1 figures a rule must not lower: cross-lingual, same language.
METRICS = {"recall@1": "cross-lingual R@1", "same_language_recall@1": "same-language R@1"}

#: The re-rank's ``_cross_script_relevance``: (hits, query, similarity) -> relevance by hit index;
#: ``similarity`` is one cosine per hit to use instead of ``vector_similarity`` (``None``: none given).
Rule = Callable[[Sequence[Any], "str | None", "Sequence[float | None] | None"], dict[int, float]]


def other_script_scaled(original: Rule) -> Rule:
    """The other-script memories' cosines rescaled over those memories alone."""

    def rule(
        hits: Sequence[Any], query: str | None, similarity: Sequence[float | None] | None = None
    ) -> dict[int, float]:
        found = original(hits, query, similarity)
        cos = list(similarity) if similarity is not None else [h.vector_similarity for h in hits]
        sims = {i: c for i in found if (c := cos[i]) is not None}
        if not sims:
            return {}
        low, high = min(sims.values()), max(sims.values())
        return {i: (v - low) / (high - low) if high > low else 1.0 for i, v in sims.items()}

    return rule


def partial_credit(original: Rule, credit: float, alpha: float) -> Rule:
    """``alpha * v + (1 - alpha) * credit * v`` for each other-script memory's default score ``v``."""

    def rule(
        hits: Sequence[Any], query: str | None, similarity: Sequence[float | None] | None = None
    ) -> dict[int, float]:
        return {i: alpha * v + (1.0 - alpha) * credit * v for i, v in original(hits, query, similarity).items()}

    return rule


@contextlib.contextmanager
def scoring(rule: Rule | None) -> Iterator[None]:
    """The re-rank scores other-script memories by ``rule`` (None: the default rule)."""
    import hybrid_memory.read.rerank as rerank

    original = rerank._cross_script_relevance
    if rule is not None:
        rerank._cross_script_relevance = rule  # type: ignore[assignment]
    try:
        yield
    finally:
        rerank._cross_script_relevance = original


def rules(alpha: float) -> dict[str, tuple[Rule | None, dict[str, Any]]]:
    """Every rule at ``alpha``: its scoring function (None: the default) and its configuration overrides."""
    import hybrid_memory.read.rerank as rerank

    original = rerank._cross_script_relevance
    out: dict[str, tuple[Rule | None, dict[str, Any]]] = {
        "off": (None, {"rerank": {"cross_script": False}}),
        DEFAULT: (None, {}),
        "other-script candidates": (other_script_scaled(original), {}),
    }
    for credit in CREDITS:
        out[f"partial credit {credit:g}"] = (partial_credit(original, credit, alpha), {})
    return out


def run() -> dict[str, Any]:
    """The probe for every (embedder, rule)."""
    from hybrid_memory.embeddings import ConcatEmbedder, E5SmallEmbedder, UniversalSentenceEncoder

    use, e5 = UniversalSentenceEncoder(), E5SmallEmbedder(backend="onnx")
    embedders: dict[str, tuple[Any, float]] = {
        "USE (default model)": (use, 0.4),
        "e5-small int8": (e5, 0.4),
        "USE + e5 (share 6/7, alpha 0.5)": (ConcatEmbedder([(use, 1.0 / 7.0), (e5, 6.0 / 7.0)]), 0.5),
    }
    out: dict[str, Any] = {}
    for label, (emb, alpha) in embedders.items():
        out[label] = {}
        for name, (rule, overrides) in rules(alpha).items():
            config = {**overrides, "retrieval": {"alpha": alpha}}
            with scoring(rule):
                out[label][name] = probe({f"{label}: {name}": (emb, config)})[f"{label}: {name}"]
    return out


def verdict(res: dict[str, Any], name: str) -> str:
    """Kept only when no embedder's Recall@1 drops on either question set and one rises."""
    if name == DEFAULT:
        return "reference (the default)"
    drops, rises = [], []
    for label, by_rule in res.items():
        for key, title in METRICS.items():
            delta = by_rule[name][key] - by_rule[DEFAULT][key]
            (drops if delta < 0 else rises if delta > 0 else []).append(f"{label} {title} {delta:+.3f}")
    if drops:
        return "not kept: lowers " + "; ".join(drops)
    return "**kept**: raises " + "; ".join(rises) if rises else "not kept: no change"


def _markdown_text(rst: str) -> str:
    """A docstring paragraph as one Markdown line (``code`` and :role:`target` become `code`)."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", rst.replace("\n", " "))
    return text.replace("``", "`")


def markdown(res: dict[str, Any]) -> str:
    """The study's report."""
    names = list(next(iter(res.values())))
    lines = [
        "# Memories in the other script: the re-rank's rule (`python -m benchmarks.cross_script`)",
        "",
        _markdown_text((__doc__ or "").split("\n\n")[1]),
        "",
        "Bilingual probe (`tests/data/bilingual_probe.json`): 24 memories (12 Chinese, 12 English), 27 questions "
        "in the other language than the memory that answers them, 24 asking about the same memories in their own "
        "language, 13 that no memory answers. `recall(k=5)` and `build_context` with default settings otherwise.",
        "",
        "| embedder | rule | cross-lingual R@1 | R@5 | answer injected | block when nothing answers "
        "| same-language R@1 | R@5 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, by_rule in res.items():
        for name in names:
            r = by_rule[name]
            lines.append(
                f"| {label} | {name} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['gold_injected']:.3f} | "
                f"{r['injected_when_nothing_answers']:.3f} | {r['same_language_recall@1']:.3f} | "
                f"{r['same_language_recall@5']:.3f} |"
            )
    lines += ["", "| rule | verdict |", "|---|---|"]
    lines += [f"| {name} | {verdict(res, name)} |" for name in names]
    kept = [name for name in names if verdict(res, name).startswith("**kept**")]
    lines += ["", f"Kept: {', '.join(kept)}." if kept else "Kept: none; the default rule stays."]
    return "\n".join([*lines, ""])


def experiments_section(res: dict[str, Any]) -> str:
    """The short form for ``experiments.md``."""
    names = list(next(iter(res.values())))
    use = next(iter(res))
    rows = [
        f"| `{name}` | {res[use][name]['recall@1']:.3f} | {res[use][name]['same_language_recall@1']:.3f} | "
        f"{verdict(res, name)} |"
        for name in names
    ]
    return "\n".join(
        [
            SECTION_START,
            "## Memories in the other script (bilingual probe)",
            "",
            "How the re-rank scores a memory the keyword leg cannot match; details and the other embedders in "
            "[cross_script.md](cross_script.md). Reproduce: `python -m benchmarks.cross_script`.",
            "",
            f"| rule | cross-lingual R@1 ({use}) | same-language R@1 ({use}) | verdict (all embedders) |",
            "|---|---:|---:|---|",
            *rows,
            SECTION_END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    return study_main(
        argv,
        doc=__doc__,
        name="cross_script",
        run=run,
        markdown=markdown,
        section=experiments_section,
        marks=(SECTION_START, SECTION_END),
        data_dir=False,
    )


if __name__ == "__main__":
    sys.exit(main())
