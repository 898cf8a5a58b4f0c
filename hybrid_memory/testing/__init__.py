"""Test and example helpers that are real, small and fast.

:class:`HashingEmbedder` is a deterministic feature-hashing embedder over the analyzer's tokens
(signed hashing trick, two buckets per token). It is lexical, not semantic, but it is a genuine embedding: texts that
share words (or Chinese characters) get high cosine similarity. It needs no model, so docs and
unit tests can run in milliseconds.

:mod:`hybrid_memory.testing.store_contract` is the store contract as a pytest suite (import it
from a test module; it needs pytest): a storage backend subclasses its ``StoreContract``.

Example:
    >>> e = HashingEmbedder(dim=64)
    >>> v = e.embed_documents(["green tea", "green tea please", "stock market"])
    >>> bool(v[0] @ v[1] > v[0] @ v[2])
    True
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from hybrid_memory.embeddings import _BaseEmbedder
from hybrid_memory.text.analyzer import ENGLISH_STOPWORDS, Analyzer

__all__ = ["HashingEmbedder"]


class HashingEmbedder(_BaseEmbedder):
    """Deterministic signed feature hashing of analyzer tokens into ``dim`` buckets.

    Args:
        dim: Output dimension.
        analyzer: Tokeniser (default: ``Analyzer(stem=False, stopwords=ENGLISH_STOPWORDS)``).
    """

    def __init__(self, dim: int = 256, *, analyzer: Analyzer | None = None) -> None:
        super().__init__()
        self._dim = dim
        # A fixed tokenisation (no stemming, Weaviate's stopwords) keeps these vectors stable
        # when the library's analyzer defaults are tuned.
        self._analyzer = analyzer if analyzer is not None else Analyzer(stem=False, stopwords=ENGLISH_STOPWORDS)
        self.name = f"hashing-{dim}"
        self._dedup = 0.92
        self._stm = 0.8
        self.min_similarity = 0.15

    def _row(self, text: str) -> Any:
        v = np.zeros(self._dim or 1, dtype=np.float32)
        toks = self._analyzer.query_tokens(text) or self._analyzer.index_tokens(text) or [text]
        for tok in toks:
            digest = hashlib.blake2b(tok.encode("utf-8"), digest_size=16).digest()
            for half in (digest[:8], digest[8:]):  # two buckets per token: collisions need both
                h = int.from_bytes(half, "little")
                v[h % len(v)] += 1.0 if (h >> 63) & 1 else -1.0
        if not np.any(v):
            v[0] = 1.0
        return v

    def _raw_documents(self, texts: list[str]) -> Any:
        return np.stack([self._row(t) for t in texts])
