"""The re-rank's length prior (``rerank.w_length``, ``rerank.length_cap``) and ``content_units``."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from hybrid_memory import ConfigurationError
from hybrid_memory.config import RerankConfig, load_config
from hybrid_memory.read.rerank import length_prior, rerank
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import StoreHit
from hybrid_memory.text.analyzer import content_units

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)


def _turn(text: str, context: str = "the turn before") -> MemoryRecord:
    return MemoryRecord.create(user_id="u", content=text, context=context, timestamp=NOW)


def test_content_units_count_distinct_content_words_and_chinese_by_the_word() -> None:
    assert content_units("") == 0.0
    assert content_units("What is it? Is it?") == 0.0  # question words and stopwords only
    assert content_units("tea tea teas") == 1.0  # distinct stems
    english = content_units("I drink oolong tea every morning in Hangzhou")
    chinese = content_units("我每天早上在杭州喝乌龙茶")
    assert english == 6.0
    # 12 characters, 2 of them stopwords (我, 在): 10 / 1.5; the bigrams count for nothing
    assert chinese == pytest.approx(10 / 1.5)
    assert abs(chinese - english) < 1.0


def test_the_prior_grows_with_what_a_turn_says_and_saturates_at_the_cap() -> None:
    words = [f"word{i}x" for i in range(30)]
    priors = [length_prior(_turn(" ".join(words[:n])), 20) for n in (1, 5, 10, 20, 30)]
    assert priors == sorted(priors)
    assert priors[0] == pytest.approx(math.log(2) / math.log(21))
    assert priors[3] == priors[4] == 1.0
    assert length_prior(_turn(" ".join(words[:10])), 10) == 1.0


def test_a_memory_stated_on_purpose_gets_the_whole_prior_and_any_turn_does_not() -> None:
    fact = MemoryRecord.create(user_id="u", content="Vegetarian", timestamp=NOW)
    assert length_prior(fact, 20) == 1.0
    assert length_prior(_turn("Vegetarian"), 20) < 0.3
    # a session's first turn has no search context, but add_turn files it under "turn"
    first = MemoryRecord.create(user_id="u", content="Vegetarian", category="turn", timestamp=NOW)
    assert length_prior(first, 20) == length_prior(_turn("Vegetarian"), 20)


def test_rerank_puts_the_turn_that_tells_something_first_at_equal_relevance() -> None:
    chatty = _turn("Wow, cool!")
    telling = _turn("We camped by the lake and watched the meteor shower with the kids")
    hits = [StoreHit(chatty, 0.8), StoreHit(telling, 0.8)]  # the store's order: chatty first
    on = rerank(hits, now=NOW)
    off = rerank(hits, now=NOW, config=RerankConfig(w_length=0.0))
    assert [h.content for h in on] == [telling.content, chatty.content]
    assert [h.content for h in off] == [chatty.content, telling.content]  # a tie keeps the store's order
    gap = on[0].score - on[1].score
    assert gap == pytest.approx(RerankConfig().w_length * (on[0].length_prior - on[1].length_prior))
    assert on[0].components()["length_prior"] == on[0].length_prior


def test_length_settings_are_validated() -> None:
    assert RerankConfig().w_length == 0.4 and RerankConfig().length_cap == 20.0
    with pytest.raises(ConfigurationError):
        load_config(rerank={"length_cap": 0})
    with pytest.raises(ConfigurationError):
        load_config(rerank={"w_length": -0.1})
