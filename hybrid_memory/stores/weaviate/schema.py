"""The schema half of :class:`~hybrid_memory.stores.weaviate.WeaviateStore`: collections and meta data.

:class:`_Schema` creates and checks the four collections (memories, meta, turn logs, forget
epochs; their properties are in :mod:`hybrid_memory.stores.weaviate.mapping`) and keeps the meta
object (schema version, analyzer, embedder and vector dimension).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from hybrid_memory.errors import EmbedderMismatchError, EmbeddingDimensionError, InvalidInputError, SchemaError
from hybrid_memory.stores.weaviate.client import _Client, logger
from hybrid_memory.stores.weaviate.mapping import (
    _CONFIG_UUID,
    SCHEMA_VERSION,
    SEARCH_PROPERTY,
    memory_property_defs,
    turn_property_defs,
    vector_config,
)


class _Schema(_Client):
    """Collections, schema checks and the meta object of a store."""

    # -- schema --------------------------------------------------------------------------------
    def create(self) -> None:
        """Create the memory, meta, turn and forget-epoch collections.

        Raises:
            SchemaError: a collection of that name already exists.
            StoreUnavailableError: the server cannot be reached.
        """
        if self._call("schema check", lambda: self._client.collections.exists(self.collection)):
            raise SchemaError(f"collection {self.collection!r} already exists; use ensure_schema()")
        self.ensure_schema()

    def ensure_schema(self) -> None:
        """Create the collections if missing and check an existing schema; load the meta data.

        Idempotent and safe to call concurrently from several processes.

        Raises:
            SchemaError: the existing collection was not made by this module (no multi-tenancy,
                no whitespace ``search_text`` property) or was indexed with another analyzer.
            StoreUnavailableError: the server cannot be reached.
        """
        from weaviate.classes.config import Configure, DataType, Property, Tokenization

        def create_main() -> None:
            cols = self._client.collections
            if cols.exists(self.collection):
                return
            try:
                cols.create(
                    self.collection,
                    description="hybrid-memory long-term memories (one tenant per user)",
                    vector_config=vector_config(self.vector_index, self.dynamic_threshold),
                    properties=memory_property_defs(),
                    inverted_index_config=Configure.inverted_index(bm25_b=0.75, bm25_k1=1.2),
                    multi_tenancy_config=Configure.multi_tenancy(
                        enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
                    ),
                    replication_config=Configure.replication(factor=self.replication_factor)
                    if self.replication_factor is not None
                    else None,
                )
            except Exception:
                if not cols.exists(self.collection):  # lost a creation race: fine
                    raise

        def create_meta() -> None:
            cols = self._client.collections
            if cols.exists(self.meta_collection):
                return
            try:
                cols.create(
                    self.meta_collection,
                    description=f"hybrid-memory settings of {self.collection}",
                    properties=[
                        Property(
                            name="key",
                            data_type=DataType.TEXT,
                            tokenization=Tokenization.FIELD,
                            index_searchable=False,
                        ),
                        Property(
                            name="value",
                            data_type=DataType.TEXT,
                            index_searchable=False,
                            index_filterable=False,
                        ),
                    ],
                    replication_config=Configure.replication(factor=self.replication_factor)
                    if self.replication_factor is not None
                    else None,
                )
            except Exception:
                if not cols.exists(self.meta_collection):
                    raise

        def no_vectors() -> Any:
            return Configure.Vectors.self_provided(vector_index_config=Configure.VectorIndex.none())

        def create_turns() -> None:
            cols = self._client.collections
            if cols.exists(self.turns_collection):
                return
            try:
                cols.create(
                    self.turns_collection,
                    description=f"hybrid-memory turn logs of {self.collection} (one tenant per user)",
                    properties=turn_property_defs(),
                    vector_config=no_vectors(),
                    multi_tenancy_config=Configure.multi_tenancy(
                        enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
                    ),
                    replication_config=replication,
                )
            except Exception:
                if not cols.exists(self.turns_collection):
                    raise

        def create_epochs() -> None:
            cols = self._client.collections
            if cols.exists(self.epochs_collection):
                return
            try:
                cols.create(
                    self.epochs_collection,
                    description=f"hybrid-memory forget epochs of {self.collection} (by SHA-256 of the user id)",
                    properties=[
                        Property(name="epoch", data_type=DataType.INT, index_filterable=False),
                    ],
                    vector_config=no_vectors(),
                    replication_config=replication,
                )
            except Exception:
                if not cols.exists(self.epochs_collection):
                    raise

        def create_uses() -> None:
            cols = self._client.collections
            name = f"{self.collection}TenantUse"
            if cols.exists(name):
                return
            try:
                cols.create(
                    name,
                    description=f"hybrid-memory last recorded use of every tenant of {self.collection}",
                    properties=[
                        Property(name="tenant", data_type=DataType.TEXT, tokenization=Tokenization.FIELD),
                        Property(name="last_used", data_type=DataType.DATE),
                    ],
                    vector_config=no_vectors(),
                    replication_config=replication,
                )
            except Exception:
                if not cols.exists(name):
                    raise

        replication = (
            Configure.replication(factor=self.replication_factor) if self.replication_factor is not None else None
        )
        self._call("create collection", create_main)
        self._call("create meta collection", create_meta)
        self._call("create turns collection", create_turns)
        self._call("create forget-epochs collection", create_epochs)
        self._call("create tenant-use collection", create_uses)
        self._check_schema()
        with self._meta_lock:
            self._meta = None
        meta = self._load_meta()
        if meta.get("analyzer") not in (None, self.analyzer.name):
            raise SchemaError(
                f"collection {self.collection!r} was indexed with analyzer {meta['analyzer']!r}, "
                f"this store uses {self.analyzer.name!r}; BM25 would not match. Re-index into a new "
                "collection or pass the original analyzer."
            )

    def _check_schema(self) -> None:
        cfg = self._call("read schema", lambda: self._client.collections.use(self.collection).config.get())
        if not cfg.multi_tenancy_config.enabled:
            raise SchemaError(f"collection {self.collection!r} exists without multi-tenancy")
        props = {p.name: p for p in cfg.properties}
        p = props.get(SEARCH_PROPERTY)
        tok = getattr(getattr(p, "tokenization", None), "value", None)
        if p is None or tok != "whitespace":
            raise SchemaError(
                f"collection {self.collection!r} has no whitespace-tokenised {SEARCH_PROPERTY!r} "
                "property; it was not created by hybrid-memory"
            )
        # Created before memories had a search context or carried their forget epoch: add them.
        for prop in memory_property_defs():
            if prop.name in ("context", "epoch") and prop.name not in props:

                def add(prop: Any = prop) -> None:
                    self._client.collections.use(self.collection).config.add_property(prop)

                self._call("add property", add)
        searchable = sorted(n for n, q in props.items() if getattr(q, "index_searchable", False))
        if searchable != [SEARCH_PROPERTY]:
            logger.warning(
                "collection %s has other searchable properties %s; BM25 only searches %s",
                self.collection,
                searchable,
                SEARCH_PROPERTY,
            )

    def drop(self) -> None:
        """Delete the store's collections: every memory, turn, forget epoch, use note and the embedder binding (all users!).

        Idempotent.
        """
        uses = f"{self.collection}TenantUse"
        names = (self.collection, self.meta_collection, self.turns_collection, self.epochs_collection, uses)

        def run() -> None:
            for name in (*names, self.binding_collection, self.binding_name_collection):
                if self._client.collections.exists(name):
                    self._client.collections.delete(name)

        self._call("drop collections", run)
        with self._meta_lock:
            self._meta = None
        self._handles.clear()

    async def acreate(self) -> None:
        """Async twin of :meth:`create`."""
        await asyncio.to_thread(self.create)

    async def aensure_schema(self) -> None:
        """Async twin of :meth:`ensure_schema`."""
        await asyncio.to_thread(self.ensure_schema)

    async def adrop(self) -> None:
        """Async twin of :meth:`drop`."""
        await asyncio.to_thread(self.drop)

    # -- meta ----------------------------------------------------------------------------------
    def _load_meta(self) -> dict[str, Any]:
        with self._meta_lock:
            if self._meta is not None:
                return self._meta
            meta_coll = self._coll(self.meta_collection)
            obj = self._call("read meta", lambda: meta_coll.query.fetch_object_by_id(_CONFIG_UUID))
            if obj is None:
                meta: dict[str, Any] = {
                    "schema_version": SCHEMA_VERSION,
                    "analyzer": self.analyzer.name,
                    "embedder": None,
                    "dimension": None,
                }
                if not self._create_meta(meta):  # another process created it first: use theirs
                    obj = self._call("read meta", lambda: meta_coll.query.fetch_object_by_id(_CONFIG_UUID))
                    if obj is None:
                        raise SchemaError(f"the meta object of {self.collection!r} vanished while it was created")
                    meta = json.loads(obj.properties["value"])
            else:
                meta = json.loads(obj.properties["value"])
            unsaved = False
            if meta.get("embedder") is None or meta.get("dimension") is None:
                # Bound by a process that died before it copied its binding here (see _claim_binding).
                bound = self._call("read embedder binding", self._read_binding)
                if bound is not None:
                    copied = _with_binding(meta, bound)
                    unsaved, meta = copied != meta, copied
            self._meta, self._meta_unsaved = meta, unsaved
            return meta

    def _create_meta(self, meta: Mapping[str, Any]) -> bool:
        """Insert the first meta object; ``False`` when another process inserted it meanwhile."""
        meta_coll = self._coll(self.meta_collection, write=True)
        props = {"key": "config", "value": json.dumps(dict(meta), sort_keys=True)}

        def run() -> bool:
            try:
                meta_coll.data.insert(properties=props, uuid=_CONFIG_UUID)
            except Exception as exc:
                if getattr(exc, "status_code", None) == 422 and meta_coll.data.exists(_CONFIG_UUID):
                    return False  # 422 "id already exists": a concurrent first connection won
                raise
            return True

        return bool(self._call("create meta", run))

    def _write_meta(self, meta: Mapping[str, Any]) -> None:
        meta_coll = self._coll(self.meta_collection, write=True)
        props = {"key": "config", "value": json.dumps(dict(meta), sort_keys=True)}

        def run() -> None:
            if meta_coll.data.exists(_CONFIG_UUID):
                meta_coll.data.replace(uuid=_CONFIG_UUID, properties=props)
            else:
                meta_coll.data.insert(properties=props, uuid=_CONFIG_UUID)

        self._call("write meta", run)

    @property
    def dimension(self) -> int | None:
        """Vector dimension of the stored memories (``None`` while no embedder was bound).

        Reads the meta collection once (network IO on first access).
        """
        self._check_open()
        dim = self._load_meta().get("dimension")
        return int(dim) if dim is not None else None

    @property
    def embedder_name(self) -> str | None:
        """Name of the embedder bound with :meth:`bind_embedder` (``None`` if unknown)."""
        self._check_open()
        name = self._load_meta().get("embedder")
        return str(name) if name is not None else None

    def bind_embedder(self, name: str, dimension: int) -> None:
        """Record the embedder on first use, or check it against the stored one.

        Of processes binding different embedders to a fresh collection at once, exactly one binds
        and the others get the errors below (the binding is a collection the server creates once:
        ``<collection>Embedder``). The same holds for naming a store whose first vectors were
        written without a name (``<collection>EmbedderName``).

        Raises:
            EmbeddingDimensionError: the store holds vectors of another dimension.
            EmbedderMismatchError: the collection recorded another embedder of the same dimension
                (the recorded name stays).
        """
        self._check_open()
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError("embedder name must be a non-empty str")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}")
        meta = self._load_meta()
        _check_binding(self.collection, meta, name, dimension)
        if meta.get("embedder") is not None and meta.get("dimension") is not None and not self._meta_unsaved:
            return
        meta = self._adopt_binding(self._claim_binding(name, dimension))
        _check_binding(self.collection, meta, name, dimension)
        if meta.get("embedder") is None:  # the first vectors were written unbound: the first name bound stays
            meta = self._adopt_binding({"embedder": self._claim_name(name), "dimension": meta["dimension"]})
            _check_binding(self.collection, meta, name, dimension)

    def _claim_binding(self, name: str | None, dimension: int) -> dict[str, Any]:
        """Bind ``name`` and ``dimension`` unless another process bound first; return the binding kept.

        The binding is a collection, ``<collection>Embedder``, whose description holds it as JSON
        (:meth:`_create_once`).
        """
        wanted: dict[str, Any] = {"embedder": name, "dimension": dimension}

        def run() -> dict[str, Any]:
            if self._create_once(self.binding_collection, json.dumps(wanted, sort_keys=True)):
                return wanted
            bound = self._read_binding()
            if bound is None:
                raise SchemaError(f"the embedder binding of {self.collection!r} vanished while it was read")
            return bound

        return dict(self._call("bind embedder", run))

    def _claim_name(self, name: str) -> str:
        """Name the embedder of a store whose first vectors were written unbound; return the name kept.

        The same compare-and-set as :meth:`_claim_binding`, on a second collection,
        ``<collection>EmbedderName``: of processes naming it at once exactly one creates it.
        """

        def run() -> str:
            if self._create_once(self.binding_name_collection, json.dumps({"embedder": name})):
                return name
            kept = self._read_binding_part(self.binding_name_collection, ("embedder",))["embedder"]
            if not isinstance(kept, str):
                raise SchemaError(f"collection {self.binding_name_collection!r} holds a malformed name: {kept!r}")
            return kept

        return str(self._call("name embedder", run))

    def _create_once(self, collection: str, description: str) -> bool:
        """Create an empty ``collection`` with ``description``; ``False`` when it exists already.

        The server creates collections through its Raft log, one at a time, and refuses a second
        create of a name, so of processes creating one at once exactly one gets ``True``: a
        compare-and-set. (An object insert at a fixed id would not do: the server checks that an
        id is free and writes it in two steps, so two inserts can both succeed.) Network IO, no retries.
        """
        from weaviate.classes.config import Configure

        cols = self._client.collections
        if cols.exists(collection):
            return False
        try:
            cols.create(
                collection,
                description=description,
                vector_config=Configure.Vectors.self_provided(vector_index_config=Configure.VectorIndex.none()),
                replication_config=Configure.replication(factor=self.replication_factor)
                if self.replication_factor is not None
                else None,
            )
        except Exception:
            if not cols.exists(collection):  # not a lost race: the create failed
                raise
            return False
        return True

    def _read_binding(self) -> dict[str, Any] | None:
        """The binding :meth:`_claim_binding` and :meth:`_claim_name` kept (``None`` before any); network IO, no retries."""
        cols = self._client.collections
        if not cols.exists(self.binding_collection):
            return None
        bound = self._read_binding_part(self.binding_collection, ("embedder", "dimension"))
        dimension, embedder = bound["dimension"], bound["embedder"]
        if isinstance(dimension, bool) or not isinstance(dimension, int) or not isinstance(embedder, (str, type(None))):
            raise SchemaError(f"collection {self.binding_collection!r} holds a malformed binding: {bound!r}")
        if embedder is None and cols.exists(self.binding_name_collection):  # named after an unbound first write
            embedder = self._read_binding_part(self.binding_name_collection, ("embedder",))["embedder"]
            if not isinstance(embedder, str):
                raise SchemaError(f"collection {self.binding_name_collection!r} holds a malformed name: {embedder!r}")
        return {"embedder": embedder, "dimension": dimension}

    def _read_binding_part(self, collection: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """The JSON object in ``collection``'s description, which must hold ``keys``."""
        description = self._client.collections.use(collection).config.get().description or ""
        try:
            held = json.loads(description)
            return {key: held[key] for key in keys}
        except (ValueError, TypeError, KeyError) as exc:
            raise SchemaError(f"collection {collection!r} does not hold an embedder binding: {description!r}") from exc

    def _adopt_binding(self, bound: Mapping[str, Any]) -> dict[str, Any]:
        """Copy the kept binding into the meta object where it lacks it; the meta data now."""
        meta = self._load_meta()
        merged = _with_binding(meta, bound)
        if merged != meta or self._meta_unsaved:
            with self._meta_lock:
                self._write_meta(merged)
                self._meta, self._meta_unsaved = merged, False
        return merged

    def _ensure_dimension(self, dim: int) -> None:
        """Check a write's vector dimension; the first vectors written unbound bind it (no name)."""
        stored = self.dimension
        if stored is None:  # maybe bound by another process since this one read the meta data
            stored = int(self._adopt_binding(self._claim_binding(None, dim))["dimension"])
        if stored != dim:
            raise EmbeddingDimensionError(stored, dim, hint=_REEMBED_HINT)


#: How to get out of a dimension mismatch.
_REEMBED_HINT = "re-embed into a new collection (`hybrid-memory reembed`) or use the original embedder"


def _with_binding(meta: Mapping[str, Any], bound: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` with the embedder and dimension of ``bound`` where it has none."""
    merged = dict(meta)
    if merged.get("dimension") is None:
        merged["dimension"] = bound["dimension"]
    if merged.get("embedder") is None and bound["embedder"] is not None:
        merged["embedder"] = bound["embedder"]
    return merged


def _check_binding(collection: str, meta: Mapping[str, Any], name: str, dimension: int) -> None:
    """Raise when the binding in ``meta`` refuses embedder ``name`` of ``dimension``."""
    stored = meta.get("dimension")
    if stored is not None and int(stored) != dimension:
        raise EmbeddingDimensionError(
            int(stored),
            dimension,
            hint=f"collection {collection!r} was built with embedder {meta.get('embedder')!r}; {_REEMBED_HINT}",
        )
    recorded = meta.get("embedder")
    if recorded is not None and recorded != name:
        raise EmbedderMismatchError(str(recorded), name, dimension)
