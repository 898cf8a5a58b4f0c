"""Every documentation path the project mentions resolves to a file in the repository.

Scanned: the string literals of the Python code (packages, benchmarks, tests), the help and description
of every CLI option and sub-command, the markdown and code cells of the notebooks, ``README.md`` and the
markdown under ``docs/`` and ``benchmarks/``. Two kinds of reference are checked (anchors and queries
stripped):

* a ``docs/...`` path anywhere in that text, resolved from the repository root;
* a relative markdown link ``[text](target)`` or image ``![alt](target)``, resolved from the folder of the
  file that contains it (from the repository root for Python docstrings and CLI help). In Python only
  docstrings are read for links: other string literals are regular expressions or the text of generated
  reports, whose links are checked in the reports themselves (``benchmarks/results/*.md``).

A reference to a file that does not exist fails the test, with every missing reference and where it is.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: ``docs/...`` not preceded by a path character (``../shared/docs/x.md`` is not a ``docs/`` path of this repo).
DOCS_PATH = re.compile(r"(?<![\w./\\-])docs/[\w./-]*[\w-](?:#[\w.-]*)?")
#: ``[text](target)`` and ``![alt](target)``, target without spaces, optional title.
MD_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//|#)")

PY_ROOTS = ("hybrid_memory", "langchain_hybrid_memory", "llamaindex_hybrid_memory", "benchmarks", "tests")
MD_FILES = ("README.md", "docs/**/*.md", "benchmarks/**/*.md")


def _python_strings(source: str) -> Iterator[tuple[str, bool]]:
    """``(text, is_docstring)`` for the string constants of ``source`` (help texts, f-string parts ...)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        yield source, True  # not plain Python (e.g. a notebook cell with magics): scan the raw text
        return
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, id(node) in docs


def _notebook_texts(path: Path) -> Iterator[tuple[str, str, bool]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for n, cell in enumerate(nb.get("cells", []), start=1):
        source = "".join(cell.get("source", []))
        where = f"{path.relative_to(ROOT)} cell {n}"
        if cell.get("cell_type") == "markdown":
            yield where, source, True
        elif cell.get("cell_type") == "code":
            cleaned = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))
            for text, _ in _python_strings(cleaned):
                yield where, text, True


def _cli_help_texts() -> Iterator[str]:
    from hybrid_memory.cli import build_parser

    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        yield from (t for t in (parser.description, parser.epilog, parser.usage) if t)
        for action in parser._actions:
            if action.help:
                yield str(action.help)
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):  # sub-commands
                pending.extend(choices.values())
                for sub in getattr(action, "_choices_actions", []):
                    if sub.help:
                        yield str(sub.help)


def sources(root: Path = ROOT) -> Iterator[tuple[str, Path, str, bool]]:
    """``(where, base folder for relative links, text, markdown links count)`` for everything scanned."""
    this = Path(__file__).resolve()
    for top in PY_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            if path.resolve() == this or "cassettes" in path.parts:
                continue
            rel = str(path.relative_to(root))
            for text, is_doc in _python_strings(path.read_text(encoding="utf-8")):
                yield rel, root, text, is_doc
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for where, text, links in _notebook_texts(path):
            yield where, path.parent, text, links
    for pattern in MD_FILES:
        for path in sorted(root.glob(pattern)):
            yield str(path.relative_to(root)), path.parent, path.read_text(encoding="utf-8"), True


def _target(ref: str) -> str:
    return ref.split("#", 1)[0].split("?", 1)[0]


def missing_references(items: Iterator[tuple[str, Path, str, bool]], root: Path = ROOT) -> list[str]:
    """``"where: reference"`` for every reference in ``items`` that names no existing file."""
    missing: list[str] = []
    for where, base, text, links in items:
        for ref in DOCS_PATH.findall(text):
            path = _target(ref).rstrip(".")
            if not (root / path).is_file():
                missing.append(f"{where}: {ref}")
        if not links:
            continue
        for ref in MD_LINK.findall(text):
            if _EXTERNAL.match(ref) or not _target(ref):
                continue
            if not (base / _target(ref)).resolve().exists():
                missing.append(f"{where}: ({ref})")
    return sorted(set(missing))


def test_every_docs_path_and_relative_link_resolves() -> None:
    items = list(sources())
    assert len(items) > 1000, "the scan found too little to be looking at the repository"
    missing = missing_references(iter(items))
    assert not missing, "references to files that do not exist:\n" + "\n".join(missing)


def test_cli_help_names_only_existing_docs() -> None:
    pytest.importorskip("tqdm")
    texts = list(_cli_help_texts())
    assert any("docs/operating.md" in t for t in texts), "the --traces help no longer points at the guide"
    missing = missing_references(("hybrid-memory --help", ROOT, t, True) for t in texts)
    assert not missing, "CLI help names files that do not exist:\n" + "\n".join(missing)


def test_the_docs_the_code_names_exist() -> None:
    for name in ("docs/operating.md", "docs/models-and-data.md", "docs/weaviate.md"):
        assert (ROOT / name).is_file(), name


def test_a_missing_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("# here\n", encoding="utf-8")
    (tmp_path / "notebooks").mkdir()
    items = [
        ("a.py", tmp_path, "see docs/here.md#top and docs/gone.md.", True),
        ("README.md", tmp_path, "[ok](docs/here.md) [bad](docs/nope.md#x) ![img](pics/none.png)", True),
        ("nb cell 1", tmp_path / "notebooks", "[up](../docs/here.md) [up-missing](../docs/absent.md)", True),
        ("web", tmp_path, "[site](https://example.com/docs/x.md) [anchor](#section) ../shared/docs/elsewhere.md", True),
    ]
    assert missing_references(iter(items), root=tmp_path) == [
        "README.md: (docs/nope.md#x)",
        "README.md: (pics/none.png)",
        "README.md: docs/nope.md#x",
        "a.py: docs/gone.md",
        "nb cell 1: (../docs/absent.md)",
    ]
