"""Connection bounds of the webhook's listener: idle and slow clients timed out, a cap on
concurrent connections, small TLS buffers.

aiohttp keeps an idle connection for an hour, never times out a client that sends its headers
or its body a byte at a time, and accepts connections without bound; asyncio gives every TLS
connection a 256 KiB read buffer. Each connection then costs ~300 KiB, and a few thousand of
them (from anything that can reach the port) take the webhook past its memory limit. Here:

- a connection with nothing in flight and no byte for `idle_timeout` is closed;
- one whose request headers are still incomplete `header_timeout` after their first byte is
  closed (the API server sends a review at once: only a slow or hostile client trickles);
- the body must arrive within `body_timeout` of the headers (see `read_body`): HTTP 408;
  after an answer to a body not read to its end, the connection is closed within
  `LINGERING_TIME` (aiohttp reads and drops what still trickles in for 10 s);
- one peer address holds at most `max_per_peer` connections, far fewer than the listener's
  `max_connections`: a new connection past either cap takes the place of an idle one, the one
  idle the longest of that peer (per-peer cap) or of the peer holding the most (global cap),
  so a client hoarding connections loses its own first and the API server's stay; only when
  none of them is idle is the new connection answered 503 (JSON) and closed at once;
- a TLS handshake must complete within `header_timeout` (asyncio allows 60 s);
- TLS read buffers are 32 KiB instead of 256 KiB (a TLS record is at most 16 KiB);
- what aiohttp answers itself, before any handler runs (a request line or header it cannot
  parse or past 8,190 bytes, more than 128 headers, bad chunking), is JSON like every other
  error of the webhook (`JsonErrorHandler`), logged once at info (`ClientMistakes`).

The API server's webhook timeout is at most 30 s (quotaguard registers 5 s), so no answer it
still waits for is cut short by these. docs/deploy.md lists them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler

from quotaguard.metrics.registry import counter, gauge

log = logging.getLogger("quotaguard.webhook")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TLS_READ_BUFFER: Final = 32 * 1024
CONNECTIONS: Final = gauge(
    "quotaguard_webhook_connections", "Connections the webhook listener holds open."
)
CONNECTIONS_CLOSED: Final = counter(
    "quotaguard_webhook_connections_closed_total",
    "Connections the webhook closed itself (reason: idle, slow headers, evicted to make room "
    "for a new one, refused past the caps).",
    ["reason"],
)
_LIVE_GUARDS: weakref.WeakSet[ConnectionGuard] = weakref.WeakSet()
CONNECTIONS.set_function(lambda: sum(guard.count for guard in list(_LIVE_GUARDS)))
_REFUSED: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: 48\r\n\r\n"
    b'{"error": "too many connections, try again"}\r\n\r\n'
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds above; `serve --webhook-idle-timeout` and its neighbours set them."""

    idle_timeout: float = 60.0
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    max_connections: int = 1000
    max_per_peer: int = 100


@dataclass(slots=True)
class _Connection:
    transport: asyncio.BaseTransport
    peer: str
    last_activity: float
    busy: int = 0
    partial_since: float | None = None  # first byte of a request whose headers are incomplete

    def eviction_order(self) -> tuple[bool, float]:
        """Idle ones before those whose headers are arriving, each the longest quiet first."""
        if self.partial_since is None:
            return False, self.last_activity
        return True, self.partial_since


