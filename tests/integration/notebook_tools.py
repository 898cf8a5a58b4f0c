"""Execute the notebooks, compare their saved outputs with a fresh run, refresh them.

The saved outputs of ``notebooks/*.ipynb`` are what a reader sees on GitHub without running anything,
so they must be what the code prints today. The notebook tests execute each notebook in a fresh kernel
and fail, with a unified diff per cell, when a code cell's fresh outputs differ from the saved ones.

Only truly volatile text is normalised before comparing (:func:`normalise`): durations and latencies,
random uuids and hex ids, temporary paths and memory addresses. Everything else (rankings, counts,
wording) must match exactly, and a decimal number (a score) to within :data:`SCORE_TOLERANCE`
(:func:`same_up_to_numerics`): the default embedder's e5-small runs as an int8 graph on ONNX Runtime, whose
versions differ by Python version (1.23 is the last for Python 3.10) and round a cosine differently in
its third decimal. The notebooks inject clocks (``clock=`` / ``now=``) so that what they print does not
depend on the day they run. Images are compared by kind only
(their pixels depend on the matplotlib and FreeType versions; the numbers plotted are printed too).

Refresh the saved outputs after an intended change (a notebook with its data missing is an error here,
not a skip)::

    python -m tests.integration.notebook_tools refresh                      # every notebook
    python -m tests.integration.notebook_tools refresh 01_quickstart.ipynb  # some of them
    python -m tests.integration.notebook_tools check [NAMES]                # compare only, exit 1 on drift

Run it from the repository root with the environment that has the extras (``.[all,dev]``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

REFRESH_COMMAND = "python -m tests.integration.notebook_tools refresh"

#: (pattern, replacement) applied in order to every text output before comparing.
_VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    # Uuids (any version) and bare 32-hex ids (``uuid4().hex``).
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE), "<uuid>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<uuid>"),
    # Memory addresses in reprs.
    (re.compile(r"\b0x[0-9a-f]{6,16}\b", re.IGNORECASE), "<address>"),
    # Temporary files and folders (the kernel's cell files, mkdtemp folders).
    (re.compile(r"(?:/tmp|/var/folders|[A-Za-z]:\\[^\s'\"]*Temp)[^\s'\",)\]]*"), "<tmp>"),
    # Durations and latencies: "161.939 ms", "in 70.5 s", "2.1s".
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s)\b"), "<duration>"),
)


#: How far a decimal number of a fresh run may be from the saved one (see the module docstring).
SCORE_TOLERANCE = 0.011

_DECIMAL = re.compile(r"(?<![\w.])(-?\d+\.\d+)(?![\w.])")


def same_up_to_numerics(before: str, after: str, tolerance: float = SCORE_TOLERANCE) -> bool:
    r"""Whether two outputs differ only in decimal numbers, each by at most ``tolerance``.

    Example:
        >>> same_up_to_numerics("0.270 = rel 0.08  tea", "0.272 = rel 0.09  tea")
        True
        >>> same_up_to_numerics("0.270  tea\n0.262  run", "0.262  run\n0.270  tea")  # a changed ranking
        False
        >>> same_up_to_numerics("score 0.86", "score 0.88")
        False
    """
    a, b = _DECIMAL.split(before), _DECIMAL.split(after)
    if len(a) != len(b) or a[0::2] != b[0::2]:
        return False
    return all(abs(float(x) - float(y)) <= tolerance for x, y in zip(a[1::2], b[1::2], strict=True))


def normalise(text: str) -> str:
    """``text`` with the volatile parts of a notebook output replaced by placeholders."""
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def render_outputs(cell: Any) -> str:
    """A code cell's outputs as one text, stream chunks merged, in a stable form for diffs.

    Consecutive chunks of one stream are joined without a separator: the kernel sends a print in
    pieces whenever its flush timer fires, so where the pieces break is timing, not content.
    """
    lines: list[str] = []
    stream: str | None = None
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            if stream != out.get("name"):
                stream = out.get("name")
                lines.append(f"[{stream}]\n")
            lines.append(_text(out.get("text", "")))
            continue
        stream = None
        if kind in ("execute_result", "display_data"):
            lines.append(f"[{kind}]\n")
            for mime, data in sorted(out.get("data", {}).items()):
                if mime.startswith("image/"):
                    lines.append(f"<{mime}>\n")
                else:
                    lines.append(f"{mime}: {_text(data)}\n")
        elif kind == "error":
            lines.append(f"[error] {out.get('ename')}: {out.get('evalue')}\n")
        else:
            lines.append(f"[{kind}]\n")
    text = "".join(lines)
    return text if not text or text.endswith("\n") else text + "\n"


def outputs_text(nb: Any) -> str:
    """Every code cell's text outputs (streams merged, ``text/plain`` results), the whole notebook."""
    parts: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(_text(out.get("text", "")))
            elif "text/plain" in out.get("data", {}):
                parts.append(_text(out["data"]["text/plain"]) + "\n")
    return "".join(parts)


