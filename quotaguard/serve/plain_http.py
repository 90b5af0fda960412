"""The plain-HTTP side of `serve`: /metrics, /healthz, /readyz, plus routes other components add.

/metrics and the routes added (/reports) answer only callers `serve.access` lets in, unless
`serve --reports-auth none`; the probes' /healthz and /readyz are always open.

Readiness is the conjunction of named checks; each returns None when ready or the reason it is
not, and /readyz reports every reason so `kubectl describe` shows what is missing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from quotaguard.metrics.registry import REGISTRY
from quotaguard.serve.access import AccessControl
from quotaguard.serve.policystore import PolicyStore

log = logging.getLogger("quotaguard.http")

ReadinessCheck = Callable[[], str | None]
"""None when this part of the process is ready, otherwise why it is not."""

STORE_KEY = web.AppKey("quotaguard.policy_store", PolicyStore)
"""Route handlers added through `extra_routes` find the policy store at `request.app[STORE_KEY]`."""


def policy_readiness(store: PolicyStore) -> ReadinessCheck:
    def check() -> str | None:
        if store.ready:
            return None
        return store.last_error or f"policy {store.path} not loaded yet"

    return check


StatusReport = Callable[[], object]
"""What one part of the process reports on /readyz beside readiness (e.g. certificate expiry)."""


def policy_status(store: PolicyStore) -> dict[str, object]:
    in_force = store.policy.name if store.ready else None
    return {"name": in_force, "generation": store.generation, "lastRefused": store.last_error}


def build_http_app(
    store: PolicyStore,
    *,
    extra_routes: Iterable[web.AbstractRouteDef] = (),
    readiness_checks: Mapping[str, ReadinessCheck] | None = None,
    status_reports: Mapping[str, StatusReport] | None = None,
    registry: CollectorRegistry = REGISTRY,
    access: AccessControl | None = None,
) -> web.Application:
    """The HTTP application; the policy check is always part of readiness. With `access`,
    every path but the probes' answers only the callers it lets in (`serve.access`)."""
    checks: dict[str, ReadinessCheck] = {"policy": policy_readiness(store)}
    checks.update(readiness_checks or {})

    async def metrics(request: web.Request) -> web.Response:
        # `name[]=...` asks for some series only, as Prometheus' client libraries serve it:
        # a poller of a few counters skips rendering thousands of per-tenant quota series
        names = request.query.getall("name[]", [])
        source = registry.restricted_registry(names) if names else registry
        # off the event loop: at 300 tenants the quota series take ~0.2 s to render
        response = web.Response(body=await asyncio.to_thread(generate_latest, source))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    reports: dict[str, StatusReport] = {"policy": lambda: policy_status(store)}
    reports.update(status_reports or {})

    async def readyz(_: web.Request) -> web.Response:
        reasons = {name: reason for name, check in checks.items() if (reason := _run(check))}
        status = {name: report() for name, report in reports.items()}
        if reasons:
            body = {"ready": False, "reasons": reasons, **status}
            return web.json_response(body, status=503)
        return web.json_response({"ready": True, "generation": store.generation, **status})

    app = web.Application(middlewares=[access.middleware()] if access is not None else [])
    app[STORE_KEY] = store
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_routes(list(extra_routes))
    return app


def _run(check: ReadinessCheck) -> str | None:
    try:
        return check()
    except Exception as exc:
        log.exception("readiness check failed")
        return f"readiness check failed: {type(exc).__name__}: {exc}"
