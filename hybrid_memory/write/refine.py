"""Background refinement of ``add_turn`` importance by a slow scorer (an LLM), off the hot path.

With an LLM importance scorer configured, :meth:`HybridMemory.add_turn
<hybrid_memory.HybridMemory.add_turn>` scores the turn with the heuristic and returns once the
turn is durable; :class:`ImportanceRefiner` queues the turn and, once ``batch_size`` turns
of a user are waiting (or on ``flush()``, ``end_session`` and ``close``), the background worker
scores them with the LLM (one user per call: one user's text never steers the scores of another's)
and refines what was stored:

* a long-term memory written from the turn gets the new importance and, in its metadata,
  ``importance_refined = {"from", "to", "by": "heuristic→llm", "scorer", "why"}``;
* a user turn the heuristic kept out of long-term memory (below ``writer.turn_min_importance``) that
  the LLM scores above it is written now (*promoted*; assistant, system and tool turns never are);
* a turn whose LLM score fell back (model error, a sanity check) keeps the heuristic score.

Each batch is reported to the observer as a ``refine_importance`` trace step and in the metrics
(:class:`~hybrid_memory.observe.metrics.RefinementStats`, the ``refine_importance`` latency).
Forget epochs hold: every write carries the user's epoch read when the turn was accepted, so a
refinement for a user forgotten since is refused by the store (counted as ``refused``, nothing
traced). The short-term window keeps the heuristic key-frame flag (the turn log is append-only).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybrid_memory.errors import UserForgottenError
from hybrid_memory.records import MemoryRecord, Turn, WriteOutcome
from hybrid_memory.stores.base import MemoryStore, update_present
from hybrid_memory.write.importance import ImportanceScorer, ScoreBatch, ScoredText

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_memory.observe.trace import Observer
    from hybrid_memory.write.writer import MemoryWriter

__all__ = ["ImportanceRefiner", "PendingTurn", "refines_in_background"]

#: Importance changes smaller than this are not written.
_EPSILON = 1e-4


def refines_in_background(scorer: ImportanceScorer) -> bool:
    """Whether ``scorer`` is kept off ``add_turn``'s hot path (its ``background`` attribute)."""
    return bool(getattr(scorer, "background", False))


@dataclass(frozen=True)
class PendingTurn:
    """A stored turn waiting for its LLM score.

    Attributes:
        turn: The turn as stored (redacted text, heuristic importance).
        record_ids: Long-term memories written from this turn (empty: below the importance gate).
        context: The search context its memory was (or would be) written with.
        epoch: The user's forget epoch when the turn was accepted.
        context_of: The turn ``context`` was cut from, as ``(id, seq)`` (``None``: no context).
    """

    turn: Turn
    record_ids: tuple[str, ...]
    context: str
    epoch: int
    context_of: tuple[str, int] | None = None


#: Writes ``turn`` (with its refined importance) to long-term memory; returns the outcomes.
PromoteFn = Callable[[Turn, str, "tuple[str, int] | None", int, dict[str, Any]], list[WriteOutcome]]


