"""Weaviate API-key authentication and TLS against real servers (issue 8, item 10).

* A ``weaviate-server`` started with ``AUTHENTICATION_APIKEY_ENABLED=true`` and anonymous access
  off: ``WeaviateStore.connect(..., api_key=KEY)`` works end to end; no key or a wrong key is a
  typed ``StoreError`` at connect time; the key never appears in a log record (all loggers at
  DEBUG), an error message or the store's repr.
* A ``weaviate-server`` serving REST over HTTPS (``--scheme https --tls-port``) and gRPC over TLS
  (``GRPC_CERT_FILE`` / ``GRPC_KEY_FILE``) with a certificate from a private CA (made with the
  ``openssl`` CLI for the test): ``connect("https://...", trust_env=True)`` with
  ``SSL_CERT_FILE`` and ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` works, also combined with an API key;
  without trusting the CA the connection is refused with a typed ``StoreUnavailableError``
  (certificate verification is on). The HTTPS server is started from the same launcher
  environment (``WeaviateServer.env()``) with the TLS flags added, because the launcher itself
  always serves plain HTTP on loopback.
"""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory.errors import StoreError, StoreUnavailableError
from hybrid_memory.records import MemoryRecord
from hybrid_memory.stores.base import SearchRequest

pytestmark = [pytest.mark.weaviate]

KEY = "wv-reliability-KEY-5c2e9a71d4b8"
AUTH_ENV = {
    "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "false",
    "AUTHENTICATION_APIKEY_ENABLED": "true",
    "AUTHENTICATION_APIKEY_ALLOWED_KEYS": KEY,
    "AUTHENTICATION_APIKEY_USERS": "reliability-user",
}


def roundtrip(store: Any) -> None:
    rec = MemoryRecord.create(user_id="alice", content="Alice prefers green tea")
    vec = np.ones((1, 8), dtype=np.float32)
    store.upsert([rec], vec)
    hits = store.search(SearchRequest(user_id="alice", query="green tea", vector=vec[0], alpha=0.5))
    assert [h.record.content for h in hits] == ["Alice prefers green tea"]
    assert store.delete_user("alice") == 1


def assert_key_hidden(caplog: pytest.LogCaptureFixture, *texts: str) -> None:
    for rec in caplog.records:
        assert KEY not in rec.getMessage() and KEY not in str(rec.args)
    for t in texts:
        assert KEY not in t


# --------------------------------------------------------------------------------- API key
def test_api_key_auth(private_weaviate: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from hybrid_memory.stores.weaviate import WeaviateStore

    caplog.set_level(logging.DEBUG)
    server = private_weaviate(environment=AUTH_ENV)

    def connect(**kwargs: Any) -> Any:
        return WeaviateStore.connect(
            server.url,
            grpc_port=server.grpc_port,
            collection="Secured",
            dead_letter_path=tmp_path / "dl.sqlite",
            timeout=5,
            **kwargs,
        )

    errors: list[str] = []
    for bad in ({}, {"api_key": "wrong-key-0000"}):
        with pytest.raises(StoreError) as info:
            connect(**bad)
        assert not isinstance(info.value, StoreUnavailableError)  # not retried as an outage
        assert "401" in str(info.value) or "unauthorized" in str(info.value).lower()
        errors.append(str(info.value))

    store = connect(api_key=KEY)
    try:
        roundtrip(store)
        assert_key_hidden(caplog, repr(store), *errors)
    finally:
        store.drop()
        store.close()


# --------------------------------------------------------------------------------- TLS
@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA and a server certificate for 127.0.0.1 (openssl CLI)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True)

    # The extensions a CA needs under Python 3.13's default VERIFY_X509_STRICT.
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=hybrid-memory reliability test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-addext", "subjectKeyIdentifier=hash")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return d


@pytest.fixture
def tls_server(weaviate_binary: str, certificates: Path, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """``weaviate-server`` with HTTPS on REST and TLS on gRPC, API key required."""
    from hybrid_memory.stores.weaviate import WeaviateServer

    launcher = WeaviateServer(
        weaviate_binary,
        data_path=tmp_path / "data",
        environment={
            **AUTH_ENV,
            "GRPC_CERT_FILE": str(certificates / "server.pem"),
            "GRPC_KEY_FILE": str(certificates / "server.key"),
        },
    )
    env = launcher.env()
    launcher.data_path.mkdir(parents=True, exist_ok=True)
    port = launcher.http_port
    args = [
        launcher.binary,
        "--scheme", "https",
        "--tls-host", "127.0.0.1",
        "--tls-port", str(port),
        "--tls-certificate", str(certificates / "server.pem"),
        "--tls-key", str(certificates / "server.key"),
    ]  # fmt: skip
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        ctx = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/v1/.well-known/ready", context=ctx, timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, "the TLS server did not become ready"
                time.sleep(0.1)
        yield f"https://127.0.0.1:{port}", launcher.grpc_port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_tls_with_a_private_ca_and_api_key(
    tls_server: tuple[str, int],
    certificates: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from hybrid_memory.stores.weaviate import WeaviateStore

    caplog.set_level(logging.DEBUG)
    url, grpc_port = tls_server
    kwargs: dict[str, Any] = {
        "grpc_port": grpc_port,
        "collection": "Tls",
        "dead_letter_path": tmp_path / "dl.sqlite",
        "timeout": 5,
        "init_timeout": 5,
        "api_key": KEY,
    }
    # Certificate verification is on: an untrusted CA is refused (typed, after the retries).
    with pytest.raises(StoreUnavailableError):
        WeaviateStore.connect(url, **kwargs)

    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(certificates / "ca.pem"))
    store = WeaviateStore.connect(url, trust_env=True, **kwargs)
    try:
        assert store._probe(2.0), "the liveness probe must reach the server over HTTPS too"
        roundtrip(store)
        assert_key_hidden(caplog, repr(store))
    finally:
        store.drop()
        store.close()
