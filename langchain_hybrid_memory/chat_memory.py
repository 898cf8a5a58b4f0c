"""``HybridChatMemory``: hybrid-memory as the ``memory=`` of legacy LangChain chains."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_classic.memory.chat_memory import BaseChatMemory
from langchain_classic.memory.utils import get_prompt_input_key
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, get_buffer_string
from pydantic import ConfigDict, Field, PrivateAttr

from hybrid_memory.memory import HybridMemory
from hybrid_memory.read.placement import BlockLedger, is_stable, place
from hybrid_memory.records import FusedContext, Turn, check_id, check_text
from hybrid_memory.write.sources import Role, message_turn_id, source_turns
from langchain_hybrid_memory._identity import check_bound_user
from langchain_hybrid_memory._utils import message_text, require_core

__all__ = ["HybridChatMemory"]

_ROLE_OF_TYPE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _turn_to_message(turn: Turn) -> BaseMessage:
    if turn.role == "user":
        return HumanMessage(content=turn.content, id=turn.id)
    if turn.role == "assistant":
        return AIMessage(content=turn.content, id=turn.id)
    if turn.role == "system":
        return SystemMessage(content=turn.content, id=turn.id)
    return ChatMessage(role=turn.role, content=turn.content, id=turn.id)


def _role_of(message: BaseMessage) -> Role:
    role = message.role if isinstance(message, ChatMessage) else _ROLE_OF_TYPE.get(message.type, "user")
    return role if role in ("user", "assistant", "system", "tool") else "user"  # type: ignore[return-value]


class _SessionHistory(BaseChatMessageHistory):
    """The short-term window of one user's session in the core, seen as a message history.

    Reading returns fresh message objects built from the core's key-frame buffer; adding feeds
    :meth:`~hybrid_memory.HybridMemory.add_turn` (importance scoring, key frames, long-term
    writes); clearing drops the short-term window only.
    """

    def __init__(self, memory: HybridMemory, user_id: str, session_id: str) -> None:
        super().__init__()
        self.memory = memory
        self.user_id = user_id
        self.session_id = session_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's short-term window, oldest first (a new list each time)."""
        check_bound_user(self.user_id, "HybridChatMemory")
        return [_turn_to_message(t) for t in self.memory.short_term(self.user_id, self.session_id)]

    async def aget_messages(self) -> list[BaseMessage]:
        check_bound_user(self.user_id, "HybridChatMemory")
        turns = await asyncio.to_thread(self.memory.short_term, self.user_id, self.session_id)
        return [_turn_to_message(t) for t in turns]

    def _turns(self, messages: Sequence[BaseMessage]) -> list[tuple[Role, str, bool, str | None]]:
        """``(role, text, long_term, turn_id)`` of the messages with text, all validated before any is added.

        An AI message that only calls tools carries no text to remember. Validating first keeps
        ``save_context`` atomic: a bad output never leaves the input half-recorded. Only the
        user's own words may become long-term memories (:func:`~hybrid_memory.write.sources.turn_source`):
        AI, tool and system text and ReAct scaffolding are kept as conversation context only.
        A message with an ``id`` gets a turn id derived from the session and that id
        (:func:`~hybrid_memory.write.sources.message_turn_id`), so adding the same message again
        (a retried or resumed run) adds nothing and brings back no turn that was forgotten.
        """
        kept = [(m, _role_of(m), message_text(m)) for m in messages]
        kept = [(m, r, t) for m, r, t in kept if t.strip()]
        for _, _, text in kept:
            check_text(text)
        return [
            (role, text, long_term, message_turn_id(self.session_id, role, m.id))
            for (role, text, long_term), (m, _, _) in zip(source_turns([(r, t) for _, r, t in kept]), kept, strict=True)
        ]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        check_bound_user(self.user_id, "HybridChatMemory")
        for role, text, long_term, turn_id in self._turns(messages):
            self.memory.add_turn(self.user_id, self.session_id, role, text, long_term=long_term, turn_id=turn_id)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        check_bound_user(self.user_id, "HybridChatMemory")
        for role, text, long_term, turn_id in self._turns(messages):
            await self.memory.aadd_turn(self.user_id, self.session_id, role, text, long_term=long_term, turn_id=turn_id)

    def clear(self) -> None:
        check_bound_user(self.user_id, "HybridChatMemory")
        self.memory.clear_session(self.user_id, self.session_id)

    async def aclear(self) -> None:
        check_bound_user(self.user_id, "HybridChatMemory")
        await asyncio.to_thread(self.memory.clear_session, self.user_id, self.session_id)


