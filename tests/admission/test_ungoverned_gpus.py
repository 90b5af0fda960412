"""Every GPU a tenant can ask for is counted and governed, or refused naming it: MIG profiles
with media extensions or graphics, HAMi's shares, KAI scheduler's share annotations, and other
vendors' accelerators. None passes as "no GPU"."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from quotaguard.admission import mutate, review_offline, validate
from quotaguard.admission.names import KUEUE_QUEUE_LABEL
from quotaguard.admission.reviews import make_review
from quotaguard.policy.model import TenantPolicy

from .builders import container, gpu, job, pod, template
from .conftest import SAMPLE_POLICY


def offline(policy: TenantPolicy, obj: dict[str, Any], namespace: str) -> tuple[Any, Any]:
    response, stored = review_offline(policy, make_review(obj, namespace=namespace))
    return response["response"], stored


MIG_FORMS = [
    "nvidia.com/mig-1g.10gb.me",  # +me as the device plugin advertises it
    "nvidia.com/mig-1g.10gb-me",
    "nvidia.com/mig-1g.10gb+me",
    "nvidia.com/mig-1g.10gb.gfx",
    "nvidia.com/mig-1g.10gb.me.all",
    "nvidia.com/mig-1g.10gb+me.all",
]


@pytest.mark.parametrize("resource", MIG_FORMS)
def test_a_mig_profile_with_an_extension_is_a_gpu_the_policy_judges(
    policy: TenantPolicy, resource: str
) -> None:
    decision = validate(policy, pod(gpu(1, resource=resource)), "inference")
    assert decision.rules == ("class-not-allowed",)
    assert f"asks for {resource}, which no GPU class of the policy offers" in decision.message


def test_mig_slices_with_media_extensions_count_toward_max_gpus_per_pod(
    policy: TenantPolicy,
) -> None:
    # inference: at most 1 GPU-equivalent per pod; 3 slices of 3g are 9/7.
    decision = validate(policy, pod(gpu(3, resource="nvidia.com/mig-3g.40gb.me")), "inference")
    assert "max-gpus-per-pod" in decision.rules
    assert "pod asks for 1.29" in decision.message


VENDORS = [
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "habana.ai/gaudi",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "google.com/tpu",
    "huawei.com/Ascend910",
    "cambricon.com/mlu",
]


@pytest.mark.parametrize("resource", VENDORS)
def test_another_vendors_accelerator_is_refused_naming_it(
    policy: TenantPolicy, resource: str
) -> None:
    obj = pod(gpu(1, resource=resource))
    assert mutate(policy, obj, "training").patch == ()
    response, stored = offline(policy, obj, "training")
    assert not response["allowed"]
    message = response["status"]["message"]
    assert f'container "main" asks for {resource}: 1, an accelerator no GPU class' in message
    assert "ask for nvidia.com/gpu" in message
    assert stored == obj


def test_an_accelerator_in_any_template_of_a_job_is_refused(policy: TenantPolicy) -> None:
    obj = job(template(container(limits={"cpu": "1"}), gpu(2, resource="amd.com/gpu", name="w")))
    decision = validate(policy, obj, "training")
    assert decision.rules == ("gpu-not-governed",)
    assert 'container "w" asks for amd.com/gpu: 2' in decision.message


def test_an_accelerator_in_requests_only_is_refused(policy: TenantPolicy) -> None:
    obj = pod(container(requests={"habana.ai/gaudi": "8"}))
    assert validate(policy, obj, "training").rules == ("gpu-not-governed",)


def test_extended_resources_that_are_no_accelerator_pass(policy: TenantPolicy) -> None:
    obj = pod(container(limits={"nvidia.com/cx6_sriov": 1, "rdma/hca": 1, "example.com/inputs": 2}))
    assert validate(policy, obj, "training").allowed


def test_zero_accelerators_ask_for_none(policy: TenantPolicy) -> None:
    assert validate(policy, pod(gpu(0, resource="amd.com/gpu")), "training").allowed


def test_a_policy_with_a_class_of_the_vendor_governs_it(
    make_policy: Callable[..., TenantPolicy],
) -> None:
    document = yaml.safe_load(SAMPLE_POLICY.read_text())["spec"]
    classes = [
        *document["gpuClasses"],
        {"name": "mi300x", "resource": "amd.com/gpu", "memory": "192Gi"},
    ]
    tenants = document["tenants"]
    training = next(t for t in tenants if t["name"] == "training")
    training["allowedClasses"] = [*training["allowedClasses"], "mi300x"]
    policy = make_policy(gpuClasses=classes, tenants=tenants)
    response, stored = offline(policy, pod(gpu(2, resource="amd.com/gpu")), "training")
    assert response["allowed"], response
    assert stored["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    response, _ = offline(policy, pod(gpu(9, resource="amd.com/gpu")), "training")
    assert "at most 8 GPU-equivalents per pod" in response["status"]["message"]


def test_outside_every_tenant_the_unmatched_namespace_rule_decides(
    policy: TenantPolicy, make_policy: Callable[..., TenantPolicy]
) -> None:
    obj = pod(gpu(1, resource="amd.com/gpu"))
    assert validate(policy, obj, "elsewhere").rules == ("unmatched-namespace",)
    assert validate(make_policy(unmatchedNamespaces="allow"), obj, "elsewhere").allowed


def test_hamis_memory_percentage_is_refused_too(policy: TenantPolicy) -> None:
    obj = pod(container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}))
    decision = validate(policy, obj, "training")
    assert decision.rules == ("gpu-not-governed",)
    assert "nvidia.com/gpumem-percentage: 50, HAMi's share of a GPU" in decision.message


KAI = {"gpu-fraction": "0.5"}


def test_kais_share_annotation_with_kais_scheduler_is_refused(policy: TenantPolicy) -> None:
    obj = pod(container(limits={"cpu": "1"}), annotations=KAI, schedulerName="kai-scheduler")
    response, _ = offline(policy, obj, "notebooks")
    assert not response["allowed"]
    message = response["status"]["message"]
    assert 'the pod annotations (gpu-fraction: "0.5") ask scheduler "kai-scheduler"' in message
    assert "scheduler-not-allowed" in validate(policy, obj, "notebooks").rules


def test_kais_memory_annotation_in_a_jobs_template_is_refused(policy: TenantPolicy) -> None:
    spec = template(
        container(limits={"cpu": "1"}),
        annotations={"gpu-memory": "2000"},
        schedulerName="kai-scheduler",
    )
    decision = validate(policy, job(spec), "training")
    assert "gpu-not-governed" in decision.rules
    assert "gpu-memory" in decision.message


def test_kais_annotations_ask_the_default_scheduler_for_nothing(policy: TenantPolicy) -> None:
    obj = pod(container(limits={"cpu": "1"}), annotations=KAI)
    assert validate(policy, obj, "training").allowed
    assert mutate(policy, obj, "training").patch == ()


def test_an_update_that_adds_an_accelerator_to_a_template_is_judged(
    policy: TenantPolicy,
) -> None:
    old = job(template(container(limits={"cpu": "1"})))
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] = 4
    decision = validate(policy, new, "training", operation="UPDATE", old_object=old)
    assert decision.rules == ("gpu-not-governed",)
