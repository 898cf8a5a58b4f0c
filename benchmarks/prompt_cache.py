"""Re-processed prompt tokens over a scripted 20-turn conversation, per adapter and block placement.

A model server with prefix caching (llama.cpp, vLLM, hosted APIs) only processes a prompt from
the first token that differs from the previous call's prompt. This script plays one scripted
conversation (20 user messages with fixed replies, a user with ten memories from earlier
sessions) through each adapter, renders every prompt the model would get in a ChatML-like
template, tokenises it (tiktoken ``o200k_base``) and counts, per call, the tokens after the
longest common prefix with the previous call's prompt. No model is involved: the replies are
scripted, so every variant sees the same conversation.

Variants: no memory at all (the same conversation without any block), and each adapter with
each ``fuser.placement``. LlamaIndex's ``Memory`` places ``HybridMemoryBlock``'s text itself:
``insert_method=USER`` is used for the user placements and Memory's default ``SYSTEM`` for the
system ones (``system_start``: Memory's block message before the agent's system prompt). Target (issue 17): at most 1.3x the no-memory figure with the default placement.

    python -m benchmarks.prompt_cache --out benchmarks/results
    python -m benchmarks.prompt_cache --embedder hashing   # no model download, lexical embedder
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/prompt_cache.py` as well as `python -m ...`
    sys.path.insert(0, str(ROOT))

from benchmarks.harness.tiktoken_files import use_bundled_tiktoken_cache  # noqa: E402

SYSTEM = "You are a helpful personal assistant. Answer briefly and kindly."
USER = "ann"
PLACEMENTS = ("user_message", "before_user", "system_end", "system_start")
ADAPTERS = ("middleware", "chat_memory", "agent_memory", "memory_block")

#: What the user told earlier sessions (written before the conversation starts).
MEMORIES = [
    ("Ann is allergic to peanuts.", 0.95),
    ("Ann lives in Lyon with her husband Marc.", 0.7),
    ("Ann's dog Rex is a beagle.", 0.6),
    ("Ann prefers aisle seats on planes.", 0.6),
    ("Ann is vegetarian.", 0.8),
    ("Ann's daughter Mia starts school in September.", 0.7),
    ("Ann works as a nurse on night shifts.", 0.6),
    ("Ann is learning the cello.", 0.5),
    ("Ann's sister Julia lives in Berlin.", 0.6),
    ("Ann drives a blue Renault Zoe.", 0.5),
]

#: The scripted conversation: (user message, assistant reply).
CONVERSATION = [
    ("Hi! Can you help me plan dinner tonight?", "Of course. What kind of food are you in the mood for?"),
    ("Something with a Thai flavour would be nice.", "A green curry with tofu and vegetables would work well."),
    ("Would a satay sauce be a problem for me?", "Yes: satay sauce is made with peanuts, so better skip it."),
    ("OK, what side dish goes with the curry?", "Jasmine rice and a cucumber salad go well with it."),
    ("Next week I fly to Berlin, which seat should I book?", "I would book an aisle seat, as you like."),
    ("I will visit my sister there, any gift ideas?", "A book from a Lyon bookshop or local chocolates."),
    ("lol she likes music too", "Then concert tickets could make her happy."),
    ("What should I practise on the cello this week?", "Scales in D major and a slow piece for bowing."),
    ("How many hours per day is reasonable?", "Thirty to forty-five minutes a day is a good start."),
    ("Remember: my cello teacher is called Helene.", "Noted: your cello teacher is Helene."),
    ("My daughter needs a school bag, any advice?", "A light bag with two padded straps is best."),
    ("Is walking to school safe in our neighbourhood?", "Usually yes; walk the route together first."),
    ("Can the dog come with us when we walk?", "Yes, a beagle will enjoy the morning walk."),
    ("How often should he be walked?", "Twice a day, about an hour in total."),
    ("I am on nights this week, how do I sleep well?", "Dark curtains, earplugs and a fixed sleep time help."),
    ("帮我想想周末做什么菜", "可以做麻婆豆腐和清炒时蔬。"),
    ("周末能不能带狗去公园？", "大部分公园可以，记得牵绳。"),
    ("Should I charge the car tonight?", "If the battery is under half, charge it tonight."),
    ("Where can I charge it near home?", "Supermarket car parks often have chargers."),
    ("Thanks, that is all for today!", "You are welcome, have a nice evening!"),
]

Prompt = list[tuple[str, str]]

#: The template's markers (one token each for a ChatML model; plain text for o200k_base).
MARKERS = ("<|im_start|>", "<|im_end|>")


def render(prompt: Prompt) -> str:
    """A ChatML-like rendering, as chat servers apply a template before tokenising."""
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in prompt) + "<|im_start|>assistant\n"


def reprocessed(prompts: Sequence[Prompt], encode: Callable[[str], list[int]]) -> list[int]:
    """Per call: tokens after the longest common prefix with the previous call's prompt."""
    out: list[int] = []
    before: list[int] = []
    for prompt in prompts:
        tokens = encode(render(prompt))
        common = 0
        for a, b in zip(before, tokens, strict=False):
            if a != b:
                break
            common += 1
        out.append(len(tokens) - common)
        before = tokens
    return out


