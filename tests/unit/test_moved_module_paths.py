"""The documented module paths keep importing the same public names after the re-partition.

``hybrid_memory.analyzer``, ``.temporal``, ``.privacy`` and ``.tokens`` moved to ``hybrid_memory.text``,
``hybrid_memory.trace`` and ``.metrics`` to ``hybrid_memory.observe``; the old paths are thin re-export
modules. Each must export exactly the new module's ``__all__``, as the
very same objects, so ``from hybrid_memory.tokens import TokenCounter`` and
``from hybrid_memory.text.tokens import TokenCounter`` name one class.
"""

from __future__ import annotations

import importlib

import pytest

MOVED = {
    "hybrid_memory.analyzer": "hybrid_memory.text.analyzer",
    "hybrid_memory.temporal": "hybrid_memory.text.temporal",
    "hybrid_memory.privacy": "hybrid_memory.text.privacy",
    "hybrid_memory.tokens": "hybrid_memory.text.tokens",
    "hybrid_memory.trace": "hybrid_memory.observe.trace",
    "hybrid_memory.metrics": "hybrid_memory.observe.metrics",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_the_old_path_re_exports_every_public_name(old: str, new: str) -> None:
    old_mod = importlib.import_module(old)
    new_mod = importlib.import_module(new)
    assert old_mod.__all__ == new_mod.__all__
    assert new_mod.__all__, new
    for name in new_mod.__all__:
        assert getattr(old_mod, name) is getattr(new_mod, name), f"{old}.{name}"
    assert new in (old_mod.__doc__ or ""), "the re-export says where the code lives now"


def test_loggers_keep_their_public_names() -> None:
    # Operators filter logs by these names (docs: the ``hybrid_memory.tokens`` logger).
    from hybrid_memory.observe import trace
    from hybrid_memory.text import tokens

    assert trace.logger.name == "hybrid_memory.trace"
    assert tokens.logger.name == "hybrid_memory.tokens"
