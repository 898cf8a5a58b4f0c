"""The fused numpy floor of ``bench perf`` returns what ``LocalStore.search`` returns (it is a real floor)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness.perf import _ingest, build_floor_index, floor_query_terms, make_corpus, numpy_floor_fused
from hybrid_memory.ranking import candidate_limit
from hybrid_memory.stores.base import SearchRequest
from hybrid_memory.stores.local import LocalStore


@pytest.mark.parametrize(("alpha", "limit", "einsum"), [(0.4, 20, False), (0.4, 5, True), (0.75, 20, False)])
def test_fused_floor_equals_local_store_search(tmp_path: Path, alpha: float, limit: int, einsum: bool) -> None:
    corpus = make_corpus(700, 12, dim=24, seed=3, data_dir=tmp_path)  # empty dir: synthetic vocabulary
    ids: list[str] = []
    with LocalStore(tmp_path / "s.sqlite") as store:
        _ingest(store, corpus, "u", 700, batch=250, ids=ids)
        index = build_floor_index(corpus.vectors, [store.analyzer.index_tokens(t) for t in corpus.texts], ids)
        # A query repeating a term (idf times its multiplicity) and one no memory matches by keyword.
        queries = [*corpus.query_texts, f"{corpus.texts[5]} {corpus.texts[5].split()[0]}", "zzzunknown"]
        vectors = [*corpus.query_vectors, corpus.query_vectors[0], corpus.query_vectors[1]]
        matched = 0
        for text, vec in zip(queries, vectors, strict=True):
            hits = store.search(SearchRequest(user_id="u", query=text, vector=vec, alpha=alpha, limit=limit))
            terms, dups = floor_query_terms(index, store.analyzer.query_tokens(text))
            rows, scores = numpy_floor_fused(
                index, vec, terms, dups, alpha=alpha, candidates=candidate_limit(limit), limit=limit, einsum=einsum
            )
            assert [ids[r] for r in rows.tolist()] == [h.record.id for h in hits]
            assert scores.tolist() == pytest.approx([h.score for h in hits], abs=1e-6)
            matched += int(terms.size > 0 and any(h.keyword_score for h in hits))
        assert matched >= len(corpus.query_texts)  # the keyword leg took part in every corpus query
        assert dups.size == 0  # the last query has no known term


def test_floor_query_terms_counts_multiplicity() -> None:
    m = np.eye(3, dtype=np.float32)
    index = build_floor_index(m, [["a", "b"], ["b"], []], ["x", "z", "y"])
    terms, dups = floor_query_terms(index, ["b", "c", "b", "a"])
    assert terms.tolist() == [index.vocab["b"], index.vocab["a"]] and dups.tolist() == [2, 1]
    assert index.avgdl == 1.5 and index.id_rank.tolist() == [0, 2, 1]
