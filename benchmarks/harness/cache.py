"""An on-disk embedding cache so benchmark reruns do not re-embed their corpora.

Vectors live in one SQLite file per model under ``~/.cache/hybrid-memory-bench`` (override with
``HYBRID_MEMORY_BENCH_CACHE``), keyed by the SHA-256 of model name, kind (``doc``/``query``) and
text. :class:`CachedEmbedder` wraps any :class:`~hybrid_memory.embeddings.Embedder` and keeps
its name, dimension and thresholds, so a store bound to the wrapped model accepts it and the
vectors are bit-identical to the model's own.

Example:
    >>> import tempfile
    >>> from hybrid_memory.embeddings import CallableEmbedder
    >>> calls = []
    >>> inner = CallableEmbedder(lambda ts: calls.append(len(ts)) or [[1.0, len(t)] for t in ts], name="toy")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     emb = CachedEmbedder(inner, cache_dir=d)
    ...     _ = emb.embed_documents(["a", "bb"]); _ = emb.embed_documents(["bb", "ccc"])
    ...     emb.close()
    >>> calls
    [2, 1]
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hybrid_memory.embeddings import ConcatEmbedder, Embedder
from hybrid_memory.stores.base import Vector

__all__ = ["CachedConcat", "CachedEmbedder", "cached", "default_cache_dir", "int8_named"]


def default_cache_dir() -> Path:
    """``$HYBRID_MEMORY_BENCH_CACHE`` or ``~/.cache/hybrid-memory-bench``."""
    env = os.environ.get("HYBRID_MEMORY_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "hybrid-memory-bench"


def cached(emb: Any, **options: Any) -> Any:
    """``emb`` behind the disk cache; a :class:`~hybrid_memory.embeddings.ConcatEmbedder` part by part.

    Each part of a concatenation (the default ``use_e5_pair``) keeps its own cache file, so its
    vectors are shared with every other run of that model and no share change re-embeds a corpus;
    the concatenation around them (:class:`CachedConcat`) keeps its shares and ``cross_script``
    part. e5-small on ONNX Runtime is cached as ``<e5 name>+onnx-int8``, apart from the float
    forward's vectors. ``options`` go to :class:`CachedEmbedder`.
    """
    if isinstance(emb, ConcatEmbedder):
        return CachedConcat([(cached(e, **options), s) for e, s in emb.parts], cross_script=emb.cross_script)
    return CachedEmbedder(int8_named(emb), **options)


def int8_named(emb: Any) -> Any:
    """``emb``, renamed ``<e5 name>+onnx-int8`` when it is e5-small on ONNX Runtime (cached and reported apart)."""
    from hybrid_memory.embeddings import E5SmallEmbedder

    if isinstance(emb, E5SmallEmbedder) and emb.backend == "onnx":
        emb.name = f"{E5SmallEmbedder.name}+onnx-int8"
    return emb


class CachedConcat(ConcatEmbedder):
    """A :class:`~hybrid_memory.embeddings.ConcatEmbedder` of :class:`CachedEmbedder` parts (see :func:`cached`).

    Adds what the benchmarks call on a cached model: the batch query call and the counters.
    """

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Embed several queries at once, each part from its cache (the vectors :meth:`embed_query` gives)."""
        blocks = [np.asarray(e.embed_queries(texts)) * k for (e, _), k in zip(self.parts, self._scales, strict=True)]  # type: ignore[attr-defined]
        out: Vector = np.hstack(blocks).astype(np.float32)
        return out

    @property
    def hits(self) -> int:
        """Vectors the parts served from their caches."""
        return sum(int(getattr(e, "hits", 0)) for e, _ in self.parts)

    @property
    def misses(self) -> int:
        """Vectors the parts' models computed."""
        return sum(int(getattr(e, "misses", 0)) for e, _ in self.parts)

    def close(self) -> None:
        """Close the parts' cache files. Idempotent."""
        for e, _ in self.parts:
            close = getattr(e, "close", None)
            if close is not None:
                close()


