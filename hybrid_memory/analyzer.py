"""Re-exports :mod:`hybrid_memory.text.analyzer` (the text analyzer shared by every store), where the code lives now.

Kept so that ``hybrid_memory.analyzer`` keeps importing the same public names.
"""

from __future__ import annotations

from hybrid_memory.text.analyzer import (
    CJK_QUERY_STOPWORDS,
    ENGLISH_STOPWORDS,
    QUERY_STOPWORDS,
    Analyzer,
    CjkMode,
    content_units,
    last_words,
    scripts,
)

__all__ = [
    "CJK_QUERY_STOPWORDS",
    "ENGLISH_STOPWORDS",
    "QUERY_STOPWORDS",
    "Analyzer",
    "CjkMode",
    "content_units",
    "last_words",
    "scripts",
]
