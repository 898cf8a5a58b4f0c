"""Quality benchmark harness: dataset loaders, retrieval metrics, runner and CLI.

``hybrid-memory bench {locomo,longmemeval,memorybank,perf}`` scores a dataset file in its original
format by the protocols in ``docs/models-and-data.md``. The harness is not part of the installed
package (it imports weaviate, LangChain and LlamaIndex): ``hybrid-memory bench`` imports it from the
checkout that holds the current directory (:mod:`hybrid_memory.cli.bench`), and ``python -m
benchmarks`` uses it for the whole quality benchmark. Nothing here is imported by the core library;
the data files are never shipped (LoCoMo is CC BY-NC).

Example:
    >>> from benchmarks.harness.metrics import recall_at_k
    >>> recall_at_k([{"a"}, {"b"}, {"c"}], {"b", "z"}, 2)
    0.5
"""

from __future__ import annotations

__all__: list[str] = []
