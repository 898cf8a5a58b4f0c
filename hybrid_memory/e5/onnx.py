"""multilingual-e5-small's encoder layers on ONNX Runtime, weights in int8: about 3.5x the numpy forward.

:class:`OnnxE5Encoder` is an :class:`~hybrid_memory.e5.encoder.E5Encoder` (same tokenisation,
windows, batching, token-table lookup and mean pooling) whose 12 encoder layers run as one ONNX
Runtime session. The graph is built once per process from the same dequantised weights
(:func:`build_graph`: ONNX Runtime's fused ``Attention``, ``SkipLayerNormalization`` and
``BiasGelu`` operators) and quantised with ``quantize_dynamic`` (int8 weights, activations
quantised per call: the VNNI integer kernels). Building takes a few seconds at first use, in
memory; nothing is written outside a temporary directory.

Measured on this project's 2 cores (``benchmarks/results/e5_onnx.md``): about 140 sentences/s
batched and a query p95 of about 6 ms, against about 50/s and 25-30 ms for the numpy forward; the
vectors agree with the float forward to a cosine of 0.98 or more (mean 0.987), and dense and hybrid
retrieval on the dev files moved within a question or two either way. Install with
``pip install 'hybrid-memory[e5-onnx]'`` (``onnx`` builds the graph, ``onnxruntime`` runs it).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hybrid_memory.e5.encoder import E5Encoder
from hybrid_memory.e5.weights import F32, E5Weights

__all__ = ["OnnxE5Encoder", "build_graph"]


def build_graph(weights: E5Weights) -> Any:
    """The encoder layers as an ONNX model (``onnx.ModelProto``), float32.

    Inputs: ``x`` ``(batch, length, hidden)`` floats (the embedding LayerNorm's output) and ``mask``
    ``(batch, length)`` int32 (1 = a real token). Output: ``out``, the last hidden states.

    Raises:
        ImportError: ``onnx`` is not installed.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

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


class OnnxE5Encoder(E5Encoder):
    """:class:`E5Encoder` with the encoder layers on ONNX Runtime, int8 weights.

    Args:
        weights: Parsed weights (see :func:`hybrid_memory.e5.weights.load_weights`).
        threads: ONNX Runtime intra-op threads (default: its own choice, every core).
        int8: Quantise the weights to int8 (the point of this backend); ``False`` runs the float32
            graph, for comparison.

    Raises:
        ImportError: ``onnx`` or ``onnxruntime`` is not installed.
    """

    def __init__(self, weights: E5Weights, *, threads: int | None = None, int8: bool = True) -> None:
        import onnxruntime as ort

        super().__init__(weights)
        model = _int8_model(weights) if int8 else build_graph(weights).SerializeToString()
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

    def _encoder_layers(self, x: F32, valid: npt.NDArray[np.bool_]) -> F32:
        out: F32 = self._session.run(None, {"x": x, "mask": valid.astype(np.int32)})[0]
        return out
