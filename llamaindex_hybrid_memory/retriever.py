"""``HybridMemoryRetriever``: a user's long-term memories as a LlamaIndex retriever."""

from __future__ import annotations

from typing import Any

from hybrid_memory.memory import HybridMemory, require_core
from hybrid_memory.records import RecallHit, check_id
from hybrid_memory.stores.base import MemoryFilter

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from hybrid_memory.errors import MissingDependencyError

    raise MissingDependencyError("llama-index-core", "llamaindex") from exc

__all__ = ["SCORE_KEYS", "HybridMemoryRetriever"]

#: Metadata keys holding the score components of a hit (hidden from the LLM and the embedder).
SCORE_KEYS = ("score", "relevance", "keyword_score", "vector_similarity", "importance", "recency", "heat")


class HybridMemoryRetriever(BaseRetriever):
    """Retrieve one user's long-term memories as ``NodeWithScore`` objects.

    Each node's id is the memory id and its score the final re-ranked score
    (``w_rel·relevance + w_imp·importance + w_rec·recency + w_heat·heat``). Its metadata holds
    ``memory_id``, ``user_id``, ``session_id``, ``category``, ``source``, ``created_at`` (ISO 8601,
    UTC), ``tags`` and every score component (``score``, ``relevance``, ``keyword_score``,
    ``vector_similarity``, ``importance``, ``recency``, ``heat``); ids and scores are excluded from
    the text an LLM or embedder sees.

    Args:
        memory: The hybrid-memory engine (positional or ``memory=``).
        user_id: Whose memories; never anyone else's.
        k: How many memories per query.
        alpha: Hybrid weight, 1.0 = pure vector, 0.0 = pure keyword (BM25); ``None`` uses the
            configured default.
        include_archived: Also search archived memories.
        count_access: Count returned nodes as used (access_count, recency), like ``build_context``
            does for what it injects.
        filter: Category / tags / time range / session restrictions.
        callback_manager: LlamaIndex callbacks.
        verbose: LlamaIndex verbosity.

    Setup:
        ``pip install 'hybrid-memory[llamaindex]'``

    Instantiate and use:
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> from llamaindex_hybrid_memory import HybridMemoryRetriever
        >>> core = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> _ = core.remember("alice", "Alice prefers window seats on long flights", importance=0.8)
        >>> retriever = HybridMemoryRetriever(core, user_id="alice", k=3, alpha=0.5)
        >>> [n.node.get_content() for n in retriever.retrieve("window seat")]
        ['Alice prefers window seats on long flights']
        >>> sorted(retriever.retrieve("window seat")[0].node.metadata)[:4]
        ['category', 'created_at', 'heat', 'importance']
        >>> core.close()
    """

    def __init__(
        self,
        memory: HybridMemory,
        *,
        user_id: str,
        k: int = 5,
        alpha: float | None = None,
        include_archived: bool = False,
        count_access: bool = True,
        filter: MemoryFilter | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.memory = require_core(memory, type(self).__name__)
        self.user_id = check_id(user_id)
        self.k = k
        self.alpha = alpha
        self.include_archived = include_archived
        self.count_access = count_access
        self.filter = filter
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _recall_kwargs(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "k": self.k,
            "alpha": self.alpha,
            "include_archived": self.include_archived,
            "filter": self.filter,
            "touch": self.count_access,
        }

    @staticmethod
    def _node(hit: RecallHit) -> NodeWithScore:
        r = hit.record
        metadata: dict[str, Any] = {
            "memory_id": r.id,
            "user_id": r.user_id,
            "session_id": r.session_id,
            "category": r.category,
            "source": r.source,
            "created_at": r.created_at.isoformat(),
            "tags": list(r.tags),
            **hit.components(),
        }
        hidden = ["memory_id", "user_id", "session_id", "tags", *SCORE_KEYS]
        node = TextNode(
            id_=r.id,
            text=r.content,
            metadata=metadata,
            excluded_llm_metadata_keys=hidden,
            excluded_embed_metadata_keys=list(metadata),
        )
        return NodeWithScore(node=node, score=hit.score)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.memory.recall(query_bundle.query_str, **self._recall_kwargs())
        return [self._node(h) for h in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = await self.memory.arecall(query_bundle.query_str, **self._recall_kwargs())
        return [self._node(h) for h in hits]
