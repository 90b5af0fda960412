"""Who may read the plain-HTTP port: /metrics and /reports show every tenant's quota and usage.

As the Kubernetes ecosystem guards its metrics endpoints (kube-rbac-proxy, controller-runtime's
`WithAuthenticationAndAuthorization`): the caller sends `Authorization: Bearer <token>`; the
token is checked with a TokenReview and the user it names with a SubjectAccessReview on the
request's path as a non-resource URL (`get /metrics`, `get /reports/quota.csv`), which RBAC
grants with `nonResourceURLs: ["/metrics", "/reports", "/reports/*"]`. Both answers are cached
for `ttl` seconds, so a scrape every 30 s costs the API server two reviews a few times an hour.

- no token, or one the API server does not know: HTTP 401 with `WWW-Authenticate: Bearer`;
- a known user without the right: HTTP 403;
- the API server unreachable: HTTP 503 (not cached: the next request asks again);
- /healthz and /readyz stay open, for the kubelet's probes.

`serve --reports-auth none` serves every path to everyone, for a network the operator trusts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from cachetools import TTLCache

log = logging.getLogger("quotaguard.http")

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
DEFAULT_TTL: Final = 60.0
CACHE_SIZE: Final = 1024
# Reviews asked of the API server at once: requests with new tokens past this wait their turn
# rather than each holding a thread and a connection to the API server.
CONCURRENT_REVIEWS: Final = 4
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Caller:
    """A user as the API server's TokenReview names them."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class ReviewUnavailable(Exception):
    """The API server could not be asked (unreachable, timed out, refused the review)."""


class AccessReviews(Protocol):
    """The two questions asked of the API server; blocking, run in a worker thread."""

    def authenticate(self, token: str) -> Caller | None:
        """The user the token belongs to, None when the API server does not accept it."""
        ...

    def authorize(self, caller: Caller, path: str, verb: str) -> bool:
        """Whether `caller` may `verb` the non-resource URL `path`."""
        ...


class KubernetesReviews:
    """TokenReview and SubjectAccessReview through the kubernetes client."""

    def __init__(self, api_client: Any, *, timeout: float = 5.0) -> None:
        from kubernetes import client

        self._authentication = client.AuthenticationV1Api(api_client)
        self._authorization = client.AuthorizationV1Api(api_client)
        self._timeout = timeout

    def authenticate(self, token: str) -> Caller | None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        review = self._ask(self._authentication.create_token_review, body)
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        return Caller(
            username=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )

    def authorize(self, caller: Caller, path: str, verb: str) -> bool:
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = {key: list(values) for key, values in caller.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        review = self._ask(self._authorization.create_subject_access_review, body)
        return bool((review.get("status") or {}).get("allowed"))

    def _ask(self, create: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = create(body, _preload_content=False, _request_timeout=self._timeout)
            answer = json.loads(response.data)
        except Exception as exc:  # the client raises urllib3's and its own errors alike
            raise ReviewUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(answer, dict):
            raise ReviewUnavailable(f"unexpected {body['kind']} answer")
        return answer


class AccessControl:
    """Authentication and authorisation of the plain-HTTP port, with cached answers."""

    def __init__(
        self,
        reviews: AccessReviews,
        *,
        ttl: float = DEFAULT_TTL,
        open_paths: Iterable[str] = OPEN_PATHS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviews = reviews
        self._open = frozenset(open_paths)
        # keyed by the token's digest: the cache holds no credential
        self._callers: TTLCache[str, Caller | None] = TTLCache(CACHE_SIZE, ttl, timer=clock)
        self._decisions: TTLCache[tuple[Caller, str, str], bool] = TTLCache(
            CACHE_SIZE, ttl, timer=clock
        )
        self._asking = asyncio.Semaphore(CONCURRENT_REVIEWS)

    async def check(self, request: web.Request) -> web.Response | None:
        """None when the request may go on; otherwise the answer refusing it."""
        if request.path in self._open:
            return None
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return unauthorized("a bearer token is required (Authorization: Bearer <token>)")
        verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
        try:
            caller = await self._caller(token)
            if caller is None:
                return unauthorized("the token was not accepted by the API server")
            if not await self._allowed(caller, request.path, verb):
                message = f"{caller.username} may not {verb} {request.path}"
                return _json(403, message)
        except ReviewUnavailable as exc:
            log.warning("cannot review a caller", extra={"error": str(exc)})
            return _json(503, "cannot check the caller's access now; try again")
        return None

    async def _caller(self, token: str) -> Caller | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        if key in self._callers:
            return self._callers[key]
        async with self._asking:
            caller = await asyncio.to_thread(self._reviews.authenticate, token)
        self._callers[key] = caller
        return caller

    async def _allowed(self, caller: Caller, path: str, verb: str) -> bool:
        key = (caller, path, verb)
        found = self._decisions.get(key)
        if found is not None:
            return found
        async with self._asking:
            allowed = await asyncio.to_thread(self._reviews.authorize, caller, path, verb)
        self._decisions[key] = allowed
        return allowed

    def middleware(self) -> Middleware:
        @web.middleware
        async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
            refused = await self.check(request)
            return refused if refused is not None else await handler(request)

        return guarded


def bearer_token(header: str) -> str | None:
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def unauthorized(message: str) -> web.Response:
    response = _json(401, message)
    response.headers["WWW-Authenticate"] = 'Bearer realm="quotaguard"'
    return response


def _json(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
