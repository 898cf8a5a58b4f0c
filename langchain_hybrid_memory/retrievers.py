"""``HybridMemoryRetriever``: a LangChain retriever over one user's long-term memories."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from hybrid_memory.memory import HybridMemory
from hybrid_memory.records import RecallHit
from hybrid_memory.stores.base import MemoryFilter
from langchain_hybrid_memory._identity import check_bound_user
from langchain_hybrid_memory._utils import as_memory_filter, require_core

__all__ = ["HybridMemoryRetriever", "hit_to_document"]


def hit_to_document(hit: RecallHit) -> Document:
    """Turn a recall hit into a ``Document`` carrying the memory id and every score component."""
    r = hit.record
    metadata: dict[str, Any] = {
        "memory_id": r.id,
        "user_id": r.user_id,
        "session_id": r.session_id,
        "category": r.category,
        "source": r.source,
        "status": r.status,
        "tags": list(r.tags),
        "created_at": r.created_at.isoformat(),
        "updated_at": r.updated_at.isoformat(),
        "access_count": r.access_count,
        **hit.components(),
        "metadata": dict(r.metadata),
    }
    return Document(id=r.id, page_content=r.content, metadata=metadata)


class HybridMemoryRetriever(BaseRetriever):
    """Hybrid (BM25 + vector) recall with re-ranking over one user's memories, as a retriever.

    Each ``Document`` holds the memory text; its metadata holds ``memory_id`` (also
    ``Document.id``), ``category``, ``source``, ``tags``, timestamps, the memory's own
    ``metadata`` and every score component: ``score`` (the final re-ranked score),
    ``relevance`` (fused hybrid score, 0..1), ``keyword_score`` (raw BM25, ``None`` when the
    keyword leg missed it), ``vector_similarity`` (cosine), ``importance``, ``recency`` and
    ``heat``. Documents come best first. Recalled memories count as accessed (their heat grows).

    ``k``, ``alpha`` (1.0 = pure vector, 0.0 = pure keyword/BM25; ``None`` = the memory's
    configured default), ``filter`` and ``include_archived`` are set at construction and can be
    overridden per call: ``retriever.invoke("tea", k=3, alpha=0.0)``. A blank query returns no
    documents. The core comes first, positionally or as ``memory=``.

    Setup:
        ``pip install 'hybrid-memory[langchain]'``

    Instantiate and use:
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> _ = mem.remember("alice", "Alice drinks green tea every morning", importance=0.8)
        >>> retriever = HybridMemoryRetriever(mem, user_id="alice", k=2)
        >>> docs = retriever.invoke("what tea does Alice drink?")
        >>> docs[0].page_content, sorted(docs[0].metadata)[:3]
        ('Alice drinks green tea every morning', ['access_count', 'category', 'created_at'])
        >>> retriever.invoke("green tea", k=1, alpha=0.0)[0].metadata["keyword_score"] > 0
        True
        >>> mem.close()
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: HybridMemory = Field(description="The hybrid-memory core to recall from.")
    user_id: str = Field(description="Whose memories; never anyone else's.")
    k: int = Field(default=4, ge=1, description="Number of documents to return.")
    alpha: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Hybrid weight: 1.0 = pure vector, 0.0 = pure keyword (BM25); None = configured default.",
    )
    filter: MemoryFilter | None = Field(
        default=None, description="Category / tag / time / session restrictions (MemoryFilter or dict)."
    )
    include_archived: bool = Field(default=False, description="Also search archived memories.")
    count_access: bool = Field(
        default=True,
        description="Count returned documents as used (access_count, recency), like build_context does for "
        "what it injects: a retriever's documents go into the prompt.",
    )

    def __init__(self, memory: HybridMemory, **data: Any) -> None:
        if "filter" in data:
            data["filter"] = as_memory_filter(data["filter"])
        super().__init__(memory=require_core(memory, type(self).__name__), **data)  # type: ignore[call-arg]

    def _recall_kwargs(
        self,
        k: int | None,
        alpha: float | None,
        filter: MemoryFilter | Mapping[str, Any] | None,
        include_archived: bool | None,
    ) -> dict[str, Any]:
        check_bound_user(self.user_id, type(self).__name__)
        return {
            "user_id": self.user_id,
            "k": self.k if k is None else k,
            "alpha": self.alpha if alpha is None else alpha,
            "filter": self.filter if filter is None else as_memory_filter(filter),
            "include_archived": self.include_archived if include_archived is None else include_archived,
            "touch": self.count_access,
        }

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        alpha: float | None = None,
        filter: MemoryFilter | Mapping[str, Any] | None = None,
        include_archived: bool | None = None,
    ) -> list[Document]:
        if not query.strip():
            return []
        hits = self.memory.recall(query, **self._recall_kwargs(k, alpha, filter, include_archived))
        return [hit_to_document(h) for h in hits]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        alpha: float | None = None,
        filter: MemoryFilter | Mapping[str, Any] | None = None,
        include_archived: bool | None = None,
    ) -> list[Document]:
        if not query.strip():
            return []
        kwargs = self._recall_kwargs(k, alpha, filter, include_archived)
        user_id = kwargs.pop("user_id")
        hits = await self.memory.arecall(query, user_id=user_id, **kwargs)
        return [hit_to_document(h) for h in hits]
