"""PII redaction: detectors with checksums, and redaction before embedding and storage."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from hybrid_memory import HybridMemory, HybridMemoryConfig
from hybrid_memory.config import WriterConfig
from hybrid_memory.embeddings import CallableEmbedder
from hybrid_memory.errors import ConfigurationError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.local import LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.text.privacy import PiiRedactor, china_id_valid, luhn_valid, redact_pii
from hybrid_memory.write.importance import HeuristicImportanceScorer
from hybrid_memory.write.writer import MemoryWriter

T0 = datetime(2025, 4, 1, 9, tzinfo=timezone.utc)

T = datetime(2025, 1, 6, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我的手机号是13812345678", "我的手机号是[PHONE]"),
        ("call 138-1234-5678 or +86 139 1234 5678", "call [PHONE] or [PHONE]"),
        ("座机 010-62345678，深圳 0755 1234567", "座机 [PHONE]，深圳 [PHONE]"),
        ("US: +1 (415) 555-0134, (212) 555-0199, 646-555-0123", "US: [PHONE], [PHONE], [PHONE]"),
        ("mail me at li.lei+memo@mail.example.com.", "mail me at [EMAIL]."),
        ("身份证号 11010519491231002X", "身份证号 [ID_NUMBER]"),
        ("身份证 110105 19491231 002x", "身份证 [ID_NUMBER]"),
        ("Visa 4111 1111 1111 1111 and 5500-0000-0000-0004", "Visa [BANK_CARD] and [BANK_CARD]"),
        ("卡号6222021234567890128", "卡号[BANK_CARD]"),
    ],
)
def test_redacts_each_kind(text: str, expected: str) -> None:
    assert redact_pii(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "身份证 110105194912310021",  # wrong check digit
        "ID 110105199913450028",  # impossible date
        "order 4111111111111112",  # fails Luhn
        "2024-05-01 我花了 1234 元，跑了 10 公里",
        "iPhone 15 Pro 256GB, version 1.2.3",
        "订单号 20240501123456789",
        "I am 35 and was born in 1989",
        "Room 12, floor 3",
        "1381234567",  # ten digits: not a mobile
    ],
)
def test_leaves_non_pii_alone(text: str) -> None:
    assert redact_pii(text) == text


def test_checksums() -> None:
    assert china_id_valid("11010519491231002X")
    assert china_id_valid("11010519491231002x")
    assert not china_id_valid("11010519491231002")
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert not luhn_valid("")


def test_counts_and_kinds() -> None:
    r = PiiRedactor().redact("a@b.co, c@d.org, 13912345678")
    assert r.counts == {"EMAIL": 2, "PHONE": 1} and r.summary() == "EMAIL×2, PHONE×1"
    only_mail = PiiRedactor(kinds=("EMAIL",)).redact("a@b.co 13912345678")
    assert only_mail.text == "[EMAIL] 13912345678"
    with pytest.raises(ConfigurationError):
        PiiRedactor(kinds=("SSN",))


def test_writer_redacts_before_embedding_and_storage(tmp_path: object) -> None:
    seen: list[str] = []
    inner = HashingEmbedder(dim=64)

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return inner.embed_documents(texts)

    store = LocalStore(":memory:")
    w = MemoryWriter(store, CallableEmbedder(embed, name="recording-hashing"))
    raw = "我的手机是13812345678，邮箱 li@example.com，卡号 4111 1111 1111 1111"
    out = w.write([MemoryRecord.create(user_id="u", content=raw, timestamp=T)])[0]
    assert out.action == "added"
    assert out.reason == "PII redacted (BANK_CARD×1, EMAIL×1, PHONE×1)"
    stored = store.list("u")
    assert [r.content for r in stored] == ["我的手机是[PHONE]，邮箱 [EMAIL]，卡号 [BANK_CARD]"]
    assert "13812345678" not in " ".join(seen) and "li@example.com" not in " ".join(seen)
    # the id follows the redacted text, so the raw number is not even hashed into it
    assert stored[0].id != MemoryRecord.create(user_id="u", content=raw).id


def test_precomputed_vectors_of_pii_text_are_recomputed() -> None:
    seen: list[str] = []
    inner = HashingEmbedder(dim=32)

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return inner.embed_documents(texts)

    w = MemoryWriter(LocalStore(":memory:"), CallableEmbedder(embed, name="rec"))
    drafts = [
        MemoryRecord.create(user_id="u", content="call 13812345678", timestamp=T),
        MemoryRecord.create(user_id="u", content="I like tea", timestamp=T),
    ]
    vecs = inner.embed_documents([d.content for d in drafts])
    seen.clear()
    w.write(drafts, vectors=vecs)
    assert seen == ["call [PHONE]"]


def test_redaction_can_be_disabled() -> None:
    store = LocalStore(":memory:")
    w = MemoryWriter(store, HashingEmbedder(dim=32), WriterConfig(redact_pii=False))
    w.write([MemoryRecord.create(user_id="u", content="call 13812345678", timestamp=T)])
    assert store.list("u")[0].content == "call 13812345678"


def test_llm_components_never_see_raw_pii() -> None:
    """The LLM scorer, the fact extractor and the summarizer get redacted text (the store does too)."""
    from typing import Any

    from langchain_core.language_models import FakeListChatModel
    from pydantic import Field

    from hybrid_memory.write.extraction import FactExtractor
    from hybrid_memory.write.importance import ScoreBatch
    from hybrid_memory.write.summary import SessionSummarizer

    class Recording(FakeListChatModel):
        prompts: list[str] = Field(default_factory=list)

        def _call(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
            self.prompts.append("\n".join(str(m.content) for m in messages))
            return super()._call(messages, stop, run_manager, **kwargs)

    class RecordingScorer:
        name = "recording"

        def __init__(self) -> None:
            self.texts: list[str] = []
            self.inner = HeuristicImportanceScorer()

        def score(self, texts: Any, *, roles: Any = None) -> ScoreBatch:
            self.texts.extend(texts)
            return self.inner.score(texts, roles=roles)

        async def ascore(self, texts: Any, *, roles: Any = None) -> ScoreBatch:
            return self.score(texts, roles=roles)

    fact = '{"memories": [{"content": "The user can be reached at [PHONE].", "category": "fact", "importance": 6, "source_turns": [0]}]}'
    extract_llm = Recording(responses=[fact] * 5)
    summary_llm = Recording(responses=["The user shared a phone number [PHONE] and an e-mail [EMAIL]."] * 5)
    scorer = RecordingScorer()
    mem = HybridMemory(
        store=LocalStore(":memory:"),
        embedder=HashingEmbedder(),
        scorer=scorer,
        extractor=FactExtractor(extract_llm, method="json_mode", batch_turns=3),
        summarizer=SessionSummarizer(summary_llm),
        config=HybridMemoryConfig(buffer={"summary_every": 3}),
        clock=lambda: T0,
    )
    try:
        for i, text in enumerate(
            ["Call me on 13812345678 please", "Sure, noted", "My e-mail is li.lei@example.com", "thanks"]
        ):
            mem.add_turn("u", "s", "user" if i % 2 == 0 else "assistant", text, timestamp=T0)
        assert mem.flush(timeout=30)
        mem.end_session("u", "s")
        assert mem.flush(timeout=30)
        seen = [*scorer.texts, *extract_llm.prompts, *summary_llm.prompts]
        assert scorer.texts and extract_llm.prompts and summary_llm.prompts  # every component was called
        for text in seen:
            assert "13812345678" not in text and "li.lei@example.com" not in text
        assert any("[PHONE]" in t for t in scorer.texts)
        assert all("13812345678" not in r.content for r in mem.list_memories("u"))
    finally:
        mem.close()
