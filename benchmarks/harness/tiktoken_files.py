"""Exact token counts for the benchmarks and the test suite, from llama-index-core's bundled files.

The library counts tokens exactly only when tiktoken's files are in tiktoken's cache directory
(see :mod:`hybrid_memory.tokens`); it never borrows another package's data. The benchmarks and
the test suite publish and assert exact ``o200k_base`` counts, so their entry points (not the
library) point ``TIKTOKEN_CACHE_DIR`` at the copy llama-index-core ships
(``llama_index/core/_static/tiktoken_cache``: cl100k_base and o200k_base) when that package is
installed and the variable is not already set.

Example:
    >>> import os
    >>> d = bundled_tiktoken_cache()
    >>> d is None or os.path.isdir(d)
    True
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

__all__ = ["bundled_tiktoken_cache", "use_bundled_tiktoken_cache"]


def bundled_tiktoken_cache() -> str | None:
    """llama-index-core's bundled tiktoken cache directory, or ``None`` when it is not installed.

    Nothing is imported: ``llama_index`` is located with ``find_spec`` on the top-level name
    (which, unlike ``find_spec("llama_index.core")``, does not raise when it is missing).
    """
    try:
        spec = find_spec("llama_index")
    except (ImportError, ValueError):  # a broken or stubbed-out entry in sys.modules
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = Path(loc) / "core" / "_static" / "tiktoken_cache"
        if path.is_dir():
            return str(path)
    return None


def use_bundled_tiktoken_cache() -> str | None:
    """Set ``TIKTOKEN_CACHE_DIR`` to :func:`bundled_tiktoken_cache` unless it is already set.

    Call it from an entry point (a benchmark's ``main``, ``pytest_configure``), never at import.

    Returns:
        The ``TIKTOKEN_CACHE_DIR`` in effect afterwards, or ``None`` when it stays unset.
    """
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        bundled = bundled_tiktoken_cache()
        if bundled is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = bundled
    return os.environ.get("TIKTOKEN_CACHE_DIR")
