"""The amnesia test: facts told on day 1 must be in the context on day 3 (offline defaults).

A scripted day-1 conversation tells 36 bilingual facts, preferences and constraints through
``add_turn``, each followed by an assistant reply and surrounded by small talk. On day 3 (simulated
clock) a new session asks about each one; the amnesia rate is the fraction of questions whose
fact is missing from ``build_context``. Defaults only: the real USE embedder, ``LocalStore``,
the heuristic scorer, the default buffer and writer.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.embeddings import Embedder

DAY1 = datetime(2025, 4, 7, 8, 30, tzinfo=timezone.utc)
DAY3 = DAY1 + timedelta(days=2, hours=3)

# (what the user says on day 1, the day-3 question, text that must reach the context)
FACTS: list[tuple[str, str, str]] = [
    ("我对花生过敏，吃了会呼吸困难", "这个沙爹酱我能吃吗？", "花生过敏"),
    ("I'm allergic to penicillin.", "The doctor wants to give me amoxicillin, is that ok for me?", "penicillin"),
    ("我女儿叫朵朵，今年六岁", "我女儿多大了？", "朵朵"),
    ("My husband's name is Marco, he's a firefighter.", "What does my husband do for work?", "Marco"),
    ("我住在杭州西湖区", "附近有什么好吃的？我住哪儿来着", "杭州西湖区"),
    ("I work as a nurse on night shifts.", "When should I schedule my gym sessions given my job?", "night shifts"),
    ("我不吃香菜，一点都不行", "帮我点一份牛肉面，有什么要注意的？", "香菜"),
    ("I'm vegetarian, no meat or fish please.", "Suggest a dinner recipe for tonight.", "vegetarian"),
    ("我的预算不能超过三千元", "推荐一款手机吧，预算多少来着？", "三千元"),
    ("My laptop budget is $1,500 max.", "Which laptop should I buy?", "$1,500"),
    ("我喜欢靠窗的座位", "帮我订下周去北京的高铁票，座位怎么选？", "靠窗"),
    ("I prefer aisle seats on planes.", "Book me a flight to Denver - any seat preference?", "aisle"),
    ("我每天早上六点起床跑步", "我一般几点起床？", "六点"),
    ("I usually go to bed around 11pm.", "What time do I usually sleep?", "11pm"),
    ("我的狗叫旺财，是一只金毛", "我的狗叫什么名字？", "旺财"),
    ("I have a cat called Pixel.", "What's my cat's name?", "Pixel"),
    ("我下个月20号要去成都出差", "我什么时候去成都？", "成都"),
    ("My sister's wedding is on June 14 in Lisbon.", "When is my sister's wedding?", "June 14"),
    ("我在学西班牙语，目前A2水平", "我的西班牙语是什么水平？", "A2"),
    ("I'm training for the Berlin marathon in September.", "Which race am I training for?", "Berlin marathon"),
    ("回答我的时候请用简体中文", "What language should you answer me in?", "简体中文"),
    ("Please keep your answers short, bullet points only.", "How should you format answers for me?", "bullet points"),
    ("我有高血压，每天吃降压药", "我能喝浓咖啡吗？我的身体情况你记得吧", "高血压"),
    ("I have type 2 diabetes.", "Can I have a slice of chocolate cake?", "diabetes"),
    ("我开的是一辆蓝色的比亚迪", "我开什么车？", "比亚迪"),
    ("I drive an old red Volvo.", "What car do I drive?", "Volvo"),
    ("我老板叫张伟，周五要交报告给他", "报告要交给谁？", "张伟"),
    ("My manager Priya wants the slides by Thursday.", "Who needs the slides and when?", "Priya"),
    ("我不喝酒，聚会别给我点啤酒", "周末聚会帮我点饮料吧", "不喝酒"),
    ("Never schedule meetings for me before 10am.", "Can you set up a call at 9am tomorrow?", "10am"),
    ("我最喜欢的作家是余华", "推荐几本我可能喜欢的书", "余华"),
    ("My favourite band is Radiohead.", "Which concerts might I enjoy?", "Radiohead"),
    ("我们家的WiFi密码提示是猫咪的生日", "WiFi密码提示是什么？", "猫咪的生日"),
    ("I'm learning to play the cello.", "What instrument am I learning?", "cello"),
    ("我对海鲜过敏，尤其是虾", "今晚想吃点海鲜大餐可以吗？", "海鲜过敏"),
    ("I'm moving to Vancouver in August.", "Where am I moving to?", "Vancouver"),
]

SMALL_TALK = [
    "今天天气不错啊",
    "哈哈好的",
    "Traffic was terrible this morning.",
    "刚吃完午饭，有点困",
    "lol ok",
    "What a long day.",
    "你觉得周末会下雨吗？",
    "Did you watch the game last night?",
    "嗯嗯，明白了",
    "Thanks!",
]

ACKS = ["好的，我记住了。", "Got it, noted!", "明白啦。", "Sure, I'll keep that in mind."]


def test_amnesia_rate_with_offline_defaults(default_embedder: Embedder) -> None:
    assert len(FACTS) >= 30
    mem = HybridMemory(store=LocalStore(":memory:"), embedder=default_embedder)
    user = "amnesia-user"
    t = DAY1
    for n, (fact, _, _) in enumerate(FACTS):
        for extra in (SMALL_TALK[n % len(SMALL_TALK)], SMALL_TALK[(n * 3 + 1) % len(SMALL_TALK)]):
            mem.add_turn(user, "day1", "user", extra, timestamp=t)
            mem.add_turn(user, "day1", "assistant", "哈哈，是的。" if n % 2 else "Ha, indeed.", timestamp=t)
            t += timedelta(minutes=1)
        mem.add_turn(user, "day1", "user", fact, timestamp=t)
        mem.add_turn(user, "day1", "assistant", ACKS[n % len(ACKS)], timestamp=t + timedelta(seconds=20))
        t += timedelta(minutes=2)

    missing: list[tuple[str, str]] = []
    for n, (_, question, needle) in enumerate(FACTS):
        now = DAY3 + timedelta(minutes=2 * n)
        ctx = mem.build_context(question, user_id=user, session_id="day3", now=now)
        if needle not in ctx.text:
            missing.append((question, ctx.text))
        mem.add_turn(user, "day3", "user", question, timestamp=now)
        mem.add_turn(user, "day3", "assistant", "让我想想。" if n % 2 else "Let me check.", timestamp=now)
    rate = len(missing) / len(FACTS)
    out = os.environ.get("HYBRID_MEMORY_AMNESIA_REPORT")
    if out:
        Path(out).write_text(
            json.dumps({"facts": len(FACTS), "missing": [m[0] for m in missing], "amnesia_rate": rate}, indent=2),
            encoding="utf-8",
        )
    mem.close()
    assert rate <= 0.05, f"amnesia rate {rate:.1%}; missing: " + "; ".join(q for q, _ in missing)
