"""/metrics and /reports answer only callers the API server vouches for and allows; the probes
stay open. The API server is a fake here (`FakeReviews`: which token is whose, who may get
which path); e2e/test_reports_access.py asks a real one."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from quotaguard.reports.report_routes import report_routes
from quotaguard.serve.access import (
    AccessControl,
    Caller,
    KubernetesReviews,
    ReviewUnavailable,
    bearer_token,
)
from quotaguard.serve.components import ServeOptions, StartupError, serve
from quotaguard.serve.plain_http import build_http_app
from quotaguard.serve.policystore import PolicyStore

PROMETHEUS = Caller("system:serviceaccount:monitoring:prometheus", groups=("system:authenticated",))
TENANT = Caller("alice", groups=("tenant-a", "system:authenticated"))
TOKENS = {"prometheus-token": PROMETHEUS, "alice-token": TENANT}
RIGHTS = {
    (PROMETHEUS.username, "/metrics"),
    (PROMETHEUS.username, "/reports"),
    (PROMETHEUS.username, "/reports/quota.csv"),
}


@dataclass
class FakeReviews:
    """The API server's answers, and the questions it was asked."""

    down: bool = False
    asked: list[tuple[str, ...]] = field(default_factory=list)

    def authenticate(self, token: str) -> Caller | None:
        self.asked.append(("token", token))
        if self.down:
            raise ReviewUnavailable("connection refused")
        return TOKENS.get(token)

    def authorize(self, caller: Caller, path: str, verb: str) -> bool:
        self.asked.append(("access", caller.username, path, verb))
        if self.down:
            raise ReviewUnavailable("connection refused")
        return verb == "get" and (caller.username, path) in RIGHTS


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


def requests(
    access: AccessControl, store: PolicyStore, *calls: tuple[str, str, str | None]
) -> list[Answer]:
    """(method, path, token) each, in order, against the plain-HTTP app of `serve`."""

    async def main() -> list[Answer]:
        app = build_http_app(store, extra_routes=report_routes(None), access=access)
        answers = []
        async with TestClient(TestServer(app)) as client:
            for method, path, token in calls:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                response = await client.request(method, path, headers=headers)
                answers.append(
                    Answer(response.status, dict(response.headers), await response.text())
                )
        return answers

    return asyncio.run(main())


@pytest.fixture
def reviews() -> FakeReviews:
    return FakeReviews()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def access(reviews: FakeReviews, clock: Clock) -> AccessControl:
    return AccessControl(reviews, ttl=60, clock=clock)


def test_without_a_token_metrics_and_reports_are_401_and_the_probes_open(access, store) -> None:
    answers = requests(
        access,
        store,
        ("GET", "/metrics", None),
        ("GET", "/reports", None),
        ("GET", "/reports/quota", None),
        ("GET", "/healthz", None),
        ("GET", "/readyz", None),
    )
    assert [a.status for a in answers] == [401, 401, 401, 200, 200]
    for refused in answers[:3]:
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert refused.json() == {
            "error": "a bearer token is required (Authorization: Bearer <token>)"
        }
        assert "quotaguard_" not in refused.body


def test_a_token_the_api_server_does_not_know_is_401(access, store) -> None:
    (answer,) = requests(access, store, ("GET", "/metrics", "forged"))
    assert answer.status == 401
    assert answer.json() == {"error": "the token was not accepted by the API server"}


def test_a_known_user_without_the_right_is_403_naming_them(access, store, reviews) -> None:
    answers = requests(
        access, store, ("GET", "/metrics", "alice-token"), ("GET", "/reports/quota", "alice-token")
    )
    assert [a.status for a in answers] == [403, 403]
    assert answers[0].json() == {"error": "alice may not get /metrics"}
    assert ("access", "alice", "/reports/quota", "get") in reviews.asked


def test_an_allowed_caller_reads_metrics_and_reports(access, store) -> None:
    metrics, page, csv, other = requests(
        access,
        store,
        ("GET", "/metrics", "prometheus-token"),
        ("GET", "/reports", "prometheus-token"),
        ("GET", "/reports/quota.csv", "prometheus-token"),
        ("GET", "/reports/quota", "prometheus-token"),  # a path RIGHTS does not grant
    )
    assert metrics.status == 200 and "quotaguard_" in metrics.body
    assert page.status == 503 and "quota controller does not run" in page.body  # past access
    assert csv.status == 503 and csv.body.startswith("no quota report")
    assert other.status == 403


