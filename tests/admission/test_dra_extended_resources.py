"""`nvidia.com/gpu: N` rewritten to an extended resource a DRA DeviceClass serves, and such
requests judged as the claims the API server builds from them.

The webhook creates no object: the rewrite changes the container's resource name only, and a
container asking for `deviceclass.resource.kubernetes.io/<DeviceClass>` (or the name a
DeviceClass declares) is judged by every class of that DeviceClass.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.admission.engine import review_offline
from quotaguard.admission.reviews import make_review
from quotaguard.policy.loader import load_policy_documents
from quotaguard.policy.model import TenantPolicy
from tests.admission.builders import gpu, pod
from tests.policies import DRA_A100, DRA_H100, policy, policy_text

IMPLICIT = "deviceclass.resource.kubernetes.io/"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# H100s have a DeviceClass of their own (with the product in its selector), so the resource it
# serves gets only H100s; A100s and L40Ss share NVIDIA's; a MIG profile has one of its own.
H100 = {
    "name": "h100",
    "memory": "80Gi",
    "dra": {
        "deviceClassName": "h100.nvidia.com",
        "extendedResourceName": IMPLICIT + "h100.nvidia.com",
    },
}
L40S = {
    "name": "l40s",
    "memory": "48Gi",
    "dra": {
        "deviceClassName": "gpu.nvidia.com",
        "attributes": {"gpu.nvidia.com/productName": "NVIDIA L40S"},
    },
}
MIG_1G = {
    "name": "mig-1g",
    "memory": "10Gi",
    "slices": 1,
    "dra": {
        "deviceClassName": "mig-1g.nvidia.com",
        "extendedResourceName": "example.com/mig-1g-gpu",
    },
}
CLASSES = (H100, DRA_A100, L40S, MIG_1G)
TENANTS = [
    {
        "name": "research",
        "allowedClasses": ["mig-1g"],
        "maxGPUsPerPod": 1,
        "rewrite": [{"to": "mig-1g"}],
    },
    {"name": "training", "allowedClasses": ["h100", "a100", "l40s"], "maxGPUsPerPod": 2},
    {"name": "h100-only", "allowedClasses": ["h100"], "rewrite": [{"to": "h100"}]},
    {"name": "a100-only", "allowedClasses": ["a100"]},
]


def dra_policy(**spec: Any) -> TenantPolicy:
    return policy(TENANTS, classes=CLASSES, **spec)


def judged(
    obj: dict[str, Any], namespace: str, policy_: TenantPolicy | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    review, patched = review_offline(policy_ or dra_policy(), make_review(obj, namespace=namespace))
    return dict(review["response"]), patched


def denial(obj: dict[str, Any], namespace: str, policy_: TenantPolicy | None = None) -> str:
    response, _ = judged(obj, namespace, policy_)
    assert response["allowed"] is False, response
    text: str = response["status"]["message"]
    return text


def test_a_whole_gpu_is_rewritten_to_the_served_resource_and_nothing_else_changes() -> None:
    asked = pod(gpu(2))
    response, patched = judged(asked, "h100-only")
    assert response["allowed"] is True
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        IMPLICIT + "h100.nvidia.com": "2"
    }
    # no claim is made by the webhook: the API server builds it from the served resource
    assert "resourceClaims" not in patched["spec"]
    assert patched["metadata"]["labels"][KUEUE_LABEL] == "h100-only"
    changed = {op["path"] for op in jsonpatch.make_patch(asked, patched).patch}
    assert all(
        path.startswith(("/metadata/", "/spec/containers/0/resources/")) for path in changed
    ), changed


def test_a_rewrite_to_a_declared_extended_resource_name() -> None:
    response, patched = judged(pod(gpu(1)), "research")
    assert response["allowed"] is True
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "example.com/mig-1g-gpu": "1"
    }


def test_the_implicit_name_of_a_shared_device_class_may_get_every_class_of_it() -> None:
    # an A100-only tenant asking for any device of gpu.nvidia.com may get an L40S
    text = denial(pod(gpu(1, IMPLICIT + "gpu.nvidia.com")), "a100-only")
    assert text.startswith(
        'tenant "a100-only": container "main" asks for deviceclass.resource.kubernetes.io/'
        'gpu.nvidia.com: 1, served through DRA by DeviceClass "gpu.nvidia.com", which may get '
        'devices of class "l40s", which the tenant does not allow (allowedClasses: a100)'
    ), text
    response, _ = judged(pod(gpu(1, IMPLICIT + "gpu.nvidia.com")), "training")
    assert response["allowed"] is True


def test_a_served_resource_of_a_forbidden_class_is_refused() -> None:
    text = denial(pod(gpu(1, IMPLICIT + "gpu.nvidia.com")), "research")
    assert 'may get devices of class "a100", "l40s"' in text
    assert "ask for example.com/mig-1g-gpu or deviceclass.resource.kubernetes.io/mig-1g" in text


def test_served_resources_count_against_max_gpus_per_pod() -> None:
    text = denial(pod(gpu(3, IMPLICIT + "h100.nvidia.com")), "training")
    assert "at most 2 GPU-equivalents per pod (maxGPUsPerPod)" in text
    response, _ = judged(pod(gpu(2, IMPLICIT + "h100.nvidia.com")), "training")
    assert response["allowed"] is True


def test_a_served_resource_outside_every_tenant_follows_unmatched_namespaces() -> None:
    strict = dra_policy(unmatchedNamespaces="deny")
    text = denial(pod(gpu(1, "example.com/mig-1g-gpu")), "elsewhere", strict)
    assert text.startswith('namespace "elsewhere" belongs to no tenant'), text


def test_a_gpu_device_class_the_policy_does_not_name_is_not_governed() -> None:
    text = denial(pod(gpu(1, IMPLICIT + "mig.nvidia.com")), "training")
    assert "deviceclass.resource.kubernetes.io/mig.nvidia.com: 1" in text
    assert "an accelerator no GPU class" in text


def test_a_nic_device_class_served_implicitly_passes_as_no_gpu() -> None:
    response, patched = judged(pod(gpu(1, IMPLICIT + "sriov-nic.example.com")), "training")
    assert response["allowed"] is True
    assert KUEUE_LABEL not in patched["metadata"].get("labels", {})


def problems_of(classes: list[dict[str, Any]], tenants: list[dict[str, Any]]) -> list[str]:
    """What `quotaguard validate` says, each problem without its file:line:column."""
    (found,) = load_policy_documents(policy_text(tenants, classes=classes), "policy.yaml")
    return [str(p).split(": ", 1)[1] for p in found.problems]


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (
            IMPLICIT + "mig.nvidia.com",
            "spec.gpuClasses[0].dra.extendedResourceName: "
            "'deviceclass.resource.kubernetes.io/mig.nvidia.com' is the implicit extended "
            "resource of DeviceClass 'mig.nvidia.com', not of this class's 'gpu.nvidia.com'",
        ),
        ("example.com/h100", "pods asking for 'example.com/h100' alone are neither rewritten"),
    ],
)
def test_validate_locates_a_wrong_served_name(served: str, expected: str) -> None:
    gpu_class = {**DRA_H100, "dra": {**DRA_H100["dra"], "extendedResourceName": served}}
    found = problems_of([gpu_class], [{"name": "a"}])
    assert any(expected in p for p in found), found


def test_validate_refuses_two_names_for_one_device_class() -> None:
    h100 = {**DRA_H100, "dra": {**DRA_H100["dra"], "extendedResourceName": "example.com/gpu"}}
    a100 = {**DRA_A100, "dra": {**DRA_A100["dra"], "extendedResourceName": "example.com/xgpu"}}
    found = problems_of([h100, a100], [{"name": "a"}])
    assert any(
        p.startswith("spec.gpuClasses[1].dra.extendedResourceName: DeviceClass 'gpu.nvidia.com' ")
        for p in found
    ), found


def test_a_rewrite_target_needs_a_resource_or_a_served_one() -> None:
    tenants = [{"name": "a", "rewrite": [{"to": "h100"}]}]
    found = problems_of([DRA_H100], tenants)
    assert any(
        p.startswith("spec.tenants[0].rewrite[0].to: class 'h100' has no resource") for p in found
    ), found
    assert not [p for p in problems_of([H100], tenants) if "rewrite" in p]


def test_validate_warns_of_a_served_name_shared_by_several_classes() -> None:
    a100 = {**DRA_A100, "dra": {**DRA_A100["dra"], "extendedResourceName": "example.com/gpu"}}
    found = problems_of([a100, L40S], [{"name": "a"}])
    assert any(
        p.startswith(
            "warning: spec.gpuClasses[0].dra.extendedResourceName: a pod asking for "
            "'example.com/gpu' may get a device of any class of DeviceClass 'gpu.nvidia.com' "
            "(a100, l40s)"
        )
        for p in found
    ), found


SERVED = [IMPLICIT + "h100.nvidia.com", IMPLICIT + "gpu.nvidia.com", "example.com/mig-1g-gpu"]
NAMES = ["h100", "a100", "l40s", "mig-1g"]


@settings(max_examples=60, deadline=None)
@given(
    allowed=st.lists(st.sampled_from(NAMES), min_size=1, unique=True),
    resource=st.sampled_from(SERVED),
    count=st.integers(min_value=1, max_value=4),
)
def test_a_served_resource_is_allowed_exactly_when_every_class_of_its_device_class_is(
    allowed: list[str], resource: str, count: int
) -> None:
    chosen = policy([{"name": "t", "allowedClasses": allowed}], classes=CLASSES)
    response, patched = judged(pod(gpu(count, resource)), "t", chosen)
    reachable = {c.name for c in chosen.classes_by_resource[resource]}
    assert response["allowed"] is reachable.issubset(allowed), response
    if response["allowed"]:
        assert patched["metadata"]["labels"][KUEUE_LABEL] == "t"


def test_reapplying_the_manifest_keeps_the_served_resource_the_create_decided() -> None:
    """`kubectl apply` of the file again sends nvidia.com/gpu: 2 as an UPDATE: the rewrite to
    the served resource is put back, so the template does not change (no rollout)."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {
                "metadata": {"labels": {"app": "serve"}},
                "spec": {"containers": [gpu(2)]},
            },
        },
    }
    chosen = dra_policy()
    _, stored = review_offline(chosen, make_review(deployment, namespace="h100-only"))
    again = {**deployment, "metadata": stored["metadata"]}
    review, updated = review_offline(
        chosen,
        make_review(again, namespace="h100-only", operation="UPDATE", old_object=stored),
    )
    assert review["response"]["allowed"] is True
    served = {IMPLICIT + "h100.nvidia.com": "2"}
    assert updated["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == served
