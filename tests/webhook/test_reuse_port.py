"""`--webhook-reuse-port`: several serve processes (or containers of one pod) share the webhook
port, as the scale bench's two replicas do; without it a second listener is refused."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from quotaguard.webhook.guard import (
    ConnectionGuard,
    ConnectionLimits,
    GuardedRunner,
    GuardedSite,
)
from quotaguard.webhook.server import build_webhook_app

from .conftest import Certificates, loaded_certificate, loaded_sample_store

LIMITS = ConnectionLimits(idle_timeout=60, header_timeout=10, body_timeout=5, max_connections=10)


async def _listen(context: ssl.SSLContext, port: int, *, reuse_port: bool) -> GuardedRunner:
    guard = ConnectionGuard(LIMITS)
    runner = GuardedRunner(build_webhook_app(loaded_sample_store(), guard=guard), guard)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", port, ssl_context=context, reuse_port=reuse_port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


async def _two_listeners(context: ssl.SSLContext, *, reuse_port: bool) -> list[int]:
    first = await _listen(context, 0, reuse_port=reuse_port)
    port = first.addresses[0][1]
    try:
        second = await _listen(context, port, reuse_port=reuse_port)
        ports = [port, second.addresses[0][1]]
        await second.cleanup()
        return ports
    finally:
        await first.cleanup()


def test_two_listeners_share_the_webhook_port_with_reuse_port(tmp_path: Path) -> None:
    context = loaded_certificate(Certificates(tmp_path)).context
    first, second = asyncio.run(_two_listeners(context, reuse_port=True))
    assert first == second


def test_without_reuse_port_the_second_listener_is_refused(tmp_path: Path) -> None:
    context = loaded_certificate(Certificates(tmp_path)).context
    with pytest.raises(OSError):
        asyncio.run(_two_listeners(context, reuse_port=False))
