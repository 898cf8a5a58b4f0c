"""Who may name a user: the LangGraph server's authenticated identity wins.

A LangGraph server (``langgraph-api``) runs a graph with the user its ``@auth.authenticate``
handler (or LangSmith / Studio auth) returned in ``config["configurable"]``:
``langgraph_auth_user`` (an object with ``identity``) and ``langgraph_auth_user_id`` (its
identity). The server reserves those keys (a client that sends them gets a 422) and overwrites them
on every run, and ``langgraph`` turns the first into ``runtime.server_info.user``. Without custom
auth the server stores no user (``None`` and ``""``). Everything else a run carries - ``context``,
the rest of ``configurable`` (the server also copies ``context`` into it), namespaces - comes from
the API client.

So: when a run has an authenticated identity, it names the user. A client-supplied user id that
disagrees raises :class:`~hybrid_memory.errors.IdentityMismatchError`; settings may only make this
stricter (refuse any client-supplied id, or require an authenticated identity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from hybrid_memory.errors import IdentityMismatchError

__all__ = [
    "AUTH_USER",
    "AUTH_USER_ID",
    "ClientUserIds",
    "authenticated_identity",
    "check_bound_user",
    "run_config",
    "settle_user",
]

AUTH_USER = "langgraph_auth_user"
AUTH_USER_ID = "langgraph_auth_user_id"
#: What a client-supplied user id may do when the run is authenticated: ``"must_match"`` (it is
#: allowed when equal to the authenticated identity) or ``"refuse"`` (any client-supplied id is an
#: error; only the identity names the user).
ClientUserIds = Literal["must_match", "refuse"]


def run_config() -> Mapping[str, Any]:
    """The config of the graph run this code is part of (``{}`` outside a run)."""
    try:
        from langgraph.config import get_config

        return get_config()
    except RuntimeError:  # outside a runnable context
        return {}


def _identity_of(user: Any) -> str | None:
    if user is None:
        return None
    value = user.get("identity") if isinstance(user, Mapping) else getattr(user, "identity", None)
    return value if isinstance(value, str) and value else None


def authenticated_identity(runtime: Any = None, config: Mapping[str, Any] | None = None) -> str | None:
    """The identity the LangGraph server authenticated for this run, or ``None`` when it has none.

    Read from ``runtime.server_info.user``, ``configurable["langgraph_auth_user"]`` and
    ``configurable["langgraph_auth_user_id"]`` (all set by the server, never by the client).

    Raises:
        IdentityMismatchError: those sources disagree (fail closed).
    """
    configurable = (config or {}).get("configurable")
    configurable = configurable if isinstance(configurable, Mapping) else {}
    server = getattr(runtime, "server_info", None) if runtime is not None else None
    found = {
        "runtime.server_info.user": _identity_of(getattr(server, "user", None)),
        f'configurable["{AUTH_USER}"]': _identity_of(configurable.get(AUTH_USER)),
        f'configurable["{AUTH_USER_ID}"]': (v if isinstance(v := configurable.get(AUTH_USER_ID), str) and v else None),
    }
    values = {v for v in found.values() if v is not None}
    if len(values) > 1:
        raise IdentityMismatchError(
            f"the run carries conflicting authenticated identities: { {k: v for k, v in found.items() if v} }"
        )
    return values.pop() if values else None


def settle_user(
    authenticated: str | None,
    claims: Iterable[tuple[str, Any]],
    *,
    client_user_ids: ClientUserIds = "must_match",
    require_authenticated: bool = False,
    owner: str = "hybrid-memory",
) -> str | None:
    """Apply the trust rule: the user of a run, given its authenticated identity and client claims.

    Args:
        authenticated: The server-authenticated identity (``None``: the run has none).
        claims: ``(where, value)`` for every client-supplied user id found, in lookup order.
        client_user_ids: ``"must_match"`` or ``"refuse"`` (see :data:`ClientUserIds`).
        require_authenticated: Refuse runs without an authenticated identity.
        owner: The adapter, for error messages.

    Returns:
        The authenticated identity when there is one, else the first client claim (``None`` when
        there is none: the caller falls back to its configured default).

    Raises:
        IdentityMismatchError: a claim disagrees with the identity, a claim is refused, or an
            identity is required and missing.
    """
    present = [(where, value) for where, value in claims if value is not None]
    if authenticated is None:
        if require_authenticated:
            raise IdentityMismatchError(
                f"{owner} requires a server-authenticated user (require_authenticated=True) and this run "
                f"has none: run it on a LangGraph server with auth configured"
            )
        return present[0][1] if present else None
    for where, value in present:
        if client_user_ids == "refuse":
            raise IdentityMismatchError(
                f"{owner}: {where} names a user, but this run is authenticated and client_user_ids='refuse' "
                "lets only the authenticated identity name the user; drop the client-supplied id",
                authenticated=authenticated,
                claimed=str(value),
            )
        if value != authenticated:
            raise IdentityMismatchError(
                f"{owner}: {where} names user {value!r}, but the run is authenticated as another user; "
                "a client may not read or write another user's memories",
                authenticated=authenticated,
                claimed=str(value),
            )
    return authenticated


def check_bound_user(user_id: str, owner: str) -> None:
    """An adapter bound to ``user_id`` may run inside a graph run only for that run's identity.

    Raises:
        IdentityMismatchError: the current graph run is authenticated as another user.
    """
    authenticated = authenticated_identity(None, run_config())
    if authenticated is not None and authenticated != user_id:
        raise IdentityMismatchError(
            f"{owner} is bound to user {user_id!r}, but the graph run it is used in is authenticated as "
            "another user; build it for the run's authenticated user",
            authenticated=authenticated,
            claimed=user_id,
        )
