"""Request handling and server-rendered HTML of the web inspector (see the package docstring)."""

from __future__ import annotations

import contextlib
import functools
import html
import ipaddress
import json
import re
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from hybrid_memory.errors import HybridMemoryError, InvalidInputError, NotFoundError, UserForgottenError
from hybrid_memory.observe.trace import TraceStep, TraceStore
from hybrid_memory.records import MemoryRecord, RecallHit, Status
from hybrid_memory.stores.base import MemoryFilter

__all__ = ["InspectorServer", "make_server", "serve"]

_ALL: tuple[Status, ...] = ("active", "superseded", "archived", "deleted")
_CATEGORIES = ("fact", "preference", "project", "temporary", "summary", "turn")
_MAX_LIST = 500
#: Background errors shown per page (the newest).
_MAX_BG_ERRORS = 50
#: Trace steps of background work, whose parameters say what it did.
_BACKGROUND_KINDS = frozenset({"refine_importance", "extract", "background_error"})

_CSS = """
:root{--fg:#1d2330;--mut:#5b6475;--bg:#f6f7fb;--card:#fff;--line:#dfe3ec;--acc:#2f5bd3;--ok:#1f8a4c;--bad:#b3261e;--warn:#9a6700}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC","Noto Sans SC",
"PingFang SC","Microsoft YaHei",sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:10px 22px;display:flex;gap:18px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header .mode{margin-left:auto;font-size:12px;padding:2px 8px;
border-radius:10px;background:#3b4355}header .mode.edit{background:var(--warn)}
main{padding:18px 22px;max-width:1280px}h1{font-size:20px;margin:4px 0 14px}h2{font-size:16px;margin:22px 0 8px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px;margin:10px 0}
table{border-collapse:collapse;width:100%;background:var(--card)}th,td{border-bottom:1px solid var(--line);
padding:5px 8px;text-align:left;vertical-align:top}th{font-size:12px;color:var(--mut);font-weight:600;background:#fafbfe}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}a{color:var(--acc)}
.muted{color:var(--mut)}.pill{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;background:#eef1f8}
.s-active{background:#e3f4ea;color:var(--ok)}.s-superseded{background:#fdecea;color:var(--bad)}
.s-archived{background:#fff4d6;color:var(--warn)}.s-deleted{background:#eee;color:#555}
.o-injected,.o-returned{color:var(--ok);font-weight:600}.o-dropped{color:var(--bad);font-weight:600}.o-cut{color:var(--mut)}
pre{white-space:pre-wrap;background:#f1f3f9;border-radius:6px;padding:8px;margin:6px 0}
form.inline{display:inline}input,select,textarea,button{font:inherit}input[type=text],textarea{width:100%}
.search input[type=text]{width:28em}button{background:var(--acc);color:#fff;border:0;border-radius:6px;padding:4px 12px;cursor:pointer}
button.danger{background:var(--bad)}.grid{display:grid;grid-template-columns:11em 1fr;gap:4px 12px}
.chain{display:flex;gap:8px;flex-wrap:wrap;align-items:center}.chain .card{margin:0;min-width:14em;max-width:26em}
.err{color:var(--bad)}
"""


# ----------------------------------------------------------------------------- HTML helpers
def _e(x: object) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _q(**params: object) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None and v != ""})


def _hq(**params: object) -> str:
    """A query string escaped for an HTML attribute."""
    return _e(_q(**params))


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _dt(x: datetime | None) -> str:
    return "–" if x is None else x.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")


def _status(s: str) -> str:
    return f'<span class="pill s-{_e(s)}">{_e(s)}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, num: Iterable[int] = (), cls: str = "") -> str:
    nums = set(num)
    head = "".join(f'<th class="num">{_e(h)}</th>' if i in nums else f"<th>{_e(h)}</th>" for i, h in enumerate(headers))
    body = []
    for r in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in nums else f"<td>{c}</td>" for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}" class="muted">nothing here</td></tr>')
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _mem_link(user: str, memory_id: str, text: str | None = None) -> str:
    label = text if text is not None else _e(memory_id[:8])
    return f'<a href="/memory?{_hq(u=user, id=memory_id)}">{label}</a>'


