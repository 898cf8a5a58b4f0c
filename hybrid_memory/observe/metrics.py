"""In-process metrics of a :class:`~hybrid_memory.memory.HybridMemory`, and a Prometheus view.

What is counted (nothing leaves the process unless you expose it):

* **latency** of every operation (``add_turn``, ``recall``, ``build_context``, ``remember``,
  ``end_session``) as a histogram with fixed buckets plus p50/p95/p99 of the recent calls;
* **hit rate**: the share of ``build_context`` calls that injected something into the prompt,
  with the reasons of the skipped ones; for plain ``recall`` the share that returned a hit;
* **write outcomes**: ``added``, ``deduplicated``, ``superseded``, ``demoted``, ``rejected``,
  ``updated`` and ``dead_lettered`` (writes the store kept in its dead-letter queue after
  retries, e.g. a Weaviate outage);
* **scorer fallbacks**: texts the importance scorer could not score itself (an LLM scorer that
  timed out and fell back to the heuristic);
* **importance refinements**: ``add_turn`` scores that an LLM scorer refined in the background
  (turns looked at, scores changed, turns promoted into long-term memory, refinements refused
  because the user was forgotten meanwhile, turns whose refinement fell back), with the
  ``refine_importance`` latency in the operation histograms;
* **background errors** by kind (``extraction``, ``summary``, ``refinement``, ``job``): failures of
  work done off the hot path, never raised to the agent;
* **store size per user**, read from the store when a snapshot is taken.

``mem.metrics()`` returns a :class:`MetricsSnapshot`; :func:`prometheus_registry` and
:func:`serve_prometheus` expose the same numbers to Prometheus (``pip install
'hybrid-memory[prometheus]'``).

Example:
    >>> from hybrid_memory.observe.metrics import MemoryMetrics
    >>> m = MemoryMetrics()
    >>> m.observe_op("recall", 0.004)
    >>> m.observe_context(injected=True, skipped_reason=None, degraded=False)
    >>> m.observe_context(injected=False, skipped_reason="no memories recalled", degraded=False)
    >>> m.observe_writes(["added", "added", "deduplicated"])
    >>> snap = m.snapshot()
    >>> snap.operations["recall"].count, snap.context.hit_rate, snap.writes["added"]
    (1, 0.5, 2)
    >>> snap.operations["recall"].buckets[:3]
    [(0.001, 0), (0.0025, 0), (0.005, 1)]
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hybrid_memory.config import MetricsConfig
from hybrid_memory.errors import MissingDependencyError
from hybrid_memory.records import utcnow
from hybrid_memory.stores.budget import CacheStats, cache_budget

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_memory.stores.base import MemoryStore

__all__ = [
    "WRITE_ACTIONS",
    "ContextStats",
    "MemoryMetrics",
    "MetricsSnapshot",
    "OperationStats",
    "RecallStats",
    "RefinementStats",
    "ScorerStats",
    "StoreStats",
    "prometheus_registry",
    "serve_prometheus",
]

#: Every write outcome that is counted (``dead_lettered``: kept in the store's dead-letter queue).
WRITE_ACTIONS = ("added", "deduplicated", "superseded", "demoted", "rejected", "updated", "dead_lettered")
_RESERVOIR = 2048


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class OperationStats:
    """Calls, errors and latency of one operation.

    ``buckets`` are cumulative ``(upper bound in seconds, calls at or below it)`` pairs like a
    Prometheus histogram (the ``+Inf`` bucket is ``count``); the quantiles are computed from the
    most recent 2,048 calls.
    """

    count: int
    errors: int
    sum_seconds: float
    buckets: list[tuple[float, int]]
    p50: float | None
    p95: float | None
    p99: float | None

    @property
    def mean(self) -> float | None:
        """Mean latency in seconds (``None`` before the first call)."""
        return self.sum_seconds / self.count if self.count else None


@dataclass(frozen=True)
class ContextStats:
    """``build_context`` outcomes: injected (hit), skipped (with reasons), degraded."""

    calls: int
    injected: int
    skipped: int
    degraded: int
    skip_reasons: dict[str, int]

    @property
    def hit_rate(self) -> float | None:
        """Share of calls that injected memories into the prompt (``None`` before any call)."""
        return self.injected / self.calls if self.calls else None


@dataclass(frozen=True)
class RecallStats:
    """Plain ``recall`` calls and how many returned at least one memory."""

    calls: int
    nonempty: int

    @property
    def hit_rate(self) -> float | None:
        """Share of recalls that returned something (``None`` before any call)."""
        return self.nonempty / self.calls if self.calls else None


@dataclass(frozen=True)
class ScorerStats:
    """Importance scoring: texts scored, and how many fell back to another scorer."""

    calls: int
    items: int
    fallback_items: int
    fallback_calls: int
    fallbacks_by_scorer: dict[str, int]
    last_fallback_reason: str | None


@dataclass(frozen=True)
class RefinementStats:
    """Background refinements of ``add_turn`` importance by an LLM scorer (see :mod:`hybrid_memory.write.refine`).

    ``turns``: turns whose score was looked at; ``changed``: stored memories whose importance
    changed; ``promoted``: turns written to long-term memory because the refined score cleared
    ``writer.turn_min_importance``; ``refused``: turns whose user was forgotten meanwhile (nothing
    written); ``fallback``: turns the LLM did not score (the heuristic score stays).
    """

    batches: int = 0
    turns: int = 0
    changed: int = 0
    promoted: int = 0
    refused: int = 0
    fallback: int = 0


_REFINEMENT_FIELDS = ("batches", "turns", "changed", "promoted", "refused", "fallback")


@dataclass(frozen=True)
class StoreStats:
    """Memories per user (all statuses) as the store reported them at snapshot time.

    ``users`` is complete; the Prometheus view reports only the ``max_user_series`` largest one
    by one. ``dead_letters`` is the store's dead-letter queue length (``None`` when the store has
    no such queue).
    """

    users: dict[str, int]
    total: int
    dead_letters: int | None = None


@dataclass(frozen=True)
class MetricsSnapshot:
    """Every metric at one moment (see the module docstring)."""

    started_at: datetime
    uptime_seconds: float
    operations: dict[str, OperationStats]
    context: ContextStats
    recall: RecallStats
    writes: dict[str, int]
    scorer: ScorerStats
    trace_steps: int
    trace_errors: int
    store: StoreStats | None = None
    extra: dict[str, int] = field(default_factory=dict)
    cache: CacheStats | None = None  # the process's per-user caches (hybrid_memory.stores.budget)
    refinement: RefinementStats = field(default_factory=RefinementStats)
    background_errors: dict[str, int] = field(default_factory=dict)

    @property
    def recall_latency(self) -> OperationStats | None:
        """The ``recall`` latency histogram (``None`` before the first recall)."""
        return self.operations.get("recall")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (timestamps as ISO-8601, derived rates included)."""
        d = asdict(self)
        d["started_at"] = self.started_at.isoformat()
        d["context"]["hit_rate"] = self.context.hit_rate
        d["recall"]["hit_rate"] = self.recall.hit_rate
        for name, op in self.operations.items():
            d["operations"][name]["mean"] = op.mean
            d["operations"][name]["buckets"] = [[le, n] for le, n in op.buckets]
        return d


