"""Owner references are believed only from the controllers that create such objects: a Pod
that names a Job as its owner is otherwise judged as a bare Pod (rewritten, queued, validated)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from quotaguard.admission import review_offline
from quotaguard.admission.names import KUEUE_QUEUE_LABEL
from quotaguard.admission.owners import KUBE_CONTROLLERS
from quotaguard.admission.sparse import decode_review_body

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def forged() -> dict:
    return json.loads((HOSTILE / "pod-forged-owner.json").read_text())


def as_user(body: dict, username: str | None) -> dict:
    body = copy.deepcopy(body)
    if username is None:
        del body["request"]["userInfo"]
    else:
        body["request"]["userInfo"] = {"username": username}
    return body


@pytest.mark.parametrize(
    "username", ["alice@example.com", None, "system:serviceaccount:training:default"]
)
def test_a_forged_owner_is_judged_as_a_bare_pod(policy, username):
    """A tenant's Pod with 8 GPUs and an owner reference to a CPU-only Job gets the tenant's
    queue and the class's nodes, as a bare Pod would."""
    response, patched = review_offline(policy, as_user(forged(), username))
    assert response["response"]["allowed"]
    assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    assert patched["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_a_forged_owner_is_validated_as_a_bare_pod(policy):
    """In a namespace whose tenant allows one shared GPU per pod, the forged Pod is rewritten
    to the shared class and refused for asking eight units of it."""
    body = forged()
    body["request"]["namespace"] = "nb-alice"
    body["request"]["object"]["metadata"]["namespace"] = "nb-alice"
    response, _ = review_offline(policy, body)
    answer = response["response"]
    assert not answer["allowed"]
    assert "shared class" in answer["status"]["message"]
    assert "maxGPUsPerPod" in answer["status"]["message"]


@pytest.mark.parametrize("username", sorted(KUBE_CONTROLLERS))
def test_pods_of_the_real_job_controller_pass_untouched(policy, username):
    response, patched = review_offline(policy, as_user(forged(), username))
    assert response["response"]["allowed"]
    assert "patch" not in response["response"]
    assert patched == forged()["request"]["object"]


def test_an_operator_listed_in_trusted_controllers_is_believed(make_policy):
    operator = "system:serviceaccount:jobset-system:jobset-controller-manager"
    body = as_user(forged(), operator)
    body["request"]["object"]["metadata"]["ownerReferences"][0].update(
        apiVersion="jobset.x-k8s.io/v1alpha2", kind="JobSet"
    )
    untrusting = make_policy()
    assert "patch" in review_offline(untrusting, body)[0]["response"]
    trusting = make_policy(trustedControllers=[operator])
    assert "patch" not in review_offline(trusting, body)[0]["response"]


def test_a_trusted_creator_without_the_tenant_stamp_is_decided(policy):
    """A Pod of a Job whose template admission never saw (no stamp) is decided like any other."""
    body = as_user(forged(), JOB_CONTROLLER)
    del body["request"]["object"]["metadata"]["annotations"]
    _, patched = review_offline(policy, body)
    assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"


def test_the_sparse_decoder_keeps_who_is_asking():
    body = as_user(forged(), JOB_CONTROLLER)
    decoded = decode_review_body(json.dumps(body).encode())
    assert decoded["request"]["userInfo"] == {"username": JOB_CONTROLLER}


@pytest.mark.parametrize("user_info", [None, "job-controller", {"username": 7}, {"groups": []}])
def test_an_odd_user_info_is_no_trust(policy, user_info):
    body = forged()
    body["request"]["userInfo"] = user_info
    _, patched = review_offline(policy, body)
    assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