def peer_address(transport: asyncio.BaseTransport) -> str:
    """The client's IP address (no port): the unit a client can multiply connections by."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return "unknown"


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, with its bytes and lifetime watched."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._connection: _Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._connection = self._guard.opened(transport)
        if self._connection is None:
            return
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        connection = self._connection
        if connection is None:
            return
        if not connection.busy and connection.partial_since is None:
            connection.partial_since = self._guard.clock()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._connection is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is None:
            return
        self._guard.closed(self._connection)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class ConnectionGuard:
    """Live connections of one listener and their bounds (plain state, one event loop)."""

    def __init__(
        self, limits: ConnectionLimits, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self.clock = clock
        self._live: dict[asyncio.BaseTransport, _Connection] = {}
        self._by_peer: dict[str, dict[asyncio.BaseTransport, _Connection]] = {}
        self.refused = 0
        self.timed_out = 0
        self.evicted = 0
        _LIVE_GUARDS.add(self)

    @property
    def count(self) -> int:
        return len(self._live)

    def peer_count(self, peer: str) -> int:
        return len(self._by_peer.get(peer, ()))

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], _Guarded]:
        return lambda: _Guarded(self, inner())

    def opened(self, transport: asyncio.BaseTransport) -> _Connection | None:
        peer = peer_address(transport)
        if not self._make_room(peer):
            self.refused += 1
            CONNECTIONS_CLOSED.labels("refused").inc()
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(_REFUSED)
            transport.close()
            return None
        connection = _Connection(transport, peer, self.clock())
        self._live[transport] = connection
        self._by_peer.setdefault(peer, {})[transport] = connection
        return connection

    def _make_room(self, peer: str) -> bool:
        """Whether a new connection of `peer` may open, once an idle one has made way for it
        where a cap is reached."""
        if self.peer_count(peer) >= self.limits.max_per_peer:
            return self._evict_one_of(peer)
        if len(self._live) < self.limits.max_connections:
            return True
        by_size = sorted(self._by_peer, key=self.peer_count, reverse=True)
        return any(self._evict_one_of(greedy) for greedy in by_size)

    def _evict_one_of(self, peer: str) -> bool:
        idle = [c for c in self._by_peer.get(peer, {}).values() if not c.busy]
        if not idle:
            return False
        victim = min(idle, key=_Connection.eviction_order)
        self._forget(victim)
        victim.transport.abort()  # type: ignore[attr-defined]
        self.evicted += 1
        CONNECTIONS_CLOSED.labels("evicted").inc()
        log.info("closed an idle connection for a new one", extra={"peer": peer})
        return True

    def closed(self, connection: _Connection) -> None:
        self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        self._live.pop(connection.transport, None)
        of_peer = self._by_peer.get(connection.peer)
        if of_peer is not None:
            of_peer.pop(connection.transport, None)
            if not of_peer:
                del self._by_peer[connection.peer]

    def begin(self, transport: object) -> None:
        """A request's headers are complete and its handler runs."""
        connection = self._live.get(transport)  # type: ignore[call-overload]
        if connection is not None:
            connection.busy += 1
            connection.partial_since = None

    def end(self, transport: object) -> None:
        connection = self._live.get(transport)  # type: ignore[call-overload]
        if connection is not None:
            connection.busy -= 1
            connection.last_activity = self.clock()

    def sweep(self) -> int:
        """Close the connections past a timeout; how many were closed."""
        now = self.clock()
        limits = self.limits
        late = [
            c
            for c in self._live.values()
            if not c.busy
            and (
                (c.partial_since is not None and now - c.partial_since > limits.header_timeout)
                or (c.partial_since is None and now - c.last_activity > limits.idle_timeout)
            )
        ]
        for connection in late:
            reason = "idle" if connection.partial_since is None else "slow"
            CONNECTIONS_CLOSED.labels(reason).inc()
            self._forget(connection)
            # abort, not close: a TLS close waits (30 s) for a close_notify the client that
            # went quiet never sends, and the connection would count until then.
            connection.transport.abort()  # type: ignore[attr-defined]
        if late:
            self.timed_out += len(late)
            log.info("closed idle or slow connections", extra={"count": len(late)})
        return len(late)

    async def watch(self, every: float = 1.0) -> None:
        while True:
            await asyncio.sleep(every)
            self.sweep()

    def middleware(self) -> Middleware:
        """Marks each connection busy while a request of it is handled."""

        @web.middleware
        async def busy(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            self.begin(transport)
            try:
                return await handler(request)
            finally:
                self.end(transport)

        return busy


class JsonErrorHandler(RequestHandler):
    """aiohttp's protocol for one HTTP connection, its own error answers in JSON. aiohttp
    answers a request it cannot parse (or a handler's unexpected exception) with a plain-text
    page; a client of the webhook (the API server, or whoever sends it garbage) gets
    `{"error": "HTTP 400 Bad Request: <what aiohttp found>"}` instead, the connection closed.
    A client's mistake is logged once at info without a traceback; anything else as aiohttp
    logs it."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError) and 400 <= status < 500:
            log.info("bad request from a client", extra={"error": f"{status} {message}"})
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:  # as aiohttp: a response begun cannot be replaced
            raise ConnectionError("response already begun; cannot send the error answer")
        return json_error_response(status, message)


def json_error_response(status: int, message: str | None) -> web.Response:
    try:
        reason = f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        reason = f"HTTP {status}"
    text = reason
    if message and status < 500:  # a server error's text is for our log, not the client
        detail = " ".join(message.split())
        text += ": " + (detail if len(detail) <= 200 else detail[:197] + "...")
    response = web.Response(
        status=status, body=json.dumps({"error": text}).encode(), content_type="application/json"
    )
    response.force_close()
    return response


# Time the client gets to read an answer sent before its body ended (a 408, a 413) before the
# connection closes: enough for an honest client, far from aiohttp's 10 s a trickler holds.
LINGERING_TIME: Final = 1.0


class GuardedRunner(web.AppRunner):
    """aiohttp's runner, with the handler arguments (`keepalive_timeout`, `logger`, header
    limits...) kept for `GuardedSite`, which makes the connections' protocols itself."""

    def __init__(
        self,
        app: web.Application,
        guard: ConnectionGuard,
        *,
        shutdown_timeout: float = 60.0,
        **handler_args: Any,
    ) -> None:
        handler_args.setdefault("lingering_time", LINGERING_TIME)
        super().__init__(app, shutdown_timeout=shutdown_timeout, **handler_args)
        self.guard = guard
        self.handler_args = handler_args