class HybridChatMemory(BaseChatMemory):
    """Short-term window plus fused long-term memories for ``ConversationChain`` / ``LLMChain``.

    Memory variables:

    * ``memory_key`` (default ``"history"``): the session's short-term window from the core's
      key-frame buffer, as messages (``return_messages=True``) or a ``Human: ... / AI: ...``
      string. Always a fresh copy.
    * ``long_term_key`` (default ``None``): the fused long-term context for the current input
      (:meth:`~hybrid_memory.HybridMemory.build_context`; ``""`` when nothing relevant). Set it,
      e.g. to ``"long_term"``, and put ``{long_term}`` in your prompt where you want it. With
      ``None`` the block goes into the history, so the chains' default prompts work unchanged:
      with the default ``fuser.placement`` (``"user_message"`` or ``"before_user"``) at the
      *end* of the history, right before the new input (a system message, or lines of the
      string; the chain owns the input itself), and every earlier block of this object stays
      where it was, byte for byte, so the prompt's prefix is identical from one call to the
      next (prefix caching) and a memory already shown is not repeated. With
      ``"system_start"`` / ``"system_end"`` it is put in front of the history (the old
      placement). Earlier blocks are kept by this object, in process.

    ``save_context`` feeds both turns to :meth:`~hybrid_memory.HybridMemory.add_turn`, so they are
    scored, durable in the store's turn log and (above the small-talk gate) in long-term memory at
    once: a restarted process or another worker continues the same window, and other sessions
    recall them. ``clear()`` empties this session's short-term window only; long-term memories
    stay (use ``memory.forget_user`` to erase a user). A message added to ``chat_memory`` (the
    history ``RunnableWithMessageHistory`` uses) with an ``id`` gets a turn id derived from it, so
    a retried run records it once, and not again once it was forgotten.

    The core comes first, positionally or as ``memory=`` (as in every adapter of this package).

    Setup:
        ``pip install 'hybrid-memory[langchain]'``

    Instantiate and use:
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> chat_memory = HybridChatMemory(mem, user_id="alice", session_id="s1", long_term_key="long_term")
        >>> chat_memory.memory_variables
        ['history', 'long_term']
        >>> chat_memory.save_context({"input": "Remember: I am allergic to peanuts"}, {"output": "Noted."})
        >>> later = HybridChatMemory(mem, user_id="alice", session_id="s2", long_term_key="long_term")
        >>> out = later.load_memory_variables({"input": "Can I eat peanuts?"})
        >>> out["history"], "allergic to peanuts" in out["long_term"]
        ('', True)
        >>> mem.close()
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: HybridMemory = Field(description="The hybrid-memory core (one core serves many users and adapters).")
    user_id: str = Field(description="Whose conversation this is.")
    session_id: str = Field(description="The conversation; one short-term window per user and session.")
    memory_key: str = Field(default="history", description="Variable holding the short-term window.")
    long_term_key: str | None = Field(
        default=None, description="Variable holding the fused long-term context; None = prepend it to the history."
    )
    human_prefix: str = "Human"
    ai_prefix: str = "AI"
    max_tokens: int | None = Field(default=None, ge=0, description="Token cap for the long-term block.")
    _ledger: BlockLedger = PrivateAttr(default_factory=BlockLedger)

    def __init__(self, memory: HybridMemory, *, user_id: str, session_id: str, **data: Any) -> None:
        memory = require_core(memory, type(self).__name__)
        check_id(user_id)
        check_id(session_id, name="session_id")
        super().__init__(  # type: ignore[call-arg]
            memory=memory,
            user_id=user_id,
            session_id=session_id,
            chat_memory=_SessionHistory(memory, user_id, session_id),
            **data,
        )

    @property
    def memory_variables(self) -> list[str]:
        """``[memory_key]``, plus ``long_term_key`` when set."""
        return [self.memory_key] if self.long_term_key is None else [self.memory_key, self.long_term_key]

    def _query(self, inputs: dict[str, Any]) -> str | None:
        key = self.input_key if self.input_key is not None else get_prompt_input_key(inputs, self.memory_variables)
        value = inputs.get(key)
        return value if isinstance(value, str) and value.strip() else None

    def _in_place(self) -> bool:
        """Whether blocks go into the history where they were first shown (stable placements)."""
        return self.long_term_key is None and is_stable(self.memory.config.fuser.placement)

    def _place(self, messages: list[BaseMessage], ctx: FusedContext | None, query: str) -> FusedContext | None:
        """Keep this call's block with the end of ``messages``; drop memories shown earlier."""
        if ctx is None:
            return None
        anchor = messages[-1].id or "" if messages else ""
        live = {"", *(m.id for m in messages if m.id is not None)}
        self._ledger, ctx = place(
            self.memory.fuser,
            self._ledger,
            ctx,
            anchor=anchor,
            live=live,
            query=query,
            now=self.memory.now(),
            max_tokens=self.max_tokens,
        )
        return ctx

    def _render_in_place(self, messages: list[BaseMessage]) -> Any:
        """The history with every block after the message it followed (at the start for ``""``)."""
        parts: list[BaseMessage] = []
        first = self._ledger.block_for("")
        if first is not None:
            parts.append(SystemMessage(content=first))
        for m in messages:
            parts.append(m)
            block = self._ledger.block_for(m.id)
            if block is not None:
                parts.append(SystemMessage(content=block))
        if self.return_messages:
            return parts
        return "\n".join(p.text if p.id is None and isinstance(p, SystemMessage) else self._line(p) for p in parts)

    def _line(self, message: BaseMessage) -> str:
        return get_buffer_string([message], human_prefix=self.human_prefix, ai_prefix=self.ai_prefix)

    def _render(self, messages: list[BaseMessage], ctx: FusedContext | None) -> dict[str, Any]:
        if self._in_place():
            return {self.memory_key: self._render_in_place(messages)}
        block = ctx.text if ctx is not None else ""
        history: Any
        if self.return_messages:
            history = messages
            if self.long_term_key is None and block:
                history = [SystemMessage(content=block), *messages]
        else:
            history = get_buffer_string(messages, human_prefix=self.human_prefix, ai_prefix=self.ai_prefix)
            if self.long_term_key is None and block:
                history = f"{block}\n{history}" if history else block
        out = {self.memory_key: history}
        if self.long_term_key is not None:
            out[self.long_term_key] = block
        return out

    def clear(self) -> None:
        """Empty this session's short-term window (long-term memories stay) and forget the placed blocks."""
        super().clear()
        self._ledger = BlockLedger()

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        await super().aclear()
        self._ledger = BlockLedger()

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Return the short-term window and the long-term context for ``inputs``' user message."""
        check_bound_user(self.user_id, type(self).__name__)
        query = self._query(inputs)
        ctx = (
            self.memory.build_context(
                query, user_id=self.user_id, session_id=self.session_id, max_tokens=self.max_tokens
            )
            if query is not None
            else None
        )
        messages = self.chat_memory.messages
        if self._in_place() and query is not None:
            ctx = self._place(messages, ctx, query)
        return self._render(messages, ctx)

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`load_memory_variables`."""
        check_bound_user(self.user_id, type(self).__name__)
        query = self._query(inputs)
        ctx = (
            await self.memory.abuild_context(
                query, user_id=self.user_id, session_id=self.session_id, max_tokens=self.max_tokens
            )
            if query is not None
            else None
        )
        messages = await self.chat_memory.aget_messages()
        if self._in_place() and query is not None:
            ctx = self._place(messages, ctx, query)
        return self._render(messages, ctx)
