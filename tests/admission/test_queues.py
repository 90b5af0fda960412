"""A tenant's GPU workload goes to the tenant's queue or one its `extraQueues` lists, and is
scheduled by the backend's scheduler (or one of `allowedSchedulers`): nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from quotaguard.admission import make_review, review_offline, validate
from quotaguard.admission.names import (
    KUEUE_QUEUE_LABEL,
    TENANT_ANNOTATION,
    VOLCANO_QUEUE_ANNOTATION,
)
from quotaguard.kube.names import KUEUE_ADMISSION_GATE

from .builders import container, gpu, job, pod, recorded, template

ESCAPES = yaml.safe_load(
    (
        Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "queue-escapes.yaml"
    ).read_text()
)


@pytest.fixture(scope="module")
def policies(make_policy):
    return {backend: make_policy(backend=backend) for backend in ("kueue", "volcano")}


def offline(policy, obj, namespace="training", username=None):
    response, patched = review_offline(
        policy, make_review(obj, namespace=namespace, username=username)
    )
    return response["response"], patched


@pytest.mark.parametrize("case", ESCAPES, ids=[case["name"] for case in ESCAPES])
def test_an_escape_is_refused_with_what_to_do(policies, case):
    answer, _ = offline(policies[case["backend"]], case["object"])
    assert not answer["allowed"]
    assert answer["auditAnnotations"]["denied"] == case["rule"]
    message = answer["status"]["message"]
    assert message.startswith('tenant "training": ')
    # what to set instead
    assert '"training"' in message.split(":", 1)[1] or 'set it to "' in message
    assert case.get("says", "") in message


@pytest.mark.parametrize("case", ESCAPES, ids=[case["name"] for case in ESCAPES])
def test_the_same_workload_without_gpus_is_not_our_business(policies, case):
    obj = yaml.safe_load(yaml.safe_dump(case["object"]))
    for spec in _pod_specs(obj):
        spec["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    answer, _ = offline(policies[case["backend"]], obj)
    assert answer["allowed"]


def _pod_specs(obj):
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    if "tasks" in obj["spec"]:
        return [task["template"]["spec"] for task in obj["spec"]["tasks"]]
    return [obj["spec"]["template"]["spec"]]


def test_a_queue_the_policy_lists_for_the_tenant_is_allowed(make_policy, policy):
    document = yaml.safe_load(yaml.safe_dump(policy.model_dump(by_alias=True, mode="json")))
    tenants = document["spec"]["tenants"]
    training = next(t for t in tenants if t["name"] == "training")
    training["extraQueues"] = ["training-batch"]
    listing = make_policy(tenants=tenants)
    obj = pod(gpu(2), labels={KUEUE_QUEUE_LABEL: "training-batch"})
    assert validate(listing, obj, "training").allowed
    refused = validate(policy, obj, "training")
    assert refused.rules == ("queue-not-allowed",)
    assert "training-batch" in refused.message
    # another tenant still may not use it
    assert validate(
        listing, pod(gpu(1), labels={KUEUE_QUEUE_LABEL: "training-batch"}), "nb-a"
    ).rules


def test_a_refused_queue_lists_the_extra_queues_the_tenant_may_use(make_policy, policy):
    document = yaml.safe_load(yaml.safe_dump(policy.model_dump(by_alias=True, mode="json")))
    training = next(t for t in document["spec"]["tenants"] if t["name"] == "training")
    training["extraQueues"] = ["training-batch", "training-debug"]
    obj = pod(gpu(1), labels={KUEUE_QUEUE_LABEL: "default"})
    assert validate(make_policy(tenants=document["spec"]["tenants"]), obj, "training").message == (
        'tenant "training": queue "default" (label kueue.x-k8s.io/queue-name) is not a queue of '
        'the tenant; GPU workloads in namespace "training" go to "training" (or one of '
        "extraQueues: training-batch, training-debug): remove it (quotaguard sets it) or set it "
        'to "training"'
    )


def test_the_tenants_own_queue_and_scheduler_are_allowed(policies):
    for obj in (
        pod(gpu(2), labels={KUEUE_QUEUE_LABEL: "training"}),
        pod(gpu(2), schedulerName="default-scheduler"),
        pod(gpu(2), schedulerName=""),
    ):
        answer, _ = offline(policies["kueue"], obj)
        assert answer["allowed"], answer
    volcano_pod = pod(gpu(2), annotations={VOLCANO_QUEUE_ANNOTATION: "training"})
    answer, patched = offline(policies["volcano"], volcano_pod)
    assert answer["allowed"]
    assert patched["spec"]["schedulerName"] == "volcano"


@pytest.mark.parametrize(
    ("backend", "allowed", "bypassed", "remove"),
    [
        ("kueue", "default-scheduler", "Kueue", "remove schedulerName"),
        ("volcano", "volcano", "Volcano", "remove schedulerName (quotaguard sets it)"),
    ],
)
def test_another_scheduler_is_refused_naming_the_queues_it_bypasses(
    policies, backend, allowed, bypassed, remove
):
    decision = validate(policies[backend], pod(gpu(1), schedulerName="gang"), "training")
    assert decision.message == (
        f'tenant "training": schedulerName "gang" is not a scheduler of this cluster\'s GPU '
        f"workloads (allowedSchedulers: {allowed}); another scheduler bypasses {bypassed}'s "
        f'queues and the GPU classes\' nodes: {remove} or set it to "{allowed}"'
    )


def test_a_pod_written_to_look_decided_is_still_refused_what_mutation_would_have_refused(
    policies,
):
    """webhook/ does not send /mutate a Pod with the tenant stamp, Kueue's queue label and
    admission gate and the default scheduler (not-yet-decided-by-quotaguard): what quotaguard's
    mutation and then Kueue's webhook leave. Written by hand, validation alone judges it: with
    the Volcano backend the default scheduler is refused (it would bypass Volcano's queues),
    and another tenant's queue with either backend."""
    looks_decided = {
        "annotations": {TENANT_ANNOTATION: "training"},
        "schedulingGates": [{"name": KUEUE_ADMISSION_GATE}],
    }
    own_queue = pod(gpu(1), labels={KUEUE_QUEUE_LABEL: "training"}, **looks_decided)
    assert validate(policies["kueue"], own_queue, "training").allowed
    assert validate(policies["volcano"], own_queue, "training").rules == ("scheduler-not-allowed",)
    other_queue = pod(gpu(1), labels={KUEUE_QUEUE_LABEL: "inference"}, **looks_decided)
    for backend in ("kueue", "volcano"):
        assert "queue-isolation" in validate(policies[backend], other_queue, "training").rules


def test_allowed_schedulers_adds_to_the_backends(make_policy):
    listing = make_policy(allowedSchedulers=["gang-scheduler"])
    obj = pod(gpu(2), schedulerName="gang-scheduler")
    assert validate(listing, obj, "training").allowed
    assert validate(make_policy(), obj, "training").rules == ("scheduler-not-allowed",)


@pytest.fixture(scope="module")
def own_queue_names(make_policy, policy):
    """Training's ClusterQueue (Volcano queue) and LocalQueue named apart, per backend."""
    document = yaml.safe_load(yaml.safe_dump(policy.model_dump(by_alias=True, mode="json")))
    tenants = document["spec"]["tenants"]
    training = next(t for t in tenants if t["name"] == "training")
    training.update(queue="training-cq", localQueue="training-lq")
    return {
        backend: make_policy(tenants=tenants, backend=backend) for backend in ("kueue", "volcano")
    }


@pytest.mark.parametrize(
    ("backend", "where", "own"),
    [
        ("kueue", "label kueue.x-k8s.io/queue-name", "training-lq"),
        ("volcano", "annotation scheduling.volcano.sh/queue-name", "training-cq"),
    ],
)
def test_a_refused_queue_points_at_the_queue_the_label_or_annotation_names(
    own_queue_names, backend, where, own
):
    key = KUEUE_QUEUE_LABEL if backend == "kueue" else VOLCANO_QUEUE_ANNOTATION
    places = "labels" if backend == "kueue" else "annotations"
    scheduler = "default-scheduler" if backend == "kueue" else "volcano"
    policy = own_queue_names[backend]
    for queue, what in [
        (
            "default",
            f'is not a queue of the tenant; GPU workloads in namespace "training" go to "{own}"',
        ),
        (
            "inference",
            'belongs to tenant "inference"; workloads in namespace "training" may not use it',
        ),
    ]:
        obj = pod(gpu(1), schedulerName=scheduler, **{places: {key: queue}})
        assert validate(policy, obj, "training").message == (
            f'tenant "training": queue "{queue}" ({where}) {what}: remove it (quotaguard sets '
            f'it) or set it to "{own}"'
        )


def test_the_volcano_parent_queue_is_refused_as_such(policies):
    obj = pod(gpu(1), schedulerName="volcano", annotations={VOLCANO_QUEUE_ANNOTATION: "gpu-pool"})
    assert validate(policies["volcano"], obj, "training").message == (
        'tenant "training": queue "gpu-pool" (annotation scheduling.volcano.sh/queue-name) is '
        'the parent queue of every tenant queue; GPU workloads in namespace "training" go to '
        '"training": remove it (quotaguard sets it) or set it to "training"'
    )


def test_moving_a_suspended_job_to_the_default_queue_is_refused(policy):
    old = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "training"})
    new = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "default"})
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.rules == ("queue-not-allowed",)
    # an update that keeps what the Job was admitted with is not judged again
    assert validate(policy, new, "training", operation="UPDATE", old_object=new).allowed


