"""``hybrid-memory demo``: the whole memory loop on the embedded defaults, offline.

Two users, Chinese and English, several sessions over a simulated week: turns are scored for
importance (key frames pinned and written at once), a recall shows every score component, the
fused context is what would go into the prompt, users never see each other's memories, and
``forget_user`` removes everything of a user.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from hybrid_memory.records import RecallHit, WriteOutcome

__all__ = ["run_demo"]

DAY0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)

#: (user, session, day offset, role, text)
SCRIPT: list[tuple[str, str, int, str, str]] = [
    ("li_lei", "s1", 0, "user", "你好！"),
    ("li_lei", "s1", 0, "assistant", "你好，有什么可以帮你？"),
    ("li_lei", "s1", 0, "user", "记住：我对花生过敏，任何菜都不要放花生。"),
    ("li_lei", "s1", 0, "assistant", "好的，我记住了，推荐菜时会避开花生。"),
    ("li_lei", "s1", 0, "user", "我喜欢喝乌龙茶，不要加糖。"),
    ("li_lei", "s1", 0, "user", "下个月15号我要去东京出差，预算一万元。"),
    ("li_lei", "s1", 0, "user", "哈哈好的，谢谢"),
    ("alice", "a1", 0, "user", "Hi there!"),
    ("alice", "a1", 0, "user", "I'm vegetarian and I never eat mushrooms."),
    ("alice", "a1", 0, "assistant", "Noted: vegetarian, no mushrooms."),
    ("alice", "a1", 0, "user", "My daughter Emma turns 7 on June 3 and loves dinosaurs."),
    ("alice", "a1", 0, "user", "I'm training for the Berlin marathon in September, 5 runs a week."),
    ("alice", "a1", 0, "user", "ok thanks"),
    ("li_lei", "s2", 4, "user", "我现在改喝咖啡了，不喝茶了。"),
    ("li_lei", "s2", 4, "user", "记住：我对花生过敏，任何菜都不要放花生。"),
]

QUERIES: list[tuple[str, str, int]] = [
    ("li_lei", "晚饭想做宫保鸡丁，有什么要注意的吗？", 6),
    ("li_lei", "早上给我准备什么饮品？", 6),
    ("alice", "Emma's birthday is coming up, any gift ideas?", 6),
    ("alice", "What should I cook for dinner tonight?", 6),
]


def _fmt_outcome(o: WriteOutcome) -> str:
    rec = o.record
    what = f"[{rec.category}, importance {rec.importance:.2f}] {rec.content[:40]}" if rec is not None else "?"
    extra = f" — {o.reason}" if o.reason else ""
    return f"      → long-term {o.action}: {what}{extra}"


def _hit_row(h: RecallHit) -> str:
    ks = "-" if h.keyword_score is None else f"{h.keyword_score:.2f}"
    vs = "-" if h.vector_similarity is None else f"{h.vector_similarity:.2f}"
    return (
        f"  {h.score:5.3f}  rel {h.relevance:4.2f}  bm25 {ks:>5}  cos {vs:>5}  imp {h.importance:4.2f}  "
        f"rec {h.recency:4.2f}  heat {h.heat:4.2f}  [{h.record.category}] {h.content[:48]}"
    )


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
    print(f"hybrid-memory demo — store {store_path!r}, embedder {mem.embedder.name}\n")
    with mem:
        print("1. Conversations (importance from the heuristic scorer; ★ = key frame, pinned and stored at once)")
        last: tuple[str, str] | None = None
        for user, session, day, role, text in SCRIPT:
            if (user, session) != last:
                print(f"\n  [{user} / session {session} / day {day}]")
                last = (user, session)
            clock["now"] = DAY0 + timedelta(days=day, minutes=len(text))
            seen = len(mem.write_log(user))
            turn = mem.add_turn(user, session, role, text)
            star = "★" if turn.key_frame else " "
            print(f"   {star} {role:9} imp {turn.importance:4.2f}  {text}")
            for o in mem.write_log(user)[seen:]:
                print(_fmt_outcome(o))
        for user, session in sorted({(u, s) for u, s, *_ in SCRIPT}):
            for o in mem.end_session(user, session):
                print(f"  [{user} / {session} ended] " + _fmt_outcome(o).strip())
        print("\n  Session buffers flushed at session end; long-term memories now:")
        for user in ("li_lei", "alice"):
            print(f"   {user}: {mem.store.count(user)} memories")

        print("\n2. A new session, two days later: recall with every score component")
        rr = mem.config.rerank
        print(
            f"   final = {rr.w_relevance:g}·relevance + {rr.w_importance:g}·importance + {rr.w_recency:g}·recency"
            f" + {rr.w_heat:g}·heat  (alpha {mem.config.retrieval.alpha:g}: 1.0 = pure vector, 0.0 = pure BM25)"
        )
        for user, query, day in QUERIES:
            now = DAY0 + timedelta(days=day)
            print(f"\n  {user} asks: {query}")
            for h in mem.recall(query, user_id=user, k=3, now=now):
                print(_hit_row(h))

        print("\n3. The fused context that goes at the end of the system prompt")
        user, query, day = QUERIES[0]
        ctx = mem.build_context(query, user_id=user, session_id="s3", now=DAY0 + timedelta(days=day))
        print(f"   ({ctx.token_count} tokens, {len(ctx.hits)} memories)\n")
        print("\n".join("   " + line for line in ctx.text.splitlines()))
        skipped = mem.build_context("What's the capital of Australia?", user_id="alice", now=DAY0 + timedelta(days=day))
        print(f"\n   Unrelated question → injection skipped: {skipped.skipped} ({skipped.skipped_reason})")

        print("\n   Version chain (tea → coffee): superseded memories stay inspectable")
        from hybrid_memory.stores.base import MemoryFilter

        for m in mem.list_memories("li_lei", filter=MemoryFilter(statuses=("superseded",))):
            print(f"   superseded v{m.version}: {m.content}  →  replaced by {m.superseded_by}")

        print("\n4. Isolation: alice asks about peanuts — li_lei's allergy must not appear")
        leaked = [h for h in mem.recall("花生过敏 peanut allergy", user_id="alice", k=5) if h.record.user_id != "alice"]
        alice_hits = mem.recall("花生过敏 peanut allergy", user_id="alice", k=5)
        print(f"   alice's hits: {[h.content[:30] for h in alice_hits]}")
        print(f"   results belonging to another user: {len(leaked)}")
        if leaked:
            return 1

        print("\n5. Right to be forgotten: forget_user('li_lei')")
        n = mem.forget_user("li_lei")
        rest = mem.recall("花生", user_id="li_lei", k=5)
        print(
            f"   deleted {n} memories; recall afterwards returns {len(rest)} hits; alice still has {mem.store.count('alice')}"
        )
    print(f"\ndone in {time.perf_counter() - started:.1f} s (offline, no API key, no server)")
    return 0