class CachedEmbedder:
    """Wrap an embedder with a persistent per-text cache.

    Args:
        inner: The embedder whose vectors are cached.
        cache_dir: Where the SQLite files go (created on first use).
        batch_size: Texts embedded per call of the inner model when filling the cache.
        progress: Called with ``(done, total)`` while missing vectors are computed.

    Attributes:
        hits: Vectors served from the cache.
        misses: Vectors computed by the inner model.
    """

    def __init__(
        self,
        inner: Embedder,
        *,
        cache_dir: str | Path | None = None,
        batch_size: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._batch = batch_size
        self._progress = progress
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # -- Embedder protocol -----------------------------------------------------------------
    @property
    def dimension(self) -> int:
        """Vector dimension of the inner model."""
        return self.inner.dimension

    @property
    def dedup_threshold(self) -> float:
        """The inner model's "same memory" cosine."""
        return self.inner.dedup_threshold

    @property
    def stm_threshold(self) -> float:
        """The inner model's short-term duplicate cosine."""
        return self.inner.stm_threshold

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed documents, computing only the ones not cached yet."""
        return self._embed(list(texts), "doc")

    def embed_query(self, text: str) -> Vector:
        """Embed a query (cached separately from documents: some models prefix queries)."""
        out: Vector = self._embed([text], "query")[0]
        return out

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Embed several queries at once (fills the query cache in one pass)."""
        return self._embed(list(texts), "query")

    async def aembed_documents(self, texts: Sequence[str]) -> Vector:
        """Async twin of :meth:`embed_documents`."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> Vector:
        """Async twin of :meth:`embed_query`."""
        return await asyncio.to_thread(self.embed_query, text)

    def close(self) -> None:
        """Close the cache file. Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __getattr__(self, name: str) -> Any:
        # Model-specific extras (e.g. ``min_similarity``) come from the wrapped embedder.
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, cache_dir={str(self._dir)!r})"

    # -- internals -------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._dir.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.name)[:80]
            self._conn = sqlite3.connect(self._dir / f"{slug}.sqlite", check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, v BLOB NOT NULL)")
        return self._conn

    def _key(self, kind: str, text: str) -> str:
        return hashlib.sha256(f"{self.name}\x1f{kind}\x1f{text}".encode()).hexdigest()

    def _embed(self, texts: list[str], kind: str) -> Vector:
        if not texts:
            return self.inner.embed_documents([]) if kind == "doc" else np.zeros((0, 0), np.float32)
        keys = [self._key(kind, t) for t in texts]
        found: dict[str, Vector] = {}
        with self._lock:
            db = self._db()
            uniq = list(dict.fromkeys(keys))
            for i in range(0, len(uniq), 500):
                chunk = uniq[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for key, blob in db.execute(f"SELECT key, v FROM vec WHERE key IN ({marks})", chunk):
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        todo: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found:
                todo.setdefault(key, text)
        self.hits += len(texts) - sum(1 for k in keys if k in todo)
        items = list(todo.items())
        for i in range(0, len(items), self._batch):
            batch = items[i : i + self._batch]
            if kind == "doc":
                vecs = self.inner.embed_documents([t for _, t in batch])
            else:
                vecs = np.stack([self.inner.embed_query(t) for _, t in batch])
            vecs = np.asarray(vecs, dtype=np.float32)
            with self._lock:
                db = self._db()
                db.executemany(
                    "INSERT OR REPLACE INTO vec (key, v) VALUES (?, ?)",
                    [(k, v.tobytes()) for (k, _), v in zip(batch, vecs, strict=True)],
                )
                db.commit()
            for (k, _), v in zip(batch, vecs, strict=True):
                found[k] = v
            self.misses += len(batch)
            if self._progress is not None:
                self._progress(min(i + self._batch, len(items)), len(items))
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)
