r"""Source discipline for the framework adapters: only what the user said becomes a memory about the user.

Agent frameworks hand the memory every message of a run: the user's words, the model's replies,
tool output, system prompts, and ReAct scaffolding (``Thought:``, ``Action:``, ``Action Input:``,
``Observation:``, ``Answer:``), which some agents send in *user* messages (LlamaIndex's ReAct
formatter puts each ``Observation:`` in a user message). :func:`turn_source` tells the adapters
how to record a message: the role it really has and whether it may become a long-term memory.
Everything but the user's own words is recorded with ``add_turn(..., long_term=False)``: it stays
in the session's window as conversation context (and as the search context of the next user
turn) and is never written, extracted or injected as a memory about the user.

Example:
    >>> turn_source("user", "I am allergic to peanuts")
    ('user', True)
    >>> turn_source("user", "Observation: the recipe contains peanuts")
    ('tool', False)
    >>> turn_source("assistant", "Thought: I should check. Answer: Mia est allergique à l'hæblère.")
    ('assistant', False)
    >>> turn_source("user", "Thought: the user wants a recipe\nAction: search")
    ('assistant', False)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Literal

__all__ = ["REACT_LINE", "Role", "scaffolding_role", "source_turns", "turn_source"]

Role = Literal["user", "assistant", "system", "tool"]

#: A line of ReAct scaffolding (what the agent loop writes, not what anyone said to the user).
REACT_LINE = re.compile(
    r"^\s*(?:thought|action input|action|observation|final answer|answer)\s*[:：]", re.IGNORECASE | re.MULTILINE
)


def scaffolding_role(text: str) -> Role | None:
    """The role of agent scaffolding ``text`` (``None``: not scaffolding).

    Scaffolding starts with a ReAct line: ``Observation:`` is tool output (``"tool"``), the other
    keywords are the model's (``"assistant"``).
    """
    first = text.lstrip()
    m = REACT_LINE.match(first)
    if m is None:
        return None
    return "tool" if m.group(0).strip().lower().startswith("observation") else "assistant"


def turn_source(role: Role, text: str) -> tuple[Role, bool]:
    """How an adapter records a message: ``(role, long_term)``.

    ``long_term`` is true only for the user's own words; a user message that is agent
    scaffolding gets the role it really has.
    """
    if role != "user":
        return role, False
    real = scaffolding_role(text)
    if real is not None:
        return real, False
    return "user", True


def source_turns(said: Iterable[tuple[Role, str]]) -> list[tuple[Role, str, bool]]:
    """``(role, text, long_term)`` for each ``(role, text)`` an adapter is about to record.

    Example:
        >>> source_turns([("user", "I live in Lyon"), ("assistant", "Noted!")])
        [('user', 'I live in Lyon', True), ('assistant', 'Noted!', False)]
    """
    out: list[tuple[Role, str, bool]] = []
    for role, text in said:
        real, long_term = turn_source(role, text)
        out.append((real, text, long_term))
    return out


#: Namespace of the turn ids adapters derive from their frameworks' message ids.
_MESSAGE_TURN_NAMESPACE = uuid.UUID("5d0c6f0e-3b7a-5e43-9c1b-2f6a8e4d7c10")


def message_turn_id(session_id: str, role: str, message_id: str | None) -> str | None:
    """The ``add_turn`` id of a framework message: a UUID from the session, role and message id.

    A framework that runs a step again (LangGraph after a crash or a retry) hands the adapter the
    same messages with the same ids: the same turn ids make ``add_turn`` add nothing the second
    time. Scoped by session, so a thread copied with its message ids into another session is
    recorded there too. ``None`` when the message has no id (a new turn id each time).

    Example:
        >>> message_turn_id("s1", "user", "msg-1") == message_turn_id("s1", "user", "msg-1")
        True
        >>> message_turn_id("s1", "user", "msg-1") == message_turn_id("s2", "user", "msg-1")
        False
        >>> message_turn_id("s1", "user", None) is None
        True
    """
    if not message_id:
        return None
    return str(uuid.uuid5(_MESSAGE_TURN_NAMESPACE, f"{session_id}\x1f{role}\x1f{message_id}"))
