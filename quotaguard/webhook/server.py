"""The admission webhook over HTTP: decode, call the admission engine, encode. Nothing else.

The engine decides; this module only adapts. Three kinds of failure, three answers:

- The request is bad (body over 7 MiB, not JSON, not an AdmissionReview): HTTP 413/400 with a
  JSON `{"error": ...}`. The API server reports it and the registration's failurePolicy applies,
  which is right: there is no object we could have judged.
- The object is bad: an ordinary denial inside an HTTP 200 AdmissionReview (the engine's answer).
- The engine itself fails on a well-formed review (a bug in quotaguard): logged with the uid and
  answered as HTTP 200 with `allowed: false`, `status.code: 500`. Answering HTTP 500 instead would
  hand the decision to failurePolicy, and with `Ignore` an un-rewritten GPU pod would slip past
  the quota rewrite unseen. A denial is deterministic, names the uid to look for in our log, and
  the user sees an error they can retry once the policy or the code is fixed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final, Literal, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware

from quotaguard.admission import engine
from quotaguard.admission.reviews import AdmissionReview, BadReview, encode_json
from quotaguard.admission.sparse import decode_review_body
from quotaguard.metrics.serve_metrics import (
    ADMISSION_DENIALS,
    ADMISSION_DURATION,
    ADMISSION_IN_FLIGHT,
    ADMISSION_REQUESTS,
)
from quotaguard.policy.model import TenantPolicy
from quotaguard.serve.policystore import PolicyStore
from quotaguard.webhook.guard import ConnectionGuard, ConnectionLimits, read_body

log = logging.getLogger("quotaguard.webhook")

MAX_BODY_BYTES: Final = 7 * 1024 * 1024
# Containers (all kinds, every pod template) one object may hold. Kubernetes sets no limit, but
# a 2.5 MiB Pod of 24,000 GPU containers would cost seconds of CPU and a 13 MiB patch; past
# this the object is denied with a message saying so (docs/deploy.md lists it).
MAX_CONTAINERS: Final = 256
# Bodies past this are decided in a worker thread, so that one large review never holds the
# event loop (and every other review on it) for its whole decoding and decision.
THREAD_BODY_BYTES: Final = 256 * 1024
_CONTAINER_KEYS: Final = frozenset({"containers", "initContainers", "ephemeralContainers"})
_NESTED: Final = (dict, list)  # a tuple: `dict | list` builds a union object on every test
ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
# Object kinds get their own metric label; anything else is "other", so that a client sending
# made-up kinds cannot grow the number of series without bound.
KNOWN_KINDS: Final = frozenset({"Pod", "Job", "JobSet"})

Operation = Literal["mutate", "validate"]


class ReviewFunction(Protocol):
    def __call__(
        self, policy: TenantPolicy, body: object, *, operation_path: Operation
    ) -> AdmissionReview: ...


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
    review: ReviewFunction = engine.review,
    guard: ConnectionGuard | None = None,
) -> web.Application:
    """POST /mutate and POST /validate; every error answer is JSON. With `guard`, connections
    are marked busy while handled (see `guard`) and bodies must arrive within its timeout."""
    middlewares: list[Middleware] = [_json_errors]
    if guard is not None:
        middlewares.insert(0, guard.middleware())
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    in_flight = app[IN_FLIGHT_KEY] = InFlight()
    body_timeout = (guard.limits if guard is not None else ConnectionLimits()).body_timeout
    operations: tuple[Operation, ...] = ("mutate", "validate")
    for operation in operations:
        handler = _endpoint(store, review, operation, in_flight, body_timeout)
        app.router.add_post(f"/{operation}", handler)
    return app


def _endpoint(
    store: PolicyStore,
    review: ReviewFunction,
    operation: Operation,
    in_flight: InFlight,
    body_timeout: float,
) -> Handler:
    duration = ADMISSION_DURATION.labels(operation)
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
                count("", "bad_request")
                log.info("request body too slow", extra={"timeout": body_timeout})
                message = _error(f"request body not received within {body_timeout:g}s")
                return web.Response(status=408, body=message, content_type="application/json")
            except Exception as exc:  # a body that is not what its headers say (e.g. gzip)
                count("", "bad_request")
                log.info("unreadable request body", extra={"error": _short(exc)})
                message = _error(f"request body unreadable: {_short(exc)}")
                return web.Response(status=400, body=message, content_type="application/json")
            started = time.perf_counter()
            if len(body) > THREAD_BODY_BYTES:
                async with workers:
                    decided = await asyncio.to_thread(answer, store, review, operation, body)
            else:
                decided = answer(store, review, operation, body)
            status, payload, kind, result = decided
            duration.observe(time.perf_counter() - started)
            count(kind, result)
            return web.Response(status=status, body=payload, content_type="application/json")
        finally:
            in_flight.leave()

    return handle


def answer(
    store: PolicyStore, review: ReviewFunction, operation: Operation, body: bytes
) -> tuple[int, bytes, str, str]:
    """(HTTP status, JSON body, kind label, result label) for one request body."""
    if not store.ready:
        return 503, _error(f"no policy loaded from {store.path} yet"), "", "error"
    policy = store.policy
    try:
        document = decode_review_body(body)
    except (ValueError, RecursionError) as exc:
        return 400, _error(f"request body is not JSON: {_short(exc)}"), "", "bad_request"
    containers = _container_count(_request_field(document, "object"))
    uid = _uid(document)
    if containers > MAX_CONTAINERS and uid is not None:
        return 200, _encode(too_many_containers_review(uid, containers)), _kind(document), "denied"
    try:
        response = review(policy, document, operation_path=operation)
        payload = _encode(response)
    except BadReview as exc:
        return 400, _error(f"{exc.problem}: {_short(exc)}"), "", "bad_request"
    except Exception:
        uid = _uid(document)
        log.exception("admission engine failed", extra={"uid": uid, "operation": operation})
        if uid is None:
            return 400, _error("not an AdmissionReview: request.uid missing"), "", "bad_request"
        return 200, _encode(internal_error_review(uid)), _kind(document), "error"
    result = _result(response)
    if result == "denied":
        for tenant, reason in denial_labels(response):
            ADMISSION_DENIALS.labels(tenant, reason).inc()
    return 200, payload, _kind(document), result


def _container_count(obj: Any) -> int:
    """Containers anywhere in an object (pod templates of every kind), without recursion."""
    total = 0
    pending = [obj]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(value, _NESTED):
                    continue  # most values are strings: one test for them
                if key in _CONTAINER_KEYS and isinstance(value, list):
                    total += len(value)
                else:
                    pending.append(value)
        elif isinstance(node, list):
            pending.extend(item for item in node if isinstance(item, _NESTED))
    return total


def too_many_containers_review(uid: str, containers: int) -> AdmissionReview:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {
                "code": 403,
                "reason": "Forbidden",
                "message": f"quotaguard reviews at most {MAX_CONTAINERS} containers per object; "
                f"this one has {containers}: split the workload",
            },
        },
    }


def internal_error_review(uid: str) -> AdmissionReview:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {
                "code": 500,
                "reason": "InternalError",
                "message": f"quotaguard failed on this request (uid {uid}); see its log",
            },
        },
    }


_encode: Final = encode_json


def _error(message: str) -> bytes:
    return _encode({"error": message})


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _request_field(document: Any, name: str) -> Any:
    request = document.get("request") if isinstance(document, dict) else None
    return request.get(name) if isinstance(request, dict) else None


def _uid(document: Any) -> str | None:
    uid = _request_field(document, "uid")
    return uid if isinstance(uid, str) and uid else None


def _kind(document: Any) -> str:
    kind = _request_field(document, "kind")
    name = kind.get("kind") if isinstance(kind, dict) else None
    return name if isinstance(name, str) and name in KNOWN_KINDS else "other"


def denial_labels(review: AdmissionReview) -> list[tuple[str, str]]:
    """(tenant, rule) of each rule that denied the object, from the response's audit
    annotations: tenants come from the policy and rules from a fixed list, so the series stay
    bounded whatever clients send."""
    response = review.get("response")
    audit = response.get("auditAnnotations", {}) if response is not None else {}
    tenant = audit.get("tenant", "")
    return [(tenant, rule) for rule in audit.get("denied", "").split(",") if rule]


def _result(review: AdmissionReview) -> str:
    response = review.get("response")
    if response is None or not response.get("allowed"):
        return "denied"
    return "mutated" if response.get("patch") else "allowed"


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
            body=_error(message),
            content_type="application/json",
            headers=headers,
        )
