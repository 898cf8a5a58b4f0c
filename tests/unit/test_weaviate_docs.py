"""docs/weaviate.md shows WeaviateStore calls that need a server; check they are real API calls.

Every ``WeaviateStore(...)``, ``WeaviateStore.connect/embedded(...)`` and store method call in the
page's Python blocks must bind to the actual signature (names of keywords, number of positionals).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "weaviate.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def test_the_page_has_python_examples() -> None:
    assert len(_python_blocks()) >= 4


@pytest.mark.parametrize("block", _python_blocks())
def test_store_calls_bind_to_the_real_signatures(block: str) -> None:
    pytest.importorskip("weaviate", reason="the 'weaviate' extra is not installed")
    from hybrid_memory.stores.weaviate import WeaviateStore

    tree = ast.parse(block.replace("...\n", "pass\n"))
    checked = 0
    for call in _calls(tree):
        func = call.func
        target = None
        if isinstance(func, ast.Name) and func.id == "WeaviateStore":
            target = WeaviateStore.__init__
            positional = [None, *call.args]  # self
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner == "WeaviateStore" or (owner == "store" and hasattr(WeaviateStore, func.attr)):
                target = getattr(WeaviateStore, func.attr)
                positional = list(call.args) if owner == "WeaviateStore" else [None, *call.args]
        if target is None:
            continue
        sig = inspect.signature(target)
        sig.bind(*positional, **{kw.arg: None for kw in call.keywords if kw.arg is not None})
        checked += 1
    if "WeaviateStore(" in block or "WeaviateStore." in block or "store.ensure_schema" in block:
        assert checked > 0
