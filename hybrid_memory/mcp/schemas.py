"""What the MCP tools return, and the limits on what they accept (pydantic only, no ``mcp`` import).

The tool results are these models; the MCP SDK publishes their JSON schema as each tool's
``outputSchema`` and sends them as ``structuredContent`` (plus the same JSON as text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hybrid_memory.records import FusedContext, MemoryRecord, RecallHit, Turn, WriteOutcome

__all__ = [
    "MAX_CONTENT_CHARS",
    "MAX_K",
    "MAX_PAGE",
    "MAX_QUERY_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TOKENS",
    "ContextResult",
    "ForgetResult",
    "ForgetTurnResult",
    "ForgetUserResult",
    "MemoryItem",
    "MemoryPage",
    "RecallResult",
    "RememberResult",
    "ScoredMemory",
    "TurnResult",
]

#: Longest memory or turn a tool accepts (characters); longer input is refused, not truncated.
MAX_CONTENT_CHARS = 10_000
#: Longest query (characters).
MAX_QUERY_CHARS = 2_000
#: Most hits one recall returns.
MAX_K = 50
#: Most memories one page of ``list_memories`` holds.
MAX_PAGE = 100
#: Largest token budget of ``build_context``.
MAX_TOKENS = 32_000
#: Most tags on one memory, and the longest tag.
MAX_TAGS = 20
MAX_TAG_CHARS = 64


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class MemoryItem(_Out):
    """One long-term memory of the connected user."""

    memory_id: str = Field(description="Stable id; pass it to `forget`.")
    content: str = Field(description="The memory text (personal data redacted when the server redacts PII).")
    category: str = Field(description="fact, preference, project, temporary, summary or turn.")
    importance: float = Field(description="0..1; how much the memory matters.")
    status: str = Field(description="active, superseded, archived or deleted.")
    created_at: str = Field(description="When it was stated (ISO-8601, UTC).")
    tags: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, r: MemoryRecord) -> MemoryItem:
        """The item for a stored record."""
        return cls(
            memory_id=r.id,
            content=r.content,
            category=r.category,
            importance=r.importance,
            status=r.status,
            created_at=r.created_at.isoformat(),
            tags=list(r.tags),
        )


class ScoredMemory(MemoryItem):
    """A recalled memory with every score component (all 0..1 except ``keyword_score``)."""

    score: float = Field(description="Final re-ranked score (weighted sum of the components).")
    relevance: float = Field(description="Fused hybrid relevance to the query.")
    keyword_score: float | None = Field(description="Raw BM25 score; null when the keyword search missed it.")
    vector_similarity: float | None = Field(description="Cosine similarity of the embeddings.")
    recency: float = Field(description="0.5 ** (age / half-life).")
    heat: float = Field(description="How often it was used, relative to the other candidates.")
    time_match: float = Field(description="How well its date fits a time named in the query.")
    length_prior: float = Field(
        description="How much a conversation turn says, 0..1 (1.0 for a memory stated on purpose); a short "
        "turn loses rerank.w_length times (1 - this) of its score."
    )

    @classmethod
    def of_hit(cls, h: RecallHit) -> ScoredMemory:
        """The scored item for a recall hit."""
        base = MemoryItem.of(h.record).model_dump()
        base["importance"] = h.importance
        return cls(
            **base,
            score=h.score,
            relevance=h.relevance,
            keyword_score=h.keyword_score,
            vector_similarity=h.vector_similarity,
            recency=h.recency,
            heat=h.heat,
            time_match=h.time_match,
            length_prior=h.length_prior,
        )


class RememberResult(_Out):
    """What a `remember` did."""

    action: Literal["added", "deduplicated", "superseded", "demoted", "rejected", "updated"] = Field(
        description="added; deduplicated (an equivalent memory existed); superseded (it replaced a contradicting "
        "older one); demoted (kept as temporary); rejected (not important enough or refused, see reason)."
    )
    memory: MemoryItem | None = Field(description="The stored (or matched) memory.")
    reason: str | None = None
    related_id: str | None = Field(default=None, description="The memory it deduplicated against or replaced.")

    @classmethod
    def of(cls, o: WriteOutcome) -> RememberResult:
        """The result for a write outcome."""
        return cls(
            action=o.action,
            memory=MemoryItem.of(o.record) if o.record is not None else None,
            reason=o.reason,
            related_id=o.related_id,
        )


class RecallResult(_Out):
    """The best memories for a query, best first."""

    query: str
    hits: list[ScoredMemory]

    @classmethod
    def of(cls, query: str, hits: Sequence[RecallHit]) -> RecallResult:
        """The result for ``hits``."""
        return cls(query=query, hits=[ScoredMemory.of_hit(h) for h in hits])


class ContextResult(_Out):
    """A block of relevant memories to put into a prompt, under a token budget."""

    text: str = Field(description="The block; empty when nothing relevant was found (see skipped_reason).")
    token_count: int
    skipped: bool
    skipped_reason: str | None = None
    memory_ids: list[str] = Field(description="The memories in the block, in order.")

    @classmethod
    def of(cls, ctx: FusedContext) -> ContextResult:
        """The result for a fused context."""
        return cls(
            text=ctx.text,
            token_count=ctx.token_count,
            skipped=ctx.skipped,
            skipped_reason=ctx.skipped_reason,
            memory_ids=[h.id for h in ctx.hits],
        )


class TurnResult(_Out):
    """A conversation turn added to the session's short-term memory."""

    turn_id: str
    session_id: str
    importance: float = Field(description="0..1 as scored.")
    key_frame: bool = Field(description="True when the turn was important enough to be kept long-term at once.")
    key_frame_reason: str | None = None
    logged: bool = Field(
        default=True,
        description="False for a retry of a turn that was forgotten since: nothing was stored.",
    )

    @classmethod
    def of(cls, t: Turn) -> TurnResult:
        """The result for a turn."""
        return cls(
            turn_id=t.id,
            session_id=t.session_id,
            importance=t.importance,
            key_frame=t.key_frame,
            key_frame_reason=t.key_frame_reason,
            logged=t.seq > 0,
        )


class ForgetResult(_Out):
    """Whether a memory was deleted."""

    memory_id: str
    deleted: bool = Field(description="False when no memory of yours has this id.")


class ForgetTurnResult(_Out):
    """Whether anything of a conversation turn was still there to forget."""

    turn_id: str
    session_id: str
    deleted: bool = Field(description="False when no turn of yours with this id is in that conversation.")


class MemoryPage(_Out):
    """One page of the connected user's memories, oldest first."""

    memories: list[MemoryItem]
    offset: int
    total: int = Field(description="How many memories match in all.")
    next_offset: int | None = Field(description="Pass it as `offset` for the next page; null on the last page.")


class ForgetUserResult(_Out):
    """Everything of the connected user was deleted."""

    deleted_memories: int