class _Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.count = 0
        self.errors = 0
        self.sum = 0.0
        self.recent: deque[float] = deque(maxlen=_RESERVOIR)

    def observe(self, seconds: float, error: bool) -> None:
        i = bisect.bisect_left(self.bounds, seconds)
        if i < len(self.counts):
            self.counts[i] += 1
        self.count += 1
        self.sum += seconds
        self.recent.append(seconds)
        if error:
            self.errors += 1

    def stats(self) -> OperationStats:
        cumulative: list[tuple[float, int]] = []
        running = 0
        for le, n in zip(self.bounds, self.counts, strict=True):
            running += n
            cumulative.append((le, running))
        recent = sorted(self.recent)
        return OperationStats(
            count=self.count,
            errors=self.errors,
            sum_seconds=self.sum,
            buckets=cumulative,
            p50=_quantile(recent, 0.5),
            p95=_quantile(recent, 0.95),
            p99=_quantile(recent, 0.99),
        )


class MemoryMetrics:
    """Thread-safe counters behind :meth:`HybridMemory.metrics`.

    Args:
        config: Buckets and series limits (default :class:`~hybrid_memory.config.MetricsConfig`).
    """

    def __init__(self, config: MetricsConfig | None = None) -> None:
        self.config = config if config is not None else MetricsConfig()
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero every counter (the start time too)."""
        with self._lock:
            self._started = utcnow()
            self._t0 = time.monotonic()
            self._ops: dict[str, _Histogram] = {}
            self._ctx = Counter[str]()
            self._skip_reasons = Counter[str]()
            self._recall = Counter[str]()
            self._writes = Counter[str]({a: 0 for a in WRITE_ACTIONS})
            self._scorer = Counter[str]()
            self._fallback_by = Counter[str]()
            self._last_fallback: str | None = None
            self._trace = Counter[str]()
            self._refine = Counter[str]()
            self._bg_errors = Counter[str]()

    # -- observations -------------------------------------------------------------------------
    def observe_op(self, op: str, seconds: float, *, error: bool = False) -> None:
        """Record one call of ``op`` that took ``seconds`` (and whether it raised)."""
        with self._lock:
            h = self._ops.get(op)
            if h is None:
                h = self._ops[op] = _Histogram(self.config.latency_buckets)
            h.observe(max(0.0, float(seconds)), error)

    def observe_context(self, *, injected: bool, skipped_reason: str | None, degraded: bool) -> None:
        """Record the outcome of one ``build_context``."""
        with self._lock:
            self._ctx["calls"] += 1
            if injected:
                self._ctx["injected"] += 1
            else:
                self._ctx["skipped"] += 1
                self._skip_reasons[_reason_key(skipped_reason)] += 1
            if degraded:
                self._ctx["degraded"] += 1

    def observe_recall(self, hits: int) -> None:
        """Record one plain ``recall`` that returned ``hits`` memories."""
        with self._lock:
            self._recall["calls"] += 1
            if hits > 0:
                self._recall["nonempty"] += 1

    def observe_writes(self, actions: Iterable[str]) -> None:
        """Count write outcomes by action."""
        with self._lock:
            for a in actions:
                self._writes[a] += 1

    def observe_dead_lettered(self, n: int) -> None:
        """Count ``n`` writes that the store moved to its dead-letter queue."""
        if n > 0:
            with self._lock:
                self._writes["dead_lettered"] += n

    def observe_scoring(self, scorer: str, items: int, fallback_items: int, reason: str | None) -> None:
        """Record one scorer call over ``items`` texts of which ``fallback_items`` fell back."""
        with self._lock:
            self._scorer["calls"] += 1
            self._scorer["items"] += items
            if fallback_items > 0:
                self._scorer["fallback_items"] += fallback_items
                self._scorer["fallback_calls"] += 1
                self._fallback_by[scorer] += fallback_items
                self._last_fallback = reason

    def observe_refinement(
        self, *, turns: int, changed: int = 0, promoted: int = 0, refused: int = 0, fallback: int = 0
    ) -> None:
        """Record one background refinement batch (see :class:`RefinementStats`)."""
        with self._lock:
            self._refine["batches"] += 1
            for k, v in (("turns", turns), ("changed", changed), ("promoted", promoted), ("refused", refused)):
                self._refine[k] += v
            self._refine["fallback"] += fallback

    def observe_background_error(self, kind: str) -> None:
        """Count one failure of background work of ``kind`` (extraction, summary, refinement, job)."""
        with self._lock:
            self._bg_errors[kind] += 1

    def observe_trace(self, *, error: bool = False) -> None:
        """Count a stored trace step (or a trace write that failed)."""
        with self._lock:
            self._trace["errors" if error else "steps"] += 1

    # -- reading ------------------------------------------------------------------------------
    def snapshot(self, store: MemoryStore | None = None) -> MetricsSnapshot:
        """Every metric now; with ``store``, also the number of memories per user."""
        store_stats = store_sizes(store) if store is not None else None
        with self._lock:
            return MetricsSnapshot(
                started_at=self._started,
                uptime_seconds=time.monotonic() - self._t0,
                operations={k: h.stats() for k, h in sorted(self._ops.items())},
                context=ContextStats(
                    calls=self._ctx["calls"],
                    injected=self._ctx["injected"],
                    skipped=self._ctx["skipped"],
                    degraded=self._ctx["degraded"],
                    skip_reasons=dict(self._skip_reasons),
                ),
                recall=RecallStats(calls=self._recall["calls"], nonempty=self._recall["nonempty"]),
                writes=dict(self._writes),
                scorer=ScorerStats(
                    calls=self._scorer["calls"],
                    items=self._scorer["items"],
                    fallback_items=self._scorer["fallback_items"],
                    fallback_calls=self._scorer["fallback_calls"],
                    fallbacks_by_scorer=dict(self._fallback_by),
                    last_fallback_reason=self._last_fallback,
                ),
                trace_steps=self._trace["steps"],
                trace_errors=self._trace["errors"],
                store=store_stats,
                cache=cache_budget().stats(),
                refinement=RefinementStats(**{k: self._refine[k] for k in _REFINEMENT_FIELDS}),
                background_errors=dict(self._bg_errors),
            )


def _reason_key(reason: str | None) -> str:
    """Skip reasons without their variable part ("over the token budget (1228)" -> "... budget")."""
    if not reason:
        return "unknown"
    head = reason.split(":", 1)[0]
    return head.split(" (", 1)[0].strip() or "unknown"


def store_sizes(store: MemoryStore) -> StoreStats:
    """Memories per user (every status) and the dead-letter queue length of ``store``."""
    from hybrid_memory.stores.base import MemoryFilter

    everything = MemoryFilter(statuses=("active", "superseded", "archived", "deleted"))
    users = {u: store.count(u, filter=everything) for u in store.users()}
    dl = getattr(store, "dead_letter_count", None)
    return StoreStats(users=users, total=sum(users.values()), dead_letters=int(dl()) if callable(dl) else None)


# ----------------------------------------------------------------------------- Prometheus
def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise MissingDependencyError("prometheus-client", "prometheus") from exc
    return prometheus_client


class _Collector:
    """Builds the metric families from a fresh snapshot on every scrape."""

    def __init__(self, source: Any, *, store_sizes: bool) -> None:
        self._source = source
        self._store_sizes = store_sizes

    def describe(self) -> list[Any]:
        return []  # unchecked collector: families are produced at scrape time

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        src = self._source
        if isinstance(src, MemoryMetrics):
            snap, limit = src.snapshot(), src.config.max_user_series
        else:  # a HybridMemory
            snap = src.metrics(store_sizes=self._store_sizes)
            limit = src.config.metrics.max_user_series
        hist = HistogramMetricFamily(
            "hybrid_memory_operation_duration_seconds", "Latency of memory operations", labels=["op"]
        )
        errors = CounterMetricFamily("hybrid_memory_operation_errors", "Operations that raised", labels=["op"])
        for op, st in snap.operations.items():
            buckets = [(repr(le), float(n)) for le, n in st.buckets] + [("+Inf", float(st.count))]
            hist.add_metric([op], buckets, st.sum_seconds)
            errors.add_metric([op], st.errors)
        yield hist
        yield errors
        ctx = CounterMetricFamily("hybrid_memory_context_builds", "build_context calls by outcome", labels=["outcome"])
        ctx.add_metric(["injected"], snap.context.injected)
        ctx.add_metric(["skipped"], snap.context.skipped)
        yield ctx
        degraded = CounterMetricFamily("hybrid_memory_context_degraded", "build_context calls without the store")
        degraded.add_metric([], snap.context.degraded)
        yield degraded
        skips = CounterMetricFamily("hybrid_memory_context_skips", "Skipped injections by reason", labels=["reason"])
        for reason, n in sorted(snap.context.skip_reasons.items()):
            skips.add_metric([reason], n)
        yield skips
        rate = GaugeMetricFamily("hybrid_memory_context_hit_rate", "Share of build_context calls that injected")
        rate.add_metric([], snap.context.hit_rate if snap.context.hit_rate is not None else math.nan)
        yield rate
        recalls = CounterMetricFamily("hybrid_memory_recalls", "recall calls by result", labels=["result"])
        recalls.add_metric(["nonempty"], snap.recall.nonempty)
        recalls.add_metric(["empty"], snap.recall.calls - snap.recall.nonempty)
        yield recalls
        writes = CounterMetricFamily("hybrid_memory_writes", "Long-term write outcomes", labels=["action"])
        for action, n in sorted(snap.writes.items()):
            writes.add_metric([action], n)
        yield writes
        scored = CounterMetricFamily("hybrid_memory_scored_texts", "Texts scored for importance")
        scored.add_metric([], snap.scorer.items)
        yield scored
        fb = CounterMetricFamily(
            "hybrid_memory_scorer_fallbacks", "Texts scored by a fallback scorer", labels=["scorer"]
        )
        for name, n in sorted(snap.scorer.fallbacks_by_scorer.items()):
            fb.add_metric([name], n)
        yield fb
        refine = CounterMetricFamily(
            "hybrid_memory_importance_refinements",
            "Turns whose add_turn importance an LLM scorer refined in the background, by outcome",
            labels=["outcome"],
        )
        for name in _REFINEMENT_FIELDS[1:]:
            refine.add_metric([name], getattr(snap.refinement, name))
        yield refine
        bg = CounterMetricFamily(
            "hybrid_memory_background_errors", "Failures of background work by kind", labels=["kind"]
        )
        for kind, n in sorted(snap.background_errors.items()):
            bg.add_metric([kind], n)
        yield bg
        traces = CounterMetricFamily("hybrid_memory_trace_steps", "Trace steps stored", labels=["result"])
        traces.add_metric(["stored"], snap.trace_steps)
        traces.add_metric(["failed"], snap.trace_errors)
        yield traces
        if snap.cache is not None:
            c = snap.cache
            for name, help_text, value in (
                ("hybrid_memory_cache_bytes", "Estimated bytes of per-user caches", c.bytes),
                ("hybrid_memory_cache_budget_bytes", "Budget of per-user caches", c.max_bytes),
                ("hybrid_memory_cache_entries", "Cached per-user entries", c.entries),
            ):
                g = GaugeMetricFamily(name, help_text)
                g.add_metric([], value)
                yield g
            for name, help_text, value in (
                ("hybrid_memory_cache_hits", "Per-user cache hits", c.hits),
                ("hybrid_memory_cache_misses", "Per-user cache builds", c.misses),
                ("hybrid_memory_cache_evictions", "Per-user cache entries evicted for the budget", c.evictions),
            ):
                k = CounterMetricFamily(name, help_text)
                k.add_metric([], value)
                yield k
        if snap.store is not None:
            size = GaugeMetricFamily(
                "hybrid_memory_store_memories", "Memories per user (largest users)", labels=["user"]
            )
            for user, n in sorted(snap.store.users.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]:
                size.add_metric([user], n)
            yield size
            total = GaugeMetricFamily("hybrid_memory_store_memories_all", "Memories of every user")
            total.add_metric([], snap.store.total)
            yield total
            users = GaugeMetricFamily("hybrid_memory_store_users", "Users with memories")
            users.add_metric([], len(snap.store.users))
            yield users
            if snap.store.dead_letters is not None:
                dl = GaugeMetricFamily("hybrid_memory_dead_letters", "Writes waiting in the dead-letter queue")
                dl.add_metric([], snap.store.dead_letters)
                yield dl


def prometheus_registry(source: Any, *, store_sizes: bool = True) -> Any:
    """A ``prometheus_client.CollectorRegistry`` exposing the metrics of ``source``.

    Args:
        source: A :class:`~hybrid_memory.memory.HybridMemory` (or a bare :class:`MemoryMetrics`).
        store_sizes: Also report memories per user (counts the store on every scrape).

    Raises:
        MissingDependencyError: ``prometheus-client`` is not installed
            (``pip install 'hybrid-memory[prometheus]'``).

    Example:
        >>> from prometheus_client import generate_latest  # doctest: +SKIP
        >>> print(generate_latest(prometheus_registry(mem)).decode())  # doctest: +SKIP
    """
    prom = _prometheus()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(_Collector(source, store_sizes=store_sizes))
    return registry


def serve_prometheus(source: Any, *, port: int = 9464, addr: str = "127.0.0.1", store_sizes: bool = True) -> Any:
    """Serve ``/metrics`` for Prometheus in a daemon thread; returns the HTTP server.

    Binds to ``127.0.0.1`` by default; pass ``addr="0.0.0.0"`` deliberately to expose it.
    Call ``server.shutdown()`` to stop it.

    Raises:
        MissingDependencyError: ``prometheus-client`` is not installed.
    """
    prom = _prometheus()
    server, _thread = prom.start_http_server(
        port, addr=addr, registry=prometheus_registry(source, store_sizes=store_sizes)
    )
    return server
