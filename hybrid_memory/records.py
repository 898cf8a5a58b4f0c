"""Records that cross the public API: memories, recall hits, fused contexts, write outcomes.

All timestamps are timezone-aware UTC. A naive ``datetime`` given by a caller is rejected with
:class:`~hybrid_memory.errors.InvalidInputError` (we never guess a local time zone).

Example:
    >>> from hybrid_memory.records import MemoryRecord
    >>> r = MemoryRecord.create(user_id="alice", content="I prefer green tea")
    >>> r.status, r.category, r.created_at.tzinfo is not None
    ('active', 'fact', True)
    >>> r.id == MemoryRecord.create(user_id="alice", content="I  prefer green tea ").id
    True
"""

from __future__ import annotations

import math
import unicodedata
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hybrid_memory.errors import InvalidInputError

__all__ = [
    "Category",
    "ForgetCount",
    "FusedContext",
    "MemoryRecord",
    "RecallHit",
    "Role",
    "Source",
    "Status",
    "Turn",
    "WriteOutcome",
    "check_not_future",
    "ensure_utc",
    "memory_id",
    "normalize_content",
    "utcnow",
]

Category = Literal["fact", "preference", "project", "temporary", "summary", "turn"]
Source = Literal["user", "assistant", "inferred", "system", "import"]
Status = Literal["active", "superseded", "archived", "deleted"]
Role = Literal["user", "assistant", "system", "tool"]

#: Namespace of deterministic memory ids (uuid5 of user id + normalised content).
MEMORY_NAMESPACE = uuid.UUID("6f1b8a7e-4c1d-5b0e-9f3a-2d7c8e5a1b90")
#: Largest text a single memory may hold (characters); longer input is rejected, not truncated.
MAX_CONTENT_CHARS = 100_000
#: Longest accepted user/session id.
MAX_ID_CHARS = 256
#: Largest ``access_count`` / ``version``: 2**53 - 1, the largest integer that SQLite (int64),
#: Weaviate and every JSON reader (float64) keep exactly, with room left for increments.
MAX_COUNTER = 2**53 - 1


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def ensure_utc(value: datetime, *, name: str = "timestamp") -> datetime:
    """Return ``value`` converted to UTC; reject naive datetimes.

    Args:
        value: An aware datetime.
        name: The argument name used in the error message.

    Raises:
        InvalidInputError: ``value`` is naive or not a datetime.

    Example:
        >>> from datetime import datetime, timedelta, timezone
        >>> ensure_utc(datetime(2024, 1, 1, 8, tzinfo=timezone(timedelta(hours=8)))).hour
        0
    """
    if not isinstance(value, datetime):
        raise InvalidInputError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInputError(
            f"{name} is a naive datetime; pass an aware one, e.g. datetime(..., tzinfo=timezone.utc)"
        )
    return value.astimezone(timezone.utc)


def check_not_future(value: datetime, *, now: datetime, max_skew_seconds: float, name: str = "timestamp") -> datetime:
    """Return ``value`` in UTC when it is at most ``max_skew_seconds`` after ``now``.

    A stored timestamp in the future would keep that memory at recency 1.0 and labelled "today"
    until the date arrives; a little skew is allowed for clocks of different machines.

    Args:
        value: The timestamp being stored (aware).
        now: The memory's current time (aware).
        max_skew_seconds: Tolerance (``writer.max_future_skew_seconds``).
        name: The argument name used in the error message.

    Raises:
        InvalidInputError: ``value`` is naive, not a datetime, or too far in the future.

    Example:
        >>> from datetime import datetime, timezone
        >>> now = datetime(2024, 1, 1, tzinfo=timezone.utc)
        >>> check_not_future(datetime(2024, 1, 1, 0, 4, tzinfo=timezone.utc), now=now, max_skew_seconds=300).minute
        4
        >>> check_not_future(datetime(9999, 1, 1, tzinfo=timezone.utc), now=now, max_skew_seconds=300)
        Traceback (most recent call last):
        ...
        hybrid_memory.errors.InvalidInputError: timestamp 9999-01-01T00:00:00+00:00 is more than 300 s after the current time 2024-01-01T00:00:00+00:00 (writer.max_future_skew_seconds); pass the time it happened
    """
    value = ensure_utc(value, name=name)
    now = ensure_utc(now, name="now")
    try:
        limit = now + timedelta(seconds=max_skew_seconds)
    except OverflowError:  # ``now`` within the skew of datetime.max: nothing can be later
        return value
    if value > limit:
        raise InvalidInputError(
            f"{name} {value.isoformat()} is more than {max_skew_seconds:g} s after the current time "
            f"{now.isoformat()} (writer.max_future_skew_seconds); pass the time it happened"
        )
    return value


