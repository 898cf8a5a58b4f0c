"""The ``hybrid-memory mcp`` sub-command (the SDK is imported only when the command runs).

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="hybrid-memory")
    >>> register(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["mcp", "--store", "m.db", "--user", "alice"])
    >>> args.transport, args.user, args.host
    ('stdio', 'alice', '127.0.0.1')
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from hybrid_memory.errors import ConfigurationError

__all__ = ["open_server_memory", "register"]

_DESCRIPTION = """\
Serve the memory to MCP clients (Claude Desktop, IDE assistants, LangChain/LangGraph agents
through langchain-mcp-adapters, LlamaIndex agents through llama-index-tools-mcp).

  stdio (default): a desktop client starts this command; --user fixes whose memory it serves.
  --transport http: streamable HTTP at http://HOST:PORT/mcp for services; every request needs
      Authorization: Bearer <token>, with tokens mapped to users in --tokens FILE (JSON
      {"<token or sha256:<hex>>": "user id"}; default: the file named by $HYBRID_MEMORY_MCP_TOKENS).

Every tool call is traced beside the store (see `hybrid-memory replay`) and counted in the metrics;
--metrics-port PORT serves them to Prometheus at http://127.0.0.1:PORT/metrics (announced on stderr).
"""


def register(subparsers: Any) -> None:
    """Add ``mcp`` to the ``hybrid-memory`` parser's ``subparsers``."""
    from hybrid_memory.cli.ops import _store_args

    p = subparsers.add_parser(
        "mcp",
        help="serve the memory over the Model Context Protocol (stdio or streamable HTTP)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _store_args(p, embedder=True)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default stdio")
    p.add_argument("--user", help="stdio: the user whose memory is served (required)")
    p.add_argument("--tokens", metavar="FILE", help="http: bearer tokens mapped to users (JSON)")
    p.add_argument("--host", default="127.0.0.1", help="http: address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8766, help="http: port (default 8766; 0 = any free port)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="http: another Host header to accept, e.g. the public name behind a TLS proxy (repeatable)",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="http: an Origin to accept from browser clients, e.g. https://app.example (repeatable)",
    )
    p.add_argument(
        "--allow-forget-user",
        action="store_true",
        help="offer the forget_user tool (a client may erase its user's whole memory)",
    )
    p.add_argument("--no-trace", action="store_true", help="do not record a trace of the tool calls")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="also serve Prometheus /metrics on 127.0.0.1:PORT (0 = any free port; needs the prometheus extra)",
    )
    p.set_defaults(func=_cmd_mcp)


def open_server_memory(args: argparse.Namespace) -> Any:
    """The :class:`~hybrid_memory.memory.HybridMemory` a server command runs on.

    The store is created when missing, tracing is on (beside the store, or ``--traces``)
    unless ``--no-trace``, and recalls count as accesses per the configuration.
    """
    from hybrid_memory.cli.ops import open_store, resolve_embedder
    from hybrid_memory.memory import HybridMemory
    from hybrid_memory.observe.trace import default_trace_path

    store = open_store(args, create=True, background=True)  # a long-running server
    try:
        emb = resolve_embedder(getattr(args, "embedder", "auto"), store.embedder_name, store.dimension)
        trace: str | bool = False if args.no_trace else (args.traces or default_trace_path(store))
        return HybridMemory(store=store, embedder=emb, trace=trace)
    except BaseException:
        store.close()
        raise


def _cmd_mcp(args: argparse.Namespace) -> int:
    from hybrid_memory.mcp.tokens import TOKENS_ENV, TokenTable

    tokens: TokenTable | None = None
    if args.transport == "stdio":
        if not args.user:
            raise ConfigurationError("mcp over stdio needs --user: the user whose memory this server serves")
        if args.tokens:
            raise ConfigurationError("--tokens is for --transport http; over stdio --user decides")
    else:
        if args.user:
            raise ConfigurationError(
                "--user is for stdio; over HTTP each request's bearer token decides the user (--tokens FILE)"
            )
        path = args.tokens or os.environ.get(TOKENS_ENV)
        if not path:
            raise ConfigurationError(
                f"mcp over HTTP needs bearer tokens: --tokens FILE or ${TOKENS_ENV} "
                '(JSON {"<token or sha256:<hex>>": "user id"})'
            )
        tokens = TokenTable.from_file(path)
    metrics_port = args.metrics_port
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise ConfigurationError(f"--metrics-port must be 0..65535, got {metrics_port}")
    if metrics_port and tokens is not None and metrics_port == args.port:
        raise ConfigurationError(f"--metrics-port {metrics_port} is also the MCP server's --port")
    from hybrid_memory.mcp import server as mcp_server  # raises MissingDependencyError without the extra

    mem = open_server_memory(args)
    metrics = None
    try:
        if metrics_port is not None:
            metrics = _serve_metrics(mem, metrics_port)
        if tokens is None:
            mcp_server.serve_stdio(mem, user=args.user, allow_forget_user=args.allow_forget_user)
        else:
            mcp_server.serve_http(
                mem,
                tokens=tokens,
                host=args.host,
                port=args.port,
                allow_forget_user=args.allow_forget_user,
                allowed_hosts=args.allowed_host,
                allowed_origins=args.allowed_origin,
            )
    except KeyboardInterrupt:
        pass
    finally:
        if metrics is not None:
            metrics.shutdown()
            metrics.server_close()
        mem.close()
    return 0


def _serve_metrics(mem: Any, port: int) -> Any:
    """Serve ``mem``'s Prometheus metrics on the loopback ``port``; announce the URL on stderr.

    Stderr, not stdout: over stdio, stdout is the protocol stream.

    Raises:
        ConfigurationError: the port cannot be bound (e.g. it is in use).
        MissingDependencyError: ``prometheus-client`` is not installed.
    """
    from hybrid_memory.observe.metrics import serve_prometheus

    try:
        server = serve_prometheus(mem, port=port, addr="127.0.0.1")
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on 127.0.0.1:{port}: {exc.strerror or exc}") from exc
    bound = int(server.server_address[1])
    print(f"hybrid-memory metrics (Prometheus) on http://127.0.0.1:{bound}/metrics", file=sys.stderr, flush=True)
    return server
