"""Token files, the ``mcp`` command's argument checks, and the optional-extra guard."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_memory.cli import main
from hybrid_memory.errors import ConfigurationError
from hybrid_memory.mcp.tokens import TokenTable


def test_token_table_accepts_raw_tokens_and_digests(tmp_path: Path) -> None:
    raw = "x" * 16
    f = tmp_path / "t.json"
    f.write_text(json.dumps({raw: "bob", "sha256:" + hashlib.sha256(b"y" * 20).hexdigest().upper(): "李雷"}))
    table = TokenTable.from_file(f)
    assert table.user_for(raw) == "bob"
    assert table.user_for("y" * 20) == "李雷"
    assert table.user_for("x" * 15) is None and table.user_for("") is None
    assert table.users() == ["bob", "李雷"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "must be a JSON object"),
        ("{}", "empty"),
        ("{not json", "not valid JSON"),
        ('{"short": "bob"}', "at least 16"),
        ('{"aaaaaaaaaaaaaaaaaaaa": 5}', "must be a string"),
        ('{"aaaaaaaaaaaaaaaaaaaa": ""}', "bad user id"),
        ('{"aaaaaaaaaaaaaaaaaaaa": "a", "sha256:' + hashlib.sha256(b"a" * 20).hexdigest() + '": "b"}', "two users"),
    ],
)
def test_bad_token_files_are_configuration_errors(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "t.json"
    f.write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        TokenTable.from_file(f)


def test_missing_token_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read the token file"):
        TokenTable.from_file(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mcp", "--store", "{db}"], "needs --user"),
        (["mcp", "--store", "{db}", "--user", "a", "--tokens", "t.json"], "--tokens is for --transport http"),
        (["mcp", "--store", "{db}", "--transport", "http"], "needs bearer tokens"),
        (["mcp", "--store", "{db}", "--transport", "http", "--user", "a"], "--user is for stdio"),
        (["mcp", "--store", "{db}", "--transport", "http", "--tokens", "{missing}"], "cannot read the token file"),
        (["mcp", "--store", "{db}", "--user", "a", "--metrics-port", "65536"], "--metrics-port must be 0..65535"),
        (
            [
                "mcp",
                "--store",
                "{db}",
                "--transport",
                "http",
                "--tokens",
                "{tokens}",
                "--port",
                "9",
                "--metrics-port",
                "9",
            ],
            "--metrics-port 9 is also the MCP server's --port",
        ),
    ],
)
def test_mcp_command_refuses_an_ambiguous_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.delenv("HYBRID_MEMORY_MCP_TOKENS", raising=False)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"t" * 20: "alice"}), encoding="utf-8")
    args = [a.format(db=tmp_path / "m.db", missing=tmp_path / "missing.json", tokens=tokens) for a in argv]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()  # refused before anything was opened


def test_import_hybrid_memory_does_not_import_the_sdk_and_a_missing_extra_names_the_install() -> None:
    code = (
        "import sys\n"
        "import hybrid_memory, hybrid_memory.cli, hybrid_memory.mcp\n"
        "hybrid_memory.cli.build_parser()\n"
        "assert 'mcp' not in sys.modules, 'the SDK was imported'\n"
        # the extra is installed here, so its absence is simulated: an import of 'mcp' fails
        "sys.modules['mcp'] = None\n"
        "from hybrid_memory.errors import MissingDependencyError\n"
        "try:\n"
        "    import hybrid_memory.mcp.server\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'hybrid-memory[mcp]'" in out.stdout
