"""``HybridMemoryMiddleware``: long-term memory for ``langchain.agents.create_agent``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, get_args

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import OmitFromInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from typing_extensions import NotRequired

from hybrid_memory.errors import ConfigurationError, InvalidInputError
from hybrid_memory.memory import HybridMemory
from hybrid_memory.read.placement import BlockLedger, is_stable, place, prepend_block
from hybrid_memory.records import FusedContext
from hybrid_memory.write.sources import Role, message_turn_id, source_turns
from langchain_hybrid_memory._identity import ClientUserIds, authenticated_identity, run_config, settle_user
from langchain_hybrid_memory._utils import lookup, message_text, require_core

__all__ = ["HybridMemoryMiddleware", "HybridMemoryState"]

STATE_KEY = "memory_context"
#: The configurable key LangMem's tools (and LangGraph templates) read the user from.
LANGGRAPH_USER_ID = "langgraph_user_id"


class HybridMemoryState(AgentState[Any]):
    """Agent state with what the middleware recalled for the current user message.

    ``memory_context`` holds ``text`` (the injected block, ``""`` when skipped), ``skipped`` and
    ``skipped_reason``, ``hits`` (memory id, content and every score component of each injected
    memory), ``user_id``, ``session_id``, ``recorded`` (the id of the last user message
    written to memory) and ``placed`` (the blocks of this thread by user message id, so each
    model call renders them where and as they were; see :mod:`hybrid_memory.read.placement`).
    It is part of the agent's output, so callers can see what was recalled and why.
    """

    memory_context: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]


def _last_human(messages: Sequence[BaseMessage]) -> tuple[int, HumanMessage] | None:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, HumanMessage) and message_text(m).strip():
            return i, m
    return None


def _summary(ctx: FusedContext, user_id: str, session_id: str) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "session_id": session_id,
        "text": ctx.text,
        "token_count": ctx.token_count,
        "skipped": ctx.skipped,
        "skipped_reason": ctx.skipped_reason,
        "hits": [{"memory_id": h.id, "content": h.content, **h.components()} for h in ctx.hits],
    }


class HybridMemoryMiddleware(AgentMiddleware[HybridMemoryState, Any]):
    """Inject fused long-term memories into every model call; record each turn afterwards.

    * **Before the agent** runs, the latest user message is the query for
      :meth:`~hybrid_memory.HybridMemory.build_context` (hybrid recall, re-ranking, fusion under
      a token budget, skipping what the short-term window already holds). The result is kept in
      the ``memory_context`` state key (one recall per user message, so heat counts one access
      per turn).
    * **Before each model call** the block goes where ``memory.config.fuser.placement`` says,
      as background data between delimiters. By default (``"user_message"``) it goes inside the
      newest user message, before its text, and every earlier block of the thread stays in its
      own user message, byte for byte, so the prompt's prefix (system message and earlier
      turns) is identical from one call to the next and a prefix-caching model server only
      processes what is new; a memory already shown in the thread is not repeated.
      ``"before_user"`` makes the block a system message right before the user message;
      ``"system_end"`` / ``"system_start"`` append / prepend it to the system message (created
      when the agent has none), as before. Earlier blocks are kept in the thread's state, so
      they stay in place across invocations with a checkpointer.
    * **After the agent** the user message and the final answer go through
      :meth:`~hybrid_memory.HybridMemory.add_turn` (importance scoring, key frames, long-term
      writes), once per user message. Each turn's id comes from the session and the message's
      id, so a step LangGraph runs again (a worker killed after the write and before the
      checkpoint, a retried run) finds the turns already in the log and adds nothing.

    **Who the user is.** On a LangGraph server with authentication, the server's authenticated
    user (``config["configurable"]["langgraph_auth_user"]``, which the server sets and clients
    cannot, also seen as ``runtime.server_info.user``) *is* the user: a client-supplied user id
    (below) that disagrees raises :class:`~hybrid_memory.errors.IdentityMismatchError`, so a
    logged-in user cannot read or write someone else's memories by sending
    ``context={"user_id": "bob"}``. ``client_user_ids="refuse"`` refuses any client-supplied id
    on authenticated runs, ``require_authenticated=True`` refuses runs without an authenticated
    user; neither can loosen the rule. Without an authenticated user, the first found wins:

    1. ``user_id_key`` (default ``"user_id"``) in the run's ``context`` (dataclass, pydantic
       model or dict);
    2. ``user_id_key`` in ``config["configurable"]``;
    3. ``"langgraph_user_id"`` in ``config["configurable"]``, then in the ``context`` (the key
       LangMem's memory tools fill their ``("memories", "{langgraph_user_id}")`` namespaces
       from, so the middleware and those tools see the same user);
    4. the ``user_id`` given here.

    The first three come from whoever invokes the graph: trust them only when that caller is your
    own backend. No user is an error (memories are never shared by accident). The session is the
    run's ``thread_id`` (``"default"`` without a checkpointer).

    Args:
        memory: The hybrid-memory core (positional or ``memory=``).
        user_id: Fallback user when the run names none (ignored on authenticated runs).
        user_id_key: Where to find the user id in the context / configurable
            (``"langgraph_user_id"`` is also looked up, after it).
        max_tokens: Token cap of the injected block (default: the core's fuser budget).
        record_turns: Write each turn through ``add_turn`` after the agent.
        client_user_ids: On authenticated runs, ``"must_match"`` (default: a client-supplied id
            must equal the authenticated identity) or ``"refuse"`` (any client-supplied id is an
            error).
        require_authenticated: Refuse runs without a server-authenticated user.

    Example:
        >>> from langchain.agents import create_agent
        >>> from langchain_core.language_models import GenericFakeChatModel
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> _ = mem.remember("alice", "Alice is allergic to peanuts", importance=0.9)
        >>> agent = create_agent(GenericFakeChatModel(messages=iter(["No peanuts for you."])),
        ...                      middleware=[HybridMemoryMiddleware(mem)])
        >>> out = agent.invoke({"messages": [("user", "Any peanuts in this?")]}, context={"user_id": "alice"})
        >>> out["memory_context"]["hits"][0]["content"]
        'Alice is allergic to peanuts'
        >>> [t.role for t in mem.short_term("alice", "default")]
        ['user', 'assistant']
        >>> mem.close()
    """

    state_schema = HybridMemoryState

    def __init__(
        self,
        memory: HybridMemory,
        *,
        user_id: str | None = None,
        user_id_key: str = "user_id",
        max_tokens: int | None = None,
        record_turns: bool = True,
        client_user_ids: ClientUserIds = "must_match",
        require_authenticated: bool = False,
    ) -> None:
        super().__init__()
        self.memory = require_core(memory, type(self).__name__)
        if client_user_ids not in get_args(ClientUserIds):
            raise ConfigurationError(f"client_user_ids must be 'must_match' or 'refuse', got {client_user_ids!r}")
        self.user_id = user_id
        self.user_id_key = user_id_key
        self.max_tokens = max_tokens
        self.record_turns = record_turns
        self.client_user_ids: ClientUserIds = client_user_ids
        self.require_authenticated = bool(require_authenticated)
        self.tools = []

    # ------------------------------------------------------------------ run identity
    def _config(self) -> dict[str, Any]:
        return dict(run_config())

    def resolve_user(self, runtime: Runtime[Any]) -> str:
        """The user of this run (see the class docstring for the trust rule and lookup order).

        Raises:
            IdentityMismatchError: a client-supplied user id disagrees with the server-authenticated
                user (or is refused, or authentication is required and missing).
            InvalidInputError: no user id anywhere.
        """
        config = self._config()
        configurable = config.get("configurable")
        key = self.user_id_key
        claims = [
            (f"context[{key!r}]", lookup(runtime.context, key)),
            (f"configurable[{key!r}]", lookup(configurable, key)),
            (f"configurable[{LANGGRAPH_USER_ID!r}]", lookup(configurable, LANGGRAPH_USER_ID)),
            (f"context[{LANGGRAPH_USER_ID!r}]", lookup(runtime.context, LANGGRAPH_USER_ID)),
        ]
        value = settle_user(
            authenticated_identity(runtime, config),
            claims,
            client_user_ids=self.client_user_ids,
            require_authenticated=self.require_authenticated,
            owner=type(self).__name__,
        )
        if value is None:
            value = self.user_id
        if not isinstance(value, str) or not value:
            raise InvalidInputError(
                f"HybridMemoryMiddleware needs a user id: pass context={{'{self.user_id_key}': ...}} "
                f"(or a context object with that attribute), config={{'configurable': {{'{self.user_id_key}': ...}}}} "
                f"(or '{LANGGRAPH_USER_ID}', as LangMem uses), or HybridMemoryMiddleware(memory, user_id=...)"
            )
        return value

    def resolve_session(self, runtime: Runtime[Any]) -> str:
        """The session of this run: its ``thread_id``, or ``"default"``."""
        info = getattr(runtime, "execution_info", None)
        thread = getattr(info, "thread_id", None)
        if thread is None:
            thread = lookup(self._config().get("configurable"), "thread_id")
        return str(thread) if thread is not None and str(thread) else "default"

    # ------------------------------------------------------------------ recall
    def _no_query(self, state: HybridMemoryState, user_id: str, session_id: str) -> dict[str, Any]:
        info = state.get(STATE_KEY)
        return {
            STATE_KEY: {
                "user_id": user_id,
                "session_id": session_id,
                "text": "",
                "token_count": 0,
                "skipped": True,
                "skipped_reason": "no user message to recall for",
                "hits": [],
                "placed": info.get("placed", []) if isinstance(info, dict) else [],
            }
        }

    def _recalled(
        self, state: HybridMemoryState, human: HumanMessage, ctx: FusedContext, user_id: str, session_id: str
    ) -> dict[str, Any]:
        """The state update for this turn's block (placed with ``human`` when the placement is stable)."""
        info = state.get(STATE_KEY)
        prior = info.get("placed") if isinstance(info, dict) else None
        placed: list[dict[str, Any]] = []
        if is_stable(self.memory.config.fuser.placement):
            live = {m.id for m in state["messages"] if isinstance(m, HumanMessage) and m.id is not None}
            ledger = BlockLedger.from_state(prior).prune(live)
            if human.id is not None:
                ledger, ctx = place(
                    self.memory.fuser,
                    ledger,
                    ctx,
                    anchor=human.id,
                    live=live,
                    query=message_text(human),
                    now=self.memory.now(),
                    max_tokens=self.max_tokens,
                )
            placed = ledger.to_state()
        return {STATE_KEY: {**_summary(ctx, user_id, session_id), "recorded": _recorded(state), "placed": placed}}

    def _placed_already(self, state: HybridMemoryState, human: HumanMessage) -> bool:
        """Whether this user message already has its block (a resumed or repeated run): keep it as it was."""
        if human.id is None or not is_stable(self.memory.config.fuser.placement):
            return False
        info = state.get(STATE_KEY)
        ledger = BlockLedger.from_state(info.get("placed") if isinstance(info, dict) else None)
        return ledger.block_for(human.id) is not None

    def before_agent(self, state: HybridMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Recall and fuse long-term memories for the latest user message."""
        user_id, session_id = self.resolve_user(runtime), self.resolve_session(runtime)
        last = _last_human(list(state["messages"]))
        if last is None:
            return self._no_query(state, user_id, session_id)
        if self._placed_already(state, last[1]):
            return None
        ctx = self.memory.build_context(
            message_text(last[1]), user_id=user_id, session_id=session_id, max_tokens=self.max_tokens
        )
        return self._recalled(state, last[1], ctx, user_id, session_id)

    async def abefore_agent(self, state: HybridMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent`."""
        user_id, session_id = self.resolve_user(runtime), self.resolve_session(runtime)
        last = _last_human(list(state["messages"]))
        if last is None:
            return self._no_query(state, user_id, session_id)
        if self._placed_already(state, last[1]):
            return None
        ctx = await self.memory.abuild_context(
            message_text(last[1]), user_id=user_id, session_id=session_id, max_tokens=self.max_tokens
        )
        return self._recalled(state, last[1], ctx, user_id, session_id)

    # ------------------------------------------------------------------ injection
    def _inject(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        state: Any = request.state
        info = state.get(STATE_KEY) if isinstance(state, dict) else None
        placement = self.memory.config.fuser.placement
        if isinstance(info, dict) and is_stable(placement):
            return self._inject_with_users(request, BlockLedger.from_state(info.get("placed")), placement)
        if not isinstance(info, dict) or not info.get("text"):
            return request
        block = str(info["text"])
        current = request.system_message
        if current is None:
            return request.override(system_message=SystemMessage(content=block))
        if isinstance(current.content, str):
            fused = FusedContext(text=block, token_count=int(info.get("token_count") or 0))
            content: Any = self.memory.fuser.inject(current.content, fused)
        else:
            content = [*current.content, {"type": "text", "text": block}]
        return request.override(system_message=SystemMessage(content=content))

    @staticmethod
    def _inject_with_users(request: ModelRequest[Any], ledger: BlockLedger, placement: str) -> ModelRequest[Any]:
        """Render every block of the thread with its user message (stable placements)."""
        if not len(ledger):
            return request
        messages: list[Any] = []
        for m in request.messages:
            block = ledger.block_for(m.id) if isinstance(m, HumanMessage) else None
            if block is None:
                messages.append(m)
            elif placement == "before_user":
                messages += [SystemMessage(content=block), m]
            elif isinstance(m.content, str):
                messages.append(m.model_copy(update={"content": prepend_block(block, m.content)}))
            else:
                messages.append(m.model_copy(update={"content": [{"type": "text", "text": block}, *m.content]}))
        return request.override(messages=messages)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with the recalled memories placed per ``fuser.placement``."""
        return handler(self._inject(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Async twin of :meth:`wrap_model_call`."""
        return await handler(self._inject(request))

    # ------------------------------------------------------------------ recording
    def _turn(self, state: HybridMemoryState) -> tuple[HumanMessage, AIMessage | None] | None:
        messages = list(state["messages"])
        last = _last_human(messages)
        if last is None or (last[1].id is not None and last[1].id == _recorded(state)):
            return None
        answer = None
        for m in messages[last[0] + 1 :]:
            if isinstance(m, AIMessage) and message_text(m).strip():
                answer = m
        return last[1], answer

    def after_agent(self, state: HybridMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the user message and the final answer through ``add_turn``."""
        turn = self._turn(state) if self.record_turns else None
        if turn is None:
            return None
        user_id, session_id = self.resolve_user(runtime), self.resolve_session(runtime)
        for role, text, long_term, turn_id in _sources(turn, session_id):
            self.memory.add_turn(user_id, session_id, role, text, long_term=long_term, turn_id=turn_id)
        return _mark_recorded(state, turn[0])

    async def aafter_agent(self, state: HybridMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        turn = self._turn(state) if self.record_turns else None
        if turn is None:
            return None
        user_id, session_id = self.resolve_user(runtime), self.resolve_session(runtime)
        for role, text, long_term, turn_id in _sources(turn, session_id):
            await self.memory.aadd_turn(user_id, session_id, role, text, long_term=long_term, turn_id=turn_id)
        return _mark_recorded(state, turn[0])


def _sources(turn: tuple[HumanMessage, AIMessage | None], session_id: str) -> list[tuple[Role, str, bool, str | None]]:
    """``(role, text, long_term, turn_id)`` of a run's user message and final answer.

    Only the user's own words may become long-term memories; the answer is conversation context
    (:func:`~hybrid_memory.write.sources.turn_source`). The turn id is derived from the session
    and the message id (``None`` for a message without an id), so recording the same messages
    again adds nothing.
    """
    messages: list[BaseMessage] = [turn[0]] if turn[1] is None else [turn[0], turn[1]]
    roles: tuple[Role, Role] = ("user", "assistant")
    said = [(role, message_text(m)) for role, m in zip(roles, messages, strict=False)]
    return [
        (role, text, long_term, message_turn_id(session_id, role, m.id))
        for (role, text, long_term), m in zip(source_turns(said), messages, strict=True)
    ]


def _recorded(state: HybridMemoryState) -> str | None:
    info = state.get(STATE_KEY)
    value = info.get("recorded") if isinstance(info, dict) else None
    return value if isinstance(value, str) else None


def _mark_recorded(state: HybridMemoryState, message: HumanMessage) -> dict[str, Any] | None:
    if message.id is None:
        return None
    info = state.get(STATE_KEY)
    return {STATE_KEY: {**(info if isinstance(info, dict) else {}), "recorded": message.id}}
