"""The live webhook and the offline path give the same answer, byte for byte.

Every request below goes over TLS to the aiohttp server and, as bytes, to
`admission.answers.answer` (what `review`, `test` and `simulate` build on): status and body must
match exactly, for allowed, mutated, denied, oversized, malformed, not-an-AdmissionReview, engine
failures and no policy loaded. The mutate-then-validate chain of `answer_offline` must give what
the live /mutate and /validate give one after the other.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaguard.admission import answers, engine
from quotaguard.admission.answers import MAX_CONTAINERS, answer, answer_offline
from quotaguard.admission.reviews import make_review
from quotaguard.serve.policystore import PolicyStore

from .conftest import Certificates, LiveServer, loaded_certificate, loaded_sample_store

BROKEN_UID = "engine-bug"


def engine_with_a_bug(policy: Any, body: object, *, operation_path: Any) -> Any:
    """The real engine, failing on one uid (and on any review without one) as a bug would."""
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    if uid in (BROKEN_UID, None):
        raise KeyError("a bug")
    return engine.review(policy, body, operation_path=operation_path)


class RawClient:
    """Status and body bytes exactly as the server sent them."""

    def __init__(self, port: int, certificates: Certificates) -> None:
        context = certificates.client_context()
        self.connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        return response.status, response.read()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RawClient, PolicyStore]]:
    certificates = Certificates(tmp_path_factory.mktemp("same"))
    store = loaded_sample_store()
    with LiveServer(store, loaded_certificate(certificates), review=engine_with_a_bug) as server:
        yield RawClient(server.webhook_port, certificates), store


def gpu_pod(containers: int = 1, gpus: Any = "1", **labels: Any) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels or {"app": "x"}},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "x", "resources": resources} for i in range(containers)
            ]
        },
    }


def body_of(obj: dict[str, Any], namespace: str = "training", uid: str = "u-1") -> bytes:
    return json.dumps(make_review(obj, namespace=namespace, uid=uid)).encode()


REQUESTS: dict[str, bytes] = {
    "allowed, nothing to do": body_of(gpu_pod(gpus="0")),
    "rewritten": body_of(gpu_pod(), namespace="inference"),
    "denied": body_of(gpu_pod(gpus="1.5")),
    "over the container limit": body_of(gpu_pod(MAX_CONTAINERS + 1)),
    "at the container limit": body_of(gpu_pod(MAX_CONTAINERS)),
    "not JSON": b'{"apiVersion": ',
    "not an AdmissionReview": b'{"apiVersion": "v1", "kind": "Pod"}',
    "a field of the wrong type": body_of({**gpu_pod(), "metadata": {"labels": ["a"]}}),
    "engine bug": body_of(gpu_pod(), uid=BROKEN_UID),
    "engine bug without a uid": b'{"request": {}}',
    "a lone surrogate": body_of(gpu_pod(app="\ud800")),
}


@pytest.mark.parametrize("path", ["mutate", "validate"])
@pytest.mark.parametrize("name", list(REQUESTS))
def test_the_live_webhook_answers_as_the_offline_path(live, name: str, path: Any) -> None:
    client, store = live
    offline = answer(store.policy, REQUESTS[name], path, review=engine_with_a_bug)
    assert client.post(f"/{path}", REQUESTS[name]) == (offline.status, offline.body)
    assert offline.status in (200, 400)


def test_no_policy_loaded_is_the_same_503(tmp_path: Path) -> None:
    certificates = Certificates(tmp_path)
    unloaded = PolicyStore(tmp_path / "policy.yaml")
    with LiveServer(unloaded, loaded_certificate(certificates)) as server:
        client = RawClient(server.webhook_port, certificates)
        sent = client.post("/mutate", REQUESTS["rewritten"])
    offline = answer(None, REQUESTS["rewritten"], "mutate", policy_source=str(unloaded.path))
    assert sent == (offline.status, offline.body)
    assert offline.status == 503


def _chained(client: RawClient, body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """/mutate, the patch applied as the API server would, then /validate."""
    review = json.loads(body)
    original = review["request"]["object"]
    _, mutated = client.post("/mutate", body)
    response = json.loads(mutated)["response"]
    if not response["allowed"]:
        return response, original
    patch = json.loads(base64.b64decode(response.get("patch", "W10=")))
    stored = jsonpatch.apply_patch(original, patch)
    review["request"]["object"] = stored
    _, validated = client.post("/validate", json.dumps(review).encode())
    verdict = json.loads(validated)["response"]
    if not verdict["allowed"]:
        return verdict, original
    return {**response, **verdict, "patch": response.get("patch")}, stored


@pytest.mark.parametrize(
    "name", ["rewritten", "denied", "over the container limit", "at the container limit"]
)
def test_review_and_test_answer_as_the_webhook_chain(live, name: str) -> None:
    client, store = live
    response, stored = answer_offline(store.policy, json.loads(REQUESTS[name]))
    live_response, live_stored = _chained(client, REQUESTS[name])
    assert stored == live_stored
    assert response["response"]["allowed"] == live_response["allowed"]
    assert response["response"].get("status") == live_response.get("status")
    assert response["response"].get("patch") == live_response.get("patch")


def test_an_engine_bug_offline_is_the_webhook_s_500_denial(live, monkeypatch) -> None:
    client, store = live

    def failing(*_: object, **__: object) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(answers, "review_offline", failing)
    response, _ = answer_offline(store.policy, json.loads(REQUESTS["engine bug"]))
    _, sent = client.post("/mutate", REQUESTS["engine bug"])
    assert response == json.loads(sent)
    assert response["response"]["status"]["code"] == 500


json_leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
objects = st.fixed_dictionaries(
    {"apiVersion": st.just("v1"), "kind": st.just("Pod")},
    optional={"metadata": json_values, "spec": json_values},
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(obj=objects, namespace=st.sampled_from(["training", "inference", "kube-system"]))
def test_any_pod_gets_the_same_bytes_live_and_offline(live, obj, namespace) -> None:
    client, store = live
    body = body_of(obj, namespace=namespace)
    for path in ("mutate", "validate"):
        offline = answer(store.policy, body, path, review=engine_with_a_bug)
        assert client.post(f"/{path}", body) == (offline.status, offline.body)
