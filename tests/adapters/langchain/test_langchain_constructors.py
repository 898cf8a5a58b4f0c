"""One constructor convention for every LangChain adapter: the core first, positional or ``memory=``."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_memory import HybridMemory
from hybrid_memory.errors import ConfigurationError
from langchain_hybrid_memory import HybridChatMemory, HybridMemoryMiddleware, HybridMemoryRetriever, HybridMemoryStore

# Each class with the keyword arguments it needs besides the core.
CLASSES: list[tuple[type[Any], dict[str, Any]]] = [
    (HybridChatMemory, {"user_id": "alice", "session_id": "s1"}),
    (HybridMemoryRetriever, {"user_id": "alice", "k": 2}),
    (HybridMemoryStore, {"namespace": ("{user_id}", "memories")}),
    (HybridMemoryMiddleware, {"user_id": "alice"}),
]
IDS = [cls.__name__ for cls, _ in CLASSES]


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=IDS)
def test_core_positional_or_keyword(mem: HybridMemory, cls: type[Any], kwargs: dict[str, Any]) -> None:
    positional, keyword = cls(mem, **kwargs), cls(memory=mem, **kwargs)
    assert positional.memory is mem and keyword.memory is mem
    assert type(positional) is type(keyword) is cls


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=IDS)
@pytest.mark.parametrize("bad", [None, "memory.db", object()])
def test_anything_but_a_core_is_refused(cls: type[Any], kwargs: dict[str, Any], bad: object) -> None:
    with pytest.raises(ConfigurationError, match=rf"{cls.__name__} needs a hybrid-memory core.*HybridMemory\(store="):
        cls(bad, **kwargs)


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=IDS)
def test_no_core_at_all_is_a_type_error(mem: HybridMemory, cls: type[Any], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="memory"):
        cls(**kwargs)  # never a private default core
    with pytest.raises(TypeError, match="memory"):
        cls(mem, memory=mem, **kwargs)


def test_positional_adapters_work_together(mem: HybridMemory) -> None:
    chat = HybridChatMemory(mem, user_id="alice", session_id="s1")
    chat.save_context({"input": "Remember: I am allergic to peanuts"}, {"output": "Noted."})
    docs = HybridMemoryRetriever(mem, user_id="alice").invoke("peanuts")
    assert "allergic to peanuts" in docs[0].page_content
    items = HybridMemoryStore(mem).search(("memories", "alice"), query="peanuts", limit=1)
    assert "allergic to peanuts" in items[0].value["content"]
