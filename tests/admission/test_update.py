"""Mutation on UPDATE: re-applying a manifest puts back what CREATE decided; an update that
changes a template's GPU requests is decided like a CREATE (test_update_decides.py).

The updated objects are built as `kubectl apply` merges them: a strategic merge (Pods, Jobs)
adds `nvidia.com/gpu` back next to the class; a merge of a custom resource (JobSet, Volcano Job)
replaces whole lists, so a template comes back as the manifest wrote it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from quotaguard.admission import make_review, mutate, review_offline
from quotaguard.admission.names import (
    KUEUE_QUEUE_LABEL,
    REWRITTEN_ANNOTATION,
    VOLCANO_QUEUE_ANNOTATION,
)

from .builders import (
    applied,
    container,
    gpu,
    job,
    jobset,
    limits_of,
    owner,
    pod,
    requests_of,
    template,
    volcano_job,
)
from .conftest import SAMPLE_POLICY

GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
MEMORY = "quotaguard.dev/gpu-memory"


def created(policy, obj, namespace):
    """The object as CREATE stored it."""
    decision = mutate(policy, obj, namespace)
    assert decision.allowed and decision.patch, decision
    return applied(obj, decision)


def updated(policy, obj, namespace, old):
    decision = mutate(policy, obj, namespace, operation="UPDATE", old_object=old)
    assert decision.allowed, decision.message
    return decision, applied(obj, decision)


def pod_template_of(obj: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = obj["spec"]["template"]
    return found


def with_plain_gpu(obj: dict[str, Any], count: str = "1", *, requests: bool = False):
    """`obj` after a strategic merge added `nvidia.com/gpu` back to its first container."""
    merged = copy.deepcopy(obj)
    spec = pod_template_of(merged)["spec"] if merged["kind"] == "Job" else merged["spec"]
    resources = spec["containers"][0]["resources"]
    resources["limits"][GPU] = count
    if requests:
        resources["requests"][GPU] = count
    return merged


def training_job() -> dict[str, Any]:
    """A Job whose template CREATE rewrites to the 3g.40gb slice (training, 1 GPU, 30Gi)."""
    return job(template(gpu(1), annotations={MEMORY: "30Gi"}))


def changed_rules(make_policy, tenant: str, rewrite: list[dict[str, Any]]):
    document = yaml.safe_load(SAMPLE_POLICY.read_text())
    for entry in document["spec"]["tenants"]:
        if entry["name"] == tenant:
            entry["rewrite"] = rewrite
    return make_policy(tenants=document["spec"]["tenants"])


# --- Re-applying an unchanged manifest ---------------------------------------------------------


def test_reapplied_suspended_job_gets_its_class_back_and_nothing_else_changes(policy):
    stored = created(policy, training_job(), "training")
    assert limits_of(pod_template_of(stored)) == {MIG_3G: "1"}
    merged = with_plain_gpu(stored)

    decision, result = updated(policy, merged, "training", stored)

    assert result == stored
    assert [op["op"] for op in decision.patch] == ["remove"]  # the class entry already says 1
    assert decision.warnings == (
        "main: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1 (tenant training: the class it was "
        "created with)",
    )
    assert decision.audit["restored"] == "main: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1"
    # and once restored, the object is left alone
    again = mutate(policy, result, "training", operation="UPDATE", old_object=stored)
    assert again.patch == () and again.warnings == ()


def test_reapplied_pod_gets_its_class_back_in_limits_and_requests(policy):
    stored = created(policy, pod(gpu(1), annotations={MEMORY: "8Gi"}), "inference")
    merged = with_plain_gpu(stored, requests=True)  # the API server defaults requests of a Pod
    _, result = updated(policy, merged, "inference", stored)
    assert result == stored
    assert requests_of(result) == {MIG_1G: "1"}


def test_a_new_count_next_to_the_class_moves_to_the_class(policy):
    stored = created(policy, training_job(), "training")
    _, result = updated(policy, with_plain_gpu(stored, "2"), "training", stored)
    resources = pod_template_of(result)["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {MIG_3G: "2"}, "requests": {MIG_3G: "2"}}


def test_the_review_of_a_reapplied_job_is_allowed_with_the_restoring_patch(policy):
    stored = created(policy, training_job(), "training")
    body = make_review(
        with_plain_gpu(stored), namespace="training", operation="UPDATE", old_object=stored
    )
    answer, result = review_offline(policy, body)
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    assert result == stored


# --- What UPDATE leaves alone ------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        lambda obj: None,
        lambda obj: obj["metadata"].setdefault("labels", {}).update({"team": "vision"}),
        lambda obj: obj["spec"].update({"suspend": False}),  # Kueue admitting it
        lambda obj: pod_template_of(obj)["spec"].update({"nodeSelector": {"flavor": "mig"}}),
    ],
    ids=["unchanged", "label", "unsuspend", "kueue-node-selector"],
)
def test_an_update_that_keeps_the_rewrite_gets_no_patch(policy, change):
    stored = created(policy, training_job(), "training")
    obj = copy.deepcopy(stored)
    change(obj)
    decision = mutate(policy, obj, "training", operation="UPDATE", old_object=stored)
    assert decision.allowed
    assert decision.patch == ()
    assert decision.warnings == ()


def test_a_whole_gpu_kept_at_create_is_not_rewritten_on_update(policy, make_policy):
    stored = created(policy, job(template(gpu(2))), "training")  # h100: stays nvidia.com/gpu
    assert limits_of(pod_template_of(stored)) == {GPU: 2}
    # even though the policy now puts two GPUs on a slice
    eager = changed_rules(make_policy, "training", [{"to": "h100-3g.40gb"}])
    assert limits_of(pod_template_of(created(eager, job(template(gpu(2))), "training"))) == {
        MIG_3G: "2"
    }
    decision = mutate(eager, stored, "training", operation="UPDATE", old_object=stored)
    assert decision.patch == ()


def test_pods_of_a_job_are_left_alone_on_update(policy):
    obj = pod(container(limits={GPU: "1", MIG_3G: "1"}), owners=[owner()])
    decision = mutate(policy, obj, "training", operation="UPDATE", old_object=obj)
    assert decision.patch == ()


def test_two_classes_next_to_the_plain_gpu_are_left_alone(policy):
    """Nothing CREATE would have made: no resource is moved (the new requests are recorded as
    asked), and validation refuses the two classes."""
    stored = created(policy, training_job(), "training")
    merged = with_plain_gpu(stored)
    pod_template_of(merged)["spec"]["containers"][0]["resources"]["limits"][MIG_1G] = "1"
    decision = mutate(policy, merged, "training", operation="UPDATE", old_object=stored)
    assert [op["path"] for op in decision.patch if "/resources/" in op["path"]] == []
    body = make_review(merged, namespace="training", operation="UPDATE", old_object=stored)
    answer, _ = review_offline(policy, body)
    assert answer["response"]["auditAnnotations"]["denied"].startswith("two-classes")


def test_an_update_is_never_denied(policy):
    stored = created(policy, training_job(), "training")
    merged = with_plain_gpu(stored)
    # a hint CREATE would refuse and a nodeSelector against the h100 class
    pod_template_of(merged)["metadata"]["annotations"]["quotaguard.dev/gpu-class"] = "shared"
    pod_template_of(merged)["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "A100"}
    _, result = updated(policy, merged, "training", stored)  # asserts it is allowed
    assert limits_of(pod_template_of(result)) == {MIG_3G: "1"}


# --- The class CREATE chose, whatever the policy says now ---------------------------------------


def test_a_policy_changed_since_create_does_not_change_the_class(policy, make_policy):
    stored = created(policy, job(template(gpu(1), annotations={MEMORY: "20Gi"})), "inference")
    assert limits_of(pod_template_of(stored)) == {MIG_3G: "1"}  # best-fit for 20Gi
    smaller = changed_rules(make_policy, "inference", [{"to": "h100-1g.10gb"}])
    fresh = created(smaller, job(template(gpu(1), annotations={MEMORY: "20Gi"})), "inference")
    assert limits_of(pod_template_of(fresh)) == {MIG_1G: "1"}  # what CREATE would pick now

    _, result = updated(smaller, with_plain_gpu(stored), "inference", stored)
    assert result == stored
    # a merge that replaced the container's resources with the manifest's
    manifest_resources = copy.deepcopy(stored)
    pod_template_of(manifest_resources)["spec"]["containers"][0]["resources"] = {
        "limits": {GPU: "1"}
    }
    _, result = updated(smaller, manifest_resources, "inference", stored)
    assert pod_template_of(result)["spec"]["containers"][0]["resources"] == {
        "limits": {MIG_3G: "1"},
        "requests": {MIG_3G: "1"},
    }


def test_without_the_old_object_the_class_next_to_the_plain_gpu_is_kept(policy):
    stored = created(policy, training_job(), "training")
    decision = mutate(policy, with_plain_gpu(stored), "training", operation="UPDATE")
    assert applied(with_plain_gpu(stored), decision) == stored


# --- Custom resources: a re-applied manifest replaces whole lists ------------------------------


@pytest.fixture(scope="module")
def volcano_policy(make_policy):
    return make_policy(backend="volcano")


def test_reapplied_volcano_job_gets_its_templates_back_as_create_left_them(volcano_policy):
    manifest = volcano_job(
        ("ps", template(container("ps", limits={"cpu": "4"}))),
        ("worker", template(gpu(1, name="worker"), annotations={MEMORY: "16Gi"})),
    )
    stored = created(volcano_policy, manifest, "training")
    worker = stored["spec"]["tasks"][1]["template"]
    assert limits_of(worker) == {MIG_3G: "1"}
    assert worker["spec"]["schedulerName"] == "volcano"
    assert worker["metadata"]["annotations"][VOLCANO_QUEUE_ANNOTATION] == "training"
    merged = copy.deepcopy(stored)
    merged["spec"]["tasks"] = copy.deepcopy(manifest["spec"]["tasks"])

    _, result = updated(volcano_policy, merged, "training", stored)

    assert result == stored


def test_reordered_replicated_jobs_keep_their_own_classes(policy):
    manifest = jobset(
        ("small", template(gpu(1), annotations={MEMORY: "8Gi"})),
        ("large", template(gpu(1), annotations={MEMORY: "30Gi"})),
    )
    stored = created(policy, manifest, "inference")
    merged = copy.deepcopy(stored)
    merged["spec"]["replicatedJobs"] = list(
        reversed(copy.deepcopy(manifest["spec"]["replicatedJobs"]))
    )

    _, result = updated(policy, merged, "inference", stored)

    classes = {
        replicated["name"]: limits_of(replicated["template"]["spec"]["template"])
        for replicated in result["spec"]["replicatedJobs"]
    }
    assert classes == {"small": {MIG_1G: "1"}, "large": {MIG_3G: "1"}}
    large = result["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert large["metadata"]["annotations"][REWRITTEN_ANNOTATION] == (
        "large/main: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1"
    )


def test_a_replaced_template_gets_its_class_placement_back_but_a_set_key_is_kept(policy):
    manifest = jobset(("workers", template(gpu(8))))
    stored = created(policy, manifest, "training")  # h100: whole GPUs, placed on H100 nodes
    placed = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert placed["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    merged = copy.deepcopy(stored)
    merged["spec"]["replicatedJobs"] = copy.deepcopy(manifest["spec"]["replicatedJobs"])

    _, result = updated(policy, merged, "training", stored)
    assert result == stored

    elsewhere = copy.deepcopy(merged)
    pod_spec = elsewhere["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    _, result = updated(policy, elsewhere, "training", stored)
    kept = result["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert kept["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


# --- Queues: put back, never changed -----------------------------------------------------------


def test_a_dropped_queue_label_is_put_back_and_a_changed_one_is_kept(policy):
    stored = created(policy, training_job(), "training")
    dropped = copy.deepcopy(stored)
    del dropped["metadata"]["labels"][KUEUE_QUEUE_LABEL]
    _, result = updated(policy, dropped, "training", stored)
    assert result["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"

    moved = copy.deepcopy(stored)
    moved["metadata"]["labels"][KUEUE_QUEUE_LABEL] = "training-low"
    decision = mutate(policy, moved, "training", operation="UPDATE", old_object=stored)
    assert decision.patch == ()


def test_a_queue_create_never_set_is_not_added_on_update(policy):
    unstamped = with_plain_gpu(job(template(container(limits={MIG_3G: "1"}))))
    old = job(template(container(limits={MIG_3G: "1"})))
    _, result = updated(policy, unstamped, "training", old)
    assert "labels" not in result["metadata"]
    assert limits_of(pod_template_of(result)) == {MIG_3G: "1"}
