"""Admission cases at the edges of the contract, each one a rule that could be weakened unseen:
two queue references at once, an UPDATE of GPU requests alone, Volcano stamps that keep what
the user set, two classes that need different nodes, and the full wording of denials."""

from __future__ import annotations

import copy

import pytest
import yaml

from quotaguard.admission import mutate, validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL, VOLCANO_QUEUE_ANNOTATION

from .builders import applied, container, gpu, job, pod, template, volcano_job
from .conftest import SAMPLE_POLICY

MIG_3G = "nvidia.com/mig-3g.40gb"
SHARED = "nvidia.com/gpu.shared"


# --- two queue references: each is judged ----------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({KUEUE_QUEUE_LABEL: "notebooks"}, {VOLCANO_QUEUE_ANNOTATION: "training"}),
        ({KUEUE_QUEUE_LABEL: "training"}, {VOLCANO_QUEUE_ANNOTATION: "notebooks"}),
    ],
    ids=["own kueue queue, other volcano queue", "other kueue queue, own volcano queue"],
)
def test_naming_its_own_queue_does_not_excuse_another_tenants(policy, labels, annotations):
    obj = pod(gpu(1, resource=SHARED), labels=labels, annotations=annotations)
    decision = validate(policy, obj, "nb-a")
    assert not decision.allowed
    assert decision.rules == ("queue-isolation",)
    assert 'belongs to tenant "training"' in decision.message
    assert 'set it to "notebooks"' in decision.message


def test_both_queue_references_of_its_own_tenant_are_allowed(policy):
    refs = {"labels": {KUEUE_QUEUE_LABEL: "notebooks"}}
    obj = pod(gpu(1, resource=SHARED), annotations={VOLCANO_QUEUE_ANNOTATION: "notebooks"}, **refs)
    assert validate(policy, obj, "nb-a").allowed


# --- UPDATE: a change of GPU requests alone is judged again ----------------------------------


