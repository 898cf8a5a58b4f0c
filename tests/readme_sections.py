"""Read one ``## `` section of the README (the docs tests execute its code blocks)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_section(heading: str) -> str:
    """The text of the README section that starts with ``## {heading}`` (up to the next ``## ``)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 4)
    return text[start : end if end != -1 else len(text)]