def _blocks(prompt: Prompt) -> set[str]:
    found = set()
    for _, text in prompt:
        start = text.find("<memory-context>")
        while start >= 0:
            end = text.find("</memory-context>", start)
            if end < 0:
                break
            found.add(text[start:end])
            start = text.find("<memory-context>", end)
    return found


def shown_memories(prompt: Prompt) -> set[str]:
    """The memory lines (``- [label] text`` → ``text``) in the prompt's blocks."""
    out = set()
    for block in _blocks(prompt):
        for line in block.splitlines():
            if line.startswith("- [") and "] " in line:
                out.add(line.split("] ", 1)[1])
    return out


def kept_share(prompts: Sequence[Prompt], reference: Sequence[Prompt]) -> float | None:
    """Share of the (call, memory) pairs the reference run shows that these prompts show too."""
    pairs = kept = 0
    for mine, ref in zip(prompts, reference, strict=True):
        wanted = shown_memories(ref)
        pairs += len(wanted)
        kept += len(wanted & shown_memories(mine))
    return round(kept / pairs, 3) if pairs else None


def new_blocks(prompts: Sequence[Prompt]) -> int:
    """Calls whose prompt holds a memory block the previous call's prompt did not."""
    before: set[str] = set()
    count = 0
    for prompt in prompts:
        now = _blocks(prompt)
        count += bool(now - before)
        before = now
    return count


# --------------------------------------------------------------------------- the variants
def _core(placement: str, embedder: str, gate: str = "floor") -> Any:
    from hybrid_memory import HybridMemory, LocalStore

    emb: Any = None
    if embedder == "hashing":
        from hybrid_memory.testing import HashingEmbedder

        emb = HashingEmbedder()
    mem = HybridMemory(
        store=LocalStore(":memory:"), embedder=emb, config={"fuser": {"placement": placement, "gate": gate}}
    )
    start = datetime.now(timezone.utc) - timedelta(days=30)
    for i, (text, importance) in enumerate(MEMORIES):
        mem.remember(USER, text, importance=importance, timestamp=start + timedelta(days=i), session_id="earlier")
    return mem


def no_memory() -> list[Prompt]:
    """The conversation as the model gets it without any memory block."""
    prompts: list[Prompt] = []
    history: Prompt = [("system", SYSTEM)]
    for question, answer in CONVERSATION:
        prompts.append([*history, ("user", question)])
        history += [("user", question), ("assistant", answer)]
    return prompts


def _lc(messages: Sequence[Any]) -> Prompt:
    roles = {"system": "system", "human": "user", "ai": "assistant"}
    return [(roles.get(m.type, m.type), m.text) for m in messages]


def middleware(mem: Any) -> list[Prompt]:
    """``create_agent`` + ``HybridMemoryMiddleware`` with a checkpointer (one thread)."""
    from langchain.agents import create_agent
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_hybrid_memory import HybridMemoryMiddleware

    seen: list[list[BaseMessage]] = []

    class Recording(GenericFakeChatModel):
        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            seen.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    model = Recording(messages=iter([AIMessage(content=a) for _, a in CONVERSATION]))
    agent = create_agent(
        model,
        system_prompt=SYSTEM,
        middleware=[HybridMemoryMiddleware(mem, user_id=USER)],
        checkpointer=InMemorySaver(),
    )
    for question, _ in CONVERSATION:
        agent.invoke({"messages": [HumanMessage(question)]}, config={"configurable": {"thread_id": "t1"}})
    return [_lc(p) for p in seen]


