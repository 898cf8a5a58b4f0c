"""``HybridMemoryStore``: hybrid-memory as a LangGraph long-term ``BaseStore``.

Namespace mapping
-----------------
A store is built with a namespace *template*, by default ``("memories", "{user_id}")``. A
namespace belongs to the store when it starts with the template: literal labels must match and
the ``"{user_id}"`` label names the core user (one partition per user, never mixed). Labels after
the template are a free sub-namespace; when the first of them is a core category (``fact``,
``preference``, ``project``, ``temporary``, ``summary``, ``turn``) the memory gets that category
and searches under it are narrowed in the core. So with the default template:

* ``("memories", "alice")`` - Alice's memories;
* ``("memories", "alice", "preference")`` - Alice's preferences;
* ``("memories", "alice", "notes", "work")`` - a sub-namespace (category inferred from the text).

Use ``namespace=("{user_id}", "memories")`` for the ``(user_id, "memories")`` convention, or
``namespace=("{user_id}",)`` to make the first label of any namespace the user. Memories the core
wrote itself (conversation turns, ``remember``) appear under ``template + (category,)`` with
their id as key and ``{"content", "category", "importance", "source", "tags", "session_id",
"metadata"}`` as value, so graph nodes and tools see everything the user's memory holds.

Authenticated runs
------------------
Inside a graph run that a LangGraph server authenticated (``langgraph_auth_user`` in the run's
``configurable``), every operation is limited to that user: a namespace naming another user raises
:class:`~hybrid_memory.errors.IdentityMismatchError`, and searches or listings whose prefix stops
before the user label reach only the authenticated user. The server's own ``/store`` endpoints do
not run a graph, so no identity is visible there: authorise them with ``@auth.on.store``.

Where hybrid semantics differ from LangGraph's ``InMemoryStore``
----------------------------------------------------------------
* **Indexing**: every value is indexed for hybrid (BM25 + vector) search by default; the text is
  ``value["content"]`` or ``value["text"]`` when it is a string, else the whole value as JSON.
  ``fields=`` / ``put(..., index=[paths])`` select JSON paths (texts joined, not max-pooled).
  ``index=False`` items are stored and listed but never ranked: like ``InMemoryStore`` they only
  fill a query's page (``score=None``) after the ranked items.
* **Scores**: ``SearchItem.score`` is the core's final re-ranked score in 0..1
  (``w_rel·relevance + w_imp·importance + w_rec·recency + w_heat·heat``, less the length prior's
  penalty for an item of category ``"turn"``), not a cosine
  similarity. Results are best first as in LangGraph, but recency, importance and heat move
  items, and a query search counts as an access (heat). Per-component scores are available from
  :class:`~langchain_hybrid_memory.HybridMemoryRetriever` or ``memory.recall``.
* **Lifecycle**: query searches see active memories (archived ones only through the core's
  archive fall-back); ``get``, ``list_namespaces`` and searches without a query also see archived
  ones. Superseded or deleted memories leave the store. ``value["importance"]`` (0..1) and
  ``value["category"]`` (a core category) are used when present; otherwise the core's scorer
  and category rules decide.
* **Writes**: a ``put`` is an explicit keyed write: it replaces the item, keeps ``created_at``
  and bumps ``updated_at``. It bypasses the core writer's importance gate, de-duplication and
  conflict policy (they would make ``get`` miss what was just ``put``).
* **Batches** run their operations in order (a ``get`` after a ``put`` in one batch sees it).
* **Filters**: ``$eq $ne $gt $gte $lt $lte``, nested dicts and lists as in ``InMemoryStore``;
  a comparison on a missing or non-numeric value is simply false instead of raising. Values
  must be JSON-serialisable.
* **TTL** is not supported (``supports_ttl = False``): ``put(..., ttl=...)`` raises
  ``NotImplementedError`` like every ``BaseStore`` without TTL; use the core's lifecycle
  (``memory.consolidate``) to age memories out.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, get_args

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    validate_op_namespace,
)

from hybrid_memory.errors import IdentityMismatchError, InvalidInputError, NotFoundError
from hybrid_memory.memory import HybridMemory
from hybrid_memory.records import Category, MemoryRecord, RecallHit, check_id
from hybrid_memory.stores.base import MemoryFilter
from hybrid_memory.write.importance import infer_category
from langchain_hybrid_memory._identity import authenticated_identity, run_config
from langchain_hybrid_memory._utils import require_core

__all__ = ["HybridMemoryStore"]

USER_PLACEHOLDER = "{user_id}"
_CATEGORIES: frozenset[str] = frozenset(get_args(Category))
_KEY_NAMESPACE = uuid.UUID("4b7f2c1e-8a3d-5f60-9b1c-7e2d4a6f8c01")
_META = "langgraph"
_VISIBLE = MemoryFilter(statuses=("active", "archived"))
_MAX_RECALL = 1000
_COMPARATORS = ("$gt", "$gte", "$lt", "$lte")


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _apply_operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in _COMPARATORS:
        a, b = _num(value), _num(operand)
        if a is None or b is None:
            return False
        if operator == "$gt":
            return a > b
        if operator == "$gte":
            return a >= b
        if operator == "$lt":
            return a < b
        return a <= b
    raise ValueError(f"Unsupported filter operator: {operator!r} (use $eq, $ne, $gt, $gte, $lt or $lte)")


def _matches(value: Any, expected: Any) -> bool:
    """JSON-style match of one value against a filter value (operators, nested dicts, lists)."""
    if isinstance(expected, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in expected):
            return all(_apply_operator(value, op, operand) for op, operand in expected.items())
        if not isinstance(value, dict):
            return False
        return all(_matches(value.get(k), v) for k, v in expected.items())
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(expected)
            and all(_matches(a, b) for a, b in zip(value, expected, strict=True))
        )
    return bool(value == expected)


def _filter_ok(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    return not flt or all(_matches(value.get(k), v) for k, v in flt.items())


def _match_condition(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if cond.match_type not in ("prefix", "suffix"):
        raise ValueError(f"Unsupported match type: {cond.match_type!r}")
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or a == p for a, p in zip(part, path, strict=True))


class _View:
    """One memory as a LangGraph item."""

    __slots__ = ("created_at", "indexed", "key", "namespace", "record", "updated_at", "value")

    def __init__(
        self,
        record: MemoryRecord,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        indexed: bool,
    ) -> None:
        self.record = record
        self.namespace = namespace
        self.key = key
        self.value = value
        self.indexed = indexed
        self.created_at = record.created_at
        self.updated_at = record.updated_at

    def item(self) -> Item:
        return Item(
            value=copy.deepcopy(self.value),
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None) -> SearchItem:
        return SearchItem(self.namespace, self.key, copy.deepcopy(self.value), self.created_at, self.updated_at, score)


class HybridMemoryStore(BaseStore):
    """A LangGraph ``BaseStore`` whose search is hybrid-memory's recall (hybrid search + re-ranking).

    Give it to ``create_agent(..., store=...)`` or ``graph.compile(store=...)``: graph nodes,
    middleware and tools (``runtime.store``, LangMem's memory tools) then read and write the
    same per-user memories the core uses for context injection, with hybrid search, re-ranking
    and lifecycle. See the module docstring for the namespace mapping and where the semantics
    differ from ``InMemoryStore``.

    Args:
        memory: The hybrid-memory core (positional or ``memory=``).
        namespace: Namespace template with exactly one ``"{user_id}"`` label.
        fields: JSON paths whose text is indexed (``None``: ``content``, else ``text``, else the
            whole value as JSON). ``put(..., index=[...])`` overrides per item.
        alpha: Hybrid weight for query searches: 1.0 = pure vector, 0.0 = pure keyword (BM25);
            ``None`` uses the core's configured default.

    Raises:
        ConfigurationError: ``memory`` is not a ``HybridMemory``.
        ValueError: the template is not a tuple of valid labels with one ``"{user_id}"``.

    Example:
        >>> from hybrid_memory import HybridMemory, LocalStore
        >>> from hybrid_memory.testing import HashingEmbedder
        >>> mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        >>> store = HybridMemoryStore(mem)
        >>> store.put(("memories", "alice"), "tea", {"content": "Alice drinks green tea"})
        >>> store.put(("memories", "alice"), "job", {"content": "Alice works as a nurse"})
        >>> [(i.key, i.value) for i in store.search(("memories", "alice"), query="tea", limit=1)]
        [('tea', {'content': 'Alice drinks green tea'})]
        >>> store.search(("memories", "bob"), query="tea")
        []
        >>> store.get(("memories", "alice"), "job").value["content"]
        'Alice works as a nurse'
        >>> mem.close()
    """

    supports_ttl = False

    def __init__(
        self,
        memory: HybridMemory,
        *,
        namespace: Sequence[str] = ("memories", USER_PLACEHOLDER),
        fields: Sequence[str] | None = None,
        alpha: float | None = None,
    ) -> None:
        self.memory = require_core(memory, type(self).__name__)
        template = tuple(namespace)
        if isinstance(namespace, str) or not template or template.count(USER_PLACEHOLDER) != 1:
            raise ValueError(
                f'namespace must be a tuple of labels with exactly one "{USER_PLACEHOLDER}", got {namespace!r}'
            )
        for label in template:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label or label == "*":
                raise ValueError(f"invalid namespace label {label!r} in {template!r}")
        if alpha is not None and (isinstance(alpha, bool) or not 0.0 <= float(alpha) <= 1.0):
            raise ValueError(f"alpha must be in [0, 1] (1.0 = pure vector, 0.0 = pure BM25), got {alpha!r}")
        self.namespace_template = template
        self.fields = list(fields) if fields is not None else None
        self.alpha = alpha
        self._user_pos = template.index(USER_PLACEHOLDER)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ namespace mapping
    def _user_of(self, namespace: tuple[str, ...]) -> str | None:
        """The user a full namespace belongs to, or ``None`` when it is not under the template."""
        t = self.namespace_template
        if len(namespace) < len(t):
            return None
        for i, label in enumerate(t):
            if i != self._user_pos and namespace[i] != label:
                return None
        user = namespace[self._user_pos]
        return user if self._valid_user(user) else None

    @staticmethod
    def _valid_user(user: str) -> bool:
        try:
            check_id(user)
        except InvalidInputError:
            return False
        return True

    def _scope(self, prefix: tuple[str, ...]) -> tuple[list[str], str | None] | None:
        """Users a search prefix can reach and the core category it pins (``None``: no match)."""
        t = self.namespace_template
        for i, label in enumerate(prefix[: len(t)]):
            if i != self._user_pos and label != t[i]:
                return None
        if len(prefix) > self._user_pos:
            user = prefix[self._user_pos]
            if not self._valid_user(user):
                return None
            users = [user]
        else:
            users = sorted(self.memory.users())
        category = prefix[len(t)] if len(prefix) > len(t) and prefix[len(t)] in _CATEGORIES else None
        return users, category

    def _native_namespace(self, user: str, category: str) -> tuple[str, ...]:
        t = list(self.namespace_template)
        t[self._user_pos] = user
        return (*t, category)

    def _key_id(self, namespace: tuple[str, ...], key: str) -> str:
        try:
            return str(uuid.uuid5(_KEY_NAMESPACE, json.dumps([list(namespace), key], ensure_ascii=False)))
        except UnicodeEncodeError as exc:
            raise InvalidInputError("namespace labels and keys must be valid Unicode (lone surrogate?)") from exc

    def _view(self, record: MemoryRecord) -> _View:
        meta = record.metadata.get(_META)
        if isinstance(meta, dict) and isinstance(meta.get("namespace"), list) and isinstance(meta.get("key"), str):
            value = meta.get("value")
            return _View(
                record,
                tuple(meta["namespace"]),
                meta["key"],
                dict(value) if isinstance(value, dict) else {},
                bool(meta.get("indexed", True)),
            )
        native = {
            "content": record.content,
            "category": record.category,
            "importance": record.importance,
            "source": record.source,
            "tags": list(record.tags),
            "session_id": record.session_id,
            "metadata": dict(record.metadata),
        }
        return _View(record, self._native_namespace(record.user_id, record.category), record.id, native, True)

    def _find(self, user: str, namespace: tuple[str, ...], key: str) -> _View | None:
        """The visible item at ``(namespace, key)``: a keyed write, or a core memory by id."""
        for rid in dict.fromkeys((self._key_id(namespace, key), key)):
            try:
                rec = self.memory.get(rid, user_id=user)
            except (NotFoundError, InvalidInputError):
                continue
            if rec.status not in _VISIBLE.statuses:
                continue
            view = self._view(rec)
            if view.namespace == namespace and view.key == key:
                return view
        return None

    def _views(self, user: str, category: str | None) -> list[_View]:
        flt = _VISIBLE if category is None else MemoryFilter(categories=(category,), statuses=_VISIBLE.statuses)
        return [self._view(r) for r in self.memory.list_memories(user, filter=flt)]

    # ------------------------------------------------------------------ text to index
    def _index_text(self, value: Mapping[str, Any], index: Sequence[str] | None) -> str | None:
        paths = list(index) if index is not None else self.fields
        if paths is None:
            for name in ("content", "text"):
                v = value.get(name)
                if isinstance(v, str) and v.strip():
                    return v
            return get_text_at_path(dict(value), "$")[0]
        texts = [t for p in paths for t in get_text_at_path(dict(value), p) if t.strip()]
        return "\n".join(texts) if texts else None

    # ------------------------------------------------------------------ operations
    def _get(self, op: GetOp) -> Item | None:
        user = self._user_of(tuple(op.namespace))
        if user is None:
            return None
        view = self._find(user, tuple(op.namespace), op.key)
        return view.item() if view is not None else None

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        if op.ttl is not None:
            raise NotImplementedError(
                f"TTL is not supported by {type(self).__name__}; pass ttl=None and age memories out "
                "with the core's lifecycle (memory.consolidate)"
            )
        user = self._user_of(namespace)
        if user is None:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} is not under this store's template {self.namespace_template!r}"
            )
        if not isinstance(op.key, str):
            raise InvalidInputError(f"key must be a str, got {type(op.key).__name__}")
        with self._lock:
            existing = self._find(user, namespace, op.key)
            if op.value is None:
                if existing is not None:
                    self.memory.forget(existing.record.id, user_id=user)
                return
            self._write(user, namespace, op.key, op.value, op.index, existing)

    def _write(
        self,
        user: str,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Any,
        existing: _View | None,
    ) -> None:
        if not isinstance(value, Mapping):
            raise InvalidInputError(f"value must be a mapping, got {type(value).__name__}")
        try:
            stored = json.loads(json.dumps(dict(value), ensure_ascii=False))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"value must be JSON-serialisable: {exc}") from exc
        text = None if index is False else self._index_text(stored, index if isinstance(index, list) else None)
        indexed = text is not None
        content = text if text is not None else json.dumps(stored, ensure_ascii=False, sort_keys=True)
        label = namespace[len(self.namespace_template)] if len(namespace) > len(self.namespace_template) else None
        category = (
            label
            if label in _CATEGORIES
            else (stored["category"] if stored.get("category") in _CATEGORIES else infer_category(content))
        )
        imp = stored.get("importance")
        unscored = isinstance(imp, bool) or not isinstance(imp, (int, float)) or not 0.0 <= float(imp) <= 1.0
        if unscored:
            imp = 0.5  # placeholder: the core scores the redacted content (put(..., score=True))
        now = self.memory.now()
        rid = existing.record.id if existing is not None else self._key_id(namespace, key)
        record = MemoryRecord.create(
            user_id=user,
            content=content,
            id=rid,
            timestamp=now,
            created_at=existing.created_at if existing is not None else now,
            category=category,
            importance=float(imp),
            source="inferred",
            metadata={_META: {"namespace": list(namespace), "key": key, "value": stored, "indexed": indexed}},
        )
        # An explicit keyed write: replaces the item, PII redacted, no dedup/gate (module docstring).
        self.memory.put(record, score=unscored)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        _check_page(op.limit, op.offset)
        prefix = tuple(op.namespace_prefix)
        scope = self._scope(prefix)
        if scope is None or op.limit <= 0:
            return []
        users, category = scope
        n = len(prefix)

        def wanted(v: _View) -> bool:
            return v.namespace[:n] == prefix and _filter_ok(v.value, op.filter)

        query = op.query if isinstance(op.query, str) and op.query.strip() else None
        if query is None:
            views = [v for u in users for v in self._views(u, category) if wanted(v)]
            return [v.search_item(None) for v in views[op.offset : op.offset + op.limit]]

        need = op.offset + op.limit
        ranked: list[tuple[float, int, _View]] = []
        for u in users:
            for hit in self._recall(query, u, category, need, wanted):
                ranked.append((hit[0], len(ranked), hit[1]))
        ranked.sort(key=lambda x: (-x[0], x[1]))
        used = ranked[op.offset : need]
        page: list[SearchItem] = [v.search_item(score) for score, _, v in used]
        for u in users:  # only what is returned counts as an access (heat)
            self.memory.touch(u, [v.record.id for _, _, v in used if v.record.user_id == u])
        if len(page) < op.limit:
            seen = {(v.namespace, v.key) for _, _, v in ranked}
            fill = [
                v
                for u in users
                for v in self._views(u, category)
                if not v.indexed and (v.namespace, v.key) not in seen and wanted(v)
            ]
            page.extend(v.search_item(None) for v in fill[: op.limit - len(page)])
        return page

    def _recall(self, query: str, user: str, category: str | None, need: int, wanted: Any) -> list[tuple[float, _View]]:
        flt = MemoryFilter(categories=(category,)) if category is not None else None
        k = min(max(need, 1), _MAX_RECALL)
        while True:
            hits: list[RecallHit] = self.memory.recall(
                query, user_id=user, k=k, alpha=self.alpha, filter=flt, touch=False
            )
            out = [(h.score, v) for h in hits if (v := self._view(h.record)).indexed and wanted(v)]
            if len(out) >= need or len(hits) < k or k >= _MAX_RECALL:
                return out
            k = min(k * 4, _MAX_RECALL)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        _check_page(op.limit, op.offset)
        conditions = tuple(op.match_conditions or ())
        users: list[str] | None = None
        for cond in conditions:
            if cond.match_type == "prefix" and len(cond.path) > self._user_pos and cond.path[self._user_pos] != "*":
                user = cond.path[self._user_pos]
                users = [user] if self._valid_user(user) else []
        if users is None:
            users = sorted(self.memory.users())
        namespaces = {v.namespace for u in users for v in self._views(u, None)}
        matched = [ns for ns in namespaces if all(_match_condition(c, ns) for c in conditions)]
        if op.max_depth is not None:
            matched = list({ns[: op.max_depth] for ns in matched})
        return sorted(matched)[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------------ identity
    def _under_template(self, namespace: tuple[str, ...]) -> bool:
        """The namespace's literal labels (not the user label) agree with the template as far as both go."""
        t = self.namespace_template
        return all(namespace[i] == t[i] for i in range(min(len(namespace), len(t))) if i != self._user_pos)

    def _scope_to(self, op: Op, authenticated: str) -> Op:
        """``op`` limited to the run's authenticated user; naming another user is refused.

        Raises:
            IdentityMismatchError: the op's namespace names another user.
        """
        pos = self._user_pos
        own = (*self.namespace_template[:pos], authenticated)

        def refuse(user: str) -> IdentityMismatchError:
            return IdentityMismatchError(
                f"{type(self).__name__}: the namespace names user {user!r}, but the graph run is authenticated "
                "as another user; a client may not read or write another user's memories",
                authenticated=authenticated,
                claimed=user,
            )

        if isinstance(op, (GetOp, PutOp)):
            ns = tuple(op.namespace)
            if len(ns) > pos and self._under_template(ns) and ns[pos] != authenticated:
                raise refuse(ns[pos])
            return op
        if isinstance(op, SearchOp):
            prefix = tuple(op.namespace_prefix)
            if len(prefix) > pos:
                if self._under_template(prefix) and prefix[pos] != authenticated:
                    raise refuse(prefix[pos])
                return op
            return op._replace(namespace_prefix=own) if self._under_template(prefix) else op
        if isinstance(op, ListNamespacesOp):
            for cond in op.match_conditions or ():
                path = tuple(cond.path)
                if (
                    cond.match_type == "prefix"
                    and len(path) > pos
                    and path[pos] not in ("*", authenticated)
                    and all(path[i] in ("*", self.namespace_template[i]) for i in range(pos))
                ):
                    raise refuse(path[pos])
            return op._replace(match_conditions=(*(op.match_conditions or ()), MatchCondition("prefix", own)))
        return op

    # ------------------------------------------------------------------ BaseStore
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order and return one result per op (see ``BaseStore.batch``).

        Inside a graph run that the LangGraph server authenticated, every op is limited to that
        user: a namespace naming another user raises
        :class:`~hybrid_memory.errors.IdentityMismatchError`, and searches or listings that would
        reach every user reach only the authenticated one.
        """
        authenticated = authenticated_identity(None, run_config())
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            if authenticated is not None:
                op = self._scope_to(op, authenticated)
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise ValueError(f"Unknown operation type: {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch` (runs it in a worker thread)."""
        materialized = list(ops)
        return await asyncio.to_thread(self.batch, materialized)


def _check_page(limit: object, offset: object) -> None:
    """``limit`` and ``offset`` must be non-negative ints (a float or None would fail deep inside)."""
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"{name} must be a non-negative int, got {value!r}")
