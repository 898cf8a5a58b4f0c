"""Peer baselines: LangChain's and LlamaIndex's vector memories on the benchmark's data.

Both peers run the real framework classes over the same documents and the same embedder as the
rest of the run (our :class:`~hybrid_memory.embeddings.Embedder` exposed through a small adapter),
so their rankings differ from ours only by what the framework does:

* **LangChain** (:data:`LANGCHAIN`): ``VectorStoreRetrieverMemory`` over
  ``langchain_core.vectorstores.InMemoryVectorStore``, one ``Document`` per turn, dense top-k via
  ``store.as_retriever(search_kwargs={"k": depth})``. The query path is the memory class itself
  (``load_memory_variables({"input": question})`` with ``return_docs=True``) when
  ``langchain_classic`` is installed, else the retriever it wraps (the same ranking). The write
  path adds the documents through the retriever, as ``save_context`` does, but with the turn text
  verbatim and the dataset id in ``metadata`` (``save_context`` would store ``"input: <turn>"``
  without metadata, so hits could not be mapped back to dataset ids).
* **LlamaIndex** (:data:`LLAMAINDEX`): ``llama_index.core.memory.VectorMemoryBlock``. ``Memory``
  hands a block the messages it flushes out of its short-term queue, oldest first, in chunks of
  about ``token_flush_size`` tokens (3,000 by default), and the block stores **one node per
  flushed batch**. We replay that: consecutive turns are cut into batches by the flush rule
  (:func:`flush_batches`, LlamaIndex's own tokenizer) and each batch goes to ``block.aput`` as
  user messages, like a flush. Questions go through ``block.aget([question])`` with
  ``similarity_top_k`` raised to the ranking depth (the block's default is 2) and no session
  filter (the memories span sessions). ``VectorMemoryBlock`` refuses stores with
  ``stores_text=False`` such as core's ``SimpleVectorStore``, so the nodes live in
  :func:`_llama_store`, an exact in-memory cosine store that also keeps the last query result
  (the block returns formatted text, not nodes). A retrieved node stands for every dataset id of
  its batch: node-level recall@k favours big nodes, so the report also gives the tokens the top-k
  text costs.

Nothing here imports LangChain or LlamaIndex at module import time.

Example:
    >>> from benchmarks.harness.datasets import Doc
    >>> docs = [Doc("a", "one two"), Doc("b", "three"), Doc("c", "four five six")]
    >>> [[d.id for d in b] for b in flush_batches(docs, 3, lambda t: len(t.split()))]
    [['a', 'b'], ['c']]
"""

from __future__ import annotations

import asyncio
import importlib
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hybrid_memory.embeddings import Embedder

from benchmarks.harness.datasets import Doc, Question

__all__ = [
    "LANGCHAIN",
    "LLAMAINDEX",
    "LLAMAINDEX_FLUSH_TOKENS",
    "PeerRun",
    "flush_batches",
    "missing_requirement",
    "run_langchain",
    "run_llamaindex",
]

#: Name of the LangChain ``VectorStoreRetrieverMemory`` baseline.
LANGCHAIN = "langchain_vectorstore_memory"
#: Name of the LlamaIndex ``VectorMemoryBlock`` baseline (default flush size).
LLAMAINDEX = "llamaindex_vector_block"
#: ``Memory.token_flush_size`` default of llama-index-core.
LLAMAINDEX_FLUSH_TOKENS = 3000

_REQUIRES = {
    LANGCHAIN: ("langchain_core.vectorstores", "langchain_core.embeddings"),
    LLAMAINDEX: ("llama_index.core.memory", "llama_index.core.vector_stores.types"),
}


@dataclass
class PeerRun:
    """What a peer retrieved for each question.

    Attributes:
        rankings: Question id -> hits, best first (each hit = the dataset ids it stands for).
        texts: Question id -> the retrieved texts, best first (what the memory would inject).
        joiner: How the framework joins the texts into the injected string.
        units: Documents or nodes stored per group, summed over groups.
        latencies: Seconds per question (query embedding from the cache included).
        note: How the peer was run.
    """

    rankings: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    texts: dict[str, list[str]] = field(default_factory=dict)
    joiner: str = "\n"
    units: int = 0
    latencies: list[float] = field(default_factory=list)
    note: str = ""

    def injected(self, question_id: str, k: int) -> str:
        """The string the memory would inject for its top ``k`` hits."""
        return self.joiner.join(self.texts.get(question_id, [])[:k])

    def extend(self, other: PeerRun) -> None:
        """Add another group's results."""
        self.rankings.update(other.rankings)
        self.texts.update(other.texts)
        self.units += other.units
        self.latencies += other.latencies
        self.note = other.note