def normalize_content(text: str) -> str:
    """Normalise text for identity: NFKC, collapsed whitespace, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def check_text(text: object, *, name: str = "content") -> str:
    """Validate a piece of text given by a caller and return it unchanged.

    Raises:
        InvalidInputError: not a str, empty/whitespace only, NUL bytes, lone surrogates, or
            longer than ``MAX_CONTENT_CHARS``.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"{name} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidInputError(f"{name} is empty")
    if len(text) > MAX_CONTENT_CHARS:
        raise InvalidInputError(f"{name} has {len(text)} characters; the limit is {MAX_CONTENT_CHARS}")
    if "\x00" in text:
        raise InvalidInputError(f"{name} contains a NUL byte")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{name} is not valid Unicode (lone surrogate?)") from exc
    return text


def check_id(value: object, *, name: str = "user_id") -> str:
    """Validate a user or session id.

    Raises:
        InvalidInputError: not a non-empty str without NUL/surrogates, or too long.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInputError(f"{name} is empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"{name} has {len(value)} characters; the limit is {MAX_ID_CHARS}")
    if "\x00" in value:
        raise InvalidInputError(f"{name} contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{name} is not valid Unicode") from exc
    return value


def memory_id(user_id: str, content: str) -> str:
    """Deterministic id of a memory: uuid5 of the user id and the normalised content.

    Example:
        >>> memory_id("u", "Hello  world") == memory_id("u", "Hello world")
        True
    """
    return str(uuid.uuid5(MEMORY_NAMESPACE, f"{user_id}\x1f{normalize_content(content)}"))


#: ``MemoryRecord.metadata`` key naming the turn a memory's ``context`` was cut from (see :class:`MemoryRecord`).
CONTEXT_SOURCE_KEY = "context_of"


class MemoryRecord(BaseModel):
    """One long-term memory.

    The embedding vector is kept by the store, not on the record. ``metadata`` must be
    JSON-serialisable and round-trips unchanged. ``provenance`` lists the ids of the turns (or
    memories) a derived memory was built from.

    ``context`` situates the memory for search without being part of it: for a conversation turn,
    the turn it answers. The keyword (BM25) index reads :attr:`search_text` (context, then
    content); the embedding, deduplication and the injected text use ``content`` only. A memory
    whose context was cut from a turn of its session's log names that turn's id in
    ``metadata[CONTEXT_SOURCE_KEY]``: when the turn leaves the log (a forget, an edit), the
    context goes too, also from a write still queued for replay.

    Example:
        >>> from datetime import datetime, timezone
        >>> from hybrid_memory import MemoryRecord
        >>> r = MemoryRecord.create(user_id="alice", content="I am vegetarian", category="preference",
        ...                         timestamp=datetime(2024, 5, 1, tzinfo=timezone.utc))
        >>> r.user_id, r.category, r.status, r.importance, r.created_at.isoformat()
        ('alice', 'preference', 'active', 0.5, '2024-05-01T00:00:00+00:00')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    user_id: str
    content: str
    session_id: str | None = None
    category: Category = "fact"
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    source: Source = "user"
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None = None
    access_count: int = Field(default=0, ge=0, le=MAX_COUNTER)
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: Status = "active"
    version: int = Field(default=1, ge=1, le=MAX_COUNTER)
    supersedes: str | None = None
    superseded_by: str | None = None
    provenance: tuple[str, ...] = ()
    context: str = ""

    @property
    def search_text(self) -> str:
        """What the keyword index reads: ``context`` (when set) and ``content``, a line apart."""
        return f"{self.context}\n{self.content}" if self.context else self.content

    @property
    def context_source(self) -> str | None:
        """The id of the turn ``context`` was cut from (``metadata[CONTEXT_SOURCE_KEY]``); ``None``: no context, or none named."""
        source = self.metadata.get(CONTEXT_SOURCE_KEY)
        return source if self.context and isinstance(source, str) else None

    @field_validator("context")
    @classmethod
    def _context_ok(cls, v: str) -> str:
        return check_text(v, name="context") if v else v

    @field_validator("created_at", "updated_at", "last_accessed_at")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        if v is None:
            return None
        if v.tzinfo is None or v.tzinfo.utcoffset(v) is None:
            raise ValueError("naive datetime; timestamps must be timezone-aware (UTC)")
        return v.astimezone(timezone.utc)

    @field_validator("importance")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("importance must be finite")
        return v

    @classmethod
    def create(
        cls,
        *,
        user_id: str,
        content: str,
        id: str | None = None,
        timestamp: datetime | None = None,
        **fields: Any,
    ) -> MemoryRecord:
        """Build a validated record, filling id and timestamps.

        Raises:
            InvalidInputError: a field is invalid (the message says which).
        """
        check_id(user_id)
        check_text(content)
        ts = ensure_utc(timestamp) if timestamp is not None else utcnow()
        try:
            return cls(
                id=id or memory_id(user_id, content),
                user_id=user_id,
                content=content,
                created_at=fields.pop("created_at", ts),
                updated_at=fields.pop("updated_at", ts),
                **fields,
            )
        except ValidationError as exc:
            raise InvalidInputError(_first_error(exc)) from exc

    def evolve(self, **changes: Any) -> MemoryRecord:
        """Return a copy with ``changes`` applied and validated."""
        try:
            return type(self).model_validate({**self.model_dump(), **changes})
        except ValidationError as exc:
            raise InvalidInputError(_first_error(exc)) from exc

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-ready dict (ISO-8601 timestamps)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> MemoryRecord:
        """Inverse of :meth:`to_json_dict`.

        Raises:
            InvalidInputError: the data does not describe a valid record.
        """
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise InvalidInputError(_first_error(exc)) from exc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg', 'invalid value')}" if loc else str(err.get("msg"))