class ImportanceRefiner:
    """Queues stored turns and refines their importance with the scorer in background batches.

    Args:
        store: Where the turns' memories are.
        writer: Its per-user lock orders a refinement with concurrent writes of the same user.
        scorer: Returns the memory's current importance scorer (the LLM).
        submit: Queues a job on the memory's background worker.
        promote: Writes a turn that the refined score lifts over the importance gate.
        observer: Receives the trace step and the metrics of each batch.
        min_importance: ``writer.turn_min_importance`` (the gate a promotion must clear).
        report_error: Records a failed refinement ``(job, user, session, epoch, message)`` in the
            worker's errors, the trace and the metrics (never raised).
    """

    def __init__(
        self,
        *,
        store: MemoryStore,
        writer: MemoryWriter,
        scorer: Callable[[], ImportanceScorer],
        submit: Callable[[Callable[[], None]], None],
        promote: PromoteFn,
        observer: Observer,
        min_importance: float,
        report_error: Callable[[str, str, str | None, int | None, str], None],
    ) -> None:
        self.store = store
        self.writer = writer
        self._scorer = scorer
        self._submit = submit
        self._promote = promote
        self._observer = observer
        self.min_importance = min_importance
        self._report_error = report_error
        self._lock = threading.Lock()
        # One queue per user: a model call never mixes users (one user's text cannot steer the
        # scores of another's turns).
        self._pending: dict[str, list[PendingTurn]] = {}

    @property
    def pending(self) -> int:
        """Turns queued and not handed to the worker yet."""
        with self._lock:
            return sum(len(q) for q in self._pending.values())

    def add(self, item: PendingTurn) -> None:
        """Queue a stored turn; hand its user's full batch (the scorer's ``batch_size``) to the worker."""
        size = max(1, int(getattr(self._scorer(), "batch_size", 8)))
        user = item.turn.user_id
        with self._lock:
            queue = self._pending.setdefault(user, [])
            queue.append(item)
            batch = self._pending.pop(user) if len(queue) >= size else []
        if batch:
            self._submit(lambda: self.refine(batch))

    def submit(self) -> None:
        """Hand every queued turn to the worker now (partial batches too), one job per user."""
        with self._lock:
            batches, self._pending = list(self._pending.values()), {}
        for batch in batches:
            self._submit(functools.partial(self.refine, batch))

    def forget_user(self, user_id: str) -> None:
        """Drop the queued turns of ``user_id`` (their writes would be refused anyway)."""
        with self._lock:
            self._pending.pop(user_id, None)

    # ------------------------------------------------------------------ the job
    def refine(self, items: Sequence[PendingTurn]) -> None:
        """Score ``items`` (one user's) with the scorer and apply the scores (runs in the worker)."""
        if not items:
            return
        scorer = self._scorer()
        t0 = time.perf_counter()
        try:
            batch = scorer.score([p.turn.content for p in items], roles=[p.turn.role for p in items])
        except Exception as exc:  # a scorer that raises: the heuristic scores stay, the failure is recorded
            p = items[0]
            self._report_error(
                "refinement",
                p.turn.user_id,
                p.turn.session_id,
                p.epoch,
                f"refinement failed: {type(exc).__name__}: {exc}",
            )
            return
        seconds = time.perf_counter() - t0
        self._observer.scored(batch)
        groups: dict[tuple[str, str, int], list[tuple[PendingTurn, ScoredText]]] = {}
        for p, scored in zip(items, batch.items, strict=True):
            groups.setdefault((p.turn.user_id, p.turn.session_id, p.epoch), []).append((p, scored))
        for (user, session, epoch), group in groups.items():
            self._apply(user, session, epoch, group, batch, seconds)

    def _apply(
        self,
        user: str,
        session: str,
        epoch: int,
        group: list[tuple[PendingTurn, ScoredText]],
        batch: ScoreBatch,
        seconds: float,
    ) -> None:
        fallback = sum(1 for _, s in group if s.note is not None and s.note.startswith("scored by"))
        m = self._observer.metrics
        try:
            if self.store.user_epoch(user) != epoch:  # the stores also refuse each write below
                raise UserForgottenError(user)
            updated = self._update_records(user, epoch, group, batch.scorer)
            promoted = self._promote_turns(epoch, group, batch.scorer)
        except UserForgottenError:  # forgotten meanwhile (any process): nothing of before the forget is kept
            if m is not None:
                m.observe_refinement(turns=len(group), refused=len(group), fallback=fallback)
            return
        except Exception as exc:  # e.g. the store is down: the heuristic scores stay, the failure is recorded
            self._report_error("refinement", user, session, epoch, f"refinement failed: {type(exc).__name__}: {exc}")
            return
        if m is not None:
            m.observe_refinement(turns=len(group), changed=len(updated), promoted=len(promoted), fallback=fallback)
        self._observer.background(
            "refine_importance",
            user,
            session,
            epoch=epoch,
            seconds=seconds,
            writes=updated,
            scorer=batch.scorer,
            scorer_fallback=batch.fallback_reason,
            params={
                "turns": len(group),
                "changed": len(updated),
                "promoted": [o.record.id for o in promoted if o.record is not None],
                "fallback": fallback,
            },
        )

    @staticmethod
    def _note(old: float, new: float, scorer: str, scored: ScoredText) -> dict[str, Any]:
        return {
            "from": round(old, 4),
            "to": round(new, 4),
            "by": f"heuristic→{scorer}",
            "scorer": scorer,
            "why": scored.note or f"scored by the {scorer} scorer",
        }

    def _update_records(
        self, user: str, epoch: int, group: list[tuple[PendingTurn, ScoredText]], scorer: str
    ) -> list[WriteOutcome]:
        wanted = {rid: (p, s) for p, s in group for rid in p.record_ids}
        if not wanted:
            return []
        out: list[WriteOutcome] = []
        with self.writer.locked([user]):  # no concurrent write of the user reads, then overwrites, these
            changed: list[MemoryRecord] = []
            for rec in self.store.get(user, list(wanted)):
                p, scored = wanted[rec.id]
                old = p.turn.importance
                # The writer may have raised it since (a duplicate merged in): never lower it below that.
                new = (
                    scored.importance
                    if abs(rec.importance - old) < _EPSILON
                    else max(rec.importance, scored.importance)
                )
                if abs(new - rec.importance) < _EPSILON:
                    continue
                note = self._note(old, new, scorer, scored)
                changed.append(rec.evolve(importance=new, metadata={**rec.metadata, "importance_refined": note}))
                out.append(
                    WriteOutcome(
                        action="updated",
                        record=changed[-1],
                        reason=f"importance refined {old:.2f} → {new:.2f} ({note['by']}): {note['why']}",
                    )
                )
            # A memory another process deleted since the read stays deleted, and is not reported.
            gone = update_present(self.store, changed, epochs={user: epoch})
        return [o for o in out if o.record is None or (user, o.record.id) not in gone]

    def _promote_turns(
        self, epoch: int, group: list[tuple[PendingTurn, ScoredText]], scorer: str
    ) -> list[WriteOutcome]:
        out: list[WriteOutcome] = []
        for p, scored in group:
            if (
                p.turn.role != "user"  # only the user's own words are promoted into long-term memory
                or p.record_ids
                or scored.importance < self.min_importance
                or p.turn.importance >= self.min_importance
            ):
                continue
            note = self._note(p.turn.importance, scored.importance, scorer, scored)
            turn = p.turn.model_copy(update={"importance": scored.importance})
            out.extend(self._promote(turn, p.context, p.context_of, epoch, {"importance_refined": note}))
        return out
