"""One frozen configuration model for the whole library.

Every setting can come from the environment with the prefix ``HYBRID_MEMORY_`` and ``__`` between
nested sections, e.g. ``HYBRID_MEMORY_RETRIEVAL__ALPHA=0.3``; ``null`` sets an optional field to
None (``HYBRID_MEMORY_WRITER__CONTEXT_WORDS=null``). Numbers are taken as given: ``alpha=0.0``
stays 0.0 (1.0 = pure vector, 0.0 = pure keyword/BM25).

Example:
    >>> cfg = HybridMemoryConfig(retrieval={"alpha": 0.0})
    >>> cfg.retrieval.alpha
    0.0
    >>> cfg.rerank.half_life_days
    7.0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hybrid_memory.errors import ConfigurationError

__all__ = [
    "BufferConfig",
    "CacheConfig",
    "FuserConfig",
    "HybridMemoryConfig",
    "LifecycleConfig",
    "MetricsConfig",
    "RerankConfig",
    "RetrievalConfig",
    "TraceConfig",
    "WriterConfig",
    "as_config",
    "load_config",
]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RetrievalConfig(_Section):
    """Hybrid candidate search.

    ``alpha``: 1.0 = pure vector, 0.0 = pure keyword (BM25). The default 0.4 was chosen on the dev
    benchmarks through the public API (with search context and time windows: LoCoMo R@10 0.712,
    LongMemEval session recall_all@5 0.957, MemoryBank-CN R@5 0.986, mean 0.885; the best swept
    alpha, 0.5, averages 0.887 and 0.25 averages 0.880; see ``benchmarks/results/report.md``).
    """

    alpha: float = Field(default=0.4, ge=0.0, le=1.0)
    candidates: int = Field(default=20, ge=1, le=10_000, description="hybrid hits re-ranked per recall")
    fusion: Literal["relative", "ranked"] = "relative"
    max_vector_distance: float | None = Field(default=None, ge=0.0, le=2.0)
    archive_fallback: bool = Field(
        default=True, description="search archived memories when active ones have nothing relevant"
    )
    time_windows: bool = Field(
        default=True,
        description="date-aware query analysis: when the query names a time ('5月2日', 'last week'), also search "
        "that period and favour memories created in it (re-rank weight w_time)",
    )
    max_time_windows: int = Field(default=3, ge=0, le=20, description="extra period searches per recall")
    drop_period_words: bool = Field(
        default=True,
        description="the keyword leg searches the query without the words that name its time windows "
        "('the past two weeks', '5月2日'): the windows select and favour the period, and the words would match "
        "any memory that uses them (the vector leg still embeds the whole query); false = keep them",
    )
    feedback_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=10.0,
        description="dense pseudo-relevance feedback: search a second time with the query vector plus this weight "
        "times the stored vector of the first search's best hit (renormalised), and keep that search's order; "
        "each hit's vector_similarity stays its cosine to the query itself (0 = off, one search)",
    )
    centre_weight: float = Field(
        default=0.75,
        ge=0.0,
        le=2.0,
        description="query centring: the vector leg searches with the query vector minus this weight times the "
        "mean of the user's active memory vectors (renormalised), so memories that resemble everything the user "
        "said (greetings, generic questions) stop crowding the vector leg; each hit's vector_similarity stays its "
        "cosine to the query itself. 0.75 was chosen on the dev benchmarks (benchmarks/results/centre_cv.md); "
        "0 = off. It needs a store that implements MeanSource (LocalStore and WeaviateStore do); with another "
        "store it is off, unless set explicitly (then ConfigurationError)",
    )


class RerankConfig(_Section):
    """Generative-Agents style re-ranking: ``w_rel·rel + w_imp·imp + w_rec·rec + w_heat·heat``.

    Defaults 0.6 / 0.2 / 0.1 / 0.1 (architecture's 0.5 / 0.2 / 0.2 / 0.1 with recency halved in
    favour of relevance): on the dev benchmarks LoCoMo R@10 0.635 vs 0.632 and MemoryBank-CN R@5
    0.905 vs 0.844 at alpha 0.4.

    Access touches (heat, recency) are written in the background by default
    (``touch_in_background``; see :mod:`hybrid_memory.read.touches`): they are hints, and those
    pending when the process is killed are lost.
    """

    w_relevance: float = Field(default=0.6, ge=0.0)
    w_importance: float = Field(default=0.2, ge=0.0)
    w_recency: float = Field(default=0.1, ge=0.0)
    w_heat: float = Field(default=0.1, ge=0.0)
    w_time: float = Field(
        default=0.2,
        ge=0.0,
        description="bonus for a memory created inside a period the query names (retrieval.time_windows)",
    )
    half_life_days: float = Field(default=7.0, gt=0.0)
    w_length: float = Field(
        default=0.4,
        ge=0.0,
        description="length prior: minus this weight times (1 - length_prior), where length_prior is min(1, "
        "ln(1 + content units) / ln(1 + length_cap)) for a conversation turn (a memory written with a search "
        "context, as add_turn writes it, or of category 'turn') and 1 for any other (remember(), the extractor's facts, "
        "imports), so that it loses nothing; the score is floored at 0. A turn that says little "
        "('Wow, what's your best camping memory?') ranks below one that tells something "
        "(hybrid_memory.text.analyzer.content_units)",
    )
    length_cap: float = Field(
        default=20.0, gt=0.0, description="content units at which a turn's length prior reaches 1 (w_length)"
    )
    guard_margin: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="re-rank guard: the candidates whose relevance is within this margin of the best candidate's "
        "rank first (at most k), whatever the importance, recency or heat of the others (None = off)",
    )
    guard_gap: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="re-rank guard: the candidates of the store's own top k whose relevance exceeds candidate "
        "k + 1's by at least this gap rank first, whatever the importance, recency or heat of the others "
        "(None = off)",
    )
    cross_script: bool = Field(
        default=True,
        description="a memory written in another script than the query (Chinese for an English question, or "
        "the reverse, no word in common for the keyword leg) gets the relevance its vector score alone gives "
        "(relative fusion: the candidates' cosines rescaled to 0..1) instead of only alpha times it",
    )
    touch_on_recall: bool = Field(
        default=False,
        description="recall() counts as an access (access_count += 1, last_accessed_at = now); off by default: "
        "on the dev benchmarks it let earlier answers crowd out later questions (LoCoMo R@10 0.381 vs 0.548)",
    )
    touch_on_inject: bool = Field(
        default=True, description="build_context counts the memories it injects as accessed (recency, heat)"
    )
    touch_in_background: bool = Field(
        default=True,
        description="write access touches (recall(touch=True), build_context, touch()) in a background thread, "
        "coalesced per (user, memory) and batched per user (access times within a minute are written as the latest "
        "of them), instead of on the caller's thread: on a replicated "
        "Weaviate cluster a touch costs about as much as the recall. flush() and close() write them, get / "
        "list_memories / consolidate of a user write that user's first, and recalls of this process rank with "
        "them before they are written; a failed write goes to "
        "background_errors, never raised. Touch counts are hints: those still pending when the process is "
        "killed are lost (at most what accumulated during one store write, bounded by 10,000 (user, memory) "
        "pairs). False = the old synchronous touch",
    )

    @model_validator(mode="after")
    def _some_weight(self) -> RerankConfig:
        if self.w_relevance + self.w_importance + self.w_recency + self.w_heat <= 0:
            raise ValueError("at least one re-rank weight must be positive")
        return self


class FuserConfig(_Section):
    """The context fuser: what goes into the prompt and how much of it."""

    max_memories: int = Field(default=5, ge=0)
    max_chars: int = Field(default=2000, ge=0)
    max_tokens: int | None = Field(default=None, ge=0, description="default: budget_ratio × context_window")
    context_window: int = Field(default=8192, ge=1)
    budget_ratio: float = Field(default=0.15, gt=0.0, le=1.0)
    min_similarity: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="cosine floor for a relevant memory; None = the embedder's calibrated value",
    )
    min_keyword_score: float = Field(
        default=0.5,
        ge=0.0,
        description="raw BM25 floor: a match on a term that is rare for this user counts as relevant "
        "(the floor gate only)",
    )
    gate: Literal["calibrated", "floor"] = Field(
        default="floor",
        description="'floor': a block is injected when a hit clears the cosine floor (min_similarity) or the raw "
        "BM25 floor (min_keyword_score); 'calibrated': only when a hit passes the embedder's measured injection "
        "gate (cosine, the query's terms in the memory's own text, a cross-lingual bonus; see "
        "hybrid_memory.read.gate and benchmarks/results/gate.md), far fewer blocks for nothing but more "
        "skips of memories that apply by implication; an explicit min_similarity selects the floor",
    )
    stm_dedup_threshold: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="cosine to a short-term turn that drops a hit (model calibrated when None)",
    )
    language: Literal["auto", "zh", "en"] = "auto"
    placement: Literal["user_message", "before_user", "system_end", "system_start"] = Field(
        default="user_message",
        description="where the adapters put the block: 'user_message' (inside the newest user message, before "
        "its text) or 'before_user' (a message right before it) keep the prompt's prefix byte-identical from one "
        "turn to the next, earlier blocks staying where they were (prefix caching; see "
        "hybrid_memory.read.placement); 'system_end' / 'system_start' put it in the system message (the old "
        "placements: every turn re-processes the conversation)",
    )
    degrade_on_store_error: bool = Field(
        default=False, description="build_context returns short-term only (degraded) when the store is down"
    )


class BufferConfig(_Section):
    """The short-term buffer of the current session."""

    max_tokens: int = Field(default=2000, ge=16)
    key_frame_importance: float = Field(default=0.7, ge=0.0, le=1.0)
    summary_every: int = Field(default=6, ge=0, description="turns between session summaries (0 = never)")
    max_key_frame_ratio: float = Field(
        default=0.6, gt=0.0, le=1.0, description="share of the budget key frames may pin before the oldest go"
    )
    idle_flush_minutes: float = Field(
        default=30.0,
        ge=0.0,
        description="a user's other sessions idle this long are flushed to long-term memory (0 = never)",
    )


class WriterConfig(_Section):
    """The long-term write path."""

    min_importance: float = Field(default=0.0, ge=0.0, le=1.0)
    redact_pii: bool = True
    dedup_threshold: float | None = Field(default=None, ge=-1.0, le=1.0, description="model calibrated when None")
    store_turns: bool = Field(default=True, description="write evicted turns to long-term memory")
    turn_min_importance: float = Field(
        default=0.1, ge=0.0, le=1.0, description="turns below this are not kept long-term (pleasantries)"
    )
    detect_conflicts: bool = Field(default=True, description="look for contradictions with existing memories")
    conflict_similarity: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="cosine at or above which an existing memory is checked for a conflict (model calibrated when None)",
    )
    max_conflict_candidates: int = Field(default=3, ge=1, le=50)
    supersede_tolerance: float = Field(
        default=0.1, ge=0.0, le=1.0, description="a newer memory may be this much less important and still supersede"
    )
    review_queue_size: int = Field(default=1000, ge=0, description="suspected conflicts kept per user for review")
    context_words: int | None = Field(
        default=45,
        ge=1,
        description="words of the previous turn that add_turn keeps as a turn's search context: its end, the part the "
        "turn answers (a CJK character counts as one word; None = the whole turn). A long assistant reply otherwise "
        "outweighs the user's short turn in the keyword index",
    )
    max_future_skew_seconds: float = Field(
        default=300.0,
        ge=0.0,
        allow_inf_nan=False,
        description="how far after the memory's clock a timestamp being stored may be (clock skew between "
        "machines); a later one is refused with InvalidInputError, so no memory is pinned at recency 1.0",
    )


class LifecycleConfig(_Section):
    """Consolidation thresholds."""

    archive_freshness: float = Field(default=0.1, ge=0.0, le=1.0)
    delete_freshness: float = Field(default=0.05, ge=0.0, le=1.0)
    archive_after_days: float = Field(default=90.0, gt=0.0)
    archive_below_importance: float = Field(default=0.6, ge=0.0, le=1.0)


class TraceConfig(_Section):
    """Traces of what each ``add_turn`` / ``recall`` / ``build_context`` did (opt-in).

    See :mod:`hybrid_memory.trace`. ``path`` ``None`` keeps the trace beside the store: a
    ``LocalStore("memory.db")`` traces to ``memory.db.traces.sqlite``, an in-memory store in
    memory, a Weaviate store to ``$XDG_STATE_HOME/hybrid-memory/traces/<host>_<port>_<collection>.sqlite``.
    """

    enabled: bool = Field(default=False, description="record a trace step for every memory operation")
    path: str | None = Field(default=None, description="SQLite file of the trace (None = beside the store)")
    redact_pii: bool | None = Field(
        default=None, description="redact PII in traced text (None = same as writer.redact_pii)"
    )
    max_candidates: int = Field(default=50, ge=0, le=10_000, description="candidates kept per traced recall")


class MetricsConfig(_Section):
    """In-process metrics (see :mod:`hybrid_memory.metrics`); nothing leaves the process."""

    enabled: bool = Field(default=True, description="count operations, latencies and write outcomes")
    latency_buckets: tuple[float, ...] = Field(
        default=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        description="upper bounds (seconds) of the latency histogram buckets",
    )
    max_user_series: int = Field(
        default=100, ge=0, description="largest users reported one by one in the store-size metric"
    )

    @model_validator(mode="after")
    def _sorted_buckets(self) -> MetricsConfig:
        b = self.latency_buckets
        if not b or any(x <= 0 for x in b) or list(b) != sorted(set(b)):
            raise ValueError("latency_buckets must be positive, strictly increasing and non-empty")
        return self


class CacheConfig(_Section):
    """The memory budget of everything per-user a process caches (see :mod:`hybrid_memory.stores.budget`).

    One budget per process, shared by every store and writer in it: least recently used users
    are evicted first and rebuilt from the store when needed again. ``HYBRID_MEMORY_CACHE_BYTES``
    (or ``HYBRID_MEMORY_CACHE__MAX_BYTES``) sets it.
    """

    max_bytes: int = Field(default=512 * 1024 * 1024, ge=0, description="bytes of per-user caches per process")


class HybridMemoryConfig(BaseSettings):
    """All settings, frozen. Build with keywords or from ``HYBRID_MEMORY_*`` environment variables.

    Raises:
        ConfigurationError: through :func:`load_config` when a value is invalid.

    Example:
        >>> from hybrid_memory import HybridMemoryConfig
        >>> from hybrid_memory.config import load_config
        >>> HybridMemoryConfig(retrieval={"alpha": 0.5}).retrieval.alpha
        0.5
        >>> load_config(retrieval={"alpha": 2})
        Traceback (most recent call last):
            ...
        hybrid_memory.errors.ConfigurationError: invalid configuration: retrieval.alpha: Input should be less than or equal to 1
    """

    model_config = SettingsConfigDict(
        env_prefix="HYBRID_MEMORY_", env_nested_delimiter="__", env_parse_none_str="null", frozen=True, extra="forbid"
    )

    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    fuser: FuserConfig = Field(default_factory=FuserConfig)
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    writer: WriterConfig = Field(default_factory=WriterConfig)
    lifecycle: LifecycleConfig = Field(default_factory=LifecycleConfig)
    trace: TraceConfig = Field(default_factory=TraceConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    tokenizer_model: str = Field(default="gpt-4o-mini", description="tiktoken model for token counts")


def load_config(**overrides: object) -> HybridMemoryConfig:
    """Build a :class:`HybridMemoryConfig`, translating validation errors.

    Keyword arguments win over ``HYBRID_MEMORY_*`` environment variables, and nested sections are
    merged field by field (pydantic-settings' rule): ``load_config(retrieval={"alpha": 0.25})``
    with ``HYBRID_MEMORY_RETRIEVAL__CANDIDATES=50`` set gives alpha 0.25 *and* 50 candidates.

    Raises:
        ConfigurationError: a value is invalid; the message names the field.

    Example:
        >>> load_config(retrieval={"alpha": 2})
        Traceback (most recent call last):
        ...
        hybrid_memory.errors.ConfigurationError: invalid configuration: retrieval.alpha: Input should be less than or equal to 1
    """
    try:
        return HybridMemoryConfig(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()]
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from exc


def as_config(config: HybridMemoryConfig | Mapping[str, Any] | None) -> HybridMemoryConfig:
    """The configuration a constructor's ``config=`` argument stands for.

    ``None`` reads the ``HYBRID_MEMORY_*`` environment; a :class:`HybridMemoryConfig` is used as
    it is; a mapping is validated like keyword arguments of :func:`load_config`: its values win
    over the environment and nested sections are merged field by field, so
    ``{"retrieval": {"alpha": 0.25}}`` changes only alpha (1.0 = pure vector, 0.0 = pure keyword
    (BM25)) and keeps every other setting from the environment or the defaults.

    Raises:
        ConfigurationError: ``config`` is of another type, has a key that is not a setting, or an
            invalid value; the message names the field.

    Example:
        >>> as_config({"retrieval": {"alpha": 0.25}}).retrieval.alpha
        0.25
        >>> as_config({"retrieval": {"alfa": 0.25}})
        Traceback (most recent call last):
        ...
        hybrid_memory.errors.ConfigurationError: invalid configuration: retrieval.alfa: Extra inputs are not permitted
    """
    if config is None:
        return load_config()
    if isinstance(config, HybridMemoryConfig):
        return config
    if isinstance(config, Mapping):
        bad = [k for k in config if not isinstance(k, str)]
        if bad:
            raise ConfigurationError(f"config keys must be setting names (str), got {bad[0]!r}")
        return load_config(**config)
    raise ConfigurationError(
        "config must be a HybridMemoryConfig, a mapping of its settings such as "
        f'{{"retrieval": {{"alpha": 0.25}}}}, or None (read HYBRID_MEMORY_* variables); got {type(config).__name__}'
    )
