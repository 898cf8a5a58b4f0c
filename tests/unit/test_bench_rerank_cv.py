"""The re-rank cross-validation's choice and the section it keeps in experiments.md."""

from __future__ import annotations

from pathlib import Path

from benchmarks.rerank_cv import (
    DEFAULT,
    SECTION_END,
    SECTION_START,
    cross_validate,
    experiments_section,
    update_experiments,
    variants,
)


def _scores(**changed: dict[str, float]) -> dict[str, dict[str, float]]:
    base = {"locomo": 0.7, "longmemeval": 0.9, "memorybank": 0.95}
    return {name: {**base, **changed.get(name, {})} for name in variants()}


def test_every_guard_variant_sets_the_default_weights_and_one_guard() -> None:
    v = variants()
    assert "GUARD_MARGIN" not in v[DEFAULT] and "GUARD_GAP" not in v[DEFAULT]
    assert v["default + margin 0.1"] == {**v[DEFAULT], "GUARD_MARGIN": "0.1"}
    assert v["default + gap 0.2"] == {**v[DEFAULT], "GUARD_GAP": "0.2"}


def test_ties_keep_the_default_and_a_guard_is_kept_only_without_a_held_out_drop() -> None:
    tied = _scores()
    assert {c["chosen"] for c in cross_validate(tied).values()} == {DEFAULT}
    assert "same scores as the default" in experiments_section(tied, cross_validate(tied))

    better = _scores(**{"default + gap 0.1": {"locomo": 0.72, "longmemeval": 0.92, "memorybank": 0.96}})
    cv = cross_validate(better)
    assert {c["chosen"] for c in cv.values()} == {"default + gap 0.1"}
    assert "**kept**" in experiments_section(better, cv)

    # Chosen where the held-out dataset does not move: no cross-validated gain.
    locomo_only = _scores(**{"default + gap 0.1": {"locomo": 0.72}})
    cv = cross_validate(locomo_only)
    assert cv["locomo"]["chosen"] == DEFAULT and cv["memorybank"]["chosen"] == "default + gap 0.1"
    assert "no cross-validated gain): not kept" in experiments_section(locomo_only, cv)

    mixed = _scores(**{"default + gap 0.1": {"locomo": 0.75, "memorybank": 0.90}})
    assert "held-out drop on memorybank: not kept" in experiments_section(mixed, cross_validate(mixed))


def test_the_experiments_section_is_replaced_not_repeated(tmp_path: Path) -> None:
    path = tmp_path / "experiments.md"
    path.write_text("# Recall experiments\n\n| a | b |\n", encoding="utf-8")
    scores = _scores()
    section = experiments_section(scores, cross_validate(scores))
    update_experiments(path, section)
    update_experiments(path, section)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Recall experiments\n\n| a | b |\n\n" + SECTION_START)
    assert text.count(SECTION_START) == 1 and text.rstrip().endswith(SECTION_END)
