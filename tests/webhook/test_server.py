"""POST /mutate and /validate over HTTPS: answers, errors, limits, metrics, concurrency."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import aiohttp
import pytest

from quotaguard.admission.reviews import make_review
from quotaguard.metrics.registry import REGISTRY
from quotaguard.serve.policystore import PolicyStore
from quotaguard.serve.tlsreload import ReloadingCertificate
from quotaguard.webhook.server import MAX_BODY_BYTES

from .conftest import Certificates, Client, LiveServer


def gpu_pod(gpus: str = "1", name: str = "p") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"quotaguard.dev/gpu-memory": "8Gi"}},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
        },
    }


def review_body(obj: dict[str, Any], namespace: str = "inference", uid: str = "uid-1") -> bytes:
    return json.dumps(make_review(obj, namespace=namespace, uid=uid)).encode()


def count(operation: str, kind: str, result: str) -> float:
    labels = {"operation": operation, "kind": kind, "result": result}
    return REGISTRY.get_sample_value("quotaguard_admission_requests_total", labels) or 0.0


def test_mutate_rewrites_gpu_request_as_base64_json_patch(client: Client) -> None:
    before = count("mutate", "Pod", "mutated")
    status, review = client.post("/mutate", review_body(gpu_pod(), uid="abc-123"))
    assert status == 200
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == "abc-123"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    assert any("nvidia.com/mig-1g.10gb" in json.dumps(op) for op in patch)
    assert count("mutate", "Pod", "mutated") == before + 1


def test_validate_denies_class_the_tenant_may_not_use(client: Client) -> None:
    before = count("validate", "Pod", "denied")
    status, review = client.post("/validate", review_body(gpu_pod(), uid="v-1"))
    assert status == 200
    assert review["response"]["uid"] == "v-1"
    assert review["response"]["allowed"] is False
    assert review["response"]["status"]["code"] == 403
    assert count("validate", "Pod", "denied") == before + 1


def test_object_without_gpus_is_allowed_unchanged(client: Client) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu"},
        "spec": {"containers": [{"name": "c"}]},
    }
    status, review = client.post("/mutate", review_body(pod, namespace="kube-system"))
    assert status == 200
    assert review["response"]["allowed"] is True
    assert "patch" not in review["response"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # deeper than the decoder's recursion
        (b"[]", "AdmissionReview"),
        (b'{"apiVersion": "v1", "kind": "Pod"}', "AdmissionReview"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": 7},
                }
            ).encode(),
            "uid",
        ),
        (
            review_body({**gpu_pod(), "spec": {"containers": [{"resources": {"limits": []}}]}}),
            "invalid object: request.object.spec.containers[0].resources.limits must be a map, "
            "not a list",
        ),
    ],
)
def test_malformed_request_is_a_400_with_json_error(
    client: Client, body: bytes, fragment: str
) -> None:
    before = count("mutate", "", "bad_request")
    status, answer = client.post("/mutate", body)
    assert status == 400
    assert fragment in answer["error"]
    assert count("mutate", "", "bad_request") == before + 1


def test_one_server_counts_each_answer_under_its_own_labels(client: Client) -> None:
    labels = [
        ("mutate", "Pod", "mutated"),
        ("mutate", "Pod", "allowed"),
        ("mutate", "", "bad_request"),
    ]
    before = [count(*label) for label in labels]
    no_gpus = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "main"}]}}
    for body in (review_body(gpu_pod()), review_body(no_gpus), b"{", review_body(gpu_pod())):
        client.post("/mutate", body)
    assert [count(*label) for label in labels] == [before[0] + 2, before[1] + 1, before[2] + 1]


def test_uid_that_is_not_valid_utf8_is_echoed_escaped(client: Client) -> None:
    review = make_review(gpu_pod(), namespace="inference", uid="\ud800")
    status, answer = client.post("/mutate", json.dumps(review).encode())
    assert status == 200
    assert answer["response"]["uid"] == "\ud800"


def test_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413(client: Client) -> None:
    padding = b" " * (MAX_BODY_BYTES - len(review_body(gpu_pod())))
    status, _ = client.post("/validate", review_body(gpu_pod()) + padding)
    assert status == 200
    status, answer = client.post("/validate", review_body(gpu_pod()) + padding + b" ")
    assert status == 413
    assert "error" in answer
    status, _ = client.post("/validate", review_body(gpu_pod()))
    assert status == 200


def test_unknown_path_and_wrong_method_are_json(client: Client) -> None:
    status, answer = client.post("/nope", b"{}")
    assert status == 404
    assert "error" in answer
    status, answer = client.request("GET", "/mutate")
    assert status == 405
    assert "error" in answer


def test_engine_bug_denies_with_code_500_over_http_200(
    store: PolicyStore,
    certificate: ReloadingCertificate,
    certificates: Certificates,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(policy: Any, body: object, *, operation_path: str) -> Any:
        raise KeyError("boom")

    before = count("mutate", "Pod", "error")
    with LiveServer(store, certificate, review=broken) as live:
        client = Client(live.webhook_port, certificates.client_context())
        with caplog.at_level(logging.ERROR, logger="quotaguard.webhook"):
            status, review = client.post("/mutate", review_body(gpu_pod(), uid="bug-1"))
            # Without a uid there is no review to answer: a 400, still not a 5xx.
            no_uid, _ = client.post("/mutate", b'{"request": {}}')
        client.close()
    assert status == 200
    assert review["response"] == {
        "uid": "bug-1",
        "allowed": False,
        "status": {
            "code": 500,
            "reason": "InternalError",
            "message": "quotaguard failed on this request (uid bug-1); see its log",
        },
    }
    assert no_uid == 400
    assert count("mutate", "Pod", "error") == before + 1
    failure = next(r for r in caplog.records if r.getMessage() == "admission engine failed")
    assert failure.__dict__["uid"] == "bug-1"
    assert failure.exc_info is not None


def test_no_policy_loaded_is_503(
    policy_file: Any, certificate: ReloadingCertificate, certificates: Certificates
) -> None:
    with LiveServer(PolicyStore(policy_file), certificate) as live:
        client = Client(live.webhook_port, certificates.client_context())
        status, answer = client.post("/mutate", review_body(gpu_pod()))
        client.close()
    assert status == 503
    assert "no policy loaded" in answer["error"]


def test_burst_of_500_requests_50_at_a_time_all_answered(
    server: LiveServer, certificates: Certificates
) -> None:
    async def burst() -> list[tuple[int, str, bool]]:
        connector = aiohttp.TCPConnector(limit=50, ssl=certificates.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(n: int) -> tuple[int, str, bool]:
                path = "/mutate" if n % 2 else "/validate"
                body = review_body(gpu_pod(name=f"p{n}"), uid=f"u-{n}")
                async with session.post(
                    f"https://127.0.0.1:{server.webhook_port}{path}",
                    data=body,
                    headers={"Content-Type": "application/json"},
                ) as response:
                    review = await response.json()
                    return response.status, review["response"]["uid"], review["response"]["allowed"]

            return await asyncio.gather(*(one(n) for n in range(500)))

    results = asyncio.run(burst())
    assert [status for status, _, _ in results] == [200] * 500
    assert [uid for _, uid, _ in results] == [f"u-{n}" for n in range(500)]
    # Odd requests went to /mutate (rewritten, allowed), even ones to /validate (denied).
    assert [allowed for _, _, allowed in results] == [n % 2 == 1 for n in range(500)]
    assert REGISTRY.get_sample_value("quotaguard_admission_in_flight_requests") == 0


def denials(tenant: str, reason: str) -> float:
    labels = {"tenant": tenant, "reason": reason}
    return REGISTRY.get_sample_value("quotaguard_admission_denials_total", labels) or 0.0


def test_denials_are_counted_by_tenant_and_rule(client: Client) -> None:
    before = denials("inference", "class-not-allowed")
    status, review = client.post("/validate", review_body(gpu_pod(), uid="d-1"))
    assert status == 200 and review["response"]["allowed"] is False
    assert denials("inference", "class-not-allowed") == before + 1
    # An allowed object counts no denial.
    client.post("/mutate", review_body(gpu_pod(), uid="d-2"))
    assert denials("inference", "class-not-allowed") == before + 1
