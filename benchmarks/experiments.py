"""Recall experiments on the dev files (issue 7, item 3): what each idea adds over plain hybrid search.

Every variant ranks with :class:`~benchmarks.harness.pure.PureIndex` (the stores' Weaviate-exact
maths) at the library's default alpha (1.0 = pure vector, 0.0 = pure keyword/BM25), so the numbers
isolate the retrieval idea; the winners are then measured again through ``HybridMemory`` by
``python -m benchmarks --only main``. Variants:

* ``base``: the turn text as stored (LoCoMo ``"speaker: text"``).
* ``ctx_prev_bm25`` / ``ctx_prev_vector`` / ``ctx_prev_both``: contextual text, the previous turn
  of the same session prepended for the keyword leg, the vector leg or both (the memory itself
  is unchanged).
* ``date_text``: the session date appended to the keyword text ("8 May 2023").
* ``neighbour_beta``: neighbour-turn expansion, ``score_i + beta * max(score_{i-1}, score_{i+1})``
  over the fused scores of one session.
* ``session_beta``: session-level aggregation, ``score_i + beta * max(score of its session)``.
* ``speaker_w``: name-aware query analysis, ``+w`` for turns spoken by a person the question names
  (LoCoMo's ``"speaker: text"``; no effect where turns carry no speaker).
* ``time_window``: date-aware query analysis (:mod:`hybrid_memory.temporal`): memories inside
  a time window named by the question get ``+w`` on their fused score.
* ``answer_beta``: answer follow-up, a memory that is one utterance ending in a question (no line
  break, last character ``?``/``？``) passes ``beta`` times its score to the next memory of its
  session (the reply, where the information is).
* ``qdemote_f``: such a question memory's own score times ``f``.
* ``ctx_next_bm25`` / ``ctx_around_bm25``: look-ahead context for the keyword leg, the next turn of the
  session (and the previous one too): what a reply says about the turn before it. A live memory
  would learn its next turn only when that turn arrives, a second write per turn.
* ``ctx_tail_n``: ``ctx_prev_bm25`` with only the end of the previous turn, its last ``n`` words (a
  Han character counts as one word): the part a reply answers, without the rest of a long turn.
* ``mmr_lambda``: maximal marginal relevance over the 20 best (the library's candidate depth): picked
  greedily by ``score - lambda * max cosine to the memories already picked``, so near-duplicates
  leave room for other evidence (a multi-session question needs every session); the rest follow.
* ``ctx_field_k``: the context (the previous turn's last 45 words, ``add_turn``'s cut) as a property of its own,
  the keyword leg searching ``content^k, context`` (Weaviate scores each property as its own BM25 with its own
  avgdl and sums them; its boosts are integers): the memory's own words count ``k`` times its context's.

* ``pairs_tail_n``: ``ctx_tail_n`` with word pairs added to the keyword terms of documents and queries: each two
  Latin words next to each other once stopwords are removed (``support_group``), a term of its own with its own
  IDF, so a question naming a phrase favours memories with the phrase over those with its words apart (a
  sequential-dependence model in one BM25 field; the stores would index the pairs as words).

* ``maxvec_tail_n``: ``ctx_tail_n`` with a second vector per memory, of its context and text together; the vector
  leg scores the better of the two cosines (Weaviate: two named vectors, a multi-target search joined by
  ``minimum`` distance), so a memory is found by what it says or by what it answers, and loses neither.

* ``sentmax_tail_n`` / ``sentmix_tail_n``: ``ctx_tail_n`` with one more vector per sentence of a memory that has
  several (split after ``. ! ?`` and Han sentence marks; pieces under three characters dropped): the vector leg
  scores the memory's whole-text cosine or its best sentence's, whichever is larger (``sentmax``), or their mean
  (``sentmix``), so one sentence that answers is not averaged away by the rest of a long turn (Weaviate: a
  multi-vector property scored by its best vector).

* ``spread_f`` (a last stage): session spread over the 50 best, picked greedily by ``score * f ** (memories of its session
  already picked)``, so the top k reaches more sessions (a question that counts or compares needs each of
  them); the rest follow.

* ``rm3_m_n_w``: keyword pseudo-relevance feedback on ``ctx_tail_45``: the ``n`` best terms of the ``m`` best hits of a
  first search (by fused score times term share times idf; no query words, stopwords or terms of one memory) searched
  with BM25 as a third leg, min-max normalised and added ``w`` times the keyword leg's weight (a second search).

* ``wexp_m_tau_w``: word-vector query expansion on ``ctx_tail_45``: each content word of the question (Latin words of
  three letters or more, stopwords left out) is embedded alone by the default model, and the ``m`` words of the
  user's own memories nearest to it at cosine ``tau`` or more (not the question's own terms) are searched with BM25
  as a third leg, each term weighted by its cosine, min-max normalised and added ``w`` times the keyword leg's weight:
  the keyword leg learns that "activities" may be "pottery" without a second search of the memories' vectors (the
  stores would keep one vector per distinct word of a user; Han text is not expanded).

* ``hub_k_beta``: ``ctx_tail_45`` with the vector leg's cosines lowered by ``beta`` times each memory's mean cosine to
  its ``k`` nearest other memories of the user, centred on the user's mean (a memory near everything the user says,
  a "hub", comes up for every question); ``k`` 0 = to all of them, which is the query minus ``beta`` times the user's
  mean vector (``retrieval.centre_weight`` through the API).

    python -m benchmarks.experiments   # writes benchmarks/results/experiments.{json,md}

Combinations are written ``first+then[+then...]`` (e.g. ``ctx_prev_bm25+time_window_0.3``), the stages
applied left to right.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.cache import CachedEmbedder, cached  # noqa: E402
from benchmarks.harness.datasets import Dataset, Group  # noqa: E402
from benchmarks.harness.metrics import Ranking  # noqa: E402
from benchmarks.harness.pure import PureIndex  # noqa: E402
from benchmarks.harness.runner import aggregate, previous_turns, question_metrics  # noqa: E402
from benchmarks.studies import composite, default_alpha, log, paired  # noqa: E402
from hybrid_memory.embeddings import default_embedder  # noqa: E402
from hybrid_memory.ranking import (  # noqa: E402
    PropertyTokens,
    VectorCandidate,
    bm25_multi_property,
    bm25_scores,
    candidate_limit,
    cosine_distance,
    hybrid_fuse,
    rank_keyword,
)
from hybrid_memory.text.analyzer import Analyzer  # noqa: E402

KEYS = ("recall@1", "recall@5", "recall@10", "ndcg@10")
LME_KEYS = (*KEYS, "session_recall_all@5", "session_recall_all@10")

Scorer = Callable[[Group, int, dict[str, float]], dict[str, float]]


def _date_words(ts: datetime | None) -> str:
    if ts is None:
        return ""
    return f"{ts.day} {ts.strftime('%B')} {ts.year}"


def _prev_texts(g: Group) -> list[str]:
    """``search_text`` of each document with the previous turn of its session as context."""
    return [f"{c}\n{d.text}" if c else d.text for c, d in zip(previous_turns(g), g.docs, strict=True)]


def _next_turns(g: Group) -> list[str]:
    """The next document of each document's session ("" for the last): context only a later write can add."""
    out = [""] * len(g.docs)
    for i, (d, nxt) in enumerate(zip(g.docs, g.docs[1:], strict=False)):
        if d.session_id is not None and nxt.session_id == d.session_id:
            out[i] = nxt.text
    return out


