"""weaviate-client exceptions map to the library's errors by type (hybrid_memory.stores.weaviate.errors).

The client's exceptions are built as the client builds them (a query error raised while handling
a gRPC error, a status error from a real ``httpx.Response``); the gRPC error is a
``grpc.RpcError`` subclass with a status code, the one thing a test cannot get from a live
channel on demand (tests/reliability/test_weaviate_faults.py causes the real outages).
"""

from __future__ import annotations

import pytest

pytest.importorskip("weaviate", reason="the 'weaviate' extra is not installed")

import grpc
import httpx
from weaviate import exceptions as wex

from hybrid_memory.errors import SchemaError, StoreError, StoreUnavailableError
from hybrid_memory.stores.weaviate.errors import (
    is_tenant_missing,
    is_transient,
    object_error,
    translate,
)


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code.name)
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def _query_error_during(code: grpc.StatusCode) -> wex.WeaviateQueryError:
    """A query error raised the way weaviate-client does: inside ``except RpcError``, without ``from``."""
    try:
        try:
            raise _RpcError(code)
        except grpc.RpcError as e:
            raise wex.WeaviateQueryError(f"details of {e}", "GRPC search")  # noqa: B904 - as the client does
    except wex.WeaviateQueryError as exc:
        return exc
    raise AssertionError("unreachable")


def _status_error(status: int) -> wex.UnexpectedStatusCodeError:
    response = httpx.Response(status, json={"error": [{"message": "x"}]}, request=httpx.Request("GET", "http://h"))
    return wex.UnexpectedStatusCodeError("Weaviate call", response)


@pytest.mark.parametrize(
    "exc",
    [
        wex.WeaviateConnectionError("down"),
        wex.WeaviateTimeoutError("slow"),
        wex.WeaviateRetryError("gave up", 5),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        ConnectionResetError(),
        TimeoutError(),
    ],
)
def test_network_and_timeout_types_are_transient(exc: BaseException) -> None:
    assert is_transient(exc)
    assert isinstance(translate(exc, "search"), StoreUnavailableError)


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        (grpc.StatusCode.UNAVAILABLE, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, True),
        (grpc.StatusCode.INVALID_ARGUMENT, False),
        (grpc.StatusCode.UNKNOWN, False),
    ],
)
def test_a_query_error_is_judged_by_the_grpc_status_it_was_raised_from(code: grpc.StatusCode, transient: bool) -> None:
    assert is_transient(_query_error_during(code)) is transient


@pytest.mark.parametrize(("status", "transient"), [(503, True), (500, True), (429, True), (422, False), (404, False)])
def test_http_status_errors_by_status(status: int, transient: bool) -> None:
    exc = _status_error(status)
    assert is_transient(exc) is transient
    assert isinstance(translate(exc, "write"), StoreUnavailableError if transient else StoreError)


def test_words_in_a_message_do_not_make_an_exception_transient() -> None:
    # A plain query error that says "connection" but was not raised from a network failure.
    assert not is_transient(wex.WeaviateQueryError("invalid connection filter", "GRPC search"))
    assert not is_transient(ValueError("timeout must be positive"))


def test_a_closed_client_is_never_retried() -> None:
    exc = wex.WeaviateClosedClientError()
    assert not is_transient(exc)
    err = translate(exc, "count")
    assert isinstance(err, StoreUnavailableError) and "client is closed" in str(err)


def test_batch_object_errors_are_judged_by_their_message() -> None:
    # Per-object batch errors are plain strings: the message is all there is.
    assert isinstance(object_error("connection reset by peer"), ConnectionError)
    assert isinstance(object_error("invalid property 'x'"), StoreError)
    assert is_transient(wex.WeaviateInsertManyAllFailedError("shard temporarily unavailable"))
    assert not is_transient(wex.WeaviateInsertManyAllFailedError("invalid property 'x'"))


def test_missing_collection_and_tenant() -> None:
    missing = wex.WeaviateQueryError("could not find class HybridMemory in schema", "GRPC search")
    assert isinstance(translate(missing, "search"), SchemaError)
    tenant = wex.WeaviateQueryError('tenant not found: "u_1"', "GRPC search")
    try:
        raise translate(tenant, "fetch") from tenant
    except StoreError as exc:
        assert is_tenant_missing(exc)
    assert not is_tenant_missing(StoreError("fetch failed"))
