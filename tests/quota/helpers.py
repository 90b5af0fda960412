"""Small policies and capacities written out by hand for worked examples."""

from __future__ import annotations

from typing import Any

from quotaguard.policy.model import TenantPolicy
from quotaguard.quota.capacity import ClassCapacity

H100 = {"name": "h100", "resource": "nvidia.com/gpu", "memory": "80Gi"}


def policy(tenants: list[dict[str, Any]], **rebalance: Any) -> TenantPolicy:
    for tenant in tenants:
        tenant.setdefault("namespaces", [tenant["name"]])
    return TenantPolicy.model_validate(
        {
            "apiVersion": "quotaguard.dev/v1alpha1",
            "kind": "TenantPolicy",
            "metadata": {"name": "example"},
            "spec": {"gpuClasses": [H100], "tenants": tenants, "rebalance": rebalance},
        }
    )


def h100(distributable: int) -> dict[str, ClassCapacity]:
    return {"h100": ClassCapacity("h100", "nvidia.com/gpu", distributable, 0, distributable)}
