"""Quality benchmark harness: dataset loaders, retrieval metrics, runner and CLI.

``hybrid-memory bench {locomo,longmemeval,memorybank}`` scores a dataset file in its original
format by the protocols in ``docs/models-and-data.md``. Nothing here is imported by the core
library; the data files are never shipped (LoCoMo is CC BY-NC).

Example:
    >>> from hybrid_memory.bench.metrics import recall_at_k
    >>> recall_at_k([{"a"}, {"b"}, {"c"}], {"b", "z"}, 2)
    0.5
"""

from __future__ import annotations

__all__: list[str] = []
