"""The `webhook` component of `quotaguard serve`: HTTPS on --webhook-port with a reloading cert."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from quotaguard.admission.decision_cache import DecisionCache
from quotaguard.kube.client import api_client
from quotaguard.kube.dra import DraLookup
from quotaguard.serve.components import ServeContext, StartupError
from quotaguard.serve.tlsreload import CertificateError, ReloadingCertificate
from quotaguard.webhook.dracache import api_dra_cache
from quotaguard.webhook.guard import (
    ClientMistakes,
    ConnectionGuard,
    ConnectionLimits,
    GuardedRunner,
    GuardedSite,
    size_tls_buffers,
)
from quotaguard.webhook.runtime_cache import cluster_cache
from quotaguard.webhook.server import IN_FLIGHT_KEY, InFlight, build_webhook_app

log = logging.getLogger("quotaguard.webhook")
RUNTIMES_INTERVAL = 30.0  # seconds between two lists of the TrainJob runtimes


async def start(ctx: ServeContext) -> None:
    options = ctx.options
    if not options.tls_cert_file or not options.tls_key_file:
        raise StartupError(
            "the webhook needs --tls-cert-file and --tls-key-file (the API server only calls "
            "webhooks over HTTPS)"
        )
    certificate = ReloadingCertificate(options.tls_cert_file, options.tls_key_file)
    try:
        certificate.load()
    except CertificateError as exc:
        raise StartupError(str(exc)) from exc
    ctx.add_readiness_check(
        "tls", lambda: None if certificate.ready else "serving certificate not loaded"
    )
    ctx.add_status("tls", certificate.status)
    size_tls_buffers()
    guard = ConnectionGuard(
        ConnectionLimits(
            idle_timeout=options.webhook_idle_timeout,
            header_timeout=options.webhook_header_timeout,
            body_timeout=options.webhook_body_timeout,
            max_connections=options.webhook_max_connections,
            max_per_peer=options.webhook_max_connections_per_peer,
        )
    )
    runtimes = cluster_cache(options.kubeconfig)
    runtimes.dra = await _dra_lookup(ctx)
    entries = options.webhook_decision_cache_entries
    cache = DecisionCache(max_entries=entries, cluster_reads=runtimes.cluster_reads)
    app = build_webhook_app(
        ctx.store, guard=guard, review=runtimes.review, cache=cache if entries else None
    )
    runner = GuardedRunner(
        app,
        guard,
        access_log=None,
        shutdown_timeout=options.shutdown_timeout,
        keepalive_timeout=guard.limits.idle_timeout,
        logger=ClientMistakes(),
    )
    await runner.setup()
    site = GuardedSite(
        runner,
        options.bind_address,
        options.webhook_port,
        ssl_context=certificate.context,
        reuse_port=options.webhook_reuse_port,
    )
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(f"cannot listen on webhook port {options.webhook_port}: {exc}") from exc
    log.info("webhook listening", extra={"addresses": [list(a) for a in runner.addresses]})
    ctx.on_shutdown(lambda: drain(runner, app[IN_FLIGHT_KEY], options.shutdown_timeout))
    ctx.run_task("tls-watch", certificate.watch(options.tls_poll_interval))
    ctx.run_task("trainjob-runtimes", runtimes.run(RUNTIMES_INTERVAL))
    ctx.run_task("connection-guard", guard.watch())


async def _dra_lookup(ctx: ServeContext) -> DraLookup | None:
    """What finds DRA objects through the API with --webhook-read-dra (None without it)."""
    if not ctx.options.webhook_read_dra:
        return None
    try:
        # reads the kubeconfig (and may run its exec plugin) with blocking calls
        api = await asyncio.to_thread(api_client, ctx.options.kubeconfig)
    except Exception as exc:
        where = ctx.options.kubeconfig or "in-cluster configuration"
        raise StartupError(f"cannot configure the Kubernetes client from {where}: {exc}") from exc
    return api_dra_cache(api)


async def drain(runner: web.AppRunner, in_flight: InFlight, timeout: float) -> None:
    """Stop accepting connections, let every request already begun finish, then close."""
    for site in list(runner.sites):
        await site.stop()
    if not await in_flight.wait_idle(timeout):
        log.warning("shutdown timeout with requests in flight", extra={"count": in_flight.count})
    await runner.cleanup()