def missing_requirement(name: str) -> str | None:
    """Why the peer ``name`` cannot run here (a module that does not import), or ``None``.

    Raises:
        KeyError: unknown peer name.
    """
    for module in _REQUIRES[name]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} is not importable ({exc.__class__.__name__}: {exc})"
    return None


def flush_batches(docs: Sequence[Doc], flush_tokens: int, count: Callable[[str], int]) -> list[list[Doc]]:
    """Cut consecutive documents into batches the way ``Memory`` flushes its queue.

    ``Memory._manage_queue`` pops the oldest messages until the popped ones hold at least
    ``token_flush_size`` tokens; each such chunk reaches the blocks as one batch. The last batch
    may be smaller.

    Args:
        docs: The documents, oldest first.
        flush_tokens: ``token_flush_size``.
        count: Token counter for one message text.
    """
    batches: list[list[Doc]] = []
    current: list[Doc] = []
    tokens = 0
    for d in docs:
        current.append(d)
        tokens += count(d.text)
        if tokens >= flush_tokens:
            batches.append(current)
            current, tokens = [], 0
    if current:
        batches.append(current)
    return batches


def _as_list(vec: Any) -> list[float]:
    return [float(x) for x in np.asarray(vec, dtype=np.float32).ravel()]


# ------------------------------------------------------------------------------------------
# LangChain
# ------------------------------------------------------------------------------------------


def _lc_embeddings(emb: Embedder) -> Any:
    """Our embedder as a ``langchain_core.embeddings.Embeddings``."""
    from langchain_core.embeddings import Embeddings

    class BenchEmbeddings(Embeddings):
        """Delegates to the benchmark run's embedder (cached vectors)."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [_as_list(v) for v in emb.embed_documents(texts)] if texts else []

        def embed_query(self, text: str) -> list[float]:
            return _as_list(emb.embed_query(text))

    return BenchEmbeddings()


def _retriever_memory(retriever: Any) -> Any:
    """``VectorStoreRetrieverMemory`` around ``retriever``, or ``None`` without langchain_classic."""
    try:
        from langchain_classic.memory import VectorStoreRetrieverMemory
    except ImportError:
        return None
    with warnings.catch_warnings():  # deprecated upstream (removal in 2.0); we measure it anyway
        warnings.simplefilter("ignore")
        return VectorStoreRetrieverMemory(retriever=retriever, return_docs=True, input_key="input")


def run_langchain(docs: Sequence[Doc], questions: Sequence[Question], emb: Embedder, depth: int) -> PeerRun:
    """One group through LangChain's vector memory: one document per turn, dense top-``depth``.

    Args:
        docs: The group's corpus.
        questions: The questions asked against it.
        emb: The run's embedder.
        depth: Hits per question.
    """
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(embedding=_lc_embeddings(emb))
    if docs:
        store.add_documents([Document(page_content=d.text, metadata={"bench_id": d.id}) for d in docs])
    retriever = store.as_retriever(search_kwargs={"k": max(1, depth)})
    memory = _retriever_memory(retriever)
    out = PeerRun(joiner="\n", units=len(docs))
    out.note = (
        "VectorStoreRetrieverMemory.load_memory_variables (return_docs) over InMemoryVectorStore.as_retriever"
        if memory is not None
        else "InMemoryVectorStore.as_retriever().invoke (langchain_classic not installed)"
    )
    for q in questions:
        t0 = time.perf_counter()
        if memory is not None:
            found = memory.load_memory_variables({"input": q.text})[memory.memory_key]
        else:
            found = retriever.invoke(q.text)
        out.latencies.append(time.perf_counter() - t0)
        out.rankings[q.id] = [frozenset({str(d.metadata["bench_id"])}) for d in found]
        out.texts[q.id] = [str(d.page_content) for d in found]
    return out


# ------------------------------------------------------------------------------------------
# LlamaIndex
# ------------------------------------------------------------------------------------------


def _llama_embedding(emb: Embedder) -> Any:
    """Our embedder as a LlamaIndex ``BaseEmbedding``."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class BenchEmbedding(BaseEmbedding):
        """Delegates to the benchmark run's embedder (cached vectors)."""

        def _get_query_embedding(self, query: str) -> list[float]:
            return _as_list(emb.embed_query(query))

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return _as_list(emb.embed_documents([text])[0])

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return [_as_list(v) for v in emb.embed_documents(texts)] if texts else []

    return BenchEmbedding(model_name=emb.name, embed_batch_size=64)