def chat_memory(mem: Any) -> list[Prompt]:
    """``HybridChatMemory`` (messages) under a system + history + input chat prompt."""
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    from langchain_hybrid_memory import HybridChatMemory

    template = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), MessagesPlaceholder("history"), ("human", "{input}")]
    )
    memory = HybridChatMemory(mem, user_id=USER, session_id="s1", return_messages=True)
    prompts = []
    for question, answer in CONVERSATION:
        variables = memory.load_memory_variables({"input": question})
        prompts.append(_lc(template.invoke({**variables, "input": question}).to_messages()))
        memory.save_context({"input": question}, {"output": answer})
    return prompts


def _li(messages: Sequence[Any]) -> Prompt:
    return [(m.role.value, m.content or "") for m in messages]


def agent_memory(mem: Any) -> list[Prompt]:
    """``HybridAgentMemory``: what ``aget`` hands a LlamaIndex agent, after its system prompt."""
    from llama_index.core.llms import ChatMessage

    from llamaindex_hybrid_memory import HybridAgentMemory

    memory = HybridAgentMemory.from_defaults(mem, user_id=USER, session_id="s1")
    prompts = []
    for question, answer in CONVERSATION:
        memory.put(ChatMessage(role="user", content=question))
        prompts.append([("system", SYSTEM), *_li(memory.get())])
        memory.put(ChatMessage(role="assistant", content=answer))
    return prompts


def memory_block(mem: Any, placement: str) -> list[Prompt]:
    """``HybridMemoryBlock`` in LlamaIndex's ``Memory`` (USER insertion for the user placements)."""
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory import InsertMethod, Memory
    from sqlalchemy.ext.asyncio import create_async_engine

    from llamaindex_hybrid_memory import HybridMemoryBlock

    insert = InsertMethod.SYSTEM if placement.startswith("system") else InsertMethod.USER

    async def run() -> list[Prompt]:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        chat = Memory.from_defaults(
            session_id="s1",
            token_limit=8000,
            memory_blocks=[HybridMemoryBlock(mem, user_id=USER)],
            insert_method=insert,
            async_engine=engine,
        )
        prompts = []
        try:
            for question, answer in CONVERSATION:
                await chat.aput(ChatMessage(role="user", content=question))
                messages = await chat.aget()
                if placement == "system_start" and messages and messages[0].role.value == "system":
                    # Memory put the block into a system message of its own, at the start
                    prompts.append([*_li(messages[:1]), ("system", SYSTEM), *_li(messages[1:])])
                else:
                    prompts.append([("system", SYSTEM), *_li(messages)])
                await chat.aput(ChatMessage(role="assistant", content=answer))
        finally:
            await engine.dispose()
        return prompts

    return asyncio.run(run())


