"""More denials in full, each as the user reads it: a fractional GPU (a long value cut short),
a pod over the per-pod limit, a class the tenant does not allow (one class, several classes on
one resource, a tenant allowing none, a plain GPU with rewriting on), and a nodeSelector that
fights the class, named by task or not."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from quotaguard.admission import mutate, validate
from quotaguard.admission.names import GPU_CLASS_HINT
from quotaguard.policy.model import TenantPolicy

from .builders import container, gpu, pod, template, volcano_job
from .conftest import SAMPLE_POLICY

H100_PRODUCT = "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"


def sample() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SAMPLE_POLICY.read_text())
    return document["spec"]


@pytest.fixture(scope="module")
def two_classes_on_one_resource(make_policy: Any) -> TenantPolicy:
    """1g.10gb slices of H100s and of A100s: one resource, two classes told apart by node."""
    classes = copy.deepcopy(sample()["gpuClasses"])
    h100_slice = next(c for c in classes if c["name"] == "h100-1g.10gb")
    h100_slice["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    a100_slice = {**h100_slice, "name": "a100-1g.10gb"}
    a100_slice["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100"}
    policy: TenantPolicy = make_policy(gpuClasses=[*classes, a100_slice])
    return policy


@pytest.fixture(scope="module")
def training_allows_nothing(make_policy: Any) -> TenantPolicy:
    tenants = copy.deepcopy(sample()["tenants"])
    training = next(t for t in tenants if t["name"] == "training")
    training["allowedClasses"] = []
    training.pop("quota", None)
    training.pop("rewrite", None)
    policy: TenantPolicy = make_policy(tenants=tenants)
    return policy


def test_a_fractional_gpu_is_denied_with_the_value_it_asked_for(policy: TenantPolicy) -> None:
    decision = validate(policy, pod(gpu("1.5")), "training")
    assert decision.rules == ("gpu-value",)
    assert decision.message == (
        'tenant "training": container "main" asks for nvidia.com/gpu: "1.5" in limits; '
        "GPUs come in whole units: use a positive whole number such as 1"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("1." + "5" * 36, '"1.' + "5" * 36 + '"'),  # 40 characters as JSON: shown in full
        ("1." + "5" * 37, '"1.' + "5" * 34 + "..."),  # 41: cut to 37 and "..."
    ],
    ids=["40 characters", "41 characters"],
)
def test_a_long_fractional_value_is_quoted_up_to_40_characters(
    policy: TenantPolicy, value: str, shown: str
) -> None:
    decision = validate(policy, pod(gpu(value)), "training")
    assert decision.message == (
        f'tenant "training": container "main" asks for nvidia.com/gpu: {shown} in limits; '
        "GPUs come in whole units: use a positive whole number such as 1"
    )


def test_a_pod_over_the_limit_lists_the_whole_amounts_it_asks_for(policy: TenantPolicy) -> None:
    """A fractional amount is denied on its own and left out of the per-pod count and list."""
    asks = {"nvidia.com/mig-3g.40gb": "1.5", "nvidia.com/gpu": 9}
    decision = validate(policy, pod(container(limits=asks)), "training")
    assert decision.rules == ("gpu-value", "two-classes", "max-gpus-per-pod")
    assert decision.message.endswith(
        "(3) at most 8 GPU-equivalents per pod (maxGPUsPerPod); pod asks for 9 (main: "
        "nvidia.com/gpu: 9); request fewer GPUs or smaller classes, or use a namespace of a "
        "tenant that allows more"
    )


def test_a_pod_over_the_limit_through_an_init_container_says_how_they_count(
    policy: TenantPolicy,
) -> None:
    decision = validate(policy, pod(gpu(2), init=[gpu(9, name="warmup")]), "training")
    assert decision.message == (
        'tenant "training": at most 8 GPU-equivalents per pod (maxGPUsPerPod); pod asks for 9 '
        "(warmup: nvidia.com/gpu: 9, main: nvidia.com/gpu: 2; init containers count as the "
        "largest one); request fewer GPUs or smaller classes, or use a namespace of a tenant "
        "that allows more"
    )


def test_a_pod_of_slices_and_a_shared_gpu_is_counted_exactly(policy: TenantPolicy) -> None:
    """Sevenths and quarters: 7 slices of 1/7 and a quarter of a shared H100 are 1.25 GPUs."""
    slices = gpu(7, resource="nvidia.com/mig-1g.10gb")
    shared = gpu(1, resource="nvidia.com/gpu.shared", name="side")
    decision = validate(policy, pod(slices, shared), "notebooks")  # maxGPUsPerPod 1
    assert decision.message == (
        'tenant "notebooks": at most 1 GPU-equivalent per pod (maxGPUsPerPod); pod asks for 1.25 '
        "(main: nvidia.com/mig-1g.10gb: 7 = 1, side: nvidia.com/gpu.shared: 1 = 0.25); request "
        "fewer GPUs or smaller classes, or use a namespace of a tenant that allows more"
    )


def test_a_plain_gpu_a_tenant_does_not_allow_points_at_the_hints(policy: TenantPolicy) -> None:
    decision = validate(policy, pod(gpu(1)), "inference")
    assert decision.rules == ("class-not-allowed",)
    assert decision.message == (
        'tenant "inference": container "main" asks for class "h100" (nvidia.com/gpu), which the '
        "tenant does not allow (allowedClasses: h100-1g.10gb, h100-3g.40gb); set "
        "quotaguard.dev/gpu-class to an allowed class, or quotaguard.dev/gpu-memory so the "
        "tenant's rewrite rules can pick one"
    )


def test_a_resource_of_several_classes_names_them_all(
    two_classes_on_one_resource: TenantPolicy,
) -> None:
    obj = pod(gpu(1, resource="nvidia.com/mig-1g.10gb"))
    decision = validate(two_classes_on_one_resource, obj, "training")
    assert decision.message == (
        'tenant "training": container "main" asks for nvidia.com/mig-1g.10gb (classes '
        "h100-1g.10gb, a100-1g.10gb), which the tenant does not allow (allowedClasses: h100, "
        "h100-3g.40gb); ask for nvidia.com/gpu and let quotaguard pick a class, or use an "
        "allowed class"
    )


def test_a_tenant_allowing_no_class_says_none(training_allows_nothing: TenantPolicy) -> None:
    obj = pod(gpu(1, resource="nvidia.com/mig-3g.40gb"))
    decision = validate(training_allows_nothing, obj, "training")
    assert "which the tenant does not allow (allowedClasses: none); " in decision.message


def test_a_resource_no_class_offers_is_named_as_such(policy: TenantPolicy) -> None:
    decision = validate(policy, pod(gpu(1, resource="nvidia.com/mig-2g.20gb")), "training")
    assert decision.rules == ("class-not-allowed",)
    assert "asks for nvidia.com/mig-2g.20gb, which no GPU class of the policy offers" in (
        decision.message
    )


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        (pod(gpu(1), nodeSelector={"nvidia.com/gpu.product": "OTHER"}), ""),
        (
            volcano_job(
                ("worker", template(gpu(1), nodeSelector={"nvidia.com/gpu.product": "OTHER"}))
            ),
            " of worker",
        ),
    ],
    ids=["pod", "volcano task"],
)
def test_a_node_selector_against_the_class_is_denied_naming_the_task(
    policy: TenantPolicy, obj: dict[str, Any], where: str
) -> None:
    decision = mutate(policy, obj, "training")
    assert decision.rules == ("node-selector-conflict",)
    assert decision.message == (
        f'tenant "training": class "h100" runs on nodes with {H100_PRODUCT}, but the '
        f"nodeSelector{where} sets nvidia.com/gpu.product=OTHER; remove that nodeSelector key "
        "(quotaguard places the pod) or pick another class with quotaguard.dev/gpu-class"
    )


def test_an_empty_class_hint_counts_as_unset(policy: TenantPolicy) -> None:
    hinted = pod(gpu(1), annotations={GPU_CLASS_HINT: ""})
    assert validate(policy, hinted, "training").allowed
    unknown = validate(policy, pod(gpu(1), annotations={GPU_CLASS_HINT: "h200"}), "training")
    assert unknown.rules == ("class-not-allowed",)
    assert unknown.message == (
        'tenant "training": quotaguard.dev/gpu-class "h200" is not a GPU class of policy '
        '"gpu-platform" (classes: h100, h100-1g.10gb, h100-3g.40gb, shared); set it to one of '
        "h100, h100-3g.40gb or remove it"
    )


def test_a_class_hint_is_allowed_only_for_a_class_the_tenant_allows(policy: TenantPolicy) -> None:
    allowed = pod(gpu(1), annotations={GPU_CLASS_HINT: "h100"})
    assert validate(policy, allowed, "training").allowed
    other = validate(policy, pod(gpu(1), annotations={GPU_CLASS_HINT: "shared"}), "training")
    assert other.message == (
        'tenant "training": quotaguard.dev/gpu-class "shared" names a class the tenant does not '
        "allow (allowedClasses: h100, h100-3g.40gb); set it to one of those or remove it"
    )


def test_a_class_hint_on_a_task_names_the_task(policy: TenantPolicy) -> None:
    task = template(gpu(1), annotations={GPU_CLASS_HINT: "h200"})
    decision = validate(policy, volcano_job(("worker", task)), "training")
    assert 'quotaguard.dev/gpu-class "h200" on worker is not a GPU class' in decision.message


def test_a_pod_asking_exactly_the_per_pod_limit_is_allowed(policy: TenantPolicy) -> None:
    assert validate(policy, pod(gpu(8)), "training").allowed  # maxGPUsPerPod 8
    assert validate(policy, pod(gpu(9)), "training").rules == ("max-gpus-per-pod",)
