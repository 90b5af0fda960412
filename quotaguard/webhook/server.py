"""The admission webhook over HTTP: read the body, answer it, count. Nothing else.

Every answer (AdmissionReviews, denials past the size limit, internal errors, bad requests,
"no policy yet") comes from `quotaguard.admission.answers`, the same one `review`, `test` and
`simulate` give; this module reads bodies within their deadline, keeps large ones off the event
loop, guards connections and counts what it answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from quotaguard.admission import answers
from quotaguard.admission.answers import MAX_CONTAINERS, Answer, ReviewFunction
from quotaguard.admission.decision_cache import DecisionCache
from quotaguard.admission.engine import OperationPath, review
from quotaguard.metrics.serve_metrics import (
    ADMISSION_DENIALS,
    ADMISSION_DURATION,
    ADMISSION_IN_FLIGHT,
    ADMISSION_REQUESTS,
    WEBHOOK_DECISION_CACHE_BYTES,
    WEBHOOK_DECISION_CACHE_ENTRIES,
    WEBHOOK_DECISION_CACHE_HITS,
    WEBHOOK_DECISION_CACHE_MISSES,
)
from quotaguard.serve.policystore import PolicyStore
from quotaguard.webhook.guard import ConnectionGuard, ConnectionLimits, read_body

log = logging.getLogger("quotaguard.webhook")

MAX_BODY_BYTES: Final = 7 * 1024 * 1024
# Bodies past this are decided in a worker thread, so that one large review never holds the
# event loop (and every other review on it) for its whole decoding and decision.
THREAD_BODY_BYTES: Final = 256 * 1024

Operation = OperationPath
__all__ = [
    "IN_FLIGHT_KEY",
    "MAX_BODY_BYTES",
    "MAX_CONTAINERS",
    "InFlight",
    "ReviewFunction",
    "answer",
    "build_webhook_app",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class InFlight:
    """Requests between arrival and answer, body upload included. aiohttp's own shutdown stops
    reading from connections at once, so a request whose body is still arriving would be lost;
    `serve` stops listening, waits for this to reach zero, and only then closes connections."""

    # Across every webhook app of the process; the gauge reads it when scraped, so that a
    # request does not pay for two locked gauge updates.
    total: ClassVar[int] = 0

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.count += 1
        InFlight.total += 1
        self._idle.clear()

    def leave(self) -> None:
        self.count -= 1
        InFlight.total -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """True once nothing is in flight; False if `timeout` seconds pass first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True


IN_FLIGHT_KEY: Final = web.AppKey("quotaguard.in_flight", InFlight)
ADMISSION_IN_FLIGHT.set_function(lambda: InFlight.total)


def build_webhook_app(
    store: PolicyStore,
    *,
    review: ReviewFunction = review,
    guard: ConnectionGuard | None = None,
    cache: DecisionCache | None = None,
) -> web.Application:
    """POST /mutate and POST /validate; every error answer is JSON. With `guard`, connections
    are marked busy while handled (see `guard`) and bodies must arrive within its timeout. With
    `cache`, identical requests are answered from it (its `cluster_reads` must count every read
    of cluster state `review` makes)."""
    middlewares: list[Middleware] = [_json_errors]
    if guard is not None:
        middlewares.insert(0, guard.middleware())
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    in_flight = app[IN_FLIGHT_KEY] = InFlight()
    body_timeout = (guard.limits if guard is not None else ConnectionLimits()).body_timeout
    operations: tuple[Operation, ...] = ("mutate", "validate")
    if cache is not None:
        WEBHOOK_DECISION_CACHE_ENTRIES.set_function(lambda: cache.entries)
        WEBHOOK_DECISION_CACHE_BYTES.set_function(lambda: cache.size_bytes)
    for operation in operations:
        handler = _endpoint(store, review, operation, in_flight, body_timeout, cache)
        app.router.add_post(f"/{operation}", handler)
    return app


def _endpoint(
    store: PolicyStore,
    review: ReviewFunction,
    operation: Operation,
    in_flight: InFlight,
    body_timeout: float,
    cache: DecisionCache | None,
) -> Handler:
    duration = ADMISSION_DURATION.labels(operation)
    cache_counters = {
        "hit": WEBHOOK_DECISION_CACHE_HITS.labels(operation),
        "miss": WEBHOOK_DECISION_CACHE_MISSES.labels(operation),
    }
    # Label children bound once per (kind, result): `.labels()` hashes and locks on every call.
    counters: dict[tuple[str, str], Any] = {}

    def count(kind: str, result: str) -> None:
        counter = counters.get((kind, result))
        if counter is None:
            counter = counters[kind, result] = ADMISSION_REQUESTS.labels(operation, kind, result)
        counter.inc()

    workers = asyncio.Semaphore(2)  # large reviews decided at once, each in its own thread

    async def handle(request: web.Request) -> web.Response:
        in_flight.enter()
        try:
            try:
                # 413 past client_max_size, even if compressed
                body = await read_body(request, body_timeout)
            except web.HTTPRequestEntityTooLarge:
                count("", "bad_request")
                raise
            except TimeoutError:
                log.info("request body too slow", extra={"timeout": body_timeout})
                return respond(answers.body_too_slow(body_timeout))
            except Exception as exc:  # a body that is not what its headers say (e.g. gzip)
                log.info("unreadable request body", extra={"error": answers.short(exc)})
                return respond(answers.body_unreadable(exc))
            started = time.perf_counter()
            if len(body) > THREAD_BODY_BYTES:
                async with workers:
                    decided = await asyncio.to_thread(answer, store, review, operation, body, cache)
            else:
                decided = answer(store, review, operation, body, cache)
            duration.observe(time.perf_counter() - started)
            if decided.cached:
                cache_counters[decided.cached].inc()
            for tenant, rule in decided.denials:
                ADMISSION_DENIALS.labels(tenant, rule).inc()
            return respond(decided)
        finally:
            in_flight.leave()

    def respond(decided: Answer) -> web.Response:
        count(decided.kind, decided.result)
        return web.Response(
            status=decided.status, body=decided.body, content_type="application/json"
        )

    return handle


def answer(
    store: PolicyStore,
    review: ReviewFunction,
    operation: Operation,
    body: bytes,
    cache: DecisionCache | None = None,
) -> Answer:
    """The answer to one request body, with the policy the store holds now."""
    policy = store.policy if store.ready else None
    source = str(store.path)
    return answers.answer(policy, body, operation, review=review, policy_source=source, cache=cache)


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own errors (404, 405, 413) as JSON, like ours."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        message = f"{request.method} {request.path}: {exc.reason}"
        return web.Response(
            status=exc.status,
            body=answers.error_json(message),
            content_type="application/json",
            headers=headers,
        )
