"""An update that changes a template's GPU requests is decided like a CREATE, and a stamp is
believed only where quotaguard wrote it for what the object asks for now.

The way around the policy these close: a Deployment created CPU-only (never sent to
quotaguard), then edited to add `nvidia.com/gpu: 8` and a hand-written `quotaguard.dev/tenant`
annotation. Its ReplicaSet and Pods, made by trusted controllers from a "stamped" template,
were never rewritten or queued, and Kueue found no queue anywhere up the owner chain. The same
edit without the stamp made quotaguard rewrite each new ReplicaSet, which then never matched
its Deployment: the Deployment controller made a new one, again and again.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quotaguard.admission import make_review, mutate, review_offline, validate
from quotaguard.admission.names import DECIDED_ANNOTATION, KUEUE_QUEUE_LABEL, TENANT_ANNOTATION
from quotaguard.kube.kinds import KINDS

from .builders import container, gpu, of_kind, owner, recorded

DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
USER = "alice@example.com"
SHARED = "nvidia.com/gpu.shared"
CPU = {"spec": {"containers": [container("main", limits={"cpu": "1"})]}}


def deployment(*containers: dict[str, Any], annotations: dict[str, str] | None = None):
    template: dict[str, Any] = {"spec": {"containers": list(containers)}}
    if annotations:
        template["metadata"] = {"annotations": dict(annotations)}
    return of_kind("Deployment", template, name="trainer")


def template_of(obj: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = obj["spec"]["template"]
    return found


def review(policy, obj, namespace, *, old=None, username=USER, operation=None):
    body = make_review(
        obj,
        namespace=namespace,
        operation=operation or ("UPDATE" if old is not None else "CREATE"),
        old_object=old,
        username=username,
    )
    response, stored = review_offline(policy, body)
    return response["response"], stored


def created(policy, obj, namespace):
    answer, stored = review(policy, obj, namespace)
    assert answer["allowed"], answer
    return stored


def replica_set_of(stored_deployment: dict[str, Any]) -> dict[str, Any]:
    """What the Deployment controller makes of it: the template as it is, owned by it."""
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "trainer-5d4f8",
            "annotations": dict(stored_deployment["metadata"].get("annotations") or {}),
            "ownerReferences": [owner("Deployment", "apps/v1")],
        },
        "spec": {"template": copy.deepcopy(template_of(stored_deployment))},
    }


def pod_of(replica_set: dict[str, Any]) -> dict[str, Any]:
    """What the ReplicaSet controller makes of it."""
    template = copy.deepcopy(replica_set["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template.get("metadata", {}),
            "ownerReferences": [owner("ReplicaSet", "apps/v1")],
        },
        "spec": template["spec"],
    }


# --- A CPU-only Deployment edited to gain GPUs ---------------------------------------------------


@pytest.mark.parametrize("forged", [False, True], ids=["plain", "with-a-forged-stamp"])
def test_a_cpu_deployment_edited_to_gain_gpus_is_rewritten_and_queued(policy, forged):
    stored = created(policy, deployment(container("main", limits={"cpu": "1"})), "nb-a")
    assert KUEUE_QUEUE_LABEL not in (stored["metadata"].get("labels") or {})
    edited = deployment(gpu(8), annotations={TENANT_ANNOTATION: "nb-a"} if forged else None)

    answer, result = review(policy, edited, "nb-a", old=stored)

    # notebooks: a bare nvidia.com/gpu is one time-sliced unit, at most one per container
    assert not answer["allowed"]
    assert "shared-units" in answer["auditAnnotations"]["denied"]
    assert result == edited  # nothing stored

    answer, result = review(policy, deployment(gpu(1)), "nb-a", old=stored)
    assert answer["allowed"]
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "notebooks"
    assert template_of(result)["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "notebooks"
    assert template_of(result)["spec"]["containers"][0]["resources"]["limits"] == {SHARED: "1"}
    annotations = template_of(result)["metadata"]["annotations"]
    assert annotations[DECIDED_ANNOTATION] == f"main={SHARED}:1"


def test_each_new_replicaset_of_the_edited_deployment_is_believed_and_never_rewritten(policy):
    stored = created(policy, deployment(container("main", limits={"cpu": "1"})), "training")
    _, decided = review(policy, deployment(gpu(8)), "training", old=stored)
    assert decided["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"

    replica_set = replica_set_of(decided)
    answer, result = review(policy, replica_set, "training", username=DEPLOYMENT_CONTROLLER)
    assert answer["allowed"] and "patch" not in answer
    assert result == replica_set  # its template still equals the Deployment's: no new rollout

    pod = pod_of(replica_set)
    answer, result = review(policy, pod, "training", username=REPLICASET_CONTROLLER)
    assert answer["allowed"] and "patch" not in answer
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"  # Kueue queues it


@pytest.mark.parametrize(
    "annotations",
    [
        {TENANT_ANNOTATION: "training"},  # written by hand
        {TENANT_ANNOTATION: "training", DECIDED_ANNOTATION: "main=nvidia.com/gpu:1"},  # stale
    ],
    ids=["forged", "stale"],
)
def test_a_replicaset_of_an_undecided_template_is_refused_not_rewritten(policy, annotations):
    """A ReplicaSet made from a template whose GPUs quotaguard did not decide (or decided for
    other GPUs than it now asks for) is refused, with what to do: rewriting it would send the
    Deployment controller into a loop of new ReplicaSets."""
    replica_set = replica_set_of(deployment(gpu(8), annotations=annotations))
    answer, result = review(policy, replica_set, "training", username=DEPLOYMENT_CONTROLLER)
    assert not answer["allowed"]
    assert answer["auditAnnotations"]["denied"] == "undecided-template"
    assert "kubectl rollout restart deployment/parent" in answer["status"]["message"]
    assert "patch" not in answer and result == replica_set


def test_a_replicaset_a_user_makes_for_a_deployment_is_refused(policy):
    replica_set = replica_set_of(created(policy, deployment(gpu(8)), "training"))
    answer, _ = review(policy, replica_set, "training", username=USER)
    assert answer["auditAnnotations"]["denied"] == "owner-not-controller"


def test_a_stale_record_after_a_gpu_change_is_decided_again(policy):
    """A decided Deployment edited from 1 to 8 GPUs: its record says 1, so the update is
    decided (queued, recorded for 8), or refused for what 8 breaks."""
    stored = created(policy, deployment(gpu(1)), "training")
    assert template_of(stored)["metadata"]["annotations"][DECIDED_ANNOTATION] == (
        "main=nvidia.com/gpu:1"
    )
    edited = copy.deepcopy(stored)
    template_of(edited)["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "8"}
    answer, result = review(policy, edited, "training", old=stored)
    assert answer["allowed"]
    assert template_of(result)["metadata"]["annotations"][DECIDED_ANNOTATION] == (
        "main=nvidia.com/gpu:8"
    )
    edited["metadata"]["labels"][KUEUE_QUEUE_LABEL] = ""  # the queue dropped as well
    answer, result = review(policy, edited, "training", old=stored)
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"


def test_validation_refuses_a_gpu_change_mutation_did_not_decide(policy):
    """When the mutating UPDATE webhook did not run (it fails open), validation, which fails
    closed for updates that change GPU requests, refuses the undecided template."""
    stored = created(policy, deployment(container("main", limits={"cpu": "1"})), "training")
    edited = deployment(gpu(8), annotations={TENANT_ANNOTATION: "training"})
    decision = validate(policy, edited, "training", operation="UPDATE", old_object=stored)
    assert set(decision.rules) == {"undecided-template"}
    assert "retry it" in decision.message
    assert "kueue.x-k8s.io/queue-name" in decision.message
    # and a hand-written record is not enough without the queue
    forged = recorded(edited)
    decision = validate(policy, forged, "training", operation="UPDATE", old_object=stored)
    assert set(decision.rules) == {"undecided-template"}
    assert "no quotaguard.dev/decided-gpus record" not in decision.message
    assert "metadata without the kueue.x-k8s.io/queue-name label" in decision.message


def test_a_deployment_without_a_record_is_decided_at_its_next_update(policy):
    """A Deployment decided before the record existed gets it at its next update (a rollout
    restart), so its next ReplicaSet is believed."""
    stored = created(policy, deployment(gpu(8)), "training")
    del template_of(stored)["metadata"]["annotations"][DECIDED_ANNOTATION]
    restarted = copy.deepcopy(stored)
    template_of(restarted)["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"
    answer, result = review(policy, restarted, "training", old=stored)
    assert answer["allowed"]
    assert template_of(result)["metadata"]["annotations"][DECIDED_ANNOTATION] == (
        "main=nvidia.com/gpu:8"
    )
    replica_set = replica_set_of(result)
    answer, _ = review(policy, replica_set, "training", username=DEPLOYMENT_CONTROLLER)
    assert answer["allowed"] and "patch" not in answer


# --- Every kind, and what must keep working ------------------------------------------------------

EDITABLE = [k.id for k in KINDS if k.id not in ("Pod", "AppWrapper")]


@pytest.mark.parametrize("kind", EDITABLE)
def test_every_kind_edited_to_gain_gpus_is_decided_like_a_create(policy, kind):
    stored = created(policy, of_kind(kind, CPU), "nb-a")
    edited = of_kind(kind, {"spec": {"containers": [gpu(1)]}})
    answer, result = review(policy, edited, "nb-a", old=stored)
    assert answer["allowed"], answer
    assert SHARED in str(result), result
    assert result == created(policy, edited, "nb-a")  # exactly what CREATE stores


@pytest.mark.parametrize(
    "change",
    [
        lambda obj: obj["spec"].update({"suspend": False}),  # Kueue admitting it
        lambda obj: obj["metadata"]["labels"].update({"kueue.x-k8s.io/managed": "true"}),
        lambda obj: obj["spec"]["template"]["spec"]["nodeSelector"].update({"flavor": "x"}),
        lambda obj: obj["metadata"].setdefault("annotations", {}).update({"x": "y"}),
    ],
    ids=["unsuspend", "kueue-label", "kueue-node-selector", "annotation"],
)
def test_kueues_updates_of_a_decided_job_are_neither_patched_nor_judged(policy, change):
    stored = created(policy, of_kind("Job", {"spec": {"containers": [gpu(1)]}}), "training")
    updated = copy.deepcopy(stored)
    change(updated)
    decision = mutate(policy, updated, "training", operation="UPDATE", old_object=stored)
    assert decision.allowed and decision.patch == ()
    assert validate(policy, updated, "training", operation="UPDATE", old_object=stored).allowed


def test_an_update_without_gpus_is_left_alone(policy):
    stored = created(policy, deployment(container("main", limits={"cpu": "1"})), "training")
    edited = deployment(container("main", limits={"cpu": "2"}))
    decision = mutate(policy, edited, "training", operation="UPDATE", old_object=stored)
    assert decision.patch == ()


def test_a_pod_of_a_decided_deployment_is_not_decided_again_after_the_update(policy):
    stored = created(policy, deployment(container("main", limits={"cpu": "1"})), "nb-a")
    _, decided = review(policy, deployment(gpu(1)), "nb-a", old=stored)
    pod = pod_of(replica_set_of(decided))
    answer, _ = review(policy, pod, "nb-a", username=REPLICASET_CONTROLLER)
    assert answer["allowed"] and "patch" not in answer
    answer, _ = review(policy, pod, "nb-a", username=USER)
    assert answer["auditAnnotations"]["denied"] == "owner-not-controller"
