"""The scripted conversation both adapters' prompt-cache tests replay, and the core it runs on."""

from __future__ import annotations

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder

QUESTIONS = [
    "Can I eat peanuts tonight, given I am allergic?",
    "And which restaurant in Lyon would you pick?",
    "Are the peanuts there safe, as I am allergic?",
    "Could I bring my dog Rex along?",
]
ANSWERS = ["Better not.", "Try a bouchon.", "Ask them first.", "Probably yes."]


def ann_core(placement: str | None = None) -> HybridMemory:
    """A core holding three memories of user ``ann``, with ``fuser.placement`` (default: the config's)."""
    config = {"fuser": {"placement": placement}} if placement is not None else None
    core = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder(dim=256), config=config)
    core.remember("ann", "Ann is allergic to peanuts", importance=0.9)
    core.remember("ann", "Ann lives in Lyon", importance=0.7)
    core.remember("ann", "Ann's dog is called Rex", importance=0.6)
    return core
