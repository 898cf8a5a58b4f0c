"""Pollution rate: the share of stored memories that are not supported by what the user said.

A scripted set of agent conversations (bilingual; assistant replies with ReAct ``Thought:`` /
``Action:`` / ``Answer:`` text and hallucinations, tool output, ``Observation:`` text sent in user
messages as LlamaIndex's ReAct formatter does, system prompts) is played into a ``HybridMemory``
with an LLM importance scorer and fact extractor over LangChain's ``ChatOpenAI``, talking to the
local OpenAI-compatible server of ``tests/reliability/fake_openai.py`` in one of two scripts:

* ``ok``: plausible answers (9 for the first turn of a call, 2 for the others; one fact, "The
  user is allergic to peanuts", cited from turn 0 of every batch: right for one conversation,
  a hallucination for the others);
* ``junk``: a too-small model: 5 for every turn; facts that echo the instruction, an empty "记住！",
  and hallucinations.

Two write paths: **core** (``add_turn`` with the roles the agent framework reports, so an
``Observation:`` arrives as a user turn) and **adapter** (the same messages through the LangChain
``HybridChatMemory`` history, which applies the source discipline of
:mod:`hybrid_memory.write.sources`). A stored memory (any active memory but session summaries) is
*polluted* when one of its key words (analyzer terms without the "the user"/"remember" framing)
occurs in none of the user's own turns of its conversation: stricter than the extractor's
grounding rule (half of the key words), and independent of the roles the framework reported.
The report also counts what the sanity checks caught (scorer fallbacks, extraction drops by
reason)::

    python -m benchmarks.pollution --out benchmarks/results/pollution.json
    python -m benchmarks.pollution --base-url http://127.0.0.1:18091/v1 --model smollm2  # also a real model
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

#: (role as the framework reports it, text, whether the *user* said it).
Message = tuple[str, str, bool]

SYSTEM = "You are a helpful assistant. Always answer in the user's language and never mention prices."

CONVERSATIONS: dict[str, list[Message]] = {
    "allergy": [
        ("system", SYSTEM, False),
        ("user", "Remember: my daughter Mia is allergic to peanuts.", True),
        ("assistant", "Thought: an allergy, keep it.\nAnswer: Mia est allergique à l'hæblère, noted.", False),
        ("user", "Can Mia have the satay tonight?", True),
        ("assistant", 'Thought: check the menu.\nAction: check_menu\nAction Input: {"dish": "satay"}', False),
        ("tool", "Satay: chicken skewers with peanut sauce and shrimp paste.", False),
        ("user", "Observation: the satay contains peanut sauce and shrimp paste.", False),
        ("assistant", "Answer: No, the satay has peanut sauce.", False),
    ],
    "diet_zh": [
        ("system", SYSTEM, False),
        ("user", "我是素食者，不吃肉也不吃鱼。", True),
        ("assistant", "Thought: 用户吃素。\nAnswer: 好的，我会推荐素食，比如麻婆豆腐（含牛肉末）。", False),
        ("user", "周末想在家做饭，有什么推荐？", True),
        ("assistant", "Action: search_recipes\nAction Input: 素食 家常", False),
        ("user", "Observation: 找到 12 道菜：地三鲜、西红柿炒鸡蛋、红烧肉……", False),
        ("assistant", "Answer: 推荐地三鲜和西红柿炒鸡蛋。", False),
    ],
    "travel": [
        ("system", SYSTEM, False),
        ("user", "I never fly at night and I prefer aisle seats.", True),
        ("assistant", "Thought: day flights only.\nAction: search_flights\nAction Input: LIS", False),
        ("tool", "LH1172 departs 07:10, TP553 departs 22:40", False),
        ("user", "Observation: LH1172 07:10 has aisle seats left.", False),
        (
            "assistant",
            "Answer: I booked you on LH1172 at 07:10, seat 23C. You mentioned you love red-eye flights.",
            False,
        ),
        ("user", "Thanks, my passport expires in March 2027.", True),
    ],
    "work_zh": [
        ("system", SYSTEM, False),
        ("user", "记住：我下个月20号要去成都出差，住三晚。", True),
        ("assistant", "Thought: 出差计划。\nAnswer: 已记住，您下个月去重庆出差。", False),
        ("user", "帮我看看那边的天气", True),
        ("assistant", "Action: weather\nAction Input: 成都", False),
        ("user", "Observation: 成都 下周 小雨 18-24度", False),
        ("assistant", "Answer: 成都下周小雨，记得带伞。", False),
    ],
    "family": [
        ("system", SYSTEM, False),
        ("user", "My sister Mei is a nurse in Porto and she has two kids.", True),
        ("assistant", "Answer: Mei works night shifts at the Hospital de Santo António, right?", False),
        ("user", "No idea about her shifts. What should I get her kids for Christmas?", True),
        ("assistant", "Thought: gift ideas.\nAction: search_gifts", False),
        ("tool", "Top gifts 2025: LEGO, drawing tablets, board games", False),
        ("assistant", "Answer: LEGO or a board game.", False),
    ],
    "health": [
        ("system", SYSTEM, False),
        ("user", "I have type 2 diabetes, so please keep recipes low in sugar.", True),
        ("assistant", "Thought: the user is pre-diabetic and avoids gluten.\nAnswer: Understood.", False),
        ("user", "Something quick for breakfast?", True),
        ("assistant", "Action: search_recipes\nAction Input: low sugar breakfast", False),
        ("user", "Observation: overnight oats with berries, 6 g sugar", False),
        ("assistant", "Answer: Overnight oats with berries.", False),
    ],
}

T0 = datetime(2025, 6, 1, 9, tzinfo=timezone.utc)


def polluted(content: str, user_texts: Sequence[str]) -> bool:
    """Whether a key word of ``content`` occurs in none of ``user_texts`` (the user's own turns)."""
    from hybrid_memory.text.analyzer import Analyzer
    from hybrid_memory.write.extraction import key_terms

    said = {t for u in user_texts for t in Analyzer(cjk="bigram").index_tokens(u)}
    return any(t not in said for t in key_terms(content))


def _play(path: str, script: str | None, base_url: str | None = None, model: str = "local") -> dict[str, Any]:
    from contextlib import ExitStack

    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from hybrid_memory import HybridMemory, HybridMemoryConfig, LocalStore
    from hybrid_memory.testing import HashingEmbedder
    from langchain_hybrid_memory import HybridChatMemory

    with ExitStack() as stack:
        scorer = extractor = None
        if script is not None:
            from langchain_openai import ChatOpenAI

            from hybrid_memory import LLMImportanceScorer
            from hybrid_memory.llm_call import LLMCallPolicy
            from hybrid_memory.write.extraction import FactExtractor
            from tests.reliability.fake_openai import serve

            url = base_url if base_url is not None else stack.enter_context(serve([script])).base_url
            chat = ChatOpenAI(base_url=url, api_key="sk-local", model=model, temperature=0, max_retries=0)
            policy = LLMCallPolicy(timeout=120.0, max_retries=0)
            scorer = LLMImportanceScorer(chat, method="json_mode", policy=policy, batch_size=4)
            extractor = FactExtractor(chat, method="json_mode", batch_turns=4, policy=policy)
        mem = HybridMemory(
            store=LocalStore(":memory:"),
            embedder=HashingEmbedder(),
            scorer=scorer,
            extractor=extractor,
            config=HybridMemoryConfig(buffer={"summary_every": 0}),
            trace=True,
        )
        stack.callback(mem.close)
        kinds = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}
        for n, (user, conversation) in enumerate(CONVERSATIONS.items()):
            history = HybridChatMemory(memory=mem, user_id=user, session_id="s").chat_memory
            for i, (role, text, _) in enumerate(conversation):
                if path == "core":
                    mem.add_turn(user, "s", role, text, timestamp=T0 + timedelta(days=n, minutes=i))
                elif role == "tool":
                    history.add_messages([ToolMessage(text, tool_call_id=f"call_{i}")])
                else:
                    history.add_messages([kinds[role](text)])
            mem.end_session(user, "s")
        mem.flush()
        stored = bad = bad_extracted = 0
        examples: list[str] = []
        for user, conversation in CONVERSATIONS.items():
            said = [text for _, text, by_user in conversation if by_user]
            for r in mem.list_memories(user):
                if r.category == "summary":
                    continue
                stored += 1
                if polluted(r.content, said):
                    bad += 1
                    bad_extracted += bool(r.metadata.get("extracted"))
                    examples.append(r.content)
        drops: Counter[str] = Counter()
        fallbacks = 0
        tracer = mem._obs.tracer
        assert tracer is not None
        for step in tracer.steps(kind="extract"):
            for reason in step.params.get("dropped", []):
                drops[_reason_kind(str(reason))] += 1
        snap = mem.metrics(store_sizes=False)
        fallbacks = snap.scorer.fallback_items
        return {
            "path": path,
            "llm": (model if base_url is not None else script) or "none (offline heuristic)",
            "stored": stored,
            "polluted": bad,
            "pollution_rate": round(bad / stored, 4) if stored else 0.0,
            "polluted_extracted": bad_extracted,
            "polluted_examples": examples[:8],
            "scorer_fallback_turns": fallbacks,
            "scorer_last_fallback": snap.scorer.last_fallback_reason,
            "extraction_dropped": dict(drops),
            "refined": snap.refinement.changed,
        }


def _reason_kind(reason: str) -> str:
    for key in ("empty of content", "copies the instruction", "not supported", "not stated by the user", "repeated"):
        if key in reason:
            return key
    return "other"


def main(argv: list[str] | None = None) -> int:
    """Run every (path, LLM script) pair and print (or append) the results as JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="write the results to this JSON file")
    p.add_argument("--base-url", default=None, help="also run against this OpenAI-compatible endpoint (…/v1)")
    p.add_argument("--model", default="local", help="the model name for --base-url")
    args = p.parse_args(argv)
    results = [_play(path, script) for script in (None, "ok", "junk") for path in ("core", "adapter")]
    if args.base_url is not None:
        results += [_play(path, "real", args.base_url, args.model) for path in ("core", "adapter")]
    for r in results:
        print(json.dumps(r, ensure_ascii=False))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
