"""The calibrated injection gate (hybrid_memory.read.gate) and the bilingual probe set it is measured on."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from hybrid_memory.config import FuserConfig
from hybrid_memory.embeddings import UniversalSentenceEncoder
from hybrid_memory.read.context import ContextFuser, detect_language, injection_gate
from hybrid_memory.read.gate import InjectionGate, term_overlap
from hybrid_memory.records import MemoryRecord, RecallHit
from hybrid_memory.text.analyzer import Analyzer

NOW = datetime(2024, 5, 4, tzinfo=timezone.utc)
PROBE = Path(__file__).resolve().parents[1] / "data" / "bilingual_probe.json"
GATE = InjectionGate(min_similarity=0.44, min_term_overlap=0.4, min_similarity_with_terms=0.3, cross_lingual_bonus=0.15)


def _hit(text: str, sim: float, keyword: float | None = None) -> RecallHit:
    r = MemoryRecord.create(user_id="u", content=text, category="fact", importance=0.5, timestamp=NOW)
    return RecallHit(
        record=r,
        score=0.9,
        relevance=1.0,
        keyword_score=keyword,
        vector_similarity=sim,
        importance=0.5,
        recency=1.0,
        heat=0.0,
    )


class _Calibrated:
    injection_gate = GATE
    min_similarity = 0.2


def test_the_floor_stays_the_default_and_the_calibrated_gate_is_opt_in() -> None:
    assert FuserConfig().gate == "floor"
    assert injection_gate(FuserConfig(), _Calibrated()) is None
    assert injection_gate(FuserConfig(gate="calibrated"), _Calibrated()) is GATE
    assert injection_gate(FuserConfig(gate="calibrated", min_similarity=0.3), _Calibrated()) is None
    assert injection_gate(FuserConfig(gate="calibrated"), object()) is None  # no calibration: the floor
    assert isinstance(UniversalSentenceEncoder.injection_gate, InjectionGate)  # class attribute: no model load


def test_gate_rule() -> None:
    assert GATE.passes(0.44, 0.0, cross_lingual=False)
    assert not GATE.passes(0.43, 0.39, cross_lingual=False)
    assert GATE.passes(0.30, 0.4, cross_lingual=False) and not GATE.passes(0.29, 1.0, cross_lingual=False)
    assert GATE.passes(0.30, 0.0, cross_lingual=True) and not GATE.passes(0.28, 0.0, cross_lingual=True)
    assert not GATE.passes(None, 1.0, cross_lingual=False)
    assert term_overlap(Analyzer(), "the and of", "anything") == 0.0  # a query without terms


def test_calibrated_fuser_decides_on_the_gate_and_fills_above_the_floor() -> None:
    fuser = ContextFuser.for_embedder(FuserConfig(gate="calibrated"), _Calibrated())
    assert fuser.gate is GATE
    weak = _hit("Ann likes long walks", 0.25)
    rare_term = _hit("Ann's passport from Australia is in the drawer", 0.05, keyword=0.9)
    skipped = fuser.fuse([weak, rare_term], query="What is the capital of Australia?", now=NOW)
    assert skipped.skipped and {r for _, r in skipped.dropped} == {"no recalled memory passes the injection gate"}
    strong = _hit("Ann lives in Lyon", 0.5)
    ctx = fuser.fuse([strong, weak], query="Where do I live?", now=NOW)
    assert [h.id for h in ctx.hits] == [strong.id, weak.id]  # the gate opened; the floor fills the block
    # The old floor would have injected the weak hit alone; a cross-lingual hit gets the bonus.
    assert not ContextFuser(FuserConfig(), min_similarity=0.2).fuse([weak], query="Where do I live?", now=NOW).skipped
    zh = _hit("我住在杭州", 0.30)
    assert not fuser.fuse([zh], query="Which city do I live in?", now=NOW).skipped
    assert fuser.fuse([_hit("Hangzhou is my home", 0.30)], query="Which city do I live in?", now=NOW).skipped


def test_bilingual_probe_set_is_cross_lingual() -> None:
    probe = json.loads(PROBE.read_text(encoding="utf-8"))
    memories, questions = probe["memories"], probe["questions"]
    assert {detect_language(m) for m in memories} == {"zh", "en"}
    answered = [q for q in questions if q["gold"] is not None]
    unanswered = [q for q in questions if q["gold"] is None]
    assert len(answered) >= 20 and len(unanswered) >= 10
    assert {detect_language(q["text"]) for q in unanswered} == {"zh", "en"}
    for q in answered:
        assert 0 <= q["gold"] < len(memories)
        assert detect_language(q["text"]) != detect_language(memories[q["gold"]]), q
    # The same memories asked about in their own language, each once (benchmarks/cross_script.py).
    same = probe["same_language_questions"]
    assert sorted(q["gold"] for q in same) == list(range(len(memories)))
    for q in same:
        assert detect_language(q["text"]) == detect_language(memories[q["gold"]]), q
