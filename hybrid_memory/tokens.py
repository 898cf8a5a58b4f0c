"""Re-exports :mod:`hybrid_memory.text.tokens` (token counting), where the code lives now.

Kept so that ``hybrid_memory.tokens`` keeps importing the same public names.
"""

from __future__ import annotations

from hybrid_memory.text.tokens import (
    APPROX,
    TokenCounter,
    count_tokens,
    tiktoken_cache_dir,
)

__all__ = [
    "APPROX",
    "TokenCounter",
    "count_tokens",
    "tiktoken_cache_dir",
]
