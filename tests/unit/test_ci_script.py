"""``.ci/run`` runs exactly the README's two commands and smoke-tests every main extra."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = ROOT / ".ci" / "run"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason=".ci/run is a bash script")


def readme_bash_block(readme: str) -> list[str]:
    """The lines of the README's first ```bash block."""
    match = re.search(r"^```bash[ \t]*\n(.*?)^```", readme, flags=re.S | re.M)
    assert match is not None, "README.md has no ```bash block"
    return match.group(1).splitlines()


def print_commands(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), "--print-readme-commands"], capture_output=True, text=True, timeout=60)


def test_ci_runs_exactly_the_readme_commands() -> None:
    proc = print_commands(CI_RUN)
    assert proc.returncode == 0, proc.stderr
    commands = proc.stdout.splitlines()
    assert commands == readme_bash_block((ROOT / "README.md").read_text(encoding="utf-8"))
    main, tests = commands
    assert main.endswith("hybrid-memory demo") and '".[local]"' in main
    assert tests.endswith("python -m pytest") and '".[all,dev]"' in tests


def test_ci_refuses_a_readme_block_it_cannot_run(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    script = tmp_path / ".ci" / "run"
    shutil.copy(CI_RUN, script)
    (tmp_path / "README.md").write_text("# x\n\n```bash\necho one\necho two\necho three\n```\n", encoding="utf-8")
    proc = print_commands(script)
    assert proc.returncode == 1 and "exactly two commands" in proc.stderr, proc.stderr


def test_smoke_covers_every_main_extra() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    )
    listed = re.search(r"^SMOKE_EXTRAS=\((.*)\)$", CI_RUN.read_text(encoding="utf-8"), flags=re.M)
    assert listed is not None
    run_extras = listed.group(1).split()
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import smoke
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    assert tuple(run_extras) == smoke.EXTRAS
    # all / dev are the test install; every other extra is smoke-tested alone.
    assert extras - {"all", "dev"} == set(run_extras) - {"base"}