class RecallHit(BaseModel):
    """A recalled memory with its final score and every score component.

    ``score = max(0, w_rel·relevance + w_imp·importance + w_rec·recency + w_heat·heat +
    w_time·time_match - w_length·(1 - length_prior))``. ``relevance`` is the fused hybrid score
    (relativeScoreFusion: 0..1, where alpha 1.0 = pure vector, 0.0 = pure keyword/BM25); ``keyword_score`` is the raw BM25 score (``None`` when the
    keyword leg did not find it) and ``vector_similarity`` the cosine similarity to the query (for
    a :class:`~hybrid_memory.embeddings.ConcatEmbedder` with ``cross_script``, the cosine of that
    part: the one its relevance floor and gate read).
    """

    model_config = ConfigDict(frozen=True)

    record: MemoryRecord
    score: float
    relevance: float
    keyword_score: float | None = None
    vector_similarity: float | None = None
    importance: float
    recency: float
    heat: float
    time_match: float = 0.0
    length_prior: float = 1.0

    @property
    def id(self) -> str:
        """The memory id."""
        return self.record.id

    @property
    def content(self) -> str:
        """The memory text."""
        return self.record.content

    def components(self) -> dict[str, float | None]:
        """Every score component by name (for display and document metadata)."""
        return {
            "score": self.score,
            "relevance": self.relevance,
            "keyword_score": self.keyword_score,
            "vector_similarity": self.vector_similarity,
            "importance": self.importance,
            "recency": self.recency,
            "heat": self.heat,
            "time_match": self.time_match,
            "length_prior": self.length_prior,
        }


class FusedContext(BaseModel):
    """The block of long-term memories to put into a prompt.

    ``text`` is empty when injection was skipped; ``skipped_reason`` then says why. ``degraded``
    is true when long-term memory was unavailable and only short-term memory was used.
    ``token_counter`` names what counted ``token_count``: ``"tiktoken:<encoding>"`` (exact) or
    ``"approx"`` (tiktoken's files not available offline; see :mod:`hybrid_memory.tokens`);
    ``"unknown"`` when the context was not built by a :class:`~hybrid_memory.fusion.ContextFuser`.
    """

    model_config = ConfigDict(frozen=True)

    text: str
    token_count: int
    hits: tuple[RecallHit, ...] = ()
    skipped: bool = False
    skipped_reason: str | None = None
    dropped: tuple[tuple[str, str], ...] = ()
    degraded: bool = False
    token_counter: str = "unknown"

    def __bool__(self) -> bool:
        return bool(self.text)


class Turn(BaseModel):
    """One conversation turn in the short-term buffer."""

    model_config = ConfigDict(frozen=True)

    id: str
    user_id: str
    session_id: str
    role: Role
    content: str
    timestamp: datetime
    importance: float = 0.0
    key_frame: bool = False
    #: Why the turn is a key frame: ``remember``, ``constraint``, ``preference``, ``goal``,
    #: ``change`` or ``importance`` (at or above ``buffer.key_frame_importance``); ``None`` otherwise.
    key_frame_reason: str | None = None
    tokens: int = 0
    scoring_note: str | None = None
    #: Position in the session's durable turn log (assigned by the store; 0 before it is stored).
    seq: int = 0


WriteAction = Literal["added", "deduplicated", "superseded", "demoted", "rejected", "updated"]


class WriteOutcome(BaseModel):
    """What a write did. ``record`` is the stored (or matched) memory, if any.

    ``notes`` records anything else worth knowing, e.g. that the importance came from the
    heuristic scorer because the LLM scorer failed.
    """

    model_config = ConfigDict(frozen=True)

    action: WriteAction
    record: MemoryRecord | None = None
    reason: str | None = None
    related_id: str | None = None
    notes: tuple[str, ...] = ()


class ForgetCount(int):
    """How many memories a forget deleted, and whether their text is already gone from disk.

    An ``int`` (the count, as before), so existing callers keep working; ``wipe_pending`` is True
    when a reader in another connection pinned the store's files and an old copy of the deleted
    text is still on disk. The store finishes the wipe by itself once that reader has left (next
    write or open of the file), or call ``HybridMemory.finish_wipe()``; see
    :attr:`hybrid_memory.stores.local.LocalStore.wipe_pending`.

    Example:
        >>> n = ForgetCount(3, wipe_pending=True)
        >>> n == 3, n + 1, n.wipe_pending
        (True, 4, True)
    """

    wipe_pending: bool

    def __new__(cls, count: int, *, wipe_pending: bool = False) -> ForgetCount:  # noqa: D102
        self = super().__new__(cls, count)
        self.wipe_pending = bool(wipe_pending)
        return self
