"""``HybridMemoryBlock``: hybrid-memory as a long-term block of LlamaIndex's ``Memory``."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from itertools import groupby
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator

from hybrid_memory.memory import HybridMemory, require_core
from hybrid_memory.read.context import CLOSE, OPEN
from hybrid_memory.read.placement import BlockLedger, is_stable, place
from hybrid_memory.records import FusedContext, check_id
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.write.sources import source_turns, turn_source
from llamaindex_hybrid_memory._messages import core_role, message_text, query_text

try:
    from llama_index.core.base.llms.types import ChatMessage, ContentBlock, TextBlock
    from llama_index.core.memory import BaseMemoryBlock
    from llama_index.core.memory.memory import DEFAULT_MEMORY_BLOCKS_TEMPLATE
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from hybrid_memory.errors import MissingDependencyError

    raise MissingDependencyError("llama-index-core", "llamaindex") from exc

__all__ = ["DEFAULT_SESSION_ID", "HybridMemoryBlock"]

#: Session recorded for flushed messages that carry no ``session_id`` (a direct ``block.aput``).
DEFAULT_SESSION_ID = "default"

#: Sessions whose placed blocks one block keeps (least recently read dropped first).
_MAX_SESSIONS = 1024


def _is_block(part: object) -> bool:
    """Whether a message part is a rendered memory block (put there by ``Memory`` or this block)."""
    return isinstance(part, TextBlock) and OPEN in part.text and CLOSE in part.text


def _without_blocks(messages: Sequence[ChatMessage] | None) -> list[ChatMessage]:
    """``messages`` as the user wrote them: user messages without a block placed in them."""
    out = []
    for m in messages or ():
        if m.blocks and _is_block(m.blocks[0]):
            m = m.model_copy(update={"blocks": m.blocks[1:]})
        out.append(m)
    return out


def _user_anchors(messages: Sequence[ChatMessage]) -> list[tuple[int, str]]:
    """``(index, anchor)`` of the user messages with text; the anchor names a message across reads.

    LlamaIndex messages carry no id, so the anchor is a digest of the text and its occurrence
    (the second "yes" of a conversation is not the first). ``Memory.aget(input=...)`` appends
    the input as one more user message (an agent's handoff passes the message it already put):
    it is a message of its own, whose block leaves out what the history's blocks show.
    """
    counts: dict[str, int] = {}
    out: list[tuple[int, str]] = []
    for index, m in enumerate(_without_blocks(messages)):
        text = message_text(m)
        if core_role(m) != "user" or not text:
            continue
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        counts[digest] = counts.get(digest, 0) + 1
        out.append((index, f"{digest}#{counts[digest]}"))
    return out


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
    message (``""`` when nothing relevant is remembered), which ``Memory`` places: into its system
    message (``InsertMethod.SYSTEM``, Memory's default) or in front of the newest user message
    (``InsertMethod.USER``). The core comes first, positionally or as ``memory=``.

    Prefix caching: ``Memory`` keeps no block in its history, so with ``InsertMethod.USER`` the
    block of the previous turn would vanish and everything from that turn on would be processed
    again. With a stable ``fuser.placement`` of the core (``"user_message"``, the default, or
    ``"before_user"``) the block therefore keeps, per session, which block went with which user
    message (in process) and puts the earlier ones back into the messages ``Memory`` hands it, as
    Memory's default template rendered them: with ``InsertMethod.USER`` the previous call's whole
    prompt is a prefix of the next call's. A memory an earlier block still shows is not repeated
    (a later block holds only what is new, without a header of its own), and every read for the same
    user message (each LLM call of an agent run) returns the same text. With a custom
    ``memory_blocks_template`` or other text blocks in the same ``Memory`` the earlier blocks are
    still shown, only not byte for byte; with ``"system_start"`` / ``"system_end"`` the block
    returns the whole fused context each time and keeps nothing (the old behaviour).

    Apart from those placed blocks the block holds no per-session or per-user state: the session
    comes with each call (``session_id`` from ``Memory``), the user is fixed at construction, so
    one block per user can serve any number of sessions. With ``scope="user"`` (default) every
    session of the user sees the user's long-term memories: that is cross-session memory.
    ``scope="session"`` limits recall to memories written in the calling session, like
    LlamaIndex's ``VectorMemoryBlock`` (without its bug of keeping the first session's filter).

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

    _ledgers: OrderedDict[str, BlockLedger] = PrivateAttr(default_factory=OrderedDict)

    def __init__(self, memory: HybridMemory, **data: Any) -> None:
        super().__init__(memory=require_core(memory, type(self).__name__), **data)  # type: ignore[call-arg]

    @field_validator("user_id")
    @classmethod
    def _check_user(cls, value: str) -> str:
        return check_id(value)

    def _in_place(self) -> bool:
        """Whether blocks stay with the user message they were first shown with (stable placements)."""
        return is_stable(self.memory.config.fuser.placement)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The fused long-term context for the latest messages; ``""`` when nothing is relevant.

        With a stable ``fuser.placement`` this is the block placed with the newest user message
        (only what earlier blocks do not show), and the earlier blocks are put back into
        ``messages`` (see the class docstring).
        """
        session_id = block_kwargs.get("session_id")
        if session_id is not None and not isinstance(session_id, str):
            session_id = str(session_id)
        if self.record_user_turns and session_id is not None:
            await self._record_latest_user_turn(messages, session_id)
        query = query_text(_without_blocks(messages), self.query_window)
        if not query or (self.scope == "session" and session_id is None):
            return ""
        anchors = _user_anchors(messages) if self._in_place() and messages else []
        if anchors:
            ledger = await self._placed(anchors, query, session_id)
            self._show_earlier(messages or [], anchors[:-1], ledger)
            return ledger.block_for(anchors[-1][1]) or ""
        return (await self._context(query, session_id)).text

    async def _context(self, query: str, session_id: str | None) -> FusedContext:
        """The core's fused context for ``query`` (scope filter, short-term dedup, token cap)."""
        # A fresh filter per call: nothing of one call survives into the next.
        scoped = MemoryFilter(session_id=session_id) if self.scope == "session" else None
        # Short-term dedup against the core's window of this session: the turns recorded since
        # the last flush are in Memory's chat history (the question never hides what answers it).
        return await self.memory.abuild_context(
            query, user_id=self.user_id, session_id=session_id, max_tokens=self.max_tokens, filter=scoped
        )

    async def _placed(self, anchors: list[tuple[int, str]], query: str, session_id: str | None) -> BlockLedger:
        """The session's blocks after this call: the newest user message gets one unless it has it.

        Every read for the same user message (each LLM call of an agent run) shows the same
        block; a new block leaves out the memories the earlier blocks still in the history show.
        """
        key = session_id if session_id is not None else ""
        live = {anchor for _, anchor in anchors}
        newest = anchors[-1][1]
        ledger = self._ledgers.get(key, BlockLedger()).prune(live)
        if ledger.block_for(newest) is None:
            ledger, _ = place(
                self.memory.fuser,
                ledger,
                await self._context(query, session_id),
                anchor=newest,
                live=live,
                query=query,
                now=self.memory.now(),
                max_tokens=self.max_tokens,
            )
        self._ledgers.pop(key, None)
        if len(ledger):
            self._ledgers[key] = ledger  # most recently used last
            while len(self._ledgers) > _MAX_SESSIONS:
                self._ledgers.popitem(last=False)
        return ledger

    def _show_earlier(self, messages: list[ChatMessage], anchors: list[tuple[int, str]], ledger: BlockLedger) -> None:
        """Put the earlier blocks back into their user messages, as ``Memory`` rendered them there.

        ``Memory`` keeps no block in its history: with ``InsertMethod.USER`` it renders this
        call's text with its template in front of the newest user message only. The block renders
        the earlier ones the same way into the messages ``Memory`` hands it (its own copies for
        this call, which it returns), so they read as when they were first shown.
        """
        for index, anchor in anchors:
            block = ledger.block_for(anchor)
            message = messages[index]
            if block is not None and not (message.blocks and _is_block(message.blocks[0])):
                message.blocks = [*self._rendered(block), *message.blocks]

    def _rendered(self, block: str) -> list[ContentBlock]:
        """``block`` as ``Memory``'s default template renders this block's text."""
        rendered = DEFAULT_MEMORY_BLOCKS_TEMPLATE.format_messages(memory_blocks=[(self.name, [TextBlock(text=block)])])
        return list(rendered[0].blocks) if rendered else [TextBlock(text=block)]

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
                for m in reversed(_without_blocks(messages))
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
