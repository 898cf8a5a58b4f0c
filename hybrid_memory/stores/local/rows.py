"""Records to SQLite rows and back: column lists, value encodings, ``IN (...)`` chunks, filters as ``WHERE``.

Pure functions over the ``memories`` table's row layout (:mod:`.schema`); no connection is held here.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from hybrid_memory.errors import InvalidInputError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.values import MemoryFilter

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
_CHUNK = 500  # ids per "IN (...)" query

_RECORD_COLUMNS = (
    "id, user_id, session_id, content, category, importance, source, created_at, updated_at, "
    "last_accessed_at, access_count, tags, metadata, status, version, supersedes, superseded_by, provenance, context"
)


def _micros(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be JSON-serialisable with finite numbers: {exc}") from exc


def _row(r: MemoryRecord, analyzed: str) -> tuple[Any, ...]:
    """The ``memories`` columns of ``r`` from ``user_id`` to ``context`` (the vector is added by the caller)."""
    return (
        r.user_id,
        r.id,
        r.session_id,
        r.content,
        analyzed,
        r.category,
        float(r.importance),
        r.source,
        _iso(r.created_at),
        _micros(r.created_at),
        _iso(r.updated_at),
        None if r.last_accessed_at is None else _iso(r.last_accessed_at),
        r.access_count,
        _json(builtins.list(r.tags), "tags"),
        _json(r.metadata, "metadata"),
        r.status,
        r.version,
        r.supersedes,
        r.superseded_by,
        _json(builtins.list(r.provenance), "provenance"),
        r.context,
    )


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _marks(chunk: Sequence[str]) -> str:
    return ", ".join("?" * len(chunk))


def _where(user_id: str | None, flt: MemoryFilter | None) -> tuple[str, tuple[Any, ...]]:
    clauses: builtins.list[str] = []
    params: builtins.list[Any] = []
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    if flt is not None:
        clauses.append(f"status IN ({_marks(flt.statuses)})" if flt.statuses else "0")
        params.extend(flt.statuses)
        if flt.categories is not None:
            clauses.append(f"category IN ({_marks(flt.categories)})" if flt.categories else "0")
            params.extend(flt.categories)
        if flt.tags is not None:
            clauses.append(
                f"EXISTS (SELECT 1 FROM json_each(memories.tags) WHERE json_each.value IN ({_marks(flt.tags)}))"
                if flt.tags
                else "0"
            )
            params.extend(flt.tags)
        if flt.since is not None:
            clauses.append("created_us >= ?")
            params.append(_micros(flt.since))
        if flt.until is not None:
            clauses.append("created_us < ?")
            params.append(_micros(flt.until))
        if flt.session_id is not None:
            clauses.append("session_id = ?")
            params.append(flt.session_id)
    return (" AND ".join(clauses) if clauses else "1"), tuple(params)


def _json_tuple(text: str) -> tuple[Any, ...]:
    return () if text == "[]" else tuple(json.loads(text))


def _record(row: Sequence[Any]) -> MemoryRecord:
    (mid, user_id, session_id, content, category, importance, source, created_at, updated_at, last_accessed_at,
     access_count, tags, metadata, status, version, supersedes, superseded_by, provenance, context) = row  # fmt: skip
    return _validate_record(
        {
            "id": mid,
            "user_id": user_id,
            "session_id": session_id,
            "content": content,
            "category": category,
            "importance": importance,
            "source": source,
            "created_at": _from_iso(created_at),
            "updated_at": _from_iso(updated_at),
            "last_accessed_at": None if last_accessed_at is None else _from_iso(last_accessed_at),
            "access_count": access_count,
            "tags": _json_tuple(tags),
            "metadata": {} if metadata == "{}" else json.loads(metadata),
            "status": status,
            "version": version,
            "supersedes": supersedes,
            "superseded_by": superseded_by,
            "provenance": _json_tuple(provenance),
            "context": context,
        }
    )


_validate_record = MemoryRecord.model_validate
_from_iso = datetime.fromisoformat
