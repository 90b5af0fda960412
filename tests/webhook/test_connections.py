"""The webhook's listener against idle, slow and too many clients (bounded, on 127.0.0.1):
idle and slow connections are closed, a slow body is a JSON 408, past the cap a JSON 503,
header-level client mistakes a JSON 4xx without a traceback in the log.

The guard's clock is the test's: a connection is idle or slow when the test says that time
has passed, so a busy machine can delay an outcome but never change it. Only the body timeout
is real time (the server's own `wait_for`), and its outcome does not depend on how late the
answer comes; every wait for an outcome is generous."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quotaguard.admission.reviews import make_review
from quotaguard.serve.components import ServeOptions, serve
from quotaguard.webhook.guard import (
    LINGERING_TIME,
    ClientMistakes,
    ConnectionGuard,
    ConnectionLimits,
    GuardedRunner,
    GuardedSite,
)
from quotaguard.webhook.server import build_webhook_app

from .conftest import (
    SAMPLE_POLICY,
    Certificates,
    LiveServer,
    loaded_certificate,
    loaded_sample_store,
    read_response,
)

LIMITS = ConnectionLimits(
    idle_timeout=60, header_timeout=10, body_timeout=0.5, max_connections=6, max_per_peer=4
)
PATIENCE = 30.0  # seconds any outcome may take on a loaded machine
BODY = json.dumps(
    make_review({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}, namespace="x")
).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class GuardedServer(LiveServer):
    async def _start(self) -> tuple[int, int]:
        self.clock = Clock()
        self.guard = ConnectionGuard(LIMITS, clock=self.clock)
        app = build_webhook_app(self.store, guard=self.guard)
        # aiohttp's own keep-alive timer runs on real time: out of the way, the guard decides
        runner = GuardedRunner(
            app, self.guard, access_log=None, keepalive_timeout=3600, logger=ClientMistakes()
        )
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", 0, ssl_context=self.certificate.context)
        await site.start()
        self._runners = [runner]
        self._watch = self.loop.create_task(self.guard.watch(0.05))
        return runner.addresses[0][1], 0

    async def _stop(self) -> None:
        self._watch.cancel()
        await super()._stop()

    def advance(self, seconds: float) -> None:
        def step() -> None:
            self.clock.now += seconds

        self.call(step)

    def sweep(self) -> int:
        return self.call(self.guard.sweep)

    def count(self) -> int:
        return self.call(lambda: self.guard.count)


@pytest.fixture(scope="module")
def server_and_context(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GuardedServer, ssl.SSLContext]]:
    certificates = Certificates(tmp_path_factory.mktemp("connections"))
    certificate = loaded_certificate(certificates)
    store = loaded_sample_store()
    with GuardedServer(store, certificate) as server:
        yield server, certificates.client_context()


@pytest.fixture
def live(
    server_and_context: tuple[GuardedServer, ssl.SSLContext],
) -> tuple[GuardedServer, ssl.SSLContext]:
    """The shared server with no connection left from an earlier test."""
    server, _ = server_and_context
    server.advance(LIMITS.idle_timeout + 1)
    wait_until(lambda: server.count() == 0, "earlier tests' connections closed")
    return server_and_context


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"not within {PATIENCE:g}s: {what}"
        time.sleep(0.02)


def connect(live: tuple[GuardedServer, ssl.SSLContext], peer: str = "127.0.0.1") -> ssl.SSLSocket:
    """A TLS connection from the loopback address `peer` (any of 127.0.0.0/8 on Linux)."""
    server, context = live
    raw = socket.create_connection(
        ("127.0.0.1", server.webhook_port), timeout=PATIENCE, source_address=(peer, 0)
    )
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def connect_counted(live: tuple[GuardedServer, ssl.SSLContext], peer: str) -> ssl.SSLSocket:
    """`connect`, returning once the server holds one more connection of `peer`."""
    server, _ = live
    before = server.call(lambda: server.guard.peer_count(peer))
    sock = connect(live, peer)
    wait_until(lambda: server.call(lambda: server.guard.peer_count(peer)) > before, "counted")
    return sock


def response_of(sock: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(PATIENCE)
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionError, ssl.SSLError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def one_response(sock: ssl.SSLSocket) -> bytes:
    """One whole response on a connection that stays open (headers and Content-Length body)."""
    sock.settimeout(PATIENCE)
    return read_response(sock)


def closed_within(sock: ssl.SSLSocket, seconds: float = PATIENCE) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        return True


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    head = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: 127.0.0.1"]
    head += [b"Content-Type: application/json", *extra]
    if not any(h.lower().startswith((b"content-length", b"transfer-encoding")) for h in extra):
        head.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def test_an_idle_connection_is_closed_once_the_idle_timeout_has_passed(live) -> None:
    server, _ = live
    sock = connect(live)
    wait_until(lambda: server.count() == 1, "the connection counted")
    server.advance(LIMITS.idle_timeout - 1)
    assert server.sweep() == 0
    server.advance(2)
    assert closed_within(sock)
    wait_until(lambda: server.count() == 0, "the connection forgotten")


def test_a_connection_that_answers_stays_open_until_idle(live) -> None:
    server, _ = live
    sock = connect(live)
    sock.sendall(post("/validate", BODY))
    assert one_response(sock).startswith(b"HTTP/1.1 200")
    server.advance(LIMITS.idle_timeout * 0.9)
    assert server.sweep() == 0
    sock.sendall(post("/validate", BODY))  # the idle time starts again after this answer
    assert one_response(sock).startswith(b"HTTP/1.1 200")
    server.advance(LIMITS.idle_timeout * 0.9)
    assert server.sweep() == 0
    server.advance(LIMITS.idle_timeout * 0.2)
    assert closed_within(sock)


def test_headers_that_trickle_are_cut_off_at_the_header_timeout(live) -> None:
    server, _ = live
    sock = connect(live)
    request = post("/validate", BODY)
    sock.sendall(request[:1])
    wait_until(
        lambda: (
            server.call(lambda: [c.partial_since for c in server.guard._live.values()])
            == [server.clock.now]
        ),
        "the first byte seen",
    )
    for sent in range(1, 4):  # a byte every 0.3 header timeouts: trickling is no activity
        server.advance(LIMITS.header_timeout * 0.3)
        assert server.sweep() == 0
        sock.sendall(request[sent : sent + 1])
    server.advance(LIMITS.header_timeout * 0.3)
    assert closed_within(sock)


def test_a_body_that_trickles_is_a_json_408_and_its_connection_closes_soon(live) -> None:
    sock = connect(live)
    request = post("/validate", BODY)
    sock.sendall(request[: request.index(b"\r\n\r\n") + 4 + 10])
    started = time.monotonic()
    answer = response_of(sock)  # until the server closes the connection
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    body = answer.partition(b"\r\n\r\n")[2]
    assert json.loads(body) == {"error": "request body not received within 0.5s"}
    # not held for aiohttp's 10 s lingering close: a trickler must not keep its connection
    assert time.monotonic() - started < 0.5 + LINGERING_TIME + 3


def test_past_the_per_peer_cap_the_peers_longest_idle_connection_makes_way(live) -> None:
    server, _ = live
    held = []
    for _ in range(LIMITS.max_per_peer):
        held.append(connect_counted(live, "127.0.0.1"))
        server.advance(1)  # each idle a second less than the one before
    newest = connect(live, "127.0.0.1")
    assert closed_within(held[0])  # the one idle the longest
    newest.sendall(post("/validate", BODY))
    assert one_response(newest).startswith(b"HTTP/1.1 200")
    for sock in held[1:]:
        sock.sendall(post("/validate", BODY))
        assert one_response(sock).startswith(b"HTTP/1.1 200")
    assert server.call(lambda: server.guard.peer_count("127.0.0.1")) == LIMITS.max_per_peer


def test_past_the_cap_the_greediest_peer_loses_its_longest_idle_connection(live) -> None:
    """The listener full, a new client takes the place of an idle connection of the client
    holding the most: the hoarder pays, not the modest client (the API server)."""
    server, _ = live
    hoarded = [connect_counted(live, "127.0.0.1") for _ in range(LIMITS.max_per_peer)]
    modest = [connect_counted(live, "127.0.0.2") for _ in range(2)]
    assert server.count() == LIMITS.max_connections
    server.advance(1)
    newcomer = connect(live, "127.0.0.3")
    assert closed_within(hoarded[0])
    for sock in [newcomer, *modest, *hoarded[1:]]:
        sock.sendall(post("/validate", BODY))
        assert one_response(sock).startswith(b"HTTP/1.1 200")


MISTAKES = {
    "bad chunking": (
        post("/validate", b"zz\r\nnot a chunk\r\n0\r\n\r\n", b"Transfer-Encoding: chunked"),
        b"chunk",
    ),
    "negative content-length": (
        post("/validate", b"{}", b"Content-Length: -5"),
        b"Content-Length",
    ),
    "100 kB header": (post("/validate", BODY, b"X-Junk: " + b"a" * 100_000), b"8190 bytes"),
    "bad request line": (b"GARBAGE\r\n\r\n", b"Bad Request"),
    "200 headers": (
        post("/validate", BODY, *(f"X-{i}: 1".encode() for i in range(200))),
        b"Bad Request",
    ),
}


@pytest.mark.parametrize("request_bytes, said", MISTAKES.values(), ids=MISTAKES.keys())
def test_header_level_mistakes_are_a_json_4xx_without_a_traceback(
    live, request_bytes: bytes, said: bytes, caplog
) -> None:
    """aiohttp finds these before any handler of ours runs; the answer is still JSON naming
    what was wrong, the connection is closed, and the log has one info line, no traceback."""
    caplog.set_level(logging.DEBUG)
    sock = connect(live)
    # the server may answer and close before it has read a long header
    with contextlib.suppress(OSError):
        sock.sendall(request_bytes)
    answer = response_of(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:300]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error.startswith(f"HTTP {status} ") and said.decode() in error, error
    assert not [r for r in caplog.records if r.exc_info]
    logged = [r for r in caplog.records if r.getMessage() == "bad request from a client"]
    assert len(logged) == 1
    assert logged[0].levelno == logging.INFO


def test_serve_flags_set_the_connection_cap(tmp_path: Path) -> None:
    """`serve --webhook-max-connections 2` (and its neighbours) reach the listener: a third
    connection takes the place of the one idle the longest."""
    certificates = Certificates(tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    options = ServeOptions(
        reports_auth="none",
        policy=str(SAMPLE_POLICY),
        components=("webhook",),
        bind_address="127.0.0.1",
        webhook_port=port,
        http_port=0,
        tls_cert_file=str(certificates.cert_file),
        tls_key_file=str(certificates.key_file),
        webhook_max_connections=2,
    )
    context = certificates.client_context()

    def client() -> tuple[bool, bytes]:
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "serve never listened"
                time.sleep(0.05)
        held = [context.wrap_socket(raw, server_hostname="127.0.0.1")]
        held.append(
            context.wrap_socket(
                socket.create_connection(("127.0.0.1", port), timeout=PATIENCE),
                server_hostname="127.0.0.1",
            )
        )
        for sock in held:  # each answered once, so both are surely counted by the server
            sock.sendall(post("/validate", BODY))
            assert one_response(sock).startswith(b"HTTP/1.1 200")
        third = context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=PATIENCE),
            server_hostname="127.0.0.1",
        )
        third.sendall(post("/validate", BODY))
        return closed_within(held[0]), one_response(third)

    async def scenario() -> tuple[int, tuple[bool, bytes]]:
        stop = asyncio.Event()
        running = asyncio.create_task(serve(options, stop=stop, handle_signals=False))
        answer = await asyncio.to_thread(client)
        stop.set()
        return await running, answer

    code, (first_closed, answer) = asyncio.run(scenario())
    assert code == 0
    assert first_closed
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
