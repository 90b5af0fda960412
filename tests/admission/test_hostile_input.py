"""A tenant who wants more GPUs than the policy gives spells the request oddly. Each spelling is
decided as the API server stores it: a quantity by its value (what the scheduler counts), a
resource name exactly (the device plugin's name is case-sensitive; any other spelling is a
resource no class governs), and a body with duplicate keys or escaped keys as Go's decoder
reads it (the last duplicate wins, escapes are the characters they stand for), by the sparse
decoder and the whole one alike.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from quotaguard.admission.answers import answer, answer_offline
from quotaguard.admission.sparse import decode_review_body

from .builders import gpu, pod

DECIDED = "quotaguard.dev/decided-gpus"
# A review body for one container's `resources`, written as raw JSON text.
BODY = (
    '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
    '"operation":"CREATE","namespace":"inference","userInfo":{"username":"alice"},'
    '"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"inference"},'
    '"spec":{"containers":[{"name":"main","resources":%s}]}}}}'
)


def judged(policy: Any, body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The /mutate and /validate answers to `body` (validation of the object as sent: what
    the tests look at is what each counts, not the rewrite)."""
    found = []
    for path in ("mutate", "validate"):
        reply = answer(policy, body, path)  # type: ignore[arg-type]
        assert reply.status == 200, reply.body
        found.append(json.loads(reply.body)["response"])
    return found[0], found[1]


def decided_gpus(mutated: dict[str, Any]) -> str:
    """The decision record the mutation's patch writes."""
    for op in json.loads(base64.b64decode(mutated["patch"])):
        if op["path"] == "/metadata/annotations":
            return str(op["value"][DECIDED])
        if op["path"] == "/metadata/annotations/" + DECIDED.replace("/", "~1"):
            return str(op["value"])
    raise AssertionError("no decision recorded")


def review(obj: dict[str, Any], namespace: str = "inference") -> bytes:
    obj["metadata"]["namespace"] = namespace
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "operation": "CREATE",
                "namespace": namespace,
                "userInfo": {"username": "alice"},
                "object": obj,
            },
        }
    ).encode()


@pytest.mark.parametrize(
    ("amount", "counted"),
    [("1000m", 1), ("1e0", 1), ("+4", 4), ("4.0", 4), (4.0, 4), ("1e3", 1000), ("2Ki", 2048)],
)
def test_a_quantity_counts_what_it_is_worth(policy, amount, counted):
    """inference allows 1 GPU-equivalent per pod, 3/7 per mig-3g.40gb: whatever the spelling,
    two slices pass and more are refused."""
    response, _ = answer_offline(policy, json.loads(review(pod(gpu(amount)))))
    verdict = response["response"]
    assert decided_gpus(judged(policy, review(pod(gpu(amount))))[0]) == (
        f"main=nvidia.com/mig-3g.40gb:{counted}"
    )
    assert verdict["allowed"] is (counted <= 2)
    if counted > 2:
        assert verdict["auditAnnotations"]["denied"] == "max-gpus-per-pod"


@pytest.mark.parametrize("amount", ["0.5", "0x4", "99999999999999999999", "1/2", "-1", "Infinity"])
def test_an_amount_that_is_no_whole_gpu_is_refused(policy, amount):
    _, validated = judged(policy, review(pod(gpu(amount))))
    assert not validated["allowed"]
    assert "gpu-value" in validated["auditAnnotations"]["denied"]


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA.com/gpu",
        "nvidia.com/GPU",
        "nvidia.com/gpu ",
        "nvidia.com//gpu",
        "nvidia\u3002com/gpu",
    ],
)
def test_a_gpu_name_spelt_otherwise_is_not_taken_for_no_gpu(policy, name):
    """No node offers it (the device plugin's name is exact), but it is not passed as a pod
    without GPUs either: it is refused as a GPU no class governs."""
    _, validated = judged(policy, review(pod(gpu(8, name)), "training"))
    assert not validated["allowed"]
    assert validated["auditAnnotations"]["denied"] == "gpu-not-governed"
    assert "no queue's quota counts it" in validated["status"]["message"]


@pytest.mark.parametrize(
    ("resources", "gpus"),
    [
        ('{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpu":"8"}}', "8"),
        ('{"limits":{"nvidia.com/gpu":"8","nvidia.com/gpu":"1"}}', "1"),
        ('{"limits":{"nvidia\\u002ecom/gpu":"8"}}', "8"),
        ('{"limits":{"\\u006evidia.com\\/gpu":"2"}}', "2"),
        ('{"limits":{"cpu":"1"}},"resources":{"limits":{"nvidia.com/gpu":"8"}}', "8"),
    ],
)
def test_duplicate_and_escaped_keys_are_read_as_go_reads_them(policy, resources, gpus):
    """The API server decodes the tenant's JSON (the last duplicate wins) and sends its own
    encoding; were a body like this to reach the webhook, it decides on what Go would keep."""
    body = (BODY % resources).encode()
    sparse = decode_review_body(body)["request"]["object"]["spec"]
    assert sparse == json.loads(body)["request"]["object"]["spec"]
    assert sparse["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": gpus}
    mutated, _ = judged(policy, body)
    assert decided_gpus(mutated) == f"main=nvidia.com/mig-3g.40gb:{gpus}"
