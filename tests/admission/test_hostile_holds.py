"""A tenant lifting Kueue's hold off its own GPU workload (a Pod's admission gate, a Job's or
JobSet's ... suspend), to run it before (or without) Kueue admitting it within the queue's
quota, is refused; Kueue lifting it is not, nor the owner's controller resuming what it
suspended.

Each test goes through the webhook's own answer (`answers.answer`, the sparse decoding
included), as the API server's UPDATE reaches /validate.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from quotaguard.admission.answers import answer
from quotaguard.admission.reviews import make_review
from quotaguard.kube.kinds import BY_ID, KINDS
from quotaguard.kube.names import KUEUE_ADMISSION_GATE, KUEUE_CONTROLLER

from .builders import container, gpu, of_kind, owner, pod, template

TENANT_USER = "alice@example.com"
GATED = [{"name": KUEUE_ADMISSION_GATE}]


def queued(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A GPU Pod as Kueue's webhook leaves it: queued and gated."""
    return pod(*containers, labels={"kueue.x-k8s.io/queue-name": "training"}, **spec)


def lifted(stored: dict[str, Any], gates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    found = copy.deepcopy(stored)
    if gates is None:
        del found["spec"]["schedulingGates"]
    else:
        found["spec"]["schedulingGates"] = gates
    return found


def validated(
    policy: Any,
    new: dict[str, Any],
    old: dict[str, Any],
    username: str = TENANT_USER,
    namespace: str = "training",
) -> dict[str, Any]:
    review = make_review(
        new, namespace=namespace, operation="UPDATE", old_object=old, username=username
    )
    found = answer(policy, json.dumps(review).encode(), "validate")
    assert found.status == 200
    response: dict[str, Any] = json.loads(found.body)["response"]
    return response


@pytest.mark.parametrize("gates", [None, [], [{"name": "example.com/other"}]])
def test_the_tenant_lifting_kueues_gate_is_refused(policy, gates):
    stored = queued(gpu(8), schedulingGates=GATED)
    response = validated(policy, lifted(stored, gates), stored)
    assert not response["allowed"]
    assert response["status"]["code"] == 403
    assert response["auditAnnotations"]["denied"] == "kueue-hold-lifted"
    message = response["status"]["message"]
    assert message.startswith('tenant "training": only Kueue removes the scheduling gate')
    assert "alice@example.com may not" in message
    assert "spec.kueueControllers" in message


def test_kueue_lifting_its_gate_at_admission_is_allowed(policy):
    stored = queued(gpu(8), schedulingGates=GATED)
    admitted = lifted(stored, [])
    admitted["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert validated(policy, admitted, stored, KUEUE_CONTROLLER)["allowed"]


def test_the_policy_names_who_lifts_the_gate(make_policy):
    moved = make_policy(kueueControllers=["system:serviceaccount:queues:kueue"])
    stored = queued(gpu(8), schedulingGates=GATED)
    assert validated(moved, lifted(stored), stored, "system:serviceaccount:queues:kueue")["allowed"]
    assert not validated(moved, lifted(stored), stored, KUEUE_CONTROLLER)["allowed"]
    trusting = make_policy(trustedControllers=["system:serviceaccount:ops:gitops"])
    assert validated(trusting, lifted(stored), stored, "system:serviceaccount:ops:gitops")[
        "allowed"
    ]


def test_a_pod_without_gpus_or_with_the_gate_kept_is_left_alone(policy):
    cpu = queued(container(limits={"cpu": "1"}), schedulingGates=GATED)
    assert validated(policy, lifted(cpu), cpu)["allowed"]
    stored = queued(gpu(8), schedulingGates=GATED)
    more_gates = lifted(stored, [*GATED, {"name": "example.com/other"}])
    assert validated(policy, more_gates, stored)["allowed"]
    never_gated = queued(gpu(8), schedulingGates=[{"name": "example.com/other"}])
    assert validated(policy, lifted(never_gated, []), never_gated)["allowed"]


def test_exempt_namespaces_and_the_volcano_backend_are_left_alone(policy, make_policy):
    stored = queued(gpu(8), schedulingGates=GATED)
    assert validated(policy, lifted(stored), stored, namespace="gpu-operator")["allowed"]
    volcano = make_policy(backend="volcano")
    assert validated(volcano, lifted(stored), stored)["allowed"]


def test_a_policy_must_name_someone_who_lifts_the_gate(make_policy):
    from quotaguard.policy.loader import PolicyInvalid

    with pytest.raises(PolicyInvalid, match="kueueControllers"):
        make_policy(kueueControllers=[])


SUSPENDING = [kind.id for kind in KINDS if kind.suspend is not None]


def with_suspend(obj: dict[str, Any], path: str, value: bool | None) -> dict[str, Any]:
    found = copy.deepcopy(obj)
    node = found
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return found


@pytest.mark.parametrize("kind_id", SUSPENDING)
@pytest.mark.parametrize("resumed", [False, None])
def test_the_tenant_resuming_what_kueue_suspended_is_refused(policy, kind_id, resumed):
    path = BY_ID[kind_id].suspend
    assert path is not None
    stored = with_suspend(of_kind(kind_id, template(gpu(8))), path, True)
    response = validated(policy, with_suspend(stored, path, resumed), stored)
    assert not response["allowed"], f"{kind_id} resumed by the tenant"
    assert response["auditAnnotations"]["denied"] == "kueue-hold-lifted"
    assert (
        f"only Kueue removes {path}: true from a GPU {BY_ID[kind_id].kind}"
        in (response["status"]["message"])
    )
    assert validated(policy, with_suspend(stored, path, resumed), stored, KUEUE_CONTROLLER)[
        "allowed"
    ]


def test_a_jobs_owner_resumes_it_and_the_tenant_may_not(policy):
    """The JobSet controller resumes the Jobs of a JobSet Kueue admitted."""
    jobset_controller = "system:serviceaccount:jobset-system:jobset-controller-manager"
    stored = with_suspend(of_kind("Job", template(gpu(8))), "spec.suspend", True)
    stored["metadata"]["ownerReferences"] = [owner("JobSet", "jobset.x-k8s.io/v1alpha2")]
    resumed = with_suspend(stored, "spec.suspend", False)
    assert validated(policy, resumed, stored, jobset_controller)["allowed"]
    assert not validated(policy, resumed, stored)["allowed"]


def test_a_suspend_kept_or_set_is_left_alone(policy):
    stored = of_kind("Job", template(gpu(8)))
    assert validated(policy, with_suspend(stored, "spec.suspend", True), stored)["allowed"]
    held = with_suspend(stored, "spec.suspend", True)
    relabelled = copy.deepcopy(held)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert validated(policy, relabelled, held)["allowed"]
    cpu = with_suspend(
        of_kind("Job", template(container(limits={"cpu": "1"}))), "spec.suspend", True
    )
    assert validated(policy, with_suspend(cpu, "spec.suspend", False), cpu)["allowed"]


def with_count(obj: dict[str, Any], pointer: str, count: int) -> dict[str, Any]:
    found = copy.deepcopy(obj)
    *parents, leaf = pointer.strip("/").split("/")
    node: Any = found
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[leaf] = count
    return found


WIDENED = [
    ("Job", "/spec/parallelism"),
    ("JobSet", "/spec/replicatedJobs/0/replicas"),
    ("JobSet", "/spec/replicatedJobs/0/template/spec/parallelism"),
    ("PyTorchJob", "/spec/pytorchReplicaSpecs/pytorchreplicaspecs-0/replicas"),
    ("RayCluster", "/spec/workerGroupSpecs/0/replicas"),
    ("TrainJob", "/spec/trainer/numNodes"),
]


@pytest.mark.parametrize(("kind_id", "pointer"), WIDENED)
def test_more_pods_of_a_running_workload_are_refused_to_the_tenant(policy, kind_id, pointer):
    """Raised while it runs, its controller starts the extra pods before Kueue suspends it."""
    templates = [template(gpu(1))] * (2 if kind_id == "RayCluster" else 1)  # head, then workers
    running = with_count(of_kind(kind_id, *templates), pointer, 1)
    widened = with_count(running, pointer, 6)
    response = validated(policy, widened, running)
    assert not response["allowed"], f"{kind_id} widened while running"
    assert response["auditAnnotations"]["denied"] == "kueue-hold-lifted"
    message = response["status"]["message"]
    assert f"a running {BY_ID[kind_id].kind} keeps the pods Kueue admitted ({pointer}: 1 -> 6" in (
        message
    )
    assert "create it anew with the new count" in message
    assert validated(policy, widened, running, KUEUE_CONTROLLER)["allowed"]


def test_a_suspended_workload_may_be_widened_and_a_running_one_narrowed(policy):
    running = with_count(of_kind("Job", template(gpu(1))), "/spec/parallelism", 4)
    assert validated(policy, with_count(running, "/spec/parallelism", 2), running)["allowed"]
    held = with_suspend(running, "spec.suspend", True)
    assert validated(policy, with_count(held, "/spec/parallelism", 8), held)["allowed"]
