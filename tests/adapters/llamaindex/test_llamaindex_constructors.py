"""One constructor convention for every LlamaIndex adapter: the core first, positional or ``memory=``;
``HybridAgentMemory.from_defaults`` refuses to run without a core instead of making a private one."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.llms import ChatMessage

from hybrid_memory import HybridMemory
from hybrid_memory.errors import ConfigurationError
from llamaindex_hybrid_memory import HybridAgentMemory, HybridMemoryBlock, HybridMemoryRetriever

CLASSES: list[tuple[type[Any], dict[str, Any]]] = [
    (HybridAgentMemory, {"user_id": "alice", "session_id": "s1"}),
    (HybridMemoryBlock, {"user_id": "alice"}),
    (HybridMemoryRetriever, {"user_id": "alice", "k": 2}),
]
IDS = [cls.__name__ for cls, _ in CLASSES]


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=IDS)
def test_core_positional_or_keyword(core: HybridMemory, cls: type[Any], kwargs: dict[str, Any]) -> None:
    positional, keyword = cls(core, **kwargs), cls(memory=core, **kwargs)
    assert positional.memory is core and keyword.memory is core
    assert type(positional) is type(keyword) is cls


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=IDS)
@pytest.mark.parametrize("bad", [None, "memory.db", object()])
def test_anything_but_a_core_is_refused(cls: type[Any], kwargs: dict[str, Any], bad: object) -> None:
    with pytest.raises(ConfigurationError, match=rf"{cls.__name__} needs a hybrid-memory core.*HybridMemory\(store="):
        cls(bad, **kwargs)


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=IDS)
def test_no_core_at_all_is_a_type_error(core: HybridMemory, cls: type[Any], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="memory"):
        cls(**kwargs)
    with pytest.raises(TypeError, match="memory"):
        cls(core, memory=core, **kwargs)


def test_from_defaults_takes_the_core_positional_or_keyword(core: HybridMemory) -> None:
    a = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="s1")
    b = HybridAgentMemory.from_defaults(memory=core, user_id="alice", session_id="s1")
    assert a.memory is core and b.memory is core
    a.put(ChatMessage(role="user", content="Remember: I am allergic to peanuts"))
    assert [m.content for m in b.get_all()] == ["Remember: I am allergic to peanuts"]  # one session, one window


def test_from_defaults_without_a_core_refuses_instead_of_forgetting() -> None:
    # It used to build a private in-memory HybridMemory(): nothing carried over between sessions.
    with pytest.raises(ConfigurationError, match=r"from_defaults needs the hybrid-memory core.*LocalStore"):
        HybridAgentMemory.from_defaults(user_id="alice")
    with pytest.raises(ConfigurationError, match="needs a hybrid-memory core"):
        HybridAgentMemory.from_defaults("memory.db", user_id="alice")  # type: ignore[arg-type]
    assert issubclass(ConfigurationError, ValueError)
