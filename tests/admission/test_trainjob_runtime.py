"""A TrainJob whose GPUs come from its runtime (`spec.runtimeRef`): the tenant's queue is
stamped and the runtime's GPUs judged; a runtime admission cannot read is a denial."""

from __future__ import annotations

import json
from typing import Any

from quotaguard.admission import review, review_offline, validate
from quotaguard.admission.engine import decide
from quotaguard.admission.names import KUEUE_QUEUE_LABEL
from quotaguard.admission.reviews import make_review
from quotaguard.admission.sparse import decode_review_body
from quotaguard.kube.trainingruntime import TrainingRuntimes, runtimes_of
from quotaguard.policy.model import TenantPolicy

MIG_3G = "nvidia.com/mig-3g.40gb"


def runtime(gpus: int, kind: str = "ClusterTrainingRuntime", **metadata: str) -> dict[str, Any]:
    """A runtime shaped like Kubeflow Trainer's built-in torchtune ones."""
    node = {
        "name": "node",
        "image": "ghcr.io/kubeflow/trainer/torchtune-trainer",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": {"name": "torchtune-llama3.2-1b", **metadata},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "dataset-initializer",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {"containers": [{"name": "dataset-initializer"}]}
                                    }
                                }
                            },
                        },
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {"template": {"spec": {"containers": [node]}}},
                            },
                        },
                    ]
                }
            },
        },
    }


def trainjob(**trainer: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": "torchtune-llama3.2-1b"}}
    if trainer:
        spec["trainer"] = trainer
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tune"},
        "spec": spec,
    }


def offline(
    policy: TenantPolicy, obj: dict[str, Any], namespace: str, runtimes: TrainingRuntimes | None
) -> tuple[Any, Any]:
    response, stored = review_offline(policy, make_review(obj, namespace=namespace), runtimes)
    return response["response"], stored


def test_the_runtimes_gpus_are_rewritten_into_resources_per_node(policy: TenantPolicy) -> None:
    # training: whole H100s. The runtime's 2 GPUs become the TrainJob's own resourcesPerNode.
    response, stored = offline(policy, trainjob(), "training", runtimes_of([runtime(2)]))
    assert response["allowed"], response
    assert stored["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    assert stored["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 2}


def test_the_runtimes_gpus_become_the_tenants_class(policy: TenantPolicy) -> None:
    response, stored = offline(policy, trainjob(), "inference", runtimes_of([runtime(1)]))
    assert response["allowed"], response
    assert stored["spec"]["trainer"]["resourcesPerNode"]["limits"] == {MIG_3G: "1"}


def test_the_runtimes_gpus_are_judged(policy: TenantPolicy) -> None:
    # inference: at most 1 GPU-equivalent per pod; 2 GPUs become 2 3g slices (0.86)... 8 do not.
    response, _ = offline(policy, trainjob(), "inference", runtimes_of([runtime(8)]))
    assert not response["allowed"]
    assert "nvidia.com/gpu: 8 as nvidia.com/mig-3g.40gb" in response["status"]["message"]


def test_without_runtimes_the_runtime_is_not_read(policy: TenantPolicy) -> None:
    response, stored = offline(policy, trainjob(), "inference", None)
    assert response["allowed"]
    assert "trainer" not in stored["spec"]


def test_a_runtime_that_cannot_be_found_is_a_denial(policy: TenantPolicy) -> None:
    response, _ = offline(policy, trainjob(), "training", runtimes_of([]))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert 'runtime ClusterTrainingRuntime "torchtune-llama3.2-1b" cannot be read' in message


def test_runtimes_that_cannot_be_read_say_why(policy: TenantPolicy) -> None:
    runtimes = TrainingRuntimes(error="403 Forbidden listing clustertrainingruntimes")
    request = make_review(trainjob(), namespace="training")["request"]
    decision = decide(policy, request, operation_path="validate", runtimes=runtimes)
    assert decision.rules == ("runtime-unreadable",)
    assert "(403 Forbidden listing clustertrainingruntimes)" in decision.message


def test_a_namespaced_runtime_is_read_from_the_trainjobs_namespace(policy: TenantPolicy) -> None:
    obj = trainjob()
    obj["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    elsewhere = runtimes_of([runtime(2, "TrainingRuntime", namespace="research-x")])
    response, _ = offline(policy, obj, "training", elsewhere)
    assert not response["allowed"]
    here = runtimes_of([runtime(2, "TrainingRuntime", namespace="training")])
    response, _ = offline(policy, obj, "training", here)
    assert response["allowed"], response


def test_resources_per_node_of_the_trainjob_override_the_runtimes(policy: TenantPolicy) -> None:
    obj = trainjob(resourcesPerNode={"limits": {"nvidia.com/gpu": 1}})
    response, stored = offline(policy, obj, "inference", runtimes_of([runtime(8)]))
    assert response["allowed"], response
    assert stored["spec"]["trainer"]["resourcesPerNode"]["limits"] == {MIG_3G: "1"}


def test_a_cpu_runtime_adds_nothing(policy: TenantPolicy) -> None:
    cpu = runtime(0)
    cpu["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]["resources"] = {"limits": {"cpu": "4"}}
    response, stored = offline(policy, trainjob(), "inference", runtimes_of([cpu]))
    assert response["allowed"] and "patch" not in response
    assert stored == trainjob()


def test_outside_every_tenant_the_runtime_is_not_required(
    policy: TenantPolicy,
) -> None:
    assert validate(policy, trainjob(), "kube-system").allowed
    request = make_review(trainjob(), namespace="kube-system")["request"]
    assert decide(policy, request, operation_path="validate", runtimes=runtimes_of([])).allowed


def test_the_webhooks_sparse_decoding_keeps_the_runtime_ref(policy: TenantPolicy) -> None:
    """The webhook decodes only the fields admission reads: the runtimeRef is one of them."""
    body = json.dumps(make_review(trainjob(), namespace="inference")).encode()
    answer = review(
        policy, decode_review_body(body), operation_path="mutate", runtimes=runtimes_of([])
    )
    assert answer["response"]["auditAnnotations"]["denied"] == "runtime-unreadable"
    answer = review(
        policy,
        decode_review_body(body),
        operation_path="mutate",
        runtimes=runtimes_of([runtime(1)]),
    )
    assert answer["response"]["allowed"] and answer["response"]["patch"]
