"""``hybrid-memory demo``: the whole memory loop on the embedded defaults, offline.

Two users, Chinese and English, several sessions over a simulated week, told as a story: what
each user said and what the memory did with it (importance, key frame and why, saved, merged,
superseded, not kept), what each later question recalls with every score component, the fused
context built for one question, per-user isolation and ``forget_user``.

The clock is fixed (simulated days), so the output is the same on every run; the run time goes
to stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from hybrid_memory.records import RecallHit, Turn, WriteOutcome

if TYPE_CHECKING:
    from hybrid_memory.memory import HybridMemory

__all__ = ["run_demo"]

DAY0 = datetime(2025, 3, 3, tzinfo=timezone.utc)

#: Sessions in the order they happen: (user, session, day, "HH:MM" of the first turn, turns as (role, text)).
#: Turns of a session are one minute apart.
SESSIONS: list[tuple[str, str, int, str, list[tuple[str, str]]]] = [
    (
        "li_lei",
        "s1",
        0,
        "09:00",
        [
            ("user", "你好！"),
            ("assistant", "你好，有什么可以帮你？"),
            ("user", "记住：我对花生过敏，任何菜都不要放花生。"),
            ("assistant", "好的，我记住了，推荐菜时会避开花生。"),
            ("user", "我喜欢喝乌龙茶，不要加糖。"),
            ("user", "下个月15号我要去东京出差，预算一万元。"),
            ("user", "哈哈好的，谢谢"),
        ],
    ),
    (
        "alice",
        "a1",
        0,
        "20:00",
        [
            ("user", "Hi there!"),
            ("user", "I'm vegetarian and I never eat mushrooms."),
            ("assistant", "Noted: vegetarian, no mushrooms."),
            ("user", "My daughter Emma turns 7 on June 3 and loves dinosaurs."),
            ("user", "I'm training for the Berlin marathon in September, 5 runs a week."),
            ("user", "ok thanks"),
        ],
    ),
    (
        "li_lei",
        "s2",
        4,
        "08:30",
        [
            ("user", "我现在改喝咖啡了，不喝茶了。"),
            ("user", "记住：我对花生过敏，任何菜都不要放花生。"),
            ("user", "我的目标是年底前减重5公斤，每周去三次健身房。"),
            ("user", "好的，谢谢"),
        ],
    ),
]

#: Questions asked on day 6, in new sessions: (user, question).
QUESTIONS: list[tuple[str, str]] = [
    ("li_lei", "晚饭想做宫保鸡丁，有什么要注意的吗？"),
    ("li_lei", "早上给我准备什么饮品？"),
    ("alice", "Emma's birthday is coming up, any gift ideas?"),
    ("alice", "What should I cook for dinner tonight?"),
    ("alice", "How should I plan my runs this week?"),
]
QUESTION_DAY = 6

_REASONS = {
    "remember": 'explicit "remember"',
    "constraint": "constraint",
    "preference": "preference",
    "goal": "goal or plan",
    "change": "declared change",
    "importance": "high importance",
}


def _at(day: int, hhmm: str, minute: int = 0) -> datetime:
    h, m = (int(x) for x in hhmm.split(":"))
    return DAY0 + timedelta(days=day, hours=h, minutes=m + minute)


def _when(ts: datetime) -> str:
    return f"day {(ts - DAY0).days} {ts:%H:%M}"


def _clip(text: str, width: int = 46) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _outcome(mem: HybridMemory, o: WriteOutcome) -> str:
    """One write outcome in words (ids replaced by the content they stand for)."""
    rec = o.record
    if rec is None:
        return f"{o.action}: {o.reason or ''}"
    reason = o.reason or ""
    if o.related_id:
        try:
            old = mem.get(o.related_id, user_id=rec.user_id).content
        except KeyError:
            old = o.related_id[:8]
        reason = reason.replace(o.related_id, f"“{old}”")
    what = f"[{rec.category}, importance {rec.importance:.2f}]"
    if o.action == "added":
        return f"saved to long-term memory {what}"
    if o.action == "deduplicated":
        extra = f" ({reason})" if reason and reason != "already stored" else ""
        return f"already in long-term memory: no new memory, the stored one is refreshed{extra}"
    if o.action == "superseded":
        return f"saved {what}\n         it {reason}"
    return f"{o.action} {what}" + (f" ({reason})" if reason else "")


def _not_kept(turns: Sequence[Turn], threshold: float) -> list[Turn]:
    """The turns the write path skips (the facade's rule: below the threshold and not a key frame)."""
    return [t for t in turns if not t.key_frame and t.importance < threshold]


def _hit_row(h: RecallHit) -> str:
    ks = "-" if h.keyword_score is None else f"{h.keyword_score:.2f}"
    vs = "-" if h.vector_similarity is None else f"{h.vector_similarity:.2f}"
    return (
        f"     {h.score:5.3f} {h.relevance:5.2f} {ks:>5} {vs:>5} {h.importance:5.2f} {h.recency:5.2f} {h.heat:5.2f}"
        f"  [{h.record.category}] {_clip(h.content, 44)}"
    )


def _conversations(mem: HybridMemory, clock: dict[str, datetime]) -> None:
    keep = mem.config.writer.turn_min_importance
    idle = mem.config.buffer.idle_flush_minutes
    print("1. Conversations")
    print("   Every turn is scored for importance (heuristic scorer, offline) and is durable in the store's")
    print("   turn log when add_turn returns (a restart or another worker continues the session). What the user")
    print(f"   says, unless it is small talk (importance < {keep:g}), is saved to long-term memory at once, recallable")
    print("   from any session; the assistant's replies stay in the short-term window as conversation context.")
    print("   ★ = key frame: pinned in the short-term window while newer turns push older ones out.")
    open_sessions: dict[str, list[str]] = {}
    for n, (user, session, day, start, turns) in enumerate(SESSIONS, 1):
        print(f"\n   1.{n} {user}, session {session}, {_when(_at(day, start))}")
        mine = open_sessions.setdefault(user, [])
        for i, (role, text) in enumerate(turns):
            ts = _at(day, start, i)
            clock["now"] = ts  # the simulated clock follows the conversation (no turn is in the future)
            before = {s: mem.short_term(user, s) for s in mine}
            seen = len(mem.write_log(user))
            turn = mem.add_turn(user, session, role, text, timestamp=ts)
            new = mem.write_log(user)[seen:]
            for other, buffered in before.items():
                if not buffered or mem.short_term(user, other):
                    continue
                mine.remove(other)
                last = buffered[-1].timestamp
                ids = {t.id for t in buffered}
                print(
                    f"     {user} is back. Session {other} has been idle since {_when(last)} (longer than"
                    f" buffer.idle_flush_minutes = {idle:g}),\n     so the first turn of {session} ends it:"
                    " its short-term window closes (its turns were saved when they were said)"
                )
                skipped = _not_kept(buffered, keep)
                if skipped:
                    print("       not kept (small talk): " + " · ".join(f"“{t.content}”" for t in skipped))
                new = [
                    o for o in new if o.record is None or not o.record.provenance or o.record.provenance[-1] not in ids
                ]
            who = user if role == "user" else role
            print(f"   {'★' if turn.key_frame else ' '} {who}: {text}")
            if turn.key_frame:
                why = _REASONS.get(turn.key_frame_reason or "", turn.key_frame_reason or "")
                print(f"       importance {turn.importance:.2f}, key frame ({why})")
            elif turn.importance < keep:
                print(f"       importance {turn.importance:.2f}, small talk: short-term window only, not kept")
            elif role != "user":
                print(f"       importance {turn.importance:.2f}, the assistant's words: short-term window only")
            else:
                print(f"       importance {turn.importance:.2f}")
            for o in new:
                own = o.record is not None and o.record.provenance[-1:] == (turn.id,)
                label = "" if own else f"{_clip(o.record.content) if o.record else '?'} (evicted) "
                print(f"       {label}→ {_outcome(mem, o)}")
        if session not in mine:
            mine.append(session)

    print("\n   1.4 The open sessions end (end_session): their windows close, nothing was waiting to be saved")
    for user, sessions in open_sessions.items():
        for session in sessions:
            buffered = mem.short_term(user, session)
            outcomes = mem.end_session(user, session)
            print(f"     {user} / {session}:")
            for o in outcomes:
                print(f"       {_clip(o.record.content) if o.record else '?'}  → {_outcome(mem, o)}")
            skipped = _not_kept(buffered, keep)
            if skipped:
                print("       not kept (small talk): " + " · ".join(f"“{t.content}”" for t in skipped))

    from hybrid_memory.stores.base import MemoryFilter

    print("\n   Long-term memory after the week (active memories, most important first):")
    for user in ("li_lei", "alice"):
        recs = mem.list_memories(user, filter=MemoryFilter(statuses=("active",)))
        print(f"     {user}: {len(recs)}")
        for r in sorted(recs, key=lambda r: (-r.importance, r.content)):
            print(f"       {r.importance:.2f} [{r.category}] {r.content}")


def _recalls(mem: HybridMemory, now: datetime) -> None:
    rr = mem.config.rerank
    print(f"\n2. Two days later ({_when(now)}), in new sessions: what each question recalls (k=3)")
    print(
        f"   final = {rr.w_relevance:g}·relevance + {rr.w_importance:g}·importance + {rr.w_recency:g}·recency"
        f" + {rr.w_heat:g}·heat\n   relevance: hybrid BM25 + vector score, alpha {mem.config.retrieval.alpha:g}"
        " (1.0 = pure vector, 0.0 = pure keyword/BM25)\n"
        f"   recency halves every {rr.half_life_days:g} days; heat: how often a memory was used or stated again"
    )
    for user, question in QUESTIONS:
        print(f"\n   {user} asks: {question}")
        print("     final   rel  bm25   cos   imp   rec  heat  memory")
        for h in mem.recall(question, user_id=user, k=3, now=now):
            print(_hit_row(h))


def _context(mem: HybridMemory, now: datetime) -> None:
    user, question = QUESTIONS[0]
    print(
        "\n3. The fused context: what goes into the prompt (the adapters place it with the newest user"
        "\n   message, so the system prompt and earlier turns stay byte-identical for prompt caching)"
    )
    print(f"   {user} asks in a new session s3: {question}")
    ctx = mem.build_context(question, user_id=user, session_id="s3", now=now)
    call = f"build_context(question, user_id={user!r}, session_id='s3')"
    if ctx.skipped:
        print(f"   {call} → nothing is injected: {ctx.skipped_reason}")
    else:
        noun = "memory" if len(ctx.hits) == 1 else "memories"
        print(f"   {call} picked {len(ctx.hits)} {noun}, {ctx.token_count} tokens:\n")
        print("\n".join("     " + line for line in ctx.text.splitlines()))
    other = "What's the capital of Australia?"
    skipped = mem.build_context(other, user_id="alice", now=now)
    print(f"\n   alice asks: {other}")
    print(f"   → nothing is injected: {skipped.skipped_reason}" if skipped.skipped else "   → injected")

    from hybrid_memory.stores.base import MemoryFilter

    print("\n   The drink preference changed on day 4; the old memory stays inspectable in its version chain:")
    superseded = mem.list_memories(user, filter=MemoryFilter(statuses=("superseded",)))
    for m in superseded:
        newer = mem.get(m.superseded_by, user_id=user).content if m.superseded_by else "?"
        print(f"     v{m.version} {m.content}  (superseded)  →  v{m.version + 1} {newer}")
    if not superseded:
        print("     (this embedder did not relate the two drink statements: both stay active)")


def run_demo(*, store_path: str = ":memory:", embedder: str = "default") -> int:
    """Run the scripted demo and print what happens at each step. Returns an exit code."""
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.stores.local import LocalStore

    started = time.perf_counter()
    emb: Any = None
    if embedder == "hashing":
        from hybrid_memory.testing import HashingEmbedder

        emb = HashingEmbedder()
    clock = {"now": DAY0}
    mem = HybridMemory(store=LocalStore(store_path), embedder=emb, clock=lambda: clock["now"])
    print(f"hybrid-memory demo — store {store_path!r}, embedder {mem.embedder.name}, simulated clock\n")
    with mem:
        _conversations(mem, clock)
        now = DAY0 + timedelta(days=QUESTION_DAY, hours=12)
        clock["now"] = now
        _recalls(mem, now)
        _context(mem, now)

        question = "花生过敏 peanut allergy"
        print("\n4. Isolation: every call is scoped to one user")
        print(f"   alice searches for li_lei's allergy: {question}")
        hits = mem.recall(question, user_id="alice", k=5, now=now)
        leaked = [h for h in hits if h.record.user_id != "alice"]
        print("   alice's results:")
        for h in hits:
            print(f"     {h.record.user_id}: {h.content}")
        print(f"   results belonging to another user: {len(leaked)}")
        if leaked:
            return 1

        print("\n5. Right to be forgotten: li_lei asks to be forgotten → forget_user('li_lei')")
        n = mem.forget_user("li_lei")
        rest = mem.recall("花生", user_id="li_lei", k=5, now=now)
        print(
            f"   deleted {n} memories (every version); recall for li_lei now returns {len(rest)} hits;"
            f" alice still has {mem.store.count('alice')}"
        )
    print(f"done in {time.perf_counter() - started:.1f} s (offline, no API key, no server)", file=sys.stderr)
    return 0
