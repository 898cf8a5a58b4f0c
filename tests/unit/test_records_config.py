from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hybrid_memory.config import HybridMemoryConfig, load_config
from hybrid_memory.errors import ConfigurationError, InvalidInputError
from hybrid_memory.records import MemoryRecord, check_id, check_text, ensure_utc, memory_id


def test_ids_are_deterministic_per_user_and_normalised_content() -> None:
    assert memory_id("u", "I like  tea") == memory_id("u", " I like tea ")
    assert memory_id("u", "I like tea") != memory_id("v", "I like tea")
    assert memory_id("u", "ＡＢＣ") == memory_id("u", "ABC")  # NFKC


def test_record_timestamps_are_utc_and_naive_is_rejected() -> None:
    cst = timezone(timedelta(hours=8))
    r = MemoryRecord.create(user_id="u", content="x", timestamp=datetime(2024, 1, 1, 8, tzinfo=cst))
    assert r.created_at == datetime(2024, 1, 1, 0, tzinfo=timezone.utc)
    assert r.created_at.utcoffset() == timedelta(0)
    with pytest.raises(InvalidInputError, match="naive"):
        MemoryRecord.create(user_id="u", content="x", timestamp=datetime(2024, 1, 1))


def test_record_json_round_trip_keeps_metadata() -> None:
    meta = {"nested": {"a": [1, 2.5, None, "中文"]}, "emoji": "🍵", "flag": True}
    r = MemoryRecord.create(user_id="u", content="我喜欢喝茶", metadata=meta, tags=("drink",), provenance=("t1",))
    back = MemoryRecord.from_json_dict(r.to_json_dict())
    assert back == r
    assert back.metadata == meta


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a\x00b", "NUL"),
        ("\ud800", "Unicode"),
        (5, "must be a str"),
        ("x" * 100_001, "limit"),
    ],
)
def test_bad_text_gets_a_typed_error(value: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_text(value)


@pytest.mark.parametrize("value", ["", "x" * 257, None, 3, "a\x00"])
def test_bad_ids_get_a_typed_error(value: object) -> None:
    with pytest.raises(InvalidInputError):
        check_id(value)


def test_importance_must_be_in_range() -> None:
    with pytest.raises(InvalidInputError, match="importance"):
        MemoryRecord.create(user_id="u", content="x", importance=1.5)
    with pytest.raises(InvalidInputError):
        MemoryRecord.create(user_id="u", content="x", importance=float("nan"))


def test_ensure_utc_rejects_non_datetimes() -> None:
    with pytest.raises(InvalidInputError):
        ensure_utc("2024-01-01")  # type: ignore[arg-type]


def test_config_keeps_zero_alpha_and_is_frozen() -> None:
    cfg = HybridMemoryConfig(retrieval={"alpha": 0.0})  # type: ignore[arg-type]
    assert cfg.retrieval.alpha == 0.0
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen assignment
        cfg.retrieval.alpha = 0.5  # type: ignore[misc]


def test_config_reads_nested_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRID_MEMORY_RETRIEVAL__ALPHA", "0")
    monkeypatch.setenv("HYBRID_MEMORY_RERANK__HALF_LIFE_DAYS", "3.5")
    cfg = load_config()
    assert cfg.retrieval.alpha == 0.0
    assert cfg.rerank.half_life_days == 3.5


def test_null_in_the_environment_sets_an_optional_field_to_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_config().writer.context_words == 45
    monkeypatch.setenv("HYBRID_MEMORY_WRITER__CONTEXT_WORDS", "null")  # the whole previous turn
    monkeypatch.setenv("HYBRID_MEMORY_RERANK__GUARD_MARGIN", "0.1")
    cfg = load_config()
    assert cfg.writer.context_words is None and cfg.rerank.guard_margin == 0.1
    monkeypatch.setenv("HYBRID_MEMORY_RETRIEVAL__FUSION", "null")  # not optional: a typed error
    with pytest.raises(ConfigurationError, match=r"retrieval\.fusion"):
        load_config()


def test_invalid_config_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"retrieval\.alpha"):
        load_config(retrieval={"alpha": -0.1})
    with pytest.raises(ConfigurationError, match="weight"):
        load_config(rerank={"w_relevance": 0, "w_importance": 0, "w_recency": 0, "w_heat": 0})