def _lookahead_texts(g: Group, with_prev: bool) -> list[str]:
    """``search_text`` with the next turn of the session as context (and the previous one when ``with_prev``)."""
    prev = previous_turns(g) if with_prev else [""] * len(g.docs)
    return ["\n".join(t for t in (p, d.text, n) if t) for p, d, n in zip(prev, g.docs, _next_turns(g), strict=True)]


def _tail_texts(g: Group, n: int) -> list[str]:
    """``search_text`` with the last ``n`` words of the previous turn as context (``add_turn``'s cut)."""
    return [f"{c}\n{d.text}" if c else d.text for c, d in zip(previous_turns(g, n), g.docs, strict=True)]


class PairAnalyzer(Analyzer):
    """The default analyzer plus word pairs (``pairs_tail_n``): adjacent Latin words of the stopword-free terms."""

    def _pairs(self, text: str) -> list[str]:
        words = super().query_tokens(text)
        return [f"{a}_{b}" for a, b in itertools.pairwise(words) if a.isascii() and b.isascii()]

    def index_tokens(self, text: str) -> list[str]:
        return super().index_tokens(text) + self._pairs(text)

    def query_tokens(self, text: str) -> list[str]:
        return super().query_tokens(text) + self._pairs(text)


def _unit(vecs: Any) -> np.ndarray:
    out = np.array(vecs, dtype=np.float32)
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


def _fused_scores(idx: PureIndex, q: str, v: np.ndarray, alpha: float, depth: int) -> dict[str, float]:
    vec_leg, kw_leg = idx.legs(q, v, limit=depth)
    hits = hybrid_fuse(
        alpha=alpha,
        vector_leg=vec_leg if alpha > 0 else None,
        keyword_leg=kw_leg if alpha < 1 else None,
        limit=depth,
    )
    return {h.id: float(h.score) for h in hits}


def _mix_legs(kw: PureIndex, vec: PureIndex, q: str, v: np.ndarray, alpha: float, depth: int) -> dict[str, float]:
    vec_leg, _ = vec.legs(q, v, limit=depth)
    _, kw_leg = kw.legs(q, v, limit=depth)
    hits = hybrid_fuse(alpha=alpha, vector_leg=vec_leg, keyword_leg=kw_leg, limit=depth)
    return {h.id: float(h.score) for h in hits}


def _fuse_cosines(kw: PureIndex, sims: np.ndarray, q: str, alpha: float, depth: int) -> dict[str, float]:
    """Hybrid scores of ``kw``'s keyword leg with a vector leg of the given cosines (one per memory)."""
    ids = kw.ids
    order = sorted(range(len(ids)), key=lambda i: (-float(sims[i]), ids[i]))[: candidate_limit(depth)]
    vec_leg = [VectorCandidate(ids[i], cosine_distance(float(sims[i]))) for i in order]
    _, kw_leg = kw.legs(q, None, limit=depth)
    hits = hybrid_fuse(alpha=alpha, vector_leg=vec_leg, keyword_leg=kw_leg, limit=depth)
    return {h.id: float(h.score) for h in hits}


def _hub_offsets(unit: np.ndarray, k: int) -> np.ndarray:
    """Each memory's mean cosine to its ``k`` nearest other memories, centred on the group's mean (``hub_k_beta``)."""
    if len(unit) < 2:
        return np.zeros(len(unit), dtype=np.float32)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    if k == 0:  # every memory: its cosine to the group's mean vector
        return (unit @ unit.mean(axis=0)).astype(np.float32)
    k = min(k, len(unit) - 1)
    r = np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1)
    return (r - r.mean()).astype(np.float32)


def _maxvec_scores(
    kw: PureIndex, vecs: tuple[np.ndarray, np.ndarray], q: str, v: np.ndarray, alpha: float, depth: int
) -> dict[str, float]:
    """Hybrid scores with the vector leg on the larger cosine of two vectors per memory (``maxvec_tail_n``)."""
    sims = np.maximum(vecs[0] @ v, vecs[1] @ v)
    return _fuse_cosines(kw, sims, q, alpha, depth)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])|\n+")


def _sentences(text: str) -> list[str]:
    """The sentences of ``text`` (``sentmax``), or none when it has only one."""
    parts = [t.strip() for t in _SENTENCE_END.split(text)]
    parts = [t for t in parts if len(t) >= 3]
    return parts if len(parts) > 1 else []


