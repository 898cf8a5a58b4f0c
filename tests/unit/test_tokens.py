"""Token counting: exact from tiktoken's own cache, the approximation otherwise, never the network."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.harness.tiktoken_files import bundled_tiktoken_cache
from hybrid_memory import HybridMemory, LocalStore
from hybrid_memory.testing import HashingEmbedder
from hybrid_memory.text.tokens import APPROX, TokenCounter, count_tokens, tiktoken_cache_dir

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_FILE = hashlib.sha1(O200K_URL.encode()).hexdigest()  # tiktoken's cache file name


@pytest.fixture
def bundled() -> str:
    """llama-index-core's bundled tiktoken files (test data only; the library never reads them itself)."""
    path = bundled_tiktoken_cache()
    if path is None:
        pytest.skip("llama-index-core (the 'llamaindex' extra) is not installed")
    return path


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt fails the test: this is the fault we must never cause (a download)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``TIKTOKEN_CACHE_DIR`` points at an empty directory: no tiktoken files anywhere."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.usefixtures("no_network")
def test_no_cached_file_gives_the_approximation_without_a_download(
    empty_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="hybrid_memory.tokens"):
        c = TokenCounter("gpt-4o-mini")
        again = TokenCounter("gpt-4o-mini")
    assert (c.exact, c.name, again.name) == (False, APPROX, APPROX)
    assert c.encoding_name == "o200k_base"
    assert c.fallback_reason is not None and str(empty_cache) in c.fallback_reason
    logged = [r for r in caplog.records if r.name == "hybrid_memory.tokens"]
    assert len(logged) == 1 and logged[0].levelno == logging.INFO  # once, and not a warning
    assert list(empty_cache.iterdir()) == []  # tiktoken was not even asked (it would write here)
    assert c.count("我喜欢喝茶。") == 5 and c.count("hello world, how are you?") == 7
    assert count_tokens("hello world, how are you?") == 7


@pytest.mark.usefixtures("no_network")
def test_a_corrupt_cached_file_is_not_replaced_by_a_download(empty_cache: Path) -> None:
    bad = empty_cache / O200K_FILE
    bad.write_bytes(b"not a tiktoken file\n")
    c = TokenCounter("gpt-4o-mini")
    assert c.name == APPROX
    assert bad.read_bytes() == b"not a tiktoken file\n"  # tiktoken would delete it and download


@pytest.mark.usefixtures("no_network")
def test_empty_cache_variable_disables_exact_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken: never cache, always download
    assert tiktoken_cache_dir() is None
    c = TokenCounter("gpt-4o-mini")
    assert c.name == APPROX and c.fallback_reason is not None and "disabled" in c.fallback_reason


@pytest.mark.usefixtures("no_network")
def test_exact_counts_from_tiktoken_cache_dir(bundled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", bundled)
    c = TokenCounter("gpt-4o-mini")
    assert (c.exact, c.name, c.fallback_reason) == (True, "tiktoken:o200k_base", None)
    assert c.count("hello world") == 2
    assert TokenCounter("gpt-4").name == "tiktoken:cl100k_base"
    assert repr(c) == "TokenCounter(name='tiktoken:o200k_base')"


@pytest.mark.usefixtures("no_network")
def test_exact_counts_from_tiktokens_default_cache(
    bundled: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # tiktoken's default: <tempdir>/data-gym-cache
    default = tmp_path / "data-gym-cache"
    assert tiktoken_cache_dir() == str(default)
    assert TokenCounter("gpt-4o-mini").name == APPROX
    default.mkdir()
    shutil.copy(Path(bundled) / O200K_FILE, default / O200K_FILE)
    assert TokenCounter("gpt-4o-mini").name == "tiktoken:o200k_base"  # a file put there later is used


def test_approximation_is_calibrated_on_bilingual_text(bundled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", bundled)
    exact = TokenCounter("gpt-4o-mini")
    approx = TokenCounter(encoding="approx")
    texts = [
        "I prefer aisle seats on long flights, and please no red-eye departures.",
        "记住：我对花生过敏，晚饭不要点花生酱面。",
        "我在学习Python，想用LangChain做一个agent，上周试了GPT-4o。",
        "明天上午10点和王经理开会，讨论Q3的预算（大约50万元）。",
        "저는 커피를 좋아해요. 설탕은 넣지 마세요.",
        "The quarterly report is due on 2025-03-14; ping Alice at alice@example.com before then.",
    ]
    pairs = [(approx.count(t), exact.count(t)) for t in texts]
    assert all(0.8 <= a / e <= 1.4 for a, e in pairs), pairs  # per text: within -20 % / +40 %
    total = sum(a for a, _ in pairs) / sum(e for _, e in pairs)
    assert 1.0 <= total <= 1.2, pairs  # in total: a slight over-count, so budgets rarely overflow


def test_fused_context_names_the_counter(empty_cache: Path, bundled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def context(query: str) -> tuple[str, int, str]:
        mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
        try:
            mem.remember("u1", "我对花生过敏 (allergic to peanuts)", category="fact")
            ctx = mem.build_context(query, user_id="u1")
            return ctx.token_counter, ctx.token_count, ctx.text
        finally:
            mem.close()

    name, tokens, text = context("花生 peanuts")
    assert name == APPROX and text and tokens == TokenCounter(encoding="approx").count(text)
    skipped_name, _, skipped_text = context("完全无关 unrelated")
    assert skipped_text == "" and skipped_name == APPROX  # a skipped block says it too
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", bundled)
    name, tokens, text = context("花生 peanuts")
    assert name == "tiktoken:o200k_base" and tokens == TokenCounter().count(text)


_NO_LLAMA_INDEX = """
import json, sys
sys.modules["llama_index"] = None  # as if the llamaindex extra were not installed
from hybrid_memory import HybridMemory, LocalStore
from benchmarks.harness.tiktoken_files import bundled_tiktoken_cache
from hybrid_memory.testing import HashingEmbedder
mem = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
mem.add_turn("u1", "s1", "user", "记住：我对花生过敏")
mem.remember("u1", "I prefer oolong tea, no sugar", category="preference")
hits = mem.recall("花生", user_id="u1", k=1)
ctx = mem.build_context("what tea do I like? 花生", user_id="u1")
mem.close()
print(json.dumps({"hit": hits[0].content, "counter": ctx.token_counter, "tokens": ctx.token_count,
                  "bundled": bundled_tiktoken_cache(), "llama_index": "llama_index.core" in sys.modules}))
"""


def test_memory_works_when_llama_index_is_not_importable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env["TMPDIR"] = str(tmp_path)  # tiktoken's default cache (<tempdir>/data-gym-cache) is empty
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", _NO_LLAMA_INDEX],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no warning, no log line on a base install
    out = json.loads(proc.stdout)
    assert out["hit"] == "记住：我对花生过敏"
    assert out["counter"] == APPROX and out["tokens"] > 0
    assert out["bundled"] is None and out["llama_index"] is False
