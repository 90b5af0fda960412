"""SparkApplication (sparkoperator.k8s.io/v1beta2, a Kueue integration since v0.17): the GPUs
of each role — its `gpu` ({name, quantity}) for Spark's own container, its pod `template`,
its `sidecars` and `initContainers` — are rewritten and judged as one pod; the queue is
stamped; another tenant's queue is refused."""

from __future__ import annotations

import copy
from typing import Any

from quotaguard.admission import mutate, review_offline, validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL, TENANT_ANNOTATION
from quotaguard.admission.reviews import make_review
from quotaguard.policy.model import TenantPolicy

from .builders import applied, container, gpu

MIG_3G = "nvidia.com/mig-3g.40gb"


def spark(driver: dict[str, Any], executor: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "etl", "labels": dict(labels)},
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "image": "spark:3.5.1",
            "mainApplicationFile": "local:///opt/app.py",
            "driver": {"cores": 1, "memory": "1g", **driver},
            "executor": {"instances": 4, "cores": 2, **executor},
        },
    }


def offline(policy: TenantPolicy, obj: dict[str, Any], namespace: str) -> tuple[Any, Any]:
    response, stored = review_offline(policy, make_review(obj, namespace=namespace))
    return response["response"], stored


def test_the_roles_gpu_is_rewritten_and_the_queue_stamped(policy: TenantPolicy) -> None:
    obj = spark({}, {"gpu": {"name": "nvidia.com/gpu", "quantity": 1}})
    response, stored = offline(policy, obj, "inference")
    assert response["allowed"], response
    assert stored["spec"]["executor"]["gpu"] == {"name": MIG_3G, "quantity": 1}
    assert stored["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "inference"
    assert stored["spec"]["executor"]["annotations"][TENANT_ANNOTATION] == "inference"
    assert "gpu" not in stored["spec"]["driver"]
    assert mutate(policy, stored, "inference").patch == ()


def test_gpus_in_a_roles_template_and_sidecars_are_rewritten(policy: TenantPolicy) -> None:
    executor = {
        "template": {"spec": {"containers": [gpu(1, name="spark-kubernetes-executor")]}},
        "sidecars": [gpu(1, name="monitor")],
    }
    _, stored = offline(policy, spark({}, executor), "inference")
    role = stored["spec"]["executor"]
    assert role["template"]["spec"]["containers"][0]["resources"]["limits"] == {MIG_3G: "1"}
    assert role["sidecars"][0]["resources"]["limits"] == {MIG_3G: "1"}


def test_a_role_is_one_pod_for_max_gpus_per_pod(policy: TenantPolicy) -> None:
    # training: whole H100s, at most 8 per pod. 4 (gpu) + 4 (template) + 1 (sidecar) = 9.
    executor = {
        "gpu": {"name": "nvidia.com/gpu", "quantity": 4},
        "template": {"spec": {"containers": [gpu(4, name="main")]}},
        "sidecars": [gpu(1, name="monitor")],
    }
    decision = validate(policy, spark({}, executor), "training")
    assert decision.rules == ("max-gpus-per-pod",)
    assert "executor pod asks for 9" in decision.message


def test_a_gpu_in_a_roles_init_containers_counts(policy: TenantPolicy) -> None:
    driver = {"initContainers": [gpu(9, name="warmup")]}
    decision = validate(policy, spark(driver, {}), "training")
    assert "driver pod asks for 9" in decision.message


def test_another_tenants_queue_is_refused(policy: TenantPolicy) -> None:
    obj = spark(
        {"gpu": {"name": "nvidia.com/gpu", "quantity": 1}}, {}, **{KUEUE_QUEUE_LABEL: "training"}
    )
    response, _ = offline(policy, obj, "inference")
    assert not response["allowed"]
    assert 'queue "training"' in response["status"]["message"]
    assert 'belongs to tenant "training"' in response["status"]["message"]


def test_a_class_the_tenant_may_not_use_is_refused_naming_the_role(policy: TenantPolicy) -> None:
    obj = spark({"gpu": {"name": "nvidia.com/gpu.shared", "quantity": 1}}, {})
    decision = validate(policy, obj, "training")
    assert decision.rules == ("class-not-allowed",)
    assert 'container "driver/spark-kubernetes-driver"' in decision.message


def test_another_vendors_gpu_in_the_gpu_field_is_refused(policy: TenantPolicy) -> None:
    obj = spark({}, {"gpu": {"name": "amd.com/gpu", "quantity": 1}})
    assert validate(policy, obj, "training").rules == ("gpu-not-governed",)


def test_a_cpu_only_application_is_left_alone(policy: TenantPolicy) -> None:
    obj = spark({"sidecars": [container("log")]}, {})
    assert mutate(policy, obj, "inference").patch == ()
    assert validate(policy, obj, "inference").allowed


def test_a_reapplied_gpu_name_is_put_back(policy: TenantPolicy) -> None:
    """`kubectl apply` of the manifest again brings `gpu.name: nvidia.com/gpu` back."""
    asked = spark({}, {"gpu": {"name": "nvidia.com/gpu", "quantity": 1}})
    _, stored = offline(policy, asked, "inference")
    reapplied = copy.deepcopy(stored)
    reapplied["spec"]["executor"]["gpu"]["name"] = "nvidia.com/gpu"
    decision = mutate(policy, reapplied, "inference", operation="UPDATE", old_object=stored)
    restored = applied(reapplied, decision)
    assert restored["spec"]["executor"]["gpu"] == {"name": MIG_3G, "quantity": 1}
    assert validate(policy, restored, "inference", operation="UPDATE", old_object=stored).allowed
