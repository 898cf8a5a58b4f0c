"""Where the memory block goes in a prompt, and how it stays put from one turn to the next.

A model server with prefix caching (llama.cpp, vLLM, hosted APIs) re-processes a prompt from the
first token that differs from the previous call's prompt. A block at the end or the start of the
system message changes on every turn, so the whole conversation behind it is re-processed each
call. The cache-friendly placements put the block with the newest user message instead, and keep
every earlier block exactly where (and as) it was:

* ``"user_message"`` (default): the block goes inside the newest user message, before its text;
* ``"before_user"``: the block is a message of its own right before the newest user message;
* ``"system_end"`` / ``"system_start"``: the old placements, at the end / start of the system
  message (each turn re-processes everything after the system message).

For the first two, a :class:`BlockLedger` remembers which block went with which user message
(its *anchor*: the message id, or the id of the message before it), so the next call renders
the same bytes at the same place, and a memory already shown earlier in the conversation is not
repeated: the next block holds only memories the conversation has not seen yet, without a header
of its own (the first block's, still in the conversation, frames it; :func:`place`,
:func:`next_block`). Only the newest block is new text for the model.

Example:
    >>> ledger = BlockLedger()
    >>> ledger = ledger.record("m1", "<memory-context>a</memory-context>", ("id-a",))
    >>> ledger.block_for("m1"), sorted(ledger.present({"m1", "m2"})), sorted(ledger.present({"m2"}))
    ('<memory-context>a</memory-context>', ['id-a'], [])
    >>> print(prepend_block("<memory-context>a</memory-context>", "Where do I live?"))
    <memory-context>a</memory-context>
    <BLANKLINE>
    Where do I live?
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from hybrid_memory.read.context import ContextFuser
from hybrid_memory.records import FusedContext

__all__ = [
    "STABLE_PLACEMENTS",
    "BlockLedger",
    "PlacedBlock",
    "Placement",
    "is_stable",
    "next_block",
    "place",
    "prepend_block",
]

#: The placements of ``FuserConfig.placement``.
Placement = Literal["user_message", "before_user", "system_end", "system_start"]

#: Placements that keep the prompt's prefix byte-identical from one turn to the next.
STABLE_PLACEMENTS: frozenset[str] = frozenset({"user_message", "before_user"})


def is_stable(placement: str) -> bool:
    """Whether ``placement`` keeps earlier blocks in place (the prefix-cache-friendly ones).

    Example:
        >>> is_stable("user_message"), is_stable("system_end")
        (True, False)
    """
    return placement in STABLE_PLACEMENTS


def prepend_block(block: str, text: str) -> str:
    """The user message text with the block in front of it (``"user_message"`` placement)."""
    return f"{block}\n\n{text}" if text else block


@dataclass(frozen=True)
class PlacedBlock:
    """One block injected earlier: the message it went with, its text and its memories."""

    anchor: str
    text: str
    memory_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy (for framework state such as a LangGraph checkpoint)."""
        return {"anchor": self.anchor, "text": self.text, "memory_ids": list(self.memory_ids)}