class _PageError(Exception):
    """An HTTP error page."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _RedirectError(Exception):
    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


# ----------------------------------------------------------------------------- the app
class InspectorApp:
    """Pure request -> response logic of the inspector (no sockets; the handler calls it).

    Args:
        mem: The memory to inspect.
        traces: The trace store (default: the memory's own, when tracing is on).
        allow_edit: Whether edit and delete requests are accepted.
    """

    def __init__(self, mem: Any, *, traces: TraceStore | None = None, allow_edit: bool = False) -> None:
        self.mem = mem
        obs = getattr(mem, "_obs", None)
        self.traces = traces if traces is not None else getattr(obs, "tracer", None)
        self.allow_edit = allow_edit
        self.token = secrets.token_urlsafe(24)

    # -- framing ------------------------------------------------------------------------------
    def _layout(self, title: str, body: str) -> str:
        mode = (
            '<span class="mode edit">editing allowed</span>'
            if self.allow_edit
            else '<span class="mode">read-only</span>'
        )
        return (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(title)} · hybrid-memory inspector</title><style>{_CSS}</style></head><body>"
            f'<header><a href="/">hybrid-memory inspector</a><span class="muted">{_e(repr(self.mem.store))}</span>{mode}'
            f"</header><main>{body}</main></body></html>"
        )

    def _action(self, path: str) -> str:
        """A form action carrying the form token in its query, so it is checked before the body is read."""
        return f"{path}?{_hq(csrf=self.token)}"

    # -- GET pages ----------------------------------------------------------------------------
    def page_home(self, q: dict[str, str]) -> str:
        store = self.mem.store
        sessions: dict[str, int] = {}
        if self.traces is not None:
            for s in self.traces.sessions():
                sessions[s["user_id"]] = sessions.get(s["user_id"], 0) + 1
        users = sorted(set(store.users()) | set(sessions))
        rows = []
        totals = dict.fromkeys(_ALL, 0)
        for u in users:
            counts = {s: store.count(u, filter=MemoryFilter(statuses=(s,))) for s in _ALL}
            for s, n in counts.items():
                totals[s] += n
            rows.append(
                [f'<a href="/user?{_hq(u=u)}">{_e(u)}</a>']
                + [str(counts[s]) for s in _ALL]
                + [str(sum(counts.values())), str(sessions.get(u, 0))]
            )
        emb = f"{_e(store.embedder_name)} ({_e(store.dimension)}-d)"
        summary = (
            f'<div class="card">{len(users)} users · {sum(totals.values())} memories ('
            + ", ".join(f"{n} {s}" for s, n in totals.items())
            + f") · embedder {emb} · traces: {'on' if self.traces is not None else 'off'}</div>"
        )
        table = _table(["user", *_ALL, "total", "traced sessions"], rows, num=range(1, 7), cls="users")
        return self._layout("Users", f"<h1>Users</h1>{summary}{self._background_summary()}{table}")

    def _background_summary(self) -> str:
        """Failures of background work (extraction, summaries, refinements) in this process."""
        recent = list(getattr(self.mem, "background_errors", None) or [])
        by_kind: dict[str, int] = {}
        metrics = getattr(self.mem, "metrics", None)
        if callable(metrics):
            try:
                by_kind = dict(metrics(store_sizes=False).background_errors)
            except HybridMemoryError:  # metrics disabled
                by_kind = {}
        if not recent and not by_kind:
            return '<div class="card bg-errors muted">background work: no errors in this process</div>'
        counts = ", ".join(f"{n} {_e(k)}" for k, n in sorted(by_kind.items())) or f"{len(recent)}"
        items = "".join(f"<li>{_e(e)}</li>" for e in recent[-_MAX_BG_ERRORS:])
        return (
            f'<div class="card bg-errors"><span class="err">background errors: {counts}</span>'
            f"<details><summary>latest {min(len(recent), _MAX_BG_ERRORS)}</summary><ul>{items}</ul></details></div>"
        )

    def _search_form(self, user: str, q: dict[str, str]) -> str:
        alpha = q.get("alpha", "")
        k = q.get("k", "10")
        checked = " checked" if q.get("archived") else ""
        return (
            f'<form class="search card" method="get" action="/search"><input type="hidden" name="u" value="{_e(user)}">'
            f'<input type="text" name="q" value="{_e(q.get("q", ""))}" placeholder="search this user\'s memories" required> '
            f'alpha <input type="number" name="alpha" min="0" max="1" step="0.05" value="{_e(alpha)}" '
            f'title="1.0 = pure vector, 0.0 = pure keyword (BM25); empty = configured default" style="width:5em"> '
            f'k <input type="number" name="k" min="1" max="100" value="{_e(k)}" style="width:4em"> '
            f'<label><input type="checkbox" name="archived" value="1"{checked}> include archived</label> '
            "<button>Search</button></form>"
        )

    def page_user(self, q: dict[str, str]) -> str:
        user = _need(q, "u")
        status = q.get("status", "active")
        if status != "all" and status not in _ALL:
            raise _PageError(HTTPStatus.BAD_REQUEST, f"unknown status {status!r}")
        statuses = _ALL if status == "all" else tuple(x for x in _ALL if x == status)
        store = self.mem.store
        recs = store.list(user, filter=MemoryFilter(statuses=statuses), limit=_MAX_LIST)
        counts = {s: store.count(user, filter=MemoryFilter(statuses=(s,))) for s in _ALL}
        tabs = " · ".join(
            (f"<b>{_e(s)}</b>" if s == status else f'<a href="/user?{_hq(u=user, status=s)}">{_e(s)}</a>')
            + (f" ({counts[s]})" if s in counts else "")
            for s in (*_ALL, "all")
        )
        rows = [
            [
                _mem_link(user, r.id),
                _status(r.status),
                _e(r.category),
                f"{r.importance:.2f}",
                str(r.access_count),
                _dt(r.created_at),
                _e(r.content) + (' <span class="muted">↳ superseded</span>' if r.superseded_by else ""),
            ]
            for r in reversed(recs)
        ]
        body = [
            f"<h1>User {_e(user)}</h1>",
            self._search_form(user, {}),
            f'<div class="card">{tabs}</div>',
            _table(
                ["id", "status", "category", "importance", "accessed", "created", "content"],
                rows,
                num=(3, 4),
                cls="memories",
            ),
        ]
        if len(recs) >= _MAX_LIST:
            body.append(f'<p class="muted">showing the first {_MAX_LIST}; use the command line for more</p>')
        body.append(self._chains(user))
        body.append(self._review(user))
        body.append(self._user_background_errors(user))
        body.append(self._sessions(user))
        return self._layout(f"User {user}", "".join(body))

    def _chains(self, user: str) -> str:
        recs = self.mem.store.list(user, filter=MemoryFilter(statuses=_ALL))
        by_id = {r.id: r for r in recs}
        heads = [
            r
            for r in recs
            if r.superseded_by is None and (r.supersedes in by_id or any(x.superseded_by == r.id for x in recs))
        ]
        if not heads:
            return '<h2>Superseded chains</h2><p class="muted">no memory has been superseded</p>'
        parts = ["<h2>Superseded chains</h2>"]
        for head in heads:
            chain = _chain(head, by_id)
            cards = " → ".join(
                f'<div class="card">{_status(r.status)} v{r.version} · {_dt(r.updated_at)}<br>{_mem_link(user, r.id, _e(r.content))}</div>'
                for r in chain
            )
            parts.append(f'<div class="chain">{cards}</div>')
        return "".join(parts)

    def _review(self, user: str) -> str:
        fn = getattr(self.mem, "review_queue", None)
        if not callable(fn):
            return ""
        try:
            items = list(fn(user))
        except HybridMemoryError:
            items = []
        rows = [
            [
                _e(getattr(r, "action", "")),
                _mem_link(user, r.new_id, _e(r.new_content)),
                _mem_link(user, r.old_id, _e(r.old_content)),
                _e(getattr(r, "reason", "")),
                _e(getattr(r, "judge", "")),
                _dt(getattr(r, "detected_at", None)),
            ]
            for r in items
        ]
        note = '<p class="muted">conflicts the writer detected or suspected in this process</p>'
        return (
            "<h2>Review queue</h2>"
            + note
            + _table(["action", "new", "old", "reason", "judge", "when"], rows, cls="review")
        )

    def _user_background_errors(self, user: str) -> str:
        """The user's ``background_error`` trace steps, newest first (needs tracing)."""
        if self.traces is None:
            return ""
        steps = self.traces.steps(user_id=user, kind="background_error")[-_MAX_BG_ERRORS:]
        if not steps:
            return '<h2>Background errors</h2><p class="muted">no failed background work for this user</p>'
        rows = [
            [
                f'<a href="/replay?{_hq(u=user, s=s.session_id if s.session_id is not None else "-")}#step-{s.seq}">#{s.seq}</a>',
                _dt(s.at),
                _e(str(s.params.get("job", ""))),
                _e(s.session_id or ""),
                f'<span class="err">{_e(s.error or "")}</span>',
            ]
            for s in reversed(steps)
        ]
        return "<h2>Background errors</h2>" + _table(["step", "when", "job", "session", "error"], rows, cls="bg-errors")

    def _sessions(self, user: str) -> str:
        if self.traces is None:
            return '<h2>Traced sessions</h2><p class="muted">tracing is off (HybridMemory(..., trace=True))</p>'
        rows = [
            [
                f'<a href="/replay?{_hq(u=user, s=s["session_id"] if s["session_id"] is not None else "-")}">'
                f"{_e(s['session_id'] if s['session_id'] is not None else '(no session)')}</a>",
                str(s["steps"]),
                _e(str(s["first_at"])[:16].replace("T", " ")),
                _e(str(s["last_at"])[:16].replace("T", " ")),
            ]
            for s in self.traces.sessions(user)
        ]
        return "<h2>Traced sessions</h2>" + _table(
            ["session", "steps", "first", "last"], rows, num=(1,), cls="sessions"
        )

    def page_search(self, q: dict[str, str]) -> str:
        user = _need(q, "u")
        query = _need(q, "q")
        hits = self._recall(q)
        cfg = self.mem.config
        w = cfg.rerank
        alpha = q.get("alpha") or str(cfg.retrieval.alpha)
        rows = [
            [
                str(i),
                f"<b>{h.score:.3f}</b>",
                f"{h.relevance:.3f}",
                _f(h.keyword_score, 2),
                _f(h.vector_similarity),
                f"{h.importance:.2f}",
                f"{h.recency:.3f}",
                f"{h.heat:.2f}",
                _status(h.record.status),
                _mem_link(user, h.id, _e(h.content)),
            ]
            for i, h in enumerate(hits, 1)
        ]
        formula = (
            f'<div class="card muted">score = {w.w_relevance}·relevance + {w.w_importance}·importance + '
            f"{w.w_recency}·recency + {w.w_heat}·heat · alpha {_e(alpha)} (1.0 = pure vector, 0.0 = pure BM25)</div>"
        )
        table = _table(
            ["#", "score", "relevance", "bm25", "cosine", "importance", "recency", "heat", "status", "memory"],
            rows,
            num=range(0, 8),
            cls="results",
        )
        title = f'<h1>Search <a href="/user?{_hq(u=user)}">{_e(user)}</a>: “{_e(query)}”</h1>'
        return self._layout(f"Search {query}", title + self._search_form(user, q) + formula + table)

    def _recall(self, q: dict[str, str]) -> list[RecallHit]:
        try:
            alpha = float(q["alpha"]) if q.get("alpha") else None
            k = int(q.get("k") or 10)
        except ValueError as exc:
            raise _PageError(HTTPStatus.BAD_REQUEST, f"bad number: {exc}") from exc
        hits: list[RecallHit] = self.mem.recall(
            q["q"], user_id=q["u"], k=k, alpha=alpha, include_archived=bool(q.get("archived"))
        )
        return hits

    def page_memory(self, q: dict[str, str]) -> str:
        user = _need(q, "u")
        mid = _need(q, "id")
        found = self.mem.store.get(user, [mid])
        if not found:
            raise _PageError(HTTPStatus.NOT_FOUND, f"no memory {mid!r} for user {user!r}")
        r = found[0]
        fields = [
            ("id", _e(r.id)),
            ("user", f'<a href="/user?{_hq(u=user)}">{_e(user)}</a>'),
            ("status", _status(r.status)),
            ("category", _e(r.category)),
            ("importance", f"{r.importance:.2f}"),
            ("source", _e(r.source)),
            ("session", _e(r.session_id)),
            ("created", _dt(r.created_at)),
            ("updated", _dt(r.updated_at)),
            ("last accessed", _dt(r.last_accessed_at)),
            ("access count", str(r.access_count)),
            ("version", str(r.version)),
            ("supersedes", _mem_link(user, r.supersedes) if r.supersedes else "–"),
            ("superseded by", _mem_link(user, r.superseded_by) if r.superseded_by else "–"),
            ("tags", _e(", ".join(r.tags)) or "–"),
            ("provenance", _e(", ".join(r.provenance)) or "–"),
            ("metadata", f"<pre>{_e(json.dumps(r.metadata, ensure_ascii=False, indent=1))}</pre>"),
        ]
        grid = "".join(f'<div class="muted">{k}</div><div>{v}</div>' for k, v in fields)
        body = [
            f"<h1>Memory {_e(r.id[:8])}</h1>",
            f'<div class="card"><pre class="content">{_e(r.content)}</pre><div class="grid">{grid}</div></div>',
        ]
        recs = {x.id: x for x in self.mem.store.list(user, filter=MemoryFilter(statuses=_ALL))}
        recs[r.id] = r
        head = r
        while head.superseded_by and head.superseded_by in recs and head.superseded_by != r.id:
            head = recs[head.superseded_by]
            if head.id == r.id:
                break
        chain = _chain(head, recs)
        if len(chain) > 1:
            cards = " → ".join(
                f'<div class="card">{_status(x.status)} v{x.version}<br>'
                + (f"<b>{_e(x.content)}</b>" if x.id == r.id else _mem_link(user, x.id, _e(x.content)))
                + "</div>"
                for x in chain
            )
            body.append(f'<h2>Superseded chain</h2><div class="chain">{cards}</div>')
        if self.allow_edit:
            cats = "".join(f"<option{' selected' if c == r.category else ''}>{c}</option>" for c in _CATEGORIES)
            sts = "".join(f"<option{' selected' if s == r.status else ''}>{s}</option>" for s in _ALL)
            body.append(
                f'<h2>Edit</h2><form class="card edit" method="post" action="{self._action("/memory/edit")}">'
                f'<input type="hidden" name="u" value="{_e(user)}"><input type="hidden" name="id" value="{_e(r.id)}">'
                f'<p><label>content<textarea name="content" rows="3">{_e(r.content)}</textarea></label></p>'
                f'<p><label>importance <input type="number" name="importance" min="0" max="1" step="0.01" value="{r.importance:.2f}"></label> '
                f'<label>category <select name="category">{cats}</select></label> '
                f'<label>status <select name="status">{sts}</select></label> '
                f'<label>tags <input type="text" name="tags" value="{_e(", ".join(r.tags))}" style="width:16em"></label></p>'
                '<button type="submit" name="action" value="save">Save</button></form>'
                f'<form class="card delete" method="post" action="{self._action("/memory/delete")}">'
                f'<input type="hidden" name="u" value="{_e(user)}"><input type="hidden" name="id" value="{_e(r.id)}">'
                '<button class="danger" type="submit">Delete this memory</button> '
                '<span class="muted">removes it from the store and blanks its text in the traces</span></form>'
            )
        return self._layout(f"Memory {r.id[:8]}", "".join(body))

    def _steps(self, q: dict[str, str]) -> tuple[str | None, str | None, list[TraceStep]]:
        if self.traces is None:
            raise _PageError(HTTPStatus.NOT_FOUND, "tracing is off for this memory")
        user = q.get("u") or None
        session = _need(q, "s")
        sid = None if session == "-" else session
        if sid is None and user is None:
            raise _PageError(HTTPStatus.BAD_REQUEST, "s=- needs u=USER")
        return user, sid, self.traces.steps(user_id=user, session_id=sid)

    def page_replay(self, q: dict[str, str]) -> str:
        user, sid, steps = self._steps(q)
        title = f"Replay of session {sid if sid is not None else '(none)'}"
        export = f'<a href="/api/replay?{_hq(u=user, s=q["s"])}">JSON export</a>'
        back = f' · <a href="/user?{_hq(u=user)}">user {_e(user)}</a>' if user else ""
        parts = [f"<h1>{_e(title)}</h1><p>{len(steps)} steps · {export}{back}</p>"]
        for s in steps:
            parts.append(_render_step(s, functools.partial(_memory_url, s.user_id)))
        return self._layout(title, "".join(parts))

    def api_replay(self, q: dict[str, str]) -> list[dict[str, Any]]:
        return [s.to_json_dict() for s in self._steps(q)[2]]

    def api_search(self, q: dict[str, str]) -> list[dict[str, Any]]:
        _need(q, "u")
        _need(q, "q")
        return [
            {"id": h.id, "content": h.content, "status": h.record.status, **h.components()} for h in self._recall(q)
        ]

    # -- POST actions -------------------------------------------------------------------------
    def post_edit(self, form: dict[str, str]) -> None:
        """Save the edit form through :meth:`HybridMemory.edit <hybrid_memory.HybridMemory.edit>`.

        The facade reads and writes the memory under the user's forget epoch, so a ``forget_user``
        of another process (or the CLI) in between wins: the answer is 404 and nothing of the
        user comes back.
        """
        user, mid = _need(form, "u"), _need(form, "id")
        try:
            importance = float(form["importance"]) if "importance" in form else None
        except ValueError as exc:
            raise _PageError(HTTPStatus.BAD_REQUEST, "importance must be a number in [0, 1]") from exc
        content = form["content"].replace("\r\n", "\n") if "content" in form else None
        own = getattr(getattr(self.mem, "_obs", None), "tracer", None)
        other = self.traces if self.traces is not None and self.traces is not own else None
        # A trace store of its own (the memory's own is scrubbed by the edit) needs the old text.
        before = [r.content for r in self.mem.store.get(user, [mid])] if other is not None else []
        try:
            new = self.mem.edit(
                mid,
                user_id=user,
                content=content,
                importance=importance,
                category=form.get("category"),
                status=form.get("status"),
                tags=[t.strip() for t in form.get("tags", "").split(",") if t.strip()],
            )
        except NotFoundError as exc:
            raise _PageError(HTTPStatus.NOT_FOUND, f"no memory {mid!r} for user {user!r}") from exc
        except UserForgottenError as exc:  # the forget won: like a memory that is gone
            raise _PageError(
                HTTPStatus.NOT_FOUND, f"user {user!r} was forgotten meanwhile; nothing was written"
            ) from exc
        except InvalidInputError as exc:
            raise _PageError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
        if other is not None and new.content not in before:
            other.scrub_memory(user, mid, before)
        raise _RedirectError(f"/memory?{_q(u=user, id=mid)}")

    def post_delete(self, form: dict[str, str]) -> None:
        user, mid = _need(form, "u"), _need(form, "id")
        if not self.mem.forget(mid, user_id=user):
            raise _PageError(HTTPStatus.NOT_FOUND, f"no memory {mid!r} for user {user!r}")
        raise _RedirectError(f"/user?{_q(u=user, status='all')}")

    # -- dispatch -----------------------------------------------------------------------------
    def get(self, path: str, q: dict[str, str]) -> tuple[HTTPStatus, str, bytes]:
        """Handle a GET; returns (status, content type, body)."""
        routes: dict[str, Callable[[dict[str, str]], str]] = {
            "/": self.page_home,
            "/user": self.page_user,
            "/search": self.page_search,
            "/memory": self.page_memory,
            "/replay": self.page_replay,
        }
        apis: dict[str, Callable[[dict[str, str]], Any]] = {
            "/api/replay": self.api_replay,
            "/api/search": self.api_search,
            "/api/metrics": lambda _q: self.mem.metrics().to_dict(),
        }
        if path == "/healthz":
            return HTTPStatus.OK, "text/plain; charset=utf-8", b"ok\n"
        if path == "/metrics":
            from hybrid_memory.observe.metrics import prometheus_registry

            try:
                from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
            except ImportError:
                raise _PageError(
                    HTTPStatus.NOT_FOUND, "install 'hybrid-memory[prometheus]' for /metrics (JSON: /api/metrics)"
                ) from None
            return HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(prometheus_registry(self.mem))
        if path in apis:
            data = json.dumps(apis[path](q), ensure_ascii=False, indent=1, default=str)
            return HTTPStatus.OK, "application/json; charset=utf-8", data.encode("utf-8")
        if path not in routes:
            raise _PageError(HTTPStatus.NOT_FOUND, f"no page {path!r}")
        return HTTPStatus.OK, "text/html; charset=utf-8", routes[path](q).encode("utf-8")

    def check_post(self, token: str | None) -> None:
        """Refuse a POST before its body is read: read-only mode, or a missing or wrong form token.

        The token travels in the form's action URL (``?csrf=...``) or an ``X-CSRF-Token`` header,
        never only in the body, so a request without it costs the server no body read.
        """
        if not self.allow_edit:
            raise _PageError(HTTPStatus.FORBIDDEN, "the inspector is read-only (start it with --allow-edit)")
        if not secrets.compare_digest((token or "").encode(), self.token.encode()):
            raise _PageError(HTTPStatus.FORBIDDEN, "missing or wrong form token (reload the page)")

    def post(self, path: str, form: dict[str, str], *, token: str | None = None) -> None:
        """Handle a POST (always ends in a redirect or an error page); ``token`` as in :meth:`check_post`."""
        self.check_post(token)
        if path == "/memory/edit":
            self.post_edit(form)
        elif path == "/memory/delete":
            self.post_delete(form)
        raise _PageError(HTTPStatus.NOT_FOUND, f"no action {path!r}")

    def error_page(self, status: HTTPStatus, message: str) -> bytes:
        body = f'<h1>{status.value} {_e(status.phrase)}</h1><p class="err">{_e(message)}</p><p><a href="/">home</a></p>'
        return self._layout(status.phrase, body).encode("utf-8")


def _memory_url(user: str, memory_id: str) -> str:
    return f"/memory?{_q(u=user, id=memory_id)}"


def _need(q: dict[str, str], key: str) -> str:
    v = q.get(key)
    if not v:
        raise _PageError(HTTPStatus.BAD_REQUEST, f"missing parameter {key!r}")
    return v


def _chain(head: MemoryRecord, by_id: dict[str, MemoryRecord]) -> list[MemoryRecord]:
    """The versions of a memory, oldest first, ending at ``head``."""
    chain = [head]
    seen = {head.id}
    cur = head
    while True:
        prev_id = cur.supersedes
        prev = by_id.get(prev_id) if prev_id else None
        if prev is None:
            prev = next((x for x in by_id.values() if x.superseded_by == cur.id and x.id not in seen), None)
        if prev is None or prev.id in seen:
            break
        chain.append(prev)
        seen.add(prev.id)
        cur = prev
    return list(reversed(chain))


def _render_step(s: TraceStep, link: Callable[[str], str]) -> str:
    head = (
        f'<div class="card step" id="step-{s.seq}"><b>#{s.seq} {_e(s.kind)}</b> '
        f'<span class="muted">{_dt(s.at)} · {s.duration_ms:g} ms · user {_e(s.user_id)}</span>'
    )
    parts = [head]
    if s.turn is not None:
        kf = " · key frame" if s.turn.key_frame else ""
        parts.append(
            f"<p>turn <span class='pill'>{_e(s.turn.role)}{kf} · importance {s.turn.importance:.2f}</span> {_e(s.turn.content)}</p>"
        )
    if s.query is not None and s.turn is None:
        parts.append(f"<p>query: <b>{_e(s.query)}</b></p>")
    if s.scorer_fallback:
        parts.append(f'<p class="err">scorer fallback ({_e(s.scorer)}): {_e(s.scorer_fallback)}</p>')
    if s.kind in _BACKGROUND_KINDS and s.params:
        items = "".join(f"<li>{_e(k)}: {_e(json.dumps(v, ensure_ascii=False))}</li>" for k, v in s.params.items())
        parts.append(f"<ul class='params'>{items}</ul>")
    if s.short_term:
        items = "".join(
            f"<li>{'★ ' if t.key_frame else ''}<span class='pill'>{_e(t.role)}</span> {_e(t.content)}</li>"
            for t in s.short_term
        )
        parts.append(
            f"<details><summary>short-term window ({len(s.short_term)} turns)</summary><ul>{items}</ul></details>"
        )
    if s.kind in ("recall", "build_context"):
        rows = [
            [
                f'<span class="o-{c.outcome}">{_e(c.outcome)}</span>',
                f"{c.score:.3f}",
                f"{c.relevance:.3f}",
                _f(c.keyword_score, 2),
                _f(c.vector_similarity),
                f"{c.importance:.2f}",
                f"{c.recency:.3f}",
                f"{c.heat:.2f}",
                f'<a href="{_e(link(c.id))}">{_e(c.content)}</a>',
                _e(c.reason or ""),
            ]
            for c in s.candidates
        ]
        parts.append(
            _table(
                ["outcome", "score", "relevance", "bm25", "cosine", "importance", "recency", "heat", "memory", "why"],
                rows,
                num=range(1, 8),
                cls="candidates",
            )
        )
    if s.kind == "build_context":
        if s.fused_text:
            parts.append(f"<p>injected ({s.token_count} tokens):</p><pre class='fused'>{_e(s.fused_text)}</pre>")
        else:
            parts.append(f"<p class='muted'>nothing injected: {_e(s.skipped_reason)}</p>")
    if s.writes:
        rows = [
            [
                _e(w.action),
                f'<a href="{_e(link(w.memory_id))}">{_e(w.content)}</a>' if w.memory_id else _e(w.content),
                _e(w.reason or ""),
            ]
            for w in s.writes
        ]
        parts.append(_table(["write", "memory", "reason"], rows, cls="writes"))
    if s.error:
        parts.append(f'<p class="err">error: {_e(s.error)}</p>')
    parts.append("</div>")
    return "".join(parts)


# ----------------------------------------------------------------------------- HTTP plumbing
def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


class _Handler(BaseHTTPRequestHandler):
    server: InspectorServer
    protocol_version = "HTTP/1.1"
    server_version = "hybrid-memory-inspector"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout)  # every socket read waits at most this long

    def handle_one_request(self) -> None:
        self.server._mark(self.connection, busy=False)  # waiting for a request: may be dropped for a new one
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            self.server._mark(self.connection, busy=True)
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")

    def _send(self, status: HTTPStatus, ctype: str, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'",
        )
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").lower()
        return host in self.server.allowed_hosts

    def _run(self, fn: Callable[[], tuple[HTTPStatus, str, bytes] | None]) -> None:
        app = self.server.app
        try:
            if not self._host_ok():
                raise _PageError(HTTPStatus.MISDIRECTED_REQUEST, "unexpected Host header (DNS rebinding protection)")
            out = fn()
            assert out is not None
            self._send(*out)
        except _RedirectError as r:
            self._send(HTTPStatus.SEE_OTHER, "text/plain; charset=utf-8", b"", {"Location": r.location})
        except _PageError as p:
            self._send(p.status, "text/html; charset=utf-8", app.error_page(p.status, p.message))
        except NotFoundError as exc:
            self._send(HTTPStatus.NOT_FOUND, "text/html; charset=utf-8", app.error_page(HTTPStatus.NOT_FOUND, str(exc)))
        except (InvalidInputError, HybridMemoryError) as exc:
            status = HTTPStatus.BAD_REQUEST if isinstance(exc, InvalidInputError) else HTTPStatus.INTERNAL_SERVER_ERROR
            self._send(status, "text/html; charset=utf-8", app.error_page(status, str(exc)))

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if self._has_body():  # a GET body is never read; the connection cannot be reused
            self.close_connection = True
        self._run(lambda: self.server.app.get(parts.path, q))

    do_HEAD = do_GET  # noqa: N815

    def _has_body(self) -> bool:
        return self.headers.get("Transfer-Encoding") is not None or self.headers.get("Content-Length") not in (
            None,
            "0",
        )

    def _body_length(self) -> int:
        """The announced body length, checked before a byte of the body is read."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise _PageError(
                HTTPStatus.LENGTH_REQUIRED, "send the form with a Content-Length (chunked bodies are refused)"
            )
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return 0  # RFC 9112 6.3: no length and no transfer coding = an empty body
        if len(values) > 1 or not _DIGITS.fullmatch(values[0].strip()):
            raise _PageError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {', '.join(values)!r}")
        length = int(values[0].strip())
        if length > self.server.max_body:
            raise _PageError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"form too large ({length} bytes; at most {self.server.max_body})"
            )
        return length

    def _read_body(self, length: int) -> bytes:
        """Exactly ``length`` bytes, all within one ``request_timeout``, else 408."""
        deadline = time.monotonic() + self.server.request_timeout
        buf = bytearray()
        try:
            while len(buf) < length:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(length - len(buf))
                if not chunk:
                    raise _PageError(HTTPStatus.BAD_REQUEST, "the body ended before its Content-Length")
                buf += chunk
        except TimeoutError:
            raise _PageError(HTTPStatus.REQUEST_TIMEOUT, "the form body did not arrive in time") from None
        finally:
            with contextlib.suppress(OSError):
                self.connection.settimeout(self.server.request_timeout)
        return bytes(buf)

    def do_POST(self) -> None:
        def handle() -> tuple[HTTPStatus, str, bytes] | None:
            # Everything that can refuse the request runs before the body is read; a refused
            # request's body is never read, so its connection is closed after the answer.
            self.close_connection = True
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            app = self.server.app
            if not app.allow_edit:
                app.check_post(None)
            origin = self.headers.get("Origin")
            if origin is not None and origin != "null":
                o = urlsplit(origin)
                if (o.netloc or "").lower() not in self.server.allowed_hosts:
                    raise _PageError(HTTPStatus.FORBIDDEN, "cross-site request refused")
            length = self._body_length()
            token = self.headers.get("X-CSRF-Token") or query.get("csrf")
            app.check_post(token)
            raw = self._read_body(length).decode("utf-8", errors="replace")
            self.close_connection = False  # the whole request was read: keep-alive is safe again
            form = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
            app.post(parts.path, form, token=token)
            return None

        self._run(handle)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self.close_connection:
                _linger(self.connection)


_DIGITS = re.compile(r"[0-9]{1,18}")


def _linger(sock: socket.socket) -> None:
    """Half-close, then discard a little of what the client still sends (at most 256 KiB, 0.25 s).

    Closing a socket with unread data makes the kernel send a reset, which can destroy the error
    response before the client reads it. The budget keeps a refused body from being read.
    """
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 0.25
        budget = 256 * 1024
        while budget > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            got = sock.recv(min(budget, 65536))
            if not got:
                break
            budget -= len(got)


class _Slot:
    __slots__ = ("busy", "since", "thread")

    def __init__(self) -> None:
        self.busy = False
        self.since = time.monotonic()
        self.thread: threading.Thread | None = None


class InspectorServer(ThreadingHTTPServer):
    """The inspector's HTTP server (one daemon thread per connection, at most ``max_connections``).

    Flood limits: every socket read times out after ``request_timeout`` seconds and a form body
    must arrive within that time; at most ``max_connections`` connections hold a thread. A new
    connection beyond that replaces the connection that has waited longest for its next request
    (an idle keep-alive or a client that sends nothing); when every connection is busy with a
    request, it is answered ``503 Service Unavailable`` with ``Retry-After``. POST bodies larger
    than ``max_body`` bytes, chunked or with a malformed length are refused without being read.

    Attributes:
        app: The :class:`InspectorApp` answering requests.
        url: ``http://host:port/`` to open in a browser.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen backlog: a burst of connections is accepted (and capped), not SYN-dropped

    def __init__(
        self,
        address: tuple[str, int],
        app: InspectorApp,
        *,
        verbose: bool = False,
        max_connections: int = 32,
        request_timeout: float = 10.0,
        max_body: int = 1_000_000,
    ) -> None:
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise InvalidInputError(f"max_connections must be a positive int, got {max_connections!r}")
        if isinstance(request_timeout, bool) or not isinstance(request_timeout, (int, float)) or request_timeout <= 0:
            raise InvalidInputError(f"request_timeout must be a positive number of seconds, got {request_timeout!r}")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise InvalidInputError(f"max_body must be a non-negative int, got {max_body!r}")
        self.max_connections = max_connections
        self.request_timeout = float(request_timeout)
        self.max_body = max_body
        self._slots: dict[socket.socket, _Slot] = {}
        self._slots_lock = threading.Lock()
        super().__init__(address, _Handler)
        self.app = app
        self.verbose = verbose
        addr = self.server_address
        host = addr[0].decode() if isinstance(addr[0], bytes) else str(addr[0])
        port = int(addr[1])
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/"
        names = {host, shown}
        if _loopback(host):
            names |= {"127.0.0.1", "localhost", "[::1]"}
        self.allowed_hosts = {f"{n}:{port}".lower() for n in names}
        self._thread: threading.Thread | None = None

    # -- connection cap -----------------------------------------------------------------------
    def _mark(self, conn: socket.socket, *, busy: bool) -> None:
        with self._slots_lock:
            slot = self._slots.get(conn)
            if slot is not None:
                slot.busy = busy
                slot.since = time.monotonic()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Admit the connection into a slot (dropping the longest-waiting idle one if full) or answer 503.

        A dropped connection's thread is waited for (it wakes from ``recv()`` at once) before the
        new one starts, so the number of handler threads never exceeds ``max_connections``.
        """
        leaving: threading.Thread | None = None
        with self._slots_lock:
            if len(self._slots) >= self.max_connections:
                idle = [(slot.since, id(c), c) for c, slot in self._slots.items() if not slot.busy]
                if not idle:
                    self._refuse(request)
                    return
                victim = min(idle)[2]
                leaving = self._slots.pop(victim).thread
                with contextlib.suppress(OSError):  # its thread wakes up from recv() and ends
                    victim.shutdown(socket.SHUT_RDWR)
            slot = self._slots[request] = _Slot()
        if leaving is not None:
            leaving.join(timeout=min(self.request_timeout, 5.0))
        try:
            t = threading.Thread(
                target=self.process_request_thread,
                args=(request, client_address),
                name="hybrid-memory-inspector-conn",
                daemon=True,
            )
            slot.thread = t
            t.start()
        except BaseException:
            with self._slots_lock:
                self._slots.pop(request, None)
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:  # noqa: D102
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._slots_lock:
                self._slots.pop(request, None)

    def _refuse(self, request: socket.socket) -> None:
        body = b"503 Service Unavailable: too many connections to the inspector; retry in a moment\n"
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            request.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                request.recv(65536)  # what already arrived, so closing does not reset the answer away
            request.settimeout(0.5)
            request.sendall(head + body)
            request.shutdown(socket.SHUT_WR)
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer is not an error worth a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handle_error(request, client_address)

    def serve_in_thread(self) -> threading.Thread:
        """Serve from a daemon thread; stop with :meth:`shutdown`."""
        t = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="hybrid-memory-inspector", daemon=True
        )
        t.start()
        self._thread = t
        return t

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        super().shutdown()
        self.server_close()

    def server_close(self) -> None:
        """Close the listening socket and every open connection, then wait for their threads."""
        with self._slots_lock:
            open_conns = list(self._slots.items())
        for c, _ in open_conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        super().server_close()
        for _, slot in open_conns:
            if slot.thread is not None and slot.thread is not threading.current_thread():
                slot.thread.join(timeout=min(self.request_timeout, 5.0))


class _InspectorServerV6(InspectorServer):
    address_family = socket.AF_INET6


def make_server(
    mem: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_edit: bool = False,
    traces: TraceStore | None = None,
    verbose: bool = False,
    max_connections: int = 32,
    request_timeout: float = 10.0,
    max_body: int = 1_000_000,
) -> InspectorServer:
    """Create (not start) the inspector server for ``mem``.

    Args:
        mem: The :class:`~hybrid_memory.memory.HybridMemory` to inspect.
        host: Address to bind; ``127.0.0.1`` (this machine only) by default.
        port: Port; ``0`` picks a free one (see ``server.url``).
        allow_edit: Accept edit and delete requests.
        traces: A trace store to show (default: the memory's own).
        verbose: Log requests to stderr.
        max_connections: Connections served at once (one thread each); see :class:`InspectorServer`.
        request_timeout: Seconds each socket read, and each form body as a whole, may take.
        max_body: Largest form body in bytes; larger ones are refused unread.
    """
    app = InspectorApp(mem, traces=traces, allow_edit=allow_edit)
    cls = _InspectorServerV6 if ":" in host else InspectorServer
    return cls(
        (host, port),
        app,
        verbose=verbose,
        max_connections=max_connections,
        request_timeout=request_timeout,
        max_body=max_body,
    )


def _stop_serving(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(mem: Any, *, host: str = "127.0.0.1", port: int = 8765, allow_edit: bool = False) -> None:
    """Serve the inspector until Ctrl-C or SIGTERM (what ``hybrid-memory inspect --serve`` runs).

    From the main thread both signals stop it the same way, whatever their handling was before
    (a shell starts background jobs with SIGINT ignored; a service manager stops with SIGTERM):
    the server closes its connections, the caller closes the memory, and the handlers are restored.
    """
    server = make_server(mem, host=host, port=port, allow_edit=allow_edit, verbose=True)
    if not _loopback(host):
        print(
            f"warning: listening on {host}: anyone who can reach this address can read these memories", file=sys.stderr
        )
    mode = "editing allowed" if allow_edit else "read-only"
    previous: dict[signal.Signals, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for stop in (signal.SIGINT, signal.SIGTERM):
                previous[stop] = signal.signal(stop, _stop_serving)
        print(f"hybrid-memory inspector ({mode}) on {server.url}  - Ctrl-C to stop", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing this process can restore
                signal.signal(sig, handler)