def run(embedder: str) -> dict[str, Any]:
    use_bundled_tiktoken_cache()
    import tiktoken

    enc = tiktoken.get_encoding("o200k_base")

    def encode(text: str) -> list[int]:
        return enc.encode(text, disallowed_special=())

    # The template markers as one token each, as a ChatML model's own tokenizer counts them.
    markers = {m: enc.n_vocab + i for i, m in enumerate(MARKERS)}
    enc_markers = tiktoken.Encoding(
        name="o200k_base+chatml",
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        special_tokens={**enc._special_tokens, **markers},
    )

    def encode_markers(text: str) -> list[int]:
        return enc_markers.encode(text, allowed_special=set(markers), disallowed_special=())

    base = reprocessed(no_memory(), encode)
    base_markers = reprocessed(no_memory(), encode_markers)
    rows: list[dict[str, Any]] = []
    variants = [(p, "floor") for p in PLACEMENTS] + [("user_message", "calibrated")]
    for adapter in ADAPTERS:
        runs: dict[tuple[str, str], list[Prompt]] = {}
        for placement, gate in variants:
            mem = _core(placement, embedder, gate)
            try:
                if adapter == "memory_block":
                    prompts = memory_block(mem, placement)
                else:
                    prompts = {"middleware": middleware, "chat_memory": chat_memory, "agent_memory": agent_memory}[
                        adapter
                    ](mem)
            finally:
                mem.close()
            runs[(placement, gate)] = prompts
            per_call = reprocessed(prompts, encode)
            blocks = new_blocks(prompts)
            rows.append(
                {
                    "adapter": adapter,
                    "placement": placement,
                    "gate": gate,
                    "calls": len(prompts),
                    "calls_with_a_new_block": blocks,
                    "reprocessed_tokens": sum(per_call),
                    "reprocessed_after_first_call": sum(per_call[1:]),
                    "ratio_to_no_memory": round(sum(per_call) / sum(base), 3),
                    "ratio_after_first_call": round(sum(per_call[1:]) / sum(base[1:]), 3),
                    "last_prompt_tokens": len(encode(render(prompts[-1]))),
                    "per_call": per_call,
                    "reprocessed_markers_as_tokens": sum(reprocessed(prompts, encode_markers)),
                }
            )
        for row in rows[-len(variants) :]:
            row["memories_kept_vs_system_end"] = kept_share(
                runs[(row["placement"], row["gate"])], runs[("system_end", "floor")]
            )
    return {
        "embedder": embedder,
        "tokenizer": "tiktoken o200k_base over a ChatML-like template",
        "turns": len(CONVERSATION),
        "memories": len(MEMORIES),
        "no_memory": {
            "reprocessed_tokens": sum(base),
            "reprocessed_after_first_call": sum(base[1:]),
            "last_prompt_tokens": len(encode(render(no_memory()[-1]))),
            "per_call": base,
            "reprocessed_markers_as_tokens": sum(base_markers),
        },
        "rows": rows,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def markdown(result: dict[str, Any]) -> str:
    base = result["no_memory"]
    lines = [
        "# Re-processed prompt tokens with prefix caching (`python -m benchmarks.prompt_cache`)",
        "",
        f"A scripted {result['turns']}-turn conversation (English and Chinese; {result['memories']} memories from "
        f"earlier sessions; embedder: {result['embedder']}), every prompt rendered in a ChatML-like template and "
        f"tokenised with {result['tokenizer'].split(' over')[0]}. *Re-processed* = tokens after the longest common "
        "prefix with the previous call's prompt, summed over the calls (what a prefix-caching server evaluates). "
        "No model: replies are scripted. The default placement is `user_message`.",
        "",
        f"No memory at all: **{base['reprocessed_tokens']}** tokens ({base['reprocessed_after_first_call']} after "
        f"the first call); the last prompt is {base['last_prompt_tokens']} tokens.",
        "",
        "| adapter | placement | gate | re-processed | × no memory | after call 1 | × no memory | calls with a new block "
        "| memories of the system_end prompts also shown | last prompt |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['adapter']} | {r['placement']} | {r['gate']} | {r['reprocessed_tokens']} | {r['ratio_to_no_memory']:.2f} | "
            f"{r['reprocessed_after_first_call']} | {r['ratio_after_first_call']:.2f} | "
            f"{r['calls_with_a_new_block']} | {_pct(r['memories_kept_vs_system_end'])} | {r['last_prompt_tokens']} |"
        )
    lines += [
        "",
        "With the template markers counted as one token each, as a ChatML model's own tokenizer does "
        f"(o200k_base reads them as text): no memory {base['reprocessed_markers_as_tokens']}; at the default "
        "placement "
        + ", ".join(
            f"{r['adapter']} {r['reprocessed_markers_as_tokens']} "
            f"({r['reprocessed_markers_as_tokens'] / base['reprocessed_markers_as_tokens']:.2f}×)"
            for r in result["rows"]
            if r["placement"] == "user_message" and r["gate"] == "floor"
        )
        + ". The baseline shrinks more than the blocks (every message's framing gets cheaper), so the ratios are higher.",
        "",
        "*Memories of the system_end prompts also shown*: a proxy for answer use without a model: of the "
        "(call, memory) pairs the old placement puts in front of the model, the share this variant's prompt "
        "of the same call shows too (in its newest block or an earlier one kept in place).",
        "",
        "`memory_block` is `HybridMemoryBlock` inside LlamaIndex's `Memory`, which places the text itself: "
        "`insert_method=USER` for the user placements (Memory puts the block in front of the newest user "
        "message and keeps none in its history; the block puts its earlier blocks back where Memory first "
        "rendered them, so `before_user` is the same as `user_message` here), Memory's default `SYSTEM` for "
        "the system placements (`system_start`: Memory's block message before the agent's system prompt, "
        "`system_end`: after it).",
        "",
        "With the stable placements a later block holds only memories the conversation does not show yet "
        "and has no header of its own (the first block's, still in the prompt, frames it). `chat_memory` "
        "cannot put the block inside the newest user message (a legacy chain formats that message itself), "
        "so its `user_message` is a message of its own right before it, as `before_user`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--embedder", choices=("default", "hashing"), default="default")
    p.add_argument("--out", type=Path, default=None, help="directory for prompt_cache.json and prompt_cache.md")
    args = p.parse_args(argv)
    result = run(args.embedder)
    text = markdown(result)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "prompt_cache.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        (args.out / "prompt_cache.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
