"""``HybridMemoryBlock``: hybrid-memory as a long-term block of LlamaIndex's ``Memory``."""

from __future__ import annotations

from itertools import groupby
from typing import Any, Literal

from pydantic import Field, field_validator

from hybrid_memory.memory import HybridMemory, require_core
from hybrid_memory.records import check_id
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.write.sources import source_turns, turn_source
from llamaindex_hybrid_memory._messages import core_role, message_text, query_text

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import BaseMemoryBlock
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from hybrid_memory.errors import MissingDependencyError

    raise MissingDependencyError("llama-index-core", "llamaindex") from exc

__all__ = ["DEFAULT_SESSION_ID", "HybridMemoryBlock"]

#: Session recorded for flushed messages that carry no ``session_id`` (a direct ``block.aput``).
DEFAULT_SESSION_ID = "default"


class HybridMemoryBlock(BaseMemoryBlock[str]):
    """A ``BaseMemoryBlock[str]`` that stores a session's turns in hybrid-memory and recalls them.

    Writing takes two paths, both through the core's turn write path (importance scoring with
    the speaker's role, key-frame detection, PII redaction, dedup):

    * **Each new user message**, when ``Memory`` reads the block (``Memory.aget`` hands every
      block its active history before each LLM call; ``record_user_turns``). The core scores it
      and writes key frames (preferences, constraints, changes, explicit "remember") to
      long-term memory at once, so a fact stated in a short session is recalled by the next
      one. ``Memory`` itself would hand the block nothing in a short session: it only flushes
      when its history outgrows ``token_limit × chat_history_token_ratio``.
    * **Flushed batches**: when ``Memory`` flushes its oldest messages, the block writes them
      (assistant replies included; user messages already recorded are not added twice) with
      their ``session_id`` and role, then closes the core's window of that session, so the
      core's window holds what ``Memory`` still has in its chat history.

    Every turn the core accepts is durable and, above the small-talk gate, in long-term memory
    when ``add_turn`` returns, so nothing waits for the session to end.

    On every ``Memory.aget`` the block returns the long-term memories fused for the latest user
    message (``""`` when nothing relevant is remembered), which ``Memory`` puts into its system
    message. The core comes first, positionally or as ``memory=``.

    The block holds no per-session or per-user state: the session comes with each call
    (``session_id`` from ``Memory``), the user is fixed at construction, so one block per user
    can serve any number of sessions. With ``scope="user"`` (default) every session of the user
    sees the user's long-term memories: that is cross-session memory. ``scope="session"`` limits
    recall to memories written in the calling session, like LlamaIndex's ``VectorMemoryBlock``
    (without its bug of keeping the first session's filter).

    Notes:
        ``Memory`` only flushes when its history outgrows the limit (about 21,000 tokens with
        the defaults); size ``token_limit`` to your model. Under token pressure ``Memory`` truncates blocks
        in *ascending* ``priority`` (1 goes before 2) and never truncates ``priority=0``; this
        block caps itself with ``max_tokens`` instead of truncating. Do not use this block and
        :class:`~llamaindex_hybrid_memory.HybridAgentMemory` for the same user and session: the
        block borrows that session's short-term buffer while it writes.

    Setup:
        ``pip install 'hybrid-memory[llamaindex]'``

    Instantiate (``Memory`` keeps its short-term queue in SQL; we pass the engine to close it):
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> from llama_index.core.memory import Memory
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from llamaindex_hybrid_memory import HybridMemoryBlock
        >>> core = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> block = HybridMemoryBlock(core, user_id="alice")
        >>> engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        >>> chat = Memory.from_defaults(session_id="monday", token_limit=40, memory_blocks=[block],
        ...                             async_engine=engine)

    Use (an agent does this through ``await agent.run("...", memory=chat)``; ``Memory`` is
    async-first: its sync ``put_messages``/``get`` left an unclosed event loop behind here):
        >>> import asyncio
        >>> from llama_index.core.llms import ChatMessage
        >>> async def session() -> str:
        ...     await chat.aput_messages([
        ...         ChatMessage(role="user", content="My daughter Mia starts school in Lyon in September."),
        ...         ChatMessage(role="assistant", content="Noted, congratulations to Mia!"),
        ...         ChatMessage(role="user", content="Which Lyon school has good art classes?"),
        ...     ])
        ...     messages = await chat.aget()
        ...     await engine.dispose()
        ...     return messages[0].content
        >>> "Mia starts school in Lyon" in asyncio.run(session())
        True
        >>> core.close()
    """

    name: str = Field(default="long_term_memory", description="Block name (the XML tag in Memory's template).")
    description: str | None = Field(
        default="Long-term memories of the user recalled by hybrid-memory (hybrid BM25 + vector search)."
    )
    memory: HybridMemory = Field(exclude=True, description="The hybrid-memory engine (shared, thread-safe).")
    user_id: str = Field(description="Whose memories; recall never crosses users.")
    scope: Literal["user", "session"] = Field(
        default="user", description="'user': all of the user's sessions; 'session': only the calling session."
    )
    max_tokens: int | None = Field(
        default=None, ge=0, description="Cap on the returned block; None uses the core's fuser budget."
    )
    query_window: int = Field(
        default=1,
        ge=1,
        description="Messages (with text) forming the recall query: the latest user message and those before it.",
    )
    record_user_turns: bool = Field(
        default=True,
        description="Record each new user message through the core's add_turn when Memory reads the block "
        "(key frames reach long-term memory at once, even in sessions too short for Memory to flush).",
    )

    def __init__(self, memory: HybridMemory, **data: Any) -> None:
        super().__init__(memory=require_core(memory, type(self).__name__), **data)  # type: ignore[call-arg]

    @field_validator("user_id")
    @classmethod
    def _check_user(cls, value: str) -> str:
        return check_id(value)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The fused long-term context for the latest messages; ``""`` when nothing is relevant."""
        session_id = block_kwargs.get("session_id")
        if session_id is not None and not isinstance(session_id, str):
            session_id = str(session_id)
        if self.record_user_turns and session_id is not None:
            await self._record_latest_user_turn(messages, session_id)
        query = query_text(messages, self.query_window)
        if not query or (self.scope == "session" and session_id is None):
            return ""
        # A fresh filter per call: nothing of one call survives into the next.
        scoped = MemoryFilter(session_id=session_id) if self.scope == "session" else None
        # Short-term dedup against the core's window of this session: the turns recorded since
        # the last flush are in Memory's chat history (the question never hides what answers it).
        context = await self.memory.abuild_context(
            query, user_id=self.user_id, session_id=session_id, max_tokens=self.max_tokens, filter=scoped
        )
        return context.text

    def _recorded_user_texts(self, session_id: str) -> set[str]:
        """Texts of the user turns in the core's short-term buffer of the session (in memory, no IO)."""
        return {t.content for t in self.memory.short_term(self.user_id, session_id) if t.role == "user"}

    async def _record_latest_user_turn(self, messages: list[ChatMessage] | None, session_id: str) -> None:
        """Record the latest user message of ``Memory``'s history unless it is the newest one recorded.

        ``Memory`` reads the blocks several times per user message (every LLM call of an agent
        run); only the first read records it.
        """
        latest = next(
            (
                t
                for m in reversed(messages or [])
                if core_role(m) == "user"
                for t in (message_text(m),)
                if t and turn_source("user", t)[1]  # the user's own words, not a ReAct "Observation:"
            ),
            None,
        )
        if latest is None:
            return
        turns = self.memory.short_term(self.user_id, session_id)
        newest = next((t.content for t in reversed(turns) if t.role == "user"), None)
        if newest != latest:
            await self.memory.aadd_turn(self.user_id, session_id, "user", latest)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Write flushed messages through the core's turn write path.

        Only the user's own words may become long-term memories; assistant replies, tool output,
        system prompts and ReAct scaffolding (also when an agent sends it as a user message) join
        the session's window as conversation context only (``add_turn(..., long_term=False)``).
        """
        items = []
        for m in messages:
            text = message_text(m)
            if text:
                sid = m.additional_kwargs.get("session_id")
                items.append((sid if isinstance(sid, str) and sid.strip() else DEFAULT_SESSION_ID, core_role(m), text))
        for session_id, group in groupby(items, key=lambda x: x[0]):
            recorded = self._recorded_user_texts(session_id)
            for role, text, long_term in source_turns((role, text) for _, role, text in group):
                if role == "user" and text in recorded:
                    continue  # recorded (and written) when Memory read the block
                await self.memory.aadd_turn(self.user_id, session_id, role, text, long_term=long_term)
            # The flushed turns left Memory's chat history: they leave the core's window of the
            # session too (they are in long-term memory), so recall may bring them back.
            await self.memory.aend_session(self.user_id, session_id)
