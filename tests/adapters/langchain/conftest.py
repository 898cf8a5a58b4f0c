"""Fixtures for the LangChain / LangGraph adapter tests.

Everything is real: a ``HybridMemory`` core over an in-memory ``LocalStore``, LangChain chains,
retrievers, ``create_agent`` agents and LangGraph stores. Only the chat models are LangChain's
own fakes (plus a subclass that accepts ``bind_tools``), so no network is needed. The one
recorded ``ChatOpenAI`` conversation replays a vcrpy cassette (``--record-mode=none`` by default).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder


@pytest.fixture
def mem() -> Iterator[HybridMemory]:
    """The real engine: LocalStore in memory, the fast lexical HashingEmbedder, heuristic scorer."""
    core = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(dim=256))
    yield core
    core.close()


class ToolCallingFake(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts ``bind_tools`` and records every prompt it gets.

    None of LangChain's fake chat models implements ``bind_tools`` (frameworks.md §2.4), which
    ``create_agent`` needs as soon as tools are given. This is our own test double of a
    provider model, not a mock of LangChain: the agent, tools, middleware and graph are real.
    """

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@pytest.fixture
def tool_model() -> type[ToolCallingFake]:
    """The class of the fake tool-calling chat model: ``tool_model(messages=iter([...]))``."""
    return ToolCallingFake


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    drop = {"set-cookie", "openai-organization", "openai-project"}
    response["headers"] = {k: v for k, v in response["headers"].items() if k.lower() not in drop}
    return response


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    """vcrpy settings for the recorded ChatOpenAI conversation (pytest-recording).

    ``record_mode`` is deliberately absent: a key here would override ``--record-mode``
    (frameworks.md §7), and pytest-recording's default ``none`` is what CI needs. Requests are
    matched on method and path in recorded order (the server address and the exact prompt text
    may change without a re-record); what the model was sent is asserted through LangChain
    callbacks instead. Credentials never reach the cassette.
    """
    return {
        "filter_headers": [
            ("authorization", "PLACEHOLDER"),
            ("x-api-key", "PLACEHOLDER"),
            ("api-key", "PLACEHOLDER"),
            ("openai-organization", "PLACEHOLDER"),
            ("openai-project", "PLACEHOLDER"),
        ],
        "match_on": ["method", "path"],
        "allow_playback_repeats": False,
        "decode_compressed_response": True,
        "before_record_response": _scrub_response,
    }