class BlockLedger:
    """The blocks of one conversation by anchor; immutable (every change returns a new ledger).

    Args:
        entries: Earlier blocks, oldest first (a later entry for the same anchor wins).
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[PlacedBlock] = ()) -> None:
        self._entries: dict[str, PlacedBlock] = {e.anchor: e for e in entries}

    @classmethod
    def from_state(cls, value: object) -> BlockLedger:
        """Rebuild a ledger from :meth:`to_state` output; anything malformed is ignored."""
        entries = []
        for item in value if isinstance(value, list) else []:
            if not isinstance(item, Mapping):
                continue
            anchor, text, ids = item.get("anchor"), item.get("text"), item.get("memory_ids")
            if isinstance(anchor, str) and isinstance(text, str) and isinstance(ids, list):
                entries.append(PlacedBlock(anchor, text, tuple(str(i) for i in ids)))
        return cls(entries)

    def to_state(self) -> list[dict[str, Any]]:
        """The entries as JSON-friendly dicts, oldest first."""
        return [e.to_dict() for e in self._entries.values()]

    def __len__(self) -> int:
        return len(self._entries)

    def block_for(self, anchor: str | None) -> str | None:
        """The block injected with ``anchor``, if any."""
        entry = self._entries.get(anchor) if anchor is not None else None
        return entry.text if entry is not None else None

    def present(self, live_anchors: Collection[str]) -> frozenset[str]:
        """Ids of the memories shown in blocks whose anchor is still in the conversation."""
        return frozenset(i for a, e in self._entries.items() if a in live_anchors for i in e.memory_ids)

    def record(self, anchor: str, text: str, memory_ids: Sequence[str]) -> BlockLedger:
        """A ledger with ``text`` placed at ``anchor`` (an empty text records nothing)."""
        if not text:
            return self
        return BlockLedger([*self._entries.values(), PlacedBlock(anchor, text, tuple(memory_ids))])

    def prune(self, live_anchors: Collection[str]) -> BlockLedger:
        """A ledger without the blocks whose anchor left the conversation (trimmed, evicted)."""
        return BlockLedger(e for a, e in self._entries.items() if a in live_anchors)


def next_block(
    fuser: ContextFuser,
    ctx: FusedContext,
    shown: Collection[str],
    *,
    continued: bool,
    query: str,
    now: datetime | None = None,
    max_tokens: int | None = None,
) -> FusedContext:
    """``ctx`` as the next block of a conversation: without the memories it already shows.

    The hits of ``ctx`` already passed the relevance floor and the short-term dedup; those not in
    ``shown`` are fused again (same order, same caps), without a header when ``continued``
    (an earlier block's header frames it). When every hit was shown, the result is skipped ("already in the
    conversation").

    Args:
        fuser: The core's fuser (its caps, language and token counter).
        ctx: The block built for this turn.
        shown: Ids of the memories in earlier blocks of the conversation.
        continued: The conversation shows an earlier block.
        query: The current user message (language of the block).
        now: Reference time of the time labels.
        max_tokens: Token cap of this call.
    """
    if not ctx.hits or not (continued or any(h.id in shown for h in ctx.hits)):
        return ctx
    dropped = tuple((h.id, "already in the conversation") for h in ctx.hits if h.id in shown)
    fresh = [h for h in ctx.hits if h.id not in shown]
    if not fresh:
        return FusedContext(
            text="",
            token_count=0,
            skipped=True,
            skipped_reason="every relevant memory is already in the conversation",
            dropped=ctx.dropped + dropped,
            token_counter=ctx.token_counter,
        )
    out = fuser.fuse(fresh, query=query, now=now, max_tokens=max_tokens, continued=continued)
    return out.model_copy(update={"dropped": ctx.dropped + dropped + out.dropped})


def place(
    fuser: ContextFuser,
    ledger: BlockLedger,
    ctx: FusedContext,
    *,
    anchor: str,
    live: Collection[str],
    query: str,
    now: datetime | None = None,
    max_tokens: int | None = None,
) -> tuple[BlockLedger, FusedContext]:
    """Place this turn's block at ``anchor``: the ledger to keep and the block to show.

    Blocks whose anchor left the conversation are forgotten; the new block leaves out the
    memories earlier blocks show (:func:`next_block`) and is recorded at ``anchor``.

    Args:
        fuser: The core's fuser.
        ledger: The conversation's earlier blocks.
        ctx: The block :meth:`~hybrid_memory.HybridMemory.build_context` made for this turn.
        anchor: Where the block goes (the user message's id, or the message before it).
        live: The anchors still in the conversation (message ids).
        query: The current user message.
        now: Reference time of the time labels.
        max_tokens: Token cap of this call.
    """
    ledger = ledger.prune(live)
    earlier = ledger.prune(set(live) - {anchor})
    ctx = next_block(
        fuser, ctx, earlier.present(live), continued=len(earlier) > 0, query=query, now=now, max_tokens=max_tokens
    )
    return ledger.record(anchor, ctx.text, [h.id for h in ctx.hits]), ctx
