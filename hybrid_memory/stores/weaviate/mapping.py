"""Weaviate objects <-> library values: names, UUIDs, the collection properties and records.

Pure functions (no IO). ``weaviate.classes`` is imported inside the functions that build schema
objects, so this module imports without the ``weaviate`` extra.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import numpy as np

from hybrid_memory.errors import InvalidInputError, SchemaError
from hybrid_memory.records import MemoryRecord, Turn, check_id, ensure_utc
from hybrid_memory.stores.base import user_hash
from hybrid_memory.values import Vector

#: Version of the collection layout written by this module (stored in the meta collection).
SCHEMA_VERSION = 1
#: The one searchable property: the analyzer's tokens joined by spaces.
SEARCH_PROPERTY = "search_text"
#: Name of the single named vector.
VECTOR_NAME = "default"
#: Namespace for object UUIDs of non-UUID record ids and for meta objects.
_UUID_NAMESPACE = uuid.UUID("3b0f5c1e-8a51-5d6c-9d0e-6c1b7a2f4e90")
_CONFIG_UUID = str(uuid.uuid5(_UUID_NAMESPACE, "hybrid-memory:config"))


# -- names -------------------------------------------------------------------------------------
def tenant_name(user_id: str) -> str:
    """The tenant of a user: ``u_`` + the first 48 hex digits of SHA-256(user id).

    Tenant names must match ``[A-Za-z0-9_-]{1,64}``; hashing also keeps user ids out of the
    schema and the file names on the server.

    Example:
        >>> tenant_name("alice")
        'u_2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f'
    """
    check_id(user_id)
    return "u_" + hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:48]


def object_uuid(record_id: str) -> str:
    """The Weaviate object UUID of a record id.

    A canonical (lower-case, hyphenated) UUID is used as is, so Weaviate's tie-break by UUID
    string equals a tie-break by record id; any other id is mapped with ``uuid5``.

    Example:
        >>> object_uuid("6f1b8a7e-4c1d-5b0e-9f3a-2d7c8e5a1b90")
        '6f1b8a7e-4c1d-5b0e-9f3a-2d7c8e5a1b90'
        >>> object_uuid("note-1") == object_uuid("note-1") != object_uuid("note-2")
        True
    """
    try:
        if str(uuid.UUID(record_id)) == record_id:
            return record_id
    except ValueError:
        pass
    return str(uuid.uuid5(_UUID_NAMESPACE, record_id))


def _turn_uuid(user_id: str, turn_id: str) -> str:
    """Object UUID of a turn: the same for a retried append of the same turn."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"turn:{user_hash(user_id)}:{turn_id}"))


