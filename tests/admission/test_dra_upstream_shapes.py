"""Manifests in the shapes of upstream DRA examples, each governed as a GPU workload.

tests/fixtures/dra/upstream/ holds manifests written in the shapes of NVIDIA's DRA driver demo
specs, Kueue's DRA samples and Volcano's DeviceClass-quota guide (v1 and v1beta1 requests,
`exactly`, `firstAvailable`, `count`, `allocationMode: All`, MIG by profile, sharing configs, a
shared ResourceClaim, a DeviceClass's extended resource). Every workload of every file is:
queued for the tenant of its namespace, counted in GPU-equivalents, and refused to a tenant
whose allowed classes it may break, with the claim (or container) named.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.admission.claims import pod_claim_gpus
from quotaguard.admission.classes import gpu_equivalent
from quotaguard.admission.engine import review_offline
from quotaguard.admission.reviews import make_review
from quotaguard.admission.workload import template_views
from quotaguard.kube.dra import dra_objects, is_dra_kind
from quotaguard.kube.podspec import pod_gpus
from quotaguard.policy.model import TenantPolicy
from tests.policies import policy

UPSTREAM = Path(__file__).parents[1] / "fixtures" / "dra" / "upstream"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WHOLE = "device.attributes['gpu.nvidia.com'].productName == "


def mig(profile: str, slices: int, memory: str) -> dict[str, Any]:
    return {
        "name": f"mig-{profile}",
        "memory": memory,
        "slices": slices,
        "dra": {
            "deviceClassName": "mig.nvidia.com",
            "attributes": {"gpu.nvidia.com/profile": profile},
        },
    }


CLASSES = [
    {
        "name": "h100",
        "memory": "80Gi",
        "dra": {
            "deviceClassName": "gpu.nvidia.com",
            "attributes": {"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3"},
            "maxDevicesPerNode": 8,
        },
    },
    {
        "name": "a100",
        "memory": "40Gi",
        "dra": {
            "deviceClassName": "gpu.nvidia.com",
            "selector": WHOLE + "'NVIDIA A100-SXM4-40GB'",
            "maxDevicesPerNode": 8,
        },
    },
    mig("1g.5gb", 1, "5Gi"),
    mig("2g.10gb", 2, "10Gi"),
    mig("3g.20gb", 3, "20Gi"),
    {
        "name": "mig-1g.12gb",
        "memory": "12Gi",
        "slices": 1,
        "dra": {
            "deviceClassName": "mig-1g-12gb.gpu.nvidia.com",
            "extendedResourceName": "nvidia.com/mig-1g.12gb",
        },
    },
    {"name": "example-a100", "memory": "40Gi", "dra": {"deviceClassName": "a100.example.com"}},
    {
        "name": "example-a100-slice",
        "memory": "5Gi",
        "slices": 1,
        "dra": {"deviceClassName": "a100-mig.example.com"},
    },
    {"name": "example-gpu", "memory": "24Gi", "dra": {"deviceClassName": "gpu.example.com"}},
]
MIG_CLASSES = ["mig-1g.5gb", "mig-2g.10gb", "mig-3g.20gb", "mig-1g.12gb", "example-a100-slice"]
WHOLE_CLASSES = ["h100", "a100", "example-a100", "example-gpu"]
TENANTS = [
    {"name": "gpu-team"},
    {"name": "mig-team", "allowedClasses": MIG_CLASSES},
    {"name": "whole-team", "allowedClasses": WHOLE_CLASSES},
]


def upstream_policy(backend: str) -> TenantPolicy:
    return policy(TENANTS, classes=CLASSES, backend=backend, unmatchedNamespaces="deny")


@dataclass(frozen=True)
class Shape:
    """One upstream file: what each pod of its workloads is worth, which tenant it is
    refused to, and what the refusal names."""

    file: str
    worth: Fraction
    refused_to: str
    named: str
    backend: str = "kueue"


SHAPES = [
    Shape(
        "nvidia-gpu-test1.yaml",
        Fraction(1),
        "mig-team",
        'claim "gpu" (ResourceClaimTemplate "one-gpu")',
    ),
    Shape(
        "nvidia-gpu-test2-v1beta1.yaml",
        Fraction(1),
        "mig-team",
        'claim "shared-gpu" (ResourceClaimTemplate "one-gpu-beta")',
    ),
    Shape(
        "nvidia-gpu-test3-shared-claim.yaml",
        Fraction(1),
        "mig-team",
        'claim "shared-gpu" (ResourceClaim "one-shared-gpu")',
    ),
    Shape(
        "nvidia-gpu-test4-mig.yaml",
        Fraction(1),
        "whole-team",
        'claim "mig-set" (ResourceClaimTemplate "mig-set") request "small-a"',
    ),
    Shape(
        "nvidia-gpu-test5-sharing.yaml",
        Fraction(2),
        "mig-team",
        'claim "gpus" (ResourceClaimTemplate "sharing-gpus") request "sliced"',
    ),
    Shape(
        "nvidia-gpu-test6-cel.yaml",
        Fraction(1),
        "mig-team",
        'claim "a100" (ResourceClaimTemplate "even-a100")',
    ),
    Shape(
        "nvidia-gpu-test8-v1beta1-count.yaml",
        Fraction(2),
        "mig-team",
        'claim "twogpus" (ResourceClaimTemplate "two-gpus")',
    ),
    Shape(
        "nvidia-all-devices.yaml",
        Fraction(8),
        "mig-team",
        'claim "gpus" (ResourceClaimTemplate "whole-node")',
    ),
    Shape(
        "nvidia-extended-resource-mig.yaml",
        Fraction(1, 7),
        "whole-team",
        'container "cuda" asks for nvidia.com/mig-1g.12gb: 1, served through DRA by DeviceClass '
        '"mig-1g-12gb.gpu.nvidia.com"',
    ),
    Shape(
        "kueue-gpu-job.yaml",
        Fraction(1),
        "mig-team",
        'claim "gpu" (ResourceClaimTemplate "gpu-claim")',
    ),
    Shape(
        "kueue-firstavailable-job.yaml",
        Fraction(1),
        "mig-team",
        'claim "gpu" (ResourceClaimTemplate "a100-or-slice") request "gpu/whole"',
    ),
    Shape(
        "kueue-counter-job.yaml",
        Fraction(1),
        "mig-team",
        'claim "gpu" (ResourceClaimTemplate "partition")',
    ),
    Shape(
        "volcano-template-job.yaml",
        Fraction(2),
        "mig-team",
        'claim "gpu" (ResourceClaimTemplate "gpu-pair")',
        "volcano",
    ),
    Shape(
        "volcano-shared-claim.yaml",
        Fraction(2),
        "mig-team",
        'claim "gpu" (ResourceClaim "shared-pair")',
        "volcano",
    ),
]


def documents(file: str, namespace: str, queue: str | None = None) -> list[dict[str, Any]]:
    """The file's objects, placed in `namespace` and naming `queue` (its tenant's)."""
    text = (UPSTREAM / file).read_text().replace("NAMESPACE", namespace)
    text = text.replace("QUEUE", queue or namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def lookup(file: str, namespace: str) -> Any:
    classes = yaml.safe_load_all((UPSTREAM / "deviceclasses.yaml").read_text())
    return dra_objects([*classes, *(d for d in documents(file, namespace) if is_dra_kind(d))])


def workloads(file: str, namespace: str) -> list[dict[str, Any]]:
    return [d for d in documents(file, namespace) if not is_dra_kind(d)]


def judged(shape: Shape, namespace: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    found = []
    for obj in workloads(shape.file, namespace):
        review, patched = review_offline(
            upstream_policy(shape.backend),
            make_review(obj, namespace=namespace),
            dra=lookup(shape.file, namespace),
        )
        found.append((dict(review["response"]), patched))
    return found


def queue_of(patched: dict[str, Any], backend: str) -> Any:
    if backend == "volcano":
        return patched["spec"]["queue"]
    return patched["metadata"]["labels"][KUEUE_LABEL]


IDS = [s.file.removesuffix(".yaml") for s in SHAPES]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_an_upstream_shape_is_queued_for_its_tenant(shape: Shape) -> None:
    answers = judged(shape, "gpu-team")
    assert answers
    for response, patched in answers:
        assert response["allowed"] is True, response
        assert queue_of(patched, shape.backend) == "gpu-team"
        assert patched["metadata"]["annotations"]["quotaguard.dev/tenant"] == "gpu-team"


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_an_upstream_shape_is_counted_in_gpu_equivalents(shape: Shape) -> None:
    chosen = upstream_policy(shape.backend)
    tenant = chosen.tenant_of("gpu-team")
    for obj in workloads(shape.file, "gpu-team"):
        for view in template_views(obj, chosen.gpu_resources):
            claims = pod_claim_gpus(chosen, view.spec, "gpu-team", lookup(shape.file, "gpu-team"))
            assert not claims.unresolved, claims.unresolved
            extended = sum(
                (
                    count * gpu_equivalent(chosen, tenant, resource, view.node_selector)
                    for resource, count in pod_gpus(view.spec, chosen.gpu_resources).items()
                ),
                Fraction(0),
            )
            assert claims.worth + extended == shape.worth


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_an_upstream_shape_is_refused_to_a_tenant_that_may_not_use_its_class(shape: Shape) -> None:
    for response, _ in judged(shape, shape.refused_to):
        assert response["allowed"] is False, response
        message = response["status"]["message"]
        assert message.startswith(f'tenant "{shape.refused_to}": '), message
        assert shape.named in message, message
        assert "allowedClasses" in message


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_an_upstream_shape_is_refused_outside_every_tenant(shape: Shape) -> None:
    for response, _ in judged(shape, "scratch"):
        assert response["allowed"] is False, response
        assert 'namespace "scratch" belongs to no tenant' in response["status"]["message"]


def test_the_v1beta1_request_form_is_read_as_v1_exactly() -> None:
    beta = lookup("nvidia-gpu-test8-v1beta1-count.yaml", "gpu-team").template(
        "gpu-team", "two-gpus"
    )
    (request,) = beta.requests
    (choice,) = request.choices
    assert (choice.device_class, choice.count, beta.problems) == ("gpu.nvidia.com", 2, ())


@pytest.mark.parametrize(
    ("file", "backend", "queue"),
    [
        ("kueue-gpu-job.yaml", "kueue", "mig-team"),  # another tenant's
        ("kueue-gpu-job.yaml", "kueue", "gpu-queue"),  # the sample's own, no tenant's
        ("volcano-template-job.yaml", "volcano", "mig-team"),
    ],
)
def test_a_queue_not_the_tenants_named_by_an_upstream_shape_is_refused(
    file: str, backend: str, queue: str
) -> None:
    (obj,) = [d for d in documents(file, "gpu-team", queue=queue) if not is_dra_kind(d)]
    review, _ = review_offline(
        upstream_policy(backend),
        make_review(obj, namespace="gpu-team"),
        dra=lookup(file, "gpu-team"),
    )
    assert review["response"]["allowed"] is False
    message = review["response"]["status"]["message"]
    assert f'queue "{queue}"' in message and 'set it to "gpu-team"' in message, message


def test_a_claim_in_the_retired_v1alpha2_form_is_refused_not_passed_as_no_gpu() -> None:
    shape = Shape("nvidia-v1alpha2-parameters.yaml", Fraction(0), "gpu-team", "")
    ((response, _),) = judged(shape, "gpu-team")
    assert response["allowed"] is False
    assert (
        'claim "gpu" (ResourceClaimTemplate "inference-gpu"): it is written in the '
        "resource.k8s.io/v1alpha2 form (resourceClassName, parametersRef), which Kubernetes no "
        "longer serves"
    ) in response["status"]["message"]
