"""Small helpers shared by the LangChain adapters (no retrieval or scoring logic lives here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.memory import require_core
from hybrid_memory.stores.base import MemoryFilter

__all__ = ["as_memory_filter", "lookup", "message_text", "require_core"]


def lookup(source: Any, key: str) -> Any:
    """``source[key]`` for mappings, ``getattr(source, key)`` otherwise; ``None`` when absent."""
    if source is None:
        return None
    if isinstance(source, Mapping):
        return source.get(key)
    return getattr(source, key, None)


def message_text(message: Any) -> str:
    """The plain text of a LangChain message (content blocks joined), ``""`` for non-text."""
    text = getattr(message, "text", None)
    if isinstance(text, str):
        return text
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else ""


def as_memory_filter(value: MemoryFilter | Mapping[str, Any] | None) -> MemoryFilter | None:
    """Accept a :class:`~hybrid_memory.stores.base.MemoryFilter` or a dict of its fields.

    Raises:
        InvalidInputError: the dict names unknown fields or is not a filter.
    """
    if value is None or isinstance(value, MemoryFilter):
        return value
    if isinstance(value, Mapping):
        try:
            return MemoryFilter(**dict(value))
        except TypeError as exc:
            raise InvalidInputError(
                f"filter must be a MemoryFilter or a dict of its fields "
                f"(categories, tags, since, until, session_id, statuses): {exc}"
            ) from exc
    raise InvalidInputError(f"filter must be a MemoryFilter or a dict, got {type(value).__name__}")