def _epoch_uuid(user_id: str) -> str:
    """Object UUID of a user's forget epoch (derived from a SHA-256 of the id, never the id)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"forget-epoch:{user_hash(user_id)}"))


# -- collection properties -----------------------------------------------------------------------
def _ident(name: str) -> Any:
    """A text property matched exactly in filters (ids, enums), never searched."""
    from weaviate.classes.config import DataType, Property, Tokenization

    return Property(
        name=name,
        data_type=DataType.TEXT,
        tokenization=Tokenization.FIELD,
        index_searchable=False,
        index_filterable=True,
    )


def _blob(name: str, data_type: Any = None) -> Any:
    """A property only stored and returned (``data_type`` default: text), never searched or filtered."""
    from weaviate.classes.config import DataType, Property, Tokenization

    dt = DataType.TEXT if data_type is None else data_type
    if dt not in (DataType.TEXT, DataType.TEXT_ARRAY):
        return Property(name=name, data_type=dt, index_filterable=False)
    return Property(
        name=name,
        data_type=dt,
        tokenization=Tokenization.FIELD,
        index_searchable=False,
        index_filterable=False,
    )


def memory_property_defs() -> list[Any]:
    """The properties of the memory collection (``search_text`` is the only searchable one)."""
    from weaviate.classes.config import DataType, Property, Tokenization

    return [
        _ident("record_id"),
        _ident("user_id"),
        _ident("session_id"),
        _blob("content"),
        Property(
            name=SEARCH_PROPERTY,
            data_type=DataType.TEXT,
            tokenization=Tokenization.WHITESPACE,
            index_searchable=True,
            index_filterable=False,
        ),
        _ident("category"),
        Property(name="importance", data_type=DataType.NUMBER),
        _ident("source"),
        Property(name="created_at", data_type=DataType.DATE),
        Property(name="updated_at", data_type=DataType.DATE),
        Property(name="last_accessed_at", data_type=DataType.DATE),
        Property(name="access_count", data_type=DataType.INT),
        Property(
            name="tags",
            data_type=DataType.TEXT_ARRAY,
            tokenization=Tokenization.FIELD,
            index_searchable=False,
            index_filterable=True,
        ),
        _blob("metadata_json"),
        _ident("status"),
        Property(name="version", data_type=DataType.INT),
        _ident("supersedes"),
        _ident("superseded_by"),
        _blob("provenance", DataType.TEXT_ARRAY),
        _blob("context"),
        # The forget epoch the write was checked against (absent: a write without epochs); read
        # back only, to leave out what a write that raced a forget left behind (_Writes._live).
        Property(name="epoch", data_type=DataType.INT, index_filterable=False, index_range_filters=False),
    ]


def turn_property_defs() -> list[Any]:
    """The properties of the turn-log collection (``seq`` and ``epoch`` filterable)."""
    from weaviate.classes.config import DataType, Property

    return [
        _ident("user_id"),
        _ident("session_id"),
        _ident("turn_id"),
        _blob("role"),
        _blob("content"),
        _blob("timestamp", DataType.DATE),
        _blob("importance", DataType.NUMBER),
        _blob("key_frame", DataType.BOOL),
        _blob("key_frame_reason"),
        _blob("tokens", DataType.INT),
        _blob("scoring_note"),
        Property(name="seq", data_type=DataType.INT, index_filterable=True, index_range_filters=True),
        Property(name="epoch", data_type=DataType.INT, index_filterable=True),
    ]


def vector_config(vector_index: Literal["flat", "dynamic", "hnsw"], dynamic_threshold: int) -> Any:
    """The self-provided cosine named vector ``default`` on the chosen index type."""
    from weaviate.classes.config import Configure, VectorDistances

    cosine = VectorDistances.COSINE
    index: Any
    if vector_index == "flat":
        index = Configure.VectorIndex.flat(distance_metric=cosine)
    elif vector_index == "hnsw":
        index = Configure.VectorIndex.hnsw(distance_metric=cosine)
    else:
        index = Configure.VectorIndex.dynamic(
            distance_metric=cosine,
            threshold=dynamic_threshold,
            flat=Configure.VectorIndex.flat(distance_metric=cosine),
            hnsw=Configure.VectorIndex.hnsw(distance_metric=cosine),
        )
    return Configure.Vectors.self_provided(name=VECTOR_NAME, vector_index_config=index)


def _metadata_json(record: MemoryRecord) -> str:
    """``record.metadata`` as JSON; :class:`InvalidInputError` when it cannot be stored."""
    if not record.metadata:
        return "{}"
    try:
        return json.dumps(record.metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata of memory {record.id} is not JSON-serialisable: {exc}") from exc


def _properties(
    record: MemoryRecord, analyzed: str, epoch: int | None = None, *, unset: bool = False
) -> dict[str, Any]:
    """The object properties of ``record``; an unset optional field is left out, or ``None`` with ``unset``.

    A merge (``PATCH``) removes a property sent as ``None``, so ``unset=True`` gives the whole record
    for a merge that must also clear what the new version no longer has.
    """
    metadata = _metadata_json(record)
    props: dict[str, Any] = {
        "record_id": record.id,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "content": record.content,
        SEARCH_PROPERTY: analyzed,
        "category": record.category,
        "importance": float(record.importance),
        "source": record.source,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_accessed_at": record.last_accessed_at,
        "access_count": int(record.access_count),
        "tags": list(record.tags),
        "metadata_json": metadata,
        "status": record.status,
        "version": int(record.version),
        "supersedes": record.supersedes,
        "superseded_by": record.superseded_by,
        "provenance": list(record.provenance),
        "context": record.context or None,
        "epoch": epoch,
    }
    return props if unset else {k: v for k, v in props.items() if v is not None}


def _record(props: Mapping[str, Any]) -> MemoryRecord:
    def utc(v: Any) -> datetime:
        if isinstance(v, str):
            v = datetime.fromisoformat(v.replace("Z", "+00:00"))
        return ensure_utc(v)

    last = props.get("last_accessed_at")

    try:
        return MemoryRecord(
            id=props["record_id"],
            user_id=props["user_id"],
            content=props["content"],
            session_id=props.get("session_id"),
            category=props["category"],
            importance=float(props["importance"]),
            source=props["source"],
            created_at=utc(props["created_at"]),
            updated_at=utc(props["updated_at"]),
            last_accessed_at=utc(last) if last is not None else None,
            access_count=int(props.get("access_count") or 0),
            tags=tuple(props.get("tags") or ()),
            metadata=json.loads(props.get("metadata_json") or "{}"),
            status=props["status"],
            version=int(props.get("version") or 1),
            supersedes=props.get("supersedes"),
            superseded_by=props.get("superseded_by"),
            provenance=tuple(props.get("provenance") or ()),
            context=props.get("context") or "",
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise SchemaError(f"a stored object does not describe a memory: {exc}") from exc


def _turn_properties(turn: Turn, epoch: int) -> dict[str, Any]:
    props: dict[str, Any] = {
        "user_id": turn.user_id,
        "session_id": turn.session_id,
        "turn_id": turn.id,
        "role": turn.role,
        "content": turn.content,
        "timestamp": ensure_utc(turn.timestamp, name="timestamp"),
        "importance": float(turn.importance),
        "key_frame": bool(turn.key_frame),
        "key_frame_reason": turn.key_frame_reason,
        "tokens": int(turn.tokens),
        "scoring_note": turn.scoring_note,
        "seq": int(turn.seq),
        "epoch": int(epoch),
    }
    return {k: v for k, v in props.items() if v is not None}


def _turn(props: Mapping[str, Any]) -> Turn:
    try:
        ts = props["timestamp"]
        if isinstance(ts, str):
            ts = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        return Turn(
            id=props["turn_id"],
            user_id=props["user_id"],
            session_id=props["session_id"],
            role=props["role"],
            content=props["content"],
            timestamp=ensure_utc(ts),
            importance=float(props.get("importance") or 0.0),
            key_frame=bool(props.get("key_frame")),
            key_frame_reason=props.get("key_frame_reason"),
            tokens=int(props.get("tokens") or 0),
            scoring_note=props.get("scoring_note"),
            seq=int(props["seq"]),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise SchemaError(f"a stored object does not describe a turn: {exc}") from exc


def _vector_of(obj: Any) -> Vector | None:
    vec = getattr(obj, "vector", None)
    if isinstance(vec, Mapping):
        vec = vec.get(VECTOR_NAME)
    if vec is None:
        return None
    out: Vector = np.asarray(vec, dtype=np.float32)
    return out


def _unit_rows(m: Vector) -> Vector:
    norms = np.linalg.norm(m.astype(np.float64), axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vector = (m / norms).astype(np.float32)
    return out


class _Cosine:
    """Cosine similarity (float64) to one query vector, whose cast and norm are computed once."""

    __slots__ = ("_norm", "_q")

    def __init__(self, query: Vector) -> None:
        self._q = query.astype(np.float64)
        self._norm = float(np.linalg.norm(self._q))

    def __call__(self, a: Vector) -> float:
        a64 = a.astype(np.float64)
        na = float(np.linalg.norm(a64))
        if na == 0 or self._norm == 0:
            return 0.0
        return float(np.dot(a64, self._q) / (na * self._norm))
