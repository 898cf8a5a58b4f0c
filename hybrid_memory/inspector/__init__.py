"""The web inspector: a small local web app to look inside a memory (standard library only).

Start it from the command line::

    hybrid-memory inspect --serve --store memory.db            # http://127.0.0.1:8765, read-only
    hybrid-memory inspect --serve --store memory.db --allow-edit

or from Python, on a live :class:`~hybrid_memory.memory.HybridMemory` (then the in-process review
queue of the writer is visible too)::

    from hybrid_memory.inspector import make_server
    server = make_server(mem, port=0)          # 0 = any free port
    print(server.url)
    server.serve_in_thread()                   # or server.serve_forever()
    ...
    server.shutdown()

Pages: users with counts per status; one user's memories; hybrid search with every score
component; a memory with its superseded chain (and, with editing allowed, edit/delete forms); the
review queue of suspected conflicts; the traced sessions and the replay of each step.

Safety: it binds ``127.0.0.1`` by default, answers only requests whose ``Host`` header names the
address it listens on (no DNS rebinding), is read-only unless ``allow_edit=True``, protects
edits with a per-server token (in the form's action URL, checked before the body is read) and
an ``Origin`` check (no cross-site requests), escapes every stored text and sends a strict
Content-Security-Policy (no scripts at all). It cannot be flooded: bodies that are chunked,
negative, malformed or over ``max_body`` are refused unread, socket reads time out after
``request_timeout``, and at most ``max_connections`` connections hold a thread (the longest-idle
one makes room for a new one; when all are busy, 503). Searches made in the
inspector do not change access counts when the memory's ``rerank.touch_on_recall`` is off (the
command line turns it off).
"""

from __future__ import annotations

from hybrid_memory.inspector.app import InspectorServer, make_server, serve

__all__ = ["InspectorServer", "make_server", "serve"]
