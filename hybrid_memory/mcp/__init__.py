"""An MCP server over a memory: one memory for desktop assistants, IDEs and agent services.

``hybrid-memory mcp`` serves the Model Context Protocol with the official ``mcp`` SDK
(``pip install 'hybrid-memory[mcp]'``), over ``--store PATH`` or ``--weaviate URL``:

* **stdio** (desktop clients start it as a subprocess): ``--user`` fixes whose memory it is.
* **streamable HTTP** (services): every request carries ``Authorization: Bearer <token>``; a
  token file maps tokens (or their SHA-256 digests) to users (:mod:`hybrid_memory.mcp.tokens`).
  Missing or unknown tokens get 401. It listens on 127.0.0.1 by default and answers only
  requests whose ``Host`` (and ``Origin``, when sent) name that address (no DNS rebinding).

Tools: ``remember``, ``recall`` (with score components), ``build_context`` (the fused block
under a token budget), ``add_turn``, ``forget`` (one memory), ``forget_turn`` (one turn
``add_turn`` logged), ``list_memories`` (paged), and
``forget_user`` only with ``--allow-forget-user``. No tool takes a user id: the connection
decides. Resource ``memory://recent`` (the user's recent memories) and prompt
``answer_with_memory``. Every call goes through the :class:`~hybrid_memory.memory.HybridMemory`
facade, so it is traced (``hybrid-memory replay``) and counted in the metrics like a library
call; bad arguments come back as typed tool errors (``isError``), never as tracebacks.

``import hybrid_memory.mcp`` does not import the SDK; :func:`build_server`, :func:`serve_stdio`
and :func:`serve_http` do (a missing extra raises
:class:`~hybrid_memory.errors.MissingDependencyError`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from hybrid_memory.mcp.tokens import TokenTable

__all__ = ["TokenTable", "build_server", "serve_http", "serve_stdio"]

_LAZY = {"build_server", "serve_http", "serve_stdio"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module("hybrid_memory.mcp.server"), name)
    raise AttributeError(f"module 'hybrid_memory.mcp' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from hybrid_memory.mcp.server import build_server, serve_http, serve_stdio