def test_moving_a_suspended_job_to_another_tenants_queue_names_the_namespace(policy):
    old = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "training"})
    new = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "inference"})
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.message == (
        'tenant "training": queue "inference" (label kueue.x-k8s.io/queue-name) belongs to '
        'tenant "inference"; workloads in namespace "training" may not use it: remove it '
        '(quotaguard sets it) or set it to "training"'
    )


def test_an_update_that_sets_another_scheduler_is_refused(policy):
    old = job(template(gpu(2)), labels={KUEUE_QUEUE_LABEL: "training"})
    new = job(template(gpu(2), schedulerName="gang"), labels={KUEUE_QUEUE_LABEL: "training"})
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.rules == ("scheduler-not-allowed",)


def test_an_update_that_keeps_a_scheduler_the_policy_no_longer_lists_is_allowed(
    make_policy, policy
):
    obj = job(template(gpu(2), schedulerName="gang"), labels={KUEUE_QUEUE_LABEL: "training"})
    assert validate(make_policy(allowedSchedulers=["gang"]), obj, "training").allowed
    edited = job(
        template(gpu(2), schedulerName="gang"), labels={KUEUE_QUEUE_LABEL: "training", "x": "y"}
    )
    assert validate(policy, edited, "training", operation="UPDATE", old_object=obj).allowed


