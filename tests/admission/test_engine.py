"""The engine end to end on AdmissionReview bodies, as the webhook server calls it."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import jsonpatch
import pytest

from quotaguard.admission import BadReview, make_review, review, review_offline
from quotaguard.admission.names import KUEUE_QUEUE_LABEL

from .builders import gpu, job, pod, template

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "admission"


def fixture(name):
    return json.loads((FIXTURES / name).read_text())


def patch_of(answer):
    return json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []


def test_mutate_a_realistic_pod(policy):
    body = fixture("pod-create-inference.json")
    answer = review(policy, body, operation_path="mutate")["response"]
    assert answer["uid"] == body["request"]["uid"]
    assert answer["allowed"]
    result = jsonpatch.apply_patch(body["request"]["object"], patch_of(answer))
    server = result["spec"]["containers"][0]["resources"]
    assert server["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"}
    assert server["requests"] == {"cpu": "2", "memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"}
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "inference"
    # and the validating webhook accepts what the mutating one produced
    validated = copy.deepcopy(body)
    validated["request"]["object"] = result
    assert review(policy, validated, operation_path="validate")["response"]["allowed"]


def test_validate_sees_the_object_as_is(policy):
    body = fixture("pod-create-inference.json")
    answer = review(policy, body, operation_path="validate")["response"]
    # unmutated, the pod still asks for a whole GPU, which inference does not allow
    assert not answer["allowed"]
    assert "class-not-allowed" in answer["auditAnnotations"]["denied"]


def test_job_fixture(policy):
    body = fixture("job-create-training.json")
    answer = review(policy, body, operation_path="mutate")["response"]
    result = jsonpatch.apply_patch(body["request"]["object"], patch_of(answer))
    assert result["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "training"}
    assert result["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }


@pytest.mark.parametrize("path", ["mutate", "validate"])
def test_unexpected_kinds_are_allowed_unchanged(policy, path):
    answer = review(policy, fixture("daemonset-create.json"), operation_path=path)["response"]
    assert answer == {"uid": "8e1d3c4b-0000-4000-8000-000000000004", "allowed": True}


def test_a_deployment_is_queued_on_the_object_and_its_pod_template(policy):
    body = fixture("deployment-create.json")
    answer = review(policy, body, operation_path="mutate")["response"]
    result = jsonpatch.apply_patch(body["request"]["object"], patch_of(answer))
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    template = result["spec"]["template"]
    assert template["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    assert template["metadata"]["annotations"]["quotaguard.dev/tenant"] == "training"


@pytest.mark.parametrize("path", ["mutate", "validate"])
def test_delete_is_allowed(policy, path):
    answer = review(policy, fixture("pod-delete.json"), operation_path=path)["response"]
    assert answer["allowed"]


def test_dry_run_gets_the_same_answer(policy):
    body = fixture("pod-create-default-dryrun.json")
    wet = copy.deepcopy(body)
    wet["request"]["dryRun"] = False
    for path in ("mutate", "validate"):
        assert review(policy, body, operation_path=path) == review(policy, wet, operation_path=path)
    assert not review(policy, body, operation_path="validate")["response"]["allowed"]


def test_namespace_falls_back_to_the_object(policy):
    body = make_review(pod(gpu(2)), namespace="")
    body["request"]["object"]["metadata"]["namespace"] = "training"
    answer = review(policy, body, operation_path="mutate")["response"]
    assert "patch" in answer


def test_malformed_body_raises_bad_review(policy):
    with pytest.raises(BadReview):
        review(policy, {"kind": "AdmissionReview"}, operation_path="mutate")


def test_mutation_denial_comes_back_from_mutate(policy):
    obj = pod(gpu(2), nodeSelector={"nvidia.com/gpu.product": "A100"})
    answer = review(policy, make_review(obj, namespace="training"), operation_path="mutate")
    assert answer["response"]["status"]["code"] == 403


def test_offline_review_chains_mutation_and_validation(policy):
    obj = job(template(gpu(1), annotations={"quotaguard.dev/gpu-memory": "8Gi"}))
    response, patched = review_offline(policy, make_review(obj, namespace="inference"))
    assert response["response"]["allowed"]
    limits = patched["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}
    assert obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": 1
    }


def test_offline_denial_keeps_mutation_warnings_and_drops_the_patch(policy):
    response, patched = review_offline(policy, make_review(pod(gpu(2)), namespace="nb-a"))
    answer = response["response"]
    assert not answer["allowed"]
    assert "shared-units" in answer["auditAnnotations"]["denied"]
    assert any("nvidia.com/gpu.shared=2" in w for w in answer["warnings"])
    assert "patch" not in answer
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 2}
