"""Memory drafts: the items of ``remember`` / ``remember_many`` validated into draft records."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord, check_id, check_text
from hybrid_memory.write.importance import ScoreBatch, infer_category

__all__ = ["ITEM_KEYS", "draft", "fallback_note", "str_tuple"]

#: The fields a memory item may have.
ITEM_KEYS = frozenset(
    {
        "content",
        "importance",
        "category",
        "source",
        "tags",
        "metadata",
        "timestamp",
        "session_id",
        "provenance",
        "id",
        "context",
    }
)


def fallback_note(batch: ScoreBatch) -> str | None:
    """A visible note when the scorer fell back (e.g. the LLM failed and the heuristic scored)."""
    if batch.fallback_reason is None:
        return None
    return f"scorer fallback ({batch.scorer}): {batch.fallback_reason}"


def str_tuple(value: object, name: str) -> tuple[str, ...]:
    """``None`` -> ``()``; a non-str iterable of str -> tuple; anything else is rejected."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidInputError(f"{name} must be a sequence of str, got {type(value).__name__}")
    out = tuple(value)
    if not all(isinstance(t, str) for t in out):
        raise InvalidInputError(f"{name} must be a sequence of str")
    return out


def draft(
    user_id: str, item: str | Mapping[str, Any], *, stored_time: Callable[[datetime | None], datetime]
) -> MemoryRecord:
    """Validate one memory item of ``remember_many`` and make its draft record.

    Args:
        user_id: Whose memory (already checked).
        item: A text, or a mapping with the keyword arguments of ``remember`` (``content``
            required; also ``id``).
        stored_time: Turns the item's ``timestamp`` into the stored time (the clock when
            ``None``; refuses one beyond the future skew).

    Raises:
        InvalidInputError: the item is invalid (nothing is written).
    """
    data: dict[str, Any] = {}
    if isinstance(item, str):
        data["content"] = item
    elif isinstance(item, Mapping):
        unknown = set(item) - ITEM_KEYS
        if unknown:
            raise InvalidInputError(f"unknown memory fields: {sorted(unknown)}")
        data.update({k: v for k, v in item.items() if v is not None or k not in data})
    else:
        raise InvalidInputError(f"a memory must be a str or a mapping, got {type(item).__name__}")
    content = check_text(data.pop("content", None))
    ts = stored_time(data.pop("timestamp", None))
    imp = data.pop("importance", None)
    if imp is not None and (isinstance(imp, bool) or not isinstance(imp, (int, float)) or not 0 <= imp <= 1):
        raise InvalidInputError(f"importance must be a number in [0, 1], got {imp!r}")
    tags = str_tuple(data.pop("tags", None), "tags")
    provenance = str_tuple(data.pop("provenance", None), "provenance")
    metadata = data.pop("metadata", None)
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidInputError(f"metadata must be a mapping, got {type(metadata).__name__}")
    session_id = data.pop("session_id", None)
    if session_id is not None:
        check_id(session_id, name="session_id")
    context = data.pop("context", None)
    if context is not None and context != "":
        check_text(context, name="context")
    return MemoryRecord.create(
        user_id=user_id,
        content=content,
        id=data.pop("id", None),
        timestamp=ts,
        importance=0.5 if imp is None else float(imp),
        category=data.pop("category", None) or infer_category(content),
        source=data.pop("source", None) or "user",
        tags=tags,
        metadata=dict(metadata or {}),
        session_id=session_id,
        provenance=provenance,
        context=context or "",
    )
