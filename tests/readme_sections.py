"""Read one ``## `` section of the README and run its code blocks (the docs tests use both)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def readme_section(heading: str) -> str:
    """The text of the README section that starts with ``## {heading}`` (up to the next ``## ``)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 4)
    return text[start : end if end != -1 else len(text)]


def python_blocks(heading: str) -> list[str]:
    """The ``python`` code blocks of a README section, in order."""
    return PYTHON_BLOCK.findall(readme_section(heading))


def run_section(heading: str, ns: dict[str, Any]) -> dict[str, Any]:
    """Execute every ``python`` block of a README section exactly as written, in order.

    The blocks share ``ns``, which should start empty (a later snippet uses what an earlier one
    defined, as a reader pasting them into one script would); nothing is injected. Any exception
    propagates; ``ns`` keeps what ran, so the caller can clean up. Run it in a temporary
    directory: the snippets write files such as ``memory.db``.
    """
    ns.setdefault("__name__", "__readme__")
    for n, block in enumerate(python_blocks(heading)):
        exec(compile(block, f"{README}#{heading}[{n}]", "exec"), ns)
    return ns
