"""The limit a reviewed request was counted against, for `review`'s summary.

`maxGPUsPerPod` counts GPU-equivalents, not devices: a MIG slice is its share of a GPU
(`3g.40gb` is 3/7), a shared unit one `replicas`-th of one. A pod of three 1g.10gb slices
passes a limit of 1; the summary says what the pod came to and, where a unit is not a whole
GPU, how it was counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from quotaguard.policy.model import TenantPolicy


def limit_lines(policy: TenantPolicy, review: Any, obj: Mapping[str, Any]) -> list[str]:
    """`  counted: ...` lines for an allowed object of a tenant with maxGPUsPerPod (a denial
    already says it), one per pod template that asks for GPUs."""
    from quotaguard.admission.classes import format_gpus, gpu_equivalent
    from quotaguard.kube.podspec import pod_gpus, pod_templates

    request = review.get("request") if isinstance(review, Mapping) else None
    namespace = request.get("namespace") if isinstance(request, Mapping) else None
    tenant = policy.tenant_of(namespace) if isinstance(namespace, str) else None
    if tenant is None or tenant.max_gpus_per_pod is None:
        return []
    limit = tenant.max_gpus_per_pod
    lines = []
    for template in pod_templates(obj):
        selector = template.spec.get("nodeSelector")
        selector = selector if isinstance(selector, Mapping) else {}
        reserved = pod_gpus(template.spec, policy.gpu_resources)
        if not reserved:
            continue
        worth = {r: gpu_equivalent(policy, tenant, r, selector) for r in reserved}
        total = sum((count * worth[r] for r, count in reserved.items()), Fraction(0))
        where = f"{template.name}: " if template.name else ""
        parts = ", ".join(
            f"{count} x {resource}"
            + (f" at {_fraction(worth[resource])}" if worth[resource] != 1 else "")
            for resource, count in reserved.items()
        )
        unit = "GPU-equivalent" if limit == 1 else "GPU-equivalents"
        lines.append(
            f"  counted: {where}{format_gpus(total)} of maxGPUsPerPod {limit:g} {unit} "
            f"(tenant {tenant.name}; {parts})"
        )
    return lines


def _fraction(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator} GPU each"
