"""The injection gate: which recalled memories are relevant enough to put into the prompt.

A block that is injected for nothing costs tokens (and, with a prefix cache, re-processing);
a relevant memory that is skipped costs the answer. The old gate was one cosine floor per
embedder (or a raw BM25 score, which counts the memory's *search context*, i.e. the turn
before it, so a memory could pass on its neighbour's words). The calibrated gate judges each
hit on evidence of its own:

* its cosine to the query is high (``min_similarity``), or
* the memory's own text holds a good share of the query's terms (``min_term_overlap``, stopwords
  removed, the stores' analyzer) and its cosine is not low (``min_similarity_with_terms``);
* a memory in another language than the query (Chinese vs not) gets ``cross_lingual_bonus``
  added to its cosine, because a multilingual model scores translations lower than paraphrases.

The numbers are measured per embedder (``benchmarks/gate.py``: false skips and false injects on
the three dev datasets and the bilingual probe set) and live on the embedder as
``injection_gate``; an embedder without one keeps the cosine floor.

Example:
    >>> gate = InjectionGate(min_similarity=0.44, min_term_overlap=0.4, min_similarity_with_terms=0.3,
    ...                      cross_lingual_bonus=0.15)
    >>> gate.passes(0.5, 0.0, cross_lingual=False), gate.passes(0.35, 0.5, cross_lingual=False)
    (True, True)
    >>> gate.passes(0.35, 0.0, cross_lingual=False), gate.passes(0.30, 0.0, cross_lingual=True)
    (False, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_memory.text.analyzer import Analyzer

__all__ = ["InjectionGate", "term_overlap"]


def term_overlap(analyzer: Analyzer, query: str, content: str) -> float:
    """Share of the query's terms (stopwords removed) found in ``content``; 0.0 for a query without terms.

    Example:
        >>> term_overlap(Analyzer(), "Which city do I live in?", "I live in Lyon")
        0.5
    """
    terms = set(analyzer.query_tokens(query))
    if not terms:
        return 0.0
    return len(terms & set(analyzer.index_tokens(content))) / len(terms)


@dataclass(frozen=True)
class InjectionGate:
    """A calibrated per-hit relevance rule (see the module docstring).

    Attributes:
        min_similarity: Cosine at or above which a memory is relevant on its own.
        min_term_overlap: Share of the query's terms the memory's text must hold for the
            lower cosine bar.
        min_similarity_with_terms: The lower cosine bar for a memory with that term overlap.
        cross_lingual_bonus: Added to the cosine of a memory in another language than the query.
    """

    min_similarity: float
    min_term_overlap: float
    min_similarity_with_terms: float
    cross_lingual_bonus: float = 0.0

    def passes(self, similarity: float | None, overlap: float, *, cross_lingual: bool) -> bool:
        """Whether a hit with this cosine and term overlap is relevant enough to inject."""
        if similarity is None:
            return False
        s = similarity + (self.cross_lingual_bonus if cross_lingual else 0.0)
        return s >= self.min_similarity or (overlap >= self.min_term_overlap and s >= self.min_similarity_with_terms)
