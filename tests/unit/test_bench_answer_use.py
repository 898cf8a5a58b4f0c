"""The real-model benchmark's parsing of llama.cpp's log and its answer-use check."""

from __future__ import annotations

from typing import Any

from benchmarks.answer_use import parse_log, summary, uses_memory

#: What llama-cpp-python 0.3's server printed for a first call, then a call with a cached prefix.
FIRST = """INFO:     127.0.0.1:48648 - "GET /v1/models HTTP/1.1" 200 OK
llama_perf_context_print:        load time =      90.12 ms
llama_perf_context_print: prompt eval time =      41.08 ms /    20 tokens (    2.05 ms per token,   486.85 tokens per second)
llama_perf_context_print:        eval time =     300.00 ms /    11 runs   (   27.27 ms per token,    36.67 tokens per second)
llama_perf_context_print:       total time =    2501.12 ms /    32 tokens
"""
CACHED = """Llama.generate: 19 prefix-match hit, remaining 1 prompt tokens to eval
llama_perf_context_print: prompt eval time =       0.00 ms /     1 tokens (    0.00 ms per token,      inf tokens per second)
llama_perf_context_print:       total time =     433.78 ms /    18 tokens
"""


def test_the_log_gives_evaluated_tokens_with_and_without_a_prefix_hit() -> None:
    assert parse_log(FIRST) == {"evaluated": 20, "prompt_eval_ms": 41.08, "model_ms": 2501.12}
    assert parse_log(CACHED) == {"evaluated": 1, "prompt_eval_ms": 0.0, "model_ms": 433.78}
    assert parse_log("nothing logged") == {"evaluated": None, "prompt_eval_ms": None, "model_ms": None}


def test_answer_use_counts_only_turns_that_need_a_memory() -> None:
    assert uses_memory("Would a satay sauce be a problem for me?", "Yes, you are allergic to Peanuts.") is True
    assert uses_memory("Would a satay sauce be a problem for me?", "Satay is delicious!") is False
    assert uses_memory("lol she likes music too", "Great!") is None
    rows: list[dict[str, Any]] = [
        {"evaluated": 20, "model_ms": 100.0, "turn_ms": 120.0, "uses_memory": True},
        {"evaluated": 5, "model_ms": 50.0, "turn_ms": 60.0, "uses_memory": False},
        {"evaluated": 7, "model_ms": 70.0, "turn_ms": 80.0, "uses_memory": None},
    ]
    s = summary(rows)
    assert (s["evaluated"], s["evaluated_after_first"], s["answer_use"], s["answer_use_n"]) == (32, 12, 0.5, 2)
    assert (s["model_ms_median"], s["turn_ms_median"]) == (70.0, 80.0)
