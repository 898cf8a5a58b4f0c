"""weaviate-client exceptions -> the library's error tree, decided by exception type.

:func:`translate` is the one boundary: the store raises its result ``from`` the client's
exception. Whether a retry can help (:func:`is_transient`) is decided by type:

* the builtins :class:`ConnectionError` / :class:`TimeoutError`;
* weaviate-client's connection, timeout, start-up, retry and gRPC-unavailable errors;
* httpx's transport errors (timeouts, network errors, a peer that hung up);
* a :class:`grpc.RpcError` with status ``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` or
  ``RESOURCE_EXHAUSTED`` -- also when it is the cause or context of a client error, because
  weaviate-client raises ``WeaviateQueryError`` / ``WeaviateBatchError`` /
  ``WeaviateDeleteManyError`` inside its ``except RpcError`` blocks without a status of its own;
* an HTTP status (``UnexpectedStatusCodeError.status_code``) of 5xx or 429.

The message is read in three places only, each where the client gives no distinct type:
a missing tenant and a missing collection (both arrive as a plain query error or a 422/404 whose
only distinguishing part is the server's text), and the per-object errors of a gRPC batch (plain
strings in ``BatchObjectReturn.errors``, never exceptions, also when they arrive bundled in a
``WeaviateInsertManyAllFailedError``).

``weaviate`` is imported lazily (inside :func:`_client_types`), so this module imports without
the ``weaviate`` extra.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Any

from hybrid_memory.errors import SchemaError, StoreError, StoreUnavailableError

#: Words of a server-side message that mean "try again" (used only where no type exists).
_TRANSIENT_WORDS = (
    "not reachable",
    "unavailable",
    "connection",
    "connect",
    "timeout",
    "timed out",
    "deadline",
    "temporarily",
    "try again",
    "too many requests",
    "resource_exhausted",
    "eof",
    "reset by peer",
    "broken pipe",
    "shutting down",
    # a cluster that lost a node or its Raft quorum (weaviate.md §8)
    "leader not found",
    "can not resolve nodes",
    "enough replicas",
    "503",
    "502",
    "504",
)


class UnreachableError(ConnectionError):
    """The liveness probe failed (never leaves the store: translated to StoreUnavailableError)."""


@functools.cache
def _client_types() -> tuple[
    tuple[type[BaseException], ...], tuple[type[BaseException], ...], tuple[type[BaseException], ...], Any
]:
    """Exception types of the installed clients: (transient, closed client, batch of messages), gRPC module."""
    transient: list[type[BaseException]] = [ConnectionError, TimeoutError]
    closed: tuple[type[BaseException], ...] = ()
    messages: tuple[type[BaseException], ...] = ()
    grpc: Any = None
    try:
        from weaviate import exceptions as wex

        transient += [
            wex.WeaviateConnectionError,
            wex.WeaviateTimeoutError,
            wex.WeaviateGRPCUnavailableError,
            wex.WeaviateStartUpError,
            wex.WeaviateRetryError,
            wex.WeaviateBatchStreamError,
            wex.WeaviateBatchFailedToReestablishStreamError,
        ]
        closed = (wex.WeaviateClosedClientError,)
        messages = (wex.WeaviateInsertManyAllFailedError,)
    except ImportError:  # no weaviate extra: only the builtins can occur
        pass
    try:
        import httpx

        transient += [httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError]
    except ImportError:
        pass
    with contextlib.suppress(ImportError):
        grpc = importlib.import_module("grpc")  # untyped (no stubs installed): used as Any
    return tuple(transient), closed, messages, grpc


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes/contexts (the client wraps gRPC errors implicitly)."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _transient_rpc(exc: BaseException, grpc: Any) -> bool:
    if grpc is None or not isinstance(exc, grpc.RpcError):
        return False
    code = getattr(exc, "code", None)
    if not callable(code):
        return False
    try:
        status = code()
    except Exception:  # a half-initialised call object
        return False
    return status in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )


def is_closed_client(exc: BaseException) -> bool:
    """Whether ``exc`` says the weaviate client was closed (never worth a retry)."""
    return isinstance(exc, _client_types()[1])


def is_transient(exc: BaseException) -> bool:
    """Whether retrying ``exc`` can help (network trouble, timeouts, overload), by type."""
    if is_closed_client(exc):
        return False
    transient, _, messages, grpc = _client_types()
    for e in _chain(exc):
        if isinstance(e, transient) or _transient_rpc(e, grpc):
            return True
        if isinstance(e, messages):  # "every object failed": the per-object messages are all it has
            return message_is_transient(str(e))
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status >= 500 or status == 429
    return False


def message_is_transient(message: str) -> bool:
    """Whether a server-side error *message* means "try again".

    Only for the per-object errors of a gRPC batch: the client hands them over as strings, with
    no exception type or status to decide by.
    """
    msg = message.lower()
    return any(w in msg for w in _TRANSIENT_WORDS)


def is_tenant_missing(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) reports a tenant that does not exist.

    By message: the client raises a plain query error (gRPC) or a 422 (REST) for it, the same
    types as for any other rejected request.
    """
    return any("tenant not found" in str(e).lower() for e in _chain(exc))


def is_collection_missing(exc: BaseException) -> bool:
    """Whether ``exc`` reports a collection that does not exist (by message, as for tenants)."""
    msg = str(exc).lower()
    return ("class" in msg or "collection" in msg) and ("not found" in msg or "could not find" in msg)


def translate(exc: BaseException, what: str) -> StoreError:
    """Map a foreign exception to the library's error tree (the caller raises it ``from exc``)."""
    if is_closed_client(exc):
        return StoreUnavailableError(f"Weaviate {what} failed: the client is closed")
    if is_transient(exc):
        return StoreUnavailableError(f"Weaviate {what} failed: {exc}")
    if is_collection_missing(exc):
        return SchemaError(f"Weaviate {what} failed: the collection does not exist; call store.ensure_schema() ({exc})")
    return StoreError(f"Weaviate {what} failed: {exc}")


def object_error(message: str) -> Exception:
    """The error for one object a batch rejected: retried by the store's call loop when transient.

    The message is the only thing a batch reports per object (see :func:`message_is_transient`).
    """
    return ConnectionError(message) if message_is_transient(message) else StoreError(message)