def test_update_changing_only_gpu_requests_is_judged_again(policy):
    queue = {KUEUE_QUEUE_LABEL: "training"}
    old = job(template(container(limits={"nvidia.com/gpu": 2})), labels=queue)
    new = job(
        template(container(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": 1})),
        labels=queue,
    )
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.rules == ("requests-limits",)
    # The same requests on CREATE are denied the same way; unchanged on UPDATE they are not.
    assert validate(policy, new, "training").rules == ("requests-limits",)
    unchanged = validate(policy, new, "training", operation="UPDATE", old_object=new)
    assert unchanged.allowed


# --- Volcano stamps keep what the user set ---------------------------------------------------


@pytest.fixture(scope="module")
def volcano_policy(make_policy):
    return make_policy(backend="volcano")


def stamped(policy, obj, namespace="training"):
    decision = mutate(policy, obj, namespace)
    assert decision.allowed, decision.message
    return applied(obj, decision)


def test_a_pods_own_volcano_queue_annotation_is_kept(volcano_policy):
    obj = pod(gpu(2), annotations={VOLCANO_QUEUE_ANNOTATION: "training-batch"})
    result = stamped(volcano_policy, obj)
    assert result["metadata"]["annotations"][VOLCANO_QUEUE_ANNOTATION] == "training-batch"


def test_a_volcano_task_keeps_its_queue_annotation_and_scheduler(volcano_policy):
    task = template(
        gpu(2),
        annotations={VOLCANO_QUEUE_ANNOTATION: "training-batch"},
    )
    task["spec"]["schedulerName"] = "gang-scheduler"
    obj = volcano_job(("worker", task), schedulerName="gang-scheduler")
    result = stamped(volcano_policy, obj)
    worker = result["spec"]["tasks"][0]["template"]
    assert worker["metadata"]["annotations"][VOLCANO_QUEUE_ANNOTATION] == "training-batch"
    assert worker["spec"]["schedulerName"] == "gang-scheduler"
    assert result["spec"]["schedulerName"] == "gang-scheduler"
    assert result["spec"]["queue"] == "training"  # only what was missing is stamped


def test_a_volcano_task_without_them_gets_both(volcano_policy):
    obj = volcano_job(("worker", template(gpu(2))), schedulerName="default-scheduler")
    result = stamped(volcano_policy, obj)
    worker = result["spec"]["tasks"][0]["template"]
    assert worker["metadata"]["annotations"][VOLCANO_QUEUE_ANNOTATION] == "training"
    assert worker["spec"]["schedulerName"] == "volcano"
    assert result["spec"]["schedulerName"] == "volcano"


# --- two classes that need different nodes ---------------------------------------------------


@pytest.fixture(scope="module")
def split_nodes_policy(make_policy):
    """The sample, with the 3g.40gb slices on nodes of another GPU product than whole H100s."""
    classes = yaml.safe_load(SAMPLE_POLICY.read_text())["spec"]["gpuClasses"]
    classes = copy.deepcopy(classes)
    for gpu_class in classes:
        if gpu_class["name"] == "h100-3g.40gb":
            gpu_class["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-MIG"}
    return make_policy(gpuClasses=classes)


def test_two_classes_that_need_different_nodes_in_one_pod_are_denied(split_nodes_policy):
    obj = pod(gpu(1, name="trainer"), gpu(1, resource=MIG_3G, name="eval"))
    decision = mutate(split_nodes_policy, obj, "training")
    assert not decision.allowed
    assert decision.rules == ("node-selector-conflict",)
    assert decision.message == (
        'tenant "training": classes "h100" and "h100-3g.40gb" need different nodes '
        "(nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 vs "
        "nvidia.com/gpu.product=NVIDIA-H100-MIG) in one pod; request one class per pod"
    )


def test_each_of_those_classes_alone_is_placed_on_its_nodes(split_nodes_policy):
    result = stamped(split_nodes_policy, pod(gpu(1, resource=MIG_3G)))
    assert result["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-MIG"}


# --- denial wording, in full -----------------------------------------------------------------


# Each says who is refused, what is wrong and what to do instead.
WORDING = [
    (
        pod(container(requests={"nvidia.com/gpu": 1})),
        "training",
        'tenant "training": container "main" sets nvidia.com/gpu only in requests; GPUs must be '
        "set in limits: move it to limits (requests may be left out)",
    ),
    (
        pod(gpu(1, resource=SHARED), labels={KUEUE_QUEUE_LABEL: "training"}),
        "nb-a",
        'tenant "notebooks": queue "training" (label kueue.x-k8s.io/queue-name) belongs to tenant '
        '"training"; workloads in namespace "nb-a" may not use it: remove it (quotaguard sets it) '
        'or set it to "notebooks"',
    ),
    (
        pod(gpu(1)),
        "default",
        'namespace "default" belongs to no tenant of policy "gpu-platform" and '
        "unmatchedNamespaces is deny: GPUs are for tenant namespaces (inference, serving-*, "
        "training, research-*, nb-*, notebooks); run the workload in one of them or ask the "
        "platform team to add this namespace to a tenant",
    ),
    (
        pod(gpu(9)),
        "training",
        'tenant "training": at most 8 GPU-equivalents per pod (maxGPUsPerPod); pod asks for 9 '
        "(main: nvidia.com/gpu: 9); request fewer GPUs or smaller classes, or use a namespace of "
        "a tenant that allows more",
    ),
]


@pytest.mark.parametrize(
    ("obj", "namespace", "expected"),
    WORDING,
    ids=["requests-only", "queue-isolation", "unmatched-namespace", "max-gpus-per-pod"],
)
def test_denials_are_worded_for_the_user(policy, obj, namespace, expected):
    decision = validate(policy, obj, namespace)
    assert not decision.allowed
    assert decision.message == expected