def test_answers_are_cached_for_the_ttl_then_asked_again(access, store, reviews, clock) -> None:
    scrape = ("GET", "/metrics", "prometheus-token")
    requests(access, store, scrape, scrape, scrape, ("HEAD", "/metrics", "prometheus-token"))
    assert reviews.asked == [
        ("token", "prometheus-token"),
        ("access", PROMETHEUS.username, "/metrics", "get"),
    ]
    clock.now += 61
    (answer,) = requests(access, store, scrape)
    assert answer.status == 200
    assert len(reviews.asked) == 4


def test_a_refusal_is_cached_too(access, store, reviews) -> None:
    forged = ("GET", "/metrics", "forged")
    assert [a.status for a in requests(access, store, forged, forged)] == [401, 401]
    assert reviews.asked == [("token", "forged")]


def test_an_unreachable_api_server_is_503_and_not_remembered(access, store, reviews) -> None:
    reviews.down = True
    scrape = ("GET", "/metrics", "prometheus-token")
    (answer,) = requests(access, store, scrape)
    assert answer.status == 503
    assert answer.json() == {"error": "cannot check the caller's access now; try again"}
    reviews.down = False
    (answer,) = requests(access, store, scrape)
    assert answer.status == 200


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic YWxhZGRpbjpvcGVu", None),
        ("", None),
    ],
)
def test_bearer_token_parsing(header: str, token: str | None) -> None:
    assert bearer_token(header) == token


@given(st.text())
def test_any_authorization_header_is_a_token_or_none(header: str) -> None:
    token = bearer_token(header)
    assert token is None or (token and token == token.strip())


# ---- the reviews as the API server is asked them ----------------------------------------------


class Recorded:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], **_: Any) -> Any:
        self.bodies.append(body)
        if isinstance(self.answer, Exception):
            raise self.answer
        return type("Response", (), {"data": json.dumps(self.answer).encode()})()


def kubernetes_reviews(token_answer: Any, access_answer: Any) -> tuple[Any, Recorded, Recorded]:
    reviews = KubernetesReviews(None)
    tokens, accesses = Recorded(token_answer), Recorded(access_answer)
    reviews._authentication = type("A", (), {"create_token_review": tokens})()
    reviews._authorization = type("B", (), {"create_subject_access_review": accesses})()
    return reviews, tokens, accesses


def test_the_token_review_names_the_user_and_the_access_review_a_non_resource_url() -> None:
    user = {
        "username": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
    }
    reviews, tokens, accesses = kubernetes_reviews(
        {"status": {"authenticated": True, "user": user}}, {"status": {"allowed": True}}
    )
    caller = reviews.authenticate("t0ken")
    assert tokens.bodies[0]["kind"] == "TokenReview"
    assert tokens.bodies[0]["spec"] == {"token": "t0ken"}
    assert caller == Caller(
        "system:serviceaccount:monitoring:prometheus",
        "u-1",
        ("system:serviceaccounts", "system:authenticated"),
        (("authentication.kubernetes.io/pod-name", ("prometheus-0",)),),
    )
    assert reviews.authorize(caller, "/reports/quota.csv", "get") is True
    assert accesses.bodies[0]["kind"] == "SubjectAccessReview"
    assert accesses.bodies[0]["spec"] == {
        "user": "system:serviceaccount:monitoring:prometheus",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
        "nonResourceAttributes": {"path": "/reports/quota.csv", "verb": "get"},
    }


def test_unauthenticated_denied_and_failed_reviews() -> None:
    reviews, _, _ = kubernetes_reviews(
        {"status": {"authenticated": False, "error": "invalid"}}, {"status": {"denied": True}}
    )
    assert reviews.authenticate("x") is None
    assert reviews.authorize(TENANT, "/metrics", "get") is False
    broken, _, _ = kubernetes_reviews(ConnectionRefusedError("refused"), ["not", "a", "review"])
    with pytest.raises(ReviewUnavailable, match="ConnectionRefusedError"):
        broken.authenticate("x")
    with pytest.raises(ReviewUnavailable, match="unexpected SubjectAccessReview"):
        broken.authorize(TENANT, "/metrics", "get")


def test_serve_without_cluster_access_says_how_to_opt_out(
    policy_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    options = ServeOptions(policy=str(policy_file), components=("reports",), http_port=0)
    assert options.reports_auth == "kubernetes"  # the default
    with pytest.raises(StartupError, match="--reports-auth none"):
        asyncio.run(serve(options, handle_signals=False))
