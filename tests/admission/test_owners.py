"""Owner references are believed only from the controller of the owner's kind. A Pod that names
a kind Kueue manages (a Job) as its controller is refused from anyone else, since Kueue would
neither gate nor account it; one that names another owner kind is judged as a bare Pod
(rewritten, queued, validated)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from quotaguard.admission import review_offline
from quotaguard.admission.names import DECIDED_ANNOTATION, KUEUE_QUEUE_LABEL
from quotaguard.admission.owners import KUBE_CONTROLLERS
from quotaguard.admission.sparse import decode_review_body
from quotaguard.policy.loader import PolicyInvalid

from .builders import recorded

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


def owned_by(body: dict, kind: str, api_version: str) -> dict:
    body = copy.deepcopy(body)
    body["request"]["object"]["metadata"]["ownerReferences"][0].update(
        apiVersion=api_version, kind=kind
    )
    return body


def decided(body: dict) -> dict:
    """The Pod as a controller makes it from a decided template: with the decision record."""
    body = copy.deepcopy(body)
    body["request"]["object"] = recorded(body["request"]["object"])
    return body


def refusal(policy, body: dict) -> str:
    response, _ = review_offline(policy, body)
    answer = response["response"]
    assert not answer["allowed"]
    assert answer["auditAnnotations"]["denied"] == "owner-not-controller"
    message: str = answer["status"]["message"]
    return message


USERS = ["alice@example.com", None, "system:serviceaccount:training:default"]


@pytest.mark.parametrize("username", USERS)
def test_a_pod_a_tenant_makes_for_a_kueue_managed_job_is_refused(policy, username):
    """Kueue accounts a Job's pods through the Job and does not gate them: a tenant's own GPU
    Pod naming a Job as its controller would run outside the queue."""
    message = refusal(policy, as_user(decided(forged()), username))
    assert 'names Job "cpu-only-etl" as its controller' in message
    assert JOB_CONTROLLER in message
    assert "create it without that ownerReference" in message


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        ("ReplicaSet", "apps/v1"),  # Kueue walks through it to a Deployment
        ("StatefulSet", "apps/v1"),
        ("JobSet", "jobset.x-k8s.io/v1alpha2"),
        ("RayCluster", "ray.io/v1"),
        ("PyTorchJob", "kubeflow.org/v1"),
        ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1"),
        ("Pod", "v1"),
    ],
)
def test_every_kueue_managed_owner_kind_is_kept_for_its_controller(policy, kind, api_version):
    refusal(policy, owned_by(forged(), kind, api_version))


@pytest.mark.parametrize("username", USERS)
def test_an_owner_kueue_does_not_manage_is_judged_as_a_bare_pod(policy, username):
    """A CronJob's objects are queued on their own (a Job made by `kubectl create job
    --from=cronjob/...` names the CronJob as controller): the Pod gets the tenant's queue and
    the class's nodes, as a bare Pod would."""
    body = as_user(owned_by(forged(), "CronJob", "batch/v1"), username)
    response, patched = review_offline(policy, body)
    assert response["response"]["allowed"]
    assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    assert patched["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_a_forged_owner_is_validated_as_a_bare_pod(policy):
    """In a namespace whose tenant allows one shared GPU per pod, the forged Pod is rewritten
    to the shared class and refused for asking eight units of it."""
    body = owned_by(forged(), "CronJob", "batch/v1")
    body["request"]["namespace"] = "nb-alice"
    body["request"]["object"]["metadata"]["namespace"] = "nb-alice"
    response, _ = review_offline(policy, body)
    answer = response["response"]
    assert not answer["allowed"]
    assert "shared class" in answer["status"]["message"]
    assert "maxGPUsPerPod" in answer["status"]["message"]


@pytest.mark.parametrize("username", [JOB_CONTROLLER, "system:kube-controller-manager"])
def test_pods_of_the_real_job_controller_pass_untouched(policy, username):
    body = as_user(decided(forged()), username)
    response, patched = review_offline(policy, body)
    assert response["response"]["allowed"]
    assert "patch" not in response["response"]
    assert patched == body["request"]["object"]


@pytest.mark.parametrize(
    "username", sorted(KUBE_CONTROLLERS - {JOB_CONTROLLER, "system:kube-controller-manager"})
)
def test_another_controller_is_not_the_job_controller(policy, username):
    assert "was created by " + username in refusal(policy, as_user(decided(forged()), username))


def test_the_job_controller_with_a_hand_written_stamp_decides_the_pod(policy):
    """The tenant stamp without the record of what the Pod asks for (written by hand, or left
    from before the template's GPUs changed) is no decision: the Pod is rewritten and queued."""
    for record in (None, "trainer=nvidia.com/gpu:1"):
        body = as_user(forged(), JOB_CONTROLLER)
        if record is not None:
            body["request"]["object"]["metadata"]["annotations"][DECIDED_ANNOTATION] = record
        response, patched = review_offline(policy, body)
        assert response["response"]["allowed"]
        assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
        assert patched["metadata"]["annotations"][DECIDED_ANNOTATION] == "trainer=nvidia.com/gpu:8"


OPERATOR = "system:serviceaccount:ml-platform:jobset-controller-manager"


def test_an_operator_installed_elsewhere_is_named_in_the_policy(make_policy):
    body = as_user(decided(owned_by(forged(), "JobSet", "jobset.x-k8s.io/v1alpha2")), OPERATOR)
    assert "ml-platform" in refusal(make_policy(), body)
    for trusting in (
        make_policy(trustedControllers=[OPERATOR]),
        make_policy(ownerControllers={"JobSet": [OPERATOR]}),
    ):
        response, _ = review_offline(trusting, body)
        assert response["response"]["allowed"]
        assert "patch" not in response["response"]


def test_owner_controllers_replace_the_default_of_their_kind(make_policy):
    body = as_user(decided(owned_by(forged(), "JobSet", "jobset.x-k8s.io/v1alpha2")), OPERATOR)
    default = "system:serviceaccount:jobset-system:jobset-controller-manager"
    assert "patch" not in review_offline(make_policy(), as_user(body, default))[0]["response"]
    replaced = make_policy(ownerControllers={"JobSet": [OPERATOR]})
    assert OPERATOR in refusal(replaced, as_user(body, default))


def test_owner_controllers_name_known_kinds(make_policy):
    with pytest.raises(PolicyInvalid, match="'Jobs' is not a workload kind"):
        make_policy(ownerControllers={"Jobs": [OPERATOR]})


def test_the_volcano_backend_judges_a_forged_owner_as_a_bare_pod(make_policy):
    """Volcano queues a Pod by its own annotations, whoever its owner is."""
    response, patched = review_offline(make_policy(backend="volcano"), forged())
    assert response["response"]["allowed"]
    assert patched["spec"]["schedulerName"] == "volcano"


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
    body = decided(forged())
    body["request"]["userInfo"] = user_info
    assert "unnamed user" in refusal(policy, body)


@pytest.mark.parametrize(
    "references",
    [
        "batch/v1 Job",
        [None, 7, "Job"],
        [{"apiVersion": "batch/v1", "kind": "Job", "controller": "true"}],  # not a boolean
        [{"apiVersion": 1, "kind": "Job", "controller": True}],
        [{"apiVersion": "batch/v1", "kind": ["Job"], "controller": True}],
    ],
    ids=["a-string", "junk-entries", "controller-a-string", "odd-api-version", "odd-kind"],
)
def test_odd_owner_references_claim_no_owner(policy, references):
    """What does not name a controller owner Kueue would follow claims nothing: the Pod is
    judged as a bare one, never an error."""
    body = forged()
    body["request"]["object"]["metadata"]["ownerReferences"] = references
    response, patched = review_offline(policy, body)
    assert response["response"]["allowed"]
    assert patched["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
