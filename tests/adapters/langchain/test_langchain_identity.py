"""Issue 15, attack 1: on an authenticated LangGraph server run, the client cannot choose the user.

The runs here are real ``create_agent`` / ``StateGraph`` runs whose config has the shape a LangGraph
server (``langgraph-api``) gives a graph run: it copies the client's ``context`` into
``configurable``, then sets the reserved keys ``langgraph_auth_user`` (the user its auth handler
returned, a ``BaseUser``), ``langgraph_auth_user_id`` and ``langgraph_auth_permissions`` - which a
client cannot send - and ``langgraph`` derives ``runtime.server_info.user`` from the first. Without
custom auth the server stores ``None`` / ``""``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TypedDict

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph_sdk.auth.types import StudioUser

from hybrid_memory import HybridMemory, IdentityMismatchError, LocalStore
from hybrid_memory.testing import HashingEmbedder
from langchain_hybrid_memory import (
    HybridChatMemory,
    HybridMemoryMiddleware,
    HybridMemoryRetriever,
    HybridMemoryStore,
)


class AuthUser:
    """What ``langgraph-api`` keeps for a custom ``@auth.authenticate`` result (a ``BaseUser``)."""

    def __init__(self, identity: str) -> None:
        self._d = {"identity": identity, "display_name": identity, "is_authenticated": True, "permissions": []}

    identity = property(lambda self: self._d["identity"])
    display_name = property(lambda self: self._d["display_name"])
    is_authenticated = property(lambda self: True)
    permissions: Sequence[str] = ()

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)


def server_run(
    identity: str | None, context: dict[str, Any] | None = None, *, user: Any = None, thread: str = "t1"
) -> dict[str, Any]:
    """``invoke`` kwargs shaped like a LangGraph server run (models/run.py in langgraph-api)."""
    configurable: dict[str, Any] = {**(context or {}), "thread_id": thread, "assistant_id": "a1", "graph_id": "agent"}
    if context:
        configurable["__context_provided__"] = True
    if identity is None:  # no custom auth: UnauthenticatedUser is stored as None, its id as ""
        configurable.update(langgraph_auth_user=None, langgraph_auth_user_id="", langgraph_auth_permissions=[])
    else:
        configurable.update(
            langgraph_auth_user=user if user is not None else AuthUser(identity),
            langgraph_auth_user_id=identity,
            langgraph_auth_permissions=["authenticated"],
        )
    kwargs: dict[str, Any] = {"config": {"configurable": configurable}}
    if context is not None:
        kwargs["context"] = context
    return kwargs


@pytest.fixture
def mem() -> Iterator[HybridMemory]:
    m = HybridMemory(store=LocalStore(":memory:"), embedder=HashingEmbedder())
    m.remember("alice", "Alice is allergic to peanuts", importance=0.9)
    m.remember("bob", "Bob's PIN hint is the name of his cat", importance=0.9)
    yield m
    m.close()


def state_of(mem: HybridMemory, user: str) -> Any:
    return (
        sorted((r.id, r.content, r.access_count, r.last_accessed_at) for r in mem.store.list(user)),
        [t.content for t in mem.short_term(user, "t1")],
    )


def agent(mem: HybridMemory, **kwargs: Any) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="ok")] * 4))
    return create_agent(model, middleware=[HybridMemoryMiddleware(mem, **kwargs)], checkpointer=InMemorySaver())


ASK = {"messages": [("user", "what is my PIN hint? any peanuts?")]}


# --------------------------------------------------------------------------- the attack
@pytest.mark.parametrize(
    "context",
    [{"user_id": "bob"}, {"langgraph_user_id": "bob"}, {"user_id": "bob", "langgraph_user_id": "alice"}],
)
def test_a_logged_in_user_cannot_name_another_user(mem: HybridMemory, context: dict[str, Any]) -> None:
    bob_before = state_of(mem, "bob")
    with pytest.raises(IdentityMismatchError) as err:
        agent(mem).invoke(ASK, **server_run("alice", context))
    assert (err.value.authenticated, err.value.claimed) == ("alice", "bob")
    assert state_of(mem, "bob") == bob_before  # nothing of bob's was read (no access bump) or written


def test_the_authenticated_user_names_the_user(mem: HybridMemory) -> None:
    out = agent(mem).invoke(ASK, **server_run("alice"))
    assert out["memory_context"]["user_id"] == "alice"
    assert [h["content"] for h in out["memory_context"]["hits"]] == ["Alice is allergic to peanuts"]
    assert [t.role for t in mem.short_term("alice", "t1")] == ["user", "assistant"]


def test_a_matching_client_id_is_accepted_unless_refused(mem: HybridMemory) -> None:
    out = agent(mem).invoke(ASK, **server_run("alice", {"user_id": "alice"}))
    assert out["memory_context"]["user_id"] == "alice"
    with pytest.raises(IdentityMismatchError, match="refuse"):
        agent(mem, client_user_ids="refuse").invoke(ASK, **server_run("alice", {"user_id": "alice"}, thread="t2"))
    out = agent(mem, client_user_ids="refuse").invoke(ASK, **server_run("alice", thread="t3"))
    assert out["memory_context"]["user_id"] == "alice"


def test_the_constructor_fallback_does_not_override_the_authenticated_user(mem: HybridMemory) -> None:
    out = agent(mem, user_id="bob").invoke(ASK, **server_run("alice"))
    assert out["memory_context"]["user_id"] == "alice"


def test_studio_and_dict_shaped_users_count(mem: HybridMemory) -> None:
    studio = server_run("alice", {"user_id": "bob"}, user=StudioUser("alice", is_authenticated=True))
    with pytest.raises(IdentityMismatchError):
        agent(mem).invoke(ASK, **studio)
    as_dict = server_run("alice", {"user_id": "bob"}, user={"identity": "alice", "permissions": []})
    with pytest.raises(IdentityMismatchError):
        agent(mem).invoke(ASK, **as_dict)


def test_conflicting_server_identities_fail_closed(mem: HybridMemory) -> None:
    kwargs = server_run("alice", user=AuthUser("mallory"))
    with pytest.raises(IdentityMismatchError, match="conflicting"):
        agent(mem).invoke(ASK, **kwargs)


def test_without_server_auth_the_client_id_is_used_unless_auth_is_required(mem: HybridMemory) -> None:
    out = agent(mem).invoke(ASK, **server_run(None, {"user_id": "bob"}))
    assert out["memory_context"]["user_id"] == "bob"  # unchanged: trust is the deployment's
    with pytest.raises(IdentityMismatchError, match="require_authenticated"):
        agent(mem, require_authenticated=True).invoke(ASK, **server_run(None, {"user_id": "bob"}, thread="t2"))


def test_async_runs_follow_the_same_rule(mem: HybridMemory) -> None:
    with pytest.raises(IdentityMismatchError):
        asyncio.run(agent(mem).ainvoke(ASK, **server_run("alice", {"user_id": "bob"})))
    out = asyncio.run(agent(mem).ainvoke(ASK, **server_run("alice", thread="t9")))
    assert out["memory_context"]["user_id"] == "alice"


def test_settings_can_only_be_stricter(mem: HybridMemory) -> None:
    from hybrid_memory.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        HybridMemoryMiddleware(mem, client_user_ids="trust_client")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the LangGraph store in a run
class S(TypedDict, total=False):
    namespace: tuple[str, ...]
    op: str
    out: Any


def _node(state: S, runtime: Runtime[Any]) -> dict[str, Any]:
    store = get_store()
    ns = state["namespace"]
    if state["op"] == "search":
        return {"out": [(i.namespace, i.value.get("content")) for i in store.search(ns, query="hint peanuts")]}
    if state["op"] == "get":
        item = store.get(ns, "k")
        return {"out": item.value if item else None}
    if state["op"] == "list":
        return {"out": store.list_namespaces(prefix=ns)}
    store.put(ns, "k", {"content": "written by the run"})
    return {"out": "put"}


def graph(mem: HybridMemory) -> Any:
    g = StateGraph(S)
    g.add_node("n", _node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    return g.compile(store=HybridMemoryStore(mem))


@pytest.mark.parametrize("op", ["search", "get", "put", "list"])
def test_store_refuses_another_users_namespace_on_an_authenticated_run(mem: HybridMemory, op: str) -> None:
    bob_before = state_of(mem, "bob")
    with pytest.raises(IdentityMismatchError):
        graph(mem).invoke({"namespace": ("memories", "bob"), "op": op}, **server_run("alice"))
    assert state_of(mem, "bob") == bob_before


def test_store_searches_reaching_every_user_reach_only_the_authenticated_one(mem: HybridMemory) -> None:
    g = graph(mem)
    out = g.invoke({"namespace": ("memories",), "op": "search"}, **server_run("alice"))["out"]
    assert {ns[1] for ns, _ in out} == {"alice"}
    out = g.invoke({"namespace": (), "op": "list"}, **server_run("alice"))["out"]
    assert out and all(ns[1] == "alice" for ns in out)
    # Without an authenticated user the store behaves as before (the deployment decides who may call it).
    out = g.invoke({"namespace": ("memories",), "op": "search"}, **server_run(None))["out"]
    assert {ns[1] for ns, _ in out} == {"alice", "bob"}
    g.invoke({"namespace": ("memories", "alice"), "op": "put"}, **server_run("alice"))
    assert any(r.content == "written by the run" for r in mem.store.list("alice"))


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="LangGraph hands the run's config to async code only on Python >= 3.11 (get_config/get_store raise "
    "before); langgraph-api, the server that authenticates runs, requires 3.11 too",
)
def test_store_async_path(mem: HybridMemory) -> None:
    with pytest.raises(IdentityMismatchError):
        asyncio.run(graph(mem).ainvoke({"namespace": ("memories", "bob"), "op": "search"}, **server_run("alice")))


# --------------------------------------------------------------------------- bound adapters in a run
def test_bound_adapters_refuse_a_run_authenticated_as_someone_else(mem: HybridMemory) -> None:
    retriever = HybridMemoryRetriever(mem, user_id="bob")
    chat = HybridChatMemory(mem, user_id="bob", session_id="s1", long_term_key="long_term")
    seen: dict[str, Any] = {}

    def node(state: S) -> dict[str, Any]:
        for name, call in (
            ("retriever", lambda: retriever.invoke("PIN hint")),
            ("chat", lambda: chat.load_memory_variables({"input": "PIN hint"})),
            ("chat_save", lambda: chat.save_context({"input": "hi"}, {"output": "hello"})),
        ):
            try:
                seen[name] = call()
            except IdentityMismatchError as exc:
                seen[name] = exc
        return {"out": "done"}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile()
    bob_before = state_of(mem, "bob")
    app.invoke({"op": "x"}, **server_run("alice"))
    assert all(isinstance(v, IdentityMismatchError) for v in seen.values()), seen
    assert state_of(mem, "bob") == bob_before and mem.short_term("bob", "s1") == []
    app.invoke({"op": "x"}, **server_run("bob"))  # the run of the bound user works
    assert [d.page_content for d in seen["retriever"]] == ["Bob's PIN hint is the name of his cat"]
