"""A real webhook + HTTP server on 127.0.0.1 in a background event loop, with trustme TLS."""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trustme
from aiohttp import web

from quotaguard.admission import engine
from quotaguard.admission.decision_cache import DecisionCache
from quotaguard.serve.plain_http import build_http_app
from quotaguard.serve.policystore import PolicyStore
from quotaguard.serve.tlsreload import ReloadingCertificate
from quotaguard.webhook.server import ReviewFunction, build_webhook_app

SAMPLE_POLICY = Path(__file__).resolve().parents[2] / "config" / "policy.yaml"
T = TypeVar("T")


class LiveServer:
    """The webhook (HTTPS) and the HTTP app, served from an event loop in a thread, as in
    `serve`; tests talk to them over real sockets."""

    def __init__(
        self,
        store: PolicyStore,
        certificate: ReloadingCertificate,
        review: ReviewFunction = engine.review,
        cache: DecisionCache | None = None,
    ) -> None:
        self.store = store
        self.certificate = certificate
        self.review = review
        self.cache = cache
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._runners: list[web.AppRunner] = []
        self.webhook_port = 0
        self.http_port = 0

    def __enter__(self) -> LiveServer:
        self._thread.start()
        self.webhook_port, self.http_port = self.run(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()

    def run(self, coroutine: Any) -> Any:
        """Run a coroutine on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def call(self, function: Callable[[], T]) -> T:
        """Call a function on the server's loop thread (where handshakes happen)."""
        done: Future[T] = Future()

        def invoke() -> None:
            try:
                done.set_result(function())
            except BaseException as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        return done.result(timeout=30)

    async def _start(self) -> tuple[int, int]:
        webhook = web.AppRunner(
            build_webhook_app(self.store, review=self.review, cache=self.cache), access_log=None
        )
        await webhook.setup()
        await web.TCPSite(webhook, "127.0.0.1", 0, ssl_context=self.certificate.context).start()
        checks = {"tls": lambda: None if self.certificate.ready else "no certificate"}
        plain = web.AppRunner(build_http_app(self.store, readiness_checks=checks), access_log=None)
        await plain.setup()
        await web.TCPSite(plain, "127.0.0.1", 0).start()
        self._runners = [webhook, plain]
        return webhook.addresses[0][1], plain.addresses[0][1]

    async def _stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


class Certificates:
    """A trustme CA and the cert/key files the server reads; `rotate()` issues a new pair."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        self.cert_file = directory / "tls.crt"
        self.key_file = directory / "tls.key"
        self.current = self.rotate()

    def rotate(self) -> trustme.LeafCert:
        leaf = self.ca.issue_cert("127.0.0.1", "localhost")
        leaf.private_key_pem.write_to_path(str(self.key_file))
        leaf.cert_chain_pems[0].write_to_path(str(self.cert_file))
        self.current = leaf
        return leaf

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        self.ca.configure_trust(context)
        return context


def der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    shutil.copy(SAMPLE_POLICY, path)
    return path


@pytest.fixture
def store(policy_file: Path) -> PolicyStore:
    store = PolicyStore(policy_file)
    store.load()
    return store


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


def loaded_certificate(certificates: Certificates) -> ReloadingCertificate:
    certificate = ReloadingCertificate(certificates.cert_file, certificates.key_file)
    certificate.load()
    return certificate


def loaded_sample_store() -> PolicyStore:
    store = PolicyStore(SAMPLE_POLICY)
    store.load()
    return store


def read_response(sock: ssl.SSLSocket) -> bytes:
    """One whole response on a connection that stays open (headers and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


@pytest.fixture
def certificate(certificates: Certificates) -> ReloadingCertificate:
    return loaded_certificate(certificates)


@pytest.fixture
def server(store: PolicyStore, certificate: ReloadingCertificate) -> Iterator[LiveServer]:
    with LiveServer(store, certificate) as live:
        yield live


class Client:
    """A keep-alive HTTPS connection to the webhook, re-opened if the server closed it."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port = port
        self.context = context
        self.connection = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)

    def post(
        self, path: str, body: bytes, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        return self.request("POST", path, body, content_type)

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = ""
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type} if content_type else {}
        try:
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
        except (ConnectionError, http.client.HTTPException):
            self.connection.close()
            self.connection = self._connect()
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
        data = response.read()
        if response.getheader("Connection", "").lower() == "close":
            self.connection.close()
            self.connection = self._connect()
        assert response.getheader("Content-Type", "").startswith("application/json"), data[:200]
        return response.status, json.loads(data)

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def client(server: LiveServer, certificates: Certificates) -> Iterator[Client]:
    client = Client(server.webhook_port, certificates.client_context())
    yield client
    client.close()
