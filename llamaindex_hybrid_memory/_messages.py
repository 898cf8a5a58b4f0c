"""Conversion between LlamaIndex ``ChatMessage`` objects and hybrid-memory turns (no IO).

Only text crosses the boundary: the core stores text turns. Images, audio and tool-call requests
without text are not stored. Tool results are stored as ``tool`` turns and rendered back as
assistant messages labelled ``Tool result:``: a bare ``tool`` message without the assistant
message that requested it is rejected by chat APIs, and inside a run the agent keeps the live
tool-call exchange in its own scratchpad anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from hybrid_memory.errors import MissingDependencyError
from hybrid_memory.records import Turn

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("llama-index-core", "llamaindex") from exc

__all__ = ["TOOL_RESULT_LABEL", "core_role", "message_text", "query_text", "turn_to_message"]

CoreRole = Literal["user", "assistant", "system", "tool"]

#: Prefix of a tool result rendered as an assistant message.
TOOL_RESULT_LABEL = "Tool result: "

_ROLES: dict[str, CoreRole] = {
    MessageRole.USER.value: "user",
    MessageRole.ASSISTANT.value: "assistant",
    MessageRole.CHATBOT.value: "assistant",
    MessageRole.MODEL.value: "assistant",
    MessageRole.SYSTEM.value: "system",
    MessageRole.DEVELOPER.value: "system",
    MessageRole.TOOL.value: "tool",
    MessageRole.FUNCTION.value: "tool",
}


def core_role(message: ChatMessage) -> CoreRole:
    """The hybrid-memory role of a LlamaIndex message (``chatbot``/``model`` → ``assistant`` ...)."""
    role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    return _ROLES.get(role, "user")


def message_text(message: ChatMessage) -> str:
    """The text of a message (its text blocks joined by newlines); ``""`` when it has none."""
    text = "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))
    return text if text.strip() else ""


def query_text(messages: Sequence[ChatMessage] | None, window: int = 1) -> str:
    """The recall query: the latest user message with text, with the ``window - 1`` messages before it.

    Replies after the latest user message are ignored (the user's words say what to recall);
    without any user message, the latest ``window`` messages with text are used.
    """
    texts = [(core_role(m), t) for m in messages or () for t in (message_text(m),) if t]
    last_user = max((i for i, (role, _) in enumerate(texts) if role == "user"), default=len(texts) - 1)
    chosen = texts[max(0, last_user - window + 1) : last_user + 1]
    return "\n".join(t for _, t in chosen)


def turn_to_message(turn: Turn) -> ChatMessage:
    """Render a short-term turn as a ``ChatMessage`` (tool results as labelled assistant text)."""
    if turn.role == "tool":
        return ChatMessage(role=MessageRole.ASSISTANT, content=TOOL_RESULT_LABEL + turn.content)
    return ChatMessage(role=MessageRole(turn.role), content=turn.content)
