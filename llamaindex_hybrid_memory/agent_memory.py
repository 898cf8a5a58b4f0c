"""``HybridAgentMemory``: hybrid-memory as the ``memory=`` of a LlamaIndex agent."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator

from hybrid_memory.errors import ConfigurationError
from hybrid_memory.memory import HybridMemory, require_core
from hybrid_memory.read.placement import BlockLedger, is_stable, place, prepend_block
from hybrid_memory.records import FusedContext, Turn, check_id
from hybrid_memory.write.sources import Role, turn_source
from llamaindex_hybrid_memory._messages import core_role, message_text, turn_to_message

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.llms.llm import LLM
    from llama_index.core.memory import BaseMemory
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from hybrid_memory.errors import MissingDependencyError

    raise MissingDependencyError("llama-index-core", "llamaindex") from exc

__all__ = ["DEFAULT_TOKEN_LIMIT", "HybridAgentMemory"]

#: Default ``token_limit`` when neither a limit nor an LLM is given (LlamaIndex's own default).
DEFAULT_TOKEN_LIMIT = 3000
#: Tokens a block placed with a user message may add beyond its own and the message's (the join).
_JOIN_TOKENS = 2


class HybridAgentMemory(BaseMemory):
    """LlamaIndex ``BaseMemory`` backed by a :class:`~hybrid_memory.HybridMemory`, for one user and session.

    ``get()``/``aget()`` return the session's short-term window (the core's key-frame buffer,
    oldest first) with the long-term memories fused for the current input, all within
    ``token_limit`` tokens (message text, counted by the core's token counter). The window has
    priority: the oldest turns are cut when it alone exceeds the limit, and the long-term block
    gets what is left (at most ``context_max_tokens``). Nothing is added when nothing relevant is
    remembered. Where the block goes follows ``memory.config.fuser.placement``: by default
    (``"user_message"``) inside the newest user message, before its text (``"before_user"``: a
    system message right before it), and every earlier block of this object stays with its user
    message, byte for byte, so the prompt's prefix is identical from one call to the next (prefix
    caching); a memory already shown in the window is not repeated, and the calls of one agent
    run (one user message) all get the same block. With ``"system_start"`` / ``"system_end"``
    the block is **one** system message before the window (the old placement).

    ``put()``/``aput()`` (and ``put_messages``/``aput_messages``) feed ``add_turn``: every turn is
    durable in the store's turn log and, above the small-talk gate, in long-term memory at once;
    key frames (preferences, constraints, explicit "remember") stay pinned in the window. Only
    text is kept; tool results come
    back as assistant messages labelled ``Tool result:``; a tool-call request without text is not
    stored.

    ``reset()`` empties the session window and leaves long-term memory alone (use
    ``HybridMemory.forget_user`` to erase a user); :meth:`end_session` runs the core's end-of-session
    policy (extraction, summary), then clears the window. ``set()`` replaces the window. ``get_all()`` is the window
    without the long-term block (older turns live in long-term memory).

    Agents only call the async methods, which use the core's async twins. LlamaIndex agents keep
    memory in the workflow ``Context`` without serialising it: pass ``memory=`` on **every**
    ``agent.run(...)``, or a reused ``Context`` silently falls back to a fresh buffer.

    Setup:
        ``pip install 'hybrid-memory[llamaindex]'``

    Instantiate (the core first, positionally or as ``memory=``; ``HybridAgentMemory(core,
    user_id=..., session_id=...)`` works too):
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> from llamaindex_hybrid_memory import HybridAgentMemory
        >>> core = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> memory = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="monday")

    Use (an agent calls the async twins; ``await agent.run("...", memory=memory)``):
        >>> from llama_index.core.llms import ChatMessage
        >>> memory.put(ChatMessage(role="user", content="Remember: I am allergic to peanuts"))
        >>> later = HybridAgentMemory.from_defaults(core, user_id="alice", session_id="friday")
        >>> later.put(ChatMessage(role="user", content="Can I eat peanuts satay?"))
        >>> [m.role.value for m in later.get()]
        ['user']
        >>> "allergic to peanuts" in later.get()[0].content
        True
        >>> core.close()
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: HybridMemory = Field(exclude=True, description="The hybrid-memory engine (shared, thread-safe).")
    user_id: str = Field(description="Whose memory this is; recall never crosses users.")
    session_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex, description="The conversation whose window this memory holds."
    )
    token_limit: int = Field(
        default=DEFAULT_TOKEN_LIMIT, ge=1, description="Token cap on everything get() returns (message text)."
    )
    context_max_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Cap on the long-term block; None uses the core's fuser budget (15 % of the context window).",
    )

    _ledger: BlockLedger = PrivateAttr(default_factory=BlockLedger)

    def __init__(self, memory: HybridMemory, **data: Any) -> None:
        super().__init__(memory=require_core(memory, type(self).__name__), **data)  # type: ignore[call-arg]

    @field_validator("user_id", "session_id")
    @classmethod
    def _check_ids(cls, value: str, info: ValidationInfo) -> str:
        return check_id(value, name=info.field_name or "id")

    @classmethod
    def class_name(cls) -> str:
        """Get the class name, used as a unique id in serialisation."""
        return "HybridAgentMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]  # LlamaIndex declares **kwargs only; ours are explicit
        cls,
        memory: HybridMemory | None = None,
        *,
        user_id: str,
        session_id: str | None = None,
        token_limit: int | None = None,
        context_max_tokens: int | None = None,
        llm: LLM | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
    ) -> HybridAgentMemory:
        """Build an agent memory.

        Args:
            memory: The engine (positional or ``memory=``), required: one core per application,
                shared by its sessions and adapters, e.g. ``HybridMemory(store=LocalStore("memory.db"))``.
                There is no default: a private in-memory core would silently forget everything
                when the session ends.
            user_id: Whose memory.
            session_id: The conversation; ``None`` starts a new one (random id).
            token_limit: Cap on ``get()``; default 75 % of ``llm``'s context window when an LLM is
                given, else 3000 (as ``ChatMemoryBuffer``).
            context_max_tokens: Cap on the long-term block (default: the core's fuser budget).
            llm: Only used to size ``token_limit``.
            chat_history: Messages to start the window with (``set``).

        Raises:
            ConfigurationError: no core was given (or not a ``HybridMemory``).
        """
        if memory is None:
            raise ConfigurationError(
                "HybridAgentMemory.from_defaults needs the hybrid-memory core: "
                "HybridAgentMemory.from_defaults(HybridMemory(store=LocalStore('memory.db')), user_id=...); "
                "create one core per application and pass it to every session, so memories carry over"
            )
        if token_limit is None:
            token_limit = int(llm.metadata.context_window * 0.75) if llm is not None else DEFAULT_TOKEN_LIMIT
        fields: dict[str, Any] = {
            "user_id": user_id,
            "token_limit": token_limit,
            "context_max_tokens": context_max_tokens,
        }
        if session_id is not None:
            fields["session_id"] = session_id
        instance = cls(memory, **fields)
        if chat_history:
            instance.set(list(chat_history))
        return instance

    # ------------------------------------------------------------------ pure helpers
    def _in_place(self) -> bool:
        return is_stable(self.memory.config.fuser.placement)

    def _cost(self, turn: Turn) -> int:
        """Tokens of a turn as rendered, with the block placed with it earlier (if any)."""
        n = self.memory.counter.count(message_text(turn_to_message(turn)))
        block = self._ledger.block_for(turn.id) if self._in_place() else None
        return n if block is None else n + self.memory.counter.count(block) + _JOIN_TOKENS

    def _window(self, turns: Sequence[Turn], budget: int) -> tuple[list[Turn], int, bool]:
        """The newest turns that fit ``budget``: (turns, tokens, whether any was cut)."""
        start, used = len(turns), 0
        for i in range(len(turns) - 1, -1, -1):
            n = self._cost(turns[i])
            if used + n > budget:
                break
            used += n
            start = i
        return list(turns[start:]), used, start > 0

    def _plan(self, input: str | None, initial_token_count: int) -> tuple[list[Turn], str, int, str | None]:
        """Window, long-term query, long-term token budget and the session for short-term dedup."""
        turns = self.memory.short_term(self.user_id, self.session_id)
        self._ledger = self._ledger.prune({t.id for t in turns})
        budget = max(0, self.token_limit - initial_token_count)
        window, used, cut = self._window(turns, budget)
        query = input if input is not None and input.strip() else ""
        if not query:
            query = next((t.content for t in reversed(turns) if t.role == "user"), "")
        remaining = budget - used
        if self._in_place():
            remaining -= _JOIN_TOKENS
        ctx_budget = remaining if self.context_max_tokens is None else min(remaining, self.context_max_tokens)
        # Short-term dedup is only safe when the whole window is in the prompt.
        return window, query, ctx_budget, (None if cut else self.session_id)

    def _anchor(self, window: Sequence[Turn]) -> str | None:
        """The newest user turn of the window, which this call's block goes with (stable placements)."""
        if not self._in_place():
            return None
        return next((t.id for t in reversed(window) if t.role == "user"), None)

    def _placed(self, window: Sequence[Turn], anchor: str, query: str, context: FusedContext | None) -> None:
        """Record this call's block with ``anchor``, without the memories the window already shows."""
        if context is None:
            return
        self._ledger, _ = place(
            self.memory.fuser,
            self._ledger,
            context,
            anchor=anchor,
            live={t.id for t in window},
            query=query,
            now=self.memory.now(),
        )

    def _compose(self, window: Sequence[Turn], context: FusedContext | None) -> list[ChatMessage]:
        if self._anchor(window) is None:  # system placements, or no user turn to go with
            messages = [turn_to_message(t) for t in window]
            if context is None or not context.text:
                return messages
            return [ChatMessage(role=MessageRole.SYSTEM, content=context.text), *messages]
        before = self.memory.config.fuser.placement == "before_user"
        out: list[ChatMessage] = []
        for t in window:
            message = turn_to_message(t)
            block = self._ledger.block_for(t.id)
            if block is None:
                out.append(message)
            elif before:
                out += [ChatMessage(role=MessageRole.SYSTEM, content=block), message]
            else:
                out.append(ChatMessage(role=message.role, content=prepend_block(block, message_text(message))))
        return out

    @staticmethod
    def _turn_args(message: ChatMessage) -> tuple[Role, str, bool] | None:
        """``(role, text, long_term)``: only the user's own words may become long-term memories."""
        text = message_text(message)
        if not text:
            return None
        role, long_term = turn_source(core_role(message), text)
        return role, text, long_term

    # ------------------------------------------------------------------ read
    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The short-term window plus one system message with the fused long-term context.

        Args:
            input: The text to recall for; default the latest user turn in the window.
            **kwargs: ``initial_token_count`` (tokens already used elsewhere in the prompt, as in
                ``ChatMemoryBuffer``); other keys are ignored.
        """
        window, query, ctx_budget, dedup_session = self._plan(input, int(kwargs.get("initial_token_count", 0)))
        anchor = self._anchor(window)
        if anchor is not None and self._ledger.block_for(anchor) is not None:
            return self._compose(window, None)  # a later call for the same user message: same block
        context = None
        if query and ctx_budget > 0:
            context = self.memory.build_context(
                query, user_id=self.user_id, session_id=dedup_session, max_tokens=ctx_budget
            )
        if anchor is not None:
            self._placed(window, anchor, query, context)
        return self._compose(window, context)

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """Async twin of :meth:`get` (what agents call)."""
        window, query, ctx_budget, dedup_session = self._plan(input, int(kwargs.get("initial_token_count", 0)))
        anchor = self._anchor(window)
        if anchor is not None and self._ledger.block_for(anchor) is not None:
            return self._compose(window, None)  # a later call for the same user message: same block
        context = None
        if query and ctx_budget > 0:
            context = await self.memory.abuild_context(
                query, user_id=self.user_id, session_id=dedup_session, max_tokens=ctx_budget
            )
        if anchor is not None:
            self._placed(window, anchor, query, context)
        return self._compose(window, context)

    def get_all(self) -> list[ChatMessage]:
        """The whole short-term window, without the long-term block."""
        return [turn_to_message(t) for t in self.memory.short_term(self.user_id, self.session_id)]

    # ------------------------------------------------------------------ write
    def put(self, message: ChatMessage) -> None:
        """Add a message to the session (``add_turn``); messages without text are skipped."""
        args = self._turn_args(message)
        if args is not None:
            self.memory.add_turn(self.user_id, self.session_id, args[0], args[1], long_term=args[2])

    async def aput(self, message: ChatMessage) -> None:
        """Async twin of :meth:`put`."""
        args = self._turn_args(message)
        if args is not None:
            await self.memory.aadd_turn(self.user_id, self.session_id, args[0], args[1], long_term=args[2])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Add messages in order."""
        for message in messages:
            self.put(message)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Async twin of :meth:`put_messages` (in order)."""
        for message in messages:
            await self.aput(message)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the session window with ``messages`` (key frames among them reach long-term memory)."""
        self.memory.clear_session(self.user_id, self.session_id)
        self.put_messages(messages)

    async def aset(self, messages: list[ChatMessage]) -> None:
        """Async twin of :meth:`set`."""
        self.memory.clear_session(self.user_id, self.session_id)  # in-memory, no IO
        await self.aput_messages(messages)

    def reset(self) -> None:
        """Drop the session window without writing it; long-term memory is kept."""
        self.memory.clear_session(self.user_id, self.session_id)

    async def areset(self) -> None:
        """Async twin of :meth:`reset`."""
        await asyncio.to_thread(self.reset)  # the window lives in the store

    def end_session(self) -> None:
        """End the session in the core (extraction, summary), then clear the window."""
        self.memory.end_session(self.user_id, self.session_id)

    async def aend_session(self) -> None:
        """Async twin of :meth:`end_session`."""
        await self.memory.aend_session(self.user_id, self.session_id)