def drift(saved: Any, fresh: Any) -> list[str]:
    """Unified diffs, one per code cell whose normalised outputs differ between ``saved`` and ``fresh``."""
    old = [c for c in saved.cells if c.cell_type == "code"]
    new = [c for c in fresh.cells if c.cell_type == "code"]
    if [_text(c.source) for c in old] != [_text(c.source) for c in new]:
        return ["the code cells differ: compare a notebook with an execution of the same notebook"]
    diffs: list[str] = []
    for n, (a, b) in enumerate(zip(old, new, strict=True), start=1):
        before, after = normalise(render_outputs(a)), normalise(render_outputs(b))
        if before == after or same_up_to_numerics(before, after):
            continue
        first = _text(a.source).strip().splitlines()[:1] or [""]
        diff = difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"code cell {n}, saved",
            tofile=f"code cell {n}, fresh run",
        )
        diffs.append(f"code cell {n} ({first[0][:70]!r}):\n{''.join(diff)}")
    return diffs


def drift_message(name: str, diffs: Sequence[str]) -> str:
    """The failure message of a drifted notebook: every diff and the command that refreshes it."""
    return (
        f"{name}: the saved outputs of {len(diffs)} code cell(s) differ from a fresh run "
        f"(volatile parts normalised: durations, uuids, temp paths, memory addresses).\n"
        f"If the new outputs are right, refresh them: {REFRESH_COMMAND} {name}\n\n" + "\n".join(diffs)
    )


def kernel_env(extra_path: Path = ROOT) -> dict[str, str]:
    """The kernel's environment additions: this checkout first on ``PYTHONPATH``, even when not installed,
    and the same token counter as the test suite (exact o200k_base from the bundled tiktoken files), so
    a refresh run by hand and the suite's fresh run count the same tokens.
    """
    from benchmarks.harness.tiktoken_files import bundled_tiktoken_cache

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(extra_path), os.environ.get("PYTHONPATH")]))}
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or bundled_tiktoken_cache()
    if cache is not None:
        env["TIKTOKEN_CACHE_DIR"] = cache
    return env


def execute(path: Path, *, timeout: int = 600) -> Any:
    """A fresh execution of the notebook at ``path``, in its folder, streams coalesced; raises on a cell error.

    The kernel imports this checkout (``PYTHONPATH``); the saved outputs are cleared first.
    """
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    saved_env = {k: os.environ.get(k) for k in kernel_env()}
    os.environ.update(kernel_env())
    try:
        client = nbclient.NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
            coalesce_streams=True,
            record_timing=False,
        )
        client.execute()  # raises CellExecutionError with the failing cell and its traceback
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb


def check(path: Path, fresh: Any) -> list[str]:
    """Diffs between the notebook saved at ``path`` and ``fresh``, an execution of it."""
    import nbformat

    return drift(nbformat.read(path, as_version=4), fresh)


def _select(names: Iterable[str]) -> list[Path]:
    names = list(names)
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = []
    for name in names:
        path = NOTEBOOKS / Path(name).name
        if path.suffix != ".ipynb":
            path = path.with_suffix(".ipynb")
        if not path.is_file():
            raise SystemExit(f"no notebook {path}")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """``refresh`` saves fresh outputs; ``check`` reports drift (exit status 1)."""
    parser = argparse.ArgumentParser(prog="python -m tests.integration.notebook_tools", description=__doc__)
    parser.add_argument("command", choices=("refresh", "check"))
    parser.add_argument("names", nargs="*", help="notebook file names under notebooks/ (default: all)")
    args = parser.parse_args(argv)
    import nbformat

    status = 0
    for path in _select(args.names):
        print(f"executing {path.relative_to(ROOT)} ...", flush=True)
        fresh = execute(path)
        diffs = check(path, fresh)
        if args.command == "refresh":
            nbformat.write(fresh, path)
            print(f"  saved; {len(diffs)} code cell(s) changed" if diffs else "  saved; no change", flush=True)
        elif diffs:
            print(drift_message(path.name, diffs), flush=True)
            status = 1
        else:
            print("  saved outputs match", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