def test_a_pod_the_job_controller_updates_is_not_judged_for_its_scheduler(policy):
    def stamped(scheduler):
        return recorded(
            pod(
                container(limits={"nvidia.com/gpu": 2}),
                annotations={"quotaguard.dev/tenant": "training"},
                owners=[{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}],
                schedulerName=scheduler,
            )
        )

    old, new = stamped("default-scheduler"), stamped("gang")
    judged = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert judged.rules == ("scheduler-not-allowed",)
    trusted = validate(
        policy, new, "training", operation="UPDATE", old_object=old, creator_trusted=True
    )
    assert trusted.allowed


def test_a_pod_of_a_job_made_by_the_job_controller_is_not_judged_for_its_queue(policy):
    """Pods of a Job carry no queue of their own (Kueue accounts the Job): believed only from
    the job controller; the same Pod from a tenant is stamped with the tenant's queue."""
    obj = pod(
        container(limits={"nvidia.com/gpu": 2}),
        annotations={"quotaguard.dev/tenant": "training"},
        owners=[{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}],
        schedulerName="default-scheduler",
    )
    obj["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "default"}
    answer, _ = offline(policy, obj, username="system:serviceaccount:kube-system:job-controller")
    assert answer["allowed"]
    answer, _ = offline(policy, obj, username="alice")
    assert answer["auditAnnotations"]["denied"] == "queue-not-allowed"
