"""One client hoarding connections cannot lock the API server out of the webhook.

A live listener with the default bounds (1,000 connections, 100 per client address) takes
1,010 idle TLS connections from 127.0.0.1 and still answers 127.0.0.2 at once; the guard's
rules (which connection makes way for a new one, when a new one is refused) are checked on
plain state with fake transports, by example and as properties."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.metrics.registry import REGISTRY
from quotaguard.webhook.guard import (
    ClientMistakes,
    ConnectionGuard,
    ConnectionLimits,
    GuardedRunner,
    GuardedSite,
)
from quotaguard.webhook.server import build_webhook_app

from .conftest import (
    Certificates,
    LiveServer,
    loaded_certificate,
    loaded_sample_store,
    read_response,
)
from .test_connections import BODY, PATIENCE, post

HOARDED = 1_010


class DefaultBoundsServer(LiveServer):
    """The webhook listener as `serve` sets it up, with the default connection bounds."""

    limits = ConnectionLimits()

    async def _start(self) -> tuple[int, int]:
        self.guard = ConnectionGuard(self.limits)
        app = build_webhook_app(self.store, guard=self.guard)
        runner = GuardedRunner(
            app, self.guard, access_log=None, keepalive_timeout=60, logger=ClientMistakes()
        )
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", 0, ssl_context=self.certificate.context)
        await site.start()
        self._runners = [runner]
        return runner.addresses[0][1], 0


@pytest.fixture(scope="module")
def default_bounds(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DefaultBoundsServer, ssl.SSLContext]]:
    certificates = Certificates(tmp_path_factory.mktemp("peers"))
    with DefaultBoundsServer(loaded_sample_store(), loaded_certificate(certificates)) as server:
        yield server, certificates.client_context()


def open_from(port: int, context: ssl.SSLContext, peer: str) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE, source_address=(peer, 0))
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def closed_total(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "quotaguard_webhook_connections_closed_total", {"reason": reason}
    )
    return value or 0.0


def test_a_client_holding_1010_idle_connections_leaves_room_for_another(default_bounds) -> None:
    server, context = default_bounds
    limits = server.guard.limits
    evicted_before = closed_total("evicted")
    hoard = [open_from(server.webhook_port, context, "127.0.0.1") for _ in range(HOARDED)]
    deadline = time.monotonic() + PATIENCE
    while server.call(lambda: server.guard.evicted) < HOARDED - limits.max_per_peer:
        assert time.monotonic() < deadline, "the hoard's own connections never made way"
        time.sleep(0.05)
    assert server.call(lambda: server.guard.peer_count("127.0.0.1")) == limits.max_per_peer
    started = time.monotonic()
    api_server = open_from(server.webhook_port, context, "127.0.0.2")
    api_server.sendall(post("/validate", BODY))
    answer = read_response(api_server)
    waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert waited < 5.0  # the API server's webhook timeout is 5 s
    assert server.call(lambda: server.guard.refused) == 0
    # what an operator sees: the hoard's evictions, and no more connections than the caps allow
    assert closed_total("evicted") - evicted_before >= HOARDED - limits.max_per_peer
    assert server.call(lambda: server.guard.count) == limits.max_per_peer + 1
    open_now = REGISTRY.get_sample_value("quotaguard_webhook_connections")
    assert open_now is not None and open_now >= limits.max_per_peer + 1  # every listener's
    for sock in [*hoard, api_server]:
        sock.close()


class QuickHandshakeServer(DefaultBoundsServer):
    limits = ConnectionLimits(header_timeout=0.5)


def test_a_tls_handshake_that_never_comes_is_cut_off(tmp_path) -> None:
    """A connection that never completes its handshake is not counted by the guard (the
    listener hands it over only once TLS is up), so it must not stay for asyncio's 60 s."""
    certificates = Certificates(tmp_path)
    with QuickHandshakeServer(loaded_sample_store(), loaded_certificate(certificates)) as server:
        raw = socket.create_connection(("127.0.0.1", server.webhook_port), timeout=PATIENCE)
        started = time.monotonic()
        raw.settimeout(PATIENCE)
        with contextlib.suppress(ConnectionResetError):  # closed, or reset: either way gone
            assert raw.recv(1) == b""
        assert time.monotonic() - started < 10
        raw.close()


# ---- the rules, on plain state ----------------------------------------------------------------