def _sentence_vectors(emb: CachedEmbedder, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of every sentence of every multi-sentence text, and the index of each one's text."""
    owners: list[int] = []
    flat: list[str] = []
    for i, t in enumerate(texts):
        for piece in _sentences(t):
            owners.append(i)
            flat.append(piece)
    if not flat:
        return np.zeros((0, 1), dtype=np.float32), np.zeros(0, dtype=np.int64)
    return _unit(emb.embed_documents(flat)), np.array(owners, dtype=np.int64)


def _sentmax_scores(
    kw: PureIndex,
    whole: np.ndarray,
    sents: tuple[np.ndarray, np.ndarray],
    q: str,
    v: np.ndarray,
    alpha: float,
    depth: int,
    *,
    mix: bool,
) -> dict[str, float]:
    """Hybrid scores with the vector leg on the whole text's cosine and its best sentence's (``sentmax_tail_n``)."""
    sims = whole @ v
    vecs, owners = sents
    if len(owners):
        best = np.full(len(sims), -np.inf, dtype=np.float32)
        np.maximum.at(best, owners, vecs @ v)
        has = np.isfinite(best)
        sims = sims.copy()
        sims[has] = (sims[has] + best[has]) / 2 if mix else np.maximum(sims[has], best[has])
    return _fuse_cosines(kw, sims, q, alpha, depth)


def _field_scores(
    texts: tuple[list[list[str]], list[list[str]]],
    k: int,
    base: PureIndex,
    q: str,
    v: np.ndarray,
    alpha: float,
    depth: int,
) -> dict[str, float]:
    """Hybrid scores with the keyword leg over two properties, ``content^k, context`` (token lists of both)."""
    vec_leg, _ = base.legs(q, v, limit=depth)
    props = [PropertyTokens(texts[0], float(k)), PropertyTokens(texts[1])]
    kw = bm25_multi_property(base.analyzer.query_tokens(q), props)
    kw_leg = rank_keyword({base.ids[i]: s for i, s in kw.items()})
    hits = hybrid_fuse(alpha=alpha, vector_leg=vec_leg, keyword_leg=kw_leg, limit=depth)
    return {h.id: float(h.score) for h in hits}


def _doc_freq(tokens: Sequence[Sequence[str]]) -> Counter[str]:
    """How many documents hold each term."""
    return Counter(t for toks in tokens for t in set(toks))


def _rm3_scores(
    kw: PureIndex, df: Mapping[str, int], first: dict[str, float], q: str, alpha: float, spec: str
) -> dict[str, float]:
    """Keyword pseudo-relevance feedback (``rm3_m_n_w``): the fused scores ``first`` plus ``w`` times a third leg.

    The third leg is BM25 over ``kw`` (document frequencies ``df``) of the ``n`` best expansion terms of the ``m``
    best hits of ``first`` (each term weighted by the hits' fused scores times its share of the hit's tokens times its
    idf; the query's own terms, query stopwords and terms of a single memory left out), min-max normalised like a
    Weaviate leg and weighted as the keyword leg is.
    """
    m, n, w = spec.split("_")[1:]
    top = sorted(first, key=lambda i: (-first[i], i))[: int(m)]
    pos = {d: i for i, d in enumerate(kw.ids)}
    an = kw.analyzer
    own = set(an.query_tokens(q)) | an.stopwords | an.cjk_stopwords
    weight: dict[str, float] = {}
    n_docs = len(kw.ids)
    for d in top:
        toks = kw.tokens[pos[d]]
        for t in set(toks):
            if t in own or df[t] < 2:
                continue
            weight[t] = weight.get(t, 0.0) + first[d] * toks.count(t) / len(toks) * float(np.log(n_docs / df[t]))
    terms = sorted(weight, key=lambda t: (-weight[t], t))[: int(n)]
    if not terms:
        return first
    exp = {kw.ids[i]: float(s) for i, s in bm25_scores(terms, kw.tokens).items()}
    return _add_leg(first, exp, float(w) * (1 - alpha))


def _add_leg(first: dict[str, float], leg: dict[str, float], weight: float) -> dict[str, float]:
    """``first`` plus ``weight`` times ``leg`` min-max normalised like a Weaviate leg (``first`` when ``leg`` is empty)."""
    if not leg:
        return first
    lo, hi = min(leg.values()), max(leg.values())
    span = hi - lo
    out = dict(first)
    for d, s in leg.items():
        out[d] = out.get(d, 0.0) + weight * ((s - lo) / span if span > 0 else 1.0)
    return out


#: A Latin word as ``wexp`` expands it: three letters or more.
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")


def _latin_words(texts: Sequence[str], stop: frozenset[str] | set[str]) -> list[str]:
    """The distinct lower-cased Latin words of ``texts`` that are not stopwords, sorted."""
    return sorted({w.lower() for t in texts for w in _LATIN_WORD.findall(t)} - set(stop))


class WordVectors:
    """One unit vector per distinct Latin word of a group's memories, for ``wexp`` (word-vector query expansion)."""

    def __init__(self, emb: CachedEmbedder, texts: Sequence[str], kw: PureIndex) -> None:
        self.emb = emb
        self.kw = kw
        an = kw.analyzer
        self.words = _latin_words(texts, an.stopwords)
        self.terms = [an.query_tokens(w) for w in self.words]
        self.unit = _unit(emb.embed_queries(self.words)) if self.words else np.zeros((0, 1), dtype=np.float32)

    def expanded(self, q: str, first: dict[str, float], alpha: float, spec: str) -> dict[str, float]:
        """``first`` plus the expansion leg of ``wexp_m_tau_w`` (see the module docstring)."""
        m, tau, w = spec.split("_")[1:]
        qwords = _latin_words([q], self.kw.analyzer.stopwords)
        if not qwords or not self.words:
            return first
        own = set(self.kw.analyzer.query_tokens(q))
        sims = _unit(self.emb.embed_queries(qwords)) @ self.unit.T
        weight: dict[str, float] = {}
        for row in sims:
            taken = 0
            for j in np.argsort(-row, kind="stable"):
                if row[j] < float(tau) or taken >= int(m):
                    break
                fresh = [t for t in self.terms[j] if t not in own]
                for t in fresh:
                    weight[t] = max(weight.get(t, 0.0), float(row[j]))
                taken += bool(fresh)
        exp: dict[str, float] = {}
        for t, wt in weight.items():
            for i, s in bm25_scores([t], self.kw.tokens).items():
                exp[self.kw.ids[i]] = exp.get(self.kw.ids[i], 0.0) + wt * float(s)
        return _add_leg(first, exp, float(w) * (1 - alpha))


def _neighbour(g: Group, scores: dict[str, float], beta: float) -> dict[str, float]:
    ids = [d.id for d in g.docs]
    sess = [d.session_id for d in g.docs]
    out: dict[str, float] = {}
    for i, did in enumerate(ids):
        nb = 0.0
        for j in (i - 1, i + 1):
            if 0 <= j < len(ids) and sess[j] == sess[i]:
                nb = max(nb, scores.get(ids[j], 0.0))
        s = scores.get(did, 0.0) + beta * nb
        if s > 0:
            out[did] = s
    return out


def _session_boost(g: Group, scores: dict[str, float], beta: float) -> dict[str, float]:
    """Session-level aggregation: every turn gets ``beta`` times the best score of its session."""
    best: dict[str | None, float] = {}
    for d in g.docs:
        best[d.session_id] = max(best.get(d.session_id, 0.0), scores.get(d.id, 0.0))
    out = {d.id: scores.get(d.id, 0.0) + beta * best[d.session_id] for d in g.docs}
    return {i: s for i, s in out.items() if s > 0}


def _speaker_boost(g: Group, q_text: str, scores: dict[str, float], w: float) -> dict[str, float]:
    """Name-aware query analysis: turns spoken by a person the question names get ``+w``."""
    speakers = {d.text.split(":", 1)[0] for d in g.docs if ":" in d.text[:40]}
    named = {s for s in speakers if s and s in q_text}
    if not named:
        return scores
    out = dict(scores)
    for d in g.docs:
        if d.text.split(":", 1)[0] in named:
            out[d.id] = out.get(d.id, 0.0) + w
    return out


def _time_boost(g: Group, q_text: str, q_date: datetime | None, scores: dict[str, float], w: float) -> dict[str, float]:
    from hybrid_memory.text.temporal import find_time_windows

    now = q_date or g.now or datetime.now(timezone.utc)
    windows = find_time_windows(q_text, now)
    if not windows:
        return scores
    out = dict(scores)
    for d in g.docs:
        if d.timestamp is not None and any(wd.start <= d.timestamp < wd.end for wd in windows):
            out[d.id] = out.get(d.id, 0.0) + w
    return out


def _is_question(text: str) -> bool:
    """One utterance (no line break) that ends in a question mark."""
    t = text.rstrip()
    return "\n" not in t and t.endswith(("?", "\uff1f"))


def _answer_follow(g: Group, scores: dict[str, float], beta: float, demote: float) -> dict[str, float]:
    """A question memory passes ``beta`` times its score to the next memory of its session; its own times ``demote``."""
    out = dict(scores)
    for d, nxt in zip(g.docs, g.docs[1:], strict=False):
        s = scores.get(d.id)
        if s is None or not _is_question(d.text):
            continue
        out[d.id] = s * demote
        if beta and d.session_id is not None and nxt.session_id == d.session_id:
            out[nxt.id] = out.get(nxt.id, 0.0) + beta * s
    return out


def _mmr(g: Group, scores: dict[str, float], unit: np.ndarray, lam: float, pool: int = 20) -> dict[str, float]:
    """Maximal marginal relevance over the ``pool`` best: scores that rank the greedy picks first (a last stage)."""
    pos = {d.id: i for i, d in enumerate(g.docs)}
    order = sorted(scores, key=lambda i: (-scores[i], i))
    left, picked = order[:pool], []
    while left:
        sims = unit[[pos[i] for i in left]] @ unit[[pos[i] for i in picked]].T if picked else None
        gain = [scores[i] - (lam * float(sims[n].max()) if sims is not None else 0.0) for n, i in enumerate(left)]
        picked.append(left.pop(int(np.argmax(gain))))
    ranked = picked + order[pool:]
    return {i: float(len(ranked) - r) for r, i in enumerate(ranked)}


def _spread(g: Group, scores: dict[str, float], f: float, pool: int = 50) -> dict[str, float]:
    """Session spread over the ``pool`` best: scores that rank the greedy picks first (a last stage)."""
    session = {d.id: d.session_id for d in g.docs}
    order = sorted(scores, key=lambda i: (-scores[i], i))
    left, picked = order[:pool], []
    seen: dict[str | None, int] = {}
    while left:
        best = max(range(len(left)), key=lambda n: (scores[left[n]] * f ** seen.get(session[left[n]], 0), -n))
        pick = left.pop(best)
        picked.append(pick)
        seen[session[pick]] = seen.get(session[pick], 0) + 1
    ranked = picked + order[pool:]
    return {i: float(len(ranked) - r) for r, i in enumerate(ranked)}


def _stage(
    g: Group, q_text: str, q_date: datetime | None, scores: dict[str, float], stage: str, unit: np.ndarray | None = None
) -> dict[str, float]:
    """Apply one ``+stage`` of a combination to fused scores (``unit``: the documents' unit vectors, for ``mmr``)."""
    value = float(stage.rsplit("_", 1)[1])
    if stage.startswith("mmr_"):
        assert unit is not None
        return _mmr(g, scores, unit, value)
    if stage.startswith("spread_"):
        return _spread(g, scores, value)
    if stage.startswith("session_"):
        return _session_boost(g, scores, value)
    if stage.startswith("speaker_"):
        return _speaker_boost(g, q_text, scores, value)
    if stage.startswith("neighbour_"):
        return _neighbour(g, scores, value)
    if stage.startswith("time_window_"):
        return _time_boost(g, q_text, q_date, scores, value)
    if stage.startswith("answer_"):
        return _answer_follow(g, scores, value, 1.0)
    if stage.startswith("qdemote_"):
        return _answer_follow(g, scores, 0.0, value)
    raise ValueError(stage)


def run_variants(ds: Dataset, emb: CachedEmbedder, variants: Sequence[str], alpha: float) -> dict[str, Any]:
    an = Analyzer()
    depth = 50
    rows: dict[str, list[Any]] = {v: [] for v in variants}
    per_q: dict[str, dict[str, dict[str, float]]] = {v: {} for v in variants}
    for g in ds.groups:
        ids = [d.id for d in g.docs]
        texts = [d.text for d in g.docs]
        vecs = emb.embed_documents(texts)
        unit = _unit(vecs)  # a copy: the index keeps vecs
        base = PureIndex(ids, texts, vecs, an)
        need_ctx = any(v.startswith("ctx_prev") for v in variants)
        ctx_texts = _prev_texts(g) if need_ctx else []
        ctx_vecs = (
            emb.embed_documents(ctx_texts) if any(v in ("ctx_prev_vector", "ctx_prev_both") for v in variants) else None
        )
        ctx_kw = PureIndex(ids, ctx_texts, vecs, an) if need_ctx else None
        firsts = {v.split("+")[0] for v in variants}
        ahead = {
            name: PureIndex(ids, _lookahead_texts(g, name == "ctx_around_bm25"), vecs, an)
            for name in ("ctx_next_bm25", "ctx_around_bm25")
            if name in firsts
        }
        ahead |= {
            name: PureIndex(ids, _tail_texts(g, int(name.rsplit("_", 1)[1])), vecs, an)
            for name in firsts
            if name.startswith("ctx_tail_")
        }
        rm3 = PureIndex(ids, _tail_texts(g, 45), vecs, an) if any(f.startswith("rm3_") for f in firsts) else None
        rm3_df = _doc_freq(rm3.tokens) if rm3 is not None else Counter()
        if any(f.startswith("wexp_") for f in firsts):
            wexp_kw = PureIndex(ids, _tail_texts(g, 45), vecs, an)
            wexp: WordVectors | None = WordVectors(emb, texts, wexp_kw)
        else:
            wexp = None
        ahead |= {
            name: PureIndex(ids, _tail_texts(g, int(name.rsplit("_", 1)[1])), vecs, PairAnalyzer())
            for name in firsts
            if name.startswith("pairs_tail_")
        }
        maxvec = {
            name: (PureIndex(ids, tails, vecs, an), (unit, _unit(emb.embed_documents(tails))))
            for name in firsts
            if name.startswith("maxvec_tail_")
            for tails in [_tail_texts(g, int(name.rsplit("_", 1)[1]))]
        }
        hub_firsts = [f for f in firsts if f.startswith("hub_")]
        hub_kw = PureIndex(ids, _tail_texts(g, 45), vecs, an) if hub_firsts else None
        hub_r = {f: _hub_offsets(unit, int(f.split("_")[1])) for f in hub_firsts}
        sent_firsts = [f for f in firsts if f.startswith(("sentmax_tail_", "sentmix_tail_"))]
        sents = _sentence_vectors(emb, texts) if sent_firsts else None
        sentmax = {name: PureIndex(ids, _tail_texts(g, int(name.rsplit("_", 1)[1])), vecs, an) for name in sent_firsts}
        fields = (
            (base.tokens, [an.index_tokens(c) for c in previous_turns(g, 45)])
            if any(f.startswith("ctx_field_") for f in firsts)
            else None
        )
        ctx_vec = PureIndex(ids, texts, ctx_vecs, an) if ctx_vecs is not None else None
        ctx_both = PureIndex(ids, ctx_texts, ctx_vecs, an) if ctx_vecs is not None else None
        dated = (
            PureIndex(ids, [f"{t} {_date_words(d.timestamp)}" for t, d in zip(texts, g.docs, strict=True)], vecs, an)
            if "date_text" in variants
            else None
        )
        qv = emb.embed_queries([q.text for q in g.questions])
        dep = min(depth, len(ids)) if ds.name != "longmemeval" else len(ids)
        for qi, q in enumerate(g.questions):
            v = qv[qi]
            base_scores = _fused_scores(base, q.text, v, alpha, dep)
            ctx_scores = _mix_legs(ctx_kw, base, q.text, v, alpha, dep) if ctx_kw is not None else {}
            ahead_scores = {n: _mix_legs(ix, base, q.text, v, alpha, dep) for n, ix in ahead.items()}
            ahead_scores |= {n: _maxvec_scores(ix, two, q.text, v, alpha, dep) for n, (ix, two) in maxvec.items()}
            if sents is not None:
                ahead_scores |= {
                    n: _sentmax_scores(ix, unit, sents, q.text, v, alpha, dep, mix=n.startswith("sentmix"))
                    for n, ix in sentmax.items()
                }
            if hub_kw is not None:
                raw = unit @ v
                ahead_scores |= {
                    f: _fuse_cosines(hub_kw, raw - float(f.split("_")[2]) * r, q.text, alpha, dep)
                    for f, r in hub_r.items()
                }
            if rm3 is not None:
                rm3_first = _mix_legs(rm3, base, q.text, v, alpha, dep)  # the default pipeline's first stage
                ahead_scores |= {
                    f: _rm3_scores(rm3, rm3_df, rm3_first, q.text, alpha, f) for f in firsts if f.startswith("rm3_")
                }
            if wexp is not None:
                wexp_first = _mix_legs(wexp.kw, base, q.text, v, alpha, dep)
                ahead_scores |= {
                    f: wexp.expanded(q.text, wexp_first, alpha, f) for f in firsts if f.startswith("wexp_")
                }
            if fields is not None:
                ahead_scores |= {
                    f: _field_scores(fields, int(f.rsplit("_", 1)[1]), base, q.text, v, alpha, dep)
                    for f in firsts
                    if f.startswith("ctx_field_")
                }
            for name in variants:
                first, *stages = name.split("+")
                if stages or first in ahead_scores:
                    sc = ahead_scores.get(first, ctx_scores if first == "ctx_prev_bm25" else base_scores)
                    for stage in stages:
                        sc = _stage(g, q.text, q.date, sc, stage, unit)
                elif name == "base":
                    sc = base_scores
                elif name == "ctx_prev_bm25":
                    sc = ctx_scores
                elif name == "ctx_prev_vector":
                    assert ctx_vec is not None
                    sc = _fused_scores(ctx_vec, q.text, v, alpha, dep)
                elif name == "ctx_prev_both":
                    assert ctx_both is not None
                    sc = _fused_scores(ctx_both, q.text, v, alpha, dep)
                elif name == "date_text":
                    assert dated is not None
                    sc = _fused_scores(dated, q.text, v, alpha, dep)
                else:
                    sc = _stage(g, q.text, q.date, base_scores, name, unit)
                order = sorted(sc, key=lambda i: (-sc[i], i))[:dep]
                ranking: Ranking = [frozenset({i}) for i in order]
                m = question_metrics(ds.name, g, q, ranking, dep)
                rows[name].append((q, m))
                per_q[name][q.id] = m
    keys = LME_KEYS if ds.name == "longmemeval" else KEYS
    out: dict[str, Any] = {}
    for name in variants:
        agg = aggregate(rows[name], dataset=ds.name)
        entry: dict[str, Any] = {k: agg.get(k) for k in keys}
        entry["composite"] = composite(agg)
        if name != "base":
            entry["vs_base"] = paired(per_q["base"], per_q[name], ("recall@5", "recall@10"))
        entry["per_category"] = {c: {k: e.get(k) for k in ("questions", *keys)} for c, e in agg["per_category"].items()}
        out[name] = entry
        log(f"{ds.name} {name}: " + " ".join(f"{k} {entry[k]:.4f}" for k in keys if entry.get(k) is not None))
    return out


VERDICTS = {
    "ctx_prev_bm25": "**kept** (default: `add_turn` records the previous turn as `context`; keyword leg only)",
    "ctx_prev_vector": "lost to ctx_prev_bm25 on MemoryBank-CN; would need a second embedding per memory",
    "ctx_prev_both": "best LoCoMo R@10 but R@1 drops (0.30 → 0.23) and MemoryBank-CN R@5 below ctx_prev_bm25",
    "date_text": "small gains, subsumed by the time windows",
    "neighbour": "helps LoCoMo, hurts MemoryBank-CN once context is on: not kept",
    "time_window": "**kept** (default: `retrieval.time_windows`, `rerank.w_time` 0.2)",
    "session": "mixed (LoCoMo up, MemoryBank-CN and LongMemEval down once context is on): not kept",
    "speaker": "LoCoMo R@1 up, nothing elsewhere; relies on a 'Name: text' convention turns do not have: not kept",
    "answer": "on the default pipeline LoCoMo R@10 0.690 -> 0.713, MemoryBank-CN unchanged (its memories are "
    "exchanges, not single utterances), LongMemEval headline unchanged but turn R@1 0.403 -> 0.376 and nDCG@10 "
    "0.788 -> 0.759 (user questions carry facts there); the rule was written after seeing the data: not built",
    "qdemote": "LoCoMo R@10 +0.025 on the default pipeline, LongMemEval turn R@10 and session all@10 down (user "
    "questions carry facts there): not built",
    "ctx_prev_bm25+time_window_0.2+answer_0.3+qdemote_0.7": "LoCoMo R@10 0.690 -> 0.737 but LongMemEval s-all@5 "
    "0.935 -> 0.913 and turn R@10 0.967 -> 0.905: not built",
    "ctx_next_bm25": "the next turn alone as context: below ctx_prev_bm25 on LoCoMo and MemoryBank-CN; LongMemEval "
    "session all@10 0.957 -> 0.978 but turn R@1 0.403 -> 0.352: not kept",
    "ctx_around_bm25": "previous and next turn: on the default pipeline LoCoMo R@10 0.690 -> 0.696 but R@1 0.295 -> "
    "0.265, MemoryBank-CN R@5 0.980 -> 0.952, LongMemEval session all@10 0.957 -> 0.978 but turn R@1/R@10 down; "
    "would also cost a second write per turn (a memory learns its next turn only later): not kept",
    "ctx_tail": "R@1 and nDCG@10 up on LoCoMo and LongMemEval (20 words: LongMemEval R@1 0.403 -> 0.455), "
    "MemoryBank-CN down below 45 (an exchange's topic words sit at the start of the one before it); through the API "
    "45 words leave the dev files as they were and lift LongMemEval with a live chat's context (the assistant reply) "
    "nDCG@10 0.764 -> 0.821: **kept** at 45 (`writer.context_words`, the `context_cap` section below)",
    "ctx_field": "against the default pipeline (the context's last 45 words in the memory's own property, "
    "`ctx_tail_45+time_window_0.2`) LoCoMo R@10 0.690 -> 0.656 / 0.669 / 0.657 / 0.648 for k 1 / 2 / 3 / 4, "
    "LongMemEval turn R@5 0.900 -> 0.757 / 0.875 / 0.886 / 0.901, MemoryBank-CN R@1 up at k 1 (0.541 -> 0.643) but "
    "R@5 0.980 -> 0.966: a context in its own property gets its own length normalisation, so a short context's words "
    "outweigh the memory's; one property, joined, stays: not built",
    "pairs": "against the default pipeline (`ctx_tail_45+time_window_0.2`) LoCoMo R@10 0.690 -> 0.683, LongMemEval "
    "s-all@5 0.935 -> 0.913 (R@1 up 0.407 -> 0.445, R@5 down 0.900 -> 0.867), MemoryBank-CN unchanged (its words are "
    "Han characters, already bigrams): a rare pair's IDF outweighs the single words a paraphrase shares: not built",
    "maxvec": "against the default pipeline (`ctx_tail_45+time_window_0.2`) LoCoMo R@10 0.690 -> 0.697 but R@1 0.292 "
    "-> 0.265, MemoryBank-CN R@5 0.980 -> 0.986 (one question), LongMemEval s-all@5 unchanged (s-all@10 0.957 -> "
    "0.978) but R@5 0.900 -> 0.867 and nDCG@10 0.794 -> 0.763: a question or two where it helps, for a second vector "
    "per memory and named vectors on Weaviate: not built",
    "rm3": "keyword pseudo-relevance feedback on the default pipeline (m 5 n 10 w 0.3 / m 5 n 10 w 1.0 / m 10 n 10 "
    "w 0.3): LoCoMo R@10 0.690 -> 0.697 / 0.703 / 0.702, MemoryBank-CN R@5 0.980 -> 0.973 / 0.973 / 0.952, "
    "LongMemEval s-all@5 0.935 -> 0.935 / 0.957 / 0.935 but R@5 0.900 -> 0.889 / 0.880 / 0.864; a second search per "
    "question for about +0.01 on LoCoMo and a loss on MemoryBank-CN: not built",
    "wexp": "against the default pipeline (`ctx_tail_45+time_window_0.2`; m 2 tau 0.5 w 0.2 / m 3 tau 0.5 w 0.3 / m 3 "
    "tau 0.5 w 0.6) LoCoMo R@10 0.690 -> 0.699 / 0.703 / 0.699 (multi-hop 0.361 -> 0.368 / 0.381 / 0.375), "
    "MemoryBank-CN unchanged (Han text is not expanded), LongMemEval s-all@5 unchanged (0.935) and R@1 0.407 -> 0.461 "
    "/ 0.450 / 0.439 but R@5 0.900 -> 0.884 / 0.884 / 0.855; only LoCoMo moves, so chosen on the other two it stays "
    "off (no cross-validated gain), for 1,175-1,901 word vectors per LoCoMo user to keep and forget and one more "
    "embedding call per question (2.4 ms p50). Wider (m 5 tau 0.5 w 0.3 / m 8 tau 0.5 w 0.6): LoCoMo 0.698 / 0.699; "
    'at m 8 w 0.6 LongMemEval s-all@5 0.935 -> 0.957 (one question; "baguette", which the "bake" question '
    "misses, is not among the 8: cosine 0.55, 42nd) but turn R@5 0.900 -> 0.851 and nDCG@10 0.794 -> 0.774, so the "
    "five memories a prompt gets are worse: not built",
    "spread": "on the default pipeline (f 0.5 / 0.8) LoCoMo R@10 0.690 -> 0.545 / 0.630, LongMemEval s-all@5 "
    "unchanged (0.935) but turn R@10 0.957 -> 0.799 / 0.918, MemoryBank-CN R@5 0.980 -> 0.878 / 0.980: the evidence "
    "of most questions sits in one session, so spreading pushes it out: not built",
    "sent": "against the default pipeline (`ctx_tail_45+time_window_0.2`) LoCoMo R@10 0.690 -> 0.691 (max) / 0.697 "
    "(mean), R@1 0.292 -> 0.305 / 0.307; MemoryBank-CN R@1 0.541 -> 0.561, R@5 unchanged; LongMemEval s-all@5 "
    "unchanged, but s-all@10 0.957 -> 0.935 (max) and R@5 0.900 -> 0.878 (mean): about five LoCoMo questions for "
    "four to five vectors per memory (one per sentence; a multi-vector index in Weaviate): not built",
    "hub": "against the default pipeline (`ctx_tail_45+time_window_0.2`): the k 10 / 30 neighbourhoods lift LoCoMo "
    "R@10 0.690 -> 0.708-0.713 but cost LongMemEval turn R@5 (0.900 -> 0.837-0.875: the evidence turns of one session "
    "are each other's neighbours); the user's whole mean (k 0) lifts LoCoMo 0.690 -> 0.699 / 0.704 / 0.704 / 0.709 "
    "for beta 0.25 / 0.5 / 0.75 / 1, MemoryBank-CN nDCG@10 up to 0.818 but R@5 0.980 -> 0.959 from 0.75 (one "
    "question; through the API, with the re-rank, it stays 0.986), LongMemEval s-all@5 unchanged (R@5 0.900 -> 0.889 "
    "at 0.5 and 0.75). k 0 is one vector per user and a query vector moved before the search, so it runs on both stores "
    "unchanged: **kept** through the API as `retrieval.centre_weight` 0.75 (the `centre_cv` section below)",
    "mmr": "on the default pipeline (lambda 0.1 / 0.2 / 0.4) LoCoMo R@10 0.690 -> 0.691 / 0.693 / 0.689 and "
    "MemoryBank-CN R@5 0.980 -> 0.986 (one question), but LongMemEval nDCG@10 0.788 -> 0.782 / 0.776 / 0.755, turn "
    "R@10 0.967 -> 0.967 / 0.957 / 0.941 and at 0.4 s-all@5 0.935 -> 0.891 (the evidence turns of one session look "
    "alike): within a question or two where it helps: not built",
}


def _verdict(name: str) -> str:
    first, _, then = name.partition("+")
    if name == "base":
        return "reference"
    if name in VERDICTS:
        return VERDICTS[name]
    if first in ("ctx_next_bm25", "ctx_around_bm25"):
        return VERDICTS[first]
    if "+spread_" in name:
        return VERDICTS["spread"]
    if first.startswith("ctx_tail_"):
        return VERDICTS["ctx_tail"]
    if first.startswith("ctx_field_"):
        return VERDICTS["ctx_field"]
    if first.startswith("pairs_tail_"):
        return VERDICTS["pairs"]
    if first.startswith("maxvec_tail_"):
        return VERDICTS["maxvec"]
    if first.startswith(("sentmax_tail_", "sentmix_tail_")):
        return VERDICTS["sent"]
    if first.startswith("rm3_"):
        return VERDICTS["rm3"]
    if first.startswith("wexp_"):
        return VERDICTS["wexp"]
    if first.startswith("hub_"):
        return VERDICTS["hub"]
    if then:
        key = then.rsplit("+", 1)[-1].rsplit("_", 1)[0]
        if first == "ctx_prev_bm25" and then.startswith("time_window") and "+" not in then:
            if then.endswith("_0.2"):
                return "**the default pipeline** with the whole previous turn (the default keeps its last 45 words)"
            return "within a question of 0.2; 0.2 kept"
        return VERDICTS.get(key, "")
    key = first if first in VERDICTS else first.rsplit("_", 1)[0]
    return VERDICTS.get(key, "")


def render(res: dict[str, Any]) -> str:
    """Markdown tables of one experiments run: every variant, its paired wins/losses, the verdict."""
    md = [
        "# Recall experiments (dev files)",
        "",
        f"Store-exact hybrid search at alpha {res['alpha']} ({res['alpha_note']}), 50 candidates, no re-ranking, "
        "so each idea is measured alone; the kept ones are then measured through `HybridMemory` in "
        "[report.md](report.md). Wins/losses: questions whose R@10 went up/down against `base` (sign test p). "
        f"Reproduce: `python -m benchmarks.experiments` ({res.get('seconds')} s).",
        "",
    ]
    for ds, variants in res["datasets"].items():
        keys = [k for k in next(iter(variants.values())) if k not in ("composite", "vs_base", "per_category")]
        md += [f"## {ds}", "", "| variant | " + " | ".join(keys) + " | R@5 wins/losses | R@10 wins/losses | verdict |"]
        md += ["|---|" + "---:|" * len(keys) + "---|---|---|"]
        for name, e in variants.items():
            cols = []
            for metric in ("recall@5", "recall@10"):
                vs = e.get("vs_base", {}).get(metric)
                p = "p<0.001" if vs and vs["sign_test_p"] < 0.001 else f"p={vs['sign_test_p']:.3f}" if vs else ""
                cols.append(f"{vs['wins']}/{vs['losses']} ({p})" if vs else "-")
            cells = " | ".join("-" if e.get(k) is None else f"{e[k]:.3f}" for k in keys)
            md.append(f"| `{name}` | {cells} | {cols[0]} | {cols[1]} | {_verdict(name)} |")
        md.append("")
    return "\n".join(md)


def write_markdown(path: Path, body: str) -> None:
    """Write ``body``, keeping the sections other studies keep in the file (from its first ``<!--`` marker on)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    kept = old[old.index("<!-- ") :] if "<!-- " in old else ""
    path.write_text(body.rstrip("\n") + "\n" + ("\n" + kept if kept else ""), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    from benchmarks.__main__ import load_all

    p = argparse.ArgumentParser(prog="python -m benchmarks.experiments", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "experiments.json")
    p.add_argument("--render-only", action="store_true", help="rewrite the markdown from the JSON")
    p.add_argument("--datasets", default="locomo,memorybank,longmemeval")
    p.add_argument(
        "--variants",
        default="base,ctx_prev_bm25,ctx_prev_vector,ctx_prev_both,date_text,neighbour_0.1,neighbour_0.2,"
        "neighbour_0.3,time_window_0.1,time_window_0.2,time_window_0.3,ctx_prev_bm25+time_window_0.2,"
        "ctx_prev_bm25+time_window_0.3,ctx_prev_bm25+neighbour_0.2,session_0.1,session_0.3,speaker_0.05,speaker_0.1,"
        "ctx_prev_bm25+session_0.1,ctx_prev_bm25+speaker_0.05,answer_0.3,qdemote_0.7,"
        "ctx_prev_bm25+time_window_0.2+answer_0.3,ctx_prev_bm25+time_window_0.2+qdemote_0.7,"
        "ctx_prev_bm25+time_window_0.2+answer_0.3+qdemote_0.7,ctx_next_bm25,ctx_around_bm25,"
        "ctx_around_bm25+time_window_0.2,mmr_0.2,ctx_prev_bm25+time_window_0.2+mmr_0.1,"
        "ctx_prev_bm25+time_window_0.2+mmr_0.2,ctx_prev_bm25+time_window_0.2+mmr_0.4,ctx_tail_10+time_window_0.2,"
        "ctx_tail_20+time_window_0.2,ctx_tail_30+time_window_0.2,ctx_tail_45+time_window_0.2,"
        "ctx_field_1+time_window_0.2,ctx_field_2+time_window_0.2,ctx_field_3+time_window_0.2,ctx_field_4+time_window_0.2,"
        "pairs_tail_45+time_window_0.2,maxvec_tail_45+time_window_0.2,ctx_tail_45+time_window_0.2+spread_0.5,"
        "ctx_tail_45+time_window_0.2+spread_0.8,rm3_5_10_0.3+time_window_0.2,rm3_5_10_1.0+time_window_0.2,"
        "rm3_10_10_0.3+time_window_0.2,wexp_2_0.5_0.2+time_window_0.2,wexp_3_0.5_0.3+time_window_0.2,"
        "wexp_3_0.5_0.6+time_window_0.2,wexp_5_0.5_0.3+time_window_0.2,wexp_8_0.5_0.6+time_window_0.2,"
        "sentmax_tail_45+time_window_0.2,sentmix_tail_45+time_window_0.2,hub_10_0.5+time_window_0.2,"
        "hub_10_1.0+time_window_0.2,hub_30_0.5+time_window_0.2,hub_0_0.25+time_window_0.2,hub_0_0.5+time_window_0.2,"
        "hub_0_0.75+time_window_0.2,hub_0_1.0+time_window_0.2",
    )
    args = p.parse_args(argv)
    if args.render_only:
        res = json.loads(args.out.read_text(encoding="utf-8"))
        write_markdown(args.out.with_suffix(".md"), render(res))
        return 0
    data = load_all(args.data_dir)
    emb = cached(default_embedder())
    alpha = default_alpha()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    t0 = time.perf_counter()
    res: dict[str, Any] = {"alpha": alpha, "alpha_note": "1.0 = pure vector, 0.0 = pure keyword (BM25)", "datasets": {}}
    for name in args.datasets.split(","):
        res["datasets"][name] = run_variants(data[name], emb, variants, alpha)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    emb.close()
    args.out.write_text(json.dumps(res, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    write_markdown(args.out.with_suffix(".md"), render(res))
    log(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