def _llama_store() -> Any:
    """An exact in-memory cosine vector store with ``stores_text=True``, keeping its last result."""
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.schema import BaseNode
    from llama_index.core.vector_stores.types import (
        BasePydanticVectorStore,
        VectorStoreQuery,
        VectorStoreQueryResult,
    )

    class ExactStore(BasePydanticVectorStore):
        """Nodes in insertion order; queries rank by cosine, ties by insertion order."""

        stores_text: bool = True
        nodes: list[BaseNode] = Field(default_factory=list)
        last_result: VectorStoreQueryResult | None = None

        @property
        def client(self) -> Any:
            return None

        def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
            self.nodes.extend(nodes)
            return [n.node_id for n in nodes]

        def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
            self.nodes = [n for n in self.nodes if n.ref_doc_id != ref_doc_id]

        def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
            top: list[BaseNode] = []
            sims: list[float] = []
            if self.nodes and query.query_embedding is not None:
                mat = np.asarray([n.get_embedding() for n in self.nodes], dtype=np.float64)
                qv = np.asarray(query.query_embedding, dtype=np.float64)
                norms = np.linalg.norm(mat, axis=1) * (np.linalg.norm(qv) or 1.0)
                scores = (mat @ qv) / np.where(norms > 0, norms, 1.0)
                order = np.argsort(-scores, kind="stable")[: max(1, query.similarity_top_k)]
                top = [self.nodes[i] for i in order]
                sims = [float(scores[i]) for i in order]
            self.last_result = VectorStoreQueryResult(nodes=top, similarities=sims, ids=[n.node_id for n in top])
            return self.last_result

    return ExactStore()


def run_llamaindex(
    docs: Sequence[Doc],
    questions: Sequence[Question],
    emb: Embedder,
    depth: int,
    *,
    flush_tokens: int = LLAMAINDEX_FLUSH_TOKENS,
) -> PeerRun:
    """One group through LlamaIndex's ``VectorMemoryBlock``: one node per flushed batch.

    Args:
        docs: The group's corpus, oldest first.
        questions: The questions asked against it.
        emb: The run's embedder.
        depth: Nodes per question (``similarity_top_k``).
        flush_tokens: ``Memory.token_flush_size`` that cuts the batches.
    """
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import VectorMemoryBlock
    from llama_index.core.utils import get_tokenizer

    tokenizer = get_tokenizer()
    batches = flush_batches(docs, flush_tokens, lambda text: len(tokenizer(text)))
    store = _llama_store()
    block = VectorMemoryBlock(vector_store=store, embed_model=_llama_embedding(emb), similarity_top_k=max(1, depth))
    out = PeerRun(joiner="\n\n", units=len(batches))
    out.note = (
        f"VectorMemoryBlock.aput per flushed batch (token_flush_size {flush_tokens}) + aget(question), "
        "exact in-memory store (stores_text=True)"
    )

    async def go() -> None:
        ids_of_node: dict[str, frozenset[str]] = {}
        for batch in batches:
            before = len(store.nodes)
            await block.aput([ChatMessage(role="user", content=d.text) for d in batch], from_short_term_memory=True)
            for node in store.nodes[before:]:
                ids_of_node[node.node_id] = frozenset(d.id for d in batch)
        for q in questions:
            store.last_result = None
            t0 = time.perf_counter()
            await block.aget([ChatMessage(role="user", content=q.text)])
            out.latencies.append(time.perf_counter() - t0)
            nodes = store.last_result.nodes if store.last_result is not None else []
            out.rankings[q.id] = [ids_of_node[n.node_id] for n in nodes]
            out.texts[q.id] = [n.get_content() for n in nodes]

    asyncio.run(go())
    return out
