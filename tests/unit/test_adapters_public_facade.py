"""The adapters reach the core only through its public facade (architecture §10: policies once, at the door).

Every attribute an adapter reads on its ``HybridMemory`` (``self.memory.X``, or a local ``memory``
/ ``core`` / ``mem``) must be a public member of the class (a method or a documented property) or
its ``config``; the writer, the store and private members are the core's business, so nothing an
adapter does can go around validation, redaction or the forget epoch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybrid_memory import HybridMemory

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("langchain_hybrid_memory", "llamaindex_hybrid_memory")
_CORE_NAMES = frozenset({"memory", "core", "mem"})

#: The facade's public members: methods and properties of the class, and its settings.
PUBLIC = frozenset({name for name in vars(HybridMemory) if not name.startswith("_")} | {"config"})


def _is_core(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _CORE_NAMES
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "memory"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def core_reaches(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, attribute)`` of every attribute read on the core in one source file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and _is_core(node.value):
            yield node.lineno, node.attr


@pytest.mark.parametrize("package", PACKAGES)
def test_adapters_use_only_public_facade_members(package: str) -> None:
    reaches = {
        f"{path.relative_to(ROOT)}:{line}: .{attr}": attr
        for path in sorted((ROOT / package).glob("*.py"))
        for line, attr in core_reaches(path)
    }
    assert {"build_context", "add_turn"} <= set(reaches.values())  # the scan sees the adapters' calls
    assert sorted(where for where, attr in reaches.items() if attr not in PUBLIC) == []


def test_the_members_adapters_need_are_public_and_read_only() -> None:
    mem = HybridMemory()
    try:
        assert {"now", "fuser", "counter", "config"} <= PUBLIC
        assert mem.fuser.counter is mem.counter
        for name in ("fuser", "counter"):
            with pytest.raises(AttributeError):
                setattr(mem, name, None)
    finally:
        mem.close()