class GuardedSite(web.TCPSite):
    """aiohttp's TCP site, its connections made through a `ConnectionGuard`, each spoken by a
    `JsonErrorHandler`."""

    def __init__(
        self,
        runner: GuardedRunner,
        host: str | None,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, reuse_port=reuse_port)
        self._guarded_runner = runner

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        runner = self._guarded_runner
        server = runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        args = runner.handler_args
        self._server = await loop.create_server(
            runner.guard.protocol_factory(lambda: JsonErrorHandler(server, loop=loop, **args)),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=runner.guard.limits.header_timeout if self._ssl_context else None,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


async def read_body(request: web.Request, timeout: float) -> bytes:
    """The body, or `TimeoutError` when it does not arrive within `timeout` seconds.

    A review's body nearly always arrives with its headers, and then reading it never waits:
    no timer is set for it. (`asyncio.wait_for` would also run the read as a task of its own,
    which cost two more turns of the event loop per request.)"""
    if request.content.is_eof():
        return await request.read()
    async with asyncio.timeout(timeout):
        return await request.read()


def size_tls_buffers(size: int = TLS_READ_BUFFER) -> None:
    """asyncio allocates `SSLProtocol.max_size` bytes per TLS connection up front; there is no
    per-server option, so the serving process sets the class attribute once at start-up."""
    from asyncio import sslproto

    sslproto.SSLProtocol.max_size = size


class ClientMistakes(logging.Logger):
    """The logger of aiohttp's request handler (`AppRunner(logger=...)`). aiohttp logs a
    request it cannot parse (bad chunking, a negative Content-Length, a header past 8 KiB)
    with a traceback at error level: a client's mistake is logged here once, at info, without
    one. Anything else is logged as aiohttp would."""

    def __init__(self, parent: logging.Logger = log) -> None:
        super().__init__(f"{parent.name}.http")
        self.parent = parent

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500:
            self.info("bad request from a client", extra={"error": f"{exc.code} {exc.message}"})
            return
        super().exception(msg, *args, **kwargs)