class FakeTransport(asyncio.WriteTransport):
    def __init__(self, peer: str) -> None:
        super().__init__()
        self.peer = peer
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self.peer, 40000) if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_with_every_connection_busy_a_new_one_is_a_json_503() -> None:
    guard = ConnectionGuard(ConnectionLimits(max_connections=3, max_per_peer=2))
    busy = [FakeTransport(peer) for peer in ("10.0.0.1", "10.0.0.1", "10.0.0.2")]
    for transport in busy:
        assert guard.opened(transport) is not None
        guard.begin(transport)
    late = FakeTransport("10.0.0.3")
    assert guard.opened(late) is None
    assert late.closed and late.written.startswith(b"HTTP/1.1 503")
    assert b'"too many connections' in late.written
    own = FakeTransport("10.0.0.1")  # at its own cap, nothing of its own idle
    assert guard.opened(own) is None
    assert not any(t.closed for t in busy)
    assert guard.refused == 2


def test_a_connection_whose_headers_are_arriving_makes_way_after_the_idle_ones() -> None:
    clock = Clock()
    guard = ConnectionGuard(ConnectionLimits(max_connections=10, max_per_peer=3), clock=clock)
    trickling, idle_old, idle_new = (FakeTransport("10.0.0.1") for _ in range(3))
    for transport in (trickling, idle_old, idle_new):
        guard.opened(transport)
        clock.now += 1
    guard._live[trickling].partial_since = 0.0
    newer = FakeTransport("10.0.0.1")
    guard.opened(newer)
    assert idle_old.closed and not idle_new.closed and not trickling.closed
    guard.begin(idle_new)
    guard.begin(newer)
    guard.opened(FakeTransport("10.0.0.1"))
    assert trickling.closed and not idle_new.closed and not newer.closed


def test_every_connection_the_guard_closes_is_counted_by_reason() -> None:
    clock = Clock()
    guard = ConnectionGuard(
        ConnectionLimits(idle_timeout=60, header_timeout=10, max_connections=3, max_per_peer=2),
        clock=clock,
    )
    before = {r: closed_total(r) for r in ("idle", "slow", "evicted", "refused")}
    idle, slow, busy = (FakeTransport(f"10.0.0.{n}") for n in range(3))
    for transport in (idle, slow, busy):
        guard.opened(transport)
    guard._live[slow].partial_since = 0.0
    guard.begin(busy)
    clock.now = 61
    assert guard.sweep() == 2
    guard.opened(FakeTransport("10.0.0.2"))
    guard.opened(FakeTransport("10.0.0.2"))  # its own cap: the one before makes way
    guard.opened(FakeTransport("10.0.0.4"))
    for peer in ("10.0.0.2", "10.0.0.4"):
        for transport, connection in guard._by_peer[peer].items():
            if not connection.busy:
                guard.begin(transport)
    guard.opened(FakeTransport("10.0.0.5"))  # every connection busy
    after = {r: closed_total(r) - before[r] for r in before}
    assert after == {"idle": 1, "slow": 1, "evicted": 1, "refused": 1}


Action = tuple[str, int, int]  # (what, peer, which)
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["open", "open", "open", "close", "begin", "end"]),
        st.integers(0, 4),
        st.integers(0, 50),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(actions=ACTIONS, cap=st.integers(1, 12), per_peer=st.integers(1, 6))
def test_the_caps_hold_and_a_refusal_means_nothing_was_idle(
    actions: list[Action], cap: int, per_peer: int
) -> None:
    clock = Clock()
    limits = ConnectionLimits(max_connections=cap, max_per_peer=per_peer)
    guard = ConnectionGuard(limits, clock=clock)
    live: list[FakeTransport] = []
    busy: set[int] = set()
    for what, peer_number, which in actions:
        clock.now += 1
        peer = f"10.0.0.{peer_number}"
        if what == "open":
            transport = FakeTransport(peer)
            idle_before = [t for t in live if id(t) not in busy and not t.closed]
            own_full = guard.peer_count(peer) >= per_peer
            accepted = guard.opened(transport) is not None
            if not accepted:
                room = [t for t in idle_before if t.peer == peer] if own_full else idle_before
                assert not room, "refused while a connection that could make way was idle"
            else:
                live.append(transport)
        elif live:
            transport = live[which % len(live)]
            if what == "close" and not transport.closed and id(transport) not in busy:
                transport.closed = True  # the client hung up
                guard.closed(guard._live[transport])
            elif what == "begin" and not transport.closed and id(transport) not in busy:
                # HTTP/1.1: one request at a time on a connection
                guard.begin(transport)
                busy.add(id(transport))
            elif what == "end" and id(transport) in busy:
                guard.end(transport)
                busy.discard(id(transport))
        live = [t for t in live if not t.closed]
        assert guard.count == len(live) <= cap
        assert all(guard.peer_count(f"10.0.0.{p}") <= per_peer for p in range(5))
        assert not [t for t in live if id(t) in busy and t.closed]
