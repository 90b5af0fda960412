"""Which GPU class a resource of a pod counts as, and what it is worth in whole GPUs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from quotaguard.kube.podspec import PLAIN_GPU
from quotaguard.policy.dra_classes import served_classes
from quotaguard.policy.fungibility import compatible, fungible_resources
from quotaguard.policy.model import WHOLE_GPU_SLICES, GpuClass, Tenant, TenantPolicy

_MIG_SLICES = re.compile(r"^nvidia\.com/mig-(\d)g\.")


def allowed_classes(policy: TenantPolicy, tenant: Tenant | None, resource: str) -> list[GpuClass]:
    """The classes of `resource` the tenant may use (all of them outside any tenant)."""
    candidates = policy.classes_by_resource.get(resource, [])
    if tenant is None or tenant.allowed_classes is None:
        return candidates
    return [c for c in candidates if c.name in tenant.allowed_classes]


def resolve_class(
    policy: TenantPolicy,
    tenant: Tenant | None,
    resource: str,
    node_selector: Mapping[str, Any],
) -> GpuClass | None:
    """The allowed class of `resource` whose nodeSelector the pod already matches, else the
    first allowed one (several whole-GPU products may share `nvidia.com/gpu`)."""
    candidates = allowed_classes(policy, tenant, resource)
    for gpu_class in candidates:
        if all(node_selector.get(k) == v for k, v in gpu_class.node_selector.items()):
            return gpu_class
    return candidates[0] if candidates else None


def left_to_kueue(
    policy: TenantPolicy, tenant: Tenant, resource: str, node_selector: Mapping[str, Any]
) -> bool:
    """Whether the class of a `resource` request is Kueue's to pick: a resource the tenant's
    lists (`to: [h100, a100]`) name, on a pod whose nodeSelector pins none of its classes."""
    if resource not in fungible_resources(policy, tenant):
        return False
    return not any(
        all(node_selector.get(k) == v for k, v in c.node_selector.items())
        for c in allowed_classes(policy, tenant, resource)
    )


def gpu_equivalent(
    policy: TenantPolicy,
    tenant: Tenant | None,
    resource: str,
    node_selector: Mapping[str, Any],
) -> Fraction:
    """Whole GPUs one unit of `resource` is worth; a resource outside the policy is judged by
    its name (MIG `Ng` is N/7 of a GPU, anything else a whole GPU). A request Kueue may put
    on any of several classes (a list's), or a DeviceClass serves through DRA, is worth the
    most of them."""
    served = served_classes(policy, resource)
    if served:
        return max(c.gpu_equivalent for c in served)
    if tenant is not None and left_to_kueue(policy, tenant, resource, node_selector):
        candidates = [
            c for c in allowed_classes(policy, tenant, resource) if compatible(c, node_selector)
        ]
        if candidates:
            return max(c.gpu_equivalent for c in candidates)
    gpu_class = resolve_class(policy, tenant, resource, node_selector) or resolve_class(
        policy, None, resource, node_selector
    )
    if gpu_class is not None:
        return gpu_class.gpu_equivalent
    match = _MIG_SLICES.match(resource)
    if match is not None and resource != PLAIN_GPU:
        return Fraction(int(match.group(1)), WHOLE_GPU_SLICES)
    return Fraction(1)


def format_gpus(amount: Fraction | float) -> str:
    """`2`, `0.43`, `1.5`: whole-GPU equivalents as a person reads them."""
    if isinstance(amount, Fraction) and amount.denominator == 1:
        return str(amount.numerator)
    return f"{float(amount):.2f}".rstrip("0").rstrip(".")
